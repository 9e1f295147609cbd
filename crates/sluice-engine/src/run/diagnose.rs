//! Server errors turned into messages about rows: which input line a load error names, which
//! rows hold a key the server named, and which failures are the server's own. Only the error
//! path runs here.

use super::copy::ChunkError;
use super::lines::absolute_line;
use super::{lock, RunContext};
use crate::chunk::{self, locate_record, record_at};
use crate::conflict::{self, sibling_conflict, KeySearch, NamedKey};
use crate::failure::{Failure, ServerKind};
use crate::plan::{Chunk, TablePlan};
use crate::rejects::{Reject, Rejects};
use crate::strategy::{self, Unit};
use sluice_core::destination::{Destination, DestinationError, ErrorKey, ErrorKind};
use sluice_core::error::InputError;

/// The kind of server failure a destination error is, when it is not about a row.
pub(crate) fn server_kind(e: &DestinationError) -> ServerKind {
    match e.kind {
        ErrorKind::Connection => ServerKind::Lost,
        ErrorKind::Cancelled => ServerKind::Cancelled,
        ErrorKind::Condition => ServerKind::Condition,
        _ => ServerKind::Other,
    }
}

/// A failure of the server's, of the kind `e` is, saying `message`.
pub(crate) fn destination_failure(e: &DestinationError, message: String) -> Failure {
    Failure::server_kind(server_kind(e), message)
}

/// Words a server error that is not about one row: what happened, without blaming the
/// connection for a cancelled statement.
pub(super) fn server_failure(e: &DestinationError, stream: usize) -> Failure {
    let message = match e.kind {
        ErrorKind::Connection => format!("stream {} lost its connection: {e}", stream + 1),
        ErrorKind::Transient => format!(
            "stream {}'s transaction was aborted by the server: {e}",
            stream + 1
        ),
        ErrorKind::Cancelled => format!(
            "stream {}'s statement was cancelled by the server: {e}. sluice turns off the \
             server's statement and lock timeouts for its own sessions, so another session or \
             an administrator cancelled it",
            stream + 1
        ),
        _ => e.to_string(),
    };
    destination_failure(e, message)
}

/// The column a server error names, among the table's loaded ones: its index, and how a
/// message shows it (`name (type)`).
fn server_column(table: &TablePlan, e: &DestinationError) -> (Option<usize>, Option<String>) {
    let i = e
        .column
        .as_ref()
        .and_then(|c| table.columns.iter().position(|col| &col.name == c));
    let shown = i.map(|i| {
        let c = &table.columns[i];
        format!("{} ({})", c.name, c.type_name)
    });
    (i, shown)
}

impl<D: Destination> RunContext<'_, D> {
    /// Rejects record `index` of `chunk`, which the server refused with `e`.
    pub(super) fn server_reject(
        &self,
        rejects: &Rejects,
        chunk: &Chunk,
        index: u64,
        e: &DestinationError,
    ) -> Result<(), ChunkError> {
        let plan = self.plan;
        let input = &plan.inputs[chunk.input];
        let table = &plan.tables[input.table];
        let (col_idx, column) = server_column(table, e);
        // A sibling's key: the columns of the index it waited on, to show the key.
        let key_cols: Vec<(String, usize)> = match e.kind {
            ErrorKind::Conflict { .. } => e
                .index
                .as_deref()
                .and_then(|i| self.dest.key_columns(i))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| {
                    let i = table.columns.iter().position(|col| col.name == c)?;
                    Some((c, i))
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut wanted: Vec<usize> = col_idx.into_iter().collect();
        wanted.extend(key_cols.iter().map(|(_, i)| *i));
        let Some(rec) = record_at(plan, chunk, index, &wanted) else {
            return Err(ChunkError::Failed(Failure::Local(format!(
                "record {index} of a chunk of {} could not be read again to reject it",
                input.display
            ))));
        };
        let reason = match e.kind {
            ErrorKind::Conflict { blocker } => {
                let values: Vec<String> = rec.values[col_idx.is_some() as usize..]
                    .iter()
                    .map(|v| {
                        v.as_deref()
                            .map_or("null".into(), |b| String::from_utf8_lossy(b).into_owned())
                    })
                    .collect();
                let names: Vec<&str> = key_cols.iter().map(|(c, _)| c.as_str()).collect();
                let key = if names.is_empty() {
                    String::new()
                } else {
                    format!(" ({})=({})", names.join(", "), values.join(", "))
                };
                format!(
                    "duplicate key{key}{}: another stream of this load (stream {}) holds the \
                     same key in rows it has loaded; this row came later, so it is the one \
                     rejected",
                    e.index
                        .as_deref()
                        .map_or(String::new(), |i| format!(" of index \"{i}\"")),
                    blocker + 1
                )
            }
            _ => format!("rejected by the server: {}", e.message),
        };
        let mut err = InputError::new(&input.display, reason);
        err.line = Some(rec.at.line);
        err.offset = Some(rec.at.offset);
        err.column = column;
        err.value = col_idx.and_then(|_| rec.values.first().cloned().flatten());
        let cause = match e.kind {
            ErrorKind::Conflict { .. } => "unique_violation",
            _ => e.cause.unwrap_or("rejected"),
        };
        let reject = Reject {
            input: chunk.input,
            offset: rec.at.offset,
            chunk_line: rec.at.line,
            raw: rec.raw,
            error: err,
            cause,
            by_server: true,
        };
        rejects.add(reject, self.seen()).map_err(|f| match f {
            Failure::Input(mut ie) => {
                absolute_line(plan, chunk, &mut ie);
                ChunkError::Failed(Failure::Input(ie))
            }
            other => ChunkError::Failed(other),
        })
    }

    pub(super) fn chunks_of(&self, stream: usize) -> Vec<&Chunk> {
        let taken = lock(&self.taken);
        taken
            .get(stream)
            .map(|ids| ids.iter().map(|&i| &self.plan.chunks[i]).collect())
            .unwrap_or_default()
    }

    fn files_of(&self, stream: usize) -> Vec<String> {
        let mut files: Vec<String> = Vec::new();
        for c in self.chunks_of(stream) {
            let f = &self.plan.inputs[c.input].display;
            if !files.contains(f) {
                files.push(f.clone());
            }
        }
        files
    }

    /// Maps a server error during a chunk's load to the row it names.
    pub(super) fn copy_error(&self, stream: usize, chunk: &Chunk, e: DestinationError) -> Failure {
        self.load_error(stream, chunk, &[chunk], e)
    }

    /// [`RunContext::copy_error`] for a load of several chunks (`load`, `chunk` among them, the
    /// one the error's record falls in): an error that names a key and no record is looked for
    /// in all of them.
    pub(super) fn load_error(
        &self,
        stream: usize,
        chunk: &Chunk,
        load: &[&Chunk],
        e: DestinationError,
    ) -> Failure {
        match e.kind {
            ErrorKind::Conflict { blocker } => {
                return self.copy_conflict(stream, blocker, chunk, load, &e)
            }
            // The server's state is never a row's fault, whatever line the error names.
            ErrorKind::Connection
            | ErrorKind::Cancelled
            | ErrorKind::Condition
            | ErrorKind::Transient => return server_failure(&e, stream),
            ErrorKind::Rejected | ErrorKind::Other | ErrorKind::Usage => {}
        }
        let plan = self.plan;
        let input = &plan.inputs[chunk.input];
        if e.record.is_none() {
            // A check that runs after the load's last row (a foreign key): find the row by key.
            if let Some(err) = self.keyed_error(&e, load, chunk) {
                return err;
            }
            return destination_failure(&e, format!("{} (while loading {})", e, input.display));
        }
        let n = e.record.unwrap_or_default();
        let table = &plan.tables[input.table];
        let (col_idx, column) = server_column(table, &e);
        let mut err = InputError::new(&input.display, format!("rejected by the server: {e}"));
        err.column = column;
        let cols: Vec<usize> = col_idx.into_iter().collect();
        match locate_record(plan, chunk, n, &cols) {
            Some((at, values)) => {
                err.line = Some(at.line);
                err.offset = Some(at.offset);
                err.value = values.into_iter().next().flatten();
                absolute_line(plan, chunk, &mut err);
                if e.duplicate {
                    let mine = self.chunks_of(stream);
                    if let Some(first) = self.earlier_duplicate(&e, &mine, chunk, at) {
                        err.reason
                            .push_str(&format!("; the same key is in {first}"));
                    }
                }
            }
            None => err.reason.push_str(&format!(" (record {n} of this input)")),
        }
        Failure::Input(Box::new(err))
    }

    /// A key the server named, tied to the table (among those `chunks` load) that has every
    /// one of its columns.
    fn named_key(&self, key: ErrorKey, chunks: &[&Chunk]) -> Option<NamedKey> {
        let plan = self.plan;
        let table = chunks
            .iter()
            .map(|c| plan.inputs[c.input].table)
            .find(|&t| {
                key.columns
                    .iter()
                    .all(|k| plan.tables[t].columns.iter().any(|c| &c.name == k))
            })?;
        Some(NamedKey {
            table,
            columns: key.columns,
            values: key.values,
        })
    }

    /// For a unique violation inside one stream: where the key first appeared in the stream's
    /// chunks, when that is not the rejected row itself (else it was in the table already).
    fn earlier_duplicate(
        &self,
        e: &DestinationError,
        chunks: &[&Chunk],
        chunk: &Chunk,
        at: chunk::Found,
    ) -> Option<String> {
        let k = e.key.clone()?;
        let key = NamedKey {
            table: self.plan.inputs[chunk.input].table,
            columns: k.columns,
            values: k.values,
        };
        let search = KeySearch::new(self.plan, self.dest);
        let first = search.find(&key, chunks)?;
        let same = first.chunk == chunk.id && first.at.offset == at.offset;
        (!same).then(|| search.describe(&first))
    }

    /// A constraint error whose DETAIL names a key (unique, foreign key, exclusion): the row
    /// with that key among `chunks`, and a message that says what is wrong with it.
    fn keyed_error(
        &self,
        e: &DestinationError,
        chunks: &[&Chunk],
        fallback: &Chunk,
    ) -> Option<Failure> {
        let key = self.named_key(e.key.clone()?, chunks)?;
        let plan = self.plan;
        let search = KeySearch::new(plan, self.dest);
        // A duplicate inside one stream's rows (a deferred unique check): the later row is the
        // bad one, the earlier is named beside it.
        let mut rows = search.find_n(&key, chunks, 2).into_iter();
        let (earlier, row) = match (e.duplicate, rows.next(), rows.next()) {
            (true, Some(first), Some(second)) => (Some(first), Some(second)),
            (_, first, _) => (None, first),
        };
        let mut reason = format!("rejected by the server: {}", e.summary);
        if let Some(d) = &e.detail {
            reason.push_str(&format!(" ({})", d.trim_end_matches('.')));
        }
        if let Some(first) = &earlier {
            reason.push_str(&format!("; the same key is in {}", search.describe(first)));
        }
        // A parent loaded by this same command is seen by the check when it loads first on
        // the same stream (strategy::keep_references_together), except in a cycle of keys.
        let child = plan.inputs[fallback.input].table;
        let seen_first = |p: usize| {
            strategy::reference_groups(plan).iter().any(|g| {
                let at = |t| g.iter().position(|&x| x == t);
                matches!((at(p), at(child)), (Some(a), Some(b)) if a < b)
            })
        };
        if let Some(parent) = &e.referenced_table {
            let loaded = plan.tables.iter().position(|t| &t.table.name == parent);
            if loaded.is_some_and(|p| !seen_first(p)) {
                reason.push_str(&format!(
                    ". The parent table {parent} is loaded by this same command: its rows are \
                     not visible to this check until they commit (another stream, or a later \
                     chunk), so the row may be good. Load {parent} first, in its own command"
                ));
            }
        }
        Some(search.input_error(&key, row.as_ref(), fallback, reason))
    }

    /// A staged unit's build failed: a key its rows hold twice (a unique index built after
    /// the data) is a bad row, named with both rows; anything else is the server's.
    pub(super) fn unit_error(&self, stream: usize, unit: &Unit, e: DestinationError) -> Failure {
        let chunks: Vec<&Chunk> = unit.chunks.iter().map(|&c| &self.plan.chunks[c]).collect();
        match (e.kind, chunks.first()) {
            (ErrorKind::Rejected, Some(&first)) => self
                .keyed_error(&e, &chunks, first)
                .unwrap_or_else(|| server_failure(&e, stream)),
            _ => server_failure(&e, stream),
        }
    }

    /// A load the watch cancelled because it waited on a sibling stream.
    fn copy_conflict(
        &self,
        stream: usize,
        blocker: usize,
        chunk: &Chunk,
        load: &[&Chunk],
        e: &DestinationError,
    ) -> Failure {
        let search = KeySearch::new(self.plan, self.dest);
        let index = e.index.as_deref();
        let located = index
            .and_then(|i| self.dest.key_columns(i))
            .zip(e.record)
            .and_then(|(cols, n)| search.key_at(chunk, n, &cols));
        let waiter = match located {
            Some((key, at)) => Some((
                key,
                conflict::Row {
                    chunk: chunk.id,
                    at,
                },
            )),
            // A destination that knows the key the waiter asked for, but not its record (it
            // saw the wait, not the row): the row is found by its key in the load's chunks.
            None => e
                .key
                .clone()
                .and_then(|k| self.named_key(k, load))
                .and_then(|key| search.find(&key, load).map(|row| (key, row))),
        };
        let Some((key, waiter)) = waiter else {
            return self.unnamed_conflict(stream, blocker, index);
        };
        let other = search.find(&key, &self.chunks_of(blocker));
        sibling_conflict(
            &search,
            &key,
            index,
            Some(&waiter),
            other.as_ref(),
            chunk,
            &self.files_of(blocker),
        )
    }

    /// A deferred check, fired before the barrier, failed: a sibling conflict (the key the
    /// destination read back from this stream's own transaction), or a key the server named.
    pub(super) fn deferred_error(&self, stream: usize, e: DestinationError) -> Failure {
        let mine = self.chunks_of(stream);
        let Some(first) = mine.first().copied() else {
            return server_failure(&e, stream);
        };
        let blocker = match e.kind {
            ErrorKind::Conflict { blocker } => blocker,
            ErrorKind::Connection
            | ErrorKind::Cancelled
            | ErrorKind::Condition
            | ErrorKind::Transient => return server_failure(&e, stream),
            ErrorKind::Rejected | ErrorKind::Other | ErrorKind::Usage => {
                return self.keyed_error(&e, &mine, first).unwrap_or_else(|| {
                    destination_failure(&e, format!("a deferred constraint check failed: {e}"))
                })
            }
        };
        let index = e.index.as_deref();
        let key = e.key.clone().and_then(|k| self.named_key(k, &mine));
        let Some(key) = key else {
            return self.unnamed_conflict(stream, blocker, index);
        };
        let search = KeySearch::new(self.plan, self.dest);
        let waiter = search.find(&key, &mine);
        let other = search.find(&key, &self.chunks_of(blocker));
        sibling_conflict(
            &search,
            &key,
            index,
            waiter.as_ref(),
            other.as_ref(),
            first,
            &self.files_of(blocker),
        )
    }

    /// A sibling conflict whose key could not be read: name the streams' inputs.
    fn unnamed_conflict(&self, stream: usize, blocker: usize, index: Option<&str>) -> Failure {
        let mut err = InputError::new(
            self.files_of(stream).join(", "),
            format!(
                "a key{} is in the rows of two streams of this load (the other read {}). \
                 Streams cannot see each other's rows before they commit, so the server would \
                 have waited forever; sluice stopped the load",
                index.map_or(String::new(), |i| format!(" of index \"{i}\"")),
                self.files_of(blocker).join(", ")
            ),
        );
        err.line = None;
        Failure::Input(Box::new(err))
    }
}
