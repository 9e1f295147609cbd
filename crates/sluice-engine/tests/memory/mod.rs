//! An in-memory destination for the engine's own tests: tables of text rows, a ledger, prepared
//! transactions, and faults a test arms (a lost connection, a transient abort, a refused row,
//! a full disk at a chosen value; a failed commit). It implements the destination contract as
//! a server would: a stream's rows are invisible until its commit, a dropped stream rolls back,
//! a prepared transaction outlives the process that prepared it, and a job's lock belongs to
//! the process (a [`Memory`]) that took it and is released when that process goes.
//!
//! It stands in for no real server in any test of sluice's: it tests the engine's logic (the
//! requeue, isolation, the barrier, the commit protocols, the ledger's decisions) in
//! milliseconds, while the real-server suites test the destinations.

#![allow(dead_code)]

use sluice_core::destination::{
    Capabilities, ColumnInfo, Destination, DestinationError, DestinationStream, ErrorKind,
    ErrorReport, IdentifierRules, KeyPartition, Ledger, Leftover, LoadTable, Partitioning,
    PreparedStaging, PublishModel, PublishTimes, RecordEncoder, ServerWaits, StageTimes, Staging,
    TableInfo,
};
use sluice_core::error::{RecordError, RecordErrorKind};
use sluice_core::ledger::{
    ChunkRecord, FileRecord, Job, JobSpec, JobState, LoadedBy, Placement, PlacementCheck,
    RelationState,
};
use sluice_core::records::Fields;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Separates fields in the encoded form; records end with a newline.
const FIELD: u8 = 0x1f;
/// The encoded NULL.
const NULL: &[u8] = b"\\N";

/// One table: its identity, the generation of its storage, and its committed rows.
#[derive(Clone, Debug)]
pub struct Table {
    pub id: u64,
    pub generation: u64,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
    /// Range partitions by the first column: name, lower bound (inclusive), upper (exclusive).
    pub partitions: Vec<(String, i64, i64)>,
}

impl Table {
    /// The rows whose key falls in `lo..hi`.
    fn rows_in(&self, lo: i64, hi: i64) -> usize {
        self.rows
            .iter()
            .filter(|r| key(r).is_some_and(|k| k >= lo && k < hi))
            .count()
    }
}

/// A row's partition key: its first column, as an integer.
fn key(row: &[Option<String>]) -> Option<i64> {
    row.first()?.as_deref()?.parse().ok()
}

/// A staging table: the rows of one partition, committed, waiting for the publish; it records
/// the job and chunks it holds, as a real destination's does.
#[derive(Clone, Debug)]
struct StagedTable {
    job: Option<i64>,
    table: String,
    partition: usize,
    rows: Vec<Vec<Option<String>>>,
    chunks: Vec<ChunkRecord>,
}

/// A job as the ledger keeps it.
#[derive(Clone, Debug)]
struct JobRow {
    id: i64,
    spec: JobSpec,
    state: JobState,
    message: Option<String>,
    finished: Option<String>,
}

/// Rows and chunk records of one transaction, not yet visible.
#[derive(Clone, Debug, Default)]
struct Pending {
    rows: Vec<(usize, Vec<Option<String>>)>,
    tables: Vec<String>,
    chunks: Vec<(i64, ChunkRecord)>,
    /// Staging tables switched in by this transaction.
    switch: Vec<String>,
}

/// Faults a test arms. A value fault fires on the record holding that value, `times` times.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// The stream's connection is lost at a record holding this value.
    pub lose_at: Option<(String, u32)>,
    /// The stream's transaction is aborted (a serialization failure) at such a record.
    pub abort_at: Option<(String, u32)>,
    /// The server refuses every record holding this value (a check constraint).
    pub refuse: Option<String>,
    /// ... naming the record's key (its `id`) and not the record (as a foreign key checked at
    /// the end of a load is).
    pub refuse_by_key: bool,
    /// ... only in a table itself, not in a staging table (a check the parent has and its
    /// staging table does not).
    pub refuse_unstaged_only: bool,
    /// The server's disk is full when a record holding this value arrives.
    pub full_at: Option<String>,
    /// The `n`-th stream commit (0-based, counted over the store's life) loses its connection.
    pub fail_commit: Option<usize>,
    /// The `n`-th prepared transaction committed (0-based, counted over the store's life) is
    /// not: its connection is lost, and it stays prepared.
    pub fail_prepared_commit: Option<usize>,
    /// The commit decision is recorded, but its answer is lost (the connection drops).
    pub decision_answer_lost: bool,
    /// The role may not keep a ledger: opening it is refused.
    pub ledger_refused: bool,
    /// The connection is lost while the ledger is opened.
    pub ledger_lost: bool,
}

/// What the "server" holds: tables, ledger, prepared transactions, locks, faults.
#[derive(Default)]
pub struct State {
    pub tables: BTreeMap<String, Table>,
    next_id: u64,
    jobs: Vec<JobRow>,
    chunks: Vec<(i64, ChunkRecord)>,
    places: Vec<(i64, u32, String, RelationState)>,
    commits: Vec<(i64, String)>,
    prepared: BTreeMap<String, Pending>,
    locks: BTreeMap<i64, u64>,
    pub faults: Faults,
    staging: BTreeMap<String, StagedTable>,
    /// Stream commits so far.
    commits_seen: usize,
    /// How many prepared transactions each call committed together, in turn.
    pub commit_batches: Vec<usize>,
    /// Prepared transactions committed (or failed to be) so far.
    prepared_commits_seen: usize,
    /// How the ledger was opened, in turn: `opened`, or `held` then `kept` or `dropped`.
    pub ledger_opens: Vec<&'static str>,
    clock: u64,
}

/// The server, shared by every process (every [`Memory`]) that connects to it.
#[derive(Default)]
pub struct Store {
    state: Mutex<State>,
}

static PROCESS: AtomicU64 = AtomicU64::new(1);

impl Store {
    pub fn new() -> Arc<Store> {
        Arc::new(Store::default())
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `CREATE TABLE name (columns)`, replacing one of that name (a new id).
    pub fn create(&self, name: &str, columns: &[&str]) {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        s.tables.insert(
            name.to_string(),
            Table {
                id,
                generation: 0,
                columns: columns.iter().map(|c| c.to_string()).collect(),
                rows: Vec::new(),
                partitions: Vec::new(),
            },
        );
    }

    /// `CREATE TABLE name (columns) PARTITION BY RANGE (first column)`, one partition per
    /// `(name, lower, upper)`.
    pub fn create_partitioned(&self, name: &str, columns: &[&str], parts: &[(&str, i64, i64)]) {
        self.create(name, columns);
        self.lock().tables.get_mut(name).expect("table").partitions = parts
            .iter()
            .map(|(n, lo, hi)| (n.to_string(), *lo, *hi))
            .collect();
    }

    /// Staging tables waiting for a publish.
    pub fn staging_tables(&self) -> usize {
        self.lock().staging.len()
    }

    /// `TRUNCATE name`: no row, new storage.
    pub fn truncate(&self, name: &str) {
        let mut s = self.lock();
        let t = s.tables.get_mut(name).expect("table");
        t.rows.clear();
        t.generation += 1;
    }

    /// A rewrite that keeps the rows (VACUUM FULL).
    pub fn rewrite(&self, name: &str) {
        self.lock().tables.get_mut(name).expect("table").generation += 1;
    }

    /// The committed rows of a table, sorted.
    pub fn rows(&self, name: &str) -> Vec<Vec<Option<String>>> {
        let mut rows = self.lock().tables[name].rows.clone();
        rows.sort();
        rows
    }

    pub fn count(&self, name: &str) -> usize {
        self.lock().tables[name].rows.len()
    }

    pub fn prepared(&self) -> usize {
        self.lock().prepared.len()
    }

    pub fn job_states(&self) -> Vec<JobState> {
        self.lock().jobs.iter().map(|j| j.state).collect()
    }

    pub fn arm(&self, faults: Faults) {
        self.lock().faults = faults;
    }
}

impl State {
    /// Makes a transaction's rows and chunk records visible.
    fn apply(&mut self, p: Pending) {
        for id in &p.switch {
            self.switch(id);
        }
        for (t, row) in p.rows {
            let name = &p.tables[t];
            if let Some(table) = self.tables.get_mut(name) {
                table.rows.push(row);
            }
        }
        self.chunks.extend(p.chunks);
    }

    /// Moves a staging table's rows into its table, and drops it.
    fn switch(&mut self, id: &str) {
        if let Some(st) = self.staging.remove(id) {
            if let Some(t) = self.tables.get_mut(&st.table) {
                t.rows.extend(st.rows);
            }
        }
    }

    fn tick(&mut self) -> String {
        self.clock += 1;
        format!("t{}", self.clock)
    }

    fn job(&mut self, id: i64) -> Result<&mut JobRow, DestinationError> {
        self.jobs
            .iter_mut()
            .find(|j| j.id == id)
            .ok_or_else(|| DestinationError::new(ErrorKind::Usage, format!("no job {id}")))
    }

    fn relation_state(&self, name: &str) -> Option<RelationState> {
        let t = self.tables.get(name)?;
        Some(RelationState {
            name: name.to_string(),
            id: t.id.to_string(),
            generation: Some(t.generation.to_string()),
            has_rows: Some(!t.rows.is_empty()),
        })
    }
}

/// One process's connection to the store: the destination the engine loads into.
pub struct Memory {
    pub store: Arc<Store>,
    process: u64,
    tables: Vec<LoadTable>,
    /// Transactions the "server" can hold prepared (0: none).
    pub prepare_slots: u32,
    /// How it publishes staging tables.
    pub publish: PublishModel,
    /// Why `--strategy auto` loads every table directly here, if it does.
    pub auto_direct: Option<String>,
    /// Whether it says that streams writing into one table contend.
    pub contend: bool,
    /// Whether it can hold the ledger's open uncommitted while the inputs are checked.
    pub holds_ledger: bool,
    /// Whether it holds the ledger's open now, for [`Ledger::settle_ledger`].
    held: std::sync::atomic::AtomicBool,
    /// The staging tables this process finished or took back, for the publish.
    finished: Mutex<Vec<String>>,
    /// The leftovers `prepare_staging` offered: those `reuse_staging` does not keep go.
    offered: Mutex<Vec<String>>,
    seq: AtomicU64,
}

impl Memory {
    pub fn connect(store: &Arc<Store>) -> Memory {
        Memory {
            store: store.clone(),
            process: PROCESS.fetch_add(1, Ordering::SeqCst),
            tables: Vec::new(),
            prepare_slots: 0,
            publish: PublishModel::OneTransaction,
            auto_direct: None,
            contend: false,
            holds_ledger: false,
            held: std::sync::atomic::AtomicBool::new(false),
            finished: Mutex::new(Vec::new()),
            offered: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
        }
    }

    fn finished(&self) -> MutexGuard<'_, Vec<String>> {
        self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn names(&self) -> Vec<String> {
        self.tables.iter().map(|t| t.table.name.clone()).collect()
    }
}

impl Drop for Memory {
    /// The process is gone: its sessions close, and with them its jobs' locks.
    fn drop(&mut self) {
        let mut s = self.store.lock();
        s.locks.retain(|_, p| *p != self.process);
    }
}

/// A server error naming record `record` of the COPY.
fn at_record(kind: ErrorKind, message: &str, record: u64) -> DestinationError {
    DestinationError::from(ErrorReport {
        kind,
        message: message.to_string(),
        summary: message.to_string(),
        detail: None,
        record: Some(record),
        column: None,
        key: None,
        index: None,
        referenced_table: None,
        duplicate: false,
        cause: (kind == ErrorKind::Rejected).then_some("check_violation"),
    })
}

/// A stream: one transaction on its own connection.
pub struct MemStream<'a> {
    dest: &'a Memory,
    pending: Pending,
    /// The staging table being loaded: its id, table, partition bounds, and rows.
    stage: Option<Stage>,
    copy: Option<(usize, Vec<u8>)>,
    savepoint: Option<(usize, usize)>,
    /// An error aborted the transaction (until a rollback to the savepoint).
    aborted: bool,
    lost: bool,
}

impl MemStream<'_> {
    fn usable(&self) -> Result<(), DestinationError> {
        match (self.lost, self.aborted) {
            (true, _) => Err(DestinationError::new(
                ErrorKind::Connection,
                "connection lost",
            )),
            (_, true) => Err(DestinationError::new(
                ErrorKind::Other,
                "current transaction is aborted",
            )),
            _ => Ok(()),
        }
    }

    /// The fault armed for a record holding `values`, if any fires.
    fn fault(&self, values: &[Option<String>], record: u64) -> Option<DestinationError> {
        let mut s = self.dest.store.lock();
        let has = |v: &str| values.iter().flatten().any(|x| x == v);
        let f = &mut s.faults;
        if let Some((v, n)) = f.lose_at.as_mut().filter(|(v, n)| *n > 0 && has(v)) {
            let _ = v;
            *n -= 1;
            return Some(DestinationError::new(
                ErrorKind::Connection,
                "connection reset",
            ));
        }
        if let Some((_, n)) = f.abort_at.as_mut().filter(|(v, n)| *n > 0 && has(v)) {
            *n -= 1;
            return Some(at_record(
                ErrorKind::Transient,
                "could not serialize access",
                record,
            ));
        }
        if f.full_at.as_deref().is_some_and(has) {
            return Some(at_record(
                ErrorKind::Condition,
                "the disk is full: free space and run the same command again",
                record,
            ));
        }
        let staging = self.stage.is_some() && f.refuse_unstaged_only;
        if f.refuse.as_deref().is_some_and(has) && !staging {
            if f.refuse_by_key {
                let mut e = DestinationError::new(ErrorKind::Rejected, "key violated");
                e.key = Some(sluice_core::destination::ErrorKey {
                    columns: vec!["id".into()],
                    values: vec![values.first().cloned().flatten()],
                });
                return Some(e);
            }
            return Some(at_record(ErrorKind::Rejected, "check violated", record));
        }
        None
    }
}

impl DestinationStream for MemStream<'_> {
    fn begin_copy(&mut self, table: usize) -> Result<(), DestinationError> {
        self.usable()?;
        self.copy = Some((table, Vec::new()));
        Ok(())
    }

    fn send(&mut self, data: Vec<u8>) -> Result<(), DestinationError> {
        self.usable()?;
        // A server takes a moment per message too: a stream whose load goes on into its next
        // chunks (without a finish between them) leaves its siblings chunks of their own.
        std::thread::sleep(std::time::Duration::from_millis(1));
        self.copy.as_mut().expect("in a copy").1.extend(data);
        Ok(())
    }

    fn finish_copy(&mut self) -> Result<u64, DestinationError> {
        self.usable()?;
        // A server takes a moment per load: long enough that every stream of a small test
        // load gets chunks of its own (a test of what happens between streams needs two).
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (table, data) = self.copy.take().expect("in a copy");
        let mut rows = Vec::new();
        for (k, line) in data
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            let values: Vec<Option<String>> = line
                .split(|&b| b == FIELD)
                .map(|v| (v != NULL).then(|| String::from_utf8_lossy(v).into_owned()))
                .collect();
            if let Some(e) = self.fault(&values, k as u64 + 1) {
                self.lost = e.kind == ErrorKind::Connection;
                self.aborted = true;
                return Err(e);
            }
            rows.push((table, values));
        }
        let n = rows.len() as u64;
        if let Some(stage) = self.stage.as_mut() {
            let (lo, hi) = stage.bounds;
            if let Some(k) = rows
                .iter()
                .position(|(_, r)| key(r).is_none_or(|v| v < lo || v >= hi))
            {
                self.aborted = true;
                return Err(at_record(
                    ErrorKind::Rejected,
                    "row outside the partition",
                    k as u64 + 1,
                ));
            }
            stage.rows.extend(rows.into_iter().map(|(_, r)| r));
            return Ok(n);
        }
        self.pending.rows.extend(rows);
        Ok(n)
    }

    fn fire_deferred_checks(&mut self) -> Result<(), DestinationError> {
        self.usable()
    }

    fn savepoint(&mut self) -> Result<(), DestinationError> {
        self.usable()?;
        self.savepoint = Some((self.pending.rows.len(), self.pending.chunks.len()));
        Ok(())
    }

    fn release_savepoint(&mut self) -> Result<(), DestinationError> {
        self.usable()?;
        self.savepoint = None;
        Ok(())
    }

    fn rollback_to_savepoint(&mut self) -> Result<(), DestinationError> {
        if self.lost {
            return self.usable();
        }
        let (rows, chunks) = self.savepoint.expect("a savepoint");
        self.pending.rows.truncate(rows);
        self.pending.chunks.truncate(chunks);
        self.aborted = false;
        Ok(())
    }

    fn check_each_copy(&mut self) -> Result<(), DestinationError> {
        self.usable()
    }

    fn record_chunks(&mut self, job: i64, chunks: &[ChunkRecord]) -> Result<(), DestinationError> {
        self.usable()?;
        self.pending
            .chunks
            .extend(chunks.iter().map(|c| (job, c.clone())));
        Ok(())
    }

    fn commit(mut self) -> Result<(), DestinationError> {
        self.usable()?;
        let mut s = self.dest.store.lock();
        let n = s.commits_seen;
        s.commits_seen += 1;
        if s.faults.fail_commit == Some(n) {
            return Err(DestinationError::new(
                ErrorKind::Connection,
                "connection lost during COMMIT",
            ));
        }
        let mut p = std::mem::take(&mut self.pending);
        p.tables = self.dest.names();
        s.apply(p);
        Ok(())
    }

    fn prepare(mut self, id: &str) -> Result<String, DestinationError> {
        self.usable()?;
        let mut p = std::mem::take(&mut self.pending);
        p.tables = self.dest.names();
        self.dest.store.lock().prepared.insert(id.to_string(), p);
        Ok(id.to_string())
    }
}

/// A staging table in progress on a stream.
struct Stage {
    id: String,
    table: String,
    partition: usize,
    bounds: (i64, i64),
    rows: Vec<Vec<Option<String>>>,
}

/// Encodes a record as its fields' text joined by [`FIELD`]; a value `CLIENT-BAD` is one the
/// "type" refuses, on the client.
pub struct MemEncoder {
    columns: usize,
}

impl RecordEncoder for MemEncoder {
    fn encode(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if fields.len() != self.columns {
            return Err(RecordError {
                column: None,
                kind: RecordErrorKind::FieldCount {
                    expected: self.columns,
                    found: fields.len(),
                },
                value: None,
            });
        }
        let mut record = Vec::new();
        for i in 0..fields.len() {
            if i > 0 {
                record.push(FIELD);
            }
            match fields.get(i, input) {
                Some(b"CLIENT-BAD") => {
                    return Err(RecordError {
                        column: Some(i),
                        kind: RecordErrorKind::Value("not a value of this type".into()),
                        value: Some(b"CLIENT-BAD".to_vec()),
                    })
                }
                Some(v) => record.extend_from_slice(v),
                None => record.extend_from_slice(NULL),
            }
        }
        record.push(b'\n');
        out.extend(record);
        Ok(())
    }

    fn encode_field(&mut self, _column: usize, raw: &[u8]) -> Option<Vec<u8>> {
        Some(raw.to_vec())
    }
}

impl Destination for Memory {
    fn describe(&mut self, name: &str) -> Result<TableInfo, DestinationError> {
        let s = self.store.lock();
        let t = s
            .tables
            .get(name)
            .ok_or_else(|| DestinationError::new(ErrorKind::Usage, format!("no table {name}")))?;
        Ok(TableInfo {
            id: t.id.to_string(),
            schema: "memory".into(),
            name: name.to_string(),
            qualified: name.to_string(),
            columns: t
                .columns
                .iter()
                .map(|c| ColumnInfo {
                    name: c.clone(),
                    type_name: "text".into(),
                    not_null: false,
                    client_converted: true,
                })
                .collect(),
            references: Vec::new(),
        })
    }

    fn free_slots(&self) -> Option<u64> {
        None
    }

    fn set_tables(&mut self, tables: &[LoadTable]) -> Result<(), DestinationError> {
        self.tables = tables.to_vec();
        Ok(())
    }

    fn load_format(&self, _table: usize) -> &'static str {
        "text"
    }

    fn target(&self) -> String {
        "memory".into()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            identifiers: IdentifierRules {
                quote: '"',
                fold_lower: true,
                case_insensitive_columns: false,
                max_bytes: 63,
            },
            publish: Some(self.publish),
            savepoints_in_staged_unit: false,
            prepare: match self.prepare_slots {
                0 => Err("this store prepares nothing".into()),
                n => Ok(n),
            },
        }
    }

    fn writers_contend(&self, _table: usize) -> bool {
        self.contend
    }

    type Stream<'a> = MemStream<'a>;

    fn open_stream(&self, _n: usize) -> Result<MemStream<'_>, DestinationError> {
        Ok(MemStream {
            dest: self,
            pending: Pending::default(),
            stage: None,
            copy: None,
            savepoint: None,
            aborted: false,
            lost: false,
        })
    }

    type Encoder<'a> = MemEncoder;

    fn encoder(&self, table: usize) -> MemEncoder {
        MemEncoder {
            columns: self.tables[table].columns.len(),
        }
    }

    fn watch(&self, _streams: usize) -> Result<(), DestinationError> {
        Ok(())
    }

    fn stop_watching(&self) -> ServerWaits {
        ServerWaits::default()
    }

    fn key_columns(&self, _index: &str) -> Option<Vec<String>> {
        None
    }

    fn framing(&self, _table: usize) -> (&[u8], &[u8]) {
        (&[], &[])
    }

    fn split_encoded(
        &self,
        _table: usize,
        encoded: &[u8],
        column: usize,
        each: &mut dyn FnMut(usize, Option<i64>),
    ) -> bool {
        let mut at = 0;
        for line in encoded.split_inclusive(|&b| b == b'\n') {
            at += line.len();
            let key = line[..line.len() - 1]
                .split(|&b| b == FIELD)
                .nth(column)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok());
            each(at, key);
        }
        true
    }

    fn finish_prepared(&self, id: &str, commit: bool) -> Result<(), DestinationError> {
        let mut s = self.store.lock();
        if let Some(p) = s.prepared.remove(id) {
            if commit {
                s.apply(p);
            }
        }
        Ok(())
    }

    /// As the default, and keeps how many went together.
    fn finish_all_prepared(
        &self,
        ids: &[String],
        commit: bool,
    ) -> Result<(), (usize, DestinationError)> {
        if commit && !ids.is_empty() {
            self.store.lock().commit_batches.push(ids.len());
        }
        // Every id is tried, whatever an earlier one did; the first error is the answer.
        let mut first = None;
        for (n, id) in ids.iter().enumerate() {
            if commit {
                let mut s = self.store.lock();
                let seen = s.prepared_commits_seen;
                s.prepared_commits_seen += 1;
                if s.faults.fail_prepared_commit == Some(seen) {
                    first.get_or_insert((
                        n,
                        DestinationError::new(
                            ErrorKind::Connection,
                            "the connection was lost before COMMIT PREPARED",
                        ),
                    ));
                    continue;
                }
            }
            self.finish_prepared(id, commit)
                .expect("the store's finish never fails");
        }
        first.map_or(Ok(()), Err)
    }

    fn prepared(&self, prefix: &str) -> Result<Vec<String>, DestinationError> {
        let s = self.store.lock();
        Ok(s.prepared
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }

    fn decide_commit(&self, job: i64, ids: &[String]) -> Result<(), DestinationError> {
        let mut s = self.store.lock();
        s.commits.extend(ids.iter().map(|id| (job, id.clone())));
        match std::mem::take(&mut s.faults.decision_answer_lost) {
            true => Err(DestinationError::new(
                ErrorKind::Connection,
                "the connection was lost before the decision's answer",
            )),
            false => Ok(()),
        }
    }

    fn decided(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        let s = self.store.lock();
        Ok(s.commits
            .iter()
            .filter(|(j, _)| *j == job)
            .map(|(_, id)| id.clone())
            .collect())
    }
}

impl Memory {
    /// Whether the ledger may be opened, as the faults armed say.
    fn ledger_may_open(&self) -> Result<(), DestinationError> {
        let faults = &self.store.lock().faults;
        if faults.ledger_lost {
            return Err(DestinationError::new(
                ErrorKind::Connection,
                "connection closed",
            ));
        }
        match faults.ledger_refused {
            true => Err(DestinationError::new(
                ErrorKind::Usage,
                "the role may not create the ledger's tables",
            )),
            false => Ok(()),
        }
    }
}

impl Ledger for Memory {
    fn open_ledger(&self) -> Result<(), DestinationError> {
        self.ledger_may_open()?;
        self.store.lock().ledger_opens.push("opened");
        Ok(())
    }

    fn hold_ledger(&self) -> Result<bool, DestinationError> {
        if !self.holds_ledger {
            return Ok(false);
        }
        self.ledger_may_open()?;
        self.held.store(true, Ordering::SeqCst);
        self.store.lock().ledger_opens.push("held");
        Ok(true)
    }

    fn settle_ledger(&self, keep: bool) -> Result<(), DestinationError> {
        if self.held.swap(false, Ordering::SeqCst) {
            let end = if keep { "kept" } else { "dropped" };
            self.store.lock().ledger_opens.push(end);
        }
        Ok(())
    }

    fn jobs(&self, key: Option<&str>) -> Result<Vec<Job>, DestinationError> {
        let s = self.store.lock();
        let mut jobs: Vec<Job> = s
            .jobs
            .iter()
            .filter(|j| key.is_none_or(|k| j.spec.key == k))
            .map(|j| {
                let done: Vec<&ChunkRecord> = s
                    .chunks
                    .iter()
                    .filter(|(id, _)| *id == j.id)
                    .map(|(_, c)| c)
                    .collect();
                let running = s.locks.contains_key(&j.id);
                let state = match j.state {
                    JobState::Running if !running => JobState::Interrupted,
                    other => other,
                };
                Job {
                    id: j.id,
                    key: j.spec.key.clone(),
                    state,
                    message: j.message.clone(),
                    tables: j.spec.files.iter().map(|f| f.table.clone()).collect(),
                    chunk_size: j.spec.chunk_size,
                    settings: j.spec.settings.clone(),
                    chunks_total: j.spec.chunks_total,
                    chunks_done: done.len() as u64,
                    rows_done: done.iter().map(|c| c.rows).sum(),
                    staged_chunks: s
                        .staging
                        .values()
                        .filter(|st| st.job == Some(j.id))
                        .map(|st| st.chunks.len() as u64)
                        .sum(),
                    staged_rows: s
                        .staging
                        .values()
                        .filter(|st| st.job == Some(j.id))
                        .flat_map(|st| &st.chunks)
                        .map(|c| c.rows)
                        .sum(),
                    bytes_total: j.spec.bytes_total,
                    started: format!("job {}", j.id),
                    finished: j.finished.clone(),
                }
            })
            .collect();
        jobs.reverse();
        Ok(jobs)
    }

    fn job_files(&self, job: i64) -> Result<Vec<FileRecord>, DestinationError> {
        let mut s = self.store.lock();
        Ok(s.job(job)?.spec.files.clone())
    }

    fn job_chunks(&self, job: i64) -> Result<Vec<ChunkRecord>, DestinationError> {
        let s = self.store.lock();
        Ok(s.chunks
            .iter()
            .filter(|(j, _)| *j == job)
            .map(|(_, c)| c.clone())
            .collect())
    }

    fn loaded_by(&self, files: &[FileRecord]) -> Result<Vec<Option<LoadedBy>>, DestinationError> {
        let s = self.store.lock();
        let same = |a: &FileRecord, b: &FileRecord| {
            (
                &a.path,
                &a.table,
                a.size,
                a.modified_ns,
                &a.fingerprint,
                &a.settings,
            ) == (
                &b.path,
                &b.table,
                b.size,
                b.modified_ns,
                &b.fingerprint,
                &b.settings,
            )
        };
        Ok(files
            .iter()
            .map(|f| {
                s.jobs
                    .iter()
                    .rev()
                    .filter(|j| j.state == JobState::Finished)
                    .find_map(|j| {
                        let n = j.spec.files.iter().position(|r| same(r, f))?;
                        Some(LoadedBy {
                            job: j.id,
                            finished: j.finished.clone().unwrap_or_default(),
                            file: n as u32,
                        })
                    })
            })
            .collect())
    }

    fn placements(&self, job: i64, files: &[u32]) -> Result<Vec<PlacementCheck>, DestinationError> {
        let mut s = self.store.lock();
        let spec = s.job(job)?.spec.clone();
        Ok(files
            .iter()
            .filter_map(|&file| {
                let (_, _, relation, then) = s
                    .places
                    .iter()
                    .find(|(j, f, _, _)| *j == job && *f == file)?
                    .clone();
                let _ = &spec;
                Some(PlacementCheck {
                    file,
                    now: s.relation_state(&relation),
                    relation,
                    then,
                })
            })
            .collect())
    }

    fn finish_job(&self, job: i64, placements: &[Placement]) -> Result<(), DestinationError> {
        let mut s = self.store.lock();
        let places: Vec<(i64, u32, String, RelationState)> = placements
            .iter()
            .filter_map(|p| {
                let state = s.relation_state(&p.relation)?;
                Some((job, p.file, p.relation.clone(), state))
            })
            .collect();
        s.places.retain(|(j, ..)| *j != job);
        s.places.extend(places);
        let when = s.tick();
        let j = s.job(job)?;
        j.state = JobState::Finished;
        j.message = None;
        j.finished = Some(when);
        s.locks.remove(&job);
        Ok(())
    }

    fn begin_job(&self, spec: &JobSpec) -> Result<i64, DestinationError> {
        let mut s = self.store.lock();
        let id = s.jobs.len() as i64 + 1;
        s.jobs.push(JobRow {
            id,
            spec: spec.clone(),
            state: JobState::Running,
            message: None,
            finished: None,
        });
        s.locks.insert(id, self.process);
        Ok(id)
    }

    fn hold_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        let mut s = self.store.lock();
        if s.locks.get(&job).is_some_and(|p| *p != self.process) {
            return Err(DestinationError::new(
                ErrorKind::Usage,
                format!("job {job} is running in another process"),
            ));
        }
        s.locks.insert(job, self.process);
        Ok(None)
    }

    fn resume_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        self.hold_job(job)?;
        let mut s = self.store.lock();
        let j = s.job(job)?;
        j.state = JobState::Running;
        j.message = None;
        Ok(None)
    }

    fn end_job(
        &self,
        job: i64,
        state: JobState,
        message: Option<&str>,
    ) -> Result<(), DestinationError> {
        let mut s = self.store.lock();
        let j = s.job(job)?;
        j.state = state;
        j.message = message.map(str::to_string);
        s.locks.remove(&job);
        Ok(())
    }

    fn forget_job(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        let mut s = self.store.lock();
        if s.locks.get(&job).is_some_and(|p| *p != self.process) {
            return Err(DestinationError::new(ErrorKind::Usage, "job is running"));
        }
        s.jobs.retain(|j| j.id != job);
        s.chunks.retain(|(j, _)| *j != job);
        s.places.retain(|(j, ..)| *j != job);
        s.commits.retain(|(j, _)| *j != job);
        Ok(Vec::new())
    }
}

impl Staging for Memory {
    fn set_lock_wait(&mut self, _wait: std::time::Duration) {}

    fn prepare_staging(&self, job: Option<i64>) -> Result<PreparedStaging, DestinationError> {
        let mut s = self.store.lock();
        let mut prepared = PreparedStaging::default();
        let ids: Vec<String> = s.staging.keys().cloned().collect();
        for id in ids {
            let st = s.staging[&id].clone();
            let table = self.tables.iter().position(|t| t.table.name == st.table);
            match (st.job, job, table) {
                (Some(a), Some(b), Some(table)) if a == b => prepared.leftovers.push(Leftover {
                    id,
                    table,
                    partition: st.partition,
                    chunks: st.chunks,
                }),
                (Some(a), _, _) if s.jobs.iter().any(|j| j.id == a && j.state.resumable()) => {
                    prepared.waiting.push(id)
                }
                _ => {
                    s.staging.remove(&id);
                    prepared.dropped.push(id);
                }
            }
        }
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) =
            prepared.leftovers.iter().map(|l| l.id.clone()).collect();
        Ok(prepared)
    }

    fn reuse_staging(&self, keep: &[String]) -> Result<(), DestinationError> {
        self.finished().extend(keep.iter().cloned());
        let offered = std::mem::take(&mut *self.offered.lock().unwrap_or_else(|e| e.into_inner()));
        let mut s = self.store.lock();
        for id in offered.iter().filter(|id| !keep.contains(id)) {
            s.staging.remove(id);
        }
        Ok(())
    }

    fn partitioning(&self, table: usize) -> Result<Partitioning, DestinationError> {
        let s = self.store.lock();
        let t = &s.tables[&self.tables[table].table.name];
        if t.partitions.is_empty() {
            return Ok(Partitioning::None);
        }
        Ok(Partitioning::IntegerKey {
            column: t.columns[0].clone(),
            partitions: t
                .partitions
                .iter()
                .map(|(name, lo, hi)| KeyPartition {
                    obstacle: (t.rows_in(*lo, *hi) > 0)
                        .then(|| format!("partition {name} is not empty")),
                    ..KeyPartition::range(name.clone(), Some(*lo), Some(*hi))
                })
                .collect(),
            default: false,
        })
    }

    fn begin_stage(
        &self,
        stream: &mut MemStream<'_>,
        table: usize,
        partition: usize,
    ) -> Result<(), DestinationError> {
        let name = self.tables[table].table.name.clone();
        let (_, lo, hi) = self.store.lock().tables[&name].partitions[partition].clone();
        let n = self.seq.fetch_add(1, Ordering::SeqCst);
        stream.stage = Some(Stage {
            id: format!("stage_{}_{n}", self.process),
            table: name,
            partition,
            bounds: (lo, hi),
            rows: Vec::new(),
        });
        Ok(())
    }

    fn finish_stage(
        &self,
        stream: &mut MemStream<'_>,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<StageTimes, DestinationError> {
        stream.usable()?;
        let stage = stream.stage.take().expect("a staging table in progress");
        self.store.lock().staging.insert(
            stage.id.clone(),
            StagedTable {
                job,
                table: stage.table,
                partition: stage.partition,
                rows: stage.rows,
                chunks: chunks.to_vec(),
            },
        );
        self.finished().push(stage.id.clone());
        Ok(StageTimes {
            table: stage.id,
            index: std::time::Duration::ZERO,
            analyze: std::time::Duration::ZERO,
        })
    }

    fn abandon_stage(&self, stream: &mut MemStream<'_>) -> Result<(), DestinationError> {
        stream.stage = None;
        stream.aborted = false;
        Ok(())
    }

    fn outside_partition(&self, e: &DestinationError) -> bool {
        e.message.contains("outside the partition")
    }

    fn discard_staging(&self) -> Result<(), DestinationError> {
        let mut s = self.store.lock();
        for id in self.finished().drain(..) {
            s.staging.remove(&id);
        }
        Ok(())
    }

    fn switch_one(
        &self,
        table: &str,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<PublishTimes, DestinationError> {
        let mut s = self.store.lock();
        s.switch(table);
        if let Some(job) = job {
            s.chunks.extend(chunks.iter().map(|c| (job, c.clone())));
        }
        Ok(PublishTimes {
            attempts: 1,
            ..PublishTimes::default()
        })
    }

    fn switch_in(&self, stream: &mut MemStream<'_>) -> Result<PublishTimes, DestinationError> {
        stream
            .pending
            .switch
            .extend(self.finished().iter().cloned());
        Ok(PublishTimes {
            attempts: 1,
            ..PublishTimes::default()
        })
    }

    fn gather_statistics(&self, _parallel: usize) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    fn auto_loads_directly(&self, _table: usize) -> Option<String> {
        self.auto_direct.clone()
    }
}
