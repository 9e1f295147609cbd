//! One chunk on one stream: one bulk load of its records, or, when rows may be rejected, as many
//! COPYs under savepoints as it takes to single out the rows the server refuses.

use super::lines::absolute_line;
use super::{RunContext, StreamTiming};
use crate::chunk::{
    self, convert_chunk, Added, ChunkJob, ChunkOutcome, ClientReject, Counters, Selection,
};
use crate::events::Event;
use crate::failure::Failure;
use crate::ledger::JobRun;
use crate::plan::{Chunk, Plan};
use crate::rejects::{Reject, Rejects};
use crate::route::{Miss, Sink};
use sluice_core::destination::{
    Destination, DestinationError, DestinationStream, ErrorKind, RecordEncoder,
};
use sluice_core::error::InputError;
use sluice_core::ledger::ChunkRecord;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Why a chunk failed: the destination refused it (mapped to rows by the caller, or redone
/// by the strategy), or anything else.
pub(super) enum ChunkError {
    Destination(DestinationError),
    Failed(Failure),
}

/// Runs one chunk on a stream (or on none, for a dry run), and writes its ledger row in the
/// stream's transaction when `record` says the load keeps one. With `savepoints` false (a
/// staged unit whose bulk path refuses them), a row the server refuses fails the chunk even
/// when rows may be rejected: the strategy redoes it where savepoints work.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_chunk<D: Destination>(
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
            ctx.host.event(Event::Point("copied"));
        }
    }
    Ok(outcome)
}

/// One load's worth of a chunk: which records it sends and where refused ones go.
struct Attempt<'a> {
    counters: &'a Counters,
    added: &'a mut Added,
    select: Option<Selection<'a>>,
    on_reject: Option<&'a mut dyn FnMut(ClientReject) -> Result<(), Failure>>,
    timing: &'a mut StreamTiming,
}

/// Runs `f`, adding its time to `seconds`.
pub(super) fn timed<T>(seconds: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *seconds += t.elapsed().as_secs_f64();
    r
}

/// Runs `f`, which waits on the server: its time and one round trip go on the stream.
fn on_server<T>(timing: &mut StreamTiming, f: impl FnOnce() -> T) -> T {
    timing.round_trips += 1;
    timed(&mut timing.server_seconds, f)
}

/// Sends a chunk's records (those `attempt` selects) in one load.
fn copy_once<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    mut stream: Option<&mut D::Stream<'_>>,
    encoder: &mut D::Encoder<'_>,
    attempt: Attempt<'_>,
) -> Result<ChunkOutcome, ChunkError> {
    let (plan, opts) = (ctx.plan, ctx.opts);
    let t = plan.inputs[chunk.input].table;
    let started = Instant::now();
    let timing = attempt.timing;
    let (mut read, mut send, mut server) = (Duration::ZERO, 0f64, 0f64);
    if let Some(s) = stream.as_deref_mut() {
        timing.round_trips += 2;
        timed(&mut server, || s.begin_copy(t)).map_err(ChunkError::Destination)?;
    }
    let job = ChunkJob {
        plan,
        chunk,
        encoder,
        framing: ctx.dest.framing(t),
        copy_buffer: opts.copy_buffer,
        abort: &ctx.abort,
        counters: attempt.counters,
        added: attempt.added,
        select: attempt.select,
        on_reject: attempt.on_reject,
        read: &mut read,
    };
    let sent = send_records(plan, chunk, job, stream.as_deref_mut(), None, &mut send);
    let finished = stream
        .filter(|_| sent.is_ok())
        .map(|s| timed(&mut server, || s.finish_copy()));
    book(timing, started, read, send, server);
    let outcome = sent?;
    if let Some(finished) = finished {
        let rows = finished.map_err(ChunkError::Destination)?;
        if rows != outcome.records {
            return Err(ChunkError::Failed(Failure::server(format!(
                "the server stored {rows} rows from {} where sluice sent {}",
                plan.inputs[chunk.input].display, outcome.records
            ))));
        }
    }
    Ok(outcome)
}

/// Chunks of one table in one load, which the stream's next units of the same table continue
/// while the queue gives it them (`more`): a stream of many small files pays the load's round
/// trips (start, finish) once for the lot, not once a file, and a stream of big chunks sends on
/// from one chunk into the next without two round trips of silence between them (across a long
/// path, each is a round trip of the link idle, and an idle connection's congestion window
/// starts again). Each chunk's records are counted apart, so that an error names its chunk and
/// its record in it, and each chunk keeps its own ledger row. Not under `--max-errors`
/// (isolation works chunk by chunk, under savepoints). Gives each chunk loaded with its outcome
/// and when its conversion began and ended; an error comes back with the chunk it falls in.
///
/// A failed load's rows and bytes are taken back off the table's counters (none of them is
/// loaded; a retry converts them again).
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_shared<D: Destination>(
    ctx: &RunContext<'_, D>,
    first: &[usize],
    stream: &mut D::Stream<'_>,
    encoder: &mut D::Encoder<'_>,
    counters: &Counters,
    record: Option<&JobRun>,
    timing: &mut StreamTiming,
    more: &mut dyn FnMut() -> Vec<usize>,
) -> Result<Vec<SharedChunk>, (usize, ChunkError)> {
    let mut converted = Added::default();
    let shared = Shared {
        first,
        counters,
        record,
        converted: &mut converted,
    };
    let loaded = load_shared(ctx, shared, stream, encoder, timing, more);
    if loaded.is_err() {
        counters.rows.fetch_sub(converted.rows, Ordering::Relaxed);
        counters.bytes.fetch_sub(converted.bytes, Ordering::Relaxed);
    }
    loaded
}

/// What a shared load starts from, counts into, and records with.
struct Shared<'a> {
    first: &'a [usize],
    counters: &'a Counters,
    record: Option<&'a JobRun>,
    /// The rows and bytes its conversions added to `counters` so far.
    converted: &'a mut Added,
}

/// [`copy_shared`]'s load.
fn load_shared<D: Destination>(
    ctx: &RunContext<'_, D>,
    shared: Shared<'_>,
    stream: &mut D::Stream<'_>,
    encoder: &mut D::Encoder<'_>,
    timing: &mut StreamTiming,
    more: &mut dyn FnMut() -> Vec<usize>,
) -> Result<Vec<SharedChunk>, (usize, ChunkError)> {
    let Shared {
        first,
        counters,
        record,
        converted,
    } = shared;
    let plan = ctx.plan;
    let t = plan.inputs[plan.chunks[first[0]].input].table;
    let (header, trailer) = ctx.dest.framing(t);
    let started = Instant::now();
    let (mut read, mut send, mut server) = (Duration::ZERO, 0f64, 0f64);
    timing.round_trips += 2;
    timed(&mut server, || stream.begin_copy(t))
        .map_err(|e| (first[0], ChunkError::Destination(e)))?;
    let mut loaded: Vec<SharedChunk> = Vec::new();
    let mut gather = Gather::new(ctx.opts.copy_buffer);
    let mut next: Vec<usize> = first.to_vec();
    while !next.is_empty() {
        for c in std::mem::take(&mut next) {
            let chunk = &plan.chunks[c];
            let began = Instant::now();
            let mut added = Added::default();
            let framing = match loaded.is_empty() {
                true => (header, &[] as &[u8]),
                false => (&[] as &[u8], &[] as &[u8]),
            };
            let job = every_record(
                ctx,
                chunk,
                &mut *encoder,
                framing,
                counters,
                &mut added,
                &mut read,
            );
            let sent = send_records(
                plan,
                chunk,
                job,
                Some(&mut *stream),
                Some(&mut gather),
                &mut send,
            );
            converted.rows += added.rows;
            converted.bytes += added.bytes;
            let outcome = sent.map_err(|e| sent_error(&loaded, c, e))?;
            loaded.push(SharedChunk {
                chunk: c,
                outcome,
                began,
                ended: Instant::now(),
            });
        }
        next = more();
    }
    let last = loaded[loaded.len() - 1].chunk;
    let rest = match trailer.is_empty() {
        true => gather.rest(),
        false => gather.add(trailer.to_vec()).or_else(|| gather.rest()),
    };
    if let Some(rest) = rest {
        timed(&mut send, || stream.send(rest)).map_err(|e| shared_error(&loaded, e))?;
    }
    let finished = timed(&mut server, || stream.finish_copy());
    book(timing, started, read, send, server);
    let rows = finished.map_err(|e| shared_error(&loaded, e))?;
    let sent: u64 = loaded.iter().map(|l| l.outcome.records).sum();
    if rows != sent {
        return Err((
            last,
            ChunkError::Failed(stored_other(ctx, &loaded, rows, sent)),
        ));
    }
    if let Some(job) = record {
        let rows: Vec<ChunkRecord> = loaded
            .iter()
            .filter_map(|l| job.record(&plan.chunks[l.chunk], l.outcome.records))
            .collect();
        timed(&mut timing.server_seconds, || {
            stream.record_chunks(job.job, &rows)
        })
        .map_err(|e| (last, ChunkError::Destination(e)))?;
        ctx.host.event(Event::Point("copied"));
    }
    // The server's work on the last chunk's rows ends with the load; an earlier chunk's, as
    // the next one's rows follow it.
    if let Some(l) = loaded.last_mut() {
        l.ended = Instant::now();
    }
    Ok(loaded)
}

/// A chunk of a shared load ([`copy_shared`]): its outcome, and when its conversion began and
/// ended.
pub(super) struct SharedChunk {
    pub chunk: usize,
    pub outcome: ChunkOutcome,
    pub began: Instant,
    /// When its last converted row went to the stream (the last chunk's: when the load ended).
    pub ended: Instant,
}

/// A shared load's error while chunk `c` (after those `loaded`) was being sent: a record the
/// server names counts from the load's start, so it falls in an earlier chunk, or in `c` past
/// their records.
fn sent_error(loaded: &[SharedChunk], c: usize, e: ChunkError) -> (usize, ChunkError) {
    let before: u64 = loaded.iter().map(|l| l.outcome.records).sum();
    match e {
        ChunkError::Destination(e) if e.record.is_some_and(|n| n <= before) => {
            shared_error(loaded, e)
        }
        ChunkError::Destination(mut e) => {
            e.record = e.record.map(|n| n - before);
            (c, ChunkError::Destination(e))
        }
        other => (c, other),
    }
}

/// The failure of a shared load whose rows the server counted otherwise than sluice sent.
fn stored_other<D: Destination>(
    ctx: &RunContext<'_, D>,
    loaded: &[SharedChunk],
    rows: u64,
    sent: u64,
) -> Failure {
    let plan = ctx.plan;
    let input = |l: &SharedChunk| plan.chunks[l.chunk].input;
    let from = match loaded.iter().all(|l| input(l) == input(&loaded[0])) {
        true => plan.inputs[input(&loaded[0])].display.clone(),
        false => format!(
            "{} chunks of {}",
            loaded.len(),
            plan.tables[plan.inputs[input(&loaded[0])].table].table.name
        ),
    };
    Failure::server(format!(
        "the server stored {rows} rows from {from} where sluice sent {sent}"
    ))
}

/// The conversion of every record of `chunk`, a bad one failing it (no rows isolated).
fn every_record<'a, 'b, 'e, D: Destination + 'e>(
    ctx: &'a RunContext<'_, D>,
    chunk: &'a Chunk,
    encoder: &'a mut D::Encoder<'e>,
    framing: (&'a [u8], &'a [u8]),
    counters: &'a Counters,
    added: &'b mut Added,
    read: &'a mut Duration,
) -> ChunkJob<'a, 'b, D::Encoder<'e>> {
    ChunkJob {
        plan: ctx.plan,
        chunk,
        encoder,
        framing,
        copy_buffer: ctx.opts.copy_buffer,
        abort: &ctx.abort,
        counters,
        added,
        select: None,
        on_reject: None,
        read,
    }
}

/// A route unit's chunk: converted as for any load, each record then handed to `sink`, which
/// spills it to its partition ([`crate::route`]). A record in no partition is a bad row,
/// named by its line and value.
pub(super) fn route_chunk<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    encoder: &mut D::Encoder<'_>,
    counters: &Counters,
    sink: &mut Sink<'_>,
    timing: &mut StreamTiming,
) -> Result<ChunkOutcome, Failure> {
    let plan = ctx.plan;
    let t = plan.inputs[chunk.input].table;
    let started = Instant::now();
    let mut read = Duration::ZERO;
    let mut added = Added::default();
    let job = every_record(
        ctx,
        chunk,
        encoder,
        (&[], &[]),
        counters,
        &mut added,
        &mut read,
    );
    let key = sink.key();
    let mut miss = None;
    let mut wire_bytes = 0u64;
    let converted = convert_chunk(job, |message| {
        wire_bytes += message.len() as u64;
        let mut start = 0;
        let mut taken = Ok(());
        ctx.dest.split_encoded(t, &message, key, &mut |end, value| {
            if taken.is_ok() {
                taken = sink.take(&message[start..end], value);
            }
            start = end;
        });
        if let Err(m) = taken {
            miss = Some(m);
            return Err(Failure::Aborted);
        }
        sink.flush(false)
    });
    // Writing the spill is the client's work (into the page cache), not a wait on the
    // network: it counts as converting.
    book(timing, started, read, 0.0, 0.0);
    match (converted, miss) {
        (_, Some(m)) => Err(no_partition(ctx, chunk, sink, m)),
        (Err(Failure::Input(mut e)), None) => {
            absolute_line(plan, chunk, &mut e);
            Err(Failure::Input(e))
        }
        (Ok(o), None) if o.records != sink.records => Err(Failure::Local(format!(
            "a bug in sluice: {} records of {} were converted and {} routed; nothing was loaded",
            o.records, plan.inputs[chunk.input].display, sink.records
        ))),
        (r, None) => r.map(|o| ChunkOutcome { wire_bytes, ..o }),
    }
}

/// The error for a record whose partition key is in no partition.
fn no_partition<D: Destination>(
    ctx: &RunContext<'_, D>,
    chunk: &Chunk,
    sink: &Sink<'_>,
    m: Miss,
) -> Failure {
    let plan = ctx.plan;
    let input = &plan.inputs[chunk.input];
    let (column, table) = sink.names(plan);
    let what = match m.key {
        Some(k) => format!("{column} = {k}"),
        None => format!("{column} is NULL, which"),
    };
    let mut err = InputError::new(
        &input.display,
        format!("{what} belongs to no partition of {table}"),
    );
    if let Some((at, values)) = chunk::locate_record(plan, chunk, m.record, &[sink.key()]) {
        err.line = Some(at.line);
        err.offset = Some(at.offset);
        err.value = values.into_iter().next().flatten();
    }
    err.column = Some(column);
    absolute_line(plan, chunk, &mut err);
    Failure::Input(Box::new(err))
}

/// A partition's routed rows, from its spill, in one load into the staging table the stream
/// has begun: sent as they are (encoded when they were routed), in messages of the load's
/// size, with the destination's framing around them.
pub(super) fn copy_spill<D: Destination>(
    ctx: &RunContext<'_, D>,
    stream: &mut D::Stream<'_>,
    table: usize,
    spill: std::io::Result<crate::route::SpillReader>,
    rows: u64,
    timing: &mut StreamTiming,
) -> Result<ChunkOutcome, ChunkError> {
    use std::io::Read;
    let (prefix, suffix) = ctx.dest.framing(table);
    let started = Instant::now();
    let (mut read, mut send, mut server) = (0f64, 0f64, 0f64);
    timing.round_trips += 2;
    timed(&mut server, || stream.begin_copy(table)).map_err(ChunkError::Destination)?;
    let unreadable = |e: std::io::Error| {
        ChunkError::Failed(Failure::Local(format!(
            "reading back the routed rows of table {} from their spill: {e}; nothing was \
             loaded",
            ctx.plan.tables[table].table.name
        )))
    };
    let mut file = spill.map_err(unreadable)?;
    let size = ctx.opts.copy_buffer;
    let mut bytes = 0u64;
    let mut message = prefix.to_vec();
    loop {
        let mut piece = Vec::with_capacity(size + suffix.len());
        std::mem::swap(&mut piece, &mut message);
        let before = piece.len();
        timed(&mut read, || {
            (&mut file).take(size as u64).read_to_end(&mut piece)
        })
        .map_err(unreadable)?;
        let end = piece.len() - before < size;
        bytes += (piece.len() - before) as u64;
        if end {
            piece.extend_from_slice(suffix);
        }
        timed(&mut send, || stream.send(piece)).map_err(ChunkError::Destination)?;
        if end {
            break;
        }
        if ctx.abort.load(Ordering::Relaxed) {
            return Err(ChunkError::Failed(Failure::Aborted));
        }
    }
    let stored = timed(&mut server, || stream.finish_copy()).map_err(ChunkError::Destination)?;
    book(timing, started, Duration::from_secs_f64(read), send, server);
    if stored != rows {
        return Err(ChunkError::Failed(Failure::server(format!(
            "the server stored {stored} rows of table {} from the spill where sluice routed {rows}",
            ctx.plan.tables[table].table.name
        ))));
    }
    Ok(ChunkOutcome {
        records: rows,
        bytes: 0,
        wire_bytes: bytes,
    })
}

/// A shared load's messages gathered to the load's message size: a stream of many small files
/// sends one message (one system call, one wake-up of the connection's task) per
/// `--copy-buffer` of converted rows rather than one per file.
struct Gather {
    pending: Vec<u8>,
    size: usize,
}

/// Room past a gathered message's size for the file that fills it.
const GATHER_SLACK: usize = 64 << 10;

impl Gather {
    fn new(size: usize) -> Gather {
        Gather {
            pending: Vec::new(),
            size,
        }
    }

    /// Takes a converted message; gives back one to send once the gathered bytes fill one.
    fn add(&mut self, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if self.pending.is_empty() && bytes.len() >= self.size {
            return Some(bytes);
        }
        if self.pending.capacity() == 0 {
            // Sized once: grown file by file, the message would be copied at every doubling.
            self.pending = Vec::with_capacity(self.size + GATHER_SLACK.max(bytes.len()));
        }
        self.pending.extend_from_slice(&bytes);
        (self.pending.len() >= self.size).then(|| std::mem::take(&mut self.pending))
    }

    /// What is gathered and not yet sent.
    fn rest(&mut self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

/// Converts a chunk's records (as `job` selects them) and hands them to `stream` (none in a
/// dry run), through `gather` when given (the caller sends its rest), counting the bytes sent
/// and the time spent sending; a bad record comes back with its line in the input, a refused
/// send as the destination's error.
fn send_records<E: RecordEncoder, S: DestinationStream>(
    plan: &Plan,
    chunk: &Chunk,
    job: ChunkJob<'_, '_, E>,
    mut stream: Option<&mut S>,
    mut gather: Option<&mut Gather>,
    send: &mut f64,
) -> Result<ChunkOutcome, ChunkError> {
    let mut send_failed = None;
    let mut wire_bytes = 0u64;
    let result = convert_chunk(job, |bytes| {
        wire_bytes += bytes.len() as u64;
        let bytes = match gather.as_deref_mut() {
            Some(g) => match g.add(bytes) {
                Some(full) => full,
                None => return Ok(()),
            },
            None => bytes,
        };
        if let Some(s) = stream.as_deref_mut() {
            if let Err(e) = timed(send, || s.send(bytes)) {
                send_failed = Some(e);
                return Err(Failure::Aborted);
            }
        }
        Ok(())
    });
    match (result, send_failed) {
        (Ok(o), None) => Ok(ChunkOutcome { wire_bytes, ..o }),
        (_, Some(e)) => Err(ChunkError::Destination(e)),
        (Err(Failure::Input(mut e)), None) => {
            absolute_line(plan, chunk, &mut e);
            Err(ChunkError::Failed(Failure::Input(e)))
        }
        (Err(e), None) => Err(ChunkError::Failed(e)),
    }
}

/// Books a load's time on the stream: reading, sending and the server's part as measured,
/// converting the rest since `started`.
fn book(timing: &mut StreamTiming, started: Instant, read: Duration, send: f64, server: f64) {
    let read = read.as_secs_f64();
    timing.read_seconds += read;
    timing.send_seconds += send;
    timing.server_seconds += server;
    timing.convert_seconds += (started.elapsed().as_secs_f64() - read - send - server).max(0.0);
}

/// A shared load's error, with the chunk its record number falls in and that number made the
/// chunk's own (an error that names no record goes with the first chunk).
fn shared_error(loaded: &[SharedChunk], mut e: DestinationError) -> (usize, ChunkError) {
    let Some(n) = e.record else {
        return (loaded[0].chunk, ChunkError::Destination(e));
    };
    let mut before = 0;
    for l in loaded {
        if n <= before + l.outcome.records {
            e.record = Some(n - before);
            return (l.chunk, ChunkError::Destination(e));
        }
        before += l.outcome.records;
    }
    (loaded[loaded.len() - 1].chunk, ChunkError::Destination(e))
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
/// they are sent; a load the server refuses is rolled back to its savepoint and sent again
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
            on_server(timing, || s.savepoint()).map_err(ChunkError::Destination)?;
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
                    on_server(timing, || s.release_savepoint()).map_err(ChunkError::Destination)?;
                }
                total.records += o.records;
                total.bytes = total.bytes.max(o.bytes);
                total.wire_bytes += o.wire_bytes;
                continue;
            }
            Err(ChunkError::Destination(e)) if isolatable(&e) => e,
            Err(e) => return Err(e),
        };
        let Some(s) = stream.as_deref_mut().filter(|_| savepoints) else {
            return Err(ChunkError::Destination(e));
        };
        on_server(timing, || s.rollback_to_savepoint()).map_err(ChunkError::Destination)?;
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

#[cfg(test)]
mod tests {
    use super::Gather;

    /// Small messages wait until they fill one of the load's size; a full one goes as it is;
    /// what is left goes at the end, in order, every byte once.
    #[test]
    fn gather_sends_full_messages_in_order() {
        let mut g = Gather::new(10);
        assert_eq!(g.add(b"abc".to_vec()), None);
        assert_eq!(g.add(b"defg".to_vec()), None);
        assert_eq!(g.add(b"hijk".to_vec()), Some(b"abcdefghijk".to_vec()));
        assert_eq!(
            g.add(b"0123456789ab".to_vec()),
            Some(b"0123456789ab".to_vec())
        );
        assert_eq!(g.add(b"xy".to_vec()), None);
        assert_eq!(g.rest(), Some(b"xy".to_vec()));
        assert_eq!(g.rest(), None);
    }
}
