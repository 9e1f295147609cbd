//! Rows routed to their partitions on the client, for the `stage` strategy, whatever the files'
//! cuts: a file that spans partitions, rows shuffled across all of them, stray rows at a
//! file's edges.
//!
//! Why a spill: each staging table must be written by one connection, in the transaction that
//! created it (so that the destination's bulk path applies and the table's rows write no
//! log), and the
//! rows of one partition can come from every chunk of every file. Of the three ways for rows
//! to wait for their partition's writer (per-partition buffers in memory, a key-only first
//! pass, a spill), only the spill keeps memory flat in the input's size and converts each row
//! once whatever the order of the rows (ARCHITECTURE.md, "Routing rows on the client").
//!
//! So a routed table loads in two steps:
//! 1. **route**: the streams convert the table's chunks as for any load, and each converted
//!    record goes, by its partition key, to its partition's spill file under the temporary
//!    directory (per stream and partition, a buffer of [`Router::buffer`] bytes between);
//! 2. **load**: once every chunk is routed, each partition's spill streams as it is, already
//!    encoded, into that partition's staging table, one stream per partition.
//!
//! The chunks' ledger rows go into the publish transaction (a chunk's rows are in several
//! staging tables, so no one of them holds the chunk): a run cut off before the publish leaves
//! nothing that counts, and its rerun routes again. The spill files have no name (`O_TMPFILE`,
//! or unlinked as soon as they are made): the kernel frees them when the process ends,
//! whichever way (a Ctrl-C ends it from the signal handler, a kill -9 at once), so nothing of
//! a spill ever outlives its load.

use crate::failure::Failure;
use crate::run::lock;
use sluice_core::destination::{KeyBound, KeyPartition};
use sluice_core::ledger::ChunkRecord;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A table whose rows are routed: its key and partitions, and each partition's spill.
pub struct RoutedTable {
    /// The plan's table.
    pub table: usize,
    /// The partition key's position among the loaded columns, and its name.
    pub key: usize,
    pub column: String,
    pub partitions: Vec<KeyPartition>,
    index: KeyIndex,
    spills: Vec<Mutex<Spill>>,
    /// Rows outside their chunk's main partition (the one most of its rows are in).
    crossed: AtomicU64,
}

/// One partition's spill file.
#[derive(Default)]
struct Spill {
    file: Option<File>,
    bytes: u64,
    rows: u64,
}

/// How a key finds its partition, built once per table.
enum KeyIndex {
    /// Range partitions by lower bound (unbounded first): a binary search.
    Ranges(Vec<usize>),
    /// List partitions: each value's, and NULL's.
    Values(HashMap<i64, usize>, Option<usize>),
    /// Hash partitions: the key is hashed once, then each partition's remainder checked.
    Hash,
}

/// A range partition's lower bound, unbounded as the least key.
fn range_lower(p: &KeyPartition) -> i64 {
    match p.bound {
        KeyBound::Range { lower, .. } => lower.unwrap_or(i64::MIN),
        _ => i64::MIN,
    }
}

impl KeyIndex {
    fn of(partitions: &[KeyPartition]) -> KeyIndex {
        match partitions.first().map(|p| &p.bound) {
            Some(KeyBound::List { .. }) => {
                let mut values = HashMap::new();
                let mut null = None;
                for (p, part) in partitions.iter().enumerate() {
                    if let KeyBound::List { values: v, .. } = &part.bound {
                        values.extend(v.iter().map(|&v| (v, p)));
                    }
                    if part.holds_null() {
                        null = Some(p);
                    }
                }
                KeyIndex::Values(values, null)
            }
            Some(KeyBound::Hash { .. }) => KeyIndex::Hash,
            _ => {
                let mut order: Vec<usize> = (0..partitions.len()).collect();
                order.sort_by_key(|&p| range_lower(&partitions[p]));
                KeyIndex::Ranges(order)
            }
        }
    }
}

impl RoutedTable {
    pub fn new(table: usize, key: usize, column: String, partitions: Vec<KeyPartition>) -> Self {
        RoutedTable {
            table,
            key,
            column,
            spills: (0..partitions.len()).map(|_| Mutex::default()).collect(),
            index: KeyIndex::of(&partitions),
            partitions,
            crossed: AtomicU64::new(0),
        }
    }

    /// The partition `key` belongs to, if any (partitions do not overlap).
    pub fn find(&self, key: i64) -> Option<usize> {
        match &self.index {
            KeyIndex::Ranges(order) => {
                let after = order.partition_point(|&p| range_lower(&self.partitions[p]) <= key);
                let p = *order.get(after.checked_sub(1)?)?;
                self.partitions[p].contains(key).then_some(p)
            }
            KeyIndex::Values(values, _) => values.get(&key).copied(),
            KeyIndex::Hash => self.find_hashed(key),
        }
    }

    /// The hash partition of `key`: its hash computed once for all of them.
    fn find_hashed(&self, key: i64) -> Option<usize> {
        let mut hashed = None;
        self.partitions.iter().position(|p| match &p.bound {
            KeyBound::Hash {
                modulus,
                remainder,
                function,
            } => *hashed.get_or_insert_with(|| (function.hash)(key)) % modulus == *remainder,
            _ => false,
        })
    }

    /// The partition a NULL key belongs to, if any (a list partition that holds NULL, the
    /// hash partition of remainder 0).
    pub fn find_null(&self) -> Option<usize> {
        match &self.index {
            KeyIndex::Values(_, null) => *null,
            KeyIndex::Hash => self.partitions.iter().position(KeyPartition::holds_null),
            KeyIndex::Ranges(_) => None,
        }
    }
}

/// What routing did, for the summary and the report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RoutedSummary {
    /// The table, as the plan names it.
    pub table: String,
    /// Each partition with rows, and how many.
    pub partitions: Vec<(String, u64)>,
    /// Rows outside their chunk's main partition (the one most of its rows are in): what
    /// files cut at the partitions' bounds would not have had.
    pub crossed: u64,
    /// Bytes written to the spill, and where.
    pub spill_bytes: u64,
    pub spill_dir: String,
}

/// The routing of a load: its tables, its spill directory, the route units still running, and
/// the ledger rows of the chunks routed.
pub struct Router {
    pub tables: Vec<RoutedTable>,
    /// Where the spill files are made (they have no names there).
    dir: PathBuf,
    /// Route units not finished yet: the partitions' loads wait for none.
    left: Mutex<usize>,
    done: Condvar,
    records: Mutex<Vec<ChunkRecord>>,
    /// Bytes each stream keeps per partition before writing them to the spill.
    pub buffer: usize,
}

/// A stream's memory for buffers before the spill, shared by the partitions (the bound is
/// 16 MiB per stream, the message being converted takes some, and a buffer's capacity can be
/// up to twice what it holds).
const SINK_MEMORY: usize = 6 << 20;

impl Router {
    /// A router for `tables`, spilling under `temp` (where [`can_spill`] said it can), with
    /// `units` route units to wait for.
    pub fn new(tables: Vec<RoutedTable>, temp: &Path, units: usize) -> Router {
        let dir = temp.to_path_buf();
        let partitions = tables.iter().map(|t| t.partitions.len()).max().unwrap_or(1);
        Router {
            tables,
            dir,
            left: Mutex::new(units),
            done: Condvar::new(),
            records: Mutex::new(Vec::new()),
            buffer: (SINK_MEMORY / partitions.max(1)).clamp(16 << 10, 1 << 20),
        }
    }

    /// The routed table of plan table `t`, if it is routed.
    pub fn of_table(&self, t: usize) -> Option<usize> {
        self.tables.iter().position(|r| r.table == t)
    }

    /// One route unit finished: `true` when it was the last.
    pub fn unit_done(&self, records: Vec<ChunkRecord>) -> bool {
        lock(&self.records).extend(records);
        let mut left = lock(&self.left);
        *left = left.saturating_sub(1);
        self.done.notify_all();
        *left == 0
    }

    /// Bytes spilled so far, over every table and partition.
    pub fn spill_bytes(&self) -> u64 {
        self.tables
            .iter()
            .flat_map(|t| t.spills.iter())
            .map(|s| lock(s).bytes)
            .sum()
    }

    /// Waits until every route unit has finished: `false` when the load stops first (`abort`).
    pub fn wait_routed(&self, abort: &AtomicBool) -> bool {
        let mut left = lock(&self.left);
        while *left > 0 {
            if abort.load(Ordering::Relaxed) {
                return false;
            }
            left = self
                .done
                .wait_timeout(left, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        !abort.load(Ordering::Relaxed)
    }

    /// The ledger rows of every routed chunk, for the publish.
    pub fn records(&self) -> Vec<ChunkRecord> {
        lock(&self.records).clone()
    }

    /// Rows and bytes routed to partition `p` of routed table `r`.
    pub fn spilled(&self, r: usize, p: usize) -> (u64, u64) {
        let s = lock(&self.tables[r].spills[p]);
        (s.rows, s.bytes)
    }

    /// Partition `p`'s spill of routed table `r`, read back from its start.
    pub fn spill_reader(&self, r: usize, p: usize) -> std::io::Result<SpillReader> {
        let s = lock(&self.tables[r].spills[p]);
        let file = match &s.file {
            Some(f) => f.try_clone()?,
            None => unnamed_file(&self.dir)?,
        };
        Ok(SpillReader { file, at: 0 })
    }

    /// What routing did.
    pub fn summary(&self, names: impl Fn(usize) -> String) -> Vec<RoutedSummary> {
        self.tables
            .iter()
            .enumerate()
            .map(|(r, t)| {
                let mut s = RoutedSummary {
                    table: names(t.table),
                    crossed: t.crossed.load(Ordering::Relaxed),
                    spill_dir: self.dir.display().to_string(),
                    ..RoutedSummary::default()
                };
                for (p, part) in t.partitions.iter().enumerate() {
                    let (rows, bytes) = self.spilled(r, p);
                    s.spill_bytes += bytes;
                    if rows > 0 {
                        s.partitions.push((part.name.clone(), rows));
                    }
                }
                s
            })
            .collect()
    }

    /// Appends `bytes` of `rows` rows to partition `p`'s spill of routed table `r`.
    fn spill(&self, r: usize, p: usize, bytes: &[u8], rows: u64) -> Result<(), Failure> {
        let mut s = lock(&self.tables[r].spills[p]);
        if s.file.is_none() {
            s.file = Some(unnamed_file(&self.dir).map_err(|e| self.spill_error(e))?);
        }
        let file = s.file.as_mut().expect("opened above");
        file.write_all(bytes).map_err(|e| self.spill_error(e))?;
        s.bytes += bytes.len() as u64;
        s.rows += rows;
        Ok(())
    }

    fn spill_error(&self, e: std::io::Error) -> Failure {
        let full = e.raw_os_error() == Some(libc::ENOSPC);
        Failure::Local(format!(
            "writing the rows routed to a partition to a spill file in {}: {e}{}; nothing was \
             loaded",
            self.dir.display(),
            if full {
                " (the temporary directory's disk is full: give --temp-dir a directory with \
                 room for about twice the input, or --strategy direct, which needs none)"
            } else {
                ""
            }
        ))
    }
}

/// The routed rows of one chunk on their way to the spill: a buffer per partition.
pub struct Sink<'r> {
    router: &'r Router,
    r: usize,
    buffers: Vec<(Vec<u8>, u64)>,
    /// Bytes the buffers hold.
    held: usize,
    /// The chunk's records so far, and how many went to each partition.
    pub records: u64,
    counts: Vec<u64>,
}

/// A record whose key is in no partition: its index in the chunk (1-based) and its key.
#[derive(Debug)]
pub struct Miss {
    pub record: u64,
    pub key: Option<i64>,
}

impl<'r> Sink<'r> {
    pub fn new(router: &'r Router, r: usize) -> Sink<'r> {
        let n = router.tables[r].partitions.len();
        Sink {
            router,
            r,
            buffers: vec![(Vec::new(), 0); n],
            held: 0,
            records: 0,
            counts: vec![0; n],
        }
    }

    /// The key column's name and the table's, for messages.
    pub fn names(&self, plan: &crate::plan::Plan) -> (String, String) {
        let t = &self.router.tables[self.r];
        (
            t.column.clone(),
            plan.tables[t.table].table.qualified.clone(),
        )
    }

    /// The routed table's key column among the loaded columns.
    pub fn key(&self) -> usize {
        self.router.tables[self.r].key
    }

    /// Takes one encoded record, `record`, whose key is `key`: `Err` when it fits no
    /// partition.
    #[inline]
    pub fn take(&mut self, record: &[u8], key: Option<i64>) -> Result<(), Miss> {
        self.records += 1;
        let table = &self.router.tables[self.r];
        let found = match key {
            Some(k) => table.find(k),
            None => table.find_null(),
        };
        let Some(p) = found else {
            return Err(Miss {
                record: self.records,
                key,
            });
        };
        self.counts[p] += 1;
        let (buffer, rows) = &mut self.buffers[p];
        buffer.extend_from_slice(record);
        *rows += 1;
        self.held += record.len();
        Ok(())
    }

    /// Writes the buffers that are full (all of them, with `all`) to the spill. Past the
    /// stream's memory for them (many partitions, each with a little), every buffer is
    /// written and its memory given back, so that the bound holds whatever the partitions.
    pub fn flush(&mut self, all: bool) -> Result<(), Failure> {
        let over = self.held > SINK_MEMORY;
        for p in 0..self.buffers.len() {
            let (buffer, rows) = &mut self.buffers[p];
            if buffer.is_empty() || (!all && !over && buffer.len() < self.router.buffer) {
                continue;
            }
            self.router.spill(self.r, p, buffer, *rows)?;
            self.held -= buffer.len();
            *rows = 0;
            match over {
                true => *buffer = Vec::new(),
                false => buffer.clear(),
            }
        }
        Ok(())
    }

    /// The chunk is routed: its last rows go to the spill.
    pub fn finish(mut self) -> Result<(), Failure> {
        self.flush(true)?;
        let routed: u64 = self.counts.iter().sum();
        let main = self.counts.iter().max().copied().unwrap_or(0);
        self.router.tables[self.r]
            .crossed
            .fetch_add(routed - main, Ordering::Relaxed);
        Ok(())
    }
}

/// Whether spill files can be made in `dir`, or why not.
pub fn can_spill(dir: &Path) -> Result<(), String> {
    unnamed_file(dir).map(drop).map_err(|e| {
        format!(
            "no spill file can be made in {}: {e} (give --temp-dir a writable directory)",
            dir.display()
        )
    })
}

/// A file in `dir` with no name: freed by the kernel when its last descriptor closes, which
/// the end of the process does, however it ends. `O_TMPFILE` where the file system has it, else
/// a file made and unlinked at once.
fn unnamed_file(dir: &Path) -> std::io::Result<File> {
    let tmpfile = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(dir);
    match tmpfile {
        Ok(f) => Ok(f),
        Err(e)
            if e.raw_os_error() == Some(libc::EOPNOTSUPP)
                || e.raw_os_error() == Some(libc::EISDIR) =>
        {
            static MADE: AtomicU64 = AtomicU64::new(0);
            let n = MADE.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!(".sluice-spill-{}-{n}", std::process::id()));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(f)
        }
        Err(e) => Err(e),
    }
}

/// A partition's spill read back from its start, at offsets of its own (the routing's writes
/// used the file's).
pub struct SpillReader {
    file: File,
    at: u64,
}

impl std::io::Read for SpillReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Makes room for `files` more open files than the load's own (its inputs, connections and
/// threads take a few hundred at most): one spill file per partition stays open until the
/// partition loads. Raises the soft limit towards the hard one if need be; `Err` says why it
/// cannot (`ulimit -n`).
pub fn room_for_files(files: usize) -> Result<(), String> {
    const OWN: u64 = 512;
    let need = files as u64 + OWN;
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(());
    }
    if limit.rlim_cur >= need {
        return Ok(());
    }
    if limit.rlim_max < need {
        return Err(format!(
            "routing needs a spill file per partition open at once ({files}), and this process \
             may open {} files in all (ulimit -n; the hard limit is {})",
            limit.rlim_cur, limit.rlim_max
        ));
    }
    limit.rlim_cur = need;
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the hard
    // one needs no privilege.
    match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } {
        0 => Ok(()),
        _ => Err(format!(
            "routing needs a spill file per partition open at once ({files}), and raising the \
             open-file limit failed: {}",
            std::io::Error::last_os_error()
        )),
    }
}

/// Free bytes on the file system of `dir` (`None` when it cannot be told).
pub fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, lower: Option<i64>, upper: Option<i64>) -> KeyPartition {
        KeyPartition::range(name, lower, upper)
    }

    fn table() -> RoutedTable {
        RoutedTable::new(
            0,
            0,
            "k".into(),
            vec![
                part("c", Some(20), Some(30)),
                part("a", None, Some(10)),
                part("b", Some(10), Some(20)),
                part("e", Some(40), None),
            ],
        )
    }

    #[test]
    fn keys_find_their_partition() {
        let t = table();
        let found: Vec<Option<usize>> = [i64::MIN, 9, 10, 19, 20, 29, 30, 39, 40, i64::MAX]
            .iter()
            .map(|&k| t.find(k))
            .collect();
        assert_eq!(
            found,
            vec![
                Some(1),
                Some(1),
                Some(2),
                Some(2),
                Some(0),
                Some(0),
                None,
                None,
                Some(3),
                Some(3)
            ]
        );
    }

    #[test]
    fn list_and_hash_keys_find_their_partition() {
        let list = |name: &str, values: Vec<i64>, null: bool| KeyPartition {
            bound: KeyBound::List { values, null },
            ..KeyPartition::range(name, None, None)
        };
        let t = RoutedTable::new(
            0,
            0,
            "k".into(),
            vec![list("a", vec![1, 3], false), list("b", vec![-2], true)],
        );
        assert_eq!((t.find(3), t.find(-2), t.find(2)), (Some(0), Some(1), None));
        assert_eq!(t.find_null(), Some(1));
        let function = sluice_core::destination::HashFunction {
            name: "identity",
            hash: |k| k as u64,
        };
        let hash = |r: u64| KeyPartition {
            bound: KeyBound::Hash {
                modulus: 3,
                remainder: r,
                function,
            },
            ..KeyPartition::range("h", None, None)
        };
        let t = RoutedTable::new(0, 0, "k".into(), vec![hash(2), hash(0), hash(1)]);
        assert_eq!(
            (t.find(9), t.find(10), t.find(11)),
            (Some(1), Some(2), Some(0))
        );
        assert_eq!(t.find_null(), Some(1));
    }

    #[test]
    fn rows_spill_by_partition_into_unnamed_files() {
        let temp = std::env::temp_dir().join(format!("sluice-route-test-{}", std::process::id()));
        std::fs::create_dir_all(&temp).unwrap();
        can_spill(&temp).unwrap();
        let router = Router::new(vec![table()], &temp, 1);
        let mut sink = Sink::new(&router, 0);
        sink.take(b"r5;", Some(5)).unwrap();
        sink.take(b"r25;", Some(25)).unwrap();
        sink.take(b"r6;", Some(6)).unwrap();
        let miss = sink.take(b"r35;", Some(35)).err().unwrap();
        assert_eq!((miss.record, miss.key), (4, Some(35)));
        assert!(sink.take(b"null;", None).is_err());
        sink.finish().unwrap();
        router.unit_done(Vec::new());
        assert!(router.wait_routed(&AtomicBool::new(false)));
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut router.spill_reader(0, 1).unwrap(), &mut back).unwrap();
        assert_eq!(back, b"r5;r6;");
        // The spill files have no name: the directory shows nothing, during the load or after.
        assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0);
        assert_eq!(router.spilled(0, 1), (2, 6));
        assert_eq!(router.spilled(0, 0), (1, 4));
        let s = &router.summary(|_| "t".into())[0];
        assert_eq!(s.crossed, 1);
        assert_eq!(s.spill_bytes, 10);
        assert_eq!(
            s.partitions,
            vec![("c".to_string(), 1), ("a".to_string(), 2)]
        );
        drop(router);
        std::fs::remove_dir_all(&temp).unwrap();
    }
}
