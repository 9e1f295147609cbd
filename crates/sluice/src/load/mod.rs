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

pub mod chunk;
pub mod conflict;
pub mod ledger;
pub mod plan;
pub mod source;
pub mod stage;
pub mod strategy;

use crate::failure::Failure;
use chunk::{convert_chunk, locate_record, ChunkJob, ChunkOutcome, Counters};
use conflict::{sibling_conflict, KeySearch, NamedKey};
use ledger::JobRun;
use plan::{Chunk, Plan};
use sluice_core::destination::{
    Destination, DestinationError, DestinationStream, ErrorKey, ErrorKind, RecordEncoder,
};
use sluice_core::error::InputError;
use sluice_core::ledger::ChunkRecord;
use std::collections::VecDeque;
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

/// What one stream did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamStats {
    pub stream: usize,
    pub chunks: Vec<ChunkStat>,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
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
    let input = &plan.inputs[chunk.input];
    let head = Chunk {
        id: chunk.id,
        input: chunk.input,
        start: 0,
        end: Some(chunk.start),
    };
    let Ok(mut r) = source::open_chunk(input, &head) else {
        return;
    };
    let nl = input.dialect.line_ending.terminator();
    let mut buf = vec![0u8; 1 << 20];
    let mut before = 0u64;
    while let Ok(k) = r.read(&mut buf) {
        if k == 0 {
            break;
        }
        before += memchr::memchr_iter(nl, &buf[..k]).count() as u64;
    }
    err.line = Some(line + before);
}

/// What every chunk of a run shares.
struct RunContext<'a, D: Destination> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    abort: &'a AtomicBool,
    dest: &'a D,
    /// The chunks each stream has taken, to find the rows behind a key on the error path.
    taken: &'a Mutex<Vec<Vec<usize>>>,
}

impl<D: Destination> RunContext<'_, D> {
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
        let col_idx = e
            .column
            .as_ref()
            .and_then(|c| table.columns.iter().position(|col| &col.name == c));
        let mut err = InputError::new(&input.display, format!("rejected by the server: {e}"));
        err.column = col_idx.map(|i| {
            let c = &table.columns[i];
            format!("{} ({})", c.name, c.type_name)
        });
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
        if let Some(parent) = &e.referenced_table {
            if plan.tables.iter().any(|t| &t.table.name == parent) {
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

/// Runs one chunk on a stream (or on none, for a dry run).
fn run_chunk<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    mut stream: Option<&mut D::Stream<'_>>,
    encoder: &mut D::Encoder<'_>,
    counters: &Counters,
    record: Option<&JobRun>,
) -> Result<ChunkOutcome, ChunkError> {
    let (plan, opts, abort) = (ctx.plan, ctx.opts, ctx.abort);
    let t = plan.inputs[chunk.input].table;
    if let Some(s) = stream.as_deref_mut() {
        s.begin_copy(t).map_err(ChunkError::Destination)?;
    }
    let job = ChunkJob {
        plan,
        chunk,
        encoder,
        framing: ctx.dest.framing(t),
        copy_buffer: opts.copy_buffer,
        abort,
        counters,
    };
    let mut send_failed = None;
    let result = convert_chunk(job, |bytes| {
        if let Some(s) = stream.as_deref_mut() {
            if let Err(e) = s.send(bytes) {
                send_failed = Some(e);
                return Err(Failure::Aborted);
            }
        }
        Ok(())
    });
    let outcome = match (result, send_failed) {
        (Ok(o), None) => o,
        (_, Some(e)) => return Err(ChunkError::Destination(e)),
        (Err(Failure::Input(mut e)), None) => {
            absolute_line(plan, chunk, &mut e);
            return Err(ChunkError::Failed(Failure::Input(e)));
        }
        (Err(e), None) => return Err(ChunkError::Failed(e)),
    };
    if let Some(s) = stream {
        let rows = s.finish_copy().map_err(ChunkError::Destination)?;
        if rows != outcome.records {
            return Err(ChunkError::Failed(Failure::Server(format!(
                "the server stored {rows} rows from {} where sluice sent {}",
                plan.inputs[chunk.input].display, outcome.records
            ))));
        }
        if let Some((job, r)) = record.and_then(|j| Some((j.job, j.record(chunk, rows)?))) {
            s.record_chunks(job, &[r])
                .map_err(ChunkError::Destination)?;
            crate::faults::point("copied");
        }
    }
    Ok(outcome)
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
    let queue: Mutex<VecDeque<Unit>> = Mutex::new(strategy.route(plan).into());
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
    // One stream cannot wait on itself; two or more are watched.
    let watched = !opts.dry_run && jobs >= 2;
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
    };
    let staged_records: Mutex<Vec<ChunkRecord>> = Mutex::new(Vec::new());
    let results: Vec<(Option<D::Stream<'_>>, StreamStats)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|n| {
                let (ctx, queue, abort, fail, conversions, staged_records) =
                    (&ctx, &queue, &abort, &fail, &conversions, &staged_records);
                std::thread::Builder::new()
                    .name(format!("sluice-stream-{n}"))
                    .spawn_scoped(scope, move || {
                        let mut stats = StreamStats {
                            stream: n,
                            ..Default::default()
                        };
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
                                if abort.load(Ordering::Relaxed) {
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
                                    match dest.open_stream(id) {
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
                                                for done in stats.chunks.drain(mark..) {
                                                    counters[done.table_index]
                                                        .chunks_done
                                                        .fetch_sub(1, Ordering::Relaxed);
                                                }
                                                let mut q = lock(queue);
                                                for u in units.into_iter().rev() {
                                                    q.push_front(u);
                                                }
                                                continue 'units;
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
                                    if let Err(e) = strategy.end_unit(dest, s, &unit) {
                                        if e.kind == ErrorKind::Connection {
                                            lose!(e)
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
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| (None, StreamStats::default())))
            .collect()
    });
    if watched {
        dest.stop_watching();
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        // Dropping the streams closes their connections: every transaction rolls back.
        drop(results);
        strategy.abandon(dest);
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
            match run_chunk(&ctx, chunk, Some(&mut *s), encoder, &counters[t], None) {
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
        strategy.abandon(dest);
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
    })
}
