//! One stream of a load: a thread that takes units of work from the shared queue and loads
//! them, until the queue is empty or the load stops.
//!
//! A stream holds up to two connections: its long transaction for direct units (committed
//! at the end, with every other stream's) and, opened when a staged unit first comes, one whose
//! transactions each fill one staging table. A lost connection puts back on the queue what its
//! transaction held and connects anew after a pause; a staged unit the strategy can redo
//! another way goes back on the queue as the strategy's new units. Every other failure stops
//! the whole load (the first one is the one reported).
//!
//! Rows routed on the client ([`crate::route`]) take two kinds of unit: a route unit converts
//! its chunks into the partitions' spills on no connection; a spilled unit waits until every
//! chunk is routed, then loads its partition's spill into a staging table like any staged
//! unit (and goes back on the queue whole when its connection is lost).

use super::copy::{copy_shared, copy_spill, route_chunk, run_chunk, ChunkError};
use super::diagnose::server_failure;
use super::{lock, ChunkStat, RunContext, StreamStats};
use crate::chunk::{ChunkOutcome, Counters};
use crate::events::Event;
use crate::failure::{Failure, ServerKind};
use crate::plan::Chunk;
use crate::strategy::{self, Unit};
use sluice_core::destination::{
    Destination, DestinationError, DestinationStream, ErrorKind, RecordEncoder,
};
use sluice_core::ledger::{ChunkRecord, Claim};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A stream's lost connections: what each takes with it, and how many more it may survive.
struct LostConnections {
    stream: usize,
    retries: u32,
    retries_left: u32,
    /// Chunks loaded on the current direct connection: its transaction holds them.
    on_direct: Vec<usize>,
}

/// How a unit ended on a stream.
enum UnitEnd {
    /// Loaded (or handed back to the queue: requeued for a redo, or for a retry after a lost
    /// connection); the stream takes the next unit.
    Next,
    /// The load stops: the failure is recorded, or another stream's already is.
    Stop,
}

/// How the stream's build step (deferred checks) ended.
enum BuildEnd {
    Done,
    /// Its connection was lost and its work is back on the queue: load again.
    Again,
}

impl LostConnections {
    /// Connection `id` was lost while running `unit`: puts back on the queue what its
    /// transaction held (the unit, and for the direct connection every chunk it loaded), takes
    /// those chunks out of the stream's tallies, and waits before the stream connects anew.
    /// `false` when no retry is left or the load is stopping.
    fn retry<D: Destination>(
        &mut self,
        ctx: &RunContext<'_, D>,
        stats: &mut StreamStats,
        unit: &Unit,
        id: usize,
        e: &DestinationError,
    ) -> bool {
        if self.retries_left == 0 || ctx.abort.load(Ordering::Relaxed) {
            return false;
        }
        self.retries_left -= 1;
        let attempt = self.retries - self.retries_left;
        let mut back: Vec<Unit> = Vec::new();
        let mut chunks: Vec<usize> = Vec::new();
        if id == self.stream {
            chunks.append(&mut self.on_direct);
            back.extend(strategy::direct_units(ctx.plan, chunks.iter().copied()));
        }
        if !unit.chunks.is_empty() || unit.staged.is_some() {
            chunks.extend(&unit.chunks);
            back.push(unit.clone());
        }
        stats.chunks.retain(|c| {
            let keep = !chunks.contains(&c.chunk);
            if !keep {
                untally(&ctx.counters[c.table_index], c);
            }
            keep
        });
        lock(&ctx.taken)[id].retain(|c| !chunks.contains(c));
        ctx.push_front(back);
        let wait = ctx.opts.retry_pause * (1 << (attempt - 1).min(4));
        ctx.host.event(Event::Warning(format!(
            "stream {} {} ({e}); its {} uncommitted chunk(s) go back on the queue, and it \
             reconnects in {:.0} s (retry {attempt} of {})",
            self.stream + 1,
            what_happened(e),
            chunks.len(),
            wait.as_secs_f64(),
            self.retries
        )));
        ctx.pause(wait)
    }

    /// The failure once no retry is left.
    fn exhausted(&self, e: &DestinationError) -> Failure {
        let tries = match self.retries {
            0 => " (--retries 0)".to_string(),
            n => format!(", and {n} reconnection(s) did not get it through"),
        };
        let kind = match e.kind {
            ErrorKind::Connection => ServerKind::Lost,
            _ => ServerKind::Other,
        };
        Failure::server_kind(
            kind,
            format!(
                "stream {} {}{tries}: {e}",
                self.stream + 1,
                what_happened(e)
            ),
        )
    }
}

/// What a retried failure did to the stream, in words.
fn what_happened(e: &DestinationError) -> &'static str {
    match e.kind {
        ErrorKind::Transient => "had its transaction aborted by the server",
        _ => "lost its connection",
    }
}

/// Whether `unit` is direct work of one table (of table `table`, when given), which a load of
/// that table can take in.
fn continues<D: Destination>(ctx: &RunContext<'_, D>, unit: &Unit, table: Option<usize>) -> bool {
    let plan = ctx.plan;
    let table_of = |c: usize| plan.inputs[plan.chunks[c].input].table;
    let Some(&first) = unit.chunks.first() else {
        return false;
    };
    let t = table.unwrap_or(table_of(first));
    unit.staged.is_none()
        && !unit.route
        && ctx.strategy.spilled(unit).is_none()
        && unit.chunks.iter().all(|&c| table_of(c) == t)
}

/// Takes a chunk's rows, bytes and completion back off its table's counters.
fn untally(counters: &Counters, c: &ChunkStat) {
    counters.chunks_done.fetch_sub(1, Ordering::Relaxed);
    counters.rows.fetch_sub(c.rows, Ordering::Relaxed);
    counters.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
}

/// One stream's state while it runs.
pub(super) struct Worker<'c, 'd, D: Destination + 'd> {
    ctx: &'c RunContext<'d, D>,
    n: usize,
    stats: StreamStats,
    /// The long transaction of direct units.
    direct: Option<D::Stream<'d>>,
    /// The connection whose transactions each fill one staging table.
    staged: Option<D::Stream<'d>>,
    encoders: Vec<Option<D::Encoder<'d>>>,
    lost: LostConnections,
    /// The tables the queue counts this stream as loading (its unit's contended tables).
    holding: Vec<usize>,
}

impl<'c, 'd, D: Destination + 'd> Worker<'c, 'd, D> {
    pub(super) fn new(ctx: &'c RunContext<'d, D>, n: usize) -> Self {
        Worker {
            ctx,
            n,
            stats: StreamStats {
                stream: n,
                ..Default::default()
            },
            direct: None,
            staged: None,
            encoders: (0..ctx.plan.tables.len()).map(|_| None).collect(),
            lost: LostConnections {
                stream: n,
                retries: ctx.opts.retries,
                retries_left: ctx.opts.retries,
                on_direct: Vec::new(),
            },
            holding: Vec::new(),
        }
    }

    /// Runs the stream to its end: its long transaction (still open, for the commit) and what
    /// it did.
    pub(super) fn run(mut self) -> (Option<D::Stream<'d>>, StreamStats) {
        // Under --jobs auto, a stream runs once the calibrator admits it.
        if !self.ctx.gate.wait_admitted(self.n, &self.ctx.abort) {
            return (None, self.stats);
        }
        let t0 = Instant::now();
        loop {
            if !self.run_units() {
                break;
            }
            match self.build() {
                BuildEnd::Done => break,
                BuildEnd::Again => continue,
            }
        }
        self.finish(t0)
    }

    /// Takes units until the queue is empty (true) or the load stops (false).
    fn run_units(&mut self) -> bool {
        loop {
            if self.ctx.abort.load(Ordering::Relaxed) || !self.ctx.gate.may_continue(self.n) {
                break;
            }
            let Some((unit, tables)) = self.ctx.take_unit() else {
                break;
            };
            self.holding = tables;
            let end = self.run_unit(&unit);
            self.release_tables();
            if let UnitEnd::Stop = end {
                return false;
            }
        }
        !self.ctx.abort.load(Ordering::Relaxed)
    }

    /// The connection a unit runs on, as the watch numbers it: staged units run on the
    /// stream's second connection, `jobs + n`, since each commits on its own.
    fn connection_id(&self, unit: &Unit) -> usize {
        match unit.staged {
            Some(_) => self.ctx.jobs + self.n,
            None => self.n,
        }
    }

    fn slot(&mut self, unit: &Unit) -> &mut Option<D::Stream<'d>> {
        match unit.staged {
            Some(_) => &mut self.staged,
            None => &mut self.direct,
        }
    }

    /// Runs one unit: opens its connection if need be, begins a staged unit, loads its chunks
    /// in order, ends a staged unit.
    fn run_unit(&mut self, unit: &Unit) -> UnitEnd {
        let ctx = self.ctx;
        if unit.route {
            return self.run_route(unit);
        }
        let spilled = ctx.strategy.spilled(unit);
        if let Some((r, p)) = spilled {
            // A partition's routed rows load once every chunk is routed; one with none has
            // nothing to stage.
            let Some(router) = ctx.strategy.router() else {
                return self.stop(no_router());
            };
            if !router.wait_routed(&ctx.abort) {
                return UnitEnd::Stop;
            }
            if router.spilled(r, p).0 == 0 {
                return UnitEnd::Next;
            }
        }
        let id = self.connection_id(unit);
        if let Err(e) = self.connect(unit, id) {
            return match e.kind {
                k if k.retried() => self.lose(unit, id, e),
                _ => self.stop(server_failure(&e, self.n)),
            };
        }
        if let Err(e) = self.begin_staged(unit) {
            return match e.kind {
                k if k.retried() => self.lose(unit, id, e),
                _ => self.stop(server_failure(&e, self.n)),
            };
        }
        let mark = self.stats.chunks.len();
        if let Some((r, p)) = spilled {
            return self.run_spilled(unit, id, r, p);
        }
        let claimed;
        let unit = match self.claim(unit, id) {
            Ok(Some(mine)) => {
                claimed = mine;
                &claimed
            }
            Ok(None) => return self.nothing_claimed(unit, id),
            Err(end) => return end,
        };
        if self.shares_a_load(unit) {
            return self.run_shared(unit, id);
        }
        let mut records: Vec<ChunkRecord> = Vec::new();
        for &c in &unit.chunks {
            if ctx.abort.load(Ordering::Relaxed) {
                return UnitEnd::Stop;
            }
            let chunk = &ctx.plan.chunks[c];
            lock(&ctx.taken)[id].push(chunk.id);
            let started = Instant::now();
            match self.load_chunk(unit, c) {
                Ok(o) => self.chunk_done(unit, c, o, (started, Instant::now()), &mut records),
                Err(ChunkError::Destination(e)) if e.kind.retried() && !ctx.opts.dry_run => {
                    return self.lose(unit, id, e)
                }
                Err(ChunkError::Destination(e)) => {
                    // A staged unit the strategy can redo another way (a file whose rows span
                    // partitions) goes back on the queue; its chunks' rows were rolled back.
                    if let Some(units) = self.redo(unit, c, &e) {
                        return self.requeue(mark, units);
                    }
                    let note = unit
                        .staged
                        .and_then(|_| ctx.strategy.not_redone(ctx.dest, &e));
                    return self.stop(noted(ctx.copy_error(id, chunk, e), note));
                }
                Err(ChunkError::Failed(f)) => return self.stop(f),
            }
        }
        self.end_staged(unit, id, mark, records)
    }

    /// A crew's unit: claims its chunks in the stream's transaction ([`Claim`]; a staged
    /// unit's, in the transaction that creates its staging table, so that the claims commit
    /// with it) and returns the unit of those this worker loads (`None`: none). A chunk another
    /// worker holds is that worker's to finish, never waited for (two workers each waiting for
    /// a chunk the other holds until it prepares would wait for ever): if that worker dies,
    /// its claim comes back, and its slot, which the job needs done, is run again and loads it.
    fn claim(&mut self, unit: &Unit, id: usize) -> Result<Option<Unit>, UnitEnd> {
        let ctx = self.ctx;
        let Some(job) = ctx.opts.job.as_ref() else {
            return Ok(Some(unit.clone()));
        };
        let Some(crew) = job.crew.as_ref() else {
            return Ok(Some(unit.clone()));
        };
        let records: Vec<ChunkRecord> = unit
            .chunks
            .iter()
            .filter_map(|&c| job.record(&ctx.plan.chunks[c], 0))
            .collect();
        let Some(stream) = self.slot(unit).as_mut() else {
            return Err(UnitEnd::Stop);
        };
        let claims = match stream.claim(job.job, crew.worker(), &records) {
            Ok(c) => c,
            Err(e) if e.kind.retried() => return Err(self.lose(unit, id, e)),
            Err(e) => return Err(self.stop(server_failure(&e, self.n))),
        };
        let mine: Vec<usize> = (unit.chunks.iter().zip(&claims))
            .filter(|(_, &c)| c == Claim::Mine)
            .map(|(&k, _)| k)
            .collect();
        // The others' chunks count as done in this worker's progress.
        for (&c, _) in (unit.chunks.iter().zip(&claims)).filter(|(_, &c)| c != Claim::Mine) {
            let t = ctx.plan.inputs[ctx.plan.chunks[c].input].table;
            ctx.counters[t].chunks_done.fetch_add(1, Ordering::Relaxed);
            ctx.elsewhere.fetch_add(1, Ordering::Relaxed);
        }
        Ok((!mine.is_empty()).then(|| Unit {
            chunks: mine,
            ..unit.clone()
        }))
    }

    /// A crew's unit whose chunks other workers loaded: a staged one's staging table, begun in
    /// the transaction, is rolled back.
    fn nothing_claimed(&mut self, unit: &Unit, id: usize) -> UnitEnd {
        let ctx = self.ctx;
        let (Some(s), Some(_)) = (self.staged.as_mut(), unit.staged) else {
            return UnitEnd::Next;
        };
        match ctx.strategy.drop_unit(ctx.dest, s, unit) {
            Ok(()) => UnitEnd::Next,
            Err(e) if e.kind.retried() => self.lose(unit, id, e),
            Err(e) => self.stop(server_failure(&e, self.n)),
        }
    }

    /// Runs a route unit: converts its chunks and routes their rows to the partitions'
    /// spills, on no connection. The chunks' ledger rows wait in the router for the publish.
    fn run_route(&mut self, unit: &Unit) -> UnitEnd {
        let ctx = self.ctx;
        let Some(router) = ctx.strategy.router() else {
            return self.stop(no_router());
        };
        let mut records = Vec::new();
        for &c in &unit.chunks {
            if ctx.abort.load(Ordering::Relaxed) {
                return UnitEnd::Stop;
            }
            let chunk = &ctx.plan.chunks[c];
            let t = ctx.plan.inputs[chunk.input].table;
            let Some(r) = router.of_table(t) else {
                return self.stop(no_router());
            };
            let started = Instant::now();
            let encoder = self.encoders[t].get_or_insert_with(|| ctx.dest.encoder(t));
            let mut sink = crate::route::Sink::new(router, r);
            let routed = route_chunk(
                ctx,
                chunk,
                encoder,
                &ctx.counters[t],
                &mut sink,
                &mut self.stats.timing,
            )
            .and_then(|o| sink.finish().map(|()| o));
            match routed {
                Ok(o) => {
                    records.extend(ctx.ledger_row(chunk, o.records));
                    self.tally(chunk, o, (started, Instant::now()));
                    ctx.host.event(Event::Point("routed"));
                }
                Err(f) => return self.stop(f),
            }
        }
        if router.unit_done(records) {
            ctx.host.event(Event::Info(format!(
                "every row of the routed table(s) is routed to its partition ({} spilled); \
                 each partition now loads from the spill",
                crate::units::human_bytes(router.spill_bytes())
            )));
        }
        UnitEnd::Next
    }

    /// Loads a partition's routed rows from the spill into the staging table begun for it,
    /// then ends the staged unit.
    fn run_spilled(&mut self, unit: &Unit, id: usize, r: usize, p: usize) -> UnitEnd {
        let ctx = self.ctx;
        let Some(router) = ctx.strategy.router() else {
            return self.stop(no_router());
        };
        let t = router.tables[r].table;
        let Some(stream) = self.staged.as_mut() else {
            return UnitEnd::Stop;
        };
        let rows = router.spilled(r, p).0;
        let spill = router.spill_reader(r, p);
        let start = ctx.started.elapsed().as_secs_f64();
        match copy_spill(ctx, stream, t, spill, rows, &mut self.stats.timing) {
            Ok(_) => self.stats.steps.push(super::StepSpan {
                what: format!(
                    "load of {}'s routed rows from the spill",
                    router.tables[r].partitions[p].name
                ),
                start,
                end: ctx.started.elapsed().as_secs_f64(),
                table: Some(t),
            }),
            Err(ChunkError::Destination(e)) if e.kind.retried() => return self.lose(unit, id, e),
            Err(ChunkError::Destination(e)) => {
                let name = &router.tables[r].partitions[p].name;
                return self.stop(server_failure(&e, self.n).and_then_say(&format!(
                    " (a row routed to {name}: a routed load cannot name its file and line; \
                     the same command with --strategy direct has the server name them)"
                )));
            }
            Err(ChunkError::Failed(f)) => return self.stop(f),
        }
        self.end_staged(unit, id, self.stats.chunks.len(), Vec::new())
    }

    /// Tallies a chunk on the stream's statistics and its table's progress; `span` is when its
    /// work began and ended.
    fn tally(&mut self, chunk: &Chunk, o: ChunkOutcome, span: (Instant, Instant)) {
        let ctx = self.ctx;
        self.stats.chunks.push(ChunkStat::of(
            ctx.plan,
            chunk,
            o,
            span.0 - ctx.started,
            span.1 - ctx.started,
        ));
        let t = ctx.plan.inputs[chunk.input].table;
        ctx.counters[t].chunks_done.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the unit's chunks go in one load that the stream's next units may continue
    /// ([`copy_shared`]): direct work of one table, without rejects to isolate (that works
    /// chunk by chunk), on a connection. In a crew, whose claims go unit by unit, it never
    /// goes on into the next.
    fn shares_a_load(&self, unit: &Unit) -> bool {
        let ctx = self.ctx;
        ctx.opts.rejects.is_none() && !ctx.opts.dry_run && continues(ctx, unit, None)
    }

    /// Runs a unit as one load ([`copy_shared`]), which goes on with the units the stream
    /// would take next while they are of the same table.
    fn run_shared(&mut self, unit: &Unit, id: usize) -> UnitEnd {
        let ctx = self.ctx;
        let plan = ctx.plan;
        lock(&ctx.taken)[id].extend(unit.chunks.iter().copied());
        let t = plan.inputs[plan.chunks[unit.chunks[0]].input].table;
        let encoder = self.encoders[t].get_or_insert_with(|| ctx.dest.encoder(t));
        let Some(stream) = self.direct.as_mut() else {
            return UnitEnd::Stop;
        };
        let mut went_on: Vec<Unit> = Vec::new();
        let mut holding = std::mem::take(&mut self.holding);
        let n = self.n;
        let in_crew = ctx.opts.job.as_ref().is_some_and(|j| j.crew.is_some());
        let mut more = || -> Vec<usize> {
            if in_crew || ctx.abort.load(Ordering::Relaxed) || !ctx.gate.may_continue(n) {
                return Vec::new();
            }
            let fits =
                |u: &Unit| continues(ctx, u, Some(t)) && strategy::load_goes_on_into(ctx.plan, u);
            let Some((next, tables)) = lock(&ctx.queue).take_next_if(&holding, fits) else {
                return Vec::new();
            };
            holding = tables;
            lock(&ctx.taken)[id].extend(next.chunks.iter().copied());
            let chunks = next.chunks.clone();
            went_on.push(next);
            chunks
        };
        let loaded = copy_shared(
            ctx,
            &unit.chunks,
            stream,
            encoder,
            &ctx.counters[t],
            ctx.opts.job.as_ref(),
            &mut self.stats.timing,
            &mut more,
        );
        self.holding = holding;
        match loaded {
            Ok(loaded) => {
                let mut records = Vec::new();
                for l in loaded {
                    let span = (l.began, l.ended);
                    self.chunk_done(unit, l.chunk, l.outcome, span, &mut records);
                }
                UnitEnd::Next
            }
            Err((_, ChunkError::Destination(e))) if e.kind.retried() => {
                // The units the load went on into go back as they were taken, after the
                // stream's own ([`LostConnections::retry`] puts those in front of them).
                let chunks: Vec<usize> = went_on.iter().flat_map(|u| u.chunks.clone()).collect();
                lock(&ctx.taken)[id].retain(|c| !chunks.contains(c));
                ctx.push_front(went_on);
                self.lose(unit, id, e)
            }
            Err((c, ChunkError::Destination(e))) => {
                let load: Vec<&Chunk> = unit
                    .chunks
                    .iter()
                    .chain(went_on.iter().flat_map(|u| &u.chunks))
                    .map(|&k| &plan.chunks[k])
                    .collect();
                self.stop(ctx.load_error(id, &plan.chunks[c], &load, e))
            }
            Err((_, ChunkError::Failed(f))) => self.stop(f),
        }
    }

    /// Opens the unit's connection if it has none (not in a dry run, which sends nothing).
    fn connect(&mut self, unit: &Unit, id: usize) -> Result<(), DestinationError> {
        let ctx = self.ctx;
        if ctx.opts.dry_run || self.slot(unit).is_some() {
            return Ok(());
        }
        let mut s = ctx.dest.open_stream(id)?;
        // Isolating bad rows needs each check to fire at its load, under that load's savepoint.
        if ctx.opts.rejects.is_some() && unit.staged.is_none() {
            sluice_core::destination::DestinationStream::check_each_copy(&mut s)?;
        }
        *self.slot(unit) = Some(s);
        Ok(())
    }

    fn begin_staged(&mut self, unit: &Unit) -> Result<(), DestinationError> {
        let ctx = self.ctx;
        match (self.staged.as_mut(), unit.staged) {
            (Some(s), Some(_)) => ctx.strategy.begin_unit(ctx.dest, s, unit),
            _ => Ok(()),
        }
    }

    /// Loads chunk `c` of `unit` on its connection (none in a dry run). A direct chunk's
    /// ledger row goes in with its rows; a staged one's, with the publish. Bad rows are
    /// isolated under savepoints where the destination has them: always in direct work, in a
    /// staged unit only if it says so.
    fn load_chunk(&mut self, unit: &Unit, c: usize) -> Result<ChunkOutcome, ChunkError> {
        let ctx = self.ctx;
        let chunk = &ctx.plan.chunks[c];
        let t = ctx.plan.inputs[chunk.input].table;
        let encoder = self.encoders[t].get_or_insert_with(|| ctx.dest.encoder(t));
        let record = match unit.staged {
            None => ctx.opts.job.as_ref(),
            Some(_) => None,
        };
        let stream = match unit.staged {
            Some(_) => self.staged.as_mut(),
            None => self.direct.as_mut(),
        };
        run_chunk(
            ctx,
            chunk,
            stream,
            encoder,
            &ctx.counters[t],
            record,
            unit.staged.is_none() || ctx.caps.savepoints_in_staged_unit,
            &mut self.stats.timing,
        )
    }

    /// Tallies a loaded chunk: the stream's statistics, its table's progress, and where its
    /// ledger row goes (the staged unit's list, or the direct transaction's chunks).
    fn chunk_done(
        &mut self,
        unit: &Unit,
        c: usize,
        o: ChunkOutcome,
        span: (Instant, Instant),
        records: &mut Vec<ChunkRecord>,
    ) {
        let ctx = self.ctx;
        let chunk = &ctx.plan.chunks[c];
        match unit.staged {
            Some(_) => records.extend(ctx.ledger_row(chunk, o.records)),
            None => self.lost.on_direct.push(c),
        }
        self.tally(chunk, o, span);
    }

    /// The strategy's way of redoing a staged unit that failed with `e` on chunk `c`, if any.
    fn redo(&mut self, unit: &Unit, c: usize, e: &DestinationError) -> Option<Vec<Unit>> {
        let ctx = self.ctx;
        unit.staged?;
        let s = self.staged.as_mut()?;
        ctx.strategy.redo(ctx.dest, s, unit, &ctx.plan.chunks[c], e)
    }

    /// Ends a staged unit (its indexes, statistics and commit); a failure there is redone the
    /// strategy's way when it can be (a key its rows hold twice), else it stops the load.
    fn end_staged(
        &mut self,
        unit: &Unit,
        id: usize,
        mark: usize,
        records: Vec<ChunkRecord>,
    ) -> UnitEnd {
        let ctx = self.ctx;
        let (Some(s), Some(_)) = (self.staged.as_mut(), unit.staged) else {
            return UnitEnd::Next;
        };
        let start = ctx.started.elapsed().as_secs_f64();
        let ended = ctx.strategy.end_unit(ctx.dest, s, unit, &records);
        self.stats.steps.push(super::StepSpan {
            what: "index build, statistics, commit of its staging table".into(),
            start,
            end: ctx.started.elapsed().as_secs_f64(),
            table: None,
        });
        match ended {
            Ok(()) => UnitEnd::Next,
            Err(e) if e.kind.retried() => self.lose(unit, id, e),
            Err(e) => {
                // A key the staged rows hold twice, found by the index build: redone where
                // rows can be rejected.
                if let Some(&first) = unit.chunks.first() {
                    if let Some(units) = self.redo(unit, first, &e) {
                        return self.requeue(mark, units);
                    }
                }
                self.stop(ctx.unit_error(self.n, &self.diagnosed(unit), e))
            }
        }
    }

    /// The unit whose chunks a failure at its end is looked for in: a spilled unit's rows
    /// come from every chunk of its table.
    fn diagnosed(&self, unit: &Unit) -> Unit {
        let ctx = self.ctx;
        let Some((r, _)) = ctx.strategy.spilled(unit) else {
            return unit.clone();
        };
        let t = ctx.strategy.router().map(|router| router.tables[r].table);
        Unit {
            chunks: (0..ctx.plan.chunks.len())
                .filter(|&c| Some(ctx.plan.inputs[ctx.plan.chunks[c].input].table) == t)
                .collect(),
            ..unit.clone()
        }
    }

    /// A staged unit the strategy redoes another way: its chunks' rows were rolled back, so
    /// they leave the tallies, and the strategy's units go first in the queue.
    fn requeue(&mut self, mark: usize, units: Vec<Unit>) -> UnitEnd {
        let ctx = self.ctx;
        for done in self.stats.chunks.drain(mark..) {
            untally(&ctx.counters[done.table_index], &done);
        }
        ctx.push_front(units);
        UnitEnd::Next
    }

    /// The queue no longer counts this stream as loading its unit's tables.
    fn release_tables(&mut self) {
        let tables = std::mem::take(&mut self.holding);
        self.ctx.done_with(&tables);
    }

    /// Connection `id` was lost during `unit`: retried when a retry is left.
    fn lose(&mut self, unit: &Unit, id: usize, e: DestinationError) -> UnitEnd {
        let ctx = self.ctx;
        let lost = self.slot(unit).take();
        self.close_lost(lost);
        // Its unit goes back on the queue, and another stream may take its table during the
        // pause before the reconnect.
        self.release_tables();
        if self.lost.retry(ctx, &mut self.stats, unit, id, &e) {
            return UnitEnd::Next;
        }
        self.stop(self.lost.exhausted(&e))
    }

    /// Closes a lost connection on this side, its TCP figures kept, before its chunks go back
    /// on the queue (and not after the pause before the reconnect): from then on the
    /// destination knows its session, if the server still runs it, as this load's former one,
    /// which a sibling that takes the chunks may wait on, and not as a live stream whose rows
    /// clash with the sibling's.
    fn close_lost(&mut self, lost: Option<D::Stream<'d>>) {
        self.keep_transport(lost.as_ref());
        drop(lost);
    }

    /// Adds a connection's TCP figures to the stream's, before it closes or is handed on.
    fn keep_transport(&mut self, stream: Option<&D::Stream<'d>>) {
        let Some(t) = stream.and_then(|s| s.transport()) else {
            return;
        };
        self.stats.transport = Some(match self.stats.transport {
            Some(before) => before.then(t),
            None => t,
        });
    }

    fn stop(&self, f: Failure) -> UnitEnd {
        self.ctx.fail(f);
        UnitEnd::Stop
    }

    /// The strategy's build step (deferred checks, for direct), run here before the barrier,
    /// where a wait on a sibling is still watched and everything can roll back.
    fn build(&mut self) -> BuildEnd {
        let ctx = self.ctx;
        let Some(s) = self.direct.as_mut() else {
            return BuildEnd::Done;
        };
        match ctx.strategy.build(s) {
            Ok(()) => BuildEnd::Done,
            Err(e) if e.kind.retried() => {
                let lost = self.direct.take();
                self.close_lost(lost);
                let none = Unit {
                    chunks: Vec::new(),
                    staged: None,
                    route: false,
                };
                if self.lost.retry(ctx, &mut self.stats, &none, self.n, &e) {
                    return BuildEnd::Again;
                }
                ctx.fail(self.lost.exhausted(&e));
                BuildEnd::Done
            }
            Err(e) => {
                ctx.fail(ctx.deferred_error(self.n, e));
                BuildEnd::Done
            }
        }
    }

    /// The stream has no more work: its sessions only wait for the commit from here on.
    fn finish(mut self, t0: Instant) -> (Option<D::Stream<'d>>, StreamStats) {
        let ctx = self.ctx;
        ctx.dest.stream_done(self.n);
        ctx.dest.stream_done(ctx.jobs + self.n);
        for c in &self.stats.chunks {
            self.stats.rows += c.rows;
            self.stats.bytes += c.bytes;
        }
        let converted: u64 = self
            .encoders
            .iter()
            .flatten()
            .map(|e| e.server_conversions())
            .sum();
        ctx.conversions.fetch_add(converted, Ordering::Relaxed);
        self.stats.seconds = t0.elapsed().as_secs_f64();
        let (direct, staged) = (self.direct.take(), self.staged.take());
        self.keep_transport(staged.as_ref());
        self.keep_transport(direct.as_ref());
        (direct, self.stats)
    }
}

/// A route or spilled unit without its routing: a bug, which stops the load (the streams that
/// wait for the routing must not wait for ever).
fn no_router() -> Failure {
    Failure::Local("a bug in sluice: a routed unit without its routing; nothing was loaded".into())
}

/// How long a lost connection's stream waits before its first reconnect (doubling after).
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// `f`, with what the strategy knows of it (`note`) after its reason.
fn noted(f: Failure, note: Option<String>) -> Failure {
    let Some(note) = note else { return f };
    match f {
        Failure::Input(mut e) => {
            e.reason = format!("{}; {note}", e.reason);
            Failure::Input(e)
        }
        other => other.and_then_say(&format!("; {note}")),
    }
}
