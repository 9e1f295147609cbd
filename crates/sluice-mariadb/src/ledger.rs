//! The resume ledger's tables in the target's database (`sluice_ledger_jobs`, `_job_files`,
//! `_job_chunks`, `_job_places`, `_job_commits`), beside the data as PostgreSQL's
//! `sluice_ledger` schema is: jobs, their files, the chunks each committed, where each file's
//! rows went, and the prepared XA branches a job decided to commit (`xa.rs`). A user
//! who may create tables in the database keeps a ledger, with no server-wide privilege. A chunk's row is
//! inserted by the stream that loads it, in the same InnoDB transaction (`record`), so the
//! ledger can never disagree with the data.
//!
//! A running job is marked by a named lock (`GET_LOCK('sluice:DB:N')`) that the load's own
//! connection holds until it ends: a job whose row says `running` but whose lock is free was
//! interrupted; a new job takes it before its row commits. The row goes in under a named lock
//! on the job's key (`sluice:DB:key:...`) and only if no run of the same command recorded one
//! since this run looked: two runs started at once would otherwise both record a job and both
//! load every row. Unlike PostgreSQL, MariaDB's DDL commits on its own, so the ledger's tables are
//! created one statement at a time, each `IF NOT EXISTS`.

use crate::catalog::{quote_ident, split_name, table_identity};
use mysql_async::prelude::*;
use mysql_async::{Conn, Params, Value};
use sluice_core::ledger::{
    ChunkRecord, FileIdentity, FileRecord, Job, JobSpec, JobState, LoadedBy, Placement,
    PlacementCheck, RelationState,
};

const CREATE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_ledger_jobs (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        job_key VARCHAR(128) NOT NULL,
        state VARCHAR(16) NOT NULL,
        message TEXT,
        tables TEXT NOT NULL,
        chunk_size BIGINT NOT NULL,
        settings TEXT NOT NULL,
        chunks_total BIGINT NOT NULL,
        bytes_total BIGINT NOT NULL,
        started DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        updated DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        finished DATETIME(6),
        KEY jobs_key (job_key)) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin \
        COMMENT 'sluice''s resume ledger: the loads (sluice jobs)'",
    "CREATE TABLE IF NOT EXISTS sluice_ledger_job_files (
        job BIGINT NOT NULL,
        n INT NOT NULL,
        path TEXT NOT NULL,
        tbl TEXT NOT NULL,
        tbl_id TEXT NOT NULL,
        size BIGINT NOT NULL,
        modified_ns BIGINT NOT NULL,
        settings TEXT NOT NULL,
        fingerprint VARCHAR(128) NOT NULL,
        PRIMARY KEY (job, n),
        KEY job_files_path (path(255))) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS sluice_ledger_job_chunks (
        job BIGINT NOT NULL,
        file INT NOT NULL,
        start_byte BIGINT NOT NULL,
        end_byte BIGINT,
        `rows` BIGINT NOT NULL,
        committed DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        PRIMARY KEY (job, file, start_byte)) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS sluice_ledger_job_places (
        job BIGINT NOT NULL,
        file INT NOT NULL,
        relation VARCHAR(512) NOT NULL,
        rel_id TEXT NOT NULL,
        generation TEXT,
        has_rows BOOLEAN,
        PRIMARY KEY (job, file, relation)) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS sluice_ledger_job_commits (
        job BIGINT NOT NULL,
        xid VARCHAR(64) NOT NULL,
        decided DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        PRIMARY KEY (job, xid)) ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
];

/// Why the ledger cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Db(#[from] mysql_async::Error),
    #[error("{0}")]
    Refused(String),
    /// Another run recorded a job of the same key first: look again.
    #[error("{0}")]
    Raced(String),
}

/// The named lock of job `job` of the ledger in the connection's database.
pub(crate) const LOCK_NAME: &str = "CONCAT('sluice:', DATABASE(), ':', ?)";
/// The lock a new job's record holds on its key (its first 32 bits), so that two runs of one
/// command that start at once record one job ([`begin`]).
const KEY_LOCK: &str = "CONCAT('sluice:', DATABASE(), ':key:', ?)";
/// How long a job's start waits for another run's start of the same job, in seconds.
const KEY_WAIT: u32 = 10;

/// Creates the ledger's tables in the target's database unless they are there.
pub async fn open(conn: &mut Conn) -> Result<(), LedgerError> {
    let db: Option<Option<String>> = conn.query_first("SELECT DATABASE()").await?;
    if db.flatten().is_none() {
        return Err(LedgerError::Refused(
            "this load keeps no resume ledger: the target names no database, and the ledger \
             lives in the target's database (mariadb://host/DATABASE)"
                .into(),
        ));
    }
    for sql in CREATE {
        if let Err(e) = conn.query_drop(*sql).await {
            if let mysql_async::Error::Server(s) = &e {
                if matches!(s.code, 1044 | 1142 | 1227) {
                    return Err(LedgerError::Refused(format!(
                        "this load keeps no resume ledger: the user may not create its tables \
                         (sluice_ledger_jobs, ...) in the target's database ({}); GRANT CREATE \
                         on it to the user, or run `sluice jobs` once as one who may",
                        s.message
                    )));
                }
            }
            return Err(e.into());
        }
    }
    Ok(())
}

type JobRow = (
    i64,
    String,
    String,
    Option<String>,
    String,
    i64,
    String,
    i64,
    i64,
    String,
    Option<String>,
    i64,
);

const JOB_COLUMNS: &str = "j.id, j.job_key, j.state, j.message, j.tables, j.chunk_size, \
     j.settings, j.chunks_total, j.bytes_total, \
     DATE_FORMAT(j.started, '%Y-%m-%d %H:%i:%s'), DATE_FORMAT(j.finished, '%Y-%m-%d %H:%i:%s'), \
     IS_USED_LOCK(CONCAT('sluice:', DATABASE(), ':', j.id)) IS NOT NULL";

/// Jobs, newest first: with this key, or all, with the chunks and rows each committed.
pub async fn jobs(conn: &mut Conn, key: Option<&str>) -> Result<Vec<Job>, mysql_async::Error> {
    let rows: Vec<JobRow> = conn
        .exec(
            format!(
                "SELECT {JOB_COLUMNS} FROM sluice_ledger_jobs j \
                 WHERE ? IS NULL OR j.job_key = ? ORDER BY j.id DESC"
            ),
            (key, key),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let (chunks, done): (i64, i64) = conn
            .exec_first(
                "SELECT COUNT(*), CAST(COALESCE(SUM(`rows`), 0) AS SIGNED) \
                 FROM sluice_ledger_job_chunks WHERE job = ?",
                (r.0,),
            )
            .await?
            .unwrap_or((0, 0));
        let state = match JobState::parse(&r.2) {
            Some(JobState::Running) if r.11 == 0 => JobState::Interrupted,
            Some(s) => s,
            None => JobState::Failed,
        };
        out.push(Job {
            id: r.0,
            key: r.1,
            state,
            message: r.3,
            tables: r
                .4
                .split('\n')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            chunk_size: r.5 as u64,
            settings: r.6,
            chunks_total: r.7 as u64,
            bytes_total: r.8 as u64,
            started: r.9,
            finished: r.10,
            chunks_done: chunks as u64,
            rows_done: done as u64,
            staged_chunks: 0,
            staged_rows: 0,
        });
    }
    Ok(out)
}

pub async fn job_files(conn: &mut Conn, job: i64) -> Result<Vec<FileRecord>, mysql_async::Error> {
    let rows: Vec<(String, String, String, i64, i64, String, String)> = conn
        .exec(
            "SELECT path, tbl, tbl_id, size, modified_ns, fingerprint, settings \
             FROM sluice_ledger_job_files WHERE job = ? ORDER BY n",
            (job,),
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| FileRecord {
            path: r.0,
            table: r.1,
            table_id: r.2,
            size: r.3 as u64,
            modified_ns: r.4,
            fingerprint: r.5,
            settings: r.6,
        })
        .collect())
}

pub async fn job_chunks(conn: &mut Conn, job: i64) -> Result<Vec<ChunkRecord>, mysql_async::Error> {
    let rows: Vec<(i64, i64, Option<i64>, i64)> = conn
        .exec(
            "SELECT file, start_byte, end_byte, `rows` FROM sluice_ledger_job_chunks \
             WHERE job = ? ORDER BY file, start_byte",
            (job,),
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| ChunkRecord {
            file: r.0 as u32,
            start: r.1 as u64,
            end: r.2.map(|e| e as u64),
            rows: r.3 as u64,
        })
        .collect())
}

/// For each file, the finished job that most recently loaded that very file.
///
/// The newest few finished jobs ([`FIRST_LOOK`]) are asked first, 500 paths at a time: a
/// nightly reload of the same files (or of a few tables in turn) finds them all there, whatever
/// the ledger's history. The files they do not have are then looked for in the older jobs that
/// recorded their paths, newest first, in batches of 2, 4, ... (at most 64) jobs, until every
/// file has its job. (One question per file made a list of 5,000 small files wait 5,000 round
/// trips, and each read every earlier job's record of its path.)
pub async fn loaded_by(
    conn: &mut Conn,
    files: &[FileRecord],
) -> Result<Vec<Option<LoadedBy>>, mysql_async::Error> {
    let finished: Vec<i64> = conn
        .query(
            "SELECT id FROM sluice_ledger_jobs WHERE state = 'finished' \
             ORDER BY finished DESC, id DESC",
        )
        .await?;
    let mut found: Vec<Option<LoadedBy>> = vec![None; files.len()];
    let (newest, older) = finished.split_at(FIRST_LOOK.min(finished.len()));
    if newest.is_empty() {
        return Ok(found);
    }
    look_in_jobs(conn, newest, files, &mut found).await?;
    let older = match found.iter().any(Option::is_none) && !older.is_empty() {
        true => jobs_recording(conn, &unfound_paths(files, &found), older).await?,
        false => Vec::new(),
    };
    let (mut next, mut batch) = (0, 2);
    while next < older.len() && found.iter().any(Option::is_none) {
        let these = &older[next..(next + batch).min(older.len())];
        look_in_jobs(conn, these, files, &mut found).await?;
        next += these.len();
        batch = (batch * 2).min(64);
    }
    Ok(found)
}

/// How many of the newest finished jobs the first look asks. The server passes over the path
/// index's entries of other jobs without reading their rows, so this costs the rows of these
/// jobs that name the files, and no more.
const FIRST_LOOK: usize = 4;

/// The paths of the files that have no job yet, each once.
fn unfound_paths<'a>(files: &'a [FileRecord], found: &[Option<LoadedBy>]) -> Vec<&'a str> {
    let mut paths: Vec<&str> = (files.iter().zip(found))
        .filter(|(_, found)| found.is_none())
        .map(|(f, _)| f.path.as_str())
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
}

/// Gives each file without a job yet its newest record in `jobs` (newest first), if any.
async fn look_in_jobs(
    conn: &mut Conn,
    jobs: &[i64],
    files: &[FileRecord],
    found: &mut [Option<LoadedBy>],
) -> Result<(), mysql_async::Error> {
    let mut rows = Vec::new();
    for some in unfound_paths(files, found).chunks(LOOKUP_BATCH) {
        rows.extend(records_in_jobs(conn, jobs, some).await?);
    }
    // Newest first: a file's first record here is its newest in these jobs.
    rows.sort_by_key(|r| jobs.iter().position(|&j| j == r.6));
    let newest = newest_records(&rows);
    for (f, slot) in files.iter().zip(found.iter_mut()) {
        if slot.is_none() {
            *slot = newest.get(&f.identity()).cloned();
        }
    }
    Ok(())
}

/// Those of `jobs` (newest first) that recorded any of `paths`.
async fn jobs_recording(
    conn: &mut Conn,
    paths: &[&str],
    jobs: &[i64],
) -> Result<Vec<i64>, mysql_async::Error> {
    let mut recording = std::collections::HashSet::new();
    for some in paths.chunks(LOOKUP_BATCH) {
        let found: Vec<i64> = conn
            .exec(
                format!(
                    "SELECT DISTINCT job FROM sluice_ledger_job_files \
                     FORCE INDEX (job_files_path) WHERE path IN ({})",
                    vec!["?"; some.len()].join(", ")
                ),
                Params::Positional(some.iter().map(|&p| Value::from(p)).collect()),
            )
            .await?;
        recording.extend(found);
    }
    Ok(jobs
        .iter()
        .copied()
        .filter(|j| recording.contains(j))
        .collect())
}

/// A file's path, table, size, modification time, fingerprint and settings, then the job that
/// recorded it, when that job finished, and the file's number in it.
type FileRow = (String, String, i64, i64, String, String, i64, String, i64);

/// The records of `paths` in jobs `jobs`. The path index holds each entry's job (the primary
/// key's first column), so the server passes over other jobs' entries without reading their
/// rows.
async fn records_in_jobs(
    conn: &mut Conn,
    jobs: &[i64],
    paths: &[&str],
) -> Result<Vec<FileRow>, mysql_async::Error> {
    let job_marks = vec!["?"; jobs.len()].join(", ");
    let path_marks = vec!["?"; paths.len()].join(", ");
    let params = (jobs.iter().map(|&j| Value::from(j)))
        .chain(paths.iter().map(|&p| Value::from(p)))
        .collect();
    conn.exec(
        format!(
            "SELECT f.path, f.tbl, f.size, f.modified_ns, f.fingerprint, f.settings, j.id, \
                DATE_FORMAT(j.finished, '%Y-%m-%d %H:%i:%s'), f.n \
             FROM sluice_ledger_job_files f FORCE INDEX (job_files_path) \
             JOIN sluice_ledger_jobs j ON j.id = f.job \
             WHERE f.job IN ({job_marks}) AND f.path IN ({path_marks})"
        ),
        Params::Positional(params),
    )
    .await
}

/// Each identity of `rows` with its first row's job.
fn newest_records(rows: &[FileRow]) -> std::collections::HashMap<FileIdentity<'_>, LoadedBy> {
    let mut newest = std::collections::HashMap::new();
    for r in rows {
        let id = (
            r.0.as_str(),
            r.1.as_str(),
            r.2,
            r.3,
            r.4.as_str(),
            r.5.as_str(),
        );
        newest.entry(id).or_insert_with(|| LoadedBy {
            job: r.6,
            finished: r.7.clone(),
            file: r.8 as u32,
        });
    }
    newest
}

/// How many paths one question of [`loaded_by`] names, and rows one `INSERT` of [`finish`]
/// sends.
const LOOKUP_BATCH: usize = 500;

/// How long the rerun's look into a table waits for another session's lock on it (`LOCK
/// TABLES ... WRITE`, DDL running or waiting on it): `lock_wait_timeout` is a year by default.
pub const LOOK_WAIT: u32 = 10;

/// Whether `schema.name` has a row; `None` when the role may not read it. A lock another
/// session holds on it past [`LOOK_WAIT`] seconds is an error (the load fails; run it again
/// once the lock is gone), not a wait without end. MySQL, which has no `SET STATEMENT`, looks
/// without the bound.
async fn has_rows(
    conn: &mut Conn,
    schema: &str,
    name: &str,
) -> Result<Option<bool>, mysql_async::Error> {
    let table = format!("{}.{}", quote_ident(schema), quote_ident(name));
    let look = format!("SELECT EXISTS (SELECT 1 FROM {table})");
    let bounded = format!("SET STATEMENT lock_wait_timeout = {LOOK_WAIT} FOR {look}");
    let found = match conn.query_first::<i64, _>(bounded).await {
        Err(mysql_async::Error::Server(e)) if e.code == 1064 => conn.query_first(look).await,
        other => other,
    };
    match found {
        Ok(n) => Ok(n.map(|n| n != 0)),
        Err(mysql_async::Error::Server(e)) if e.code == 1205 => {
            Err(mysql_async::Error::Server(mysql_async::ServerError {
                message: format!(
                    "another session has held a lock on {table} for {LOOK_WAIT} s (LOCK TABLES \
                     ... WRITE, or DDL running or waiting on the table), so whether it still \
                     holds the rows an earlier job loaded cannot be told: SHOW PROCESSLIST names \
                     the session; run the same command again once it is done"
                ),
                ..e
            }))
        }
        Err(_) => Ok(None),
    }
}

/// A relation's state now (`None`: gone): its id and generation (see
/// `catalog::table_identity`), and whether it has a row.
pub async fn relation_state(
    conn: &mut Conn,
    relation: &str,
) -> Result<Option<RelationState>, mysql_async::Error> {
    let Ok((Some(schema), name)) = split_name(relation) else {
        return Ok(None);
    };
    let exists: Option<String> = conn
        .exec_first(
            "SELECT TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&schema, &name),
        )
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let (id, generation) = match table_identity(conn, &schema, &name).await {
        Ok(identity) => identity,
        Err(crate::catalog::CatalogError::Db(e)) => return Err(e),
        Err(_) => return Ok(None),
    };
    let has_rows = has_rows(conn, &schema, &name).await?;
    Ok(Some(RelationState {
        name: relation.to_string(),
        generation,
        id,
        has_rows,
    }))
}

/// A file's placement as recorded: file, relation, its id, generation and rows then.
type PlaceRow = (i64, String, String, Option<String>, Option<bool>);

/// Where finished job `job` put the rows of its files `files`, then and now.
pub async fn placements(
    conn: &mut Conn,
    job: i64,
    files: &[u32],
) -> Result<Vec<PlacementCheck>, mysql_async::Error> {
    let rows: Vec<PlaceRow> = conn
        .exec(
            "SELECT f.n, COALESCE(p.relation, f.tbl), COALESCE(p.rel_id, f.tbl_id), \
                p.generation, p.has_rows \
             FROM sluice_ledger_job_files f LEFT JOIN sluice_ledger_job_places p \
               ON p.job = f.job AND p.file = f.n \
             WHERE f.job = ? ORDER BY f.n",
            (job,),
        )
        .await?;
    let mut states = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (n, relation, id, generation, has_rows) in rows {
        if !files.contains(&(n as u32)) {
            continue;
        }
        if !states.contains_key(&relation) {
            let s = relation_state(conn, &relation).await?;
            states.insert(relation.clone(), s);
        }
        out.push(PlacementCheck {
            file: n as u32,
            relation: relation.clone(),
            then: RelationState {
                name: relation.clone(),
                id,
                generation,
                has_rows,
            },
            now: states.get(&relation).cloned().flatten(),
        });
    }
    Ok(out)
}

/// Takes job `job`'s lock for this connection, or says who holds it (`GET_LOCK` nests: a
/// connection that holds it already takes it again).
pub async fn take_lock(conn: &mut Conn, job: i64) -> Result<(), LedgerError> {
    let got: Option<Option<i64>> = conn
        .exec_first(format!("SELECT GET_LOCK({LOCK_NAME}, 0)"), (job,))
        .await?;
    if got.flatten() == Some(1) {
        return Ok(());
    }
    let holder: Option<Option<u64>> = conn
        .exec_first(format!("SELECT IS_USED_LOCK({LOCK_NAME})"), (job,))
        .await?;
    let who = match holder.flatten() {
        Some(id) => format!(
            "server connection {id}. If that sluice is gone and the server has not noticed, \
             end its session (KILL {id}) and run this command again"
        ),
        None => "a server connection that has just ended".to_string(),
    };
    Err(LedgerError::Refused(format!(
        "job {job} is being run by another sluice now ({who}); wait for it, or stop it"
    )))
}

async fn unlock(conn: &mut Conn, job: i64) -> Result<(), mysql_async::Error> {
    conn.exec_drop(format!("DO RELEASE_LOCK({LOCK_NAME})"), (job,))
        .await
}

/// Records a new job and its files, and takes its lock; under the job key's lock, and only
/// if no job of the key newer than the one the load saw was recorded since
/// ([`JobSpec::newest`]).
pub async fn begin(conn: &mut Conn, spec: &JobSpec, tables: &[String]) -> Result<i64, LedgerError> {
    let key = spec.key.get(..8).unwrap_or(&spec.key);
    let got: Option<Option<i64>> = conn
        .exec_first(format!("SELECT GET_LOCK({KEY_LOCK}, {KEY_WAIT})"), (key,))
        .await?;
    if got.flatten() != Some(1) {
        return Err(LedgerError::Refused(format!(
            "another run of the same command has been recording its job for {KEY_WAIT} s (it \
             holds the user lock `sluice:<database>:key:{key}`); wait for it, or end it"
        )));
    }
    let recorded = record_job(conn, spec, tables).await;
    let released = conn
        .exec_drop(format!("DO RELEASE_LOCK({KEY_LOCK})"), (key,))
        .await;
    let id = recorded?;
    if let Err(e) = released {
        let _ = unlock(conn, id).await;
        return Err(e.into());
    }
    Ok(id)
}

/// The job's row and its files, in one transaction, unless a newer job of its key is there;
/// the job's lock taken before its COMMIT.
async fn record_job(
    conn: &mut Conn,
    spec: &JobSpec,
    tables: &[String],
) -> Result<i64, LedgerError> {
    conn.query_drop("START TRANSACTION").await?;
    let done = async {
        let newer: Option<i64> = conn
            .exec_first(
                "SELECT EXISTS (SELECT 1 FROM sluice_ledger_jobs WHERE job_key = ? AND id > ?)",
                (&spec.key, spec.newest.unwrap_or(0)),
            )
            .await?;
        if newer == Some(1) {
            return Ok(None);
        }
        conn.exec_drop(
            "INSERT INTO sluice_ledger_jobs (job_key, state, tables, chunk_size, settings, \
                chunks_total, bytes_total) VALUES (?, 'running', ?, ?, ?, ?, ?)",
            (
                &spec.key,
                tables.join("\n"),
                spec.chunk_size as i64,
                &spec.settings,
                spec.chunks_total as i64,
                spec.bytes_total as i64,
            ),
        )
        .await?;
        let id = conn.last_insert_id().unwrap_or(0) as i64;
        for batch in spec.files.chunks(500).enumerate() {
            let (b, files) = batch;
            let mut values = Vec::new();
            let mut params: Vec<Value> = Vec::new();
            for (k, f) in files.iter().enumerate() {
                values.push("(?, ?, ?, ?, ?, ?, ?, ?, ?)");
                params.extend([
                    Value::from(id),
                    Value::from((b * 500 + k) as i64),
                    Value::from(f.path.as_str()),
                    Value::from(f.table.as_str()),
                    Value::from(f.table_id.as_str()),
                    Value::from(f.size as i64),
                    Value::from(f.modified_ns),
                    Value::from(f.fingerprint.as_str()),
                    Value::from(f.settings.as_str()),
                ]);
            }
            conn.exec_drop(
                format!(
                    "INSERT INTO sluice_ledger_job_files (job, n, path, tbl, tbl_id, size, \
                        modified_ns, fingerprint, settings) VALUES {}",
                    values.join(", ")
                ),
                Params::Positional(params),
            )
            .await?;
        }
        Ok::<_, mysql_async::Error>(Some(id))
    }
    .await;
    match done {
        Ok(Some(id)) => lock_and_commit(conn, id).await.map(|()| id),
        Ok(None) => {
            conn.query_drop("ROLLBACK").await?;
            Err(LedgerError::Raced(
                sluice_core::ledger::RECORDED_SINCE_LOOKED.into(),
            ))
        }
        Err(e) => {
            let _ = conn.query_drop("ROLLBACK").await;
            Err(e.into())
        }
    }
}

/// Takes new job `id`'s lock, then commits its record: the moment its row is seen (by a run of
/// the same command that waited on the key's lock), its lock is held, so that run finds it
/// running, not interrupted. A failure rolls the record back, or gives the lock back.
async fn lock_and_commit(conn: &mut Conn, id: i64) -> Result<(), LedgerError> {
    if let Err(e) = take_lock(conn, id).await {
        let _ = conn.query_drop("ROLLBACK").await;
        return Err(e);
    }
    if let Err(e) = conn.query_drop("COMMIT").await {
        let _ = unlock(conn, id).await;
        return Err(e.into());
    }
    Ok(())
}

/// Takes an unfinished job's lock and marks it running again.
pub async fn resume(conn: &mut Conn, job: i64) -> Result<(), LedgerError> {
    take_lock(conn, job).await?;
    conn.exec_drop(
        "UPDATE sluice_ledger_jobs SET state = 'running', message = NULL, \
            updated = CURRENT_TIMESTAMP(6) WHERE id = ? AND state <> 'finished'",
        (job,),
    )
    .await?;
    if conn.affected_rows() == 0 {
        // Its run ended while this one waited for its lock: the load looks again.
        unlock(conn, job).await?;
        return Err(LedgerError::Raced(
            sluice_core::ledger::finished_since_looked(job),
        ));
    }
    Ok(())
}

/// Ends a job in `state`, and releases its lock.
pub async fn end(
    conn: &mut Conn,
    job: i64,
    state: JobState,
    message: Option<&str>,
) -> Result<(), mysql_async::Error> {
    conn.exec_drop(
        "UPDATE sluice_ledger_jobs SET state = ?, message = ?, updated = CURRENT_TIMESTAMP(6), \
            finished = IF(? = 'finished', CURRENT_TIMESTAMP(6), NULL) WHERE id = ?",
        (state.as_str(), message, state.as_str(), job),
    )
    .await?;
    unlock(conn, job).await
}

/// Marks a job finished, with where its files' rows went and each relation's state now, in
/// one transaction.
pub async fn finish(
    conn: &mut Conn,
    job: i64,
    placements: &[Placement],
) -> Result<(), mysql_async::Error> {
    let mut states = std::collections::HashMap::new();
    for p in placements {
        if !states.contains_key(&p.relation) {
            let s = relation_state(conn, &p.relation).await?;
            states.insert(p.relation.clone(), s);
        }
    }
    conn.query_drop("START TRANSACTION").await?;
    let done = async {
        conn.exec_drop("DELETE FROM sluice_ledger_job_places WHERE job = ?", (job,))
            .await?;
        // Many rows to a statement: one a file made a job of 5,000 small files wait 5,000
        // round trips at its end.
        let known: Vec<_> = (placements.iter())
            .filter_map(|p| Some((p, states.get(&p.relation)?.as_ref()?)))
            .collect();
        for batch in known.chunks(LOOKUP_BATCH) {
            let mut params: Vec<Value> = Vec::with_capacity(batch.len() * 6);
            for (p, state) in batch {
                params.extend([
                    Value::from(job),
                    Value::from(p.file as i64),
                    Value::from(p.relation.as_str()),
                    Value::from(state.id.as_str()),
                    Value::from(state.generation.as_deref()),
                    Value::from(state.has_rows),
                ]);
            }
            conn.exec_drop(
                format!(
                    "INSERT IGNORE INTO sluice_ledger_job_places \
                        (job, file, relation, rel_id, generation, has_rows) VALUES {}",
                    vec!["(?, ?, ?, ?, ?, ?)"; batch.len()].join(", ")
                ),
                Params::Positional(params),
            )
            .await?;
        }
        conn.exec_drop(
            "UPDATE sluice_ledger_jobs SET state = 'finished', message = NULL, \
                updated = CURRENT_TIMESTAMP(6), finished = CURRENT_TIMESTAMP(6) WHERE id = ?",
            (job,),
        )
        .await
    }
    .await;
    if let Err(e) = done {
        let _ = conn.query_drop("ROLLBACK").await;
        return Err(e);
    }
    conn.query_drop("COMMIT").await?;
    unlock(conn, job).await
}

/// Removes a job that no process runs, with its records.
pub async fn forget(conn: &mut Conn, job: i64) -> Result<(), LedgerError> {
    let exists: Option<i64> = conn
        .exec_first("SELECT id FROM sluice_ledger_jobs WHERE id = ?", (job,))
        .await?;
    if exists.is_none() {
        return Err(LedgerError::Refused(format!(
            "there is no job {job} in this database (`sluice jobs` lists them)"
        )));
    }
    take_lock(conn, job).await?;
    let removed = async {
        conn.query_drop("START TRANSACTION").await?;
        for t in ["job_chunks", "job_places", "job_files", "job_commits"] {
            conn.exec_drop(
                format!("DELETE FROM sluice_ledger_{t} WHERE job = ?"),
                (job,),
            )
            .await?;
        }
        conn.exec_drop("DELETE FROM sluice_ledger_jobs WHERE id = ?", (job,))
            .await?;
        conn.query_drop("COMMIT").await
    }
    .await;
    if let Err(e) = removed {
        let _ = conn.query_drop("ROLLBACK").await;
        let _ = unlock(conn, job).await;
        return Err(e.into());
    }
    Ok(unlock(conn, job).await?)
}

/// Inserts chunk records in `conn`'s open transaction.
pub async fn record(
    conn: &mut Conn,
    job: i64,
    chunks: &[ChunkRecord],
) -> Result<(), mysql_async::Error> {
    for batch in chunks.chunks(500) {
        let mut values = Vec::new();
        let mut params: Vec<Value> = Vec::new();
        for c in batch {
            values.push("(?, ?, ?, ?, ?)");
            params.extend([
                Value::from(job),
                Value::from(c.file as i64),
                Value::from(c.start as i64),
                c.end.map_or(Value::NULL, |e| Value::from(e as i64)),
                Value::from(c.rows as i64),
            ]);
        }
        conn.exec_drop(
            format!(
                "INSERT INTO sluice_ledger_job_chunks (job, file, start_byte, end_byte, `rows`) \
                 VALUES {}",
                values.join(", ")
            ),
            Params::Positional(params),
        )
        .await?;
    }
    Ok(())
}

/// Records that job `job` commits the prepared XA branches `xids`, in a transaction of its own
/// committed before the first branch commits, and only while this connection holds the job's
/// lock: a connection that lost it (and a rerun that may have taken it and rolled branches
/// back) decides nothing.
pub async fn decide_commit(conn: &mut Conn, job: i64, xids: &[String]) -> Result<(), LedgerError> {
    if xids.is_empty() {
        return Ok(());
    }
    conn.query_drop("START TRANSACTION").await?;
    let decided = async {
        let mine: Option<Option<i64>> = conn
            .exec_first(
                format!("SELECT IS_USED_LOCK({LOCK_NAME}) = CONNECTION_ID()"),
                (job,),
            )
            .await?;
        if mine.flatten() != Some(1) {
            return Err(LedgerError::Refused(format!(
                "this load no longer holds job {job}'s lock (its connection to the server was \
                 reset during the load), so it decides no commit: nothing was committed; run \
                 the same command again"
            )));
        }
        let values = vec!["(?, ?)"; xids.len()].join(", ");
        let params: Vec<Value> = xids
            .iter()
            .flat_map(|x| [Value::from(job), Value::from(x.as_str())])
            .collect();
        conn.exec_drop(
            format!("INSERT IGNORE INTO sluice_ledger_job_commits (job, xid) VALUES {values}"),
            Params::Positional(params),
        )
        .await?;
        Ok(conn.query_drop("COMMIT").await?)
    }
    .await;
    if decided.is_err() {
        let _ = conn.query_drop("ROLLBACK").await;
    }
    decided
}

/// The prepared XA branches job `job` decided to commit.
pub async fn decided(conn: &mut Conn, job: i64) -> Result<Vec<String>, mysql_async::Error> {
    conn.exec(
        "SELECT xid FROM sluice_ledger_job_commits WHERE job = ? ORDER BY xid",
        (job,),
    )
    .await
}
