//! Running a plan: convert and send in parallel on `jobs` streams, then make everything
//! visible or nothing.
//!
//! Each stream is a connection in one open transaction, fed units of work from a shared queue
//! (biggest first; where the destination says that writers of one table contend, a table no
//! other stream is loading first: [`queue`]). Inside a stream three things overlap: a reader
//! thread reads and decompresses, the stream's thread parses, converts and encodes, and the
//! destination writes the previous message to its socket. When a chunk fails, every stream
//! stops and rolls back; only when every stream has finished cleanly does the strategy
//! publish (commit every stream, or switch staging tables in). The guarantee and its one
//! window (a crash between the first and last COMMIT) are documented in the README.
//!
//! [`execute`] is a sequence of named steps: prepare, queue the work, watch, run the streams
//! ([`worker`]), check the barrier, publish ([`publish`]). The engine speaks to the database
//! only through [`Destination`] (`sluice-core`).
//!
//! Two streams can wait on each other across the barrier (a key both insert: the later insert
//! waits for the earlier transaction, which waits at the barrier). So before a stream reaches
//! the barrier it fires its deferred constraint checks, and while any stream runs, the
//! destination watches for a stream waiting on a sibling and stops it
//! ([`ErrorKind::Conflict`](sluice_core::destination::ErrorKind::Conflict)); the error then
//! names the key and both rows ([`crate::conflict`]). Nothing is committed in that case.

mod copy;
mod diagnose;
mod lines;
mod publish;
mod queue;
mod worker;

pub(crate) use diagnose::destination_failure;
pub(crate) use lines::{absolute_line, lines_at};
pub use worker::RETRY_PAUSE;

use crate::calibrate::{Calibration, Gate};
use crate::chunk::{ChunkOutcome, Counters};
use crate::events::Host;
use crate::failure::Failure;
use crate::ledger::JobRun;
use crate::plan::{Chunk, ChunkKey, Plan};
use crate::rejects::Rejects;
use crate::strategy::{self, Strategy, Unit};
use queue::Queue;
use sluice_core::destination::{Capabilities, Destination, ServerWaits};
use sluice_core::ledger::ChunkRecord;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here is a push, a pop or a plain assignment).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How to run a plan.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub jobs: usize,
    /// Size of one load message.
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
    /// The server's round trip, when measured: `--jobs auto`'s windows are ten of them at
    /// least, so that TCP reaches its pace on a long path before a stream is judged.
    pub round_trip: Option<Duration>,
    /// How long a stream waits before its first reconnect after a lost connection (doubling
    /// with each retry, up to 16 times this).
    pub retry_pause: Duration,
    /// Commit the streams through prepared transactions named from this prefix (the load's
    /// job must keep a ledger); `None`: plain commits, back to back.
    pub prepare: Option<String>,
}

/// One chunk as a stream ran it, for verification and the timeline.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ChunkStat {
    /// The chunk's index in this run's plan.
    pub chunk: usize,
    /// The chunk's stable name: its file's identity and byte range.
    pub key: ChunkKey,
    pub table: String,
    /// Index of the table in the plan (names can repeat across schemas).
    #[serde(skip)]
    pub table_index: usize,
    /// Rows the server confirmed for this chunk's load (records converted, in a dry run).
    pub rows: u64,
    pub bytes: u64,
    /// Bytes sent to the destination (the wire encoding's size).
    pub wire_bytes: u64,
    /// Seconds since the load started.
    pub start: f64,
    pub end: f64,
}

impl ChunkStat {
    /// A chunk that loaded, its times measured from the start of the load.
    pub(crate) fn of(
        plan: &Plan,
        chunk: &Chunk,
        o: ChunkOutcome,
        start: Duration,
        end: Duration,
    ) -> Self {
        let t = plan.inputs[chunk.input].table;
        ChunkStat {
            chunk: chunk.id,
            key: chunk.key(&plan.inputs),
            table: plan.tables[t].table.name.clone(),
            table_index: t,
            rows: o.records,
            bytes: o.bytes,
            wire_bytes: o.wire_bytes,
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
    /// Waiting on the server to start and finish each chunk's load, and for ledger rows and
    /// savepoints.
    pub server_seconds: f64,
    /// The times the stream stopped to wait on the server (a load's start and finish, a
    /// savepoint): each at least one round trip.
    #[serde(default)]
    pub round_trips: u64,
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
    /// Stretches in which it moved no rows but worked (a staging table's index build,
    /// statistics and commit), for the timeline.
    #[serde(default)]
    pub steps: Vec<StepSpan>,
    /// What the kernel said of its connections' TCP at the end (none over a Unix socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<sluice_core::destination::Transport>,
}

/// A stretch of a stream's time spent on a step, in seconds since the load started.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct StepSpan {
    pub what: String,
    pub start: f64,
    pub end: f64,
    /// The table whose rows the step moved, when it moved some (a partition's routed rows,
    /// loaded from the spill): its time counts in the table's.
    #[serde(default)]
    pub table: Option<usize>,
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
    pub calibration: Option<Calibration>,
    /// The streams' prepared transactions, left for a crew's decision (`opts.hand_over`).
    pub prepared: Vec<String>,
    /// Chunks a crew's other workers loaded, or were loading, when a stream came to them.
    pub elsewhere: u64,
}

/// What every stream of a run shares.
pub(crate) struct RunContext<'a, D: Destination> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    dest: &'a D,
    strategy: &'a dyn Strategy<D>,
    host: &'a dyn Host,
    /// What the destination can do (savepoints inside a staged unit, say).
    caps: Capabilities,
    /// Streams of the load (the staged connection of stream `n` is watched as `jobs + n`).
    jobs: usize,
    /// Set when any stream fails: every stream stops at its next chunk.
    abort: AtomicBool,
    /// The first failure, the one reported.
    first_error: Mutex<Option<Failure>>,
    /// The work not taken yet, and which tables streams are loading.
    queue: Mutex<Queue>,
    /// The chunks each connection has taken, to find the rows behind a key on the error path.
    taken: Mutex<Vec<Vec<usize>>>,
    /// Every table's counters, for progress and for how much of the input the load has read.
    counters: &'a [Counters],
    /// Values the server converted, summed over the streams' encoders.
    conversions: AtomicU64,
    /// `--jobs auto`'s admissions (every stream admitted at once otherwise).
    gate: Gate,
    /// Rows the streams loaded, once they have all finished (for `--max-errors` shares).
    streams_loaded: AtomicU64,
    /// A crew's chunks that other workers loaded, or were loading, when a stream came to them.
    elsewhere: AtomicU64,
    started: Instant,
}

impl<D: Destination> RunContext<'_, D> {
    /// The ledger row of `chunk`, loaded with `rows` rows, when the load keeps a ledger.
    pub(super) fn ledger_row(&self, chunk: &Chunk, rows: u64) -> Option<ChunkRecord> {
        self.opts.job.as_ref().and_then(|j| j.record(chunk, rows))
    }

    /// Stops the load: every stream stops at its next chunk; the first failure is the one
    /// reported.
    fn fail(&self, e: Failure) {
        self.abort.store(true, Ordering::SeqCst);
        let mut slot = lock(&self.first_error);
        if slot.is_none() && !matches!(e, Failure::Aborted) {
            *slot = Some(e);
        }
    }

    /// The next unit for a stream ([`Queue::take`]), with the tables it marks as loading
    /// until [`RunContext::done_with`].
    pub(super) fn take_unit(&self) -> Option<(Unit, Vec<usize>)> {
        lock(&self.queue).take()
    }

    /// A stream no longer loads `tables`.
    pub(super) fn done_with(&self, tables: &[usize]) {
        lock(&self.queue).done_with(tables)
    }

    /// Puts units back at the head of the queue, in their order.
    fn push_front(&self, units: Vec<Unit>) {
        lock(&self.queue).push_front(units)
    }

    /// Waits `wait`, or less if the load stops meanwhile (false then).
    fn pause(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.abort.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20).min(wait));
        }
        true
    }

    /// Rows the streams loaded, once they have all finished.
    fn loaded_by_streams(&self) -> u64 {
        self.streams_loaded.load(Ordering::SeqCst)
    }

    /// Rows converted and bytes read so far, over every table.
    fn seen(&self) -> (u64, u64) {
        self.counters.iter().fold((0, 0), |(r, b), c| {
            (
                r + c.rows.load(Ordering::Relaxed),
                b + c.bytes.load(Ordering::Relaxed),
            )
        })
    }
}

/// Runs a plan on `opts.jobs` streams of `dest` with `strategy`, and publishes all of it, or
/// nothing.
pub fn execute<D: Destination>(
    plan: &Plan,
    opts: &RunOptions,
    dest: &D,
    strategy: &dyn Strategy<D>,
    counters: &[Counters],
    host: &dyn Host,
) -> Result<RunOutcome, Failure> {
    let started = Instant::now();
    if !opts.dry_run {
        strategy.prepare(plan, dest)?;
    }
    let jobs = opts.jobs.max(1);
    let ctx = RunContext {
        plan,
        opts,
        dest,
        strategy,
        host,
        caps: dest.capabilities(),
        jobs,
        abort: AtomicBool::new(false),
        first_error: Mutex::new(None),
        queue: Mutex::new(Queue::new(
            strategy::keep_references_together(plan, strategy.route(plan)),
            plan,
            (0..plan.tables.len())
                .map(|t| dest.writers_contend(t))
                .collect(),
        )),
        taken: Mutex::new(vec![Vec::new(); 2 * jobs]),
        counters,
        conversions: AtomicU64::new(0),
        gate: Gate::new(jobs, opts.calibrate && jobs > 1),
        streams_loaded: AtomicU64::new(0),
        elsewhere: AtomicU64::new(0),
        started,
    };
    // The watch catches streams waiting on each other, and samples what every stream's
    // session is doing, for the verdict (one stream included). Stream `n`'s staged units run
    // on a second connection, watched as `jobs + n`.
    if !opts.dry_run {
        dest.watch(2 * jobs)
            .map_err(|e| Failure::Connect(e.to_string()))?;
    }
    let results = run_streams(&ctx);
    let server_waits = match opts.dry_run {
        false => dest.stop_watching(),
        true => ServerWaits::default(),
    };
    let (streams, mut stats) = barrier(&ctx, results)?;
    let (late, prepared) = publish::publish(&ctx, streams)?;
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
        server_conversions: ctx.conversions.into_inner(),
        strategy: strategy.name(),
        server_waits,
        calibration: (opts.calibrate && jobs > 1).then(|| ctx.gate.result()),
        prepared,
        elsewhere: ctx.elsewhere.into_inner(),
    })
}

/// What each stream left: its long transaction (still open) and what it did.
type StreamResults<'d, D> = Vec<(Option<<D as Destination>::Stream<'d>>, StreamStats)>;

/// Runs stream `n` on this thread. A stream that panics (a bug) stops the load, as any failure
/// does: the other streams must not wait for its work (a routed partition waits for every
/// chunk to be routed), nor commit without it.
fn run_stream<'d, D: Destination>(
    ctx: &RunContext<'d, D>,
    n: usize,
) -> (Option<D::Stream<'d>>, StreamStats) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        worker::Worker::new(ctx, n).run()
    }));
    ran.unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        ctx.fail(Failure::Local(format!(
            "stream {} stopped on a bug in sluice ({why}); nothing of this load is committed",
            n + 1
        )));
        (None, StreamStats::default())
    })
}

/// Runs every stream on a thread of its own (and, under `--jobs auto`, the calibrator), until
/// the queue is empty or the load stops.
fn run_streams<'d, D: Destination>(ctx: &RunContext<'d, D>) -> StreamResults<'d, D> {
    let streams_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if ctx.opts.calibrate && ctx.jobs > 1 {
            let streams_done = &streams_done;
            std::thread::Builder::new()
                .name("sluice-calibrate".into())
                .spawn_scoped(scope, move || {
                    let work_left = || !lock(&ctx.queue).is_empty();
                    ctx.gate.calibrate(
                        ctx.jobs,
                        ctx.counters,
                        crate::calibrate::Windows::for_round_trip(ctx.opts.round_trip),
                        work_left,
                        streams_done,
                    )
                })
                .expect("spawning the calibrator");
        }
        let handles: Vec<_> = (0..ctx.jobs)
            .map(|n| {
                std::thread::Builder::new()
                    .name(format!("sluice-stream-{n}"))
                    .spawn_scoped(scope, move || run_stream(ctx, n))
                    .expect("spawning a stream thread")
            })
            .collect();
        let results = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| (None, StreamStats::default())))
            .collect();
        streams_done.store(true, Ordering::SeqCst);
        results
    })
}

/// The commit barrier: every stream finished cleanly, and the rows rejected so far are within
/// `--max-errors`; otherwise every stream rolls back (its connection closes) and the strategy
/// cleans up.
#[allow(clippy::type_complexity)]
fn barrier<'d, D: Destination>(
    ctx: &RunContext<'d, D>,
    results: StreamResults<'d, D>,
) -> Result<(Vec<D::Stream<'d>>, Vec<StreamStats>), Failure> {
    let first = std::mem::take(&mut *lock(&ctx.first_error));
    if let Some(e) = first {
        // Dropping the streams closes their connections: every transaction rolls back.
        drop(results);
        ctx.strategy.abandon(ctx.dest, &e, ctx.host);
        // A bad row says so itself; a lost connection or a server failure says it here.
        return Err(
            e.and_then_say("; nothing was committed: every stream's transaction rolled back")
        );
    }
    let (streams, stats): (Vec<Option<D::Stream<'d>>>, Vec<StreamStats>) =
        results.into_iter().unzip();
    let loaded: u64 = stats.iter().flat_map(|s| &s.chunks).map(|c| c.rows).sum();
    ctx.streams_loaded.store(loaded, Ordering::SeqCst);
    if let Err(e) = within_max_errors(ctx.opts, loaded) {
        drop(streams);
        ctx.strategy.abandon(ctx.dest, &e, ctx.host);
        return Err(e);
    }
    Ok((streams.into_iter().flatten().collect(), stats))
}

/// Rows rejected beyond a share of the `loaded` rows: nothing may commit.
fn within_max_errors(opts: &RunOptions, loaded: u64) -> Result<(), Failure> {
    match &opts.rejects {
        Some(r) => r.check_final(loaded),
        None => Ok(()),
    }
}
