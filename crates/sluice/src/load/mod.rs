//! `sluice load`: plan, convert and send in parallel, then commit everything or nothing.
//!
//! Each of `--jobs` streams is a connection in one open transaction, fed chunks from a shared
//! queue (biggest first). Inside a stream three things overlap: a reader thread reads and
//! decompresses, the stream's thread parses, converts and encodes, and the tokio runtime writes
//! the previous COPY message to the socket. When a chunk fails, every stream stops and rolls
//! back; only when every stream has finished cleanly are they committed, back to back. The
//! guarantee and its one window (a crash between the first and last COMMIT) are documented in
//! the README.

pub mod chunk;
pub mod plan;
pub mod source;

use chunk::{convert_chunk, locate_record, ChunkJob, ChunkOutcome, Counters};
use plan::{Chunk, Plan};
use sluice_core::convert::{Converter, ServerConvert};
use sluice_core::datetime::SessionZone;
use sluice_core::error::InputError;
use sluice_postgres::conninfo::ConnInfo;
use sluice_postgres::oracle::Oracle;
use sluice_postgres::stream::{ServerError, Stream};
use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// Why a load failed; each kind maps to a documented exit code.
#[derive(Debug)]
pub enum LoadError {
    /// Bad flags, unknown table or column, unreadable file name: exit 2.
    Usage(String),
    /// A rejected row, found by sluice or by the server: exit 3.
    Input(Box<InputError>),
    /// Cannot connect or authenticate: exit 4.
    Connect(String),
    /// The server failed for a reason not tied to one row: exit 5.
    Server(String),
    /// Reading input or another local failure: exit 1.
    Io(String),
    /// Stopped because another stream failed (never reported on its own).
    Aborted,
}

impl LoadError {
    pub fn exit_code(&self) -> i32 {
        match self {
            LoadError::Usage(_) => 2,
            LoadError::Input(_) => 3,
            LoadError::Connect(_) => 4,
            LoadError::Server(_) => 5,
            LoadError::Io(_) | LoadError::Aborted => 1,
        }
    }
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Usage(m) | LoadError::Connect(m) | LoadError::Io(m) => f.write_str(m),
            LoadError::Server(m) => write!(f, "server error: {m}"),
            LoadError::Input(e) => write!(f, "bad row: {e}"),
            LoadError::Aborted => f.write_str("stopped because another stream failed"),
        }
    }
}

/// How to run a plan.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub jobs: usize,
    /// Size of one COPY message.
    pub copy_buffer: usize,
    /// Convert and encode everything, send nothing.
    pub dry_run: bool,
    pub timezone: String,
}

/// One chunk as a stream ran it, for verification and the timeline.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ChunkStat {
    pub chunk: usize,
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
}

fn server_error(plan: &Plan, chunk: &Chunk, e: ServerError) -> LoadError {
    if e.is_connection() {
        return LoadError::Server(format!("the connection failed: {e}"));
    }
    let Some(n) = e.record else {
        return LoadError::Server(e.to_string());
    };
    let input = &plan.inputs[chunk.input];
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
    match locate_record(plan, chunk, n, col_idx) {
        Some((line, offset, value)) => {
            err.line = Some(line);
            err.offset = Some(offset);
            err.value = value;
        }
        None => err.reason.push_str(&format!(" (record {n} of this input)")),
    }
    LoadError::Input(Box::new(err))
}

/// Turns a chunk-relative line into a line of the whole file by counting line ends before the
/// chunk (only on the error path).
fn absolute_line(plan: &Plan, chunk: &Chunk, err: &mut InputError) {
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
struct RunContext<'a> {
    plan: &'a Plan,
    rt: &'a Handle,
    opts: &'a RunOptions,
    abort: &'a AtomicBool,
}

/// Runs one chunk on a stream (or on none, for a dry run).
fn run_chunk(
    ctx: &RunContext<'_>,
    chunk: &Chunk,
    stream: Option<&Stream>,
    converter: &mut Converter,
    oracle: &mut Oracle,
    counters: &Counters,
) -> Result<ChunkOutcome, LoadError> {
    let RunContext {
        plan,
        rt,
        opts,
        abort,
    } = *ctx;
    let table = &plan.tables[plan.inputs[chunk.input].table];
    let mut writer = match stream {
        Some(s) => Some(
            rt.block_on(s.copy_in(&table.table, &table.columns, table.binary))
                .map_err(|e| server_error(plan, chunk, e))?,
        ),
        None => None,
    };
    let job = ChunkJob {
        plan,
        chunk,
        converter,
        server: Some(oracle as &mut dyn ServerConvert),
        copy_buffer: opts.copy_buffer,
        abort,
        counters,
    };
    let mut send_failed = None;
    let result = convert_chunk(job, |bytes| {
        if let Some(w) = writer.as_mut() {
            if let Err(e) = rt.block_on(w.send(bytes)) {
                send_failed = Some(e);
                return Err(LoadError::Aborted);
            }
        }
        Ok(())
    });
    let outcome = match (result, send_failed) {
        (Ok(o), None) => o,
        // A failed send usually means the server rejected the COPY: finishing it returns the
        // server's own error, with the record it names.
        (_, Some(send_err)) => {
            let e = match writer.take() {
                Some(w) => rt.block_on(w.finish()).err().unwrap_or(send_err),
                None => send_err,
            };
            return Err(server_error(plan, chunk, e));
        }
        (Err(LoadError::Input(mut e)), None) => {
            absolute_line(plan, chunk, &mut e);
            return Err(LoadError::Input(e));
        }
        (Err(e), None) => return Err(e),
    };
    if let Some(w) = writer {
        let rows = rt
            .block_on(w.finish())
            .map_err(|e| server_error(plan, chunk, e))?;
        if rows != outcome.records {
            return Err(LoadError::Server(format!(
                "the server stored {rows} rows from {} where sluice sent {}",
                plan.inputs[chunk.input].display, outcome.records
            )));
        }
    }
    Ok(outcome)
}

/// Runs a plan on `jobs` streams and commits all of them, or none.
pub fn execute(
    plan: &Plan,
    opts: &RunOptions,
    info: &ConnInfo,
    rt: &Handle,
    counters: &[Counters],
) -> Result<RunOutcome, LoadError> {
    let started = Instant::now();
    let queue: Mutex<VecDeque<&Chunk>> = Mutex::new(plan.chunks.iter().collect());
    let abort = AtomicBool::new(false);
    let first_error: Mutex<Option<LoadError>> = Mutex::new(None);
    let jobs = opts.jobs.max(1);
    let zone = SessionZone::from_setting(&opts.timezone);
    let fail = |e: LoadError| {
        abort.store(true, Ordering::SeqCst);
        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() && !matches!(e, LoadError::Aborted) {
            *slot = Some(e);
        }
    };
    let conversions = std::sync::atomic::AtomicU64::new(0);
    // Test hook: silently skip one chunk, as a lost stream would, so that tests can prove
    // that `sluice bench` verification notices. Never set outside tests.
    let drop_chunk: Option<usize> = std::env::var("SLUICE_TEST_DROP_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok());
    let ctx = RunContext {
        plan,
        rt,
        opts,
        abort: &abort,
    };
    let results: Vec<(Option<Stream>, StreamStats)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|n| {
                let (ctx, queue, abort, fail, zone, conversions) =
                    (&ctx, &queue, &abort, &fail, &zone, &conversions);
                std::thread::Builder::new()
                    .name(format!("sluice-stream-{n}"))
                    .spawn_scoped(scope, move || {
                        let mut stats = StreamStats {
                            stream: n,
                            ..Default::default()
                        };
                        let t0 = Instant::now();
                        let stream = if opts.dry_run {
                            None
                        } else {
                            let opened = rt.block_on(async {
                                let s = Stream::open(info)
                                    .await
                                    .map_err(|e| LoadError::Connect(e.to_string()))?;
                                s.begin()
                                    .await
                                    .map_err(|e| LoadError::Server(e.to_string()))?;
                                Ok::<_, LoadError>(s)
                            });
                            match opened {
                                Ok(s) => Some(s),
                                Err(e) => {
                                    fail(e);
                                    return (None, stats);
                                }
                            }
                        };
                        let mut oracle = Oracle::new(rt.clone(), info.clone());
                        let mut converters: Vec<Option<Converter>> =
                            (0..plan.tables.len()).map(|_| None).collect();
                        loop {
                            if abort.load(Ordering::Relaxed) {
                                break;
                            }
                            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                            let Some(chunk) = next else { break };
                            if drop_chunk == Some(chunk.id) {
                                continue;
                            }
                            let t = plan.inputs[chunk.input].table;
                            let converter = converters[t].get_or_insert_with(|| {
                                Converter::new(plan.tables[t].columns.clone(), zone.clone())
                            });
                            let chunk_start = Instant::now();
                            match run_chunk(
                                ctx,
                                chunk,
                                stream.as_ref(),
                                converter,
                                &mut oracle,
                                &counters[t],
                            ) {
                                Ok(o) => {
                                    stats.chunks.push(ChunkStat {
                                        chunk: chunk.id,
                                        table: plan.tables[t].table.name.clone(),
                                        table_index: t,
                                        rows: o.records,
                                        bytes: o.bytes,
                                        start: (chunk_start - started).as_secs_f64(),
                                        end: started.elapsed().as_secs_f64(),
                                    });
                                    stats.rows += o.records;
                                    stats.bytes += o.bytes;
                                }
                                Err(e) => {
                                    fail(e);
                                    break;
                                }
                            }
                        }
                        conversions.fetch_add(oracle.conversions, Ordering::Relaxed);
                        stats.seconds = t0.elapsed().as_secs_f64();
                        (stream, stats)
                    })
                    .expect("spawning a stream thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| (None, StreamStats::default())))
            .collect()
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        // Dropping the streams closes their connections: every transaction rolls back.
        drop(results);
        return Err(e);
    }
    let (streams, stats): (Vec<Option<Stream>>, Vec<StreamStats>) = results.into_iter().unzip();
    // Every stream finished cleanly: commit them all, back to back.
    let total = streams.iter().flatten().count();
    for (committed, s) in streams.into_iter().flatten().enumerate() {
        if let Err(e) = rt.block_on(s.commit()) {
            return Err(LoadError::Server(format!(
                "COMMIT failed on stream {} of {total} after {committed} committed: {e}. \
                 The committed streams' rows are visible; reload into empty tables.",
                committed + 1
            )));
        }
    }
    Ok(RunOutcome {
        streams: stats,
        elapsed: started.elapsed(),
        server_conversions: conversions.into_inner(),
    })
}
