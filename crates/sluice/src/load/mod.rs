//! `sluice load`: plan, convert and send in parallel, then commit everything or nothing.
//!
//! Each of `--jobs` streams is a connection in one open transaction, fed chunks from a shared
//! queue (biggest first). Inside a stream three things overlap: a reader thread reads and
//! decompresses, the stream's thread parses, converts and encodes, and the destination writes
//! the previous message to its socket. When a chunk fails, every stream stops and rolls back;
//! only when every stream has finished cleanly are they committed, back to back. The guarantee
//! and its one window (a crash between the first and last COMMIT) are documented in the README.
//!
//! The engine speaks to the database only through [`Destination`] (`sluice-core`), which
//! `sluice-postgres` implements; a second destination slots in beside it without touching
//! this file.
//!
//! Two streams can wait on each other across the barrier (a key both insert: the later insert
//! waits for the earlier transaction, which waits at the barrier). So before a stream reaches
//! the barrier it fires its deferred constraint checks, and while any stream runs, the
//! destination watches for a stream waiting on a sibling and stops it
//! ([`ErrorKind::Conflict`]); the error then names the key and both rows ([`conflict`]).
//! Nothing is committed in that case.

pub mod calibrate;
pub mod chunk;
pub mod conflict;
pub mod ledger;
pub mod plan;
pub mod rejects;
pub mod source;
pub mod stage;
pub mod strategy;

use crate::failure::Failure;
use chunk::{
    convert_chunk, locate_record, record_at, Added, ChunkJob, ChunkOutcome, ClientReject, Counters,
    Selection,
};
use conflict::{sibling_conflict, KeySearch, NamedKey};
use ledger::JobRun;
use plan::{Chunk, Plan};
use rejects::{Reject, Rejects};
use sluice_core::destination::{
    Destination, DestinationError, DestinationStream, ErrorKey, ErrorKind, RecordEncoder,
    ServerWaits,
};
use sluice_core::error::InputError;
use sluice_core::ledger::ChunkRecord;
use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use strategy::{Strategy, Unit};

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here is a push, a pop or a plain assignment).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How to run a plan.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub jobs: usize,
    /// Size of one COPY message.
    pub copy_buffer: usize,
    /// Convert and encode everything, send nothing.
    pub dry_run: bool,
    /// The ledger's job, when the load keeps one: each chunk's ledger row commits with it.
    pub job: Option<JobRun>,
    /// How many lost connections each stream survives (its uncommitted work is redone on a
    /// new connection).
    pub retries: u32,
    /// Where rejected rows go, when some may be (`--max-errors` above 0): bad rows are
    /// isolated and counted instead of failing the load.
    pub rejects: Option<std::sync::Arc<Rejects>>,
    /// `--jobs auto`: start with one stream and add them while throughput rises, up to
    /// `jobs` ([`calibrate`]).
    pub calibrate: bool,
}

/// A stream's lost connections: what each takes with it, and how many more it may survive.
struct LostConnections {
    stream: usize,
    retries: u32,
    retries_left: u32,
    /// Chunks loaded on the current direct connection: its transaction holds them.
    on_direct: Vec<usize>,
}

impl LostConnections {
    /// Connection `id` was lost while running `unit`: puts back on the queue what its
    /// transaction held (the unit, and for the direct connection every chunk it loaded), and
    /// waits before the stream connects anew. `false` when no retry is left or the load
    /// is stopping.
    #[allow(clippy::too_many_arguments)]
    fn retry<D: Destination>(
        &mut self,
        ctx: &RunContext<'_, D>,
        queue: &Mutex<VecDeque<Unit>>,
        stats: &mut StreamStats,
        counters: &[Counters],
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
        if !unit.chunks.is_empty() {
            chunks.extend(&unit.chunks);
            back.push(unit.clone());
        }
        stats.chunks.retain(|c| {
            if !chunks.contains(&c.chunk) {
                return true;
            }
            let k = &counters[c.table_index];
            k.chunks_done.fetch_sub(1, Ordering::Relaxed);
            k.rows.fetch_sub(c.rows, Ordering::Relaxed);
            k.bytes.fetch_sub(c.bytes, Ordering::Relaxed);
            false
        });
        lock(ctx.taken)[id].retain(|c| !chunks.contains(c));
        {
            let mut q = lock(queue);
            for u in back.into_iter().rev() {
                q.push_front(u);
            }
        }
        let wait = Duration::from_secs(1 << (attempt - 1).min(4));
        eprintln!(
            "\nwarning: stream {} lost its connection ({e}); its {} uncommitted chunk(s) go \
             back on the queue, and it reconnects in {} s (retry {attempt} of {})",
            self.stream + 1,
            chunks.len(),
            wait.as_secs(),
            self.retries
        );
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if ctx.abort.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// The failure once no retry is left.
    fn exhausted(&self, e: &DestinationError) -> Failure {
        let tries = match self.retries {
            0 => " (--retries 0)".to_string(),
            n => format!(", and {n} reconnection(s) did not get it through"),
        };
        Failure::Server(format!(
            "stream {} lost its connection{tries}: {e}",
            self.stream + 1
        ))
    }
}

/// One chunk as a stream ran it, for verification and the timeline.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ChunkStat {
    /// The chunk's index in this run's plan.
    pub chunk: usize,
    /// The chunk's stable name: its file's identity and byte range.
    pub key: plan::ChunkKey,
    pub table: String,
    /// Index of the table in the plan (names can repeat across schemas).
    #[serde(skip)]
    pub table_index: usize,
    /// Rows the server confirmed for this chunk's COPY (records converted, in a dry run).
    pub rows: u64,
    pub bytes: u64,
    /// Seconds since the load started.
    pub start: f64,
    pub end: f64,
}

impl ChunkStat {
    /// A chunk that loaded, its times measured from the start of the load.
    fn of(plan: &Plan, chunk: &Chunk, o: ChunkOutcome, start: Duration, end: Duration) -> Self {
        let t = plan.inputs[chunk.input].table;
        ChunkStat {
            chunk: chunk.id,
            key: chunk.key(&plan.inputs),
            table: plan.tables[t].table.name.clone(),
            table_index: t,
            rows: o.records,
            bytes: o.bytes,
            start: start.as_secs_f64(),
            end: end.as_secs_f64(),
        }
    }
}

/// Where a stream's time went, summed over its chunks: clock reads per message and per
/// block, never per row.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamTiming {
    /// Waiting for input: for the reader thread (reading, decompressing), or for pages of a
    /// mapped file.
    pub read_seconds: f64,
    /// Parsing, converting, validating and encoding: a chunk's time less the other three.
    pub convert_seconds: f64,
    /// Handing messages to the destination, which waits while its socket is full: the
    /// server or the network is slower than the stream.
    pub send_seconds: f64,
    /// Waiting on the server to start and finish each COPY, and for ledger rows and
    /// savepoints.
    pub server_seconds: f64,
}

/// What one stream did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamStats {
    pub stream: usize,
    pub chunks: Vec<ChunkStat>,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Where its time went.
    #[serde(default)]
    pub timing: StreamTiming,
}

/// The outcome of a successful run.
#[derive(Debug)]
pub struct RunOutcome {
    pub streams: Vec<StreamStats>,
    pub elapsed: Duration,
    /// Values converted by the server because sluice does not parse their spelling.
    pub server_conversions: u64,
    /// The strategy that loaded it.
    pub strategy: &'static str,
    /// What the load's server sessions were doing while the streams ran.
    pub server_waits: ServerWaits,
    /// `--jobs auto`'s curve and choice.
    pub calibration: Option<calibrate::Calibration>,
}

/// Words a server error that is not about one row: what happened, without blaming the
/// connection for a cancelled statement.
fn server_failure(e: &DestinationError, stream: usize) -> Failure {
    if e.kind == ErrorKind::Connection {
        return Failure::Server(format!("stream {} lost its connection: {e}", stream + 1));
    }
    if e.kind == ErrorKind::Cancelled {
        return Failure::Server(format!(
            "stream {}'s statement was cancelled by the server: {e}. sluice sets \
             statement_timeout and lock_timeout to 0 for its own sessions, so another session \
             or an administrator cancelled it (pg_cancel_backend)",
            stream + 1
        ));
    }
    Failure::Server(e.to_string())
}

/// Turns a chunk-relative line into a line of the whole file by counting line ends before the
/// chunk (only on the error path).
pub(crate) fn absolute_line(plan: &Plan, chunk: &Chunk, err: &mut InputError) {
    let (Some(line), true) = (err.line, chunk.start > 0) else {
        return;
    };
    if let Some(Some(at)) = lines_at(plan, chunk.input, &[chunk.start]).first() {
        err.line = Some(line + at - 1);
    }
}

/// The 1-based line on which each of `offsets` (ascending) of input `input` falls, counting
/// line ends in one read of the input up to the last offset (only on the error path). `None`
/// where the input cannot be read again (standard input).
pub(crate) fn lines_at(plan: &Plan, input: usize, offsets: &[u64]) -> Vec<Option<u64>> {
    let source = &plan.inputs[input];
    let head = Chunk {
        id: 0,
        input,
        start: 0,
        end: Some(offsets.last().copied().unwrap_or(0)),
    };
    let Ok(mut reader) = source::open_chunk(source, &head) else {
        return vec![None; offsets.len()];
    };
    let nl = source.dialect.line_ending.terminator();
    let mut out = Vec::with_capacity(offsets.len());
    let mut buf = vec![0u8; 1 << 20];
    let (mut pos, mut lines) = (0u64, 1u64);
    while out.len() < offsets.len() {
        let k = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        let block = &buf[..k];
        let mut from = 0usize;
        while let Some(&want) = offsets.get(out.len()).filter(|&&o| o < pos + k as u64) {
            let upto = (want - pos) as usize;
            lines += memchr::memchr_iter(nl, &block[from..upto]).count() as u64;
            from = upto;
            out.push(Some(lines));
        }
        lines += memchr::memchr_iter(nl, &block[from..]).count() as u64;
        pos += k as u64;
    }
    // Offsets at the very end of what was read (or past it): the line so far.
    out.resize(offsets.len(), Some(lines));
    out
}

/// The column a server error names, among the table's loaded ones: its index, and how a
/// message shows it (`name (type)`).
fn server_column(table: &plan::TablePlan, e: &DestinationError) -> (Option<usize>, Option<String>) {
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

/// What every chunk of a run shares.
struct RunContext<'a, D: Destination> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    abort: &'a AtomicBool,
    dest: &'a D,
    /// The chunks each stream has taken, to find the rows behind a key on the error path.
    taken: &'a Mutex<Vec<Vec<usize>>>,
    /// Every table's counters, for how much of the input the load has read.
    counters: &'a [Counters],
}

impl<D: Destination> RunContext<'_, D> {
    /// Rows converted and bytes read so far, over every table.
    fn seen(&self) -> (u64, u64) {
        self.counters.iter().fold((0, 0), |(r, b), c| {
            (
                r + c.rows.load(Ordering::Relaxed),
                b + c.bytes.load(Ordering::Relaxed),
            )
        })
    }

    /// Rejects record `index` of `chunk`, which the server refused with `e`.
    fn server_reject(
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

    fn chunks_of(&self, stream: usize) -> Vec<&Chunk> {
        let taken = lock(self.taken);
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

    /// Maps a server error during a chunk's COPY to the row it names.
    fn copy_error(&self, stream: usize, chunk: &Chunk, e: DestinationError) -> Failure {
        match e.kind {
            ErrorKind::Conflict { blocker } => {
                return self.copy_conflict(stream, blocker, chunk, &e)
            }
            ErrorKind::Connection | ErrorKind::Cancelled => return server_failure(&e, stream),
            ErrorKind::Rejected | ErrorKind::Other | ErrorKind::Usage => {}
        }
        let plan = self.plan;
        let input = &plan.inputs[chunk.input];
        if e.record.is_none() {
            // A check that runs after the COPY's last row (a foreign key): find the row by key.
            if let Some(err) = self.keyed_error(&e, &[chunk], chunk) {
                return err;
            }
            return Failure::Server(format!("{} (while loading {})", e, input.display));
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
    fn unit_error(&self, stream: usize, unit: &Unit, e: DestinationError) -> Failure {
        let chunks: Vec<&Chunk> = unit.chunks.iter().map(|&c| &self.plan.chunks[c]).collect();
        match (e.kind, chunks.first()) {
            (ErrorKind::Rejected, Some(&first)) => self
                .keyed_error(&e, &chunks, first)
                .unwrap_or_else(|| server_failure(&e, stream)),
            _ => server_failure(&e, stream),
        }
    }

    /// A COPY the watchdog cancelled because it waited on a sibling stream.
    fn copy_conflict(
        &self,
        stream: usize,
        blocker: usize,
        chunk: &Chunk,
        e: &DestinationError,
    ) -> Failure {
        let search = KeySearch::new(self.plan, self.dest);
        let index = e.index.as_deref();
        let located = index
            .and_then(|i| self.dest.key_columns(i))
            .zip(e.record)
            .and_then(|(cols, n)| search.key_at(chunk, n, &cols));
        let Some((key, at)) = located else {
            return self.unnamed_conflict(stream, blocker, index);
        };
        let waiter = conflict::Row {
            chunk: chunk.id,
            at,
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
    fn deferred_error(&self, stream: usize, e: DestinationError) -> Failure {
        let mine = self.chunks_of(stream);
        let Some(first) = mine.first().copied() else {
            return server_failure(&e, stream);
        };
        let blocker = match e.kind {
            ErrorKind::Conflict { blocker } => blocker,
            ErrorKind::Connection | ErrorKind::Cancelled => return server_failure(&e, stream),
            ErrorKind::Rejected | ErrorKind::Other | ErrorKind::Usage => {
                return self.keyed_error(&e, &mine, first).unwrap_or_else(|| {
                    Failure::Server(format!("a deferred constraint check failed: {e}"))
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

/// Why a chunk failed: the destination refused it (mapped to rows by the caller, or redone
/// by the strategy), or anything else.
enum ChunkError {
    Destination(DestinationError),
    Failed(Failure),
}

/// Runs one chunk on a stream (or on none, for a dry run), and writes its ledger row in the
/// stream's transaction when `record` says the load keeps one. With `savepoints` false (a
/// staged COPY FREEZE, which refuses them), a row the server refuses fails the chunk even
/// when rows may be rejected: the strategy redoes it where savepoints work.
#[allow(clippy::too_many_arguments)]
fn run_chunk<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    mut stream: Option<&mut D::Stream<'_>>,
    encoder: &mut D::Encoder<'_>,
    counters: &Counters,
    record: Option<&JobRun>,
    savepoints: bool,
    timing: &mut StreamTiming,
) -> Result<ChunkOutcome, ChunkError> {
    let outcome = match ctx.opts.rejects.as_deref() {
        None => {
            let mut added = Added::default();
            let attempt = Attempt {
                counters,
                added: &mut added,
                select: None,
                on_reject: None,
                timing: &mut *timing,
            };
            copy_once(ctx, chunk, stream.as_deref_mut(), encoder, attempt)?
        }
        Some(rejects) => {
            let stream = stream.as_deref_mut();
            isolate(
                ctx,
                rejects,
                chunk,
                stream,
                encoder,
                counters,
                savepoints,
                &mut *timing,
            )?
        }
    };
    if let Some(s) = stream {
        if let Some((job, r)) =
            record.and_then(|j| Some((j.job, j.record(chunk, outcome.records)?)))
        {
            timed(&mut timing.server_seconds, || s.record_chunks(job, &[r]))
                .map_err(ChunkError::Destination)?;
            crate::faults::point("copied");
        }
    }
    Ok(outcome)
}

/// One COPY's worth of a chunk: which records it sends and where refused ones go.
struct Attempt<'a> {
    counters: &'a Counters,
    added: &'a mut Added,
    select: Option<Selection<'a>>,
    on_reject: Option<&'a mut dyn FnMut(ClientReject) -> Result<(), Failure>>,
    timing: &'a mut StreamTiming,
}

/// Runs `f`, adding its time to `seconds`.
fn timed<T>(seconds: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *seconds += t.elapsed().as_secs_f64();
    r
}

/// Sends a chunk's records (those `attempt` selects) in one COPY.
fn copy_once<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    mut stream: Option<&mut D::Stream<'_>>,
    encoder: &mut D::Encoder<'_>,
    attempt: Attempt<'_>,
) -> Result<ChunkOutcome, ChunkError> {
    let (plan, opts, abort) = (ctx.plan, ctx.opts, ctx.abort);
    let t = plan.inputs[chunk.input].table;
    let started = Instant::now();
    let timing = attempt.timing;
    let (mut read, mut send, mut server) = (Duration::ZERO, 0f64, 0f64);
    if let Some(s) = stream.as_deref_mut() {
        timed(&mut server, || s.begin_copy(t)).map_err(ChunkError::Destination)?;
    }
    let job = ChunkJob {
        plan,
        chunk,
        encoder,
        framing: ctx.dest.framing(t),
        copy_buffer: opts.copy_buffer,
        abort,
        counters: attempt.counters,
        added: attempt.added,
        select: attempt.select,
        on_reject: attempt.on_reject,
        read: &mut read,
    };
    let mut send_failed = None;
    let result = convert_chunk(job, |bytes| {
        if let Some(s) = stream.as_deref_mut() {
            if let Err(e) = timed(&mut send, || s.send(bytes)) {
                send_failed = Some(e);
                return Err(Failure::Aborted);
            }
        }
        Ok(())
    });
    let finished = stream
        .filter(|_| result.is_ok() && send_failed.is_none())
        .map(|s| timed(&mut server, || s.finish_copy()));
    let read = read.as_secs_f64();
    timing.read_seconds += read;
    timing.send_seconds += send;
    timing.server_seconds += server;
    timing.convert_seconds += (started.elapsed().as_secs_f64() - read - send - server).max(0.0);
    let outcome = match (result, send_failed) {
        (Ok(o), None) => o,
        (_, Some(e)) => return Err(ChunkError::Destination(e)),
        (Err(Failure::Input(mut e)), None) => {
            absolute_line(plan, chunk, &mut e);
            return Err(ChunkError::Failed(Failure::Input(e)));
        }
        (Err(e), None) => return Err(ChunkError::Failed(e)),
    };
    if let Some(finished) = finished {
        let rows = finished.map_err(ChunkError::Destination)?;
        if rows != outcome.records {
            return Err(ChunkError::Failed(Failure::Server(format!(
                "the server stored {rows} rows from {} where sluice sent {}",
                plan.inputs[chunk.input].display, outcome.records
            ))));
        }
    }
    Ok(outcome)
}

/// Whether a server error is about rows that isolation can single out: data the server
/// refused, or a key a sibling stream holds uncommitted (the later row is the reject).
fn isolatable(e: &DestinationError) -> bool {
    matches!(e.kind, ErrorKind::Rejected | ErrorKind::Conflict { .. })
}

/// The chunk index of the `n`-th record (1-based) an attempt over `lo..hi` sent, skipping
/// `skip`.
fn nth_sent(lo: u64, hi: u64, skip: &BTreeSet<u64>, n: u64) -> Option<u64> {
    let mut index = lo.checked_add(n)? - 1;
    // Each skipped index at or below the candidate pushes it one further.
    let mut counted = 0;
    loop {
        let skipped = skip.range(lo..=index).count();
        if skipped == counted {
            break;
        }
        index += (skipped - counted) as u64;
        counted = skipped;
    }
    (index < hi).then_some(index)
}

/// Loads a chunk while rows may be rejected: rows the encoder refuses are dropped before
/// they are sent; a COPY the server refuses is rolled back to its savepoint and sent again
/// without the row the error names, or, when the error names none (a foreign key checked
/// after the last row), in halves, until each bad row stands alone. Every good row loads, once.
/// Each attempt re-reads the chunk from its start, so a chunk's k server-side rejects cost
/// about k more reads of it.
#[allow(clippy::too_many_arguments)]
fn isolate<D: Destination>(
    ctx: &RunContext<'_, D>,
    rejects: &Rejects,
    chunk: &Chunk,
    mut stream: Option<&mut D::Stream<'_>>,
    encoder: &mut D::Encoder<'_>,
    counters: &Counters,
    savepoints: bool,
    timing: &mut StreamTiming,
) -> Result<ChunkOutcome, ChunkError> {
    let plan = ctx.plan;
    // Without savepoints, one attempt: the encoder's rejects are dropped, the server's fail.
    let mut skip: BTreeSet<u64> = BTreeSet::new();
    let mut ranges: Vec<(u64, u64)> = vec![(1, u64::MAX)];
    let mut total = ChunkOutcome::default();
    let mut records: Option<u64> = None;
    // The first attempt shows on the progress display as it goes; if it fails, what it
    // showed is taken back, and the chunk shows once it is done.
    let mut first = true;
    let mut shown = true;
    let quiet = Counters::default();
    while let Some((lo, hi)) = ranges.pop() {
        let hi = records.map_or(hi, |n| hi.min(n + 1));
        if lo >= hi || (records.is_some() && skip.range(lo..hi).count() as u64 == hi - lo) {
            continue;
        }
        if let Some(s) = stream.as_deref_mut().filter(|_| savepoints) {
            timed(&mut timing.server_seconds, || s.savepoint()).map_err(ChunkError::Destination)?;
        }
        let mut added = Added::default();
        let mut dropped: Vec<u64> = Vec::new();
        let result = {
            let input = chunk.input;
            let mut on_reject = |r: ClientReject| {
                dropped.push(r.index);
                let reject = Reject {
                    input,
                    offset: r.offset,
                    chunk_line: r.chunk_line,
                    raw: r.raw,
                    error: r.error,
                    cause: r.cause,
                    by_server: false,
                };
                rejects.add(reject, ctx.seen())
            };
            let attempt = Attempt {
                counters: if first { counters } else { &quiet },
                added: &mut added,
                select: Some(Selection {
                    lo,
                    hi,
                    skip: &skip,
                }),
                on_reject: Some(&mut on_reject),
                timing: &mut *timing,
            };
            copy_once(ctx, chunk, stream.as_deref_mut(), encoder, attempt)
        };
        skip.extend(dropped);
        let was_first = std::mem::take(&mut first);
        let e = match result {
            Ok(o) => {
                if let Some(s) = stream.as_deref_mut().filter(|_| savepoints) {
                    timed(&mut timing.server_seconds, || s.release_savepoint())
                        .map_err(ChunkError::Destination)?;
                }
                total.records += o.records;
                total.bytes = total.bytes.max(o.bytes);
                continue;
            }
            Err(ChunkError::Destination(e)) if isolatable(&e) => e,
            Err(e) => return Err(e),
        };
        let Some(s) = stream.as_deref_mut().filter(|_| savepoints) else {
            return Err(ChunkError::Destination(e));
        };
        timed(&mut timing.server_seconds, || s.rollback_to_savepoint())
            .map_err(ChunkError::Destination)?;
        if was_first {
            counters.rows.fetch_sub(added.rows, Ordering::Relaxed);
            counters.bytes.fetch_sub(added.bytes, Ordering::Relaxed);
            shown = false;
        }
        if let Some(i) = e.record.and_then(|n| nth_sent(lo, hi, &skip, n)) {
            // The error names its row: reject it, and send the rows before and after it.
            ctx.server_reject(rejects, chunk, i, &e)?;
            skip.insert(i);
            ranges.push((i + 1, hi));
            ranges.push((lo, i));
            continue;
        }
        let n = match records {
            Some(n) => n,
            None => {
                let n = chunk::count_records(plan, chunk).map_err(ChunkError::Failed)?;
                records = Some(n);
                n
            }
        };
        let hi = hi.min(n + 1);
        let left = (hi - lo.min(hi)) - skip.range(lo..hi).count() as u64;
        match left {
            0 => return Err(ChunkError::Destination(e)),
            1 => {
                let i = (lo..hi).find(|i| !skip.contains(i)).unwrap_or(lo);
                ctx.server_reject(rejects, chunk, i, &e)?;
                skip.insert(i);
            }
            _ => {
                let mid = lo + (hi - lo) / 2;
                ranges.push((mid, hi));
                ranges.push((lo, mid));
            }
        }
    }
    if !shown {
        counters.rows.fetch_add(total.records, Ordering::Relaxed);
        counters.bytes.fetch_add(total.bytes, Ordering::Relaxed);
    }
    Ok(total)
}

/// One stream's connections: its long transaction (direct units) and, opened when a staged
/// unit first comes, the one whose transactions each fill one staging table.
struct StreamPair<S> {
    direct: Option<S>,
    staged: Option<S>,
}

/// Runs a plan on `jobs` streams of `dest` with `strategy`, and publishes all of it, or
/// nothing.
pub fn execute<D: Destination>(
    plan: &Plan,
    opts: &RunOptions,
    dest: &D,
    strategy: &dyn Strategy<D>,
    counters: &[Counters],
) -> Result<RunOutcome, Failure> {
    let started = Instant::now();
    if !opts.dry_run {
        strategy.prepare(plan, dest)?;
    }
    let units = strategy::keep_references_together(plan, strategy.route(plan));
    let queue: Mutex<VecDeque<Unit>> = Mutex::new(units.into());
    let abort = AtomicBool::new(false);
    let first_error: Mutex<Option<Failure>> = Mutex::new(None);
    let jobs = opts.jobs.max(1);
    let fail = |e: Failure| {
        abort.store(true, Ordering::SeqCst);
        let mut slot = lock(&first_error);
        if slot.is_none() && !matches!(e, Failure::Aborted) {
            *slot = Some(e);
        }
    };
    let conversions = std::sync::atomic::AtomicU64::new(0);
    // The watch catches streams waiting on each other, and samples what every stream's
    // session is doing, for the verdict (one stream included).
    let watched = !opts.dry_run;
    // Stream `n`'s staged units run on a second connection, watched as `jobs + n`.
    if watched {
        dest.watch(2 * jobs)
            .map_err(|e| Failure::Connect(e.to_string()))?;
    }
    let taken: Mutex<Vec<Vec<usize>>> = Mutex::new(vec![Vec::new(); 2 * jobs]);
    let ctx = RunContext {
        plan,
        opts,
        abort: &abort,
        dest,
        taken: &taken,
        counters,
    };
    let staged_records: Mutex<Vec<ChunkRecord>> = Mutex::new(strategy.carried());
    let calibrating = opts.calibrate && jobs > 1;
    let gate = calibrate::Gate::new(jobs, calibrating);
    let streams_done = AtomicBool::new(false);
    let results: Vec<(Option<D::Stream<'_>>, StreamStats)> = std::thread::scope(|scope| {
        if calibrating {
            let (gate, queue, streams_done) = (&gate, &queue, &streams_done);
            std::thread::Builder::new()
                .name("sluice-calibrate".into())
                .spawn_scoped(scope, move || {
                    let work_left = || !lock(queue).is_empty();
                    gate.calibrate(jobs, counters, work_left, streams_done)
                })
                .expect("spawning the calibrator");
        }
        let handles: Vec<_> = (0..jobs)
            .map(|n| {
                let (ctx, queue, abort, fail, conversions, staged_records, gate) = (
                    &ctx,
                    &queue,
                    &abort,
                    &fail,
                    &conversions,
                    &staged_records,
                    &gate,
                );
                std::thread::Builder::new()
                    .name(format!("sluice-stream-{n}"))
                    .spawn_scoped(scope, move || {
                        let mut stats = StreamStats {
                            stream: n,
                            ..Default::default()
                        };
                        // Under --jobs auto, a stream runs once the calibrator admits it.
                        if !gate.wait_admitted(n, abort) {
                            return (None, stats);
                        }
                        let t0 = Instant::now();
                        let mut streams: StreamPair<D::Stream<'_>> = StreamPair {
                            direct: None,
                            staged: None,
                        };
                        let mut encoders: Vec<Option<D::Encoder<'_>>> =
                            (0..plan.tables.len()).map(|_| None).collect();
                        let mut failed = false;
                        let mut lost = LostConnections {
                            stream: n,
                            retries_left: opts.retries,
                            retries: opts.retries,
                            on_direct: Vec::new(),
                        };
                        'run: loop {
                            'units: loop {
                                if abort.load(Ordering::Relaxed) || !gate.may_continue(n) {
                                    break;
                                }
                                let next = lock(queue).pop_front();
                                let Some(unit) = next else { break };
                                // Staged units run on a second connection, watched as stream
                                // `jobs + n`, since each commits on its own.
                                let (slot, id) = match unit.staged {
                                    Some(_) => (&mut streams.staged, jobs + n),
                                    None => (&mut streams.direct, n),
                                };
                                // A lost connection: its uncommitted work goes back on the
                                // queue, and the stream connects anew after a pause.
                                macro_rules! lose {
                                    ($e:expr) => {{
                                        let e = $e;
                                        *slot = None;
                                        if lost
                                            .retry(ctx, queue, &mut stats, counters, &unit, id, &e)
                                        {
                                            continue 'units;
                                        }
                                        fail(lost.exhausted(&e));
                                        failed = true;
                                        break 'units;
                                    }};
                                }
                                if slot.is_none() && !opts.dry_run {
                                    let opened = dest.open_stream(id).and_then(|mut s| {
                                        // Isolating bad rows needs each check to fire at its
                                        // COPY, under that COPY's savepoint.
                                        if opts.rejects.is_some() && unit.staged.is_none() {
                                            s.check_each_copy()?;
                                        }
                                        Ok(s)
                                    });
                                    match opened {
                                        Ok(s) => *slot = Some(s),
                                        Err(e) if e.kind == ErrorKind::Connection => {
                                            lose!(e)
                                        }
                                        Err(e) => {
                                            fail(match e.kind {
                                                ErrorKind::Connection => {
                                                    Failure::Connect(e.to_string())
                                                }
                                                _ => server_failure(&e, n),
                                            });
                                            failed = true;
                                            break;
                                        }
                                    }
                                }
                                if let (Some(s), Some(_)) = (slot.as_mut(), unit.staged) {
                                    if let Err(e) = strategy.begin_unit(dest, s, &unit) {
                                        if e.kind == ErrorKind::Connection {
                                            lose!(e)
                                        }
                                        fail(server_failure(&e, n));
                                        failed = true;
                                        break;
                                    }
                                }
                                let mark = stats.chunks.len();
                                // A staged unit the strategy redoes another way: its chunks'
                                // rows were rolled back, and the new units go first.
                                macro_rules! requeue {
                                    ($units:expr) => {{
                                        for done in stats.chunks.drain(mark..) {
                                            let k = &counters[done.table_index];
                                            k.chunks_done.fetch_sub(1, Ordering::Relaxed);
                                            k.rows.fetch_sub(done.rows, Ordering::Relaxed);
                                            k.bytes.fetch_sub(done.bytes, Ordering::Relaxed);
                                        }
                                        let mut q = lock(queue);
                                        for u in $units.into_iter().rev() {
                                            q.push_front(u);
                                        }
                                        continue 'units;
                                    }};
                                }
                                let mut unit_records: Vec<ChunkRecord> = Vec::new();
                                for &c in &unit.chunks {
                                    if abort.load(Ordering::Relaxed) {
                                        break 'units;
                                    }
                                    let chunk = &plan.chunks[c];
                                    lock(ctx.taken)[id].push(chunk.id);
                                    let t = plan.inputs[chunk.input].table;
                                    let encoder =
                                        encoders[t].get_or_insert_with(|| dest.encoder(t));
                                    let chunk_start = Instant::now();
                                    let stream = slot.as_mut();
                                    // A direct chunk's ledger row goes in with its rows; a
                                    // staged one's, with the publish.
                                    let record = match unit.staged {
                                        None => opts.job.as_ref(),
                                        Some(_) => None,
                                    };
                                    match run_chunk(
                                        ctx,
                                        chunk,
                                        stream,
                                        encoder,
                                        &counters[t],
                                        record,
                                        unit.staged.is_none(),
                                        &mut stats.timing,
                                    ) {
                                        Ok(o) => {
                                            if unit.staged.is_some() {
                                                if let Some(r) = opts
                                                    .job
                                                    .as_ref()
                                                    .and_then(|j| j.record(chunk, o.records))
                                                {
                                                    unit_records.push(r);
                                                }
                                            } else {
                                                lost.on_direct.push(c);
                                            }
                                            stats.chunks.push(ChunkStat::of(
                                                plan,
                                                chunk,
                                                o,
                                                chunk_start - started,
                                                started.elapsed(),
                                            ));
                                            counters[t].chunks_done.fetch_add(1, Ordering::Relaxed);
                                        }
                                        Err(ChunkError::Destination(e))
                                            if e.kind == ErrorKind::Connection && !opts.dry_run =>
                                        {
                                            lose!(e)
                                        }
                                        Err(ChunkError::Destination(e)) => {
                                            // A staged unit the strategy can redo another way
                                            // (a file whose rows span partitions) goes back on
                                            // the queue; its chunks' rows were rolled back.
                                            let redo = match slot.as_mut() {
                                                Some(s) if unit.staged.is_some() => {
                                                    strategy.redo(dest, s, &unit, chunk, &e)
                                                }
                                                _ => None,
                                            };
                                            if let Some(units) = redo {
                                                requeue!(units);
                                            }
                                            fail(ctx.copy_error(id, chunk, e));
                                            failed = true;
                                            break 'units;
                                        }
                                        Err(ChunkError::Failed(e)) => {
                                            fail(e);
                                            failed = true;
                                            break 'units;
                                        }
                                    }
                                }
                                if let (Some(s), Some(_)) = (slot.as_mut(), unit.staged) {
                                    if let Err(e) = strategy.end_unit(dest, s, &unit, &unit_records)
                                    {
                                        if e.kind == ErrorKind::Connection {
                                            lose!(e)
                                        }
                                        // A key the staged rows hold twice, found by the
                                        // index build: redone where rows can be rejected.
                                        let first = unit.chunks.first().map(|&c| &plan.chunks[c]);
                                        if let Some(units) =
                                            first.and_then(|c| strategy.redo(dest, s, &unit, c, &e))
                                        {
                                            requeue!(units);
                                        }
                                        fail(ctx.unit_error(n, &unit, e));
                                        failed = true;
                                        break;
                                    }
                                    lock(staged_records).append(&mut unit_records);
                                }
                            }
                            // The strategy's build step (deferred checks, for direct) runs
                            // here, before the barrier, where a wait on a sibling is still
                            // watched and everything can roll back.
                            let Some(s) = streams.direct.as_mut() else {
                                break;
                            };
                            if failed || abort.load(Ordering::Relaxed) {
                                break;
                            }
                            match strategy.build(s) {
                                Ok(()) => break,
                                Err(e) if e.kind == ErrorKind::Connection => {
                                    streams.direct = None;
                                    let none = Unit {
                                        chunks: Vec::new(),
                                        staged: None,
                                    };
                                    if lost.retry(ctx, queue, &mut stats, counters, &none, n, &e) {
                                        continue 'run;
                                    }
                                    fail(lost.exhausted(&e));
                                    break;
                                }
                                Err(e) => {
                                    fail(ctx.deferred_error(n, e));
                                    break;
                                }
                            }
                        }
                        // Its sessions only wait for the commit from here on.
                        dest.stream_done(n);
                        dest.stream_done(jobs + n);
                        for c in &stats.chunks {
                            stats.rows += c.rows;
                            stats.bytes += c.bytes;
                        }
                        let converted: u64 = encoders
                            .iter()
                            .flatten()
                            .map(|e| e.server_conversions())
                            .sum();
                        conversions.fetch_add(converted, Ordering::Relaxed);
                        stats.seconds = t0.elapsed().as_secs_f64();
                        (streams.direct, stats)
                    })
                    .expect("spawning a stream thread")
            })
            .collect();
        let results = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| (None, StreamStats::default())))
            .collect();
        streams_done.store(true, Ordering::SeqCst);
        results
    });
    let server_waits = match watched {
        true => dest.stop_watching(),
        false => ServerWaits::default(),
    };
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        // Dropping the streams closes their connections: every transaction rolls back.
        drop(results);
        strategy.abandon(dest, &e);
        // A bad row says so in main.rs; a lost connection or a server failure here says it too.
        let nothing = "nothing was committed: every stream's transaction rolled back";
        return Err(match e {
            Failure::Server(m) => Failure::Server(format!("{m}; {nothing}")),
            Failure::Connect(m) => Failure::Connect(format!("{m}; {nothing}")),
            other => other,
        });
    }
    let (streams, mut stats): (Vec<Option<D::Stream<'_>>>, Vec<StreamStats>) =
        results.into_iter().unzip();
    // Rows rejected beyond a share of the input: nothing may commit.
    let loaded: u64 = stats.iter().flat_map(|s| &s.chunks).map(|c| c.rows).sum();
    let within = |late: u64| match &opts.rejects {
        Some(r) => r.check_final(loaded + late),
        None => Ok(()),
    };
    if let Err(e) = within(0) {
        drop(streams);
        strategy.abandon(dest, &e);
        return Err(e);
    }
    // Every stream finished cleanly: the strategy makes the load visible, loading on its
    // publish stream whatever it kept for it (rows of staged tables that could not be staged).
    let mut late: Vec<ChunkStat> = Vec::new();
    let mut run = |s: &mut D::Stream<'_>, chunks: &[usize]| -> Result<(), Failure> {
        let mut encoders: Vec<Option<D::Encoder<'_>>> =
            (0..plan.tables.len()).map(|_| None).collect();
        for &c in chunks {
            let chunk = &plan.chunks[c];
            let t = plan.inputs[chunk.input].table;
            let encoder = encoders[t].get_or_insert_with(|| dest.encoder(t));
            let chunk_start = Instant::now();
            // The publish's chunks are timed apart from the streams': the report counts
            // them with the first stream's rows, not its time.
            let mut timing = StreamTiming::default();
            match run_chunk(
                &ctx,
                chunk,
                Some(&mut *s),
                encoder,
                &counters[t],
                None,
                true,
                &mut timing,
            ) {
                Ok(o) => {
                    if let Some(r) = opts.job.as_ref().and_then(|j| j.record(chunk, o.records)) {
                        lock(&staged_records).push(r);
                    }
                    late.push(ChunkStat::of(
                        plan,
                        chunk,
                        o,
                        chunk_start - started,
                        started.elapsed(),
                    ));
                    counters[t].chunks_done.fetch_add(1, Ordering::Relaxed);
                }
                Err(ChunkError::Destination(e)) => return Err(ctx.copy_error(0, chunk, e)),
                Err(ChunkError::Failed(f)) => return Err(f),
            }
        }
        within(late.iter().map(|c| c.rows).sum())?;
        // Every staged chunk's ledger row, and these chunks', commit with the publish.
        if let Some(job) = &opts.job {
            let records = std::mem::take(&mut *lock(&staged_records));
            s.record_chunks(job.job, &records).map_err(|e| {
                Failure::Server(format!("recording the publish in the ledger: {e}"))
            })?;
        }
        Ok(())
    };
    let published = strategy.publish(dest, streams.into_iter().flatten().collect(), &mut run);
    if let Err(e) = published {
        strategy.abandon(dest, &e);
        return Err(e);
    }
    // The publish stream's chunks are counted with the first stream's.
    if let Some(first) = stats.first_mut() {
        for c in late {
            first.rows += c.rows;
            first.bytes += c.bytes;
            first.chunks.push(c);
        }
    }
    Ok(RunOutcome {
        streams: stats,
        elapsed: started.elapsed(),
        server_conversions: conversions.into_inner(),
        strategy: strategy.name(),
        server_waits,
        calibration: calibrating.then(|| gate.result()),
    })
}
