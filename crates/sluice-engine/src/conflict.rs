//! Server errors about keys, turned into bad-row messages that name the rows.
//!
//! Constraint errors rarely say which input line they came from. A foreign-key check runs after
//! the load's last row, so its error has no line; a deferred unique check fires at the end
//! of the transaction; and a duplicate key *between two streams of one load* never errors at all:
//! the later insert waits for the earlier transaction, which waits at the commit barrier, until
//! the destination's watch cancels the waiter. What the server does give is
//! the key (the DETAIL `Key (id)=(50000)`, or a tuple the context names, read back from the
//! stream's own transaction) and the index. From the key, this module finds the rows in the
//! chunks each stream ran, comparing values by their converted binary form so that spellings
//! that differ (`1.50` and `1.5`) still match. All of it runs only on the error path, bounded in
//! time, so that an error is never turned into a hang.

use crate::chunk::{find_key, locate_record, Found, KeyProbe};
use crate::failure::Failure;
use crate::plan::{Chunk, Plan};
use crate::run::absolute_line;
use sluice_core::destination::Destination;
use sluice_core::error::InputError;
use std::time::{Duration, Instant};

/// How long the error path may spend reading inputs to find the rows behind a key.
const SEARCH_BUDGET: Duration = Duration::from_secs(30);

/// A key the server named, with the table it belongs to.
pub struct NamedKey {
    /// Index of the table in the plan.
    pub table: usize,
    pub columns: Vec<String>,
    /// The values as the server prints them (`None` for NULL).
    pub values: Vec<Option<String>>,
}

impl NamedKey {
    /// `(a, b)=(1, x)`, as servers write a key in their messages.
    pub fn display(&self) -> String {
        let values: Vec<&str> = self
            .values
            .iter()
            .map(|v| v.as_deref().unwrap_or("null"))
            .collect();
        format!("({})=({})", self.columns.join(", "), values.join(", "))
    }
}

/// A row found in an input.
pub struct Row {
    pub chunk: usize,
    pub at: Found,
}

/// Finds rows by key in the chunks the streams ran, comparing values with the destination's
/// own encoding.
pub struct KeySearch<'a, D: Destination> {
    pub plan: &'a Plan,
    pub dest: &'a D,
    deadline: Instant,
}

impl<'a, D: Destination> KeySearch<'a, D> {
    pub fn new(plan: &'a Plan, dest: &'a D) -> KeySearch<'a, D> {
        KeySearch {
            plan,
            dest,
            deadline: Instant::now() + SEARCH_BUDGET,
        }
    }

    /// The first row of `chunks` (those of the key's table) whose key equals `key`.
    pub fn find(&self, key: &NamedKey, chunks: &[&Chunk]) -> Option<Row> {
        self.find_n(key, chunks, 1).pop()
    }

    /// Up to `limit` rows of `chunks` whose key equals `key`, in chunk order.
    pub fn find_n(&self, key: &NamedKey, chunks: &[&Chunk], limit: usize) -> Vec<Row> {
        let table = &self.plan.tables[key.table];
        let columns: Vec<usize> = key
            .columns
            .iter()
            .map(|c| table.columns.iter().position(|col| &col.name == c))
            .collect::<Option<_>>()
            .unwrap_or_default();
        let text: Vec<Vec<u8>> = key
            .values
            .iter()
            .map(|v| v.as_ref().map(|s| s.as_bytes().to_vec()))
            .collect::<Option<_>>()
            .unwrap_or_default();
        if columns.is_empty() || text.len() != columns.len() {
            return Vec::new();
        }
        let mut encoder = self.dest.encoder(key.table);
        let probe = KeyProbe::new(&mut encoder, columns, text);
        let mut rows = Vec::new();
        for c in chunks
            .iter()
            .filter(|c| self.plan.inputs[c.input].table == key.table)
        {
            let left = limit - rows.len();
            let found = find_key(self.plan, c, &mut encoder, &probe, left, self.deadline);
            rows.extend(found.into_iter().map(|at| Row { chunk: c.id, at }));
            if rows.len() >= limit {
                break;
            }
        }
        rows
    }

    /// The key of record `n` of a chunk (a line of the load the server named), with its position.
    pub fn key_at(&self, chunk: &Chunk, n: u64, columns: &[String]) -> Option<(NamedKey, Found)> {
        let t = self.plan.inputs[chunk.input].table;
        let table = &self.plan.tables[t];
        let idx: Vec<usize> = columns
            .iter()
            .map(|c| table.columns.iter().position(|col| &col.name == c))
            .collect::<Option<_>>()?;
        let (at, values) = locate_record(self.plan, chunk, n, &idx)?;
        let key = NamedKey {
            table: t,
            columns: columns.to_vec(),
            values: values
                .into_iter()
                .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                .collect(),
        };
        Some((key, at))
    }

    /// `file, line N`, with the line counted from the start of the file.
    pub fn describe(&self, row: &Row) -> String {
        let chunk = &self.plan.chunks[row.chunk];
        let mut e = InputError::new(&self.plan.inputs[chunk.input].display, "");
        e.line = Some(row.at.line);
        absolute_line(self.plan, chunk, &mut e);
        format!("{}, line {}", e.file, e.line.unwrap_or(row.at.line))
    }

    /// A bad-row error placed at `row` (or at the first input of `fallback` when the row was
    /// not found), naming the key.
    pub fn input_error(
        &self,
        key: &NamedKey,
        row: Option<&Row>,
        fallback: &Chunk,
        reason: String,
    ) -> Failure {
        let chunk = row.map_or(fallback, |r| &self.plan.chunks[r.chunk]);
        let mut err = InputError::new(&self.plan.inputs[chunk.input].display, reason);
        let table = &self.plan.tables[key.table];
        err.column = Some(
            key.columns
                .iter()
                .map(|c| {
                    let ty = table
                        .columns
                        .iter()
                        .find(|col| &col.name == c)
                        .map_or(String::new(), |col| format!(" ({})", col.type_name));
                    format!("{c}{ty}")
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        if let Some(r) = row {
            err.line = Some(r.at.line);
            err.offset = Some(r.at.offset);
            absolute_line(self.plan, chunk, &mut err);
        }
        Failure::Input(Box::new(err))
    }
}

/// The message for a key two streams of one load both hold. `waiter` is where the waiting
/// stream's row is, `other` where the blocking stream's is (when found).
pub fn sibling_conflict<D: Destination>(
    search: &KeySearch<'_, D>,
    key: &NamedKey,
    index: Option<&str>,
    waiter: Option<&Row>,
    other: Option<&Row>,
    fallback: &Chunk,
    other_files: &[String],
) -> Failure {
    let index = index.map_or(String::new(), |i| format!(" (index \"{i}\")"));
    let same_row = |r: &Row| {
        waiter.is_some_and(|w| {
            let (a, b) = (&search.plan.chunks[w.chunk], &search.plan.chunks[r.chunk]);
            search.plan.inputs[a.input].source == search.plan.inputs[b.input].source
                && w.at.offset == r.at.offset
        })
    };
    let elsewhere = match other {
        Some(r) if same_row(r) => format!(
            "this very row ({}) is loaded by two streams: is one file given twice (an \
             overlapping glob?)",
            search.describe(r)
        ),
        Some(r) => format!(
            "the same key is in {}, loaded by another stream of this load",
            search.describe(r)
        ),
        None if other_files.is_empty() => {
            "the same key is in another stream's rows of this load".to_string()
        }
        None => format!(
            "the same key is in another stream's rows of this load (from {})",
            other_files.join(", ")
        ),
    };
    let reason = format!(
        "duplicate key {}{index}: {elsewhere}. Streams cannot see each other's rows before they \
         commit, so the server would have waited forever; sluice stopped the load",
        key.display()
    );
    search.input_error(key, waiter, fallback, reason)
}
