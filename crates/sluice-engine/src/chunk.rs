//! Converting one chunk: blocks of bytes in, load messages out. This is the hot path.
//!
//! Records are parsed in place inside each block the reader hands over; only a record cut by a
//! block boundary is stitched together, from the block's tail and as few bytes of the next
//! block as it needs, so almost nothing is copied twice. Encoded tuples accumulate in one
//! buffer that is handed off as a single message once it reaches the configured size:
//! no per-row allocation and few, large protocol messages.

use crate::failure::Failure;
use crate::plan::{Chunk, Compression, InputSource, Plan};
use crate::source::{open_chunk, pump, Block, BLOCKS_IN_FLIGHT};
use sluice_core::destination::RecordEncoder;
use sluice_core::dialect::Dialect;
use sluice_core::error::InputError;
use sluice_core::error::{RecordError, RecordErrorKind};
use sluice_core::records::{Fields, RecordParser, Step, SyntaxError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::{Duration, Instant};

/// Counters a chunk updates as it goes, shared with the progress display.
#[derive(Default, Debug)]
pub struct Counters {
    pub bytes: AtomicU64,
    pub rows: AtomicU64,
    /// Chunks of the table finished (converted and, unless a dry run, loaded).
    pub chunks_done: AtomicU64,
}

/// What a converted chunk produced.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChunkOutcome {
    pub records: u64,
    pub bytes: u64,
    /// Bytes sent to the destination for it (its encoding, framing included).
    pub wire_bytes: u64,
}

/// Everything one chunk conversion needs.
pub struct ChunkJob<'a, 'b, E: RecordEncoder> {
    pub plan: &'a Plan,
    pub chunk: &'a Chunk,
    /// The destination's encoder for the chunk's table.
    pub encoder: &'a mut E,
    /// What the destination wants before and after a chunk's records (a binary format's header
    /// and trailer, say).
    pub framing: (&'a [u8], &'a [u8]),
    pub copy_buffer: usize,
    pub abort: &'a AtomicBool,
    pub counters: &'a Counters,
    /// What this conversion has added to `counters` so far, for a caller that undoes a
    /// failed attempt.
    pub added: &'b mut Added,
    /// Which records to send, when bad rows are being isolated (`None`: all of them).
    pub select: Option<Selection<'b>>,
    /// Where a record the encoder refuses goes, when rows may be rejected (`None`: it fails
    /// the chunk).
    pub on_reject: Option<&'b mut dyn FnMut(ClientReject) -> Result<(), Failure>>,
    /// Time spent waiting for input (the reader thread, or mapping pages), added to.
    pub read: &'a mut Duration,
}

/// What a conversion added to its counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Added {
    pub bytes: u64,
    pub rows: u64,
}

/// The records of a chunk one attempt sends: indexes `lo..hi` (1-based, in the chunk's
/// order of data records), less those in `skip`.
#[derive(Clone, Copy)]
pub struct Selection<'a> {
    pub lo: u64,
    pub hi: u64,
    pub skip: &'a std::collections::BTreeSet<u64>,
}

impl Selection<'_> {
    fn sends(&self, index: u64) -> bool {
        index >= self.lo && index < self.hi && !self.skip.contains(&index)
    }
}

/// A record the encoder refused, with everything a rejects file needs.
pub struct ClientReject {
    /// 1-based index among the chunk's data records.
    pub index: u64,
    /// Line within the chunk and absolute byte offset of the record.
    pub chunk_line: u64,
    pub offset: u64,
    /// The record's bytes, line ending included.
    pub raw: Vec<u8>,
    pub error: InputError,
    pub cause: &'static str,
}

/// The dialect for a chunk, with the line ending detected from the first block when the
/// chunk starts the input (split chunks get it from the plan).
fn chunk_dialect(plan: &Plan, chunk: &Chunk, first_block: &[u8]) -> Dialect {
    let mut d = plan.inputs[chunk.input].dialect.clone();
    if chunk.is_first() {
        d.line_ending = crate::plan::detect_line_ending(first_block, &d);
    }
    d
}

/// A chunk's blocks as they arrive, and the way spent buffers go back to be reused.
type Blocks = (Receiver<Block>, SyncSender<Vec<u8>>);

/// A small compressed file, decompressed here and queued as one block, as the reader thread
/// would have sent it; `None` for any other input.
fn inline_blocks(
    plan: &Plan,
    chunk: &Chunk,
    read: &mut Duration,
) -> Result<Option<Blocks>, Failure> {
    let input = &plan.inputs[chunk.input];
    let reading = Instant::now();
    let content = crate::source::decompress_small(input)
        .map_err(|e| Failure::Local(format!("reading {}: {e}", input.display)));
    *read += reading.elapsed();
    let Some(content) = content? else {
        return Ok(None);
    };
    let (tx, rx) = sync_channel(1);
    let (recycle, _) = sync_channel::<Vec<u8>>(BLOCKS_IN_FLIGHT);
    if !content.is_empty() {
        let _ = tx.send(Block::Data(content));
    }
    Ok(Some((rx, recycle)))
}

/// Starts the reader thread for a chunk.
pub fn start_reader(plan: &Plan, chunk: &Chunk) -> Result<Blocks, Failure> {
    let input = &plan.inputs[chunk.input];
    let reader = open_chunk(input, chunk)
        .map_err(|e| Failure::Local(format!("cannot read {}: {e}", input.display)))?;
    let (tx, rx) = sync_channel(BLOCKS_IN_FLIGHT);
    let (recycle_tx, recycle_rx) = sync_channel::<Vec<u8>>(BLOCKS_IN_FLIGHT);
    std::thread::Builder::new()
        .name(format!("sluice-read-{}", chunk.id))
        .spawn(move || pump(reader, tx, recycle_rx))
        .map_err(|e| Failure::Local(format!("cannot start a reader thread: {e}")))?;
    Ok((rx, recycle_tx))
}

/// Where a record is, for messages.
#[derive(Clone, Copy)]
struct Position {
    /// 1-based line within the chunk.
    line: u64,
    /// Absolute byte offset in the (decompressed) input.
    offset: u64,
    /// Absolute offset just past the record (its line terminator included).
    end: u64,
}

/// What both walkers keep while they go: the line count, whether the header is still to be
/// skipped, and how a syntax error is placed.
struct LineTracker<'a> {
    input: &'a crate::plan::Input,
    header: bool,
    /// 1-based line, within the chunk, where the next record starts.
    line: u64,
}

impl<'a> LineTracker<'a> {
    fn new(plan: &'a Plan, chunk: &Chunk) -> LineTracker<'a> {
        let input = &plan.inputs[chunk.input];
        LineTracker {
            input,
            header: chunk.is_first() && input.dialect.header,
            line: 1,
        }
    }

    /// Accounts for a record at `offset` spanning `lines` line ends, whose bytes are `raw`:
    /// its position, or `None` when it is the header (kept for the rejects file).
    fn record(&mut self, offset: u64, end: u64, lines: u32, raw: &[u8]) -> Option<Position> {
        let pos = Position {
            line: self.line,
            offset,
            end,
        };
        self.line += u64::from(lines);
        if std::mem::take(&mut self.header) {
            let _ = self.input.header_line.set(raw.to_vec());
            return None;
        }
        Some(pos)
    }

    /// A syntax error in a slice that starts at absolute offset `base`.
    fn syntax(&self, e: SyntaxError, base: u64) -> Failure {
        let csv = self.input.dialect.is_csv();
        let mut err = InputError::new(&self.input.display, e.kind.message(csv));
        err.line = Some(self.line);
        err.offset = Some(base + e.offset as u64);
        err.offset_of = sluice_core::error::OffsetOf::Error;
        Failure::Input(Box::new(err))
    }
}

/// What a walk over a chunk's records does with each one.
trait RecordVisitor {
    /// Takes the run of records from `at` of `data` (whose absolute offset is `base`)
    /// straight from their bytes, when it can (the encoder's fast path): how many it took and
    /// where the next begins. The record there is split into fields and handed to
    /// [`RecordVisitor::record`].
    fn plain(
        &mut self,
        _parser: &RecordParser,
        _data: &[u8],
        _base: u64,
        at: usize,
    ) -> Result<(usize, usize), Failure> {
        Ok((0, at))
    }

    /// One record: its fields, the slice they refer to, that slice's absolute offset and the
    /// record's position. False stops the walk.
    fn record(
        &mut self,
        fields: &Fields,
        data: &[u8],
        base: u64,
        pos: Position,
    ) -> Result<bool, Failure>;
}

/// A visitor that takes every record through its fields.
struct Each<F>(F);

/// Visits each record's fields with `f`.
fn each<F>(f: F) -> Each<F>
where
    F: FnMut(&Fields, &[u8], u64, Position) -> Result<bool, Failure>,
{
    Each(f)
}

impl<F: FnMut(&Fields, &[u8], u64, Position) -> Result<bool, Failure>> RecordVisitor for Each<F> {
    fn record(
        &mut self,
        fields: &Fields,
        data: &[u8],
        base: u64,
        pos: Position,
    ) -> Result<bool, Failure> {
        (self.0)(fields, data, base, pos)
    }
}

/// Walks the records of a chunk on the side (no abort flag, no read time kept), calling `f`
/// for each as [`each`] does, until it returns false: the error path's and planning's walks.
fn walk_each<F>(plan: &Plan, chunk: &Chunk, f: F) -> Result<u64, Failure>
where
    F: FnMut(&Fields, &[u8], u64, Position) -> Result<bool, Failure>,
{
    let mut unused = Duration::ZERO;
    walk_records(plan, chunk, None, &mut unused, &mut each(f))
}

/// Column `i`'s value in a record's fields (NULL, or a column the record lacks, as `None`).
fn value_of(fields: &Fields, data: &[u8], i: usize) -> Option<Vec<u8>> {
    (i < fields.len())
        .then(|| fields.get(i, data).map(<[u8]>::to_vec))
        .flatten()
}

/// Walks the records of a chunk, calling `visit` for each with its fields, the slice they
/// refer to, that slice's absolute offset and the record's position; `visit` returns false to
/// stop. Shared by conversion and by locating a server-reported record. Returns the bytes
/// consumed.
fn walk_records(
    plan: &Plan,
    chunk: &Chunk,
    abort: Option<&AtomicBool>,
    read: &mut Duration,
    visit: &mut impl RecordVisitor,
) -> Result<u64, Failure> {
    let input = &plan.inputs[chunk.input];
    match (&input.source, input.compression) {
        (InputSource::File(path), Compression::None) => {
            walk_mapped(plan, chunk, path, abort, read, visit)
        }
        _ => {
            let reader = match inline_blocks(plan, chunk, read)? {
                Some(blocks) => blocks,
                None => start_reader(plan, chunk)?,
            };
            walk_blocks(plan, chunk, reader, abort, read, visit)
        }
    }
}

/// How much of a mapped file is parsed at a time; pages behind it are released.
const WINDOW: usize = 8 << 20;

/// Walks a plain file through a memory map (or, for a small chunk, one read): no read copies,
/// no reader thread, and no record is ever stitched, because the whole chunk is contiguous. The file is parsed in windows so
/// that the stray-byte check stays one pass per window, and pages already parsed are dropped
/// from the process (`MADV_DONTNEED`; they stay in the page cache), which keeps the resident
/// size bounded however big the file is.
fn walk_mapped(
    plan: &Plan,
    chunk: &Chunk,
    path: &std::path::Path,
    abort: Option<&AtomicBool>,
    read: &mut Duration,
    visit: &mut impl RecordVisitor,
) -> Result<u64, Failure> {
    let input = &plan.inputs[chunk.input];
    let io = |e: std::io::Error| Failure::Local(format!("cannot read {}: {e}", input.display));
    let (file, map, aligned) = match &input.held {
        Some(held) => {
            let end = chunk
                .end
                .map_or(held.len(), |e| (e as usize).min(held.len()));
            if end <= chunk.start as usize {
                return Ok(0);
            }
            (None, ChunkBytes::Held(held.clone(), end), 0)
        }
        None => {
            let file = std::fs::File::open(path).map_err(io)?;
            let Some((map, aligned)) = open_file_chunk(input, chunk, &file)? else {
                return Ok(0);
            };
            (Some(file), map, aligned)
        }
    };
    let skip = (chunk.start - aligned) as usize;
    let data = &map.bytes()[skip..];
    let dialect = chunk_dialect(plan, chunk, &data[..data.len().min(64 << 10)]);
    let parser = RecordParser::new(&dialect);
    let mut lines_seen = LineTracker::new(plan, chunk);
    let mut fields = Fields::new();
    let mut pos = 0usize;
    let mut released = 0usize;
    let mut window = WINDOW;
    'windows: while pos < data.len() {
        if abort.is_some_and(|a| a.load(Ordering::Relaxed)) {
            return Err(Failure::Aborted);
        }
        let stop = (pos + window).min(data.len());
        let needed = chunk.start + stop as u64;
        let reading = Instant::now();
        if let (Some(file), true) = (&file, map.is_mapped()) {
            let now = file.metadata().map_err(io)?.len();
            if now < needed {
                return Err(truncated(&input.display, now, needed));
            }
        }
        map.populate(skip + pos, stop - pos);
        *read += reading.elapsed();
        let slice = &data[pos..stop];
        let inp = parser.input(slice, stop == data.len());
        let base = chunk.start + pos as u64;
        let mut at = 0usize;
        loop {
            if !lines_seen.header {
                let (records, end) = visit.plain(&parser, slice, base, at)?;
                if records > 0 {
                    lines_seen.line += records as u64;
                    at = end;
                    continue;
                }
            }
            let step = parser
                .parse_input(&inp, at, &mut fields)
                .map_err(|e| lines_seen.syntax(e, base))?;
            match step {
                Step::Record { end, lines } => {
                    if let Some(here) = lines_seen.record(
                        base + at as u64,
                        base + end as u64,
                        lines,
                        &slice[at..end],
                    ) {
                        if !visit.record(&fields, slice, base, here)? {
                            return Ok((pos + end) as u64);
                        }
                    }
                    at = end;
                }
                Step::NeedMore if at == 0 => {
                    // One record longer than the window: widen it.
                    window *= 2;
                    continue 'windows;
                }
                Step::NeedMore => break,
                Step::End => {
                    pos = data.len();
                    break 'windows;
                }
            }
        }
        pos += at;
        window = WINDOW;
        // Release the parsed pages, in the map's own page-aligned offsets.
        let done = (skip + pos) / PAGE * PAGE;
        if done > released {
            // Nothing reads the range again: every later access is at or after `pos`.
            map.release(released, done - released);
            released = done;
        }
    }
    Ok(pos as u64)
}

/// A plain file's chunk, mapped or read from its page-aligned start (returned with it);
/// `None` when the chunk is empty, an error when the file shrank since it was planned.
fn open_file_chunk(
    input: &crate::plan::Input,
    chunk: &Chunk,
    file: &std::fs::File,
) -> Result<Option<(ChunkBytes, u64)>, Failure> {
    let io = |e: std::io::Error| Failure::Local(format!("cannot read {}: {e}", input.display));
    let end = match chunk.end {
        Some(e) => e,
        None => file.metadata().map_err(io)?.len(),
    };
    // A file that shrank since it was planned (its last chunk runs to its end).
    if end < input.size.min(chunk.end.unwrap_or(u64::MAX)) {
        return Err(truncated(&input.display, end, input.size));
    }
    if end <= chunk.start {
        return Ok(None);
    }
    let aligned = chunk.start / PAGE as u64 * PAGE as u64;
    let map = ChunkBytes::open(file, aligned, (end - aligned) as usize).map_err(io)?;
    if let ChunkBytes::Read(bytes) = &map {
        let read_to = aligned + bytes.len() as u64;
        if read_to < end {
            return Err(truncated(&input.display, read_to, end));
        }
    }
    Ok(Some((map, aligned)))
}

const PAGE: usize = 4096;

/// Chunks up to this size are read into memory rather than mapped: for a small file, a map's
/// set-up and tear-down (a `munmap` interrupts every other core running this process) cost
/// more than copying its bytes.
const READ_BELOW: usize = 256 << 10;

/// A plain chunk's bytes: mapped when big, read when small, or held since planning (up to
/// the chunk's end).
enum ChunkBytes {
    Map(memmap2::Mmap),
    Read(Vec<u8>),
    Held(std::sync::Arc<Vec<u8>>, usize),
}

impl ChunkBytes {
    /// `len` bytes of `file` from `offset` (a page boundary). A read chunk may come back
    /// shorter when the file shrank; the caller checks.
    fn open(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<ChunkBytes> {
        if len < READ_BELOW {
            return read_at(file, offset, len).map(ChunkBytes::Read);
        }
        // SAFETY: the map is read-only and private to `walk_mapped`. If another process
        // truncates the file during the load, touching the lost pages raises SIGBUS: each
        // window first checks the file's size, and `signals` turns a SIGBUS that still slips
        // between that check and the read into a message and exit 1, never a crash.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(file)?
        };
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(ChunkBytes::Map(map))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            ChunkBytes::Map(m) => m,
            ChunkBytes::Read(v) => v,
            ChunkBytes::Held(h, end) => &h[..*end],
        }
    }

    fn is_mapped(&self) -> bool {
        matches!(self, ChunkBytes::Map(_))
    }

    /// Maps a window's pages in one call rather than one fault at a time.
    fn populate(&self, offset: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if let ChunkBytes::Map(m) = self {
            let _ = m.advise_range(memmap2::Advice::PopulateRead, offset, len);
        }
        let _ = (offset, len);
    }

    /// Drops parsed pages from the process (they stay in the page cache). The caller never
    /// reads the range again.
    fn release(&self, offset: usize, len: usize) {
        if let ChunkBytes::Map(m) = self {
            // SAFETY: the range lies inside the map, and nothing reads it again.
            unsafe {
                let _ = m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len);
            }
        }
    }
}

/// Reads up to `len` bytes from `offset`, fewer only at the end of the file.
fn read_at(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset + got as u64)? {
            0 => break,
            k => got += k,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// The error for an input that shrank under the load.
fn truncated(display: &str, now: u64, needed: u64) -> Failure {
    Failure::Local(format!(
        "{display} was truncated while sluice read it (it is now {now} bytes; this chunk \
         needs {needed}): an input must not shrink during a load"
    ))
}

/// Walks a stream of blocks from the reader thread (compressed files, standard input).
fn walk_blocks(
    plan: &Plan,
    chunk: &Chunk,
    (blocks, recycle): Blocks,
    abort: Option<&AtomicBool>,
    read: &mut Duration,
    visit: &mut impl RecordVisitor,
) -> Result<u64, Failure> {
    let input = &plan.inputs[chunk.input];
    let mut parser: Option<RecordParser> = None;
    let mut lines_seen = LineTracker::new(plan, chunk);
    let mut fields = Fields::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut tail_base = 0u64;
    let mut stitch: Vec<u8> = Vec::new();
    let mut base = chunk.start;
    let mut done = false;
    while !done {
        if abort.is_some_and(|a| a.load(Ordering::Relaxed)) {
            return Err(Failure::Aborted);
        }
        let reading = Instant::now();
        let received = blocks.recv();
        *read += reading.elapsed();
        let (block, eof) = match received {
            Ok(Block::Data(b)) => (b, false),
            Ok(Block::Error(e)) => {
                return Err(Failure::Local(format!("reading {}: {e}", input.display)))
            }
            Err(_) => (Vec::new(), true),
        };
        // Created on the first block, which also fixes the line ending.
        let parser =
            parser.get_or_insert_with(|| RecordParser::new(&chunk_dialect(plan, chunk, &block)));
        let mut pos = 0usize;
        if !tail.is_empty() {
            // Stitch the record cut by the block boundary.
            let mut take = block.len().min(4096);
            loop {
                stitch.clear();
                stitch.extend_from_slice(&tail);
                stitch.extend_from_slice(&block[..take]);
                let is_eof = eof && take == block.len();
                let stitched = parser.input(&stitch, is_eof);
                match parser
                    .parse_input(&stitched, 0, &mut fields)
                    .map_err(|e| lines_seen.syntax(e, tail_base))?
                {
                    Step::NeedMore if take < block.len() => {
                        take = (take * 4).min(block.len());
                    }
                    Step::NeedMore => {
                        // The record spans the whole block: keep collecting.
                        std::mem::swap(&mut tail, &mut stitch);
                        pos = block.len();
                        break;
                    }
                    Step::Record { end, lines } => {
                        if let Some(here) = lines_seen.record(
                            tail_base,
                            tail_base + end as u64,
                            lines,
                            &stitch[..end],
                        ) {
                            if !visit.record(&fields, &stitch, tail_base, here)? {
                                return Ok(base - chunk.start);
                            }
                        }
                        pos = end - tail.len();
                        tail.clear();
                        break;
                    }
                    Step::End => {
                        done = true;
                        tail.clear();
                        break;
                    }
                }
            }
            if !tail.is_empty() {
                base += block.len() as u64;
                let _ = recycle.try_send(block);
                continue;
            }
        }
        let whole = parser.input(&block, eof);
        while !done {
            if !lines_seen.header {
                let (records, end) = visit.plain(parser, &block, base, pos)?;
                if records > 0 {
                    lines_seen.line += records as u64;
                    pos = end;
                    continue;
                }
            }
            match parser
                .parse_input(&whole, pos, &mut fields)
                .map_err(|e| lines_seen.syntax(e, base))?
            {
                Step::Record { end, lines } => {
                    if let Some(here) = lines_seen.record(
                        base + pos as u64,
                        base + end as u64,
                        lines,
                        &block[pos..end],
                    ) {
                        if !visit.record(&fields, &block, base, here)? {
                            return Ok(base - chunk.start);
                        }
                    }
                    pos = end;
                }
                Step::NeedMore => {
                    tail.clear();
                    tail.extend_from_slice(&block[pos..]);
                    tail_base = base + pos as u64;
                    break;
                }
                Step::End => done = true,
            }
        }
        if eof {
            done = true;
        }
        base += block.len() as u64;
        // Hand the buffer back to the reader: steady state allocates and zeroes nothing.
        let _ = recycle.try_send(block);
    }
    Ok(base - chunk.start)
}

/// Turns a converter error into an input error with the record's position, and the short
/// name of its cause. `record` is the record's raw bytes, shown (as a database's own client
/// shows the line) when the field count is wrong.
fn record_error(
    plan: &Plan,
    chunk: &Chunk,
    e: RecordError,
    pos: Position,
    field_offset: Option<u64>,
    record: &[u8],
) -> (InputError, &'static str) {
    let input = &plan.inputs[chunk.input];
    let mut err = InputError::new(&input.display, String::new());
    err.line = Some(pos.line);
    err.offset = Some(field_offset.unwrap_or(pos.offset));
    if field_offset.is_some() {
        err.offset_of = sluice_core::error::OffsetOf::Value;
    }
    let columns = &plan.tables[input.table].columns;
    let col = e.column.and_then(|i| columns.get(i));
    err.column = col.map(|c| format!("{} ({})", c.name, c.type_name));
    err.value = e.value;
    if matches!(e.kind, RecordErrorKind::FieldCount { .. }) {
        let nl = input.dialect.line_ending.terminator();
        let mut line = record;
        while let [rest @ .., last] = line {
            if *last == nl || *last == b'\r' {
                line = rest;
            } else {
                break;
            }
        }
        if !matches!(e.kind, RecordErrorKind::FieldCount { expected, found } if found < expected) {
            err.column = None;
        }
        err.value = None;
        err.row = Some(line.to_vec());
    }
    let cause = match &e.kind {
        RecordErrorKind::FieldCount { expected, found } if found < expected => "missing_data",
        RecordErrorKind::FieldCount { .. } => "extra_data",
        RecordErrorKind::NotNull => "not_null_violation",
        RecordErrorKind::Value(_) => "invalid_value",
    };
    err.reason = match e.kind {
        RecordErrorKind::FieldCount { expected, found } if found < expected => format!(
            "missing data: {found} fields where the table takes {expected}; the next column is {}",
            col.map_or("?", |c| c.name.as_str())
        ),
        RecordErrorKind::FieldCount { expected, found } => {
            let hint = if input.dialect.format == sluice_core::dialect::Format::Text
                && found == expected + 1
            {
                " (a trailing delimiter? use --format tbl for dbgen files)"
            } else {
                ""
            };
            format!("extra data: {found} fields where the table takes {expected}{hint}")
        }
        RecordErrorKind::NotNull => "NULL in a NOT NULL column".to_string(),
        RecordErrorKind::Value(reason) => reason,
    };
    (err, cause)
}

/// A message buffer's capacity: the message size and room for the record that crosses it.
fn message_capacity(copy_buffer: usize) -> usize {
    copy_buffer + copy_buffer / 4
}

/// One chunk's conversion as it walks the records: the encoder, the message being filled,
/// and the counts the progress display and a retry need.
struct Converting<'a, 'b, E: RecordEncoder, M> {
    plan: &'a Plan,
    chunk: &'a Chunk,
    encoder: &'a mut E,
    copy_buffer: usize,
    abort: &'a AtomicBool,
    counters: &'a Counters,
    added: &'b mut Added,
    select: Option<Selection<'b>>,
    on_reject: Option<&'b mut dyn FnMut(ClientReject) -> Result<(), Failure>>,
    out: Vec<u8>,
    records: u64,
    index: u64,
    emit: M,
    /// The slice of the last fast-path call (address, length, absolute offset).
    last_plain: Option<(usize, usize, u64)>,
}

impl<E: RecordEncoder, M: FnMut(Vec<u8>) -> Result<(), Failure>> Converting<'_, '_, E, M> {
    /// Counts `records` encoded, the last of them ending before absolute `offset`, and hands
    /// the message over once full.
    #[inline]
    fn encoded(&mut self, records: usize, offset: u64) -> Result<(), Failure> {
        self.records += records as u64;
        if self.out.len() >= self.copy_buffer {
            let capacity = message_capacity(self.copy_buffer);
            let full = std::mem::replace(&mut self.out, Vec::with_capacity(capacity));
            (self.emit)(full)?;
            let bytes = offset - self.chunk.start;
            let (counters, added) = (self.counters, &mut *self.added);
            counters
                .bytes
                .fetch_add(bytes - added.bytes, Ordering::Relaxed);
            counters
                .rows
                .fetch_add(self.records - added.rows, Ordering::Relaxed);
            added.bytes = bytes;
            added.rows = self.records;
            if self.abort.load(Ordering::Relaxed) {
                return Err(Failure::Aborted);
            }
        }
        Ok(())
    }
}

impl<E: RecordEncoder, M: FnMut(Vec<u8>) -> Result<(), Failure>> RecordVisitor
    for Converting<'_, '_, E, M>
{
    #[inline]
    fn plain(
        &mut self,
        parser: &RecordParser,
        data: &[u8],
        base: u64,
        at: usize,
    ) -> Result<(usize, usize), Failure> {
        if self.select.is_some() {
            return Ok((0, at));
        }
        // The same slice of this chunk, at the same offset in the file, is the same input:
        // within one chunk, each slice the walk hands over starts further on, or is longer.
        let input = (data.as_ptr() as usize, data.len(), base);
        let same_input = self.last_plain == Some(input);
        self.last_plain = Some(input);
        let (records, end) = self.encoder.encode_plain(
            parser,
            data,
            at,
            &mut self.out,
            self.copy_buffer,
            same_input,
        );
        if records > 0 {
            self.index += records as u64;
            self.encoded(records, base + end as u64)?;
        }
        Ok((records, end))
    }

    fn record(
        &mut self,
        fields: &Fields,
        data: &[u8],
        data_base: u64,
        pos: Position,
    ) -> Result<bool, Failure> {
        self.index += 1;
        let index = self.index;
        if let Some(sel) = &self.select {
            if index >= sel.hi {
                return Ok(false);
            }
            if !sel.sends(index) {
                return Ok(true);
            }
        }
        let before = self.out.len();
        let result = self.encoder.encode(fields, data, &mut self.out);
        if let Err(e) = result {
            self.out.truncate(before);
            let field_offset = e
                .column
                .filter(|&i| i < fields.len())
                .and_then(|i| fields.input_offset(i))
                .map(|o| data_base + o as u64);
            let from = (pos.offset - data_base) as usize;
            let to = ((pos.end - data_base) as usize).min(data.len());
            let record = data.get(from..to).unwrap_or_default();
            let (error, cause) = record_error(self.plan, self.chunk, e, pos, field_offset, record);
            return match self.on_reject.as_mut() {
                None => Err(Failure::Input(Box::new(error))),
                Some(reject) => {
                    reject(ClientReject {
                        index,
                        chunk_line: pos.line,
                        offset: pos.offset,
                        raw: record.to_vec(),
                        error,
                        cause,
                    })?;
                    Ok(true)
                }
            };
        }
        self.encoded(1, pos.end)?;
        Ok(true)
    }
}

/// Converts one chunk, handing each full message to `emit`.
pub fn convert_chunk<E: RecordEncoder>(
    job: ChunkJob<'_, '_, E>,
    emit: impl FnMut(Vec<u8>) -> Result<(), Failure>,
) -> Result<ChunkOutcome, Failure> {
    let ChunkJob {
        plan,
        chunk,
        encoder,
        framing: (prefix, suffix),
        copy_buffer,
        abort,
        counters,
        added,
        select,
        on_reject,
        read,
    } = job;
    let mut out = Vec::with_capacity(message_capacity(copy_buffer));
    out.extend_from_slice(prefix);
    let mut converting = Converting {
        plan,
        chunk,
        encoder,
        copy_buffer,
        abort,
        counters,
        added,
        select,
        on_reject,
        out,
        records: 0,
        index: 0,
        emit,
        last_plain: None,
    };
    let consumed = walk_records(plan, chunk, Some(abort), read, &mut converting)?;
    let Converting {
        mut out,
        mut emit,
        records,
        added,
        ..
    } = converting;
    out.extend_from_slice(suffix);
    emit(out)?;
    counters
        .rows
        .fetch_add(records - added.rows, Ordering::Relaxed);
    added.rows = records;
    let bytes = consumed.max(added.bytes);
    counters
        .bytes
        .fetch_add(bytes - added.bytes, Ordering::Relaxed);
    added.bytes = bytes;
    Ok(ChunkOutcome {
        records,
        bytes: consumed,
        wire_bytes: 0,
    })
}

/// How many data records a chunk holds (on the error path, to split a range of them).
pub fn count_records(plan: &Plan, chunk: &Chunk) -> Result<u64, Failure> {
    let mut n = 0u64;
    walk_each(plan, chunk, |_, _, _, _| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}

/// Finds record `n` (1-based, as the server counts a load's data rows) of a chunk, for a
/// server error: its position and the values of `columns` (NULL as `None`).
pub fn locate_record(
    plan: &Plan,
    chunk: &Chunk,
    n: u64,
    columns: &[usize],
) -> Option<(Found, Vec<Option<Vec<u8>>>)> {
    record_at(plan, chunk, n, columns).map(|r| (r.at, r.values))
}

/// A record found by its index in a chunk.
pub struct RecordAt {
    pub at: Found,
    /// The values of the columns asked for (NULL as `None`).
    pub values: Vec<Option<Vec<u8>>>,
    /// The record's bytes as they stand in the input, line ending included.
    pub raw: Vec<u8>,
}

/// Record `n` (1-based) of a chunk, with its bytes and the values of `columns`.
pub fn record_at(plan: &Plan, chunk: &Chunk, n: u64, columns: &[usize]) -> Option<RecordAt> {
    let mut seen = 0u64;
    let mut found = None;
    let _ = walk_each(plan, chunk, |fields, data, base, pos| {
        seen += 1;
        if seen == n {
            let values = columns.iter().map(|&i| value_of(fields, data, i)).collect();
            let from = (pos.offset - base) as usize;
            let to = ((pos.end - base) as usize).min(data.len());
            found = Some(RecordAt {
                at: Found {
                    line: pos.line,
                    offset: pos.offset,
                },
                values,
                raw: data.get(from..to).unwrap_or_default().to_vec(),
            });
            return Ok(false);
        }
        Ok(true)
    });
    found
}

/// The first `n` records of `chunk`: where each is, and its value of column `column` (NULL
/// as `None`).
pub fn first_values(
    plan: &Plan,
    chunk: &Chunk,
    n: u64,
    column: usize,
) -> Vec<(Found, Option<Vec<u8>>)> {
    let mut values = Vec::new();
    let _ = walk_each(plan, chunk, |fields, data, _, pos| {
        let at = Found {
            line: pos.line,
            offset: pos.offset,
        };
        values.push((at, value_of(fields, data, column)));
        Ok((values.len() as u64) < n)
    });
    values
}

/// How many bytes `encoder` writes per input byte, over the first `records` records of
/// `chunk` (those it encodes): what a spill of the chunk's table takes. `None` when none
/// encodes.
pub fn encoded_growth<E: RecordEncoder>(
    plan: &Plan,
    chunk: &Chunk,
    encoder: &mut E,
    records: u64,
) -> Option<f64> {
    let (mut seen, mut input, mut output) = (0u64, 0u64, 0usize);
    let mut out = Vec::new();
    let _ = walk_each(plan, chunk, |fields, data, _, pos| {
        out.clear();
        if encoder.encode(fields, data, &mut out).is_ok() {
            input += pos.end - pos.offset;
            output += out.len();
        }
        seen += 1;
        Ok(seen < records)
    });
    (input > 0).then(|| output as f64 / input as f64)
}

/// Where a record was found: chunk-relative line and absolute byte offset.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub line: u64,
    pub offset: u64,
}

/// A key to look for in the input: for each key column, its index among the table's columns,
/// the value as the server printed it, and that value's encoding when the destination's
/// encoder can convert it (so `1.50` in the input matches `1.5` from the server).
pub struct KeyProbe {
    pub columns: Vec<usize>,
    pub text: Vec<Vec<u8>>,
    pub encoded: Vec<Option<Vec<u8>>>,
}

impl KeyProbe {
    pub fn new(
        encoder: &mut impl RecordEncoder,
        columns: Vec<usize>,
        text: Vec<Vec<u8>>,
    ) -> KeyProbe {
        let encoded = columns
            .iter()
            .zip(&text)
            .map(|(&c, t)| encoder.encode_field(c, t))
            .collect();
        KeyProbe {
            columns,
            text,
            encoded,
        }
    }

    fn matches(&self, encoder: &mut impl RecordEncoder, fields: &Fields, data: &[u8]) -> bool {
        self.columns.iter().enumerate().all(|(k, &c)| {
            let Some(raw) = (c < fields.len()).then(|| fields.get(c, data)).flatten() else {
                return false;
            };
            raw == self.text[k].as_slice()
                || self.encoded[k]
                    .as_ref()
                    .is_some_and(|e| encoder.encode_field(c, raw).as_ref() == Some(e))
        })
    }
}

/// Finds up to `limit` records of a chunk whose key equals `probe`, giving up at `deadline`
/// (this runs only on the error path, and must not turn an error into a hang).
pub fn find_key(
    plan: &Plan,
    chunk: &Chunk,
    encoder: &mut impl RecordEncoder,
    probe: &KeyProbe,
    limit: usize,
    deadline: std::time::Instant,
) -> Vec<Found> {
    let mut found = Vec::new();
    let _ = walk_each(plan, chunk, |fields, data, _, pos| {
        if probe.matches(encoder, fields, data) {
            found.push(Found {
                line: pos.line,
                offset: pos.offset,
            });
            if found.len() >= limit {
                return Ok(false);
            }
        }
        Ok(std::time::Instant::now() < deadline)
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LoadSpec;

    fn plan_of(files: &[&std::path::Path]) -> Plan {
        let names: Vec<String> = files.iter().map(|f| f.to_str().unwrap().into()).collect();
        let tables = vec!["t".to_string(); names.len()];
        let described = [crate::plan::tests::table("t")];
        crate::plan::build(&LoadSpec::new(names), &tables, &described, None).unwrap()
    }

    /// A small chunk is read, a big one mapped: both give every record. A small file held
    /// since planning gives the bytes planning read (those its fingerprint names) whatever
    /// happens to the file after; one that is not held and shrank after planning is named, as
    /// a mapped one is.
    #[test]
    fn small_chunks_are_read_and_big_ones_mapped_with_the_same_records() {
        let dir = std::env::temp_dir().join(format!("sluice-chunk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (small, big) = (dir.join("t.1.csv"), dir.join("t.2.csv"));
        std::fs::write(&small, "1,a\n2,b\n3,c\n").unwrap();
        std::fs::write(&big, "12345,abcdef\n".repeat(40_000)).unwrap(); // 520 KB
        let mut plan = plan_of(&[&small, &big]);
        assert!(plan.inputs[0].held.is_some() && plan.inputs[1].held.is_none());
        let count = |plan: &Plan, i: usize| {
            let c = plan.chunks.iter().find(|c| c.input == i).unwrap();
            count_records(plan, c)
        };
        assert_eq!(count(&plan, 0).unwrap(), 3);
        assert_eq!(count(&plan, 1).unwrap(), 40_000);
        std::fs::write(&small, "1,a\n").unwrap();
        assert_eq!(count(&plan, 0).unwrap(), 3, "held since planning");
        plan.inputs[0].held = None;
        let err = count(&plan, 0).unwrap_err().to_string();
        assert!(err.contains("truncated while sluice read it"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
