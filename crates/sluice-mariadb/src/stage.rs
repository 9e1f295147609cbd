//! Staging tables exchanged into partitions: the seed paper's design in MariaDB's terms.
//!
//! A staging table is made by one stream, in the target's database, named for its job
//! (`sluice_stage_j<job>_<run>_<n>`): `CREATE TABLE … LIKE` the parent, `REMOVE PARTITIONING`,
//! its secondary indexes dropped (built again after the rows, as the record's loads did) and the
//! partition's bound added as a CHECK named [`BOUND_CHECK`]. It fills on InnoDB's empty-table
//! bulk path ([`begin_bulk`]). `LOAD DATA LOCAL` turns a row that
//! fails the CHECK into warning 4025, which the stream's warning trap makes an error: the engine
//! then stages that partition's other files again and loads the file in the publish. The rows
//! commit, the indexes are built (`ALTER TABLE … ADD KEY`, the parent's own definitions, read
//! from `SHOW CREATE TABLE`), and only then is the table's record written in
//! `sluice_ledger_staged`: which job, parent, partition and bound, and which chunks it holds. A
//! staging table without a record was cut off before it was finished (or its unit was retried
//! after a deadlock or a lost connection); the next load drops it unless its job is running,
//! and a rerun of its job drops it when it resumes, even with nothing left to load.
//!
//! MariaDB's DDL commits on its own and `EXCHANGE PARTITION` fails inside XA, so the publish
//! cannot be one transaction as on PostgreSQL: it is one durable step per partition
//! ([`PublishModel::PerPartition`](sluice_core::destination::PublishModel)). Each step marks
//! the record `switching`, exchanges (10.11 scans the staging table to check every row against
//! the partition; `WITHOUT VALIDATION` is 11.4's), then in one transaction writes the chunks'
//! ledger rows and deletes the record, then drops the staging table (which now holds the empty
//! partition). A step cut off after its exchange is settled by the next run of its job
//! ([`settle_job`], before the job's chunks are read; [`prepare`] settles other jobs'): a
//! staging table that is empty while its partition has rows was exchanged, so its chunks are
//! recorded; otherwise it is a leftover again. Exactly once either way.
//!
//! A partition that has rows by the publish is not exchanged: the staging table's rows are
//! appended to it (`INSERT … SELECT`) in the transaction that records their chunks.

use crate::catalog::quote_ident;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice_core::destination::{KeyBound, KeyPartition, Partitioning};
use sluice_core::ledger::{ChunkRecord, JobState};
use std::time::Duration;

/// The names of staging tables begin so.
pub const PREFIX: &str = "sluice_stage_";
/// The name of the CHECK that carries a partition's bound on its staging table.
pub const BOUND_CHECK: &str = "sluice_partition_bound";
/// How long an exchange waits for its metadata lock before it gives way and tries again,
/// unless the load says otherwise.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);
/// Exchanges tried before the publish gives up.
pub const EXCHANGE_ATTEMPTS: u32 = 5;

/// The table of finished staging tables' records.
const RECORDS: &str = "sluice_ledger_staged";

const CREATE_RECORDS: &str = "CREATE TABLE IF NOT EXISTS sluice_ledger_staged (
    staging VARCHAR(64) NOT NULL PRIMARY KEY,
    job BIGINT NOT NULL,
    parent VARCHAR(64) NOT NULL,
    part VARCHAR(64) NOT NULL,
    bound TEXT NOT NULL,
    chunks LONGTEXT NOT NULL,
    switching BOOLEAN NOT NULL DEFAULT FALSE) ENGINE=InnoDB CHARACTER SET utf8mb4 \
    COLLATE utf8mb4_bin COMMENT 'sluice: finished staging tables, waiting to be exchanged'";

/// One partition, with what the staging table and the publish need.
#[derive(Clone, Debug)]
pub struct PartitionDetail {
    /// The partition's name, as the server spells it.
    pub name: String,
    /// `PARTITION_DESCRIPTION` as the server prints it: a leftover must still match it.
    pub description: String,
    pub range: KeyPartition,
}

/// A table's partitioning with its details.
#[derive(Clone, Debug)]
pub struct TablePartitions {
    pub partitioning: Partitioning,
    /// The key column.
    pub column: String,
    pub details: Vec<PartitionDetail>,
    /// Its secondary indexes (what a staged load builds after the rows, and a direct one keeps
    /// up row by row).
    pub secondary_indexes: u64,
}

impl TablePartitions {
    fn unroutable(why: String) -> TablePartitions {
        TablePartitions {
            partitioning: Partitioning::Unroutable(why),
            column: String::new(),
            details: Vec::new(),
            secondary_indexes: 0,
        }
    }
}

/// A row of `information_schema.PARTITIONS`: name, subpartition, method, expression,
/// description.
type PartRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// How `table` is partitioned, and whether sluice can stage it: RANGE or LIST (or their
/// COLUMNS forms) of one integer column, no subpartitions, no triggers (an exchange would
/// bypass them). A partition with rows cannot be replaced: its obstacle says so.
pub async fn describe_partitions(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<TablePartitions, mysql_async::Error> {
    let rows: Vec<PartRow> = conn
        .exec(
            "SELECT PARTITION_NAME, SUBPARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, \
             PARTITION_DESCRIPTION FROM information_schema.PARTITIONS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY PARTITION_ORDINAL_POSITION, SUBPARTITION_ORDINAL_POSITION",
            (schema, table),
        )
        .await?;
    let layout = match layout(&rows) {
        Ok(Some(l)) => l,
        Ok(None) => {
            return Ok(TablePartitions {
                partitioning: Partitioning::None,
                column: String::new(),
                details: Vec::new(),
                secondary_indexes: 0,
            })
        }
        Err(why) => return Ok(TablePartitions::unroutable(why)),
    };
    let here: Option<String> = conn.query_first("SELECT DATABASE()").await?;
    if here.as_deref() != Some(schema) {
        return Ok(TablePartitions::unroutable(format!(
            "it is in database {schema}, and staging tables are made in the target's database \
             ({}): name the table's database in the target to stage it",
            here.unwrap_or_else(|| "none".into())
        )));
    }
    let data_type: Option<String> = conn
        .exec_first(
            "SELECT DATA_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
            (schema, table, &layout.column),
        )
        .await?;
    let integer = ["tinyint", "smallint", "mediumint", "int", "bigint"];
    if !data_type.is_some_and(|t| integer.contains(&t.to_ascii_lowercase().as_str())) {
        return Ok(TablePartitions::unroutable(format!(
            "its partition key {} is not an integer column",
            layout.column
        )));
    }
    let triggers: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS \
             WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ?",
            (schema, table),
        )
        .await?;
    if triggers.unwrap_or(0) > 0 {
        return Ok(TablePartitions::unroutable(
            "it has triggers, which exchanging a partition would bypass".into(),
        ));
    }
    let secondary: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME <> 'PRIMARY'",
            (schema, table),
        )
        .await?;
    let mut details = Vec::with_capacity(layout.parts.len());
    for (name, description, bound) in layout.parts {
        let relation = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let taken = partition_has_rows(conn, &relation, &name).await?;
        details.push(PartitionDetail {
            range: KeyPartition {
                name: format!("partition {} of {}", quote_ident(&name), quote_ident(table)),
                bound,
                obstacle: taken.then(|| format!("partition {name} of {table} is not empty")),
            },
            name,
            description,
        });
    }
    Ok(TablePartitions {
        partitioning: Partitioning::IntegerKey {
            column: layout.column.clone(),
            partitions: details.iter().map(|d| d.range.clone()).collect(),
            default: false,
        },
        column: layout.column,
        details,
        secondary_indexes: secondary.unwrap_or(0).max(0) as u64,
    })
}

/// A partitioning sluice can stage: its key column and each partition's name, description and
/// bound.
#[derive(Debug, PartialEq)]
struct Layout {
    column: String,
    parts: Vec<(String, String, KeyBound)>,
}

/// The layout `rows` describe, `None` for a plain table, or why sluice cannot stage it.
fn layout(rows: &[PartRow]) -> Result<Option<Layout>, String> {
    let Some(first) = rows.first().filter(|r| r.0.is_some()) else {
        return Ok(None);
    };
    if rows.iter().any(|r| r.1.is_some()) {
        return Err("it is subpartitioned".into());
    }
    let method = first.2.clone().unwrap_or_default();
    let list = match method.as_str() {
        "RANGE" | "RANGE COLUMNS" => false,
        "LIST" | "LIST COLUMNS" => true,
        other => {
            return Err(format!(
                "it is partitioned by {other}; sluice stages RANGE and LIST partitions"
            ))
        }
    };
    let expression = first.3.clone().unwrap_or_default();
    let column = bare_column(&expression).ok_or_else(|| {
        format!("it is partitioned by the expression {expression}, not by one column")
    })?;
    let mut parts = Vec::with_capacity(rows.len());
    let mut lower = None;
    for r in rows {
        let name = r.0.clone().unwrap_or_default();
        let description = r.4.clone().unwrap_or_default();
        let bound = match list {
            true => list_bound(&description),
            false => range_upper(&description).map(|upper| KeyBound::Range { lower, upper }),
        }
        .ok_or_else(|| format!("its partition {name} has bound {description}"))?;
        if let KeyBound::Range { upper, .. } = bound {
            lower = upper;
        }
        parts.push((name, description, bound));
    }
    Ok(Some(Layout { column, parts }))
}

/// `` `k` `` or `k`: the column a partitioning is by; `None` for an expression.
fn bare_column(expression: &str) -> Option<String> {
    let e = expression.trim();
    let name = match e.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
        Some(quoted) if !quoted.contains('`') => quoted,
        Some(_) => return None,
        None => e,
    };
    let plain = name
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '$');
    (!name.is_empty() && (plain || e.starts_with('`'))).then(|| name.to_string())
}

/// A RANGE partition's upper bound: a number, or `None` for MAXVALUE.
fn range_upper(description: &str) -> Option<Option<i64>> {
    match description.trim() {
        "MAXVALUE" => Some(None),
        d => d.parse().ok().map(Some),
    }
}

/// A LIST partition's values (`1,2,NULL`); `None` for DEFAULT or a value that is not an
/// integer.
fn list_bound(description: &str) -> Option<KeyBound> {
    let mut values = Vec::new();
    let mut null = false;
    for v in description.split(',').map(str::trim) {
        match v {
            "NULL" => null = true,
            v => values.push(v.parse().ok()?),
        }
    }
    Some(KeyBound::List { values, null })
}

/// Whether partition `partition` of `relation` (quoted, qualified or not) has a row.
async fn partition_has_rows(
    conn: &mut Conn,
    relation: &str,
    partition: &str,
) -> Result<bool, mysql_async::Error> {
    let any: Option<i64> = conn
        .query_first(format!(
            "SELECT EXISTS (SELECT 1 FROM {relation} PARTITION ({}))",
            quote_ident(partition)
        ))
        .await?;
    Ok(any == Some(1))
}

/// The CHECK that holds a staging table's rows to `bound` of key `column`. A RANGE's first
/// partition also holds NULL keys, as MariaDB puts them there; every other partition says
/// `IS NOT NULL` outright, since a comparison with NULL passes a CHECK.
pub fn bound_check(column: &str, bound: &KeyBound) -> String {
    let k = quote_ident(column);
    match bound {
        KeyBound::Range { lower, upper } => {
            let upper = upper.map(|u| format!("{k} < {u}"));
            match (lower, upper) {
                (Some(l), Some(u)) => format!("{k} IS NOT NULL AND {k} >= {l} AND {u}"),
                (Some(l), None) => format!("{k} IS NOT NULL AND {k} >= {l}"),
                (None, Some(u)) => format!("{k} IS NULL OR {u}"),
                (None, None) => "TRUE".into(),
            }
        }
        KeyBound::List { values, null } => {
            let list: Vec<String> = values.iter().map(i64::to_string).collect();
            let within = match list.is_empty() {
                true => "FALSE".to_string(),
                false => format!("{k} IN ({})", list.join(", ")),
            };
            match null {
                true => format!("{k} IS NULL OR {within}"),
                false => format!("{k} IS NOT NULL AND {within}"),
            }
        }
        KeyBound::Hash { .. } => "TRUE".into(),
    }
}

/// A staging table's name: its job, this run, and a number.
pub fn staging_name(job: i64, run: u32, seq: u32) -> String {
    format!("{PREFIX}j{job}_{run:08x}_{seq}")
}

/// The job a staging table's name carries.
fn job_of(name: &str) -> Option<i64> {
    name.strip_prefix(PREFIX)?
        .strip_prefix('j')?
        .split('_')
        .next()?
        .parse()
        .ok()
}

/// The secondary index definitions of a table, as `SHOW CREATE TABLE` prints them (`KEY` and
/// `UNIQUE KEY` lines): each with its name.
pub async fn secondary_indexes(
    conn: &mut Conn,
    relation: &str,
) -> Result<Vec<(String, String)>, mysql_async::Error> {
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW CREATE TABLE {relation}"))
        .await?;
    Ok(row.map(|(_, ddl)| index_lines(&ddl)).unwrap_or_default())
}

/// The `KEY` and `UNIQUE KEY` lines of a `CREATE TABLE`, with their names.
fn index_lines(ddl: &str) -> Vec<(String, String)> {
    ddl.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("KEY `") || l.starts_with("UNIQUE KEY `"))
        .filter_map(|l| {
            let def = l.trim_end_matches(',').to_string();
            let name = def.split('`').nth(1)?.to_string();
            Some((name, def))
        })
        .collect()
}

/// Creates staging table `staging` for the partition of `parent` that `check` bounds, on
/// `conn` (each statement commits on its own), and returns the secondary indexes it left out.
pub async fn create_staging(
    conn: &mut Conn,
    parent: &str,
    staging: &str,
    check: &str,
) -> Result<Vec<(String, String)>, mysql_async::Error> {
    let s = quote_ident(staging);
    conn.query_drop(format!("CREATE TABLE {s} LIKE {parent}"))
        .await?;
    conn.query_drop(format!("ALTER TABLE {s} REMOVE PARTITIONING"))
        .await?;
    let indexes = secondary_indexes(conn, &s).await?;
    let mut changes: Vec<String> = indexes
        .iter()
        .map(|(name, _)| format!("DROP INDEX {}", quote_ident(name)))
        .collect();
    changes.push(format!(
        "ADD CONSTRAINT {} CHECK ({check})",
        quote_ident(BOUND_CHECK)
    ));
    conn.query_drop(format!("ALTER TABLE {s} {}", changes.join(", ")))
        .await?;
    Ok(indexes)
}

/// Bounds the session's waits for a table's metadata lock and for a row lock to `wait` (at
/// least a second, the server's unit): a user's open transaction on a parent must not hold a
/// staging step up forever (`lock_wait_timeout` is a year by default).
pub async fn bound_lock_waits(conn: &mut Conn, wait: Duration) -> Result<(), mysql_async::Error> {
    let seconds = wait.as_secs().max(1);
    conn.query_drop(format!(
        "SET SESSION lock_wait_timeout = {seconds}, SESSION innodb_lock_wait_timeout = {seconds}"
    ))
    .await
}

/// On a staging stream's connection, with its lock waits bounded to `wait`: creates staging
/// table `staging` ([`create_staging`]) and begins its transaction on the bulk path
/// ([`begin_bulk`]). Returns the secondary indexes to build after the rows.
pub async fn begin(
    conn: &mut Conn,
    parent: &str,
    staging: &str,
    check: &str,
    wait: Duration,
) -> Result<Vec<(String, String)>, mysql_async::Error> {
    bound_lock_waits(conn, wait).await?;
    let indexes = create_staging(conn, parent, staging, check).await?;
    begin_bulk(conn).await?;
    Ok(indexes)
}

/// Commits a staging table's rows, builds its `indexes`, then writes its record `r` (a table
/// without one is unfinished). Returns how long the index build took.
pub async fn finish(
    conn: &mut Conn,
    r: &Record,
    indexes: &[(String, String)],
) -> Result<Duration, mysql_async::Error> {
    conn.query_drop("COMMIT").await?;
    let started = std::time::Instant::now();
    build_indexes(conn, &r.staging, indexes).await?;
    let built = started.elapsed();
    // The record is an ordinary row: with the bulk session's checks off, InnoDB takes its
    // empty-table path for it (a table lock), and two streams finishing at once deadlock.
    end_bulk(conn).await?;
    record(conn, r).await?;
    Ok(built)
}

/// Rolls back the staging table in progress and drops it.
pub async fn abandon(conn: &mut Conn, staging: &str) -> Result<(), mysql_async::Error> {
    conn.query_drop("ROLLBACK").await?;
    end_bulk(conn).await?;
    drop_staging(conn, staging).await
}

/// Begins the transaction that fills a staging table just made, on InnoDB's empty-table bulk
/// path: with `unique_checks` and `foreign_key_checks` off for the session, the first `LOAD
/// DATA` into the empty table sorts each index's rows and writes whole pages (undo is one
/// record, the table's lock is held to the commit: no other session touches a staging table).
/// A duplicate key is not lost in silence under it: the statement gets warning 1062, which the
/// warning trap makes an error (and the staging table is rolled back). The checks are off only
/// on the staging connection, until the table is finished or abandoned ([`end_bulk`]).
pub async fn begin_bulk(conn: &mut Conn) -> Result<(), mysql_async::Error> {
    conn.query_drop("SET SESSION unique_checks = 0, SESSION foreign_key_checks = 0")
        .await?;
    conn.query_drop("START TRANSACTION").await
}

/// Turns the session's checks back on after a staging table ([`begin_bulk`]): whatever the
/// connection writes next (a record, another table's rows) is checked as usual.
async fn end_bulk(conn: &mut Conn) -> Result<(), mysql_async::Error> {
    conn.query_drop("SET SESSION unique_checks = 1, SESSION foreign_key_checks = 1")
        .await
}

/// Builds `indexes` on staging table `staging`, in one statement.
pub async fn build_indexes(
    conn: &mut Conn,
    staging: &str,
    indexes: &[(String, String)],
) -> Result<(), mysql_async::Error> {
    if indexes.is_empty() {
        return Ok(());
    }
    let adds: Vec<String> = indexes.iter().map(|(_, d)| format!("ADD {d}")).collect();
    conn.query_drop(format!(
        "ALTER TABLE {} {}",
        quote_ident(staging),
        adds.join(", ")
    ))
    .await
}

/// A finished staging table's record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub staging: String,
    pub job: i64,
    pub parent: String,
    pub part: String,
    pub bound: String,
    pub chunks: Vec<ChunkRecord>,
    /// Its exchange began: settle it before anything else.
    pub switching: bool,
}

fn chunks_text(chunks: &[ChunkRecord]) -> String {
    chunks
        .iter()
        .map(|c| {
            let end = c.end.map_or("-".to_string(), |e| e.to_string());
            format!("{} {} {end} {}", c.file, c.start, c.rows)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_chunks(text: &str) -> Option<Vec<ChunkRecord>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.split(' ');
            let file = f.next()?.parse().ok()?;
            let start = f.next()?.parse().ok()?;
            let end = match f.next()? {
                "-" => None,
                e => Some(e.parse().ok()?),
            };
            let rows = f.next()?.parse().ok()?;
            Some(ChunkRecord {
                file,
                start,
                end,
                rows,
            })
        })
        .collect()
}

/// Writes a finished staging table's record (it commits on its own: the table's rows and
/// indexes are in before it).
pub async fn record(conn: &mut Conn, r: &Record) -> Result<(), mysql_async::Error> {
    conn.exec_drop(
        "INSERT INTO sluice_ledger_staged (staging, job, parent, part, bound, chunks) \
         VALUES (?, ?, ?, ?, ?, ?)",
        (
            &r.staging,
            r.job,
            &r.parent,
            &r.part,
            &r.bound,
            chunks_text(&r.chunks),
        ),
    )
    .await
}

async fn records(conn: &mut Conn) -> Result<Vec<Record>, mysql_async::Error> {
    type Row = (String, i64, String, String, String, String, bool);
    let rows: Vec<Row> = conn
        .query(
            "SELECT staging, job, parent, part, bound, chunks, switching \
             FROM sluice_ledger_staged ORDER BY staging",
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| Record {
            // A record whose chunks do not read back holds none this run can reuse.
            chunks: parse_chunks(&r.5).unwrap_or_default(),
            staging: r.0,
            job: r.1,
            parent: r.2,
            part: r.3,
            bound: r.4,
            switching: r.6,
        })
        .collect())
}

/// What readying the staging area found.
#[derive(Debug, Default)]
pub struct Found {
    pub dropped: Vec<String>,
    pub waiting: Vec<String>,
    /// This job's finished staging tables.
    pub candidates: Vec<Record>,
}

/// Whether job `job`'s lock is held by another connection than this one: a load runs it.
async fn runs_elsewhere(conn: &mut Conn, job: i64) -> Result<bool, mysql_async::Error> {
    let other: Option<i64> = conn
        .exec_first(
            format!(
                "SELECT COALESCE(IS_USED_LOCK({0}) <> CONNECTION_ID(), 0)",
                crate::ledger::LOCK_NAME
            ),
            (job,),
        )
        .await?;
    Ok(other == Some(1))
}

async fn resumable(conn: &mut Conn, job: i64) -> Result<bool, mysql_async::Error> {
    let state: Option<String> = conn
        .exec_first("SELECT state FROM sluice_ledger_jobs WHERE id = ?", (job,))
        .await?;
    Ok(state
        .and_then(|s| JobState::parse(&s))
        .is_some_and(JobState::resumable))
}

/// Before a load of `job`: settles exchanges cut off halfway, drops what dead loads left
/// (staging tables without a record, of no running job; finished ones of a job that cannot
/// be resumed), and returns this job's finished staging tables.
pub async fn prepare(conn: &mut Conn, job: Option<i64>) -> Result<Found, mysql_async::Error> {
    conn.query_drop(CREATE_RECORDS).await?;
    let tables = staging_tables(conn, "").await?;
    let mut found = Found::default();
    let mut recorded = Vec::new();
    for r in records(conn).await? {
        recorded.push(r.staging.clone());
        let mine = Some(r.job) == job;
        if !mine && runs_elsewhere(conn, r.job).await? {
            found
                .waiting
                .push(format!("{} (job {}, running)", r.staging, r.job));
            continue;
        }
        let exists = tables.contains(&r.staging);
        if r.switching && settle(conn, &r, exists).await? {
            continue;
        }
        if !exists {
            forget(conn, &r.staging).await?;
        } else if mine {
            found.candidates.push(r);
        } else if resumable(conn, r.job).await? {
            found.waiting.push(format!("{} (job {})", r.staging, r.job));
        } else {
            drop_staging(conn, &r.staging).await?;
            found.dropped.push(format!(
                "{} (job {}, which cannot be resumed)",
                r.staging, r.job
            ));
        }
    }
    for t in tables.iter().filter(|t| !recorded.contains(t)) {
        let running = match job_of(t) {
            Some(j) if Some(j) != job => runs_elsewhere(conn, j).await?,
            _ => false,
        };
        if !running {
            drop_staging(conn, t).await?;
            found
                .dropped
                .push(format!("{t} (left unfinished by a load that stopped)"));
        }
    }
    Ok(found)
}

/// Settles the exchanges job `job`'s last run began and did not record, then drops the job's
/// staging tables that have no record (a unit retried after a deadlock or a lost connection,
/// or cut off by a kill: never visible, and no run of the job can finish them). Run under the
/// job's lock, before the job's chunks are read (a settled exchange's chunks are then done),
/// with lock waits bounded to `wait` (the session keeps that bound for the rest of the load,
/// as the publish's steps set it anyway); returns the tables dropped. A rerun with nothing left
/// to load readies no staging area, so this is the only place they go.
pub async fn settle_job(
    conn: &mut Conn,
    job: i64,
    wait: Duration,
) -> Result<Vec<String>, mysql_async::Error> {
    if !table_exists(conn, RECORDS).await? {
        return Ok(Vec::new());
    }
    bound_lock_waits(conn, wait).await?;
    let records = records(conn).await?;
    for r in &records {
        if r.job == job && r.switching {
            let exists = table_exists(conn, &r.staging).await?;
            settle(conn, r, exists).await?;
        }
    }
    let recorded: Vec<&str> = records.iter().map(|r| r.staging.as_str()).collect();
    let mut dropped = Vec::new();
    for t in staging_tables(conn, &format!("j{job}_")).await? {
        if !recorded.contains(&t.as_str()) {
            drop_table(conn, &t).await?;
            dropped.push(t);
        }
    }
    Ok(dropped)
}

/// The staging tables of the connection's database whose names go on with `more` after
/// [`PREFIX`].
async fn staging_tables(conn: &mut Conn, more: &str) -> Result<Vec<String>, mysql_async::Error> {
    conn.exec(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME LIKE ? ESCAPE '!'",
        (format!("{PREFIX}{more}%").replace('_', "!_"),),
    )
    .await
}

/// Whether table `name` is in the connection's database.
async fn table_exists(conn: &mut Conn, name: &str) -> Result<bool, mysql_async::Error> {
    let n: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = ?",
            (name,),
        )
        .await?;
    Ok(n == Some(1))
}

/// Drops job `job`'s staging tables and their records (the job is forgotten).
pub async fn drop_job(conn: &mut Conn, job: i64) -> Result<Vec<String>, mysql_async::Error> {
    let dropped = staging_tables(conn, &format!("j{job}_")).await?;
    for t in &dropped {
        drop_table(conn, t).await?;
    }
    if table_exists(conn, RECORDS).await? {
        conn.exec_drop("DELETE FROM sluice_ledger_staged WHERE job = ?", (job,))
            .await?;
    }
    Ok(dropped)
}

async fn drop_table(conn: &mut Conn, name: &str) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("DROP TABLE IF EXISTS {}", quote_ident(name)))
        .await
}

/// Settles record `r`, whose exchange began: whether it happened (then its chunks are
/// recorded now) or not (it waits to be published again).
async fn settle(conn: &mut Conn, r: &Record, exists: bool) -> Result<bool, mysql_async::Error> {
    let staged_rows = match exists {
        true => {
            let any: Option<i64> = conn
                .query_first(format!(
                    "SELECT EXISTS (SELECT 1 FROM {})",
                    quote_ident(&r.staging)
                ))
                .await?;
            any == Some(1)
        }
        false => false,
    };
    let parent_rows = partition_has_rows_here(conn, &r.parent, &r.part).await?;
    if staged_rows || !parent_rows {
        conn.exec_drop(
            "UPDATE sluice_ledger_staged SET switching = FALSE WHERE staging = ?",
            (&r.staging,),
        )
        .await?;
        return Ok(false);
    }
    switched(conn, r, exists).await?;
    Ok(true)
}

/// [`partition_has_rows`] of `parent` in the connection's database.
async fn partition_has_rows_here(
    conn: &mut Conn,
    parent: &str,
    part: &str,
) -> Result<bool, mysql_async::Error> {
    partition_has_rows(conn, &quote_ident(parent), part).await
}

/// After the exchange: in one transaction, the rows the staging table holds now put back (the
/// partition was empty when the step looked, but another session may have written to it
/// before the exchange took its lock), the chunks' ledger rows and the record's end; then the
/// staging table dropped. Without an exchange (the partition had rows), the same transaction
/// appends the staged rows themselves.
async fn switched(conn: &mut Conn, r: &Record, exists: bool) -> Result<(), mysql_async::Error> {
    conn.query_drop("START TRANSACTION").await?;
    let done = async {
        if exists {
            copy_rows(conn, &r.staging, &r.parent).await?;
        }
        crate::ledger::record(conn, r.job, &r.chunks).await?;
        forget(conn, &r.staging).await
    }
    .await;
    end_transaction(conn, done).await?;
    drop_table(conn, &r.staging).await
}

/// Ends the transaction `r` was the work of: committed if it succeeded, else rolled back.
async fn end_transaction(
    conn: &mut Conn,
    r: Result<(), mysql_async::Error>,
) -> Result<(), mysql_async::Error> {
    match r {
        Ok(()) => conn.query_drop("COMMIT").await,
        Err(e) => {
            let _ = conn.query_drop("ROLLBACK").await;
            Err(e)
        }
    }
}

/// Drops a staging table and its record.
pub async fn drop_staging(conn: &mut Conn, staging: &str) -> Result<(), mysql_async::Error> {
    drop_table(conn, staging).await?;
    forget(conn, staging).await
}

async fn forget(conn: &mut Conn, staging: &str) -> Result<(), mysql_async::Error> {
    conn.exec_drop(
        "DELETE FROM sluice_ledger_staged WHERE staging = ?",
        (staging,),
    )
    .await
}

/// Whether staging table `staging` still has the structure of `parent`'s partitions: the same
/// columns and the same indexes (the exchange refuses any difference).
pub async fn still_fits(
    conn: &mut Conn,
    staging: &str,
    parent: &str,
) -> Result<bool, mysql_async::Error> {
    const SHAPE: &str = "SELECT CONCAT_WS('|', (SELECT GROUP_CONCAT(COLUMN_NAME, ' ', \
         COLUMN_TYPE, ' ', IS_NULLABLE, ' ', IFNULL(COLLATION_NAME, '') ORDER BY \
         ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND \
         TABLE_NAME = ?), (SELECT GROUP_CONCAT(INDEX_NAME, ' ', NON_UNIQUE, ' ', COLUMN_NAME, \
         ' ', IFNULL(SUB_PART, '') ORDER BY INDEX_NAME, SEQ_IN_INDEX) FROM \
         information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?))";
    conn.query_drop("SET SESSION group_concat_max_len = 16777216")
        .await?;
    let a: Option<Option<String>> = conn.exec_first(SHAPE, (staging, staging)).await?;
    let b: Option<Option<String>> = conn.exec_first(SHAPE, (parent, parent)).await?;
    Ok(a.as_ref().is_some_and(|a| a.is_some()) && a == b)
}

/// What one exchange step did.
#[derive(Debug, Default)]
pub struct Exchanged {
    pub attempts: u32,
    /// The partition had rows: the staging table's rows were appended instead.
    pub appended: bool,
}

/// Publishes staging table `r.staging` into its partition (see the module doc), waiting at
/// most `wait` for each lock, [`EXCHANGE_ATTEMPTS`] times.
pub async fn exchange(
    conn: &mut Conn,
    r: &Record,
    wait: Duration,
) -> Result<Exchanged, mysql_async::Error> {
    bound_lock_waits(conn, wait).await?;
    if partition_has_rows_here(conn, &r.parent, &r.part).await? {
        // The same transaction as after an exchange: the staging table's rows go in.
        switched(conn, r, true).await?;
        return Ok(Exchanged {
            attempts: 1,
            appended: true,
        });
    }
    conn.exec_drop(
        "UPDATE sluice_ledger_staged SET switching = TRUE WHERE staging = ?",
        (&r.staging,),
    )
    .await?;
    let sql = format!(
        "ALTER TABLE {} EXCHANGE PARTITION {} WITH TABLE {}",
        quote_ident(&r.parent),
        quote_ident(&r.part),
        quote_ident(&r.staging)
    );
    let mut attempts = 0;
    loop {
        attempts += 1;
        match conn.query_drop(&sql).await {
            Ok(()) => break,
            Err(mysql_async::Error::Server(e))
                if e.code == 1205 && attempts < EXCHANGE_ATTEMPTS =>
            {
                // A tenth of the wait, doubling, as the load's --help says.
                tokio::time::sleep(wait / 10 * (1 << (attempts - 1))).await;
            }
            Err(e) => return Err(e),
        }
    }
    switched(conn, r, true).await?;
    Ok(Exchanged {
        attempts,
        appended: false,
    })
}

/// In the connection's transaction, with its lock waits bounded to `wait`: appends each
/// staging table's rows to its parent and removes its record (the caller commits them, with
/// whatever else the transaction holds).
pub async fn append_all(
    conn: &mut Conn,
    records: &[Record],
    wait: Duration,
) -> Result<(), mysql_async::Error> {
    bound_lock_waits(conn, wait).await?;
    for r in records {
        copy_rows(conn, &r.staging, &r.parent).await?;
        forget(conn, &r.staging).await?;
    }
    Ok(())
}

/// `INSERT INTO to SELECT FROM from`, of every stored column by name (an `INVISIBLE` column
/// too; a generated one is the server's to compute), in the connection's transaction.
async fn copy_rows(conn: &mut Conn, from: &str, to: &str) -> Result<(), mysql_async::Error> {
    let columns: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = ? AND IS_GENERATED = 'NEVER' ORDER BY ORDINAL_POSITION",
            (to,),
        )
        .await?;
    let list: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    let list = list.join(", ");
    conn.query_drop(format!(
        "INSERT INTO {} ({list}) SELECT {list} FROM {}",
        quote_ident(to),
        quote_ident(from)
    ))
    .await
}

/// `ANALYZE TABLE` of each parent, one at a time.
pub async fn analyze(
    conn: &mut Conn,
    parents: &[String],
) -> Result<Vec<String>, mysql_async::Error> {
    let mut refused = Vec::new();
    for p in parents {
        let rows: Vec<AnalyzeRow> = conn.query(format!("ANALYZE TABLE {p}")).await?;
        refused.extend(analyze_errors(&rows));
    }
    Ok(refused)
}

/// A row of `ANALYZE TABLE`'s answer: table, operation, message type, message.
type AnalyzeRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// What `ANALYZE TABLE`'s answer says went wrong: the server reports a table it could not
/// analyze as a row of type `error` (the statement itself succeeds).
fn analyze_errors(rows: &[AnalyzeRow]) -> Vec<String> {
    rows.iter()
        .filter(|(_, _, kind, _)| {
            kind.as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case("error"))
        })
        .map(|(table, _, _, text)| {
            format!(
                "{}: {}",
                table.as_deref().unwrap_or("?"),
                text.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table the server could not analyze is a row of type `error`; `status` and `note`
    /// rows are not failures.
    #[test]
    fn analyze_errors_are_its_error_rows() {
        let row = |t: &str, kind: &str, text: &str| -> AnalyzeRow {
            (
                Some(t.into()),
                Some("analyze".into()),
                Some(kind.into()),
                Some(text.into()),
            )
        };
        let rows = [
            row("db.t", "status", "OK"),
            row(
                "db.u",
                "note",
                "The storage engine for the table doesn't support analyze",
            ),
            row("db.v", "Error", "Table 'db.v' doesn't exist"),
            row("db.v", "status", "Operation failed"),
        ];
        assert_eq!(analyze_errors(&rows), ["db.v: Table 'db.v' doesn't exist"]);
        assert!(analyze_errors(&rows[..2]).is_empty());
    }

    fn row(name: &str, method: &str, expr: &str, desc: &str) -> PartRow {
        (
            Some(name.into()),
            None,
            Some(method.into()),
            Some(expr.into()),
            Some(desc.into()),
        )
    }

    #[test]
    fn range_partitions_read_as_the_catalog_prints_them() {
        let rows = [
            row("p0", "RANGE", "`k`", "100"),
            row("p1", "RANGE", "`k`", "200"),
            row("p2", "RANGE", "`k`", "MAXVALUE"),
        ];
        let l = layout(&rows).unwrap().unwrap();
        assert_eq!(l.column, "k");
        let bounds: Vec<KeyBound> = l.parts.iter().map(|p| p.2.clone()).collect();
        assert_eq!(
            bounds,
            [
                KeyBound::Range {
                    lower: None,
                    upper: Some(100)
                },
                KeyBound::Range {
                    lower: Some(100),
                    upper: Some(200)
                },
                KeyBound::Range {
                    lower: Some(200),
                    upper: None
                },
            ]
        );
    }

    #[test]
    fn what_sluice_cannot_stage_says_why() {
        assert_eq!(layout(&[(None, None, None, None, None)]), Ok(None));
        let hash = [row("p0", "HASH", "`k`", "")];
        assert!(layout(&hash).unwrap_err().contains("HASH"));
        let expr = [row("p0", "RANGE", "year(`d`)", "2000")];
        assert!(layout(&expr).unwrap_err().contains("expression"));
        let default = [row("p0", "LIST", "`k`", "DEFAULT")];
        assert!(layout(&default).unwrap_err().contains("DEFAULT"));
        let mut sub = row("p0", "RANGE", "`k`", "10");
        sub.1 = Some("sp0".into());
        assert!(layout(&[sub]).unwrap_err().contains("subpartitioned"));
    }

    #[test]
    fn list_partitions_and_their_null() {
        let l = layout(&[row("p0", "LIST", "`k`", "1,2,NULL")])
            .unwrap()
            .unwrap();
        assert_eq!(
            l.parts[0].2,
            KeyBound::List {
                values: vec![1, 2],
                null: true
            }
        );
    }

    #[test]
    fn checks_hold_a_staging_table_to_its_partition() {
        let r = |lower, upper| KeyBound::Range { lower, upper };
        assert_eq!(
            bound_check("k", &r(None, Some(100))),
            "`k` IS NULL OR `k` < 100"
        );
        assert_eq!(
            bound_check("k", &r(Some(100), Some(200))),
            "`k` IS NOT NULL AND `k` >= 100 AND `k` < 200"
        );
        assert_eq!(
            bound_check("k", &r(Some(200), None)),
            "`k` IS NOT NULL AND `k` >= 200"
        );
        let list = KeyBound::List {
            values: vec![3, 4],
            null: false,
        };
        assert_eq!(bound_check("k", &list), "`k` IS NOT NULL AND `k` IN (3, 4)");
    }

    #[test]
    fn index_lines_are_the_servers_own() {
        let ddl = "CREATE TABLE `s` (\n  `k` int(11) NOT NULL,\n  `v` varchar(10),\n  \
                   PRIMARY KEY (`k`),\n  KEY `iv` (`v`),\n  UNIQUE KEY `u` (`v`,`k`) COMMENT 'x',\n  \
                   FULLTEXT KEY `f` (`v`)\n) ENGINE=InnoDB";
        assert_eq!(
            index_lines(ddl),
            [
                ("iv".to_string(), "KEY `iv` (`v`)".to_string()),
                (
                    "u".to_string(),
                    "UNIQUE KEY `u` (`v`,`k`) COMMENT 'x'".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_records_chunks_read_back() {
        let chunks = vec![
            ChunkRecord {
                file: 0,
                start: 0,
                end: Some(10),
                rows: 3,
            },
            ChunkRecord {
                file: 2,
                start: 10,
                end: None,
                rows: 7,
            },
        ];
        assert_eq!(parse_chunks(&chunks_text(&chunks)), Some(chunks));
        assert_eq!(job_of(&staging_name(42, 7, 3)), Some(42));
    }
}
