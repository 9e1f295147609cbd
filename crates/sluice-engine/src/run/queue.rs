//! The units of a load not taken yet, shared by its streams, and which one a stream takes
//! next.
//!
//! The queue is in the strategy's order, biggest work first, which ends the streams together.
//! But two streams writing into one table can contend inside the server for the table's last
//! pages: on one destination, two sessions loading TPC-H `lineitem` took 0.82 of the time one
//! took alone, while a peer that gives each thread a table of its own loaded the other seven
//! tables beside it in about 8 s (BENCHMARKS.md). So where the destination says a table's
//! writers contend
//! ([`Destination::writers_contend`](sluice_core::destination::Destination::writers_contend)),
//! a stream takes the first unit whose contended tables no stream is loading now, and the
//! first unit only when there is none. Staged and route units write into a table of their
//! own, or none, and never wait for one.
//!
//! The queue counts, for each table, its queued units and the streams loading it, so that a
//! take that cannot find such a unit knows it without walking the queue (100,000 small files
//! into one table, which another stream is always loading: each take is one step).

use crate::plan::Plan;
use crate::strategy::Unit;
use std::collections::VecDeque;

/// The units not taken yet, and who loads which table.
pub(crate) struct Queue {
    units: VecDeque<Unit>,
    /// Each chunk's table.
    chunk_table: Vec<usize>,
    /// For each table, whether its writers contend.
    contended: Vec<bool>,
    /// For each table, the streams loading a direct unit of it now.
    loading: Vec<u32>,
    /// For each contended table, the queued units that write into it.
    queued: Vec<u32>,
    /// Queued units that write into no contended table.
    free: usize,
}

impl Queue {
    /// `units` in the order streams take them, for `plan`, whose table `t`'s writers contend
    /// where `contended[t]`.
    pub(crate) fn new(units: Vec<Unit>, plan: &Plan, contended: Vec<bool>) -> Queue {
        let chunk_table = plan
            .chunks
            .iter()
            .map(|c| plan.inputs[c.input].table)
            .collect();
        Queue::of(units, chunk_table, contended)
    }

    fn of(units: Vec<Unit>, chunk_table: Vec<usize>, contended: Vec<bool>) -> Queue {
        let tables = contended.len();
        let mut q = Queue {
            units: VecDeque::new(),
            chunk_table,
            contended,
            loading: vec![0; tables],
            queued: vec![0; tables],
            free: 0,
        };
        q.push_front(units);
        q
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Puts units back at the head of the queue, in their order.
    pub(crate) fn push_front(&mut self, units: Vec<Unit>) {
        for u in units.into_iter().rev() {
            let tables = self.tables_of(&u);
            self.count(&tables, true);
            self.units.push_front(u);
        }
    }

    /// The next unit for a stream, with the contended tables it marks as loading until
    /// [`Queue::done_with`].
    pub(crate) fn take(&mut self) -> Option<(Unit, Vec<usize>)> {
        let next = self.pick()?;
        self.take_at(next)
    }

    /// The unit [`Queue::take`] would give a stream that lets `held` go, if `fits` says the
    /// stream can go on with it in the load it has open: the stream then holds what comes back
    /// instead of `held`. Otherwise nothing changes, and the stream still holds `held`.
    pub(crate) fn take_next_if(
        &mut self,
        held: &[usize],
        fits: impl Fn(&Unit) -> bool,
    ) -> Option<(Unit, Vec<usize>)> {
        self.done_with(held);
        match self.pick().filter(|&i| fits(&self.units[i])) {
            Some(i) => self.take_at(i),
            None => {
                for &t in held {
                    self.loading[t] += 1;
                }
                None
            }
        }
    }

    /// Where the unit a stream takes next is: the first apart from the loading tables where
    /// one may be, else the first.
    fn pick(&self) -> Option<usize> {
        if self.units.is_empty() {
            return None;
        }
        Some(match self.one_is_apart() {
            true => self
                .units
                .iter()
                .position(|u| !self.writes_a_loading_table(u))
                .unwrap_or(0),
            false => 0,
        })
    }

    fn take_at(&mut self, i: usize) -> Option<(Unit, Vec<usize>)> {
        let unit = self.units.remove(i)?;
        let tables = self.tables_of(&unit);
        self.count(&tables, false);
        for &t in &tables {
            self.loading[t] += 1;
        }
        Some((unit, tables))
    }

    /// A stream no longer loads `tables` (what [`Queue::take`] returned with its unit).
    pub(crate) fn done_with(&mut self, tables: &[usize]) {
        for &t in tables {
            self.loading[t] -= 1;
        }
    }

    /// Whether some queued unit may be apart: one of no contended table, or one of a contended
    /// table no stream loads (a unit of several tables may still write into a loading one).
    fn one_is_apart(&self) -> bool {
        self.free > 0
            || (0..self.contended.len()).any(|t| self.queued[t] > 0 && self.loading[t] == 0)
    }

    fn writes_a_loading_table(&self, unit: &Unit) -> bool {
        Self::direct(unit)
            && unit.chunks.iter().any(|&c| {
                let t = self.chunk_table[c];
                self.contended[t] && self.loading[t] > 0
            })
    }

    /// The contended tables a unit writes into, each once.
    fn tables_of(&self, unit: &Unit) -> Vec<usize> {
        if !Self::direct(unit) {
            return Vec::new();
        }
        let mut tables: Vec<usize> = unit
            .chunks
            .iter()
            .map(|&c| self.chunk_table[c])
            .filter(|&t| self.contended[t])
            .collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    /// Staged and route units write into a table of their own, or none.
    fn direct(unit: &Unit) -> bool {
        unit.staged.is_none() && !unit.route
    }

    /// Counts a unit of contended tables `tables` ([`Queue::tables_of`]) as queued (`add`) or
    /// taken.
    fn count(&mut self, tables: &[usize], add: bool) {
        if tables.is_empty() {
            match add {
                true => self.free += 1,
                false => self.free -= 1,
            }
        }
        for &t in tables {
            match add {
                true => self.queued[t] += 1,
                false => self.queued[t] -= 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(chunks: &[usize]) -> Unit {
        Unit {
            chunks: chunks.to_vec(),
            staged: None,
            route: false,
        }
    }

    /// Chunk `c` is of table `c / 10`; tables 0 to 2.
    fn queue(units: Vec<Unit>, contended: [bool; 3]) -> Queue {
        Queue::of(units, (0..30).map(|c| c / 10).collect(), contended.to_vec())
    }

    fn first_chunks(q: &mut Queue, takes: usize) -> Vec<usize> {
        (0..takes).map(|_| q.take().unwrap().0.chunks[0]).collect()
    }

    #[test]
    fn a_stream_takes_a_contended_table_no_other_stream_loads() {
        let units = vec![direct(&[0]), direct(&[1]), direct(&[10]), direct(&[20])];
        let mut q = queue(units, [true; 3]);
        // Nothing loading: the biggest work, first; then another table's, twice.
        assert_eq!(first_chunks(&mut q, 3), vec![0, 10, 20]);
        // Every table loading: the first unit.
        assert_eq!(first_chunks(&mut q, 1), vec![1]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_table_done_with_is_taken_again() {
        let units = vec![direct(&[0]), direct(&[1]), direct(&[10])];
        let mut q = queue(units, [true; 3]);
        let (_, tables) = q.take().unwrap();
        assert_eq!(tables, vec![0]);
        q.done_with(&tables);
        assert_eq!(first_chunks(&mut q, 2), vec![1, 10]);
    }

    #[test]
    fn tables_whose_writers_do_not_contend_keep_the_order() {
        let units = vec![direct(&[0]), direct(&[1]), direct(&[10])];
        let mut q = queue(units, [false; 3]);
        assert_eq!(first_chunks(&mut q, 3), vec![0, 1, 10]);
    }

    #[test]
    fn a_unit_of_several_tables_is_apart_only_when_none_of_them_is_loading() {
        let units = vec![direct(&[5]), direct(&[0, 10]), direct(&[20])];
        let mut q = queue(units, [true; 3]);
        assert_eq!(first_chunks(&mut q, 2), vec![5, 20]);
        // Tables 0 and 2 loading: the tied unit is the only one left.
        assert_eq!(first_chunks(&mut q, 1), vec![0]);
    }

    #[test]
    fn staged_and_route_units_never_wait_for_a_table() {
        let staged = Unit {
            chunks: vec![1],
            staged: Some(3),
            route: false,
        };
        let units = vec![direct(&[0]), direct(&[2]), staged];
        let mut q = queue(units, [true; 3]);
        assert_eq!(first_chunks(&mut q, 2), vec![0, 1]);
    }

    #[test]
    fn units_put_back_are_counted_again() {
        let units = vec![direct(&[0]), direct(&[10])];
        let mut q = queue(units, [true; 3]);
        let (unit, tables) = q.take().unwrap();
        q.done_with(&tables);
        q.push_front(vec![unit]);
        assert_eq!(first_chunks(&mut q, 2), vec![0, 10]);
        assert!(q.is_empty());
        assert!(!q.one_is_apart());
    }

    #[test]
    fn a_stream_goes_on_with_the_unit_it_would_take_next_or_with_none() {
        let units = vec![direct(&[0]), direct(&[1]), direct(&[10]), direct(&[2])];
        let mut q = queue(units, [true; 3]);
        let (_, held) = q.take().unwrap();
        assert_eq!(held, vec![0]);
        // Another stream takes table 1; letting table 0 go, this one would take chunk 1 next.
        let (_, other) = q.take().unwrap();
        assert_eq!(other, vec![1]);
        let same_table = |u: &Unit| u.chunks.iter().all(|&c| c / 10 == 0);
        let (unit, now) = q.take_next_if(&held, same_table).unwrap();
        assert_eq!((unit.chunks, now.clone()), (vec![1], vec![0]));
        // The unit it would take next (chunk 2, table 0) does not fit: the stream keeps what
        // it holds, the queue its unit.
        let of_table_2 = |u: &Unit| u.chunks.iter().all(|&c| c / 10 == 2);
        assert!(q.take_next_if(&now, of_table_2).is_none());
        assert_eq!(q.loading, vec![1, 1, 0]);
        q.done_with(&now);
        q.done_with(&other);
        assert_eq!(first_chunks(&mut q, 1), vec![2]);
        assert!(q.take_next_if(&[], |_| true).is_none());
    }
}
