//! MariaDB as a [`Destination`]: the engine's one interface, implemented with `LOAD DATA LOCAL
//! INFILE` streams of sluice's canonical text, each in one InnoDB transaction, with the
//! warning trap closed (`stream.rs`) and the ledger in the target's database (`ledger.rs`).
//!
//! [`MariaDbDestination`] owns the tokio runtime its connections run on, so the engine stays
//! free of async code and of `mysql_async`. It keeps one connection of its own for the catalog
//! and the ledger (it holds the running job's named lock), and each stream opens its own.
//!
//! What it answers about itself ([`Capabilities`]) is what it does today: staging with one exchange
//! per partition (`staging.rs`, `stage.rs`), prepared transactions through XA (`xa.rs`: each stream
//! begins as a branch named for the load, is prepared, and is committed on its own connection once
//! the ledger holds the decision). The watch (`watchdog.rs`) ends a stream's wait on a sibling's
//! key and names the key, and samples what the streams' sessions do, which the verdict words in
//! MariaDB's terms (`activity_label`, `activity_words`, `advice`, `table_costs`).

use crate::catalog::{describe_table, quote_ident, CatalogError, Table};
use crate::condition;
use crate::connect::{connect, scrub};
use crate::conninfo::ConnInfo;
use crate::silence::Rt;
use crate::stream::{Load, ServerError, Stream, StreamOpenError};
use crate::types::column::Column;
use crate::types::convert::Converter;
use crate::watchdog::{Watch, Watched};
use crate::xa::{self, Xid};
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice_core::destination::{
    Activity, Capabilities, ColumnInfo, Destination, DestinationError, DestinationStream, ErrorKey,
    ErrorKind, ErrorReport, IdentifierRules, Ledger, LoadTable, PublishModel, RecordEncoder,
    ServerWaits, TableCosts, TableInfo,
};
use sluice_core::error::RecordError;
use sluice_core::ledger::{
    ChunkRecord, FileRecord, Job, JobSpec, JobState, LoadedBy, Placement, PlacementCheck,
};
use sluice_core::records::Fields;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Why the destination could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Connect(#[from] crate::connect::ConnectError),
    #[error("cannot start the connection runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Server(String),
}

/// One table as the load fills it: the plan's columns, in field order.
#[derive(Clone, Debug)]
pub(crate) struct LoadTarget {
    pub(crate) table: Table,
    pub(crate) columns: Vec<Column>,
    /// Its unique indexes with their columns, to name the key of a duplicate.
    unique: Vec<(String, Vec<String>)>,
}

/// A MariaDB (or MySQL) server, for one load.
pub struct MariaDbDestination {
    pub(crate) rt: Rt,
    pub info: ConnInfo,
    /// The load's own connection: catalog and ledger (it holds the running job's lock).
    conn: Mutex<Option<Conn>>,
    /// `VERSION()`, for reports.
    pub version: String,
    /// `DATABASE()` as the server spells it (the target's, whatever case the URI gave): XA
    /// branches carry it.
    database: Option<String>,
    /// Why this session cannot load at all, if so (read when it connected).
    cannot: Option<String>,
    free_slots: Option<u64>,
    described: Vec<Table>,
    pub(crate) tables: Vec<LoadTarget>,
    /// The streams' server connections and the conflicts the watch found.
    watched: Arc<Watched>,
    watch: Mutex<Option<Watch>>,
    /// The prefix the streams' XA branches are named from, when the load prepares them.
    xa_prefix: Mutex<Option<String>>,
    /// Streams opened as XA branches so far: each branch's name is new, a reopened stream's
    /// too (its old session may not have ended yet, and keeps its name until it does).
    branches: AtomicUsize,
    /// Prepared branches by name, with the session that prepared them, which alone may
    /// commit them while it lives.
    prepared: Mutex<HashMap<String, (Xid, Conn)>>,
    /// The jobs whose lock the own connection holds.
    held_jobs: Mutex<Vec<i64>>,
    /// What staging needs (`staging.rs`).
    pub(crate) staging: crate::staging::StagingState,
    /// Where a step that failed after the data was in (a table's statistics, say) is said.
    pub(crate) warn: Arc<dyn Fn(String) + Send + Sync>,
    /// The readers' gates while the commits run ([`Destination::hold_readers`]).
    gates: Mutex<Option<crate::readers::Gates>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MariaDbDestination {
    /// A new stream session starts only once the sessions given up during a silence of the
    /// server are gone (`watchdog.rs`, [`Vanished`](crate::watchdog::Vanished)): at once when
    /// there were none, and at most [`FORMERS_WITHIN`].
    fn wait_for_former_sessions(&self) {
        let gone = self.rt.raw().block_on(async {
            tokio::time::timeout(FORMERS_WITHIN, self.watched.vanished.formers_gone()).await
        });
        if gone.is_err() {
            (self.warn)(format!(
                "sessions this load gave up while the server was silent are still on the \
                 server after {} s; the streams go on, and may wait on their locks (SHOW \
                 PROCESSLIST names them)",
                FORMERS_WITHIN.as_secs()
            ));
        }
    }

    /// Connects, and reads the server's version and free connection slots.
    pub fn open(
        info: &ConnInfo,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Result<MariaDbDestination, OpenError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("sluice-net")
            .build()
            .map_err(OpenError::Runtime)?;
        let began = std::time::Instant::now();
        let (conn, version, database, free, cannot, first) = rt.block_on(async {
            let mut conn = connect(info).await?;
            let first = began.elapsed();
            let server = |e: mysql_async::Error| OpenError::Server(scrub(&e.to_string(), info));
            let (version, database): (String, Option<String>) = conn
                .query_first("SELECT VERSION(), DATABASE()")
                .await
                .map_err(server)?
                .unwrap_or_default();
            let free: Option<(u64, u64)> = conn
                .query_first(
                    "SELECT @@max_connections, \
                     (SELECT COUNT(*) FROM information_schema.PROCESSLIST)",
                )
                .await
                .ok()
                .flatten();
            let free = free.map(|(m, used)| m.saturating_sub(used));
            let local_infile: Option<i64> = conn
                .query_first("SELECT @@GLOBAL.local_infile")
                .await
                .map_err(server)?;
            // MariaDB names it tx_read_only (transaction_read_only from 11.1), MySQL 8 only
            // transaction_read_only.
            let mut read_only: Option<i64> = None;
            for name in ["tx_read_only", "transaction_read_only"] {
                if let Ok(Some(v)) = conn.query_first(format!("SELECT @@SESSION.{name}")).await {
                    read_only = Some(v);
                    break;
                }
            }
            // A read-only server (a replica) refuses writes to users without READ_ONLY ADMIN.
            let server_read_only: Option<i64> = conn
                .query_first(
                    "SELECT @@GLOBAL.read_only AND NOT EXISTS (SELECT 1 FROM \
                     information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = 'READ_ONLY ADMIN' \
                     AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), \
                     '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), ''''))",
                )
                .await
                .ok()
                .flatten();
            let cannot = cannot_write(
                local_infile != Some(0),
                read_only == Some(1),
                server_read_only == Some(1),
            );
            Ok::<_, OpenError>((conn, version, database, free, cannot, first))
        })?;
        Ok(MariaDbDestination {
            rt: Rt::new(rt, info, first, warn.clone()),
            info: info.clone(),
            conn: Mutex::new(Some(conn)),
            version,
            database,
            cannot,
            free_slots: free,
            described: Vec::new(),
            tables: Vec::new(),
            watched: Arc::new(Watched::default()),
            watch: Mutex::new(None),
            xa_prefix: Mutex::new(None),
            branches: AtomicUsize::new(0),
            prepared: Mutex::new(HashMap::new()),
            held_jobs: Mutex::new(Vec::new()),
            staging: crate::staging::StagingState::default(),
            warn,
            gates: Mutex::new(None),
        })
    }

    /// The load's own connection, connected anew if it was lost.
    /// A new connection takes again the locks of the jobs this load holds (the old session's
    /// ended with it), or fails: a load must not go on without its job's lock.
    fn own(&self) -> Result<MutexGuard<'_, Option<Conn>>, DestinationError> {
        let mut g = lock(&self.conn);
        if g.is_none() {
            let mut c = self
                .rt
                .block_on(connect(&self.info))
                .map_err(|e| DestinationError::new(ErrorKind::Connection, e.to_string()))?;
            for &job in lock(&self.held_jobs).iter() {
                self.rt
                    .block_on(crate::ledger::take_lock(&mut c, job))
                    .map_err(|e| self.ledger_error(e))?;
            }
            *g = Some(c);
        }
        Ok(g)
    }

    /// Notes that the load's own connection no longer holds job `job`'s lock.
    fn released(&self, job: i64) {
        lock(&self.held_jobs).retain(|&j| j != job);
    }

    /// Notes that the load's own connection holds job `job`'s lock.
    fn holds(&self, job: i64) {
        let mut held = lock(&self.held_jobs);
        if !held.contains(&job) {
            held.push(job);
        }
    }

    /// The load's tables as (database, name).
    fn table_names(&self) -> Vec<(String, String)> {
        self.tables
            .iter()
            .map(|t| (t.table.schema.clone(), t.table.name.clone()))
            .collect()
    }

    /// Runs `f` on the load's own connection.
    pub(crate) fn on_own<T>(
        &self,
        f: impl FnOnce(&Rt, &mut Conn) -> Result<T, DestinationError>,
    ) -> Result<T, DestinationError> {
        let mut g = self.own()?;
        let conn = g.as_mut().expect("connected above");
        let generation = self.rt.generation();
        let r = f(&self.rt, conn);
        let lost = matches!(&r, Err(e) if e.kind == ErrorKind::Connection);
        // A wait given up for the server's silence left its statement's answer unread: the
        // connection is never used again, whatever `f` made of the error.
        if lost || self.rt.generation() != generation {
            *g = None;
        }
        r
    }

    /// A server error on stream `n` (or the own connection) in the engine's terms.
    pub(crate) fn error(&self, e: ServerError) -> DestinationError {
        let kind = if e.lost {
            ErrorKind::Connection
        } else if e.warning {
            ErrorKind::Rejected
        } else if e.code == 0 {
            ErrorKind::Other
        } else {
            condition::classify(e.code)
        };
        let message = scrub(&e.message, &self.info);
        DestinationError::from(ErrorReport {
            kind,
            summary: message.clone(),
            message,
            detail: None,
            record: e.record,
            column: e.column.clone(),
            key: None,
            index: None,
            referenced_table: None,
            duplicate: e.code == 1062,
            cause: (kind == ErrorKind::Rejected).then(|| condition::rejection_cause(e.code)),
        })
    }

    /// A server error on stream `n`: a statement the watch ended is the conflict it found.
    pub(crate) fn stream_error(&self, n: usize, e: ServerError) -> DestinationError {
        let conflict = match e.code {
            1317 => self.watched.take_conflict(n),
            _ => None,
        };
        let Some(c) = conflict else {
            return self.error(e);
        };
        let mut err = self.error(e);
        err.kind = ErrorKind::Conflict { blocker: c.blocker };
        err.message = format!(
            "stream {} waited for a key of index {} (values {}) that stream {} of this load \
             holds: {}",
            n + 1,
            c.index,
            c.key.join(", "),
            c.blocker + 1,
            err.message
        );
        err.duplicate = true;
        err.cause = Some("unique_violation");
        err.key = self
            .key_columns(&c.index)
            .filter(|cols| cols.len() == c.key.len())
            .map(|columns| ErrorKey {
                columns,
                values: c.key.iter().cloned().map(Some).collect(),
            });
        err.index = Some(c.index);
        err
    }

    /// `table`'s unique indexes, each with its columns in order.
    fn unique_indexes(
        &self,
        table: &Table,
    ) -> Result<Vec<(String, Vec<String>)>, DestinationError> {
        let rows: Vec<(String, String)> = self.on_own(|rt, c| {
            rt.block_on(c.exec(
                "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
                 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                (&table.schema, &table.name),
            ))
            .map_err(|e| self.db_error(e))
        })?;
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (index, column) in rows {
            match out.last_mut() {
                Some((i, cols)) if *i == index => cols.push(column),
                _ => out.push((index, vec![column])),
            }
        }
        Ok(out)
    }

    pub(crate) fn db_error(&self, e: mysql_async::Error) -> DestinationError {
        self.error(ServerError::from_driver(&e))
    }

    fn ledger_error(&self, e: crate::ledger::LedgerError) -> DestinationError {
        match e {
            crate::ledger::LedgerError::Db(e) => self.db_error(e),
            crate::ledger::LedgerError::Refused(m) => DestinationError::new(ErrorKind::Usage, m),
            crate::ledger::LedgerError::Raced(m) => DestinationError::new(ErrorKind::Transient, m),
        }
    }

    fn open_error(&self, e: StreamOpenError) -> DestinationError {
        match e {
            StreamOpenError::Server(e) => self.error(e),
            StreamOpenError::Connect(e) => {
                DestinationError::new(ErrorKind::Connection, e.to_string())
            }
        }
    }
}

/// A catalog table in the engine's terms.
fn table_info(t: &Table) -> TableInfo {
    TableInfo {
        id: t.id.clone(),
        schema: t.schema.clone(),
        name: t.name.clone(),
        qualified: t.qualified(),
        references: t.references.clone(),
        columns: t
            .columns
            .iter()
            .map(|c| ColumnInfo {
                name: c.name.clone(),
                type_name: c.type_name.clone(),
                not_null: c.not_null,
                client_converted: c.ty.client_converted(),
            })
            .collect(),
    }
}

/// Engines whose tables roll back: a load into any other could not be undone.
fn transactional(engine: &str) -> bool {
    engine.eq_ignore_ascii_case("InnoDB")
}

impl Destination for MariaDbDestination {
    fn describe(&mut self, name: &str) -> Result<TableInfo, DestinationError> {
        let table = self.on_own(|rt, c| {
            rt.block_on(describe_table(c, name)).map_err(|e| match e {
                CatalogError::Db(e) => self.db_error(e),
                CatalogError::Usage(m) => DestinationError::new(ErrorKind::Usage, m),
            })
        })?;
        if !transactional(&table.engine) {
            return Err(DestinationError::new(
                ErrorKind::Usage,
                format!(
                    "{} uses the {} engine, which cannot roll back a load that fails halfway; \
                     sluice loads MariaDB tables of transactional engines (InnoDB) only",
                    table.qualified(),
                    table.engine
                ),
            ));
        }
        let info = table_info(&table);
        self.described.push(table);
        Ok(info)
    }

    fn free_slots(&self) -> Option<u64> {
        self.free_slots
    }

    /// Two sessions appending to one InnoDB table contend for its last pages; a partitioned
    /// table's streams write into different partitions' trees, and apart was slower there
    /// (BENCHMARKS.md, "MariaDB: each stream its own table").
    fn writers_contend(&self, table: usize) -> bool {
        self.tables.get(table).is_some_and(|t| !t.table.partitioned)
    }

    fn set_tables(&mut self, tables: &[LoadTable]) -> Result<(), DestinationError> {
        let mut targets = Vec::with_capacity(tables.len());
        for lt in tables {
            let table = self
                .described
                .iter()
                .find(|t| t.id == lt.table.id)
                .cloned()
                .ok_or_else(|| {
                    DestinationError::new(
                        ErrorKind::Other,
                        format!("{} was not described", lt.table.qualified),
                    )
                })?;
            let mut columns = Vec::with_capacity(lt.columns.len());
            for name in &lt.columns {
                let c = table
                    .columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name))
                    .cloned()
                    .ok_or_else(|| {
                        DestinationError::new(
                            ErrorKind::Usage,
                            format!("{} has no column {name}", table.qualified()),
                        )
                    })?;
                columns.push(c);
            }
            let unique = self.unique_indexes(&table)?;
            targets.push(LoadTarget {
                table,
                columns,
                unique,
            });
        }
        self.staging.reset(targets.len());
        self.tables = targets;
        Ok(())
    }

    fn load_format(&self, _table: usize) -> &'static str {
        "load data local"
    }

    fn target(&self) -> String {
        self.info.to_string()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            identifiers: IdentifierRules {
                quote: '`',
                fold_lower: false,
                case_insensitive_columns: true,
                max_bytes: 64,
            },
            publish: Some(PublishModel::PerPartition),
            savepoints_in_staged_unit: false,
            prepare: self.xa_database().map(|_| u32::MAX),
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        const NAMES: &[&str] = &[
            "version",
            "max_connections",
            "innodb_buffer_pool_size",
            "innodb_log_file_size",
            "innodb_flush_log_at_trx_commit",
            "innodb_doublewrite",
            "log_bin",
            "sql_mode",
            "local_infile",
            "max_allowed_packet",
        ];
        self.on_own(|rt, c| {
            let mut out = Vec::new();
            for n in NAMES {
                let v: Option<Option<Option<String>>> = rt
                    .block_on(c.query_first(format!("SELECT CAST(@@{n} AS CHAR)")))
                    .ok();
                out.push((n.to_string(), v.flatten().flatten().unwrap_or_default()));
            }
            Ok(out)
        })
        .unwrap_or_default()
    }

    type Stream<'a> = MariaDbStream<'a>;

    fn open_stream(&self, n: usize) -> Result<MariaDbStream<'_>, DestinationError> {
        let stream = self
            .rt
            .block_on(Stream::open(&self.info, self.next_branch()?))
            .map_err(|e| self.open_error(e))?;
        self.wait_for_former_sessions();
        self.watched.register(n, stream.id);
        Ok(MariaDbStream {
            dest: self,
            n,
            stream,
            load: None,
            stage: None,
            table: None,
            ledger: Vec::new(),
        })
    }

    type Encoder<'a> = MariaDbEncoder;

    fn encoder(&self, table: usize) -> MariaDbEncoder {
        MariaDbEncoder {
            converter: Converter::new(self.tables[table].columns.clone()),
        }
    }

    /// Watches the streams' lock waits for a sibling conflict, and samples what their
    /// sessions do for the verdict (`watchdog.rs`).
    fn watch(&self, _streams: usize) -> Result<(), DestinationError> {
        let w = self
            .rt
            .block_on(Watch::start(
                &self.info,
                self.watched.clone(),
                self.warn.clone(),
                self.rt.give_ups(),
            ))
            .map_err(|e| DestinationError::new(ErrorKind::Connection, e.to_string()))?;
        *lock(&self.watch) = Some(w);
        Ok(())
    }

    fn stream_done(&self, n: usize) {
        self.watched.stream_done(n);
    }

    fn stop_watching(&self) -> ServerWaits {
        if let Some(w) = lock(&self.watch).take() {
            self.rt.raw().block_on(w.stop());
        }
        self.watched.take_waits()
    }

    fn key_columns(&self, index: &str) -> Option<Vec<String>> {
        let tables = self.table_names();
        self.on_own(|rt, c| {
            for (schema, table) in &tables {
                let cols: Vec<String> = rt
                    .block_on(c.exec(
                        "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
                         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = ? \
                         ORDER BY SEQ_IN_INDEX",
                        (schema, table, index),
                    ))
                    .map_err(|e| self.db_error(e))?;
                if !cols.is_empty() {
                    return Ok(Some(cols));
                }
            }
            Ok(None)
        })
        .ok()
        .flatten()
    }

    fn framing(&self, _table: usize) -> (&[u8], &[u8]) {
        (&[], &[])
    }

    fn cannot_write(&self) -> Option<String> {
        self.cannot.clone()
    }

    fn activity_label(&self, class: Activity) -> Option<&'static str> {
        (class == Activity::Log).then_some("redo-log")
    }

    fn activity_words(&self, class: Activity) -> Option<&'static str> {
        (class == Activity::Cpu).then_some(
            "in its statements (on CPU or in its data files: MariaDB does not say which)",
        )
    }

    fn advice(&self, class: Activity, _waits: &ServerWaits, _costs: &TableCosts) -> Option<String> {
        match class {
            Activity::Log => Some(
                "InnoDB's redo log is the limit: innodb_flush_log_at_trx_commit = 2 and a larger \
                 innodb_log_file_size (dynamic from 10.9), and where the binary log is on \
                 (log_bin), a server without it for the load; the stage strategy's staging \
                 tables take InnoDB's bulk path"
                    .into(),
            ),
            Activity::Lock => Some(
                "another session holds the tables' locks (an open transaction's metadata lock, \
                 LOCK TABLES, or rows): SHOW PROCESSLIST names it; or the streams contend on \
                 one table: fewer --jobs, or load when it is quiet"
                    .into(),
            ),
            _ => None,
        }
    }

    fn table_costs(&self) -> TableCosts {
        let tables = self.table_names();
        self.on_own(|rt, c| {
            let mut costs = TableCosts::default();
            for (schema, table) in &tables {
                rt.block_on(crate::catalog::table_costs(c, schema, table, &mut costs))
                    .map_err(|e| self.db_error(e))?;
            }
            Ok(costs)
        })
        .unwrap_or_default()
    }

    fn name_transactions(&self, prefix: Option<&str>) {
        *lock(&self.xa_prefix) = prefix.map(str::to_string);
    }

    fn finish_prepared(&self, id: &str, commit: bool) -> Result<(), DestinationError> {
        self.finish_all_prepared(std::slice::from_ref(&id.to_string()), commit)
            .map_err(|(_, e)| e)
    }

    /// Each branch this process prepared is finished on its own session, all at once; any
    /// other (a rerun's) on the load's own connection, one after another.
    fn finish_all_prepared(
        &self,
        ids: &[String],
        commit: bool,
    ) -> Result<(), (usize, DestinationError)> {
        let held: Vec<Option<(Xid, Conn)>> = {
            let mut map = lock(&self.prepared);
            ids.iter().map(|id| map.remove(id)).collect()
        };
        // Each branch's XA COMMIT given up on its own, if the server falls silent: those that
        // were answered still count.
        let finishing = held.into_iter().map(|h| {
            let given_up = || Held::Failed(crate::silence::GaveUp.into());
            self.rt.cut(finish_held(h, commit), given_up)
        });
        let on_their_own = self.rt.wait(futures_util::future::join_all(finishing));
        // Every id is tried, whatever an earlier one did; the first error is the answer.
        let mut first = None;
        for (n, (id, result)) in ids.iter().zip(on_their_own).enumerate() {
            let outcome = match result {
                Held::Done => Ok(()),
                Held::Failed(e) => Err(self.db_error(e)),
                Held::Detached => self.finish_detached(id, commit),
            };
            if let Err(e) = outcome {
                first.get_or_insert((n, e));
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn prepared(&self, prefix: &str) -> Result<Vec<String>, DestinationError> {
        let Some(db) = self.database.clone() else {
            return Ok(Vec::new());
        };
        self.on_own(|rt, c| {
            let mut names = rt
                .block_on(xa::recover(c, &db))
                .map_err(|e| self.db_error(e))?;
            names.retain(|n| n.starts_with(prefix));
            names.sort();
            Ok(names)
        })
    }

    fn decide_commit(&self, job: i64, ids: &[String]) -> Result<(), DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::decide_commit(c, job, ids))
                .map_err(|e| self.ledger_error(e))
        })
    }

    fn decided(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::decided(c, job))
                .map_err(|e| self.db_error(e))
        })
    }

    /// A gate on each of the load's tables ([`crate::readers`]), each on a new connection (a
    /// stream's session must stay free to commit its own branch).
    fn hold_readers(&self, _prepared: &[String]) -> Result<(), DestinationError> {
        let tables: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        if tables.is_empty() {
            return Ok(());
        }
        if tables.len() > crate::readers::MAX_GATES {
            return Err(DestinationError::new(
                ErrorKind::Other,
                format!(
                    "the load wrote {} tables, and sluice holds readers of at most {} (a \
                     connection each)",
                    tables.len(),
                    crate::readers::MAX_GATES
                ),
            ));
        }
        let gates = self.on_own(|rt, own| {
            rt.block_on(async {
                let opened = futures_util::future::join_all(
                    tables.iter().map(|_| crate::connect::connect(&self.info)),
                )
                .await;
                let sessions = opened
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("opening a connection: {e}"))?;
                crate::readers::hold(own, tables, sessions).await
            })
            .map_err(|why| DestinationError::new(ErrorKind::Other, why))
        })?;
        *lock(&self.gates) = Some(gates);
        Ok(())
    }

    fn release_readers(&self) {
        let Some(gates) = lock(&self.gates).take() else {
            return;
        };
        let early = self
            .on_own(|rt, own| {
                let given_up = || vec![String::from(crate::silence::GaveUp)];
                Ok(rt.wait(rt.cut(gates.release(own), given_up)))
            })
            .unwrap_or_else(|e| vec![format!("stopping the readers' gates: {e}")]);
        for why in early {
            (self.warn)(format!(
                "readers of the load's tables were held back for only part of its commits \
                 ({why}): a reader's query in those milliseconds may have seen some of its \
                 transactions committed and not the others"
            ));
        }
    }
}

/// Why a session with these settings cannot load: `LOAD DATA LOCAL` refused by the server, a
/// read-only session, or a read-only server; the `mariadb` client's own `LOAD DATA LOCAL` fails
/// the same way.
fn cannot_write(local_infile: bool, read_only: bool, server_read_only: bool) -> Option<String> {
    if !local_infile {
        return Some(
            "the server refuses LOAD DATA LOCAL INFILE (local_infile is OFF), which sluice loads \
             with, as the mariadb client's LOAD DATA LOCAL would be refused: SET GLOBAL \
             local_infile = ON, or start mariadbd with --local-infile (or ask the server's \
             administrator)"
                .into(),
        );
    }
    if server_read_only {
        return Some(
            "the server is read-only (read_only is ON: a replica?) and this user lacks the \
             READ_ONLY ADMIN privilege: connect to the primary, or SET GLOBAL read_only = OFF"
                .into(),
        );
    }
    read_only.then(|| {
        "the session is read-only (tx_read_only, transaction_read_only from 11.1, is ON: from \
         the server's --transaction-read-only or an init_connect): SET GLOBAL tx_read_only = \
         OFF, or take it out of init_connect"
            .into()
    })
}

/// What became of a prepared branch tried on the session that prepared it.
enum Held {
    Done,
    Failed(mysql_async::Error),
    /// Not held by this process (a rerun's), or its session was lost: finish it from another.
    Detached,
}

/// Finishes a branch on the session that prepared it, then closes that session.
async fn finish_held(held: Option<(Xid, Conn)>, commit: bool) -> Held {
    let Some((xid, mut conn)) = held else {
        return Held::Detached;
    };
    let result = xa::finish(&mut conn, &xid, commit).await;
    let _ = conn.disconnect().await;
    match result {
        Ok(()) => Held::Done,
        // The session is gone (killed, the server shut down), and the branch with it
        // detached: another session may finish it.
        Err(mysql_async::Error::Server(e))
            if condition::classify(e.code) != ErrorKind::Connection =>
        {
            Held::Failed(mysql_async::Error::Server(e))
        }
        Err(_) => Held::Detached,
    }
}

impl MariaDbDestination {
    /// The database XA branches are named for, or why this load cannot prepare them.
    fn xa_database(&self) -> Result<&str, String> {
        let db = self.database.as_deref().ok_or(
            "the target names no database, and a prepared transaction's name carries its \
             database (mariadb://host/DATABASE)",
        )?;
        if db.len() > xa::MAX_PART {
            return Err(format!(
                "the database's name is longer than the {} bytes an XA transaction's name may \
                 carry",
                xa::MAX_PART
            ));
        }
        xa::survives_disconnect(&self.version)?;
        Ok(db)
    }

    /// The XA branch the next stream begins as, when the load prepares its streams.
    fn next_branch(&self) -> Result<Option<Xid>, DestinationError> {
        let Some(prefix) = lock(&self.xa_prefix).clone() else {
            return Ok(None);
        };
        let db = self
            .xa_database()
            .map_err(|why| DestinationError::new(ErrorKind::Usage, why))?;
        let n = self.branches.fetch_add(1, Ordering::Relaxed);
        let gtrid = format!("{prefix}_{n}");
        if gtrid.len() > xa::MAX_PART {
            return Err(DestinationError::new(
                ErrorKind::Other,
                format!("the XA transaction name {gtrid} is longer than 64 bytes"),
            ));
        }
        Ok(Some(Xid::new(&gtrid, db)))
    }

    /// Finishes branch `id` of this database from the load's own connection.
    fn finish_detached(&self, id: &str, commit: bool) -> Result<(), DestinationError> {
        let db = self.database.clone().unwrap_or_default();
        let xid = Xid::new(id, &db);
        self.on_own(|rt, c| {
            rt.block_on(xa::finish_detached(c, &xid, commit, xa::RELEASE_WAIT))
                .map_err(|e| match e {
                    xa::FinishError::Db(e) => self.db_error(e),
                    held => DestinationError::new(ErrorKind::Condition, held.to_string()),
                })
        })
    }
}

impl Ledger for MariaDbDestination {
    fn open_ledger(&self) -> Result<(), DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::open(c))
                .map_err(|e| self.ledger_error(e))
        })
    }

    fn jobs(&self, key: Option<&str>) -> Result<Vec<Job>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::jobs(c, key))
                .map_err(|e| self.db_error(e))
        })
    }

    fn job_files(&self, job: i64) -> Result<Vec<FileRecord>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::job_files(c, job))
                .map_err(|e| self.db_error(e))
        })
    }

    fn job_chunks(&self, job: i64) -> Result<Vec<ChunkRecord>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::job_chunks(c, job))
                .map_err(|e| self.db_error(e))
        })
    }

    fn loaded_by(&self, files: &[FileRecord]) -> Result<Vec<Option<LoadedBy>>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::loaded_by(c, files))
                .map_err(|e| self.db_error(e))
        })
    }

    fn placements(&self, job: i64, files: &[u32]) -> Result<Vec<PlacementCheck>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::placements(c, job, files))
                .map_err(|e| self.db_error(e))
        })
    }

    fn finish_job(&self, job: i64, placements: &[Placement]) -> Result<(), DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::finish(c, job, placements))
                .map_err(|e| self.db_error(e))
        })
        .inspect(|_| self.released(job))
    }

    fn begin_job(&self, spec: &JobSpec) -> Result<i64, DestinationError> {
        let tables: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::begin(c, spec, &tables))
                .map_err(|e| self.ledger_error(e))
        })
        .inspect(|&job| self.holds(job))
    }

    /// Takes the job's lock, then settles the partition exchanges its last run began and did
    /// not record (`stage.rs`), before anyone reads which of its chunks are done.
    fn resume_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::resume(c, job))
                .map_err(|e| self.ledger_error(e))
        })
        .inspect(|_| self.holds(job))?;
        let wait = self.staging.lock_wait();
        let dropped = self.on_own(|rt, c| {
            rt.block_on(crate::stage::settle_job(c, job, wait))
                .map_err(|e| self.db_error(e))
        })?;
        Ok((!dropped.is_empty()).then(|| {
            format!(
                "dropped {} staging table(s) an earlier run of job {job} left unfinished (none \
                 of their rows was ever visible): {}",
                dropped.len(),
                dropped.join(", ")
            )
        }))
    }

    fn end_job(
        &self,
        job: i64,
        state: JobState,
        message: Option<&str>,
    ) -> Result<(), DestinationError> {
        // A job that did not finish may end here because the server stopped answering: its
        // record is not waited for past the bound (the next run resumes the job either way).
        let bound = match state {
            JobState::Finished => None,
            _ => Some(RECORD_WITHIN),
        };
        self.on_own(|rt, c| {
            let ended = crate::ledger::end(c, job, state, message);
            match bound {
                None => rt.block_on(ended).map_err(|e| self.db_error(e)),
                Some(b) => match rt
                    .raw()
                    .block_on(async { tokio::time::timeout(b, ended).await })
                {
                    Ok(r) => r.map_err(|e| self.db_error(e)),
                    Err(_) => Err(DestinationError::new(
                        ErrorKind::Connection,
                        format!(
                            "the server did not answer within {} s; check that it runs and \
                             answers (mariadb -e 'SELECT 1')",
                            b.as_secs()
                        ),
                    )),
                },
            }
        })
        .inspect(|_| self.released(job))
    }

    fn hold_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::take_lock(c, job))
                .map_err(|e| self.ledger_error(e))
        })
        .inspect(|_| self.holds(job))?;
        Ok(None)
    }

    fn forget_job(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        self.on_own(|rt, c| {
            rt.block_on(crate::ledger::forget(c, job))
                .map_err(|e| self.ledger_error(e))
        })?;
        self.released(job);
        self.on_own(|rt, c| {
            rt.block_on(crate::stage::drop_job(c, job))
                .map_err(|e| self.db_error(e))
        })
    }
}

/// One table's records to lines of the canonical `LOAD DATA` stream, with MariaDB's rules.
pub struct MariaDbEncoder {
    converter: Converter,
}

impl RecordEncoder for MariaDbEncoder {
    fn encode(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        self.converter.encode_record(fields, input, out)
    }

    fn encode_field(&mut self, column: usize, raw: &[u8]) -> Option<Vec<u8>> {
        self.converter.encode_field(column, raw)
    }
}

/// One connection of a load, inside its transaction.
pub struct MariaDbStream<'a> {
    pub(crate) dest: &'a MariaDbDestination,
    pub(crate) n: usize,
    pub(crate) stream: Stream,
    load: Option<Load>,
    /// The staging table this stream's loads go to, while it fills one.
    pub(crate) stage: Option<crate::staging::InProgress>,
    /// The table of the LOAD in progress (or the last one), for its errors.
    table: Option<usize>,
    /// Chunk records not yet inserted: they go in with the commit (the same transaction), so
    /// that many small chunks pay one round trip.
    ledger: Vec<(i64, ChunkRecord)>,
}

/// A stream's connection ends here: the watch no longer counts it as the load's.
impl Drop for MariaDbStream<'_> {
    fn drop(&mut self) {
        self.dest.watched.unregister(self.stream.id);
    }
}

/// How long a new stream session waits for the sessions given up during a silence to go.
const FORMERS_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// How long the record of a job that did not finish is waited for.
const RECORD_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

/// Chunk records a stream holds before it inserts them anyway.
const LEDGER_BATCH: usize = 512;

impl MariaDbStream<'_> {
    /// A LOAD's error in the engine's terms, with the key of a duplicate named by the loaded
    /// table's unique index (the engine then finds the rows that hold it).
    fn load_error(&self, e: ServerError) -> DestinationError {
        let mut err = self.dest.stream_error(self.n, e);
        if !err.duplicate || err.key.is_some() {
            return err;
        }
        let unique = self.table.map(|t| &self.dest.tables[t].unique);
        if let Some((index, key)) = unique.and_then(|u| condition::duplicate_key(&err.message, u)) {
            err.key = Some(key);
            err.index = Some(index);
        }
        err
    }

    fn execute(&mut self, sql: &str) -> Result<(), DestinationError> {
        self.dest
            .rt
            .block_on(self.stream.execute(sql))
            .map_err(|e| self.dest.stream_error(self.n, e))
    }

    fn flush_ledger(&mut self) -> Result<(), DestinationError> {
        let mut held = std::mem::take(&mut self.ledger);
        while let Some(&(job, _)) = held.first() {
            let (mine, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|(j, _)| *j == job);
            let chunks: Vec<ChunkRecord> = mine.into_iter().map(|(_, c)| c).collect();
            let conn = self.stream.connection().map_err(|e| self.dest.error(e))?;
            self.dest
                .rt
                .block_on(crate::ledger::record(conn, job, &chunks))
                .map_err(|e| self.dest.db_error(e))?;
            held = rest;
        }
        Ok(())
    }
}

impl DestinationStream for MariaDbStream<'_> {
    fn begin_copy(&mut self, table: usize) -> Result<(), DestinationError> {
        let t = &self.dest.tables[table];
        let columns: Vec<String> = t.columns.iter().map(|c| c.name.clone()).collect();
        let name = match &self.stage {
            Some(s) if s.table == table => &s.staging,
            _ => &t.table.name,
        };
        let relation = format!("{}.{}", quote_ident(&t.table.schema), quote_ident(name));
        self.table = Some(table);
        // The LOAD's task runs on the runtime: spawn it from inside.
        let _guard = self.dest.rt.raw().enter();
        let load = self
            .stream
            .load(&relation, &columns, self.dest.watched.clone())
            .map_err(|e| self.dest.error(e))?;
        self.load = Some(load);
        Ok(())
    }

    fn send(&mut self, data: Vec<u8>) -> Result<(), DestinationError> {
        let Some(load) = self.load.as_mut() else {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "no LOAD in progress",
            ));
        };
        if self.dest.rt.wait(load.send(data)).is_err() {
            // The statement ended early: its own error says why.
            let load = self.load.take().expect("checked above");
            let e = match self.dest.rt.wait(self.stream.finish(load)) {
                Err(e) => e,
                Ok(_) => ServerError::client("the server ended the LOAD before its data did"),
            };
            return Err(self.load_error(e));
        }
        Ok(())
    }

    fn finish_copy(&mut self) -> Result<u64, DestinationError> {
        let Some(load) = self.load.take() else {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "no LOAD in progress",
            ));
        };
        let done = self.dest.rt.wait(self.stream.finish(load));
        done.map_err(|e| self.load_error(e))
    }

    /// MariaDB checks foreign keys row by row; nothing waits for the commit but the ledger's
    /// rows.
    fn fire_deferred_checks(&mut self) -> Result<(), DestinationError> {
        self.flush_ledger()
    }

    fn savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("SAVEPOINT sluice_rows")
    }

    fn release_savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("RELEASE SAVEPOINT sluice_rows")
    }

    fn rollback_to_savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("ROLLBACK TO SAVEPOINT sluice_rows")
    }

    /// Nothing is deferred on MariaDB: every check already runs in the statement.
    fn check_each_copy(&mut self) -> Result<(), DestinationError> {
        Ok(())
    }

    fn record_chunks(&mut self, job: i64, chunks: &[ChunkRecord]) -> Result<(), DestinationError> {
        self.ledger.extend(chunks.iter().map(|c| (job, c.clone())));
        match self.ledger.len() >= LEDGER_BATCH {
            true => self.flush_ledger(),
            false => Ok(()),
        }
    }

    fn commit(mut self) -> Result<(), DestinationError> {
        if self.load.is_some() {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "a LOAD is still in progress: the stream is not committed",
            ));
        }
        self.flush_ledger()?;
        self.dest
            .rt
            .block_on(self.stream.commit())
            .map_err(|e| self.dest.error(e))
    }

    /// `XA END` and `XA PREPARE` of the branch the stream began as; its session is kept
    /// (idle) to commit it: while it lives, no other session may.
    fn prepare(mut self, _id: &str) -> Result<String, DestinationError> {
        if self.load.is_some() {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "a LOAD is still in progress: the stream is not prepared",
            ));
        }
        self.flush_ledger()?;
        let (xid, conn) = self
            .dest
            .rt
            .block_on(self.stream.prepare())
            .map_err(|e| self.dest.error(e))?;
        let name = xid.gtrid.clone();
        lock(&self.dest.prepared).insert(name.clone(), (xid, conn));
        Ok(name)
    }
}
