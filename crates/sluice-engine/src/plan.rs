//! Planning a load: inputs become tables, tables become chunks, before any row is read. All
//! of the planning policy lives here (formats and dialects, which columns, chunk size and
//! order, how many streams); the command only gathers what it needs (flags, the catalog).
//!
//! The plan is the checked, "high" form of the command line (ripgrep's two layers): every
//! input has a table, a format and a dialect; every table has its columns from the catalog and
//! a load format; every chunk is a byte range that starts on a record boundary. Big plain files
//! are cut into chunks so that one file loads on every connection; compressed files and
//! standard input cannot be cut and load as one chunk each. Chunks are ordered biggest first
//! (longest-processing-time scheduling), which keeps one late big file from becoming the long
//! tail the seed paper hunted for; chunks under 256 KiB come last, in input order, so that
//! consecutive small files share loads and the ledger records them as runs.
//!
//! A chunk is known by its file's identity (path, size, modification time) and its byte
//! range, and its boundaries depend on the input alone, never on `--jobs`: the same files cut
//! the same way on every run, which is what a resume ledger keys on.

use crate::failure::Failure;
use crate::spec::{Jobs, LoadSpec};
use sluice_core::boundary::{count_quotes, next_record_start, splittable};
use sluice_core::destination::{ColumnInfo, IdentifierRules, LoadTable, TableInfo};
use sluice_core::dialect::{Dialect, Format, LineEnding};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// How an input's bytes are compressed, from its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Where an input's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputSource {
    File(PathBuf),
    Stdin,
}

/// What identifies a file's content across runs without reading it all: where it is, how
/// big it is, when it last changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    /// The absolute path, links resolved.
    pub path: PathBuf,
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch (0 when the system has none).
    pub modified_ns: u128,
}

impl FileIdentity {
    /// The identity of the file at `canonical` (an absolute path, links resolved).
    pub fn of(canonical: &std::path::Path, meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            path: canonical.to_path_buf(),
            size: meta.len(),
            modified_ns: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos()),
        }
    }
}

/// A chunk's stable name: its file and byte range (`end` is `None` to the end of the input).
/// Standard input has no identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ChunkKey {
    pub file: Option<FileIdentity>,
    pub start: u64,
    pub end: Option<u64>,
}

/// One input as given on the command line.
#[derive(Clone, Debug)]
pub struct Input {
    /// The file's identity (`None` for standard input).
    pub identity: Option<FileIdentity>,
    /// The ledger's fingerprint, when planning read the whole file already (small files).
    pub fingerprint: Option<String>,
    /// The whole file as planning read it, for a small file within [`HELD_BYTES`]: the load
    /// converts these bytes (the ones the fingerprint names) instead of opening the file again,
    /// which for thousands of small files is most of their cost.
    pub held: Option<std::sync::Arc<Vec<u8>>>,
    pub source: InputSource,
    /// The name shown in messages: the path as given, or `-`.
    pub display: String,
    pub compression: Compression,
    /// Size on disk (compressed size for compressed files); 0 for stdin.
    pub size: u64,
    pub table: usize,
    pub dialect: Dialect,
    /// The header line as the load read it (line ending included), kept for the rejects file
    /// when the input is standard input, which cannot be read twice.
    pub header_line: std::sync::Arc<std::sync::OnceLock<Vec<u8>>>,
}

/// One target table and the columns its inputs fill.
#[derive(Clone, Debug)]
pub struct TablePlan {
    /// The table as the destination described it.
    pub table: TableInfo,
    /// The columns the input fields map to, in field order.
    pub columns: Vec<ColumnInfo>,
}

impl TablePlan {
    /// Columns the server converts from text, for the summary.
    pub fn server_converted(&self) -> Vec<&ColumnInfo> {
        self.columns
            .iter()
            .filter(|c| !c.client_converted)
            .collect()
    }

    /// What the destination is told to load.
    pub fn load_table(&self) -> LoadTable {
        LoadTable {
            table: self.table.clone(),
            columns: self.columns.iter().map(|c| c.name.clone()).collect(),
        }
    }
}

/// Parses a column list with the destination's identifier rules, as its server parses a
/// column list (`t (a, "B")`): unquoted names fold to lower case where the rules say so,
/// quoted names are taken as they are (a doubled quote for a quote), and names longer than the
/// rules allow are cut, as the server cuts them.
pub fn parse_column_list(list: &str, rules: &IdentifierRules) -> Result<Vec<String>, String> {
    let q = rules.quote;
    let mut names = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        if chars.peek() == Some(&q) {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted name in --columns `{list}`")),
                    Some(c) if c == q && chars.peek() == Some(&q) => {
                        chars.next();
                        name.push(q);
                    }
                    Some(c) if c == q => break,
                    Some(c) => name.push(c),
                }
            }
            if name.is_empty() {
                return Err(format!(
                    "an empty quoted name ({q}{q}) in --columns `{list}`"
                ));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                if c == q {
                    return Err(format!(
                        "a quote inside a name in --columns `{list}`: quote the whole name"
                    ));
                }
                name.push(if rules.fold_lower {
                    c.to_ascii_lowercase()
                } else {
                    c
                });
                chars.next();
            }
            if name.is_empty() {
                return Err(format!("an empty column name in --columns `{list}`"));
            }
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if name.len() > rules.max_bytes {
            let mut cut = rules.max_bytes;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
        }
        names.push(name);
        match chars.next() {
            None => return Ok(names),
            Some(',') => {}
            Some(c) => {
                return Err(format!(
                    "unexpected `{c}` after column \"{}\" in --columns `{list}`",
                    names.last().map_or("", |n| n.as_str())
                ))
            }
        }
    }
}

/// Picks the columns a file's fields map to: all of them in order, or the `--columns` list,
/// whose names are already identifiers (folded or unquoted by SQL's rules) and so must match
/// exactly, as the server matches them in a load's column list.
pub fn select_columns(
    table: &TableInfo,
    names: Option<&[String]>,
) -> Result<Vec<ColumnInfo>, String> {
    let Some(names) = names else {
        return Ok(table.columns.clone());
    };
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let Some(col) = table.columns.iter().find(|c| &c.name == n) else {
            let have: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
            let hint = table
                .columns
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(n))
                .map_or(String::new(), |c| {
                    format!(
                        "; to name {} write it in double quotes, as in SQL: --columns '{}'",
                        quote(&c.name),
                        quote(&c.name)
                    )
                });
            return Err(format!(
                "table {} has no column \"{n}\" (it has: {}){hint}",
                table.qualified,
                have.join(", ")
            ));
        };
        if out.iter().any(|c: &ColumnInfo| c.name == col.name) {
            return Err(format!("column \"{n}\" is named twice in --columns"));
        }
        out.push(col.clone());
    }
    Ok(out)
}

/// A byte range of one input that loads as one bulk statement.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// Position in [`Plan::chunks`] (this run's index, for per-run tallies); the chunk's
    /// identity across runs is [`Chunk::key`].
    pub id: usize,
    pub input: usize,
    pub start: u64,
    /// Exclusive end; `None` reads to the end of the input.
    pub end: Option<u64>,
}

impl Chunk {
    /// Whether the chunk holds the input's first line (header, line-ending detection).
    pub fn is_first(&self) -> bool {
        self.start == 0
    }

    /// The chunk's stable name: file identity and byte range.
    pub fn key(&self, inputs: &[Input]) -> ChunkKey {
        ChunkKey {
            file: inputs[self.input].identity.clone(),
            start: self.start,
            end: self.end,
        }
    }

    /// Size used for scheduling and progress.
    pub fn weight(&self, inputs: &[Input]) -> u64 {
        match self.end {
            Some(e) => e - self.start,
            None => inputs[self.input].size.saturating_sub(self.start),
        }
    }
}

/// The whole checked plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub tables: Vec<TablePlan>,
    pub inputs: Vec<Input>,
    /// Biggest first; those under 256 KiB last, in input order.
    pub chunks: Vec<Chunk>,
    /// The size big files were cut at (a resume cuts them the same way).
    pub chunk_size: u64,
}

impl Plan {
    /// Keeps the chunks `keep` says to (the rest were loaded by an earlier run), numbered
    /// anew.
    pub fn retain_chunks(&mut self, keep: impl FnMut(&Chunk) -> bool) {
        self.chunks.retain(keep);
        for (id, c) in self.chunks.iter_mut().enumerate() {
            c.id = id;
        }
    }
}

/// The default chunk size: an eighth of the input, between 16 MiB and 1 GiB. It depends on the
/// input alone, so that the same files are cut the same way whatever `--jobs` is. An eighth
/// is what the former jobs-based rule (input / (4 x jobs)) gave at this machine's default of
/// two streams; a thirty-second, tried first, made the SF1 load about 5% slower here (more,
/// smaller loads; BENCHMARKS.md). The bounds keep each load's overhead negligible for small inputs
/// and a lost chunk cheap to redo for huge ones.
pub fn default_chunk_size(total: u64) -> u64 {
    (total / 8).clamp(16 << 20, 1 << 30)
}

/// Standard input as an input: one chunk, in the format `--format` gives.
fn stdin_input(spec: &LoadSpec, table: usize) -> Result<Input, Failure> {
    let format = spec.format.ok_or_else(|| {
        Failure::Usage("reading standard input needs --format tbl|csv|text".into())
    })?;
    Ok(Input {
        identity: None,
        fingerprint: None,
        held: None,
        source: InputSource::Stdin,
        display: "-".into(),
        compression: Compression::None,
        size: 0,
        table,
        dialect: dialect_for(format, spec)?,
        header_line: Default::default(),
    })
}

/// How much of the inputs' bytes planning keeps in memory for the load, all files together.
pub const HELD_BYTES: u64 = 64 << 20;

/// How much of a file's start planning reads: all of a small file.
const PLAN_READ: usize = 64 << 10;

/// A file as an input, from one open: its identity, compression, line ending, and (when it
/// is small enough to have been read whole) its ledger fingerprint and, while `budget` lasts,
/// its bytes.
fn file_input(
    spec: &LoadSpec,
    f: &str,
    table: usize,
    budget: &std::sync::atomic::AtomicU64,
) -> Result<Input, Failure> {
    let path = PathBuf::from(f);
    let mut opened = open_input(f, PLAN_READ)?;
    let format = format_for(f, spec.format).map_err(Failure::Usage)?;
    let mut dialect = dialect_for(format, spec)?;
    let compression = Compression::sniff(&opened.head);
    check_compression(f, compression)?;
    if compression == Compression::None {
        dialect.line_ending = detect_line_ending(&opened.head, &dialect);
    }
    let whole = opened.head_is_whole();
    Ok(Input {
        identity: Some(FileIdentity::of(&opened.canonical, &opened.meta)),
        fingerprint: whole.then(|| crate::ledger::fingerprint_whole(&opened.head)),
        held: whole
            .then(|| std::mem::take(&mut opened.head))
            .and_then(|whole| hold(whole, budget)),
        source: InputSource::File(path),
        display: f.to_string(),
        compression,
        size: opened.meta.len(),
        table,
        dialect,
        header_line: Default::default(),
    })
}

/// A wholly read file's bytes, kept (as they were read, not copied) when they fit what is
/// left of `budget`.
fn hold(whole: Vec<u8>, budget: &std::sync::atomic::AtomicU64) -> Option<std::sync::Arc<Vec<u8>>> {
    use std::sync::atomic::Ordering;
    let size = whole.len() as u64;
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(size)
        })
        .ok()
        .map(|_| std::sync::Arc::new(whole))
}

/// Every input of the command, each file opened once (on several threads when there are
/// many), in the command's order; the first error in that order. Tables are assigned later.
pub fn plan_inputs(spec: &LoadSpec) -> Result<Vec<Input>, Failure> {
    PLANNING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let budget = std::sync::atomic::AtomicU64::new(HELD_BYTES);
    let each = |i: usize| match spec.files[i].as_str() {
        "-" => stdin_input(spec, usize::MAX),
        f => file_input(spec, f, usize::MAX, &budget),
    };
    par_map(spec.files.len(), each).into_iter().collect()
}

/// `f(0..n)` in order, on up to one thread per core when `n` is large: planning 100,000 small
/// files is an open and a read each, which the cores share.
pub fn par_map<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let threads = available_cores().min(8).min(n / 256).max(1);
    if threads == 1 {
        return (0..n).map(f).collect();
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                scope.spawn(move || (t * per..((t + 1) * per).min(n)).map(f).collect::<Vec<R>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a planning thread panicked"))
            .collect()
    })
}

/// Builds the plan from the checked flags, the files and the tables the catalog described
/// (`described[i]` for the name `file_tables` gives each file). `columns` is the parsed
/// `--columns` list.
pub fn build(
    spec: &LoadSpec,
    file_tables: &[String],
    described: &[(String, TableInfo)],
    columns: Option<Vec<String>>,
) -> Result<Plan, Failure> {
    let checked = spec
        .checked
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let mut inputs = match checked {
        Some(checked) if checked.len() == spec.files.len() => checked,
        _ => plan_inputs(spec)?,
    };
    for (input, name) in inputs.iter_mut().zip(file_tables) {
        input.table = described
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| Failure::Local(format!("table {name} was not described")))?;
    }
    // Each table's columns: --columns, the header's names, or all in order.
    let mut tables: Vec<TablePlan> = Vec::new();
    for (t, (name, table)) in described.iter().enumerate() {
        let names = if spec.match_header {
            Some(header_columns(table, &inputs, t).map_err(|e| {
                Failure::Usage(match spec.table {
                    Some(_) => e,
                    None => format!("table {name}: {e}"),
                })
            })?)
        } else {
            columns.clone()
        };
        let columns = select_columns(table, names.as_deref()).map_err(Failure::Usage)?;
        tables.push(TablePlan {
            table: table.clone(),
            columns,
        });
    }
    // Chunks: cut big plain files, biggest work first.
    let total: u64 = inputs.iter().map(|i| i.size).sum();
    let chunk_target = spec.chunk_size.unwrap_or_else(|| default_chunk_size(total));
    let mut chunks = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let ranges = match (&input.source, input.compression) {
            (InputSource::File(p), Compression::None) => {
                split_file(p, input.size, &input.dialect, chunk_target)
                    .map_err(|e| Failure::Local(format!("cannot read {}: {e}", input.display)))?
            }
            _ => vec![(0, None)],
        };
        for (start, end) in ranges {
            chunks.push(Chunk {
                id: 0,
                input: i,
                start,
                end,
            });
        }
    }
    // Biggest first; ties in input order, so that the order is the same on every run. Chunks
    // under 256 KiB (those that may share a load) come last, in input order: consecutive files
    // share a load, and the ledger records them as one run (sorted by size, 100,000 tiny files
    // of a few sizes interleaved, and made 28,000 records where 100 would do).
    let order = |c: &Chunk| match c.weight(&inputs) {
        w if w < crate::strategy::SMALL_CHUNK => 0,
        w => w,
    };
    chunks.sort_by_key(|c| (std::cmp::Reverse(order(c)), c.input, c.start));
    for (id, c) in chunks.iter_mut().enumerate() {
        c.id = id;
    }
    Ok(Plan {
        tables,
        inputs,
        chunks,
        chunk_size: chunk_target,
    })
}

/// A `.gz` or `.zst` name is a promise about the bytes: a file that breaks it would be read
/// as plain text and fail on garbage, so say what is wrong instead. (A plain name with
/// compressed bytes is read as what the bytes are.)
fn check_compression(name: &str, found: Compression) -> Result<(), Failure> {
    let promised = if name.ends_with(".gz") {
        (Compression::Gzip, "gzip", "1f 8b")
    } else if name.ends_with(".zst") {
        (Compression::Zstd, "zstd", "28 b5 2f fd")
    } else {
        return Ok(());
    };
    if found == promised.0 {
        return Ok(());
    }
    let is = match found {
        Compression::None => "not compressed".to_string(),
        Compression::Gzip => "gzip".into(),
        Compression::Zstd => "zstd".into(),
    };
    Err(Failure::Local(format!(
        "cannot read {name}: its name promises {} but its bytes are {is} (a {} file starts with \
         {}); rename it to what it is",
        promised.1, promised.1, promised.2
    )))
}

/// How many streams: `--jobs` or the default, never more than the chunks, and within the
/// free connection slots: each stream opens `per_stream` connections (two when a load stages
/// some tables and loads others directly: a staged unit commits on a connection of its own),
/// two or more streams also need the watchdog's, and `extra` more are opened besides (stage's
/// publish). Returns a warning when the slots cut the number.
pub fn choose_jobs(
    wanted: Jobs,
    chunks: usize,
    free_slots: Option<u64>,
    (per_stream, extra): (u64, u64),
    dry_run: bool,
) -> (usize, Option<String>) {
    // `auto` may go up to twice the cores (the server's and the client's share them, or the
    // server is elsewhere), at most 16; the calibration decides how far.
    let wanted = match wanted {
        Jobs::Auto => (2 * available_cores()).min(16),
        Jobs::Fixed(w) => w,
        Jobs::Default => default_jobs(),
    };
    let mut jobs = wanted.max(1).min(chunks.max(1));
    let needed = |j: u64| j * per_stream + u64::from(j > 1) + extra;
    let free_slots = free_slots.unwrap_or(u64::MAX);
    if !dry_run && free_slots < needed(jobs as u64) {
        let fit = free_slots.saturating_sub(1 + extra) / per_stream.max(1);
        let slots = if fit >= 2 { fit as usize } else { 1 };
        let warning = format!(
            "the server, the role or the database leaves {free_slots} free connection slots \
             (max_connections, CONNECTION LIMIT); using {slots} job{}",
            if slots == 1 { "" } else { "s" }
        );
        jobs = slots;
        return (jobs, Some(warning));
    }
    (jobs, None)
}

fn one_byte(flag: &str, s: &str) -> Result<u8, Failure> {
    let v = match s {
        "\\t" | "tab" => "\t",
        other => other,
    };
    if v.len() != 1 {
        return Err(Failure::Usage(format!(
            "--{flag} must be a single one-byte character, not `{s}`"
        )));
    }
    Ok(v.as_bytes()[0])
}

fn dialect_for(format: Format, spec: &LoadSpec) -> Result<Dialect, Failure> {
    let mut d = Dialect::new(format);
    if let Some(x) = &spec.delimiter {
        d.delimiter = one_byte("delimiter", x)?;
    }
    if spec.quote.is_some() || spec.escape.is_some() {
        if format != Format::Csv {
            return Err(Failure::Usage(
                "--quote and --escape apply to CSV only (give --format csv)".into(),
            ));
        }
        if let Some(q) = &spec.quote {
            d.quote = one_byte("quote", q)?;
            d.escape = d.quote;
        }
        if let Some(e) = &spec.escape {
            d.escape = one_byte("escape", e)?;
        }
    }
    if let Some(n) = &spec.null {
        d.null = n.as_bytes().to_vec();
    }
    d.header = spec.header;
    d.validate().map_err(Failure::Usage)?;
    Ok(d)
}

/// The table columns named by the header of every input of table `t`, for --match-header:
/// each name matches a column exactly, or ignoring case when only one column matches, and
/// every file of the table must have the same header.
fn header_columns(table: &TableInfo, inputs: &[Input], t: usize) -> Result<Vec<String>, String> {
    let mut header: Option<(String, Vec<String>)> = None;
    for input in inputs.iter().filter(|i| i.table == t) {
        let names = read_header(input)?;
        match &header {
            None => header = Some((input.display.clone(), names)),
            Some((first, h)) if *h != names => {
                return Err(format!(
                    "--match-header: {} and {first} have different headers ({} against {})",
                    input.display,
                    show_names(&names),
                    show_names(h)
                ))
            }
            Some(_) => {}
        }
    }
    let Some((file, names)) = header else {
        return Err("--match-header: no input".into());
    };
    let show = |n: &str| sluice_core::error::show_value(n.as_bytes());
    names
        .iter()
        .map(|n| {
            if let Some(c) = table.columns.iter().find(|c| &c.name == n) {
                return Ok(c.name.clone());
            }
            let folded: Vec<&str> = table
                .columns
                .iter()
                .filter(|c| c.name.eq_ignore_ascii_case(n.trim()))
                .map(|c| c.name.as_str())
                .collect();
            match folded.as_slice() {
                [one] => Ok(one.to_string()),
                [] => Err(format!(
                    "the header of {file} names {}, which is not a column of {} (it has: \
                     {}); rename the header field, or map by position with --columns",
                    show(n),
                    table.qualified,
                    table
                        .columns
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                several => Err(format!(
                    "the header of {file} names {}, which matches columns {} but none \
                     exactly; use --columns",
                    show(n),
                    several.join(" and ")
                )),
            }
        })
        .collect()
}

/// Header names for a message, each shown with its invisible characters spelled out.
fn show_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| sluice_core::error::show_value(n.as_bytes()))
        .collect::<Vec<_>>()
        .join(",")
}

/// How much of an input's start is read for its first record: a longer header is refused.
const HEAD_BYTES: u64 = 1 << 20;

/// An input file's first record: the bytes read from its start, the record's length in them
/// (line ending included) and its fields. `None` when the input is empty or its first record is
/// longer than [`HEAD_BYTES`].
fn first_record(
    input: &Input,
) -> std::io::Result<Option<(Vec<u8>, usize, sluice_core::records::Fields)>> {
    let whole = Chunk {
        id: 0,
        input: 0,
        start: 0,
        end: None,
    };
    let mut reader = crate::source::open_chunk(input, &whole)?;
    let mut head = Vec::new();
    (&mut reader).take(HEAD_BYTES).read_to_end(&mut head)?;
    let mut dialect = input.dialect.clone();
    dialect.line_ending = detect_line_ending(&head, &dialect);
    let parser = sluice_core::records::RecordParser::new(&dialect);
    let mut fields = sluice_core::records::Fields::new();
    let whole_file = (head.len() as u64) < HEAD_BYTES;
    Ok(match parser.parse(&head, 0, whole_file, &mut fields) {
        Ok(sluice_core::records::Step::Record { end, .. }) => Some((head, end, fields)),
        _ => None,
    })
}

/// The field names of an input's first line.
fn read_header(input: &Input) -> Result<Vec<String>, String> {
    if input.source == InputSource::Stdin {
        return Err(
            "--match-header cannot read standard input's header ahead of the load: name the \
             columns with --columns"
                .into(),
        );
    }
    let first = first_record(input).map_err(|e| format!("cannot read {}: {e}", input.display))?;
    let Some((head, _, fields)) = first else {
        return Err(format!(
            "{} has no header line to match (it is empty, or its first line is longer than 1 MB)",
            input.display
        ));
    };
    // Spreadsheets start their files with a UTF-8 byte-order mark; it names no column
    // (DuckDB's and pandas' readers drop it too). The load skips the header line, mark and all.
    let bom = if head.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    Ok((0..fields.len())
        .map(|i| {
            let name = fields.get(i, &head).unwrap_or_default();
            let name = if i == 0 {
                &name[bom.min(name.len())..]
            } else {
                name
            };
            String::from_utf8_lossy(name).into_owned()
        })
        .collect())
}

/// The bytes of an input's first record, line ending included: its header line, for the
/// rejects file (standard input's, which cannot be read again, as the load read it). `None`
/// when it has none.
pub fn header_line(input: &Input) -> std::io::Result<Option<Vec<u8>>> {
    if let Some(line) = input.header_line.get() {
        return Ok(Some(line.clone()));
    }
    if input.source == InputSource::Stdin {
        return Ok(None);
    }
    Ok(first_record(input)?.map(|(mut head, end, _)| {
        head.truncate(end);
        head
    }))
}

/// Checks that an input can be read: a missing, unreadable or non-regular file is a local
/// failure (exit 1), found before anything loads (and before a server starts for the load).
pub fn check_input(f: &str) -> Result<std::fs::Metadata, Failure> {
    Ok(open_input(f, 0)?.meta)
}

/// An input file as one open saw it: its metadata, its first bytes, and its absolute path.
/// The file is closed again: 100,000 inputs must not hold 100,000 descriptors.
pub struct OpenedInput {
    pub meta: std::fs::Metadata,
    /// Up to the number of bytes asked for, from the start.
    pub head: Vec<u8>,
    /// The absolute path with links resolved.
    pub canonical: PathBuf,
}

impl OpenedInput {
    /// The whole file was read into `head`.
    pub fn head_is_whole(&self) -> bool {
        self.head.len() as u64 == self.meta.len()
    }
}

/// The absolute path of an open file, links resolved. On Linux the descriptor names it in one
/// call, instead of a lookup per path component (which adds up over 100,000 files).
fn canonical_path(file: &File, path: &std::path::Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        if let Ok(p) = std::fs::read_link(link) {
            if p.is_absolute() && !p.to_string_lossy().ends_with(" (deleted)") {
                return p;
            }
        }
    }
    let _ = file;
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Which planning the directories resolved by [`canonical_in_dir`] belong to: each
/// [`plan_inputs`] starts a new one, so that a process that plans twice (a library's caller
/// that changes directory, or renames one, in between) never reuses an earlier planning's.
static PLANNING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The absolute path of a file that is not itself a link: its directory's, links resolved
/// (asked once per directory, thread and planning), and its name. `None` when the path has no
/// name or its directory cannot be resolved.
fn canonical_in_dir(path: &std::path::Path) -> Option<PathBuf> {
    use std::collections::HashMap;
    type Dirs = (u64, HashMap<PathBuf, Option<PathBuf>>);
    thread_local! {
        static DIRS: std::cell::RefCell<Dirs> = std::cell::RefCell::new((0, HashMap::new()));
    }
    let name = path.file_name()?;
    let parent = match path.parent()? {
        p if p.as_os_str().is_empty() => std::path::Path::new("."),
        p => p,
    };
    let planning = PLANNING.load(std::sync::atomic::Ordering::Relaxed);
    let dir = DIRS.with(|dirs| {
        let mut dirs = dirs.borrow_mut();
        if dirs.0 != planning {
            *dirs = (planning, HashMap::new());
        }
        dirs.1
            .entry(parent.to_path_buf())
            .or_insert_with(|| std::fs::canonicalize(parent).ok())
            .clone()
    })?;
    Some(dir.join(name))
}

/// Opens `f` without blocking (a FIFO given by mistake is refused rather than waited on), and
/// its absolute path. A file that is not a link is opened without following one, so that its
/// path is its directory's and its name; a link's target is asked of the descriptor.
fn open_named(f: &str) -> std::io::Result<(File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |flags| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(f)
    };
    let path = std::path::Path::new(f);
    match open(libc::O_NONBLOCK | libc::O_NOFOLLOW) {
        Ok(file) => {
            let canonical = canonical_in_dir(path).unwrap_or_else(|| canonical_path(&file, path));
            Ok((file, canonical))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            let file = open(libc::O_NONBLOCK)?;
            let canonical = canonical_path(&file, path);
            Ok((file, canonical))
        }
        Err(e) => Err(e),
    }
}

/// Opens an input once: checks that it is a readable regular file, and reads up to `head`
/// bytes from its start.
pub fn open_input(f: &str, head: usize) -> Result<OpenedInput, Failure> {
    let cannot = |e: std::io::Error| Failure::Local(format!("cannot read {f}: {e}"));
    let (file, canonical) = open_named(f).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if meta.is_dir() {
        return Err(Failure::Local(format!(
            "{f} is a directory: give the files in it, for example '{f}/*.csv' (quoted, sluice expands it)"
        )));
    }
    if !meta.is_file() {
        return Err(Failure::Local(format!("{f} is not a regular file")));
    }
    let want = (head as u64).min(meta.len()) as usize;
    let mut buf = vec![0; want];
    let got = read_full(&mut (&file), &mut buf).map_err(cannot)?;
    buf.truncate(got);
    Ok(OpenedInput {
        canonical,
        meta,
        head: buf,
    })
}

fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// The default number of streams (see `--jobs`).
fn default_jobs() -> usize {
    available_cores().clamp(2, 8)
}

/// The table a file loads into by default: its name up to the first dot.
pub fn table_from_file_name(path: &str) -> Option<String> {
    let name = std::path::Path::new(path).file_name()?.to_str()?;
    let stem = name.split('.').next()?;
    (!stem.is_empty()).then(|| stem.to_string())
}

/// Reads the first bytes of a file, for compression sniffing and line-ending detection.
pub fn read_head(path: &PathBuf, n: usize) -> std::io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let mut buf = vec![0; n];
    let filled = read_full(&mut f, &mut buf)?;
    buf.truncate(filled);
    Ok(buf)
}

/// Cuts a plain file into chunks of about `target` bytes at record boundaries.
pub fn split_file(
    path: &PathBuf,
    size: u64,
    dialect: &Dialect,
    target: u64,
) -> std::io::Result<Vec<(u64, Option<u64>)>> {
    if size <= target.saturating_mul(3) / 2 || !splittable(dialect) {
        return Ok(vec![(0, None)]);
    }
    let pieces = size.div_ceil(target);
    let nominal: Vec<u64> = (1..pieces).map(|k| k * size / pieces).collect();
    // CSV: the quote parity at each nominal cut, from one counting pass over the file.
    let parities: Vec<bool> = if dialect.is_csv() {
        let mut f = File::open(path)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0u64;
        let mut count = 0u64;
        let mut out = Vec::with_capacity(nominal.len());
        let mut next = 0;
        while next < nominal.len() {
            let want = ((nominal[next] - pos) as usize).min(buf.len());
            let k = f.read(&mut buf[..want])?;
            if k == 0 {
                break;
            }
            count += count_quotes(&buf[..k], dialect.quote);
            pos += k as u64;
            if pos == nominal[next] {
                out.push(count % 2 == 1);
                next += 1;
            }
        }
        out
    } else {
        vec![false; nominal.len()]
    };
    let mut f = File::open(path)?;
    let mut cuts = vec![0u64];
    let mut window = vec![0u8; 1 << 20];
    for (i, &at) in nominal.iter().enumerate() {
        if at <= *cuts.last().unwrap_or(&0) {
            continue;
        }
        // Search from one byte before the nominal cut, so that a cut falling exactly after a
        // newline is found, and so text can see a backslash before the first newline.
        let mut offset = at - 1;
        let mut found = None;
        while found.is_none() && offset < size {
            f.seek(SeekFrom::Start(offset))?;
            let k = read_full(&mut f, &mut window)?;
            if k == 0 {
                break;
            }
            let from = usize::from(offset == at - 1);
            // `parities[i]` is the quote parity at `at`; the window starts one byte earlier.
            let parity = dialect.is_csv() && (parities[i] ^ (window[0] == dialect.quote));
            found =
                next_record_start(dialect, &window[..k], from, parity).map(|p| offset + p as u64);
            if dialect.is_csv() {
                // Parity is only known at the nominal cut: a CSV record longer than the
                // window means no cut here, which is safe.
                break;
            }
            offset += k as u64;
        }
        if let Some(cut) = found.filter(|&c| c < size && c > *cuts.last().unwrap_or(&0)) {
            cuts.push(cut);
        }
    }
    let ranges = cuts
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, cuts.get(i + 1).copied()))
        .collect();
    Ok(ranges)
}

fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let k = f.read(&mut buf[filled..])?;
        if k == 0 {
            break;
        }
        filled += k;
    }
    Ok(filled)
}

/// The line ending of an input, from its first bytes.
pub fn detect_line_ending(head: &[u8], dialect: &Dialect) -> LineEnding {
    LineEnding::detect(head, dialect.is_csv().then_some(dialect.quote))
}

/// The format of a file, from `--format` or its name.
pub fn format_for(name: &str, given: Option<Format>) -> Result<Format, String> {
    if let Some(f) = given {
        return Ok(f);
    }
    Format::from_file_name(name).ok_or_else(|| {
        format!(
            "cannot tell the format of `{name}` from its name (.tbl, .csv, .tsv/.txt, optionally \
             .gz/.zst): give --format tbl|csv|text"
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A described table of two text columns, `a` and `b`.
    pub(crate) fn table(name: &str) -> (String, TableInfo) {
        let columns = ["a", "b"]
            .iter()
            .map(|c| ColumnInfo {
                name: c.to_string(),
                type_name: "text".into(),
                not_null: false,
                client_converted: true,
            })
            .collect();
        (
            name.to_string(),
            TableInfo {
                id: "1".into(),
                schema: "public".into(),
                name: name.to_string(),
                qualified: format!("public.{name}"),
                columns,
                references: Vec::new(),
            },
        )
    }

    /// Planning holds files' bytes only while its budget lasts, and never a file it did not
    /// read whole: the rest are read by the load, so memory stays bounded however many.
    #[test]
    fn held_bytes_stay_within_the_budget() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let dir = std::env::temp_dir().join(format!("sluice-plan-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small.csv");
        std::fs::write(&small, "1,x\n".repeat(1000)).unwrap();
        let big = dir.join("big.csv");
        std::fs::write(&big, "1,x\n".repeat(PLAN_READ)).unwrap();
        let spec = LoadSpec::new(vec![]);
        let budget = AtomicU64::new(6000);
        let f = small.to_str().unwrap();
        let first = file_input(&spec, f, 0, &budget).unwrap();
        assert_eq!(first.held.as_deref().map(Vec::len), Some(4000));
        assert_eq!(budget.load(Ordering::Relaxed), 2000);
        let second = file_input(&spec, f, 0, &budget).unwrap();
        assert!(second.held.is_none(), "past the budget");
        assert_eq!(budget.load(Ordering::Relaxed), 2000);
        let large = file_input(&spec, big.to_str().unwrap(), 0, &AtomicU64::new(u64::MAX));
        assert!(large.unwrap().held.is_none(), "not read whole");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Many small files are planned on several threads, in the command's order, each from one
    /// open: a link names its target, and the fingerprint taken from the bytes read while
    /// planning is the one the ledger would read from the file.
    #[test]
    fn many_small_files_plan_in_order_with_their_identities() {
        let dir = std::env::temp_dir().join(format!("sluice-plan-many-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = Vec::new();
        for i in 0..600 {
            let f = dir.join(format!("t{i:03}.csv"));
            std::fs::write(&f, format!("{i},x\n").repeat(i + 1)).unwrap();
            files.push(f.to_str().unwrap().to_string());
        }
        let link = dir.join("link.csv");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&files[7], &link).unwrap();
        files.push(link.to_str().unwrap().to_string());
        let spec = LoadSpec::new(files.clone());
        let plan = build(
            &spec,
            &vec!["t".to_string(); files.len()],
            &[table("t")],
            None,
        )
        .unwrap();
        for (input, f) in plan.inputs.iter().zip(&files) {
            assert_eq!(&input.display, f);
            let id = input.identity.as_ref().unwrap();
            assert_eq!(id.path, std::fs::canonicalize(f).unwrap());
            let read = crate::ledger::fingerprint(std::path::Path::new(f), input.size).unwrap();
            assert_eq!(input.fingerprint.as_deref(), Some(read.as_str()), "{f}");
            // Its bytes are held for the load, which then opens it no more.
            let held = input.held.as_deref().expect("a small file is held");
            assert_eq!(held, std::fs::read(f).unwrap().as_slice(), "{f}");
        }
        assert_eq!(plan.inputs[600].identity, plan.inputs[7].identity);
        // A missing file among them is the first error in the command's order.
        let mut missing = files.clone();
        missing[300] = dir.join("gone.csv").to_str().unwrap().to_string();
        missing[500] = dir.join("gone2.csv").to_str().unwrap().to_string();
        let spec = LoadSpec::new(missing.clone());
        let err = build(
            &spec,
            &vec!["t".to_string(); missing.len()],
            &[table("t")],
            None,
        )
        .err()
        .unwrap();
        assert!(format!("{err}").contains("gone.csv"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The same files are cut into the same chunks, named by file and range, in the same
    /// order, whatever `--jobs` is: what a resume ledger keys on (issue 8).
    #[test]
    fn chunks_do_not_depend_on_jobs_and_are_named_by_file_and_range() {
        let dir = std::env::temp_dir().join(format!("sluice-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = "some text,more text\n";
        let big = dir.join("t.1.csv");
        let small = dir.join("t.2.csv");
        std::fs::write(&big, line.repeat(2_500_000)).unwrap(); // 50 MB
        std::fs::write(&small, line.repeat(1_000)).unwrap();
        let files: Vec<String> = [&big, &small]
            .iter()
            .map(|p| p.to_str().unwrap().to_string())
            .collect();
        let described = vec![table("t")];
        let tables = vec!["t".to_string(); 2];
        let keys = |jobs: usize| {
            let spec = LoadSpec {
                jobs: Jobs::Fixed(jobs),
                ..LoadSpec::new(files.clone())
            };
            let plan = build(&spec, &tables, &described, None).unwrap();
            plan.chunks
                .iter()
                .map(|c| c.key(&plan.inputs))
                .collect::<Vec<_>>()
        };
        let one = keys(1);
        assert_eq!(one, keys(2));
        assert_eq!(one, keys(8));
        // 50 MB at the 16 MiB minimum: three chunks of the big file, then the small one.
        assert_eq!(one.len(), 4, "{one:?}");
        let mut ranges: Vec<(u64, Option<u64>)> =
            one[..3].iter().map(|k| (k.start, k.end)).collect();
        ranges.sort();
        assert_eq!(ranges[0].0, 0);
        for w in ranges.windows(2) {
            assert_eq!(w[0].1, Some(w[1].0), "contiguous: {ranges:?}");
        }
        assert_eq!(ranges[2].1, None);
        let big_id = one[0].file.clone().unwrap();
        assert_eq!(big_id.path, std::fs::canonicalize(&big).unwrap());
        assert_eq!(big_id.size, 50_000_000);
        assert!(big_id.modified_ns > 0);
        assert_eq!(one[3].file.as_ref().unwrap().size, 20_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Double quotes, folding to lower case, 63 bytes: the rules of a column list in SQL's
    /// standard spelling.
    fn standard_rules() -> IdentifierRules {
        IdentifierRules {
            quote: '"',
            fold_lower: true,
            case_insensitive_columns: false,
            max_bytes: 63,
        }
    }

    #[test]
    fn column_lists_follow_the_destinations_identifier_rules() {
        let p = |s: &str| parse_column_list(s, &standard_rules());
        assert_eq!(p("ID,v").unwrap(), ["id", "v"]);
        assert_eq!(p(" a , B ").unwrap(), ["a", "b"]);
        assert_eq!(
            p("\"Ünï \"\"q\"\"\",\"my col\"").unwrap(),
            ["Ünï \"q\"", "my col"]
        );
        assert_eq!(p("\"a,b\",\"ColA\"").unwrap(), ["a,b", "ColA"]);
        // Only ASCII letters fold, as in a UTF8 database.
        assert_eq!(p("ÄB").unwrap(), ["Äb"]);
        assert_eq!(p(&"x".repeat(70)).unwrap(), ["x".repeat(63)]);
        for bad in ["", "a,,b", "a,", "\"open", "a b", "x\"y\"", "\"\""] {
            assert!(p(bad).is_err(), "{bad:?} should be refused");
        }
        // Backquotes and no folding, as some servers write names.
        let maria = IdentifierRules {
            quote: '`',
            fold_lower: false,
            case_insensitive_columns: true,
            max_bytes: 64,
        };
        assert_eq!(
            parse_column_list("Id,`my col`,`a``b`", &maria).unwrap(),
            ["Id", "my col", "a`b"]
        );
    }

    #[test]
    fn jobs_are_bounded_by_chunks_and_free_slots() {
        assert_eq!(
            choose_jobs(Jobs::Fixed(8), 3, Some(100), (1, 0), false),
            (3, None)
        );
        assert_eq!(
            choose_jobs(Jobs::Fixed(0), 3, Some(100), (1, 0), false).0,
            1
        );
        assert_eq!(
            choose_jobs(Jobs::Fixed(4), 10, None, (1, 0), false),
            (4, None)
        );
        let (jobs, warning) = choose_jobs(Jobs::Fixed(4), 10, Some(3), (1, 0), false);
        assert_eq!(jobs, 2, "two streams and the watchdog fit in three slots");
        assert!(warning.unwrap().contains("3 free connection slots"));
        let (jobs, _) = choose_jobs(Jobs::Fixed(4), 10, Some(4), (1, 1), false);
        assert_eq!(
            jobs, 2,
            "two streams, the watchdog and the publish fit in four"
        );
        assert_eq!(
            choose_jobs(Jobs::Fixed(2), 10, Some(4), (1, 1), false),
            (2, None)
        );
        let (jobs, _) = choose_jobs(Jobs::Fixed(4), 10, Some(7), (2, 1), false);
        assert_eq!(
            jobs, 2,
            "two streams of two, the watchdog and the publish fit in seven"
        );
        assert_eq!(choose_jobs(Jobs::Fixed(4), 10, Some(6), (2, 1), false).0, 2);
        assert_eq!(choose_jobs(Jobs::Fixed(4), 10, Some(5), (2, 1), false).0, 1);
        assert_eq!(
            choose_jobs(Jobs::Fixed(4), 10, Some(0), (1, 0), true),
            (4, None),
            "a dry run opens none"
        );
    }
}
