//! Staging tables switched into partitions: the seed paper's design, in PostgreSQL's terms.
//!
//! Each staging table is created by one stream in its own transaction, in sluice's schema
//! [`SCHEMA`], as `LIKE` the parent without indexes, with the partition's own constraint
//! (`pg_get_partition_constraintdef`) as a CHECK named [`BOUND_CHECK`]. Created in the
//! transaction, it takes `COPY ... FREEZE` (rows never need revisiting) and, with
//! `wal_level = minimal`, writes no WAL. The same stream then builds the parent's indexes on
//! it (a primary key or unique constraint as a constraint, so that ATTACH adopts it rather than
//! building another), commits, and runs ANALYZE on it: the table waits, invisible to the
//! parent's users, for the publish, with its statistics (see [`analyze_parents`] for why here).
//!
//! The publish is one transaction, on a connection of its own: for each staging table,
//! DETACH the empty partition, check that it is still empty under the lock, DROP it, move the
//! staging table into the partition's schema under its name, ATTACH it with the same bounds
//! (the CHECK proves the bound, so ATTACH does not scan) and drop the CHECK. Every lock wait
//! is bounded by `lock_timeout` (the load's lock wait, 10 s unless the user sets it); a switch
//! that times out is retried a few times with backoff, under a savepoint. While the publish
//! waits for its ACCESS EXCLUSIVE lock, the server queues every later query on the table
//! behind it: the bound is also how long the table's readers may be held up at a time. Rows
//! of the staged tables that could not be staged are loaded in the same transaction after
//! the switch, so that all of a staged table's rows appear at once.
//!
//! A load holds a session advisory lock on its id for its whole life; a staging table whose
//! load no longer holds that lock was left by a load that stopped before its publish. When the
//! load kept a ledger, the staging table's comment says, in the transaction that committed it,
//! which job it belongs to and which chunks of the job's files it holds ([`StagedMeta`]): the
//! next run of that job publishes it as it is, with those chunks' ledger rows, instead of
//! loading them again (exactly once: the table and its record are one, and the publish moves
//! the table out of [`SCHEMA`] in the transaction that writes the ledger rows). Other loads
//! leave it alone while its job can be resumed; otherwise the next load drops it.

use crate::catalog::quote_ident;
use crate::ledger::{standing, LedgerError, Standing};
use crate::onetrip::OneTrip;
use sluice_core::destination::{KeyBound, KeyPartition, Partitioning, PublishTimes};
use sluice_core::ledger::ChunkRecord;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// sluice's own schema for staging tables.
pub const SCHEMA: &str = "sluice_stage";
/// The name of the CHECK that carries a partition's bound on its staging table.
pub const BOUND_CHECK: &str = "sluice_partition_bound";
/// The first key of the advisory locks that mark a running load ("sluc").
const LOCK_CLASS: i32 = 0x736c_7563;
/// How long the publish waits for a lock before it gives way and tries again, and the
/// statistics step before it gives up, unless the load says otherwise.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);
pub const PUBLISH_ATTEMPTS: u32 = 5;

/// `SET LOCAL lock_timeout` to `wait`, in the server's unit (a zero would wait forever).
fn lock_timeout_for(wait: Duration) -> String {
    format!("SET LOCAL lock_timeout = '{}ms'", wait.as_millis().max(1))
}
const PUBLISH_SAVEPOINT: &str = "sluice_publish";

/// One partition, with what the staging table and the publish need.
#[derive(Clone, Debug)]
pub struct PartitionDetail {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// `FOR VALUES FROM (...) TO (...)` (or `IN (...)`, `WITH (...)`), as the catalog prints
    /// it.
    pub bound: String,
    /// The partition constraint, as an expression over the parent's columns.
    pub constraint: String,
    pub range: KeyPartition,
}

impl PartitionDetail {
    pub fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

/// A table's partitioning with its details.
#[derive(Clone, Debug)]
pub struct TablePartitions {
    pub partitioning: Partitioning,
    pub details: Vec<PartitionDetail>,
}

/// A staging table that finished and waits for the publish.
#[derive(Clone, Debug)]
pub struct Staged {
    /// The parent, quoted.
    pub parent: String,
    /// The parent's columns, quoted, for appending instead of switching.
    pub columns: Vec<String>,
    pub partition: PartitionDetail,
    /// The staging table's name in [`SCHEMA`].
    pub staging: String,
    /// Whether it has its statistics (an earlier run's may have been committed without).
    pub analyzed: bool,
}

/// What a staging table's comment records, on its last line, for a later run of its job:
/// `sluice-stage 1 job=7 since=1795000000123456 parent=16384 partition=16390
/// chunks=0:0-1048576:12345,0:1048576-:9 bound=FOR VALUES FROM (1) TO (1000)` (a chunk is
/// `file:start-end:rows`, with no end for one that runs to the end of its file). The job's
/// start (microseconds since the epoch, from the ledger) tells this job 7 from another of the
/// same number in a ledger dropped and made again; oids and the bound tie it to the partition
/// it was made for: a partition dropped and created again, or attached with other bounds,
/// does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedMeta {
    pub job: i64,
    pub since: i64,
    pub parent: u32,
    pub partition: u32,
    pub bound: String,
    pub chunks: Vec<ChunkRecord>,
}

const META_TAG: &str = "sluice-stage 1";

impl StagedMeta {
    fn line(&self) -> String {
        let chunks: Vec<String> = self
            .chunks
            .iter()
            .map(|c| {
                let end = c.end.map(|e| e.to_string()).unwrap_or_default();
                format!("{}:{}-{end}:{}", c.file, c.start, c.rows)
            })
            .collect();
        format!(
            "{META_TAG} job={} since={} parent={} partition={} chunks={} bound={}",
            self.job,
            self.since,
            self.parent,
            self.partition,
            chunks.join(","),
            self.bound
        )
    }

    /// Reads a staging table's comment; `None` for one with no record (made by a load
    /// without a ledger, or by an older sluice).
    pub fn parse(comment: &str) -> Option<StagedMeta> {
        let line = comment.lines().last()?.strip_prefix(META_TAG)?.trim_start();
        let (fields, bound) = line.split_once(" bound=")?;
        let mut meta = StagedMeta {
            job: 0,
            since: 0,
            parent: 0,
            partition: 0,
            bound: bound.to_string(),
            chunks: Vec::new(),
        };
        let mut seen = 0;
        for field in fields.split(' ') {
            let (key, value) = field.split_once('=')?;
            match key {
                "job" => meta.job = value.parse().ok()?,
                "since" => meta.since = value.parse().ok()?,
                "parent" => meta.parent = value.parse().ok()?,
                "partition" => meta.partition = value.parse().ok()?,
                "chunks" => {
                    for c in value.split(',').filter(|c| !c.is_empty()) {
                        let (file, rest) = c.split_once(':')?;
                        let (range, rows) = rest.split_once(':')?;
                        let (start, end) = range.split_once('-')?;
                        meta.chunks.push(ChunkRecord {
                            file: file.parse().ok()?,
                            start: start.parse().ok()?,
                            end: match end {
                                "" => None,
                                e => Some(e.parse().ok()?),
                            },
                            rows: rows.parse().ok()?,
                        });
                    }
                }
                _ => return None,
            }
            seen += 1;
        }
        (seen == 5).then_some(meta)
    }
}

/// The staging table name for load `load_id`'s `seq`th staging table.
pub fn staging_name(load_id: u32, seq: u32) -> String {
    format!("l{load_id:08x}_{seq}")
}

/// The load id a staging table name carries.
fn load_id_of(name: &str) -> Option<u32> {
    let hex = name.strip_prefix('l')?.split('_').next()?;
    u32::from_str_radix(hex, 16).ok()
}

fn staging_qualified(staging: &str) -> String {
    format!("{}.{}", quote_ident(SCHEMA), quote_ident(staging))
}

/// Parses one side of a range bound as the catalog prints it: `MINVALUE`, `MAXVALUE`, `5`
/// or `'5'`. `None` for a value that is not an integer.
fn bound_value(s: &str) -> Option<Option<i64>> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("minvalue") || s.eq_ignore_ascii_case("maxvalue") {
        return Some(None);
    }
    let s = s.trim_matches('\'');
    s.parse::<i64>().ok().map(Some)
}

/// `FOR VALUES FROM (a) TO (b)` to `(a, b)`.
fn parse_range_bound(bound: &str) -> Option<(Option<i64>, Option<i64>)> {
    let rest = bound.strip_prefix("FOR VALUES FROM (")?;
    let (lower, rest) = rest.split_once(") TO (")?;
    let upper = rest.strip_suffix(')')?;
    Some((bound_value(lower)?, bound_value(upper)?))
}

/// A partition's bound as the catalog prints it: a range, `FOR VALUES IN (1, 2, NULL)`, or
/// `FOR VALUES WITH (modulus 4, remainder 1)`.
fn parse_bound(bound: &str) -> Option<KeyBound> {
    if let Some((lower, upper)) = parse_range_bound(bound) {
        return Some(KeyBound::Range { lower, upper });
    }
    if let Some(list) = bound
        .strip_prefix("FOR VALUES IN (")
        .and_then(|r| r.strip_suffix(')'))
    {
        let mut values = Vec::new();
        let mut null = false;
        for v in list.split(',') {
            match v.trim() {
                v if v.eq_ignore_ascii_case("null") => null = true,
                v => values.push(v.trim_matches('\'').parse::<i64>().ok()?),
            }
        }
        return Some(KeyBound::List { values, null });
    }
    let hash = bound
        .strip_prefix("FOR VALUES WITH (modulus ")?
        .strip_suffix(')')?;
    let (modulus, remainder) = hash.split_once(", remainder ")?;
    Some(KeyBound::Hash {
        modulus: modulus.trim().parse().ok()?,
        remainder: remainder.trim().parse().ok()?,
        function: crate::hash::PARTITION_HASH,
    })
}

/// Describes how `parent` (quoted) is partitioned, and what would keep a staging table from
/// standing in for one of its partitions.
pub async fn describe_partitions(
    client: &Client,
    parent: &str,
) -> Result<TablePartitions, tokio_postgres::Error> {
    let unroutable = |why: String| TablePartitions {
        partitioning: Partitioning::Unroutable(why),
        details: Vec::new(),
    };
    let key = client
        .fetch_opt(
            "SELECT p.partstrat::text, p.partnatts::int, \
                    (SELECT a.attname::text FROM pg_attribute a \
                     WHERE a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]), \
                    (SELECT t.typname::text FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                     WHERE a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]), \
                    (SELECT o.opcdefault FROM pg_opclass o WHERE o.oid = p.partclass[0]) \
             FROM pg_partitioned_table p WHERE p.partrelid = $1::text::regclass",
            &[&parent],
        )
        .await?;
    let Some(key) = key else {
        return Ok(TablePartitions {
            partitioning: Partitioning::None,
            details: Vec::new(),
        });
    };
    let (strategy, natts): (String, i32) = (key.get(0), key.get(1));
    let column: Option<String> = key.get(2);
    let typname: Option<String> = key.get(3);
    // Another operator class orders or hashes the keys its own way, which sluice does not
    // know.
    if key.get::<_, Option<bool>>(4) == Some(false) {
        return Ok(unroutable(
            "its partition key has an operator class other than its type's default".into(),
        ));
    }
    match (strategy.as_str(), natts, &column, typname.as_deref()) {
        ("r" | "l" | "h", 1, Some(_), Some("int2" | "int4" | "int8")) => {}
        (_, 1, None, _) => return Ok(unroutable("its partition key is an expression".into())),
        (_, 1, _, Some(t)) => {
            return Ok(unroutable(format!(
                "its partition key is of type {t}; sluice routes integer keys"
            )))
        }
        _ => return Ok(unroutable("its partition key has several columns".into())),
    }
    let column = column.unwrap_or_default();
    // Rows attached by a switch fire no triggers, and ATTACH validates foreign keys with an
    // error that names the staging table.
    let guards = client
        .fetch_one(
            "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::text::regclass \
                     AND NOT tgisinternal AND (tgtype & 1) = 1), \
                    (SELECT count(*) FROM pg_constraint WHERE conrelid = $1::text::regclass \
                     AND contype = 'f'), \
                    (SELECT count(*) FROM pg_attribute WHERE attrelid = $1::text::regclass \
                     AND attnum > 0 AND NOT attisdropped AND attidentity <> ''), \
                    (SELECT pg_has_role(relowner, 'USAGE') FROM pg_class \
                     WHERE oid = $1::text::regclass)",
            &[&parent],
        )
        .await?;
    let (triggers, fkeys, identity, owner): (i64, i64, i64, bool) =
        (guards.get(0), guards.get(1), guards.get(2), guards.get(3));
    // DETACH and ATTACH need the parent's ownership; a role that may only insert loads
    // directly, as it always could.
    if !owner {
        return Ok(unroutable(
            "the loading role does not own it (switching partitions needs ownership)".into(),
        ));
    }
    if triggers > 0 {
        return Ok(unroutable(
            "it has row triggers, which do not fire for rows switched in".into(),
        ));
    }
    if fkeys > 0 {
        return Ok(unroutable("it has foreign keys".into()));
    }
    if identity > 0 {
        return Ok(unroutable("it has an identity column".into()));
    }
    let rows = client
        .fetch(
            "SELECT n.nspname::text, c.relname::text, c.relkind::text, \
                    pg_get_expr(c.relpartbound, c.oid), \
                    coalesce(pg_get_partition_constraintdef(c.oid), ''), \
                    pg_has_role(c.relowner, 'USAGE'), \
                    has_schema_privilege(n.oid, 'CREATE'), c.oid \
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE i.inhparent = $1::text::regclass ORDER BY c.oid",
            &[&parent],
        )
        .await?;
    let mut details = Vec::new();
    let mut default = false;
    for r in rows {
        let (schema, name, kind, bound): (String, String, String, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        if bound == "DEFAULT" {
            default = true;
            continue;
        }
        let Some(key_bound) = parse_bound(&bound) else {
            return Ok(unroutable(format!(
                "sluice cannot read the bound `{bound}`"
            )));
        };
        let qualified = format!("{}.{}", quote_ident(&schema), quote_ident(&name));
        let (owned, can_create): (bool, bool) = (r.get(5), r.get(6));
        let obstacle = match kind.as_str() {
            "p" => Some(format!("partition {qualified} is itself partitioned")),
            "f" => Some(format!("partition {qualified} is a foreign table")),
            _ if !owned => Some(format!(
                "the loading role does not own partition {qualified} (replacing it needs \
                 ownership)"
            )),
            _ if !can_create => Some(format!(
                "the loading role may not create tables in {qualified}'s schema"
            )),
            _ => {
                let has_rows: bool = client
                    .fetch_one(
                        &format!("SELECT EXISTS (SELECT 1 FROM ONLY {qualified})"),
                        &[],
                    )
                    .await?
                    .get(0);
                has_rows.then(|| format!("partition {qualified} is not empty"))
            }
        };
        details.push(PartitionDetail {
            oid: r.get(7),
            constraint: r.get(4),
            range: KeyPartition {
                name: qualified,
                bound: key_bound,
                obstacle,
            },
            schema,
            name,
            bound,
        });
    }
    Ok(TablePartitions {
        partitioning: Partitioning::IntegerKey {
            column,
            partitions: details.iter().map(|d| d.range.clone()).collect(),
            default,
        },
        details,
    })
}

/// Why the staging area cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("{}", crate::connect::chain(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("the loading role may not create tables in schema {SCHEMA} (GRANT CREATE ON SCHEMA {SCHEMA})")]
    NoPrivilege,
}

/// What [`prepare`] found.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Dropped: of loads that no longer run, with no job that can resume them.
    pub dropped: Vec<String>,
    /// Left for a job that can still be resumed (another job than this load's).
    pub waiting: Vec<String>,
    /// This load's job's, left by an earlier run: by name, with what they hold.
    pub candidates: Vec<(String, StagedMeta)>,
}

/// Readies the staging schema, marks this load as running (a session advisory lock on
/// `load_id`, held by `client` until it closes) and sorts the staging tables of loads that no
/// longer run: those of `job` are candidates for reuse, those of another job that can still be
/// resumed wait for it, and the others are dropped.
pub async fn prepare(
    client: &Client,
    load_id: u32,
    job: Option<i64>,
) -> Result<Prepared, PrepareError> {
    // A DBA may create the schema and grant CREATE on it to a role that may not create
    // schemas: use it as it is when it exists.
    let exists: bool = client
        .fetch_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&SCHEMA],
        )
        .await?
        .get(0);
    if !exists {
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                quote_ident(SCHEMA)
            ))
            .await?;
    }
    let may_create: bool = client
        .fetch_one("SELECT has_schema_privilege($1, 'CREATE')", &[&SCHEMA])
        .await?
        .get(0);
    if !may_create {
        return Err(PrepareError::NoPrivilege);
    }
    client
        .run(
            "SELECT pg_advisory_lock($1, $2)",
            &[&LOCK_CLASS, &(load_id as i32)],
        )
        .await?;
    let tables = staging_tables(client).await?;
    let mut found = Prepared::default();
    let mut checked: Vec<(u32, bool)> = Vec::new();
    let mut jobs: Vec<(i64, Standing)> = Vec::new();
    for (name, comment) in tables {
        let Some(id) = load_id_of(&name) else {
            continue;
        };
        if id == load_id {
            continue;
        }
        let gone = match checked.iter().find(|(i, _)| *i == id) {
            Some((_, g)) => *g,
            None => {
                let got: bool = client
                    .fetch_one(
                        "SELECT pg_try_advisory_lock($1, $2)",
                        &[&LOCK_CLASS, &(id as i32)],
                    )
                    .await?
                    .get(0);
                if got {
                    client
                        .run(
                            "SELECT pg_advisory_unlock($1, $2)",
                            &[&LOCK_CLASS, &(id as i32)],
                        )
                        .await?;
                }
                checked.push((id, got));
                got
            }
        };
        if !gone {
            continue;
        }
        let first = comment.lines().next().unwrap_or_default().to_string();
        if let Some(meta) = StagedMeta::parse(&comment) {
            let status = match jobs.iter().find(|(j, _)| *j == meta.job) {
                Some((_, s)) => *s,
                None => {
                    let s = standing(client, meta.job).await?;
                    jobs.push((meta.job, s));
                    s
                }
            };
            // The job's start tells it from a job of the same number in a ledger that was
            // dropped and made again.
            match status {
                Standing::Known { since, .. } if since == meta.since && Some(meta.job) == job => {
                    found.candidates.push((name, meta));
                    continue;
                }
                // A job that can still be resumed publishes it; when the ledger cannot be
                // read, nothing that such a job may count on is dropped either.
                Standing::Known {
                    since,
                    resumable: true,
                } if since == meta.since => {
                    found.waiting.push(format!("{SCHEMA}.{name} ({first})"));
                    continue;
                }
                Standing::Unreadable => {
                    found.waiting.push(format!("{SCHEMA}.{name} ({first})"));
                    continue;
                }
                _ => {}
            }
        }
        drop_named(client, std::slice::from_ref(&name)).await?;
        found.dropped.push(format!("{SCHEMA}.{name} ({first})"));
    }
    Ok(found)
}

/// The records of every staging table that belongs to a job, whichever load made it (a
/// running load's finished ones included).
pub async fn waiting(client: &Client) -> Result<Vec<StagedMeta>, tokio_postgres::Error> {
    Ok(staging_tables(client)
        .await?
        .iter()
        .filter_map(|(_, comment)| StagedMeta::parse(comment))
        .collect())
}

/// Job `job`'s staging tables (the job started at `since`), whichever worker or run of it
/// committed them, each as the job's publish ([`switch_in`]) takes it, with its record. Read
/// from the catalog rather than from this load's tables: the worker that publishes a job of
/// several may load none of another worker's tables itself. A staging table whose partition
/// is gone, or was attached again with other bounds, is refused: the chunks it holds are
/// claimed, and would be lost.
pub async fn of_job(
    client: &Client,
    job: i64,
    since: i64,
) -> Result<Vec<(Staged, StagedMeta)>, LedgerError> {
    let mut out = Vec::new();
    for (name, meta) in job_tables(client, job, since).await? {
        match fits_partition(client, &name, &meta).await? {
            Some(staged) => out.push((staged, meta)),
            None => {
                return Err(LedgerError::Refused(format!(
                    "staging table {SCHEMA}.{name} of job {job} no longer fits its partition \
                     (dropped, or attached again with other bounds)"
                )))
            }
        }
    }
    Ok(out)
}

/// Job `job`'s staging tables (the job started at `since`), by name, with their records.
async fn job_tables(
    client: &Client,
    job: i64,
    since: i64,
) -> Result<Vec<(String, StagedMeta)>, tokio_postgres::Error> {
    Ok(staging_tables(client)
        .await?
        .into_iter()
        .filter_map(|(name, comment)| Some((name, StagedMeta::parse(&comment)?)))
        .filter(|(_, m)| m.job == job && m.since == since)
        .collect())
}

/// Staging table `name` as the publish takes it, when the partition its record names is still
/// the parent's, with the same bounds.
async fn fits_partition(
    client: &Client,
    name: &str,
    meta: &StagedMeta,
) -> Result<Option<Staged>, tokio_postgres::Error> {
    let row = client
        .fetch_opt(
            "SELECT quote_ident(pn.nspname::text) || '.' || quote_ident(p.relname::text), \
                    ARRAY(SELECT quote_ident(a.attname::text) FROM pg_attribute a \
                          WHERE a.attrelid = p.oid AND a.attnum > 0 AND NOT a.attisdropped \
                          ORDER BY a.attnum), \
                    n.nspname::text, c.relname::text, pg_get_expr(c.relpartbound, c.oid), \
                    EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = $3 AND tablename = $4) \
             FROM pg_class p JOIN pg_namespace pn ON pn.oid = p.relnamespace, \
                  pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE p.oid = $1 AND c.oid = $2 AND EXISTS (SELECT 1 FROM pg_inherits i \
                   WHERE i.inhrelid = c.oid AND i.inhparent = p.oid)",
            &[&meta.parent, &meta.partition, &SCHEMA, &name],
        )
        .await?;
    Ok(row.and_then(|r| {
        let bound: String = r.get(4);
        let range = parse_bound(&bound).filter(|_| bound == meta.bound)?;
        let (schema, partition): (String, String) = (r.get(2), r.get(3));
        let qualified = format!("{}.{}", quote_ident(&schema), quote_ident(&partition));
        Some(Staged {
            parent: r.get(0),
            columns: r.get(1),
            partition: PartitionDetail {
                oid: meta.partition,
                schema,
                name: partition,
                bound,
                constraint: String::new(),
                range: KeyPartition {
                    name: qualified,
                    bound: range,
                    obstacle: None,
                },
            },
            staging: name.to_string(),
            analyzed: r.get(5),
        })
    }))
}

/// Drops job `job`'s staging tables (the job started at `since`) and gives the claims of the
/// chunks they hold back, in the caller's transaction (two statements, whatever their
/// number): the job failed, and loads them again when it runs again.
pub async fn drop_job(client: &Client, job: i64, since: i64) -> Result<(), tokio_postgres::Error> {
    let tables = job_tables(client, job, since).await?;
    if tables.is_empty() {
        return Ok(());
    }
    let chunks = tables.iter().flat_map(|(_, m)| &m.chunks);
    let files: Vec<i32> = chunks.clone().map(|c| c.file as i32).collect();
    let starts: Vec<i64> = chunks.map(|c| c.start as i64).collect();
    client
        .run(
            "UPDATE sluice_ledger.job_claims c SET worker = NULL \
             FROM unnest($2::int[], $3::bigint[]) AS w(file, start_byte) \
             WHERE c.job = $1 AND c.file = w.file AND c.start_byte = w.start_byte",
            &[&job, &files, &starts],
        )
        .await?;
    let names: Vec<String> = tables.iter().map(|(n, _)| staging_qualified(n)).collect();
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS {}", names.join(", ")))
        .await
}

/// The parents of published staging tables, each once.
pub fn parents_of(staged: &[Staged]) -> Vec<String> {
    let mut parents: Vec<String> = staged.iter().map(|s| s.parent.clone()).collect();
    parents.sort_unstable();
    parents.dedup();
    parents
}

/// The partitions switched in with the statistics their staging tables had (an appended
/// one lost them with its staging table, and is analyzed with its parent).
pub fn kept_statistics(staged: &[Staged], appended: &[String]) -> Vec<String> {
    staged
        .iter()
        .filter(|s| s.analyzed)
        .map(|s| s.partition.qualified())
        .filter(|p| !appended.contains(p))
        .collect()
}

/// The tables in [`SCHEMA`], by name, each with its comment.
async fn staging_tables(client: &Client) -> Result<Vec<(String, String)>, tokio_postgres::Error> {
    let rows = client
        .fetch(
            "SELECT c.relname::text, coalesce(obj_description(c.oid, 'pg_class'), '') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname",
            &[&SCHEMA],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Whether staging table `staging` (an earlier run's) can still stand in for a partition of
/// `parent` (quoted) as the parent is now: the same columns (names, types, NOT NULL), the
/// same CHECK constraints and as many indexes, or ATTACH would refuse it or build on it. And
/// whether it has its statistics (a run killed between its commit and its ANALYZE left none).
pub async fn still_fits(
    client: &Client,
    staging: &str,
    parent: &str,
) -> Result<(bool, bool), tokio_postgres::Error> {
    let shape = |rel: &str| {
        format!(
            "(SELECT string_agg(quote_ident(attname::text) || ' ' || \
                     format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' \
                     ELSE '' END, ', ' ORDER BY attname) \
              FROM pg_attribute WHERE attrelid = {rel} AND attnum > 0 AND NOT attisdropped) || \
             ' / ' || coalesce((SELECT string_agg(pg_get_constraintdef(oid), ', ' \
                                ORDER BY pg_get_constraintdef(oid)) \
              FROM pg_constraint WHERE conrelid = {rel} AND contype = 'c' \
                   AND conname <> '{BOUND_CHECK}'), '') || \
             ' / ' || (SELECT count(*) FROM pg_index WHERE indrelid = {rel})"
        )
    };
    let row = client
        .fetch_one(
            &format!(
                "SELECT {} = {}, EXISTS (SELECT 1 FROM pg_stats \
                                         WHERE schemaname = $3 AND tablename = $4)",
                shape("$1::text::regclass"),
                shape("$2::text::regclass")
            ),
            &[&staging_qualified(staging), &parent, &SCHEMA, &staging],
        )
        .await?;
    Ok((row.get::<_, Option<bool>>(0).unwrap_or(false), row.get(1)))
}

/// Records on the staging table, in the caller's transaction, that it holds `meta`'s chunks
/// (with the job's start, read from the ledger; a job the ledger no longer has gets no record,
/// so no run can publish the table).
pub async fn mark(
    client: &Client,
    staging: &str,
    partition: &PartitionDetail,
    meta: &StagedMeta,
) -> Result<(), tokio_postgres::Error> {
    let Standing::Known { since, .. } = standing(client, meta.job).await? else {
        return Ok(());
    };
    let meta = &StagedMeta {
        since,
        ..meta.clone()
    };
    let comment = format!(
        "{}\n{}",
        first_comment_line(partition, meta.job),
        meta.line()
    );
    client
        .batch_execute(&format!(
            "COMMENT ON TABLE {} IS {}",
            staging_qualified(staging),
            quote_literal(&comment)
        ))
        .await
}

/// What a staging table's comment says first, for a DBA who finds it.
fn first_comment_line(partition: &PartitionDetail, job: i64) -> String {
    let job = match job {
        0 => String::new(),
        j => format!(", of job {j} (`sluice jobs`)"),
    };
    format!(
        "sluice staging table for partition {}{job}, not yet published",
        partition.qualified()
    )
}

/// Drops the staging tables named (a dead load's, an earlier run's that this load does not
/// reuse, or this load's when it fails for good).
pub async fn drop_named(client: &Client, names: &[String]) -> Result<(), tokio_postgres::Error> {
    for name in names {
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {}", staging_qualified(name)))
            .await?;
    }
    Ok(())
}

/// Creates the staging table for `partition` of `parent`, in the caller's transaction.
pub async fn create_staging(
    client: &Client,
    parent: &str,
    partition: &PartitionDetail,
    staging: &str,
) -> Result<(), tokio_postgres::Error> {
    let table = staging_qualified(staging);
    let comment = first_comment_line(partition, 0);
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS \
               INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION); \
             ALTER TABLE {table} ADD CONSTRAINT {} CHECK ({}); \
             COMMENT ON TABLE {table} IS {}",
            quote_ident(BOUND_CHECK),
            partition.constraint,
            quote_literal(&comment),
        ))
        .await
}

/// `'it''s'`.
pub(crate) fn quote_literal(s: &str) -> String {
    // As the server's own quote_literal(): a backslash makes it an escape string, which
    // reads the same whatever the session's standard_conforming_strings.
    match s.contains('\\') {
        true => format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''")),
        false => format!("'{}'", s.replace('\'', "''")),
    }
}

/// Builds `parent`'s indexes on the staging table: primary keys and unique constraints as
/// constraints (which ATTACH adopts), other indexes as they are defined on the parent.
pub async fn build_indexes(
    client: &Client,
    parent: &str,
    staging: &str,
    serial: bool,
) -> Result<(), tokio_postgres::Error> {
    let table = staging_qualified(staging);
    let rows = client
        .fetch(
            "SELECT pg_get_indexdef(i.indexrelid), coalesce(con.contype::text, ''), \
                    array(SELECT quote_ident(a.attname::text) \
                          FROM unnest(i.indkey[0:i.indnkeyatts - 1]) WITH ORDINALITY k(n, o) \
                          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n \
                          ORDER BY k.o), \
                    quote_ident(n.nspname::text) || '.' || quote_ident(c.relname::text) \
             FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid \
                  AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u') \
             WHERE i.indrelid = $1::text::regclass ORDER BY con.contype NULLS LAST, i.indexrelid",
            &[&parent],
        )
        .await?;
    if serial && !rows.is_empty() {
        // The streams are the builds' parallelism: parallel workers on top of them compete
        // for the same cores and write their sorted runs to temporary files (two concurrent
        // lineitem partition keys at SF1 here: 0.55 s serial, 0.69 s with 2 workers each).
        // Unless the session chose its own value (PGOPTIONS, ALTER ROLE or DATABASE SET).
        client
            .batch_execute(
                "SELECT set_config('max_parallel_maintenance_workers', '0', true) \
                 FROM pg_settings WHERE name = 'max_parallel_maintenance_workers' \
                 AND source IN ('default', 'configuration file')",
            )
            .await?;
    }
    for r in rows {
        let (def, contype, columns, printed): (String, String, Vec<String>, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let sql = match contype.as_str() {
            "p" => format!(
                "ALTER TABLE {table} ADD PRIMARY KEY ({})",
                columns.join(", ")
            ),
            "u" => format!("ALTER TABLE {table} ADD UNIQUE ({})", columns.join(", ")),
            _ => {
                // `CREATE [UNIQUE] INDEX name ON [ONLY] schema.parent USING ...`
                let unique = def.starts_with("CREATE UNIQUE INDEX");
                let tail = [
                    format!(" ON ONLY {printed} USING "),
                    format!(" ON {printed} USING "),
                ]
                .iter()
                .find_map(|m| def.find(m.as_str()).map(|i| &def[i + m.len()..]))
                .map(str::to_string);
                let Some(tail) = tail else {
                    continue;
                };
                format!(
                    "CREATE {}INDEX ON {table} USING {tail}",
                    if unique { "UNIQUE " } else { "" }
                )
            }
        };
        client.batch_execute(&sql).await?;
    }
    Ok(())
}

/// Gathers the staging table's statistics, after its commit (so that the server has counted
/// its rows by then, and autovacuum finds nothing changed since).
pub async fn analyze(client: &Client, staging: &str) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!("ANALYZE {}", staging_qualified(staging)))
        .await
}

/// Why a publish failed.
#[derive(Debug)]
pub enum PublishError {
    Db(tokio_postgres::Error),
    /// Lock waits timed out on every attempt; who held the lock.
    Locked(String),
}

impl From<tokio_postgres::Error> for PublishError {
    fn from(e: tokio_postgres::Error) -> PublishError {
        PublishError::Db(e)
    }
}

/// One attempt: the whole switch in one transaction. Returns the partitions that had rows
/// by then (from this load's direct fallbacks, or from another session): those get the
/// staging table's rows appended instead, so that no row is lost.
async fn publish_once(
    client: &Client,
    staged: &[Staged],
    lock_wait: Duration,
) -> Result<Vec<String>, PublishError> {
    client
        .batch_execute(&format!(
            "SAVEPOINT {PUBLISH_SAVEPOINT}; {}",
            lock_timeout_for(lock_wait)
        ))
        .await?;
    let mut parents: Vec<&str> = staged.iter().map(|s| s.parent.as_str()).collect();
    parents.sort_unstable();
    parents.dedup();
    // DETACH takes this lock anyway; taking it first makes the emptiness check below exact.
    client
        .batch_execute(&format!(
            "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            parents.join(", ")
        ))
        .await?;
    let mut appended = Vec::new();
    for s in staged {
        let p = &s.partition;
        let old = p.qualified();
        let staging = staging_qualified(&s.staging);
        let has_rows: bool = client
            .fetch_one(&format!("SELECT EXISTS (SELECT 1 FROM ONLY {old})"), &[])
            .await?
            .get(0);
        if has_rows {
            let cols = s.columns.join(", ");
            client
                .batch_execute(&format!(
                    "INSERT INTO {old} ({cols}) SELECT {cols} FROM {staging}; DROP TABLE {staging}"
                ))
                .await?;
            appended.push(old);
            continue;
        }
        // The old partition's index names, by the parent index each is attached to, so that
        // the switched-in table's indexes get them.
        let names = client
            .fetch(
                "SELECT h.inhparent, c.relname::text FROM pg_index x \
                 JOIN pg_inherits h ON h.inhrelid = x.indexrelid \
                 JOIN pg_class c ON c.oid = x.indexrelid \
                 WHERE x.indrelid = $1::text::regclass",
                &[&old],
            )
            .await?;
        client
            .batch_execute(&format!("ALTER TABLE {} DETACH PARTITION {old}", s.parent))
            .await?;
        client
            .batch_execute(&format!(
                "DROP TABLE {old}; \
                 ALTER TABLE {staging} SET SCHEMA {schema}; \
                 ALTER TABLE {schema}.{moved} RENAME TO {name}; \
                 ALTER TABLE {parent} ATTACH PARTITION {old} {bound}; \
                 ALTER TABLE {old} DROP CONSTRAINT {check}; \
                 COMMENT ON TABLE {old} IS NULL",
                schema = quote_ident(&p.schema),
                moved = quote_ident(&s.staging),
                name = quote_ident(&p.name),
                parent = s.parent,
                bound = p.bound,
                check = quote_ident(BOUND_CHECK),
            ))
            .await?;
        for r in names {
            let (parent_index, name): (u32, String) = (r.get(0), r.get(1));
            let new = client
                .fetch_opt(
                    "SELECT c.relname::text FROM pg_index x \
                     JOIN pg_inherits h ON h.inhrelid = x.indexrelid \
                     JOIN pg_class c ON c.oid = x.indexrelid \
                     WHERE x.indrelid = $1::text::regclass AND h.inhparent = $2",
                    &[&old, &parent_index],
                )
                .await?;
            if let Some(new) = new {
                let new: String = new.get(0);
                if new != name {
                    client
                        .batch_execute(&format!(
                            "ALTER INDEX {}.{} RENAME TO {}",
                            quote_ident(&p.schema),
                            quote_ident(&new),
                            quote_ident(&name)
                        ))
                        .await?;
                }
            }
        }
    }
    client
        .batch_execute(&format!(
            "RELEASE SAVEPOINT {PUBLISH_SAVEPOINT}; SET LOCAL lock_timeout = 0"
        ))
        .await?;
    Ok(appended)
}

/// Switches every staging table in, inside the caller's transaction on `client` (under a
/// savepoint, so that a lock wait that times out is retried without losing the rest of the
/// transaction). Each attempt waits at most `lock_wait` for its locks. The caller commits.
pub async fn switch_in(
    client: &Client,
    staged: &[Staged],
    lock_wait: Duration,
) -> Result<PublishTimes, PublishError> {
    let mut times = PublishTimes::default();
    if staged.is_empty() {
        return Ok(times);
    }
    let started = Instant::now();
    loop {
        times.attempts += 1;
        match publish_once(client, staged, lock_wait).await {
            Ok(appended) => {
                times.appended = appended;
                break;
            }
            Err(e) => {
                let _ = client
                    .batch_execute(&format!("ROLLBACK TO SAVEPOINT {PUBLISH_SAVEPOINT}"))
                    .await;
                let lock_timeout = matches!(&e, PublishError::Db(d)
                    if d.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE));
                if !lock_timeout {
                    return Err(e);
                }
                if times.attempts >= PUBLISH_ATTEMPTS {
                    let who = blockers(client, &staged[0].parent).await;
                    return Err(PublishError::Locked(who));
                }
                // A tenth of the lock wait, doubling: with the default 10 s, 1, 2, 4, 8 s.
                tokio::time::sleep(lock_wait * (1 << (times.attempts - 1)) / 10).await;
            }
        }
    }
    times.publish = started.elapsed();
    Ok(times)
}

/// Gathers the parents' statistics, `parallel` at a time, each on a connection of its own.
///
/// The streams analyzed each staging table as they built it, in parallel and while other
/// streams were still loading, so the partitions in `analyzed` have their statistics already.
/// What is left is each parent's own, inheritance-wide sample. `ANALYZE parent` would analyze
/// every partition again, and before PostgreSQL 17 (`ANALYZE ONLY`) there is no asking for the
/// parent alone: at SF1 that doubled the step (lineitem: 1.46 s against 0.28 s). So a helper
/// session holds SHARE UPDATE EXCLUSIVE on the analyzed partitions meanwhile, and `ANALYZE
/// (SKIP_LOCKED) parent` passes over them without a word while still reading them for the
/// parent's sample (that takes ACCESS SHARE, which the helper's lock allows). Readers and
/// writers of the partitions are not held up; only VACUUM, ANALYZE and DDL on them wait. The
/// same works on every version, so there is one path. If the helper cannot take its locks
/// within a second, the parents are analyzed whole, as before.
///
/// Each parent is locked first in its own transaction, so that SKIP_LOCKED cannot skip the
/// parent itself. Every lock wait of that transaction is bounded by `lock_wait`: the parent's
/// sample still takes ACCESS SHARE on every partition unconditionally, which a session
/// holding ACCESS EXCLUSIVE on one (an open `TRUNCATE`, an `ALTER TABLE`) would otherwise
/// make wait for as long as it pleases. Past the bound the step gives up (with a warning: the
/// data is published either way).
pub async fn analyze_parents(
    info: &crate::conninfo::ConnInfo,
    parents: &[String],
    analyzed: &[String],
    parallel: usize,
    lock_wait: Duration,
) -> Result<(), String> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    let helper = if analyzed.is_empty() {
        None
    } else {
        hold_analyzed(info, analyzed).await
    };
    let result = stream::iter(parents.iter().map(|p| async move {
        let client = crate::connect::connect(info)
            .await
            .map_err(|e| e.to_string())?;
        client
            .batch_execute(&format!(
                "BEGIN; {}; \
                 LOCK TABLE ONLY {p} IN SHARE UPDATE EXCLUSIVE MODE; \
                 ANALYZE (SKIP_LOCKED) {p}; COMMIT",
                lock_timeout_for(lock_wait)
            ))
            .await
            .map_err(|e| format!("ANALYZE {p}: {}", crate::connect::chain(&e)))
    }))
    .buffer_unordered(parallel.max(1))
    .try_collect::<Vec<()>>()
    .await;
    if let Some(helper) = helper {
        // Ending the session releases its locks whatever state it is in.
        let _ = helper.batch_execute("ROLLBACK").await;
    }
    result.map(|_| ())
}

/// The helper session of [`analyze_parents`], holding SHARE UPDATE EXCLUSIVE on `partitions`
/// in an open transaction; `None` when it cannot (the parents are then analyzed whole).
async fn hold_analyzed(info: &crate::conninfo::ConnInfo, partitions: &[String]) -> Option<Client> {
    let client = crate::connect::connect(info).await.ok()?;
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL lock_timeout = '1s'; \
             LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE",
            partitions.join(", ")
        ))
        .await
        .ok()?;
    Some(client)
}

/// The sessions holding locks on `table`, for a message.
async fn blockers(client: &Client, table: &str) -> String {
    let rows = client
        .fetch(
            "SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), \
                    coalesce(left(a.query, 60), '') \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.relation = $1::text::regclass AND a.pid <> pg_backend_pid() \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY a.pid",
            &[&table],
        )
        .await
        .unwrap_or_default();
    let who: Vec<String> = rows
        .iter()
        .map(|r| {
            let (pid, user, app, q): (i32, String, String, String) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            format!("pid {pid} ({user}, {app}: {q})")
        })
        .collect();
    if who.is_empty() {
        "no session is left holding it".into()
    } else {
        who.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_bounds_as_the_catalog_prints_them() {
        assert_eq!(
            parse_range_bound("FOR VALUES FROM (MINVALUE) TO (1500001)"),
            Some((None, Some(1_500_001)))
        );
        assert_eq!(
            parse_range_bound("FOR VALUES FROM ('-5') TO (MAXVALUE)"),
            Some((Some(-5), None))
        );
        assert_eq!(
            parse_range_bound("FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')"),
            None
        );
        assert_eq!(parse_range_bound("FOR VALUES IN (1, 2)"), None);
        assert_eq!(
            parse_bound("FOR VALUES IN (1, '-2', NULL)"),
            Some(KeyBound::List {
                values: vec![1, -2],
                null: true
            })
        );
        assert_eq!(
            parse_bound("FOR VALUES WITH (modulus 4, remainder 3)"),
            Some(KeyBound::Hash {
                modulus: 4,
                remainder: 3,
                function: crate::hash::PARTITION_HASH
            })
        );
        assert_eq!(parse_bound("FOR VALUES IN ('a')"), None);
    }

    #[test]
    fn a_staging_tables_record_reads_back_from_its_comment() {
        let meta = StagedMeta {
            job: 42,
            since: 1_795_000_000_123_456,
            parent: 16384,
            partition: 16390,
            bound: "FOR VALUES FROM (MINVALUE) TO ('1000')".into(),
            chunks: vec![
                ChunkRecord {
                    file: 0,
                    start: 0,
                    end: Some(1 << 20),
                    rows: 12_345,
                },
                ChunkRecord {
                    file: 3,
                    start: 1 << 20,
                    end: None,
                    rows: 7,
                },
            ],
        };
        // The first line names the partition, whatever its name holds (a newline included).
        let comment = format!(
            "sluice staging table for partition \"a\nb\"\n{}",
            meta.line()
        );
        assert_eq!(StagedMeta::parse(&comment), Some(meta.clone()));
        // A table from a load without a ledger, or mangled by hand, has no record.
        assert_eq!(
            StagedMeta::parse("sluice staging table for partition \"p\""),
            None
        );
        let mangled = meta.line().replace("job=42", "job=x");
        assert_eq!(StagedMeta::parse(&mangled), None);
        let missing = meta.line().replace(" parent=16384", "");
        assert_eq!(StagedMeta::parse(&missing), None);
    }

    #[test]
    fn literals_read_the_same_whatever_the_session_does_with_backslashes() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("p\\'3"), "E'p\\\\''3'");
    }

    #[test]
    fn staging_names_carry_their_load() {
        let n = staging_name(0xdead_beef, 7);
        assert_eq!(n, "ldeadbeef_7");
        assert_eq!(load_id_of(&n), Some(0xdead_beef));
        assert_eq!(load_id_of("users"), None);
    }
}
