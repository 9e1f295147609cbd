//! A crew's job in the ledger: several `sluice load` workers, on one host or many, loading one
//! job, with the server's own transactions as their only coordinator.
//!
//! - `sluice_ledger.job_workers`: one row per slot (`--worker K` of `--workers N`), with its
//!   host, state (`loading`, `prepared`, `committed`, `failed`) and prepared transactions. A
//!   live worker holds its slot's session advisory lock (class [`SLOT_CLASS`]), and a shared
//!   lock on the job (the single-process job lock, [`crate::ledger::LOCK_CLASS`]), so that
//!   `sluice jobs` sees the job running and `sluice jobs forget` refuses it.
//! - `sluice_ledger.job_claims`: one row per chunk of the job, registered by every worker
//!   that plans it. A stream claims a chunk in its own transaction (`FOR UPDATE SKIP LOCKED`,
//!   then marks it with its worker): the claim commits, prepares or rolls back with the
//!   chunk's rows, so a killed worker's claims come back when the server ends its session, and
//!   a prepared worker's stay taken until the job commits.
//!
//! The decision: each worker, once its streams are prepared, hands its part over in one
//! transaction that locks the job's row; the one whose hand-over completes every slot records
//! the decision to commit every slot's prepared transactions (`job_commits`, as a single
//! process does, with the decision's mark: a job of staged parts may have none to commit),
//! having switched in every slot's staging tables in the same transaction, and commits them.
//! A failure (a bad row, a wait that ran out) fails the whole job under the same lock, unless
//! the decision came first, rolls back everything prepared, and drops every slot's staging
//! tables with their chunks' claims.

use crate::ledger::{
    decision_mark, first_records, insert_files, standing, LedgerError, Standing, LOCK_CLASS,
};
use crate::onetrip::OneTrip;
use crate::stage;
use sluice_core::ledger::{
    ChunkRecord, Claim, CrewJoin, CrewStatus, CrewTurn, JobSpec, JobState, Joined, WorkerPart,
    WorkerRecord,
};
use tokio_postgres::Client;

/// The high half of a slot's advisory lock key ('slwk'); the low half is the job's number
/// (below 2^20) and the slot (below 2^12).
pub const SLOT_CLASS: i64 = 0x736c_776b;

/// The most workers a crew may have: the slot's share of its lock key.
pub const MAX_WORKERS: u32 = 4095;

/// The advisory lock key of slot `worker` of job `job`.
fn slot_key(job: i64, worker: u32) -> i64 {
    (SLOT_CLASS << 32) | ((job & 0xf_ffff) << 12) | i64::from(worker)
}

/// Whether slot `worker` of job `job` is held by a live session (SQL, on `j.id` and `w.worker`).
const SLOT_LIVE: &str = "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
     AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid = (1936488299)::oid \
     AND l.objid = ((((w.job & 1048575) << 12) | w.worker)::bigint)::oid)";

/// Joins `join`'s job: creates it for its first worker, takes the slot, registers the files.
/// The joins of every crew are serialized by a transaction lock (they are few and short).
pub async fn join(
    client: &Client,
    join: &CrewJoin,
    spec: &JobSpec,
    tables: &[String],
) -> Result<Joined, LedgerError> {
    in_transaction(client, join_in_transaction(client, join, spec, tables)).await
}

/// Runs `work` (statements on `client`) in one transaction: committed when it succeeds,
/// rolled back when it fails. Read committed whatever the session's default (`PGOPTIONS` may
/// say repeatable read): each statement after a lock must see what its holder committed.
async fn in_transaction<T, E: From<tokio_postgres::Error>>(
    client: &Client,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    client
        .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        .await?;
    match work.await {
        Ok(t) => {
            client.batch_execute("COMMIT").await?;
            Ok(t)
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

async fn join_in_transaction(
    client: &Client,
    join: &CrewJoin,
    spec: &JobSpec,
    tables: &[String],
) -> Result<Joined, LedgerError> {
    // The joins' own lock: a slot key of no job (job numbers start at 1).
    client
        .run("SELECT pg_advisory_xact_lock($1)", &[&slot_key(0, 0)])
        .await?;
    let (job, chunk_size) = find_or_create(client, join, spec, tables).await?;
    take_slot(client, join, job).await?;
    let (prepared, decided) = standing_part(client, job, join).await?;
    let files = register_files(client, job, spec).await?;
    Ok(Joined {
        job,
        chunk_size,
        files,
        prepared,
        decided,
    })
}

/// The crew's unfinished job (a failed one runs again), or a new one; its number and chunk
/// size.
async fn find_or_create(
    client: &Client,
    join: &CrewJoin,
    spec: &JobSpec,
    tables: &[String],
) -> Result<(i64, u64), LedgerError> {
    let key = join.key();
    let found = client
        .fetch_opt(
            "SELECT id, chunk_size, coalesce(workers, 1), state FROM sluice_ledger.jobs \
             WHERE key = $1 AND state IN ('running', 'failed') ORDER BY id DESC LIMIT 1",
            &[&key],
        )
        .await?;
    let workers = join.workers as i32;
    if let Some(r) = found {
        let (id, size, n): (i64, i64, i32) = (r.get(0), r.get(1), r.get(2));
        if n != workers {
            return Err(LedgerError::Refused(format!(
                "job {} (ledger job {id}) has {n} workers, and this worker says --workers {}: \
                 give every worker the same --workers",
                join.name, join.workers
            )));
        }
        client
            .run(
                "UPDATE sluice_ledger.jobs SET state = 'running', message = NULL, \
                    updated = now() WHERE id = $1 AND state = 'failed'",
                &[&id],
            )
            .await?;
        return Ok((id, size as u64));
    }
    let size = spec.chunk_size as i64;
    let row = client
        .fetch_one(
            "INSERT INTO sluice_ledger.jobs (key, state, tables, chunk_size, settings, \
                chunks_total, bytes_total, workers) \
             VALUES ($1, 'running', $2, $3, $4, 0, 0, $5) RETURNING id",
            &[&key, &tables, &size, &spec.settings, &workers],
        )
        .await?;
    let id: i64 = row.get(0);
    if id >= 1 << 20 {
        return Err(LedgerError::Refused(format!(
            "the ledger numbers its jobs past {} (job {id}), beyond what a crew's locks can name: \
             `sluice jobs forget` old jobs, or drop the ledger",
            1 << 20
        )));
    }
    Ok((id, spec.chunk_size))
}

/// Takes the worker's slot (refused while another process holds it) and a shared lock on the
/// job, both for the session's life.
async fn take_slot(client: &Client, join: &CrewJoin, job: i64) -> Result<(), LedgerError> {
    let key = slot_key(job, join.worker);
    let got: bool = client
        .fetch_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .await?
        .get(0);
    if !got {
        let holder = client
            .fetch_opt(
                "SELECT host, pid FROM sluice_ledger.job_workers WHERE job = $1 AND worker = $2",
                &[&job, &(join.worker as i32)],
            )
            .await?
            .map(|r| {
                format!(
                    " (host {}, process {})",
                    r.get::<_, String>(0),
                    r.get::<_, i32>(1)
                )
            })
            .unwrap_or_default();
        return Err(LedgerError::Refused(format!(
            "worker {} of job {} runs already{holder}: each process needs its own --worker \
             (1 to {}); a worker that died gives its slot back when the server ends its session",
            join.worker, join.name, join.workers
        )));
    }
    client
        .run(
            "SELECT pg_advisory_lock_shared($1, $2)",
            &[&LOCK_CLASS, &(job as i32)],
        )
        .await?;
    Ok(())
}

/// The slot's part as an earlier run of it left it: its prepared transactions when they all
/// still stand, or whatever it handed over when the job is decided (this run then only
/// waits, or finishes the job), else nothing, the slot marked loading anew. Returns the
/// prepared transactions, and whether the job is decided.
async fn standing_part(
    client: &Client,
    job: i64,
    join: &CrewJoin,
) -> Result<(Vec<String>, bool), LedgerError> {
    let worker = join.worker as i32;
    let pid = join.pid as i32;
    let standing = client
        .fetch_opt(
            "SELECT w.gids, EXISTS (SELECT 1 FROM sluice_ledger.job_commits c WHERE c.job = $1) \
             FROM sluice_ledger.job_workers w \
             WHERE w.job = $1 AND w.worker = $2 AND w.state IN ('prepared', 'committed') \
               AND (EXISTS (SELECT 1 FROM sluice_ledger.job_commits c WHERE c.job = $1) \
                    OR (w.state = 'prepared' AND cardinality(w.gids) > 0 \
                        AND NOT EXISTS (SELECT 1 FROM unnest(w.gids) g(gid) \
                            WHERE g.gid NOT IN (SELECT p.gid FROM pg_prepared_xacts p))))",
            &[&job, &worker],
        )
        .await?;
    if let Some(r) = standing {
        client
            .run(
                "UPDATE sluice_ledger.job_workers SET host = $3, pid = $4, updated = now() \
                 WHERE job = $1 AND worker = $2",
                &[&job, &worker, &join.host, &pid],
            )
            .await?;
        return Ok((r.get(0), r.get(1)));
    }
    client
        .run(
            "INSERT INTO sluice_ledger.job_workers (job, worker, host, pid, state) \
             VALUES ($1, $2, $3, $4, 'loading') \
             ON CONFLICT (job, worker) DO UPDATE SET host = $3, pid = $4, state = 'loading', \
                gids = '{}', message = NULL, verdict = NULL, started = now(), updated = now()",
            &[&job, &worker, &join.host, &pid],
        )
        .await?;
    Ok((Vec::new(), false))
}

/// Each of `spec`'s files' number in the job: a file another worker registered (the same
/// path, table, size, modification time, content sample and settings: the same file, seen
/// through a shared path) keeps its number; the others are numbered after the job's last.
async fn register_files(
    client: &Client,
    job: i64,
    spec: &JobSpec,
) -> Result<Vec<u32>, LedgerError> {
    let f = &spec.files;
    let rows = client
        .fetch(
            "SELECT path, tbl, size, modified_ns, fingerprint, settings, n \
             FROM sluice_ledger.job_files WHERE job = $1",
            &[&job],
        )
        .await?;
    let mut next = rows
        .iter()
        .map(|r| r.get::<_, i32>(6) + 1)
        .max()
        .unwrap_or(0);
    let known = first_records(f, &rows);
    let mut numbers = Vec::with_capacity(f.len());
    let mut fresh = Vec::new();
    for (i, r) in known.iter().enumerate() {
        match r.map(|r| r.get::<_, i32>(6)) {
            Some(n) => numbers.push(n as u32),
            None => {
                numbers.push(next as u32);
                fresh.push((next, i));
                next += 1;
            }
        }
    }
    if !fresh.is_empty() {
        let n: Vec<i32> = fresh.iter().map(|&(n, _)| n).collect();
        insert_files(client, job, &n, fresh.iter().map(|&(_, i)| &f[i])).await?;
    }
    Ok(numbers)
}

/// Registers chunks as claimable; the job's totals count each chunk and file once. A chunk
/// already registered is left alone before the insert tries it: another worker's stream may
/// hold it claimed in a transaction that lasts until the job commits, and a conflicting insert
/// would wait for that transaction.
pub async fn add_claims(
    client: &Client,
    job: i64,
    chunks: &[ChunkRecord],
) -> Result<(), tokio_postgres::Error> {
    let files: Vec<i32> = chunks.iter().map(|c| c.file as i32).collect();
    let starts: Vec<i64> = chunks.iter().map(|c| c.start as i64).collect();
    client
        .run(
            "WITH added AS (INSERT INTO sluice_ledger.job_claims (job, file, start_byte) \
                SELECT $1, w.file, w.start_byte FROM unnest($2::int[], $3::bigint[]) \
                    AS w(file, start_byte) \
                WHERE NOT EXISTS (SELECT 1 FROM sluice_ledger.job_claims c WHERE c.job = $1 \
                    AND c.file = w.file AND c.start_byte = w.start_byte) \
                ON CONFLICT DO NOTHING RETURNING 1) \
             UPDATE sluice_ledger.jobs SET chunks_total = chunks_total + (SELECT count(*) FROM added), \
                bytes_total = (SELECT coalesce(sum(size), 0) FROM sluice_ledger.job_files \
                    WHERE job = $1), updated = now() \
             WHERE id = $1",
            &[&job, &files, &starts],
        )
        .await?;
    Ok(())
}

/// Claims `chunks` for `worker` in the open transaction of `client` (one statement): those
/// free are taken and marked; the others are done (committed, or held by a prepared
/// transaction) or busy (held by a live one).
pub async fn claim(
    client: &Client,
    job: i64,
    worker: u32,
    chunks: &[ChunkRecord],
) -> Result<Vec<Claim>, tokio_postgres::Error> {
    let files: Vec<i32> = chunks.iter().map(|c| c.file as i32).collect();
    let starts: Vec<i64> = chunks.iter().map(|c| c.start as i64).collect();
    let rows = client
        .fetch(
            "WITH want AS (SELECT * FROM unnest($2::int[], $3::bigint[]) WITH ORDINALITY \
                AS w(file, start_byte, ord)), \
             free AS (SELECT c.file, c.start_byte FROM sluice_ledger.job_claims c \
                JOIN want w ON c.file = w.file AND c.start_byte = w.start_byte \
                WHERE c.job = $1 AND c.worker IS NULL FOR UPDATE OF c SKIP LOCKED), \
             taken AS (UPDATE sluice_ledger.job_claims c SET worker = $4 FROM free f \
                WHERE c.job = $1 AND c.file = f.file AND c.start_byte = f.start_byte \
                RETURNING c.file, c.start_byte) \
             SELECT EXISTS (SELECT 1 FROM taken t WHERE t.file = w.file \
                    AND t.start_byte = w.start_byte), \
                c.worker IS NOT NULL, \
                EXISTS (SELECT 1 FROM pg_prepared_xacts p WHERE p.transaction = c.xmax), \
                c.job IS NOT NULL \
             FROM want w LEFT JOIN sluice_ledger.job_claims c ON c.job = $1 \
                AND c.file = w.file AND c.start_byte = w.start_byte \
             ORDER BY w.ord",
            &[&job, &files, &starts, &(worker as i32)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let (mine, committed, prepared, known): (bool, bool, bool, bool) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            match () {
                // A chunk nobody registered is this worker's (it registers its own).
                _ if mine || !known => Claim::Mine,
                _ if committed || prepared => Claim::Done,
                _ => Claim::Busy,
            }
        })
        .collect())
}

/// Hands over `worker`'s part; the hand-over that completes every slot publishes the job's
/// staging tables (each lock wait bounded by `lock_wait`) and records the decision. Returns
/// the turn, and the publish's parents and the partitions switched in with their statistics
/// (for the parents' statistics, gathered after the commit).
pub async fn hand_over(
    client: &Client,
    job: i64,
    worker: u32,
    prepared: &[String],
    part: &WorkerPart,
    lock_wait: std::time::Duration,
) -> Result<(CrewTurn, Published), LedgerError> {
    in_transaction(
        client,
        hand_over_in_transaction(client, job, worker, prepared, part, lock_wait),
    )
    .await
}

/// What a job's publish switched in: the parents, and the partitions that kept the
/// statistics their staging tables had.
#[derive(Default)]
pub struct Published {
    pub parents: Vec<String>,
    pub analyzed: Vec<String>,
}

async fn hand_over_in_transaction(
    client: &Client,
    job: i64,
    worker: u32,
    prepared: &[String],
    part: &WorkerPart,
    lock_wait: std::time::Duration,
) -> Result<(CrewTurn, Published), LedgerError> {
    let row = client
        .fetch_one(
            "SELECT state, coalesce(message, ''), coalesce(workers, 1) FROM sluice_ledger.jobs \
             WHERE id = $1 FOR UPDATE",
            &[&job],
        )
        .await?;
    let (state, message, workers): (String, String, i32) = (row.get(0), row.get(1), row.get(2));
    // A rerun of a slot that loaded nothing, in a job another worker finished meanwhile
    // (after its decider died): the job is in.
    if state == "finished" && prepared.is_empty() {
        return Ok((CrewTurn::Finished, Published::default()));
    }
    if state != "running" {
        return Err(LedgerError::Refused(format!(
            "the job is {state} ({message}), so this worker's part was rolled back"
        )));
    }
    // A staged part waits for the job's publish as a prepared one waits for its commit, and
    // fails with the job.
    let state = match prepared.is_empty() && !part.staged {
        true => "committed",
        false => "prepared",
    };
    let gids = prepared.to_vec();
    client
        .run(
            "UPDATE sluice_ledger.job_workers SET state = $3, gids = $4, streams = $5, \
                rows = $6, bytes = $7, seconds = $8, verdict = $9, updated = now() \
             WHERE job = $1 AND worker = $2",
            &[
                &job,
                &(worker as i32),
                &state,
                &gids,
                &(part.streams as i32),
                &(part.rows as i64),
                &(part.bytes as i64),
                &part.seconds,
                &part.verdict,
            ],
        )
        .await?;
    let row = client
        .fetch_one(
            "SELECT (SELECT count(*)::int FROM sluice_ledger.job_workers WHERE job = $1 \
                    AND state IN ('prepared', 'committed') AND worker BETWEEN 1 AND $2), \
                ARRAY(SELECT unnest(gids) FROM sluice_ledger.job_workers WHERE job = $1 \
                    AND state = 'prepared' AND worker BETWEEN 1 AND $2)",
            &[&job, &workers],
        )
        .await?;
    let (slots, all): (i32, Vec<String>) = (row.get(0), row.get(1));
    if slots < workers {
        let turn = CrewTurn::Waiting {
            prepared: slots as u32,
            workers: workers as u32,
        };
        return Ok((turn, Published::default()));
    }
    let (staged, published) = publish(client, job, lock_wait).await?;
    // The decision, with its mark: a job with nothing prepared (every part staged or
    // committed) is decided too, and a waiting worker or a failure must see that.
    let marked: Vec<String> = all.iter().cloned().chain([decision_mark(job)]).collect();
    client
        .run(
            "INSERT INTO sluice_ledger.job_commits (job, gid) SELECT $1, unnest($2::text[]) \
             ON CONFLICT DO NOTHING",
            &[&job, &marked],
        )
        .await?;
    Ok((CrewTurn::Decided { gids: all, staged }, published))
}

/// The job's publish, in the hand-over's transaction: every worker's staging tables switched
/// in, and the ledger rows of the chunks they hold written, with the decision that follows.
/// Returns how many, and what the statistics need.
async fn publish(
    client: &Client,
    job: i64,
    lock_wait: std::time::Duration,
) -> Result<(usize, Published), LedgerError> {
    let Standing::Known { since, .. } = standing(client, job).await? else {
        return Ok((0, Published::default()));
    };
    let tables = stage::of_job(client, job, since)
        .await
        .map_err(|e| match e {
            LedgerError::Refused(why) => {
                LedgerError::Refused(format!("{why}; nothing was published"))
            }
            e => e,
        })?;
    if tables.is_empty() {
        return Ok((0, Published::default()));
    }
    let staged: Vec<stage::Staged> = tables.iter().map(|(s, _)| s.clone()).collect();
    let times = stage::switch_in(client, &staged, lock_wait)
        .await
        .map_err(|e| match e {
            stage::PublishError::Db(e) => LedgerError::Db(e),
            stage::PublishError::Locked(who) => LedgerError::Refused(format!(
                "the job's publish could not lock its tables in {} attempts of {} ms each; \
                 nothing was published. Holding locks: {who}. End those sessions' \
                 transactions, or give the publish longer with --lock-wait-timeout, and run \
                 the workers' commands again",
                stage::PUBLISH_ATTEMPTS,
                lock_wait.as_millis()
            )),
        })?;
    let records: Vec<ChunkRecord> = tables
        .iter()
        .flat_map(|(_, m)| m.chunks.iter().cloned())
        .collect();
    crate::ledger::record(client, job, &records).await?;
    let published = Published {
        parents: stage::parents_of(&staged),
        analyzed: stage::kept_statistics(&staged, &times.appended),
    };
    Ok((staged.len(), published))
}

/// Where the crew's job stands.
pub async fn status(client: &Client, job: i64) -> Result<CrewStatus, tokio_postgres::Error> {
    let row = client
        .fetch_one(
            "SELECT state, message, coalesce(workers, 1), \
                ARRAY(SELECT gid FROM sluice_ledger.job_commits WHERE job = $1 AND gid <> $2 \
                      ORDER BY gid), \
                extract(epoch FROM finished)::float8, \
                EXISTS (SELECT 1 FROM sluice_ledger.job_commits WHERE job = $1) \
             FROM sluice_ledger.jobs WHERE id = $1",
            &[&job, &decision_mark(job)],
        )
        .await?;
    let slots = client
        .fetch(
            &format!(
                "SELECT w.worker, w.host, w.pid, w.state, {SLOT_LIVE}, coalesce(w.streams, 0), \
                    coalesce(w.rows, 0), coalesce(w.bytes, 0), coalesce(w.seconds, 0), \
                    w.verdict, w.message, extract(epoch FROM w.started)::float8, \
                    extract(epoch FROM w.updated)::float8 \
                 FROM sluice_ledger.job_workers w WHERE w.job = $1 ORDER BY w.worker"
            ),
            &[&job],
        )
        .await?;
    Ok(CrewStatus {
        state: JobState::parse(row.get(0)).unwrap_or(JobState::Failed),
        message: row.get(1),
        workers: row.get::<_, i32>(2) as u32,
        decided: row.get::<_, bool>(5).then(|| row.get(3)),
        slots: slots.iter().map(worker_of).collect(),
        finished_at: row.get(4),
    })
}

fn worker_of(r: &tokio_postgres::Row) -> WorkerRecord {
    WorkerRecord {
        worker: r.get::<_, i32>(0) as u32,
        host: r.get(1),
        pid: r.get::<_, i32>(2) as u32,
        state: r.get(3),
        live: r.get(4),
        streams: r.get::<_, i32>(5) as u32,
        rows: r.get::<_, i64>(6) as u64,
        bytes: r.get::<_, i64>(7) as u64,
        seconds: r.get(8),
        verdict: r.get(9),
        message: r.get(10),
        joined_at: r.get(11),
        updated_at: r.get(12),
    }
}

/// Fails the crew's job unless its commit is decided (false then), and rolls back every
/// prepared transaction of it.
pub async fn fail(
    client: &Client,
    job: i64,
    worker: u32,
    why: &str,
) -> Result<bool, tokio_postgres::Error> {
    let failed = async {
        let decided: bool = client
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM sluice_ledger.jobs WHERE id = $1 FOR UPDATE) \
                    AND EXISTS (SELECT 1 FROM sluice_ledger.job_commits WHERE job = $1)",
                &[&job],
            )
            .await?
            .get(0);
        if decided {
            return Ok(false);
        }
        client
            .run(
                "UPDATE sluice_ledger.jobs SET state = 'failed', message = $2, updated = now() \
                 WHERE id = $1 AND state = 'running'",
                &[&job, &why],
            )
            .await?;
        client
            .run(
                "UPDATE sluice_ledger.job_workers SET state = 'failed', gids = '{}', \
                    message = CASE WHEN worker = $2 THEN $3 ELSE message END, updated = now() \
                 WHERE job = $1 AND state IN ('loading', 'prepared')",
                &[&job, &(worker as i32), &why],
            )
            .await?;
        // Its staging tables go with their chunks' claims: nothing of a failed job stays,
        // and the job, run again, loads them again. A staging table committing meanwhile
        // waits for this transaction, then finds the job failed ([`running`]).
        if let Standing::Known { since, .. } = standing(client, job).await? {
            stage::drop_job(client, job, since).await?;
        }
        Ok::<_, tokio_postgres::Error>(true)
    };
    in_transaction(client, failed).await
}

/// In a staging table's transaction, just before its COMMIT: whether the job is still
/// running, read under a share lock on the job's row, so that a failure of the job
/// ([`fail`], which drops its staging tables) comes wholly before this commit or after it.
pub async fn running(client: &Client, job: i64) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .fetch_opt(
            "SELECT 1 FROM sluice_ledger.jobs WHERE id = $1 AND state = 'running' FOR SHARE",
            &[&job],
        )
        .await?
        .is_some())
}

/// Takes (waiting at most `wait`) or releases the session lock on job `job`'s `--wire auto`
/// decision: slot 0's key, which no worker has.
pub async fn hold_wire(
    client: &Client,
    job: i64,
    hold: bool,
    wait: std::time::Duration,
) -> Result<bool, tokio_postgres::Error> {
    let key = slot_key(job, 0);
    if !hold {
        client.run("SELECT pg_advisory_unlock($1)", &[&key]).await?;
        return Ok(true);
    }
    let until = std::time::Instant::now() + wait;
    loop {
        let got: bool = client
            .fetch_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await?
            .get(0);
        if got || std::time::Instant::now() >= until {
            return Ok(got);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The job's stored `--wire auto` decision.
pub async fn wire(client: &Client, job: i64) -> Result<Option<String>, tokio_postgres::Error> {
    Ok(client
        .fetch_one("SELECT wire FROM sluice_ledger.jobs WHERE id = $1", &[&job])
        .await?
        .get(0))
}

/// Stores the job's `--wire auto` decision.
pub async fn set_wire(
    client: &Client,
    job: i64,
    decision: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .run(
            "UPDATE sluice_ledger.jobs SET wire = $2 WHERE id = $1",
            &[&job, &decision],
        )
        .await
        .map(drop)
}
