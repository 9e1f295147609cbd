//! Rejected rows: the threshold (`--max-errors`), the rejects files, the counts by cause.
//!
//! With a threshold above zero, a bad row no longer fails the load: the client drops a row it
//! cannot convert before sending it, and the engine isolates a row the server refuses (see
//! `isolate` in [`super`]); both land here. Each reject keeps its record's original bytes,
//! exactly as they stood in the input, so that the rejects file is itself a loadable input
//! once fixed, and a JSON line beside it says where each row was and why it was refused.
//!
//! A record is known by its input and byte offset, so a chunk redone after a lost connection
//! cannot report its rows twice. Rejects are held in memory and written when the load ends,
//! sorted by input and offset, with line numbers counted in one pass over each input: a load
//! that expects millions of bad rows is better fixed first.

use crate::failure::Failure;
use crate::plan::Plan;
use sluice_core::error::InputError;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How many bytes of a bad value the JSON file keeps (the rejects file keeps the whole row).
const VALUE_BYTES: usize = 1024;

/// `--max-errors`: how many rows may be rejected before the load fails.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// At most this many rows.
    Count(u64),
    /// At most this share (0 to 1) of all input rows.
    Share(f64),
}

impl Threshold {
    /// Whether any row may be rejected at all (0 keeps the strict behaviour: the first bad
    /// row fails the load, and no savepoints are spent).
    pub fn allows_any(self) -> bool {
        match self {
            Threshold::Count(n) => n > 0,
            Threshold::Share(s) => s > 0.0,
        }
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threshold::Count(n) => write!(f, "{n}"),
            Threshold::Share(s) => {
                let p = format!("{:.6}", s * 100.0);
                write!(f, "{}%", p.trim_end_matches('0').trim_end_matches('.'))
            }
        }
    }
}

/// Parses `--max-errors`: `N` rows or `P%` of all input rows.
pub fn parse_threshold(s: &str) -> Result<Threshold, String> {
    let s = s.trim();
    if let Some(p) = s.strip_suffix('%') {
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a percentage (examples: 0.5%, 2%)"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("`{s}`: a percentage is between 0% and 100%"));
        }
        return Ok(Threshold::Share(p / 100.0));
    }
    s.parse::<u64>()
        .map(Threshold::Count)
        .map_err(|_| format!("`{s}` is not a number of rows or a percentage (examples: 100, 0.5%)"))
}

/// One rejected row.
#[derive(Clone, Debug)]
pub struct Reject {
    /// Index of its input in the plan.
    pub input: usize,
    /// Its record's absolute byte offset in the (decompressed) input.
    pub offset: u64,
    /// Line within its chunk (1-based), made absolute when the files are written.
    pub chunk_line: u64,
    /// The record's bytes as they stood in the input, line ending included.
    pub raw: Vec<u8>,
    /// What the message says: column, value, reason (its file and line are filled in later).
    pub error: InputError,
    /// A short stable name of why (`invalid_value`, `unique_violation`...), for counting.
    pub cause: &'static str,
    /// Whether the server refused it (the client drops what it cannot convert).
    pub by_server: bool,
}

/// The rejects so far, and the records (input, offset) they are.
#[derive(Debug, Default)]
struct Found {
    rows: Vec<Reject>,
    seen: HashSet<(usize, u64)>,
}

/// Every reject of a load, and the threshold they are held to.
#[derive(Debug)]
pub struct Rejects {
    pub threshold: Threshold,
    /// Where the rejected rows go (their details beside, in `PATH.jsonl`).
    pub path: Option<PathBuf>,
    found: Mutex<Found>,
    count: AtomicU64,
    /// The fewest bytes one record can take in each table (a byte per field), to bound the
    /// rows still to come.
    min_record: u64,
    /// Uncompressed bytes the plan reads in all, `None` when some input's size is unknown.
    total_bytes: Option<u64>,
}

impl Rejects {
    pub fn new(threshold: Threshold, path: Option<PathBuf>, plan: &Plan) -> Rejects {
        let min_record = plan
            .tables
            .iter()
            .map(|t| t.columns.len().max(1) as u64)
            .min()
            .unwrap_or(1);
        let total_bytes = plan
            .chunks
            .iter()
            .map(|c| {
                let input = &plan.inputs[c.input];
                let plain =
                    input.compression == crate::plan::Compression::None && input.identity.is_some();
                plain.then(|| c.end.unwrap_or(input.size).saturating_sub(c.start))
            })
            .sum();
        Rejects {
            threshold,
            path,
            found: Mutex::new(Found::default()),
            count: AtomicU64::new(0),
            min_record,
            total_bytes,
        }
    }

    /// How many rows were rejected.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Records a reject. `seen` is what the load has read so far (rows converted, bytes
    /// consumed): with a share as threshold, the load stops as soon as the share is certain
    /// to be exceeded whatever the rest of the input holds. Past the threshold, the error
    /// is the row that crossed it.
    pub fn add(&self, r: Reject, seen: (u64, u64)) -> Result<(), Failure> {
        let mut found = crate::run::lock(&self.found);
        if !found.seen.insert((r.input, r.offset)) {
            // The same row again, in a chunk redone after a lost connection.
            return Ok(());
        }
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let exceeded = match self.threshold {
            Threshold::Count(n) => count > n,
            Threshold::Share(share) => {
                let (rows, bytes) = seen;
                // The most rows the load can hold: those seen, the rejects, and the rest of
                // the input at a byte per field.
                self.total_bytes.is_some_and(|total| {
                    let most = rows + count + total.saturating_sub(bytes) / self.min_record;
                    count as f64 > share * most as f64
                })
            }
        };
        let error = exceeded.then(|| r.error.clone());
        found.rows.push(r);
        match error {
            Some(e) => Err(self.too_many(e, count, None)),
            None => Ok(()),
        }
    }

    /// At the end, before anything commits: whether the rejects stay within the threshold
    /// given the rows loaded.
    pub fn check_final(&self, loaded: u64) -> Result<(), Failure> {
        let count = self.count();
        let Threshold::Share(share) = self.threshold else {
            return Ok(());
        };
        let total = loaded + count;
        if count as f64 <= share * total as f64 {
            return Ok(());
        }
        let last = crate::run::lock(&self.found)
            .rows
            .last()
            .map(|r| r.error.clone());
        let last = last.unwrap_or_else(|| InputError::new("(input)", "rejected"));
        Err(self.too_many(last, count, Some(total)))
    }

    fn too_many(&self, mut error: InputError, count: u64, total: Option<u64>) -> Failure {
        let of = match total {
            Some(t) => format!(" of {t} input rows"),
            None => String::new(),
        };
        let files = match &self.path {
            Some(p) => format!(
                "; the rows rejected so far are in {} (details in {})",
                p.display(),
                details_path(p).display()
            ),
            None => String::new(),
        };
        error.reason = format!(
            "{}. That is {count} rejected row(s){of}, more than --max-errors {} allows, so the \
             load stopped{files}",
            error.reason, self.threshold
        );
        Failure::Input(Box::new(error))
    }

    /// Rejects by cause, for the summary and the report.
    /// What the report says of the rejects.
    pub fn report(&self, plan: &Plan) -> crate::report::RejectedReport {
        crate::report::RejectedReport {
            rows: self.count(),
            by_cause: self.by_cause(),
            max_errors: self.threshold.to_string(),
            file: self.path.as_ref().map(|p| p.display().to_string()),
            details: self
                .path
                .as_ref()
                .map(|p| details_path(p).display().to_string()),
            first: self.first(plan).map(|e| e.to_string()),
        }
    }

    pub fn by_cause(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for r in &crate::run::lock(&self.found).rows {
            *m.entry(r.cause).or_insert(0) += 1;
        }
        m
    }

    /// The first reject in input order, with its line made absolute, for the summary.
    pub fn first(&self, plan: &Plan) -> Option<InputError> {
        let found = crate::run::lock(&self.found);
        let r = found.rows.iter().min_by_key(|r| (r.input, r.offset))?;
        let mut e = r.error.clone();
        e.line = crate::run::lines_at(plan, r.input, &[r.offset])[0].or(Some(r.chunk_line));
        Some(e)
    }

    /// Writes the rejects file (the rows' own bytes, in input order) and the details beside it
    /// (one JSON object per row, in the same order).
    pub fn write(&self, plan: &Plan) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Sorted in place: the load is over, nothing adds rejects now.
        let mut found = crate::run::lock(&self.found);
        found.rows.sort_by_key(|r| (r.input, r.offset));
        let rows = &found.rows;
        let lines = absolute_lines(plan, rows);
        let mut data = BufWriter::new(std::fs::File::create(path)?);
        let mut details = BufWriter::new(std::fs::File::create(details_path(path))?);
        let header = header_for(plan, rows)?;
        data.write_all(&header)?;
        let mut at = header.len() as u64;
        for (r, line) in rows.iter().zip(lines) {
            data.write_all(&r.raw)?;
            let input = &plan.inputs[r.input];
            let value = r.error.value.as_deref().map(|v| {
                let cut = &v[..v.len().min(VALUE_BYTES)];
                String::from_utf8_lossy(cut).into_owned()
            });
            let json = serde_json::json!({
                "file": input.display,
                "table": plan.tables[input.table].table.name,
                "line": line,
                "byte_offset": r.offset,
                "byte_length": r.raw.len(),
                "column": r.error.column,
                "value": value,
                "value_bytes": r.error.value.as_ref().map(Vec::len),
                "value_offset": (r.error.offset_of == sluice_core::error::OffsetOf::Value)
                    .then_some(r.error.offset)
                    .flatten(),
                "reason": r.error.reason,
                "cause": r.cause,
                "by": if r.by_server { "server" } else { "client" },
                "rejects_offset": at,
            });
            at += r.raw.len() as u64;
            serde_json::to_writer(&mut details, &json)?;
            details.write_all(b"\n")?;
        }
        data.flush()?;
        details.flush()
    }
}

/// The header line the rejects file starts with, so that it reloads with the load's own flags:
/// with `--header`, the first rejected row's input's header line (that of the first input when
/// nothing was rejected), line ending included; nothing otherwise.
fn header_for(plan: &Plan, rows: &[Reject]) -> std::io::Result<Vec<u8>> {
    let input = rows.first().map_or(0, |r| r.input);
    let Some(input) = plan.inputs.get(input) else {
        return Ok(Vec::new());
    };
    if !input.dialect.header {
        return Ok(Vec::new());
    }
    Ok(crate::plan::header_line(input)?.unwrap_or_default())
}

/// The details file beside a rejects file: `PATH.jsonl`.
pub fn details_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".jsonl");
    PathBuf::from(p)
}

/// The line each reject starts on (`rows` sorted by input and offset): one pass over each
/// input, up to its last reject.
fn absolute_lines(plan: &Plan, rows: &[Reject]) -> Vec<Option<u64>> {
    let mut out = Vec::with_capacity(rows.len());
    for group in rows.chunk_by(|a, b| a.input == b.input) {
        let offsets: Vec<u64> = group.iter().map(|r| r.offset).collect();
        out.extend(crate::run::lines_at(plan, group[0].input, &offsets));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_as_rows_or_shares() {
        assert_eq!(parse_threshold("10"), Ok(Threshold::Count(10)));
        assert_eq!(parse_threshold("0"), Ok(Threshold::Count(0)));
        assert_eq!(parse_threshold("2.5%"), Ok(Threshold::Share(0.025)));
        assert_eq!(parse_threshold(" 100% "), Ok(Threshold::Share(1.0)));
        for bad in ["", "x", "-1", "101%", "%", "1.5"] {
            assert!(parse_threshold(bad).is_err(), "{bad:?}");
        }
        assert!(!Threshold::Count(0).allows_any());
        assert!(!Threshold::Share(0.0).allows_any());
        assert!(Threshold::Share(0.001).allows_any());
        assert_eq!(Threshold::Share(0.025).to_string(), "2.5%");
    }

    #[test]
    fn details_sit_beside_the_rejects_file() {
        assert_eq!(
            details_path(Path::new("/tmp/bad rows.csv")),
            PathBuf::from("/tmp/bad rows.csv.jsonl")
        );
    }
}
