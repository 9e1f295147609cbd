//! Planning a load: inputs become tables, tables become chunks, before any row is read.
//!
//! The plan is the checked, "high" form of the command line (ripgrep's two layers): every
//! input has a table, a format and a dialect; every table has its columns from the catalog and
//! a COPY mode; every chunk is a byte range that starts on a record boundary. Big plain files
//! are cut into chunks so that one file loads on every connection; compressed files and
//! standard input cannot be cut and load as one chunk each. Chunks are ordered biggest first
//! (longest-processing-time scheduling), which keeps one late big file from becoming the long
//! tail the seed paper hunted for.

use sluice_core::boundary::{count_quotes, next_record_start, splittable};
use sluice_core::column::Column;
use sluice_core::dialect::{Dialect, Format, LineEnding};
use sluice_postgres::catalog::Table;
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

/// One input as given on the command line.
#[derive(Clone, Debug)]
pub struct Input {
    pub source: InputSource,
    /// The name shown in messages: the path as given, or `-`.
    pub display: String,
    pub compression: Compression,
    /// Size on disk (compressed size for compressed files); 0 for stdin.
    pub size: u64,
    pub table: usize,
    pub dialect: Dialect,
}

/// One target table and how it is loaded.
#[derive(Clone, Debug)]
pub struct TablePlan {
    pub table: Table,
    /// The columns the input fields map to, in field order.
    pub columns: Vec<Column>,
    /// Binary COPY when every column converts on the client; text COPY otherwise.
    pub binary: bool,
}

impl TablePlan {
    /// Columns the server converts from text, for the summary.
    pub fn server_converted(&self) -> Vec<&Column> {
        self.columns
            .iter()
            .filter(|c| !c.ty.client_converted())
            .collect()
    }
}

/// A byte range of one input that loads as one COPY.
#[derive(Clone, Debug)]
pub struct Chunk {
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

    /// Size used for scheduling and progress.
    pub fn weight(&self, inputs: &[Input]) -> u64 {
        match self.end {
            Some(e) => e - self.start,
            None => inputs[self.input].size,
        }
    }
}

/// The whole checked plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub tables: Vec<TablePlan>,
    pub inputs: Vec<Input>,
    /// Biggest first.
    pub chunks: Vec<Chunk>,
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
    let mut filled = 0;
    while filled < n {
        let k = f.read(&mut buf[filled..])?;
        if k == 0 {
            break;
        }
        filled += k;
    }
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

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
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
