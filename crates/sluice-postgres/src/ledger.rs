//! The resume ledger in the target database: schema `sluice_ledger`.
//!
//! - `sluice_ledger.jobs`: one row per job (a load as one command names it), with its state;
//! - `sluice_ledger.job_file_runs`: the files a job loads, with their identity (size, time,
//!   fingerprint), consecutive files in one row; the view `job_files` shows one row per file;
//! - `sluice_ledger.job_chunk_runs`: the committed chunks, inserted by the stream that loaded
//!   them, in the same transaction as their rows (or by the publish transaction, for staged
//!   rows), the first chunks of consecutive files in one row; the view `job_chunks` shows one
//!   row per chunk ([`TABLES_4`] says why runs);
//! - `sluice_ledger.job_places`: where a finished job's files' rows went, for a rerun after
//!   the table changed;
//! - `sluice_ledger.job_commits`: the prepared transactions a job decided to commit, written
//!   before the first `COMMIT PREPARED`, so that a rerun finishes a two-phase commit cut off
//!   halfway (and rolls back what was prepared but never decided); for a job of several
//!   workers, also a mark that the job is decided ([`decision_mark`]), which a job with
//!   nothing prepared (every part staged or committed) needs as much;
//! - `job_workers`, `job_claims`: crews (`crate::crew`).
//!
//! The primary key of `job_chunk_runs` names a record's first chunk (job, file, first byte),
//! and its exclusion constraint the files a run covers, so that the ledger itself refuses to
//! commit one chunk twice: a transaction that tried would fail and take its rows with it. A
//! running job holds a session advisory lock on its id (class [`LOCK_CLASS`]); a job marked
//! running whose lock nobody holds was interrupted.
//!
//! A new job is recorded under a transaction lock of class [`KEY_CLASS`] on its key, and only
//! if no run of the same command recorded one since this run looked: two runs started at once
//! would otherwise both find no job, both record one and both load every row.
//!
//! Its streams' sessions each hold a shared lock of class [`STREAM_CLASS`] on the job: the
//! server ends a killed sluice's session only once the statement it runs ends, so a COMMIT or
//! `PREPARE TRANSACTION` sent just before a kill can land after a rerun read which chunks
//! were committed, and the rerun would load that chunk again (or leave the late prepared
//! transaction to no one). A rerun waits for those sessions to end before it reads anything
//! ([`end_earlier_streams`]).

use crate::onetrip::{OneTrip, Param};
use sluice_core::ledger::{
    ChunkRecord, FileIdentity, FileRecord, Job, JobSpec, JobState, LoadedBy, Placement,
    PlacementCheck, RelationState,
};
use tokio_postgres::Client;

/// The ledger's schema.
pub const SCHEMA: &str = "sluice_ledger";
/// The shape of the ledger's tables; a ledger of another shape is refused with advice, not
/// misread.
pub const VERSION: i32 = 4;
/// The advisory lock class of running jobs ('sljb').
pub const LOCK_CLASS: i32 = 0x736c_6a62;
/// The advisory lock class of a job's key, held by the transaction that records a new job of
/// it ('slky'): two runs of one command that start at once record one job, and the other
/// looks again ([`begin_row`]).
pub const KEY_CLASS: i32 = 0x736c_6b79;
/// How long an upgrade of the ledger waits for its tables.
const UPGRADE_WAIT: &str = "10s";
/// How long a job's start waits for another run's start of the same job to commit.
const KEY_WAIT: &str = "10s";
/// The advisory lock class a job's streams hold, shared, for their sessions' life ('slst').
pub const STREAM_CLASS: i32 = 0x736c_7374;
/// How long a rerun waits for an earlier run's stream sessions to end on their own before it
/// ends them.
const EARLIER_STREAMS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long it then waits for the sessions it ended to go.
const EARLIER_STREAMS_END: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a run waits for a job's lock held by a session busy in a statement.
const BUSY_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a holder seen busy in a statement may then be idle, and still be waited for as
/// one that ends with its statement (its session goes a moment after the statement does).
const ENDING_HOLDER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The statement a stream of job `job` runs first on its session: its shared lock on the job,
/// then its transaction.
pub fn stream_begin(job: Option<i64>) -> String {
    match job {
        Some(job) => format!(
            "SELECT pg_advisory_lock_shared({STREAM_CLASS}, {}); BEGIN",
            job as i32
        ),
        None => "BEGIN".into(),
    }
}

/// The schema and its jobs, as a new ledger makes them.
const CREATE: &str = "
CREATE SCHEMA IF NOT EXISTS sluice_ledger;
CREATE TABLE IF NOT EXISTS sluice_ledger.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key text NOT NULL,
    state text NOT NULL CHECK (state IN ('running', 'failed', 'finished', 'abandoned')),
    message text,
    tables text[] NOT NULL,
    chunk_size bigint NOT NULL,
    settings text NOT NULL,
    chunks_total bigint NOT NULL,
    bytes_total bigint NOT NULL,
    started timestamptz NOT NULL DEFAULT now(),
    updated timestamptz NOT NULL DEFAULT now(),
    finished timestamptz,
    workers int,
    wire text);
CREATE INDEX IF NOT EXISTS jobs_key ON sluice_ledger.jobs (key);
CREATE TABLE IF NOT EXISTS sluice_ledger.ledger_version (version int NOT NULL);
INSERT INTO sluice_ledger.ledger_version SELECT 4 WHERE NOT EXISTS (SELECT 1 FROM sluice_ledger.ledger_version);
COMMENT ON SCHEMA sluice_ledger IS 'sluice''s resume ledger: which chunks of which files each load committed (sluice jobs)';
";

/// What version 2 added: the two-phase commit's decisions and where each file's rows went.
const TABLES_2: &str = "
CREATE TABLE IF NOT EXISTS sluice_ledger.job_commits (
    job bigint NOT NULL,
    gid text NOT NULL,
    decided timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, gid));
CREATE TABLE IF NOT EXISTS sluice_ledger.job_places (
    job bigint NOT NULL,
    file int NOT NULL,
    relation text NOT NULL,
    rel_id text NOT NULL,
    generation text,
    has_rows boolean,
    PRIMARY KEY (job, file, relation));
";

/// What version 3 added: crews, jobs that several workers load together (`crate::crew`).
const TABLES_3: &str = "
CREATE TABLE IF NOT EXISTS sluice_ledger.job_workers (
    job bigint NOT NULL,
    worker int NOT NULL,
    host text NOT NULL,
    pid int NOT NULL,
    state text NOT NULL CHECK (state IN ('loading', 'prepared', 'committed', 'failed')),
    gids text[] NOT NULL DEFAULT '{}',
    streams int,
    rows bigint,
    bytes bigint,
    seconds float8,
    verdict text,
    message text,
    started timestamptz NOT NULL DEFAULT now(),
    updated timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, worker));
CREATE TABLE IF NOT EXISTS sluice_ledger.job_claims (
    job bigint NOT NULL,
    file int NOT NULL,
    start_byte bigint NOT NULL,
    worker int,
    PRIMARY KEY (job, file, start_byte));
";

/// Version 4: a job's files and its committed chunks recorded in runs, read back through views
/// of one row per file and per chunk (`job_files`, `job_chunks`, the shapes of versions 1-3).
///
/// A run of files is consecutive files of one table and one set of options: one row whose
/// arrays hold each file's path, size, time and fingerprint (stored uncompressed: compressing
/// them cost more than writing them), and its first and last path in byte order: a list's
/// files are looked for only in the runs whose span of paths meets the list's ([`loaded_by`]).
/// No index on the paths: a B-tree entry per path cost more than the row, a GIN index's
/// pending list 2.5 µs a path once merged, and its search for 5,000 paths 70-110 ms (the
/// arrays' `&&` without it, 330 ms). A run of chunks is the first chunks
/// of consecutive files that one transaction committed (for small files, their only chunks);
/// its arrays hold each file's end and rows. 5,000 small files cost one row for the files and
/// about one for each shared load (up to 1 MiB or 1,000 files), where one row per file and per
/// chunk, with their B-tree entries, cost a tenth of the load's time (BENCHMARKS.md, "Many
/// small files, fifth round").
///
/// The primary key names a record's first chunk; the exclusion constraint refuses any two
/// records that both cover a file's first chunk (a run against a run, or against the chunk
/// alone), so that the ledger still refuses to commit a chunk twice; the check keeps a run's
/// arrays as long as its files. A job's files number below 2^32, its ids below 2^31.
const TABLES_4: &str = "
CREATE TABLE IF NOT EXISTS sluice_ledger.job_file_runs (
    job bigint NOT NULL,
    n int NOT NULL,
    tbl text NOT NULL,
    tbl_id text NOT NULL,
    settings text NOT NULL,
    paths text[] NOT NULL,
    sizes bigint[] NOT NULL,
    modified_ns bigint[] NOT NULL,
    fingerprints text[] NOT NULL,
    lo_path text COLLATE \"C\" NOT NULL,
    hi_path text COLLATE \"C\" NOT NULL,
    PRIMARY KEY (job, n));
ALTER TABLE sluice_ledger.job_file_runs ALTER paths SET STORAGE EXTERNAL,
    ALTER sizes SET STORAGE EXTERNAL, ALTER modified_ns SET STORAGE EXTERNAL,
    ALTER fingerprints SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS sluice_ledger.job_chunk_runs (
    job bigint NOT NULL,
    file int NOT NULL,
    start_byte bigint NOT NULL,
    end_byte bigint,
    rows bigint NOT NULL,
    committed timestamptz NOT NULL DEFAULT now(),
    last_file int,
    file_rows bigint[],
    file_ends bigint[],
    PRIMARY KEY (job, file, start_byte),
    CONSTRAINT job_chunk_runs_once EXCLUDE USING gist (CHUNK_SPAN WITH &&) WHERE (start_byte = 0),
    CONSTRAINT job_chunk_runs_shape CHECK (RUN_SHAPE));
CREATE OR REPLACE VIEW sluice_ledger.job_files AS FILES_OF_RUNS;
CREATE OR REPLACE VIEW sluice_ledger.job_chunks AS
    SELECT c.job, c.file, c.start_byte, c.end_byte, c.rows, c.committed
    FROM sluice_ledger.job_chunk_runs c WHERE c.last_file IS NULL
    UNION ALL
    SELECT c.job, (c.file + u.o - 1)::int, 0::bigint, u.end_byte, u.rows, c.committed
    FROM sluice_ledger.job_chunk_runs c,
        unnest(c.file_ends, c.file_rows) WITH ORDINALITY AS u(end_byte, rows, o)
    WHERE c.last_file IS NOT NULL;
";

/// The runs of files unfolded, one row per file: the view `job_files`.
const FILES_OF_RUNS: &str = "SELECT r.job, (r.n + f.o - 1)::int AS n, f.path, r.tbl, r.tbl_id, \
        f.size, f.modified_ns, r.settings, f.fingerprint \
    FROM sluice_ledger.job_file_runs r, \
        unnest(r.paths, r.sizes, r.modified_ns, r.fingerprints) \
            WITH ORDINALITY AS f(path, size, modified_ns, fingerprint, o)";

/// What a run of chunks holds: its first chunk at the start of its file, and each file's rows
/// and end.
const RUN_SHAPE: &str = "last_file IS NULL OR (last_file > file AND start_byte = 0 \
    AND cardinality(file_rows) = last_file - file + 1 \
    AND cardinality(file_ends) = last_file - file + 1)";

/// The files' span a chunk record covers, for the exclusion constraint: its first file to its
/// last, within its job.
const CHUNK_SPAN: &str = "int8range(job * 4294967296 + file, \
    job * 4294967296 + coalesce(last_file, file), '[]')";

/// A ledger of version 1 to 3 made version 4: its tables of one row per file and per chunk
/// renamed out of the views' way, the chunks' table widened into `job_chunk_runs` (its columns
/// added before the constraints that name them: PostgreSQL 12 parses a statement's
/// constraints before it adds its columns), each file made a run of one.
const UPGRADE_TO_4: &str = "
ALTER TABLE sluice_ledger.jobs ADD COLUMN IF NOT EXISTS workers int;
ALTER TABLE sluice_ledger.jobs ADD COLUMN IF NOT EXISTS wire text;
ALTER TABLE sluice_ledger.job_files RENAME TO job_files_3;
ALTER TABLE sluice_ledger.job_chunks RENAME TO job_chunk_runs;
ALTER TABLE sluice_ledger.job_chunk_runs ADD COLUMN last_file int, ADD COLUMN file_rows bigint[],
    ADD COLUMN file_ends bigint[];
ALTER TABLE sluice_ledger.job_chunk_runs
    ADD CONSTRAINT job_chunk_runs_once EXCLUDE USING gist (CHUNK_SPAN WITH &&) WHERE (start_byte = 0),
    ADD CONSTRAINT job_chunk_runs_shape CHECK (RUN_SHAPE);
";

/// The last step of [`UPGRADE_TO_4`], once [`TABLES_4`] made the runs' table and the views:
/// the files moved into runs, and the rights other roles had on the files' table given on the
/// tables and views that replace it (a role that loaded with the old ledger loads with this
/// one).
const UPGRADE_TO_4_FILES: &str = "
INSERT INTO sluice_ledger.job_file_runs (job, n, tbl, tbl_id, settings, paths, sizes,
        modified_ns, fingerprints, lo_path, hi_path)
    SELECT job, n, tbl, tbl_id, settings, ARRAY[path], ARRAY[size], ARRAY[modified_ns],
        ARRAY[fingerprint], path, path
    FROM sluice_ledger.job_files_3;
DO $$DECLARE g record; BEGIN
    FOR g IN SELECT a.privilege_type, a.grantee FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'sluice_ledger.job_files_3'::regclass AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON sluice_ledger.job_file_runs, sluice_ledger.job_files, '
            'sluice_ledger.job_chunks TO %s', g.privilege_type,
            CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END$$;
DROP TABLE sluice_ledger.job_files_3;
UPDATE sluice_ledger.ledger_version SET version = 4;
";

/// The statements that make a new ledger, or bring one of version `current` to this version.
fn ledger_script(current: Option<i32>) -> String {
    let script = match current {
        None => format!("{CREATE} {TABLES_2} {TABLES_3} {TABLES_4}"),
        Some(_) => format!("{TABLES_2} {TABLES_3} {UPGRADE_TO_4} {TABLES_4} {UPGRADE_TO_4_FILES}"),
    };
    script
        .replace("CHUNK_SPAN", CHUNK_SPAN)
        .replace("RUN_SHAPE", RUN_SHAPE)
        .replace("FILES_OF_RUNS", FILES_OF_RUNS)
}

/// Why the ledger cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Refused(String),
    /// Another run recorded a job of the same key first: look again.
    #[error("{0}")]
    Raced(String),
    /// The ledger's tables stayed in use for longer than a bounded wait: try again later.
    #[error("{0}")]
    Busy(String),
}

/// Creates the ledger unless it is there (one session at a time: the creation is serialized
/// by an advisory lock, since `IF NOT EXISTS` races with itself). Returns what it was seen to
/// hold.
pub async fn open(client: &Client) -> Result<Held, LedgerError> {
    // A ledger of this version, or none: made if need be and read in one round trip.
    if let Some(opened) = create_at_once(client, End::Commit).await? {
        return opened.checked(client).await;
    }
    open_carefully(client).await
}

/// A ledger opened by [`open_pending`].
pub enum Pending {
    /// Made now, its transaction still open: [`settle`] commits it or rolls it back.
    Made(Held),
    /// There already, and its transaction committed (it made nothing to take back).
    Opened,
}

/// [`open`]'s one round trip with its transaction left open where it made the ledger: what it
/// made is committed by [`settle`], or rolled back, once the load knows whether its inputs and
/// plan hold. A ledger that was there is committed at once: its creation lock is not held
/// while the inputs are checked. `None`, with the transaction rolled back, where the plain
/// open would not do (a ledger of another version, one the role may not write, or none it may
/// make): the load opens it later, the careful way, which says why not.
pub async fn open_pending(client: &Client) -> Result<Option<Pending>, LedgerError> {
    match create_at_once(client, End::Open).await? {
        Some(opened) if opened.may && opened.made => Ok(Some(Pending::Made(opened.held))),
        Some(opened) if opened.may => {
            client.batch_execute("COMMIT").await?;
            Ok(Some(Pending::Opened))
        }
        _ => {
            client.batch_execute("ROLLBACK").await?;
            Ok(None)
        }
    }
}

/// Ends what [`open_pending`] left open: `COMMIT` where the load goes on, else `ROLLBACK`.
pub async fn settle(client: &Client, keep: bool) -> Result<(), LedgerError> {
    let end = match keep {
        true => "COMMIT",
        false => "ROLLBACK",
    };
    client.batch_execute(end).await.map_err(creation_error)
}

/// How [`create_at_once`]'s statement string ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    Commit,
    /// Its transaction left open, for [`settle`].
    Open,
}

/// [`open`] one question at a time, for whatever [`create_at_once`] does not take: a ledger
/// of an older version (upgraded here), of an unknown shape, or that the role may not use
/// (each refused with what to do).
async fn open_carefully(client: &Client) -> Result<Held, LedgerError> {
    // A schema the role may not use fails every query below with "permission denied for
    // schema": say so with the GRANT that fixes it instead.
    // Both questions go out together (one round trip across a long path); the second's
    // answer counts only where the schema is usable.
    let (usable, present) = tokio::join!(
        client.fetch_one(
            "SELECT NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'sluice_ledger') \
                OR has_schema_privilege('sluice_ledger', 'USAGE')",
            &[],
        ),
        // Whether every table is there, and whether what is there has a version (a ledger of
        // an unknown shape is refused below, never created over).
        client.fetch_one(
            "SELECT to_regclass('sluice_ledger.job_chunks') IS NOT NULL \
                AND to_regclass('sluice_ledger.job_files') IS NOT NULL \
                AND to_regclass('sluice_ledger.jobs') IS NOT NULL \
                AND to_regclass('sluice_ledger.ledger_version') IS NOT NULL, \
                to_regclass('sluice_ledger.jobs') IS NULL \
                OR to_regclass('sluice_ledger.ledger_version') IS NOT NULL",
            &[],
        )
    );
    let usable: bool = usable?.get(0);
    if !usable {
        return Err(LedgerError::Refused(format!(
            "the role may not use the ledger's schema `sluice_ledger`, which another role made. \
             Its owner (or a superuser) can let it: {}",
            grant(client).await?
        )));
    }
    let row = present?;
    let (present, versioned): (bool, bool) = (row.get(0), row.get(1));
    if !versioned {
        return Opened::unknown().checked(client).await;
    }
    if present {
        let opened = read_back(client).await?;
        if opened.version.is_none_or(|v| v >= VERSION) {
            return opened.checked(client).await;
        }
    }
    if let Err(e) = create_or_upgrade(client).await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(creation_error(e));
    }
    read_back(client).await?.checked(client).await
}

/// The ledger's version, the role's rights and what jobs it holds, together (one round
/// trip). The rights count only in a ledger of this version (the check fails on tables that
/// are not there), and a question that failed (no right to read `jobs`, say) counts as "maybe".
async fn read_back(client: &Client) -> Result<Opened, LedgerError> {
    let (version, may, finished) = tokio::join!(
        version(client),
        client.fetch_one(RIGHTS, &[]),
        client.fetch_one(HELD, &[])
    );
    let version = version?;
    Ok(Opened {
        version,
        may: match version == Some(VERSION) {
            true => may?.get(0),
            false => false,
        },
        held: finished.map_or(Held::MAYBE, |r| Held {
            finished: r.get(0),
            empty: r.get(1),
        }),
        made: false,
    })
}

/// Whether any job finished, and whether there is no job at all.
const HELD: &str = "SELECT EXISTS (SELECT 1 FROM sluice_ledger.jobs WHERE state = 'finished'), \
    NOT EXISTS (SELECT 1 FROM sluice_ledger.jobs)";

/// What the ledger was seen to hold when it was opened.
#[derive(Clone, Copy, Debug)]
pub struct Held {
    /// Whether it may hold a finished job (`false` only where it was seen to hold none).
    pub finished: bool,
    /// Whether it was seen to hold no job at all (a ledger just made).
    pub empty: bool,
}

impl Held {
    /// What a ledger that could not be looked at may hold.
    const MAYBE: Held = Held {
        finished: true,
        empty: false,
    };
}

/// Whether the session's role may read and write the ledger's tables.
const RIGHTS: &str = "SELECT has_table_privilege('sluice_ledger.jobs', 'INSERT, UPDATE, SELECT') \
    AND has_table_privilege('sluice_ledger.job_file_runs', 'INSERT, SELECT') \
    AND has_table_privilege('sluice_ledger.job_chunk_runs', 'INSERT, SELECT') \
    AND has_table_privilege('sluice_ledger.job_files', 'SELECT') \
    AND has_table_privilege('sluice_ledger.job_chunks', 'SELECT')";

/// What opening the ledger read: its version, whether the role may write it, and what it
/// holds.
struct Opened {
    version: Option<i32>,
    may: bool,
    held: Held,
    /// Whether its transaction made it (wrote anything at all).
    made: bool,
}

impl Opened {
    /// A ledger whose version cannot be known (its jobs without a version table).
    fn unknown() -> Opened {
        Opened {
            version: None,
            may: false,
            held: Held::MAYBE,
            made: false,
        }
    }

    /// What the ledger holds, or why it cannot be used.
    async fn checked(self, client: &Client) -> Result<Held, LedgerError> {
        if self.version != Some(VERSION) {
            return Err(LedgerError::Refused(format!(
                "the ledger in schema `sluice_ledger` has version {} where this sluice reads \
                 version {VERSION}: use the sluice that made it, or drop it (`DROP SCHEMA \
                 sluice_ledger CASCADE`, which forgets every job) to start a new one",
                self.version
                    .map_or("unknown".to_string(), |v| v.to_string())
            )));
        }
        if !self.may {
            return Err(LedgerError::Refused(format!(
                "the role may not write the ledger's tables in schema `sluice_ledger`. Their \
                 owner (or a superuser) can let it: {}",
                grant(client).await?
            )));
        }
        Ok(self.held)
    }
}

/// The ledger made where there is none (no table of it at all), under its lock, and read back,
/// in one statement string: one round trip, where looking first, [`create_or_upgrade`] and the
/// reads after take seven on a first load and two on later ones. `None` where the ledger read
/// back is not one of this version that the role can read (an older version, a ledger of an
/// unknown shape, a schema the role may not use, no right to create it, no PL/pgSQL): the
/// caller takes the careful way, which upgrades, or says why not.
async fn create_at_once(client: &Client, end: End) -> Result<Option<Opened>, LedgerError> {
    let sql = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{UPGRADE_WAIT}'; \
         SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0); \
         DO $sluice_ledger$ BEGIN \
           IF NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n \
               ON n.oid = c.relnamespace \
             WHERE n.nspname = 'sluice_ledger' AND c.relname IN ('ledger_version', 'jobs')) THEN \
             EXECUTE '{script}'; \
           END IF; \
         END $sluice_ledger$; \
         SELECT (SELECT max(version) FROM sluice_ledger.ledger_version), ({RIGHTS}), h.* \
             , txid_current_if_assigned() IS NOT NULL \
           FROM ({HELD}) h{commit}",
        script = ledger_script(None).replace('\'', "''"),
        commit = match end {
            End::Commit => "; COMMIT",
            End::Open => "",
        }
    );
    let messages = match client.simple_query(&sql).await {
        Ok(m) => m,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return match e.as_db_error().map(|d| d.code().code()) {
                Some("55P03") => Err(LedgerError::Busy(format!(
                    "the ledger in schema `sluice_ledger` was still in use after \
                     {UPGRADE_WAIT}: another session is making or upgrading it, or holds a lock \
                     on its tables (see `pg_locks`); run the command again once that ends"
                ))),
                _ => Ok(None),
            };
        }
    };
    // The last row is the read-back's (the lock's own comes first).
    let row = messages.iter().rev().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
        _ => None,
    });
    let opened = row.map(|r| Opened {
        version: r.get(0).and_then(|v| v.parse().ok()),
        may: r.get(1) == Some("t"),
        held: Held {
            finished: r.get(2) != Some("f"),
            empty: r.get(3) == Some("t"),
        },
        made: r.get(4) != Some("f"),
    });
    Ok(opened.filter(|o| o.version == Some(VERSION)))
}

/// Why making or upgrading the ledger failed, with what to do.
fn creation_error(e: tokio_postgres::Error) -> LedgerError {
    match e.as_db_error() {
        Some(d) if d.code().code() == "42501" => LedgerError::Refused(format!(
            "{}: the role may not create the ledger's schema `sluice_ledger`. Have an owner \
             run `sluice jobs` once, or GRANT CREATE ON DATABASE to the role",
            d.message()
        )),
        Some(d) if d.code().code() == "55P03" => LedgerError::Busy(format!(
            "the ledger in schema `sluice_ledger` needs an upgrade to version {VERSION}, \
             and its tables were still in use after {UPGRADE_WAIT}: by a load running, or \
             by prepared transactions an earlier sluice left (`SELECT gid FROM \
             pg_prepared_xacts`); let that load end, or finish its job with the sluice \
             that began it (the same command)"
        )),
        _ => LedgerError::Db(e),
    }
}

/// Creates the ledger, or upgrades it, under its lock: another session may have done so
/// between this one's look and the lock (two workers starting at once), and the upgrade's
/// `ALTER TABLE` must not run again under sessions already using the tables.
async fn create_or_upgrade(client: &Client) -> Result<(), tokio_postgres::Error> {
    // Read committed whatever the session's default: the look below must see what another
    // session made before this one got the lock. The upgrade's ALTERs wait for the ledger's
    // tables, which an earlier sluice's prepared transactions (or its load still running) may
    // hold: a bounded wait, then advice ([`UPGRADE_WAIT`]).
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{UPGRADE_WAIT}'; \
             SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0)"
        ))
        .await?;
    let done = async {
        // pg_class read as a table, in this statement's snapshot: a name lookup may use a
        // catalog snapshot older than the lock, and miss the ledger another session has just
        // made.
        let present: bool = client
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n \
                    ON n.oid = c.relnamespace \
                 WHERE n.nspname = 'sluice_ledger' AND c.relname = 'ledger_version')",
                &[],
            )
            .await?
            .get(0);
        let current = match present {
            true => version(client).await?,
            false => None,
        };
        if current.is_none_or(|v| v < VERSION) {
            client.batch_execute(&ledger_script(current)).await?;
        }
        client.batch_execute("COMMIT").await
    }
    .await;
    if done.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    done
}

/// The statements that let the session's role use the ledger (reading and writing its jobs,
/// and `sluice jobs forget`'s deletes), ready to paste into psql.
async fn grant(client: &Client) -> Result<String, tokio_postgres::Error> {
    let role: String = client
        .fetch_one("SELECT quote_ident(current_user)", &[])
        .await?
        .get(0);
    Ok(format!(
        "GRANT USAGE ON SCHEMA sluice_ledger TO {role}; GRANT SELECT, INSERT, UPDATE, DELETE ON \
         ALL TABLES IN SCHEMA sluice_ledger TO {role};"
    ))
}

/// The ledger's version, as its table says.
async fn version(client: &Client) -> Result<Option<i32>, tokio_postgres::Error> {
    Ok(client
        .fetch_opt("SELECT max(version) FROM sluice_ledger.ledger_version", &[])
        .await?
        .and_then(|r| r.get(0)))
}

/// Records that job `job` commits the prepared transactions `gids`, in one transaction.
pub async fn decide_commit(
    client: &Client,
    job: i64,
    gids: &[String],
) -> Result<(), tokio_postgres::Error> {
    client
        .run(
            "INSERT INTO sluice_ledger.job_commits (job, gid) SELECT $1, unnest($2::text[]) \
             ON CONFLICT DO NOTHING",
            &[&job, &gids],
        )
        .await?;
    Ok(())
}

/// The prepared transactions job `job` decided to commit (its decision's mark left out).
pub async fn decided(client: &Client, job: i64) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = client
        .fetch(
            "SELECT gid FROM sluice_ledger.job_commits WHERE job = $1 AND gid <> $2",
            &[&job, &decision_mark(job)],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The row of `job_commits` that says a crew's job is decided, beside the prepared
/// transactions it commits (none, where every part was staged or committed). Named as no
/// prepared transaction is: nothing is ever committed under it.
pub fn decision_mark(job: i64) -> String {
    format!("sluice_{job}_decided")
}

const JOB_COLUMNS: &str = "j.id, j.key, j.state, j.message, j.tables, j.chunk_size, j.settings, \
     j.chunks_total, j.bytes_total, \
     to_char(j.started, 'YYYY-MM-DD HH24:MI:SS TZ'), \
     to_char(j.finished, 'YYYY-MM-DD HH24:MI:SS TZ'), \
     (SELECT coalesce(sum(CASE WHEN c.last_file IS NULL THEN 1 \
                               ELSE cardinality(c.file_ends) END), 0)::bigint \
      FROM sluice_ledger.job_chunk_runs c WHERE c.job = j.id), \
     (SELECT coalesce(sum(c.rows), 0)::bigint \
      FROM sluice_ledger.job_chunk_runs c WHERE c.job = j.id), \
     EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND l.classid = 1936484962::oid AND l.objid = j.id::oid AND l.objsubid = 2), \
     (extract(epoch FROM j.started) * 1000000)::bigint";

/// The column of [`JOB_COLUMNS`] that gives when the job started, in microseconds.
const SINCE: usize = 14;

/// Where a job of the ledger stands, for the staging tables that name it.
#[derive(Clone, Copy, Debug)]
pub enum Standing {
    /// This role may not read the ledger.
    Unreadable,
    /// No ledger, or no such job in it.
    Gone,
    /// Whether the same command can still resume it (it is running or failed), and when it
    /// started (microseconds since the epoch: with its number, it names the job even across a
    /// ledger dropped and made again, which numbers its jobs from 1 again).
    Known { resumable: bool, since: i64 },
}

/// Where job `job` stands.
pub async fn standing(client: &Client, job: i64) -> Result<Standing, tokio_postgres::Error> {
    let ledger = client
        .fetch_one(
            "SELECT to_regclass('sluice_ledger.jobs') IS NOT NULL, \
                    to_regclass('sluice_ledger.jobs') IS NULL \
                    OR has_table_privilege('sluice_ledger.jobs', 'SELECT')",
            &[],
        )
        .await?;
    let (exists, readable): (bool, bool) = (ledger.get(0), ledger.get(1));
    if !readable {
        return Ok(Standing::Unreadable);
    }
    if !exists {
        return Ok(Standing::Gone);
    }
    // Its state and start only: this runs in every staging table's transaction.
    let row = client
        .fetch_opt(
            "SELECT j.state IN ('running', 'failed'), \
                    (extract(epoch FROM j.started) * 1000000)::bigint \
             FROM sluice_ledger.jobs j WHERE j.id = $1",
            &[&job],
        )
        .await?;
    Ok(match row {
        Some(r) => Standing::Known {
            resumable: r.get(0),
            since: r.get(1),
        },
        None => Standing::Gone,
    })
}

fn job_of(r: &tokio_postgres::Row) -> Job {
    let state: String = r.get(2);
    let locked: bool = r.get(13);
    let state = match JobState::parse(&state) {
        Some(JobState::Running) if !locked => JobState::Interrupted,
        Some(s) => s,
        None => JobState::Failed,
    };
    Job {
        id: r.get(0),
        key: r.get(1),
        state,
        message: r.get(3),
        tables: r.get(4),
        chunk_size: r.get::<_, i64>(5) as u64,
        settings: r.get(6),
        chunks_total: r.get::<_, i64>(7) as u64,
        bytes_total: r.get::<_, i64>(8) as u64,
        started: r.get(9),
        finished: r.get(10),
        chunks_done: r.get::<_, i64>(11) as u64,
        rows_done: r.get::<_, i64>(12) as u64,
        staged_chunks: 0,
        staged_rows: 0,
    }
}

/// Jobs, newest first: with this key, or all.
pub async fn jobs(client: &Client, key: Option<&str>) -> Result<Vec<Job>, tokio_postgres::Error> {
    // The jobs and the staging tables' records go out together: one round trip.
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM sluice_ledger.jobs j \
         WHERE $1::text IS NULL OR j.key = $1 ORDER BY j.id DESC"
    );
    let params: [&dyn Param; 1] = [&key];
    let (rows, waiting) = tokio::join!(client.fetch(&sql, &params), crate::stage::waiting(client));
    let rows = rows?;
    let mut jobs: Vec<Job> = rows.iter().map(job_of).collect();
    // A staging table is a job's if it names the job and its start (see `Standing`).
    let since: Vec<i64> = rows.iter().map(|r| r.get(SINCE)).collect();
    for meta in waiting? {
        let Some(n) = jobs.iter().position(|j| j.id == meta.job) else {
            continue;
        };
        if since[n] == meta.since {
            let j = &mut jobs[n];
            j.staged_chunks += meta.chunks.len() as u64;
            j.staged_rows += meta.chunks.iter().map(|c| c.rows).sum::<u64>();
        }
    }
    Ok(jobs)
}

pub async fn job_files(
    client: &Client,
    job: i64,
) -> Result<Vec<FileRecord>, tokio_postgres::Error> {
    let rows = client
        .fetch(
            "SELECT path, tbl, tbl_id, size, modified_ns, fingerprint, settings \
             FROM sluice_ledger.job_files \
             WHERE job = $1 ORDER BY n",
            &[&job],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| FileRecord {
            path: r.get(0),
            table: r.get(1),
            table_id: r.get(2),
            size: r.get::<_, i64>(3) as u64,
            modified_ns: r.get(4),
            fingerprint: r.get(5),
            settings: r.get(6),
        })
        .collect())
}

pub async fn job_chunks(
    client: &Client,
    job: i64,
) -> Result<Vec<ChunkRecord>, tokio_postgres::Error> {
    let rows = client
        .fetch(
            "SELECT file, start_byte, end_byte, rows FROM sluice_ledger.job_chunks WHERE job = $1 \
             ORDER BY file, start_byte",
            &[&job],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ChunkRecord {
            file: r.get::<_, i32>(0) as u32,
            start: r.get::<_, i64>(1) as u64,
            end: r.get::<_, Option<i64>>(2).map(|e| e as u64),
            rows: r.get::<_, i64>(3) as u64,
        })
        .collect())
}

/// Files' records as columns, one array each, for the statement that records them all.
struct FileColumns<'a> {
    path: Vec<&'a str>,
    tbl: Vec<&'a str>,
    tbl_id: Vec<&'a str>,
    size: Vec<i64>,
    modified: Vec<i64>,
    fingerprint: Vec<&'a str>,
    settings: Vec<&'a str>,
}

impl<'a> FileColumns<'a> {
    fn of<I>(files: I) -> FileColumns<'a>
    where
        I: IntoIterator<Item = &'a FileRecord>,
        I::IntoIter: Clone,
    {
        let files = files.into_iter();
        FileColumns {
            path: files.clone().map(|f| f.path.as_str()).collect(),
            tbl: files.clone().map(|f| f.table.as_str()).collect(),
            tbl_id: files.clone().map(|f| f.table_id.as_str()).collect(),
            size: files.clone().map(|f| f.size as i64).collect(),
            modified: files.clone().map(|f| f.modified_ns).collect(),
            fingerprint: files.clone().map(|f| f.fingerprint.as_str()).collect(),
            settings: files.map(|f| f.settings.as_str()).collect(),
        }
    }
}

/// Where `items` (in order) break into runs: `joins(a, b)` says whether `b` goes on the run of
/// `a`, the item before it. Each run as the range of its items.
fn runs<T>(items: &[T], joins: impl Fn(&T, &T) -> bool) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for i in 0..items.len() {
        match out.last_mut() {
            Some(r) if joins(&items[i - 1], &items[i]) => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Each run's first and last item, counted from 1, as a statement slices its arrays.
fn bounds(runs: &[std::ops::Range<usize>]) -> (Vec<i32>, Vec<i32>) {
    runs.iter()
        .map(|r| (r.start as i32 + 1, r.end as i32))
        .unzip()
}

/// Records `files` as job `job`'s files numbered `n`, in one statement: consecutive numbers of
/// one table and one set of options make one row ([`TABLES_4`]).
pub(crate) async fn insert_files<'a, I>(
    client: &Client,
    job: i64,
    n: &[i32],
    files: I,
) -> Result<(), tokio_postgres::Error>
where
    I: IntoIterator<Item = &'a FileRecord>,
    I::IntoIter: Clone,
{
    let c = FileColumns::of(files);
    let numbered: Vec<(i32, &str, &str, &str)> = (0..n.len())
        .map(|i| (n[i], c.tbl[i], c.tbl_id[i], c.settings[i]))
        .collect();
    let runs = runs(&numbered, |a, b| {
        b.0 == a.0 + 1 && (b.1, b.2, b.3) == (a.1, a.2, a.3)
    });
    let firsts: Vec<i32> = runs.iter().map(|r| n[r.start]).collect();
    let pick = |col: &[&'a str]| -> Vec<&'a str> { runs.iter().map(|r| col[r.start]).collect() };
    let (from, to) = bounds(&runs);
    let paths = |r: &std::ops::Range<usize>| c.path[r.clone()].iter().copied();
    let lo: Vec<&str> = (runs.iter()).filter_map(|r| paths(r).min()).collect();
    let hi: Vec<&str> = (runs.iter()).filter_map(|r| paths(r).max()).collect();
    client
        .run(
            "INSERT INTO sluice_ledger.job_file_runs (job, n, tbl, tbl_id, settings, paths, \
                sizes, modified_ns, fingerprints, lo_path, hi_path) \
             SELECT $1, r.n, r.tbl, r.tbl_id, r.settings, ($7::text[])[r.a:r.b], \
                ($8::bigint[])[r.a:r.b], ($9::bigint[])[r.a:r.b], ($10::text[])[r.a:r.b], \
                r.lo, r.hi \
             FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::int[], $11::int[], \
                $12::text[], $13::text[]) AS r(n, tbl, tbl_id, settings, a, b, lo, hi)",
            &[
                &job,
                &firsts,
                &pick(&c.tbl),
                &pick(&c.tbl_id),
                &pick(&c.settings),
                &from,
                &c.path,
                &c.size,
                &c.modified,
                &c.fingerprint,
                &to,
                &lo,
                &hi,
            ],
        )
        .await
        .map(drop)
}

/// For each file, the finished job that loaded it as it is now, most recent first (into a
/// table of the same name: whether it is still the same table is [`placements`]' question).
///
/// The finished jobs are read newest first, in batches of 1, 2, 4, ... jobs, and the walk stops
/// once every file has its job. A rerun of the same command (after a `TRUNCATE`, say) finds
/// every file in the newest job, whatever the ledger's history: reading every earlier job's
/// records each time made each rerun slower than the last (a load of 5,000 files about 20 ms
/// slower per earlier job of them).
pub async fn loaded_by(
    client: &Client,
    files: &[FileRecord],
) -> Result<Vec<Option<LoadedBy>>, tokio_postgres::Error> {
    let mut found: Vec<Option<LoadedBy>> = vec![None; files.len()];
    let mut before = (i64::MAX, i64::MAX);
    let mut batch = 1i64;
    loop {
        let pending: Vec<&FileRecord> = (files.iter().zip(&found))
            .filter(|(_, found)| found.is_none())
            .map(|(f, _)| f)
            .collect();
        if pending.is_empty() {
            break;
        }
        let rows = loaded_in_batch(client, &pending, before, batch).await?;
        let jobs = rows
            .iter()
            .map(|r| (r.get::<_, i64>(9), r.get::<_, i64>(6)))
            .collect::<std::collections::BTreeSet<_>>();
        let matched = rows
            .iter()
            .filter(|r| r.get::<_, Option<&str>>(0).is_some());
        let known = first_records(&pending, matched);
        let slots = found.iter_mut().filter(|f| f.is_none());
        for (slot, r) in slots.zip(known) {
            *slot = r.map(|r| LoadedBy {
                job: r.get(6),
                finished: r.get(7),
                file: r.get::<_, i32>(8) as u32,
            });
        }
        // Fewer jobs than asked for: the walk has read them all.
        match jobs.first() {
            Some(&oldest) if jobs.len() as i64 == batch => before = oldest,
            _ => break,
        }
        batch = (batch * 2).min(64);
    }
    Ok(found)
}

/// The records of `files` in the `batch` newest finished jobs that finished before `before`
/// (when, in microseconds, and the job's number), newest first: a file's path, table, size,
/// modification time, fingerprint and settings, then the job, when it finished, the file's
/// number in it, and the finish in microseconds. A job with none of them has one row, whose
/// path is NULL, so that the walk knows where it is.
async fn loaded_in_batch(
    client: &Client,
    files: &[&FileRecord],
    before: (i64, i64),
    batch: i64,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    // Only the runs whose span of paths meets the list's are unfolded; their paths are kept
    // where the list names them (a hashed `= ANY` from PostgreSQL 14), and matched with the
    // files here: the server would plan a join of two unnested arrays blind, as a nested loop
    // (16 s for 5,000 files against 5,000).
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let (Some(lo), Some(hi)) = (paths.iter().min(), paths.iter().max()) else {
        return Ok(Vec::new());
    };
    client
        .fetch(
            "WITH b AS ( \
                SELECT j.id, j.finished, \
                    (extract(epoch FROM j.finished) * 1000000)::bigint AS us \
                FROM sluice_ledger.jobs j \
                WHERE j.state = 'finished' \
                  AND ((extract(epoch FROM j.finished) * 1000000)::bigint, j.id) < ($4, $5) \
                  AND EXISTS (SELECT 1 FROM sluice_ledger.job_file_runs r WHERE r.job = j.id \
                      AND r.lo_path <= $3::text COLLATE \"C\" \
                      AND r.hi_path >= $2::text COLLATE \"C\") \
                ORDER BY 3 DESC, 1 DESC LIMIT $6) \
             SELECT u.path, u.tbl, u.size, u.modified_ns, u.fingerprint, u.settings, b.id, \
                to_char(b.finished, 'YYYY-MM-DD HH24:MI:SS TZ'), u.n, b.us \
             FROM b LEFT JOIN LATERAL ( \
                SELECT f.path, r.tbl, f.size, f.modified_ns, f.fingerprint, r.settings, \
                    (r.n + f.o - 1)::int AS n \
                FROM sluice_ledger.job_file_runs r, \
                    unnest(r.paths, r.sizes, r.modified_ns, r.fingerprints) \
                        WITH ORDINALITY AS f(path, size, modified_ns, fingerprint, o) \
                WHERE r.job = b.id AND r.lo_path <= $3::text COLLATE \"C\" \
                  AND r.hi_path >= $2::text COLLATE \"C\" AND f.path = ANY($1::text[])) u \
                ON true \
             ORDER BY b.us DESC, b.id DESC",
            &[&paths, lo, hi, &before.0, &before.1, &batch],
        )
        .await
}

/// Each file of `files` with the first of `rows` that records it: rows whose first six
/// columns are a file's path, table, size, modification time, fingerprint and settings (its
/// table's id aside, what names a file in the ledger).
pub(crate) fn first_records<'r, F: std::borrow::Borrow<FileRecord>>(
    files: &[F],
    rows: impl IntoIterator<Item = &'r tokio_postgres::Row>,
) -> Vec<Option<&'r tokio_postgres::Row>> {
    let mut wanted: std::collections::HashMap<FileIdentity, Vec<usize>> = Default::default();
    for (i, f) in files.iter().map(std::borrow::Borrow::borrow).enumerate() {
        wanted.entry(f.identity()).or_default().push(i);
    }
    let mut out = vec![None; files.len()];
    for r in rows {
        let id: FileIdentity = (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
        for &i in wanted.get(&id).into_iter().flatten() {
            out[i].get_or_insert(r);
        }
    }
    out
}

/// A relation's generation (`c`, a `pg_class` row): the file nodes of its leaves (itself, or
/// its partitions), which a truncate or a rewrite changes.
const GENERATION: &str = "CASE WHEN c.relkind = 'p' THEN \
    (SELECT string_agg(t.relid::oid::text || ':' || \
        coalesce(pg_relation_filenode(t.relid)::text, '-'), ',' ORDER BY t.relid::oid) \
     FROM pg_partition_tree(c.oid) t WHERE t.isleaf) \
    ELSE c.oid::text || ':' || coalesce(pg_relation_filenode(c.oid)::text, '-') END";

/// How long reading a relation's state waits for a lock (a session altering the table, say)
/// before it says it cannot tell.
const STATE_LOCK_WAIT: &str = "10s";

/// A relation's state now, `None` when it does not exist: its oid, the file nodes of its
/// leaves (itself, or its partitions), and whether it has a row (`None` when the role may not
/// read it, or a lock held elsewhere keeps it from looking).
pub async fn relation_state(
    client: &Client,
    relation: &str,
) -> Result<Option<RelationState>, tokio_postgres::Error> {
    // A name sluice quoted (as the ledger and the load give it) is looked at in the same round
    // trip as its catalog row; another is looked at by the name the server gives back.
    let early = quoted_name(relation).then(|| look_sql(relation));
    let named: [&dyn Param; 1] = [&relation];
    let catalog = format!(
        "SELECT c.oid::text, c.oid::regclass::text, {GENERATION} FROM pg_class c \
         WHERE c.oid = to_regclass($1)"
    );
    let (row, looked) = futures_util::join!(client.fetch_opt(&catalog, &named), async {
        match &early {
            Some(sql) => Some(has_rows(client, sql).await),
            None => None,
        }
    });
    let Some(row) = row? else { return Ok(None) };
    let name: String = row.get(1);
    let has_rows = match looked {
        Some(looked) => looked?,
        None => has_rows(client, &look_sql(&name)).await?,
    };
    Ok(Some(RelationState {
        name: name.clone(),
        id: row.get(0),
        generation: row.get(2),
        has_rows,
    }))
}

/// Whether relation `name` has a row.
fn look_sql(name: &str) -> String {
    format!("SELECT {}", look_of(name))
}

/// The expression that tells whether relation `name` has a row.
fn look_of(name: &str) -> String {
    format!("EXISTS (SELECT 1 FROM {name})")
}

/// Each name of `names` once, in order.
fn distinct_names<'a>(names: impl Iterator<Item = &'a String>) -> Vec<&'a String> {
    let mut distinct: Vec<&String> = names.collect();
    distinct.sort();
    distinct.dedup();
    distinct
}

/// Runs `look` ([`look_sql`]) in a read-only transaction of its own whose lock waits are
/// bounded: `None` where the role may not read the relation, or a lock held elsewhere keeps it
/// from looking (or it is not there). The three statements go out together (tokio-postgres
/// sends each when first polled, in order): one round trip; a failed look leaves the
/// transaction aborted and ROLLBACK ends it.
async fn has_rows(client: &Client, look: &str) -> Result<Option<bool>, tokio_postgres::Error> {
    let begin = format!("BEGIN READ ONLY; SET LOCAL lock_timeout = '{STATE_LOCK_WAIT}'");
    let (began, looked, ended) = futures_util::join!(
        client.batch_execute(&begin),
        client.fetch_one(look, &[]),
        client.batch_execute("ROLLBACK")
    );
    began?;
    let has_rows = match looked {
        Ok(r) => Some(r.get(0)),
        Err(e) if e.as_db_error().is_some() => None,
        Err(e) => return Err(e),
    };
    ended?;
    Ok(has_rows)
}

/// Whether `name` is one or two double-quoted identifiers joined by a dot (quotes inside
/// doubled), as sluice writes a table's name: safe to put in a statement as it is.
fn quoted_name(name: &str) -> bool {
    let mut parts = 0;
    let mut rest = name;
    loop {
        let Some(body) = rest.strip_prefix('"') else {
            return false;
        };
        let mut chars = body.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => match body[i + 1..].starts_with('"') {
                    true => {
                        chars.next();
                    }
                    false => break Some(i),
                },
                Some(_) => {}
                None => break None,
            }
        };
        let Some(end) = end.filter(|&e| e > 0) else {
            return false;
        };
        parts += 1;
        rest = &body[end + 1..];
        match rest.strip_prefix('.') {
            Some(more) if parts < 2 => rest = more,
            _ => return parts <= 2 && rest.is_empty(),
        }
    }
}

/// Relations' states, by name as asked.
type States = std::collections::HashMap<String, Option<RelationState>>;

/// The state now of each distinct relation of `relations`, each read once. The relations'
/// questions go out together (a load of eight tables across a long path: one round trip, or
/// two where a name is not one sluice quoted, not sixteen); each relation's own look still runs
/// in its own read-only transaction, whose statements are queued together.
async fn relation_states(
    client: &Client,
    relations: &[String],
) -> Result<States, tokio_postgres::Error> {
    let distinct = distinct_names(relations.iter());
    let states =
        futures_util::future::join_all(distinct.iter().map(|r| relation_state(client, r))).await;
    distinct
        .into_iter()
        .zip(states)
        .map(|(r, state)| Ok((r.clone(), state?)))
        .collect()
}

/// Where finished job `job` put the rows of its files `files`, then and now.
pub async fn placements(
    client: &Client,
    job: i64,
    files: &[u32],
) -> Result<Vec<PlacementCheck>, tokio_postgres::Error> {
    let files: Vec<i32> = files.iter().map(|&f| f as i32).collect();
    let rows = client
        .fetch(
            "SELECT f.n, coalesce(p.relation, f.tbl), coalesce(p.rel_id, f.tbl_id), \
                p.generation, p.has_rows \
             FROM sluice_ledger.job_files f LEFT JOIN LATERAL ( \
               SELECT * FROM sluice_ledger.job_places p \
               WHERE p.job = f.job AND p.file IN (f.n, -1) ORDER BY p.file DESC LIMIT 1) p \
               ON true \
             WHERE f.job = $1 AND f.n = ANY($2) ORDER BY f.n",
            &[&job, &files],
        )
        .await?;
    let relations: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
    let now = relation_states(client, &relations).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let relation: String = r.get(1);
        let state = now.get(&relation).cloned().flatten();
        out.push(PlacementCheck {
            file: r.get::<_, i32>(0) as u32,
            relation: relation.clone(),
            then: RelationState {
                name: relation.clone(),
                id: r.get(2),
                generation: r.get(3),
                has_rows: r.get(4),
            },
            now: state,
        });
    }
    Ok(out)
}

/// Takes job `job`'s lock for this session (until it ends), or says who holds it. A holder
/// running a statement may be a killed sluice's session, which the server ends once that
/// statement does (a publish, a COMMIT sent just before the kill): it is waited for, up to
/// [`BUSY_HOLDER_WAIT`]; once its statement is done, for [`ENDING_HOLDER_GRACE`] more, while
/// its session goes. An idle holder is a live sluice (or one cut off from the server):
/// refused at once. A holder gone between the two questions is asked again.
pub async fn take_lock(client: &Client, job: i64) -> Result<(), LedgerError> {
    let start = std::time::Instant::now();
    // The holder last seen busy, and since when it has been idle.
    let mut busy_pid: Option<i32> = None;
    let mut idle_since: Option<std::time::Instant> = None;
    loop {
        let got: bool = client
            .fetch_one(
                "SELECT pg_try_advisory_lock($1, $2)",
                &[&LOCK_CLASS, &(job as i32)],
            )
            .await?
            .get(0);
        if got {
            return Ok(());
        }
        let holder = lock_holder(client, job).await?;
        let busy = holder.as_ref().is_none_or(|h| h.active);
        let ending = match &holder {
            Some(h) if !h.active && busy_pid == Some(h.pid) => {
                idle_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    < ENDING_HOLDER_GRACE
            }
            _ => false,
        };
        if let Some(h) = holder.as_ref().filter(|h| h.active) {
            (busy_pid, idle_since) = (Some(h.pid), None);
        }
        if !(busy || ending) || start.elapsed() >= BUSY_HOLDER_WAIT {
            return Err(LedgerError::Refused(held_by(job, holder)));
        }
        let pause = if holder.is_some() { 100 } else { 10 };
        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
    }
}

/// The session holding a job's lock: its process, in words, and whether it runs a statement.
struct Holder {
    pid: i32,
    what: String,
    active: bool,
}

/// The session holding job `job`'s lock (one of them, the longest connected, for a crew's).
async fn lock_holder(client: &Client, job: i64) -> Result<Option<Holder>, LedgerError> {
    let row = client
        .fetch_opt(
            "SELECT a.pid, format('process %s of %s (%s), connected since %s, %s for %s s', \
                    a.pid, coalesce(a.client_addr::text, 'a local socket'), a.application_name, \
                    to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), \
                    coalesce(a.state, 'unknown'), \
                    round(extract(epoch FROM now() - a.state_change))), \
                    a.state = 'active' \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = ($1::bigint)::oid \
               AND l.objid = ($2::bigint)::oid AND l.objsubid = 2 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY a.backend_start LIMIT 1",
            &[&(LOCK_CLASS as i64), &job],
        )
        .await?;
    Ok(row.map(|r| Holder {
        pid: r.get(0),
        what: r.get(1),
        active: r.get::<_, Option<bool>>(2).unwrap_or(false),
    }))
}

/// The refusal of a job another session holds.
fn held_by(job: i64, holder: Option<Holder>) -> String {
    let Some(Holder { pid, what, .. }) = holder else {
        return format!(
            "job {job} is being run by another sluice now (server process unknown); wait for it, \
             or stop it"
        );
    };
    // A sluice cut off by its network leaves its session to the server, which may not notice
    // for hours (its TCP keepalives): say how to end it.
    format!(
        "job {job} is being run by another sluice now (server {what}); wait for it, or stop \
         it. If that sluice is gone and the server has not noticed (its machine or its network \
         failed), end its session, and run this command again: SELECT pg_terminate_backend({pid})"
    )
}

/// Releases job `job`'s lock held by this session.
async fn unlock(client: &Client, job: i64) -> Result<(), tokio_postgres::Error> {
    client
        .run(UNLOCK, &[&LOCK_CLASS, &(job as i32)])
        .await
        .map(drop)
}

/// Releases the job's lock ([`unlock`]) only where the finish of [`finish_at_once`] committed
/// (its [`FINISHED_MARK`]): sent behind a finish that may roll back, whose caller then goes on
/// under the lock.
async fn unlock_if_finished(client: &Client, job: i64) -> Result<(), tokio_postgres::Error> {
    let sql = format!("{UNLOCK} AND current_setting('{FINISHED_MARK}', true) = $3");
    client
        .run(&sql, &[&LOCK_CLASS, &(job as i32), &job.to_string()])
        .await
        .map(drop)
}

/// Releases the job's lock as this session holds it: exclusive for a single process, shared
/// for a crew's worker (`crate::crew`); releasing one not held would only warn.
const UNLOCK: &str = "SELECT CASE WHEN l.mode = 'ExclusiveLock' \
        THEN pg_advisory_unlock($1::int, $2::int) \
        ELSE pg_advisory_unlock_shared($1::int, $2::int) END \
     FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() \
        AND l.classid = ($1::int::bigint)::oid AND l.objid = ($2::int::bigint)::oid \
        AND l.objsubid = 2";

/// Opens a new job's transaction with its row, and returns its id and the server's log
/// position then: the first half of the job's start, whose second, [`record_files`], must
/// follow on the same connection. The row goes in under the job key's lock ([`KEY_CLASS`],
/// held until that transaction ends) and only if no job of the key newer than
/// [`JobSpec::newest`] is there: else [`LedgerError::Raced`], and the load looks again.
pub async fn begin_row(
    client: &Client,
    spec: &JobSpec,
    tables: &[String],
) -> Result<(i64, String), LedgerError> {
    let done = async {
        // BEGIN, the key's lock and the job's row go out together: one round trip across a
        // long path. Read committed whatever the session's default, so that the row's check
        // sees what a run that held the lock before committed.
        let (chunk_size, chunks, bytes, newest) = (
            spec.chunk_size as i64,
            spec.chunks_total as i64,
            spec.bytes_total as i64,
            spec.newest.unwrap_or(0),
        );
        let job: [&dyn Param; 7] = [
            &spec.key,
            &tables,
            &chunk_size,
            &spec.settings,
            &chunks,
            &bytes,
            &newest,
        ];
        let lock: [&dyn Param; 2] = [&KEY_CLASS, &key_lock(&spec.key)];
        let begin =
            format!("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{KEY_WAIT}'");
        // In the statements' order: the lock's error, not the aborted transaction's after it.
        let (_, _, job, lsn) = tokio::try_join!(
            biased;
            client.batch_execute(&begin),
            client.run("SELECT pg_advisory_xact_lock($1, $2)", &lock),
            client.fetch_opt(
                "INSERT INTO sluice_ledger.jobs (key, state, tables, chunk_size, settings, \
                    chunks_total, bytes_total) \
                 SELECT $1, 'running', $2, $3, $4, $5, $6 WHERE NOT EXISTS \
                    (SELECT 1 FROM sluice_ledger.jobs WHERE key = $1 AND id > $7) \
                 RETURNING id",
                &job,
            ),
            client.fetch_one("SELECT pg_current_wal_lsn()::text", &[])
        )?;
        Ok::<_, tokio_postgres::Error>((job.map(|r| r.get(0)), lsn.get(0)))
    }
    .await;
    let failed = match done {
        Ok((Some(job), lsn)) => return Ok((job, lsn)),
        Ok((None, _)) => LedgerError::Raced(sluice_core::ledger::RECORDED_SINCE_LOOKED.into()),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            LedgerError::Refused(format!(
                "recording the job waited {KEY_WAIT} for a lock: another run of the same command \
                 recording its job holds the job's key (advisory lock classid {KEY_CLASS}, objid \
                 {} in `pg_locks`), or a session holds a lock on the ledger's tables; wait for \
                 it, or end it",
                key_lock(&spec.key) as u32
            ))
        }
        Err(e) => e.into(),
    };
    let _ = client.batch_execute("ROLLBACK").await;
    Err(failed)
}

/// The key's advisory lock number: its first 32 bits (the key is a hex digest).
fn key_lock(key: &str) -> i32 {
    key.get(..8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or(0) as i32
}

/// The second half of the job's start ([`begin_row`]): its files, its lock and its COMMIT.
/// Its statements are all sent at its first poll, so that whatever the connection is asked
/// next runs after the job's transaction ended.
pub async fn record_files(
    client: &Client,
    id: i64,
    files: &[FileRecord],
) -> Result<(), LedgerError> {
    // Every file in one statement, the job's lock and the COMMIT behind it: one round trip.
    // A failed insert fails the lock's statement and turns the COMMIT into a rollback (the
    // server's rule for a failed transaction block); a failed COMMIT gives the lock back.
    let n: Vec<i32> = (0..files.len() as i32).collect();
    let lock: [&dyn Param; 2] = [&LOCK_CLASS, &(id as i32)];
    // The lock before the COMMIT: the moment the job's row is seen (by a run of the same
    // command that waited on the key's lock), its lock is held, so that run finds it running,
    // not interrupted.
    let (files, locked, committed) = futures_util::join!(
        insert_files(client, id, &n, files),
        client.fetch_one("SELECT pg_try_advisory_lock($1, $2)", &lock),
        client.batch_execute("COMMIT")
    );
    let got = locked.as_ref().is_ok_and(|r| r.get::<_, bool>(0));
    if let Err(e) = files.and(committed) {
        if got {
            let _ = unlock(client, id).await;
        }
        return Err(e.into());
    }
    if !got {
        // Taken already (or the statement failed): the lock's own path says by whom.
        take_lock(client, id).await?;
    }
    Ok(())
}

/// Takes job `job`'s lock for this session, then waits for what its earlier runs left on the
/// server to end ([`end_earlier_streams`]): what a run or a command then reads of the job
/// stays true. Returns what it ended, in words.
pub async fn hold(client: &Client, job: i64) -> Result<Option<String>, LedgerError> {
    take_lock(client, job).await?;
    end_earlier_streams(client, job).await
}

/// Holds an unfinished job ([`hold`]) and marks it running again. Returns what it ended, in
/// words.
pub async fn resume(client: &Client, job: i64) -> Result<Option<String>, LedgerError> {
    let ended = hold(client, job).await?;
    let marked = client
        .run(
            "UPDATE sluice_ledger.jobs SET state = 'running', message = NULL, updated = now() \
             WHERE id = $1 AND state <> 'finished'",
            &[&job],
        )
        .await?;
    if marked == 0 {
        // Its run's end landed while this one waited for its lock or its sessions.
        let _ = unlock(client, job).await;
        return Err(LedgerError::Raced(
            sluice_core::ledger::finished_since_looked(job),
        ));
    }
    Ok(ended)
}

/// The sessions of job `job`'s earlier runs' streams (other than this session) still on the
/// server, with what each runs: a killed run's streams end once their statement does.
async fn earlier_streams(client: &Client, job: i64) -> Result<Vec<(i32, String)>, LedgerError> {
    let rows = client
        .fetch(
            &format!(
                "SELECT l.pid, coalesce(a.state, 'unknown') || ' for ' \
                    || coalesce(round(extract(epoch FROM now() - a.state_change))::text, '?') \
                    || ' s: ' || coalesce(left(a.query, 60), '') \
                 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE {EARLIER_STREAM_LOCK} ORDER BY l.pid"
            ),
            &[&i64::from(STREAM_CLASS), &job],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The locks (`pg_locks l`) of job `$2`'s earlier streams (class `$1`) held by other sessions
/// of this database.
const EARLIER_STREAM_LOCK: &str = "l.locktype = 'advisory' AND l.granted \
     AND l.classid = ($1::bigint)::oid AND l.objid = ($2::bigint)::oid \
     AND l.objsubid = 2 AND l.pid <> pg_backend_pid() \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// Ends the sessions that still hold job `job`'s earlier streams' locks, in one statement
/// (a process that ended since it was listed is not signalled, nor its number's next owner).
/// A role that may not end them gets the server's reason.
async fn terminate_earlier_streams(client: &Client, job: i64) -> Result<(), String> {
    let sql =
        format!("SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE {EARLIER_STREAM_LOCK}");
    match client.fetch(&sql, &[&i64::from(STREAM_CLASS), &job]).await {
        Ok(_) => Ok(()),
        Err(e) if e.as_db_error().is_some() => Err(crate::connect::chain(&e)),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until no stream session of job `job`'s earlier runs is left: up to
/// [`EARLIER_STREAMS_WAIT`] for them to end on their own (their statement ends, the server
/// sees the client gone), then ends them (`pg_terminate_backend`: their process no longer
/// holds the job, this one does) and waits up to [`EARLIER_STREAMS_END`] more. A COMMIT they
/// ran lands before this returns, so the ledger read next is the whole truth. Returns what it
/// had to end, in words; refuses, saying how to end them, when they outlast the wait.
async fn end_earlier_streams(client: &Client, job: i64) -> Result<Option<String>, LedgerError> {
    let start = std::time::Instant::now();
    let mut ended: Vec<(i32, String)> = Vec::new();
    loop {
        let left = earlier_streams(client, job).await?;
        if left.is_empty() {
            return Ok((!ended.is_empty()).then(|| ended_note(job, &ended)));
        }
        let waited = start.elapsed();
        if ended.is_empty() && waited >= EARLIER_STREAMS_WAIT {
            if let Err(why) = terminate_earlier_streams(client, job).await {
                return Err(LedgerError::Refused(streams_outlasted(job, &left, &why)));
            }
            ended = left;
        } else if waited >= EARLIER_STREAMS_WAIT + EARLIER_STREAMS_END {
            let why = format!(
                "they had not ended {} s after being asked to",
                EARLIER_STREAMS_END.as_secs()
            );
            return Err(LedgerError::Refused(streams_outlasted(job, &left, &why)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Sessions (process, what it runs), in words.
fn sessions_in_words(sessions: &[(i32, String)]) -> String {
    let list: Vec<String> = sessions
        .iter()
        .map(|(pid, what)| format!("process {pid}, {what}"))
        .collect();
    list.join("; ")
}

/// What [`end_earlier_streams`] ended, in words.
fn ended_note(job: i64, ended: &[(i32, String)]) -> String {
    format!(
        "job {job}'s last run left {} server session(s) of its streams running after {} s; \
         sluice ended them before reading what the job had committed: {}",
        ended.len(),
        EARLIER_STREAMS_WAIT.as_secs(),
        sessions_in_words(ended)
    )
}

/// The refusal when an earlier run's stream sessions could not be ended (`why`).
fn streams_outlasted(job: i64, left: &[(i32, String)], why: &str) -> String {
    let pids: Vec<String> = left.iter().map(|(pid, _)| pid.to_string()).collect();
    format!(
        "job {job}'s last run left server sessions of its streams running after {} s ({}), and \
         sluice could not end them: {why}. What they commit decides what this run must load, so \
         it does not start. Ask the server's administrator to end them (SELECT \
         pg_terminate_backend(p) FROM unnest(ARRAY[{}]) p), then run the same command again",
        EARLIER_STREAMS_WAIT.as_secs(),
        sessions_in_words(left),
        pids.join(", ")
    )
}

/// Ends a job in `state`.
pub async fn end(
    client: &Client,
    job: i64,
    state: JobState,
    message: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    client
        .run(
            "UPDATE sluice_ledger.jobs SET state = $2, message = $3, updated = now(), \
                finished = CASE WHEN $2 = 'finished' THEN now() END \
             WHERE id = $1",
            &[&job, &state.as_str(), &message],
        )
        .await?;
    unlock(client, job).await
}

/// The `file` of a `job_places` row that stands for every file of its job: written when all
/// of them went to one relation (many small files into one table), so that 100,000 files
/// cost one row, not 100,000. A job's own rows for a file come first when reading.
const EVERY_FILE: i32 = -1;

/// A `job_places` row to write: a file of the job, or [`EVERY_FILE`].
struct PlaceRow<'a> {
    file_or_all: i32,
    relation: &'a String,
}

/// The rows that record `placements`: one for the whole job when every file went to one
/// relation that exists now, else one per file.
fn one_relation_for_all<'a>(
    placements: &'a [Placement],
    exists: &dyn Fn(&String) -> bool,
) -> Vec<PlaceRow<'a>> {
    let first = placements.first().map(|p| &p.relation);
    let shared = first.filter(|r| {
        placements.len() > 1 && placements.iter().all(|p| &p.relation == *r) && exists(r)
    });
    match shared {
        Some(relation) => vec![PlaceRow {
            file_or_all: EVERY_FILE,
            relation,
        }],
        None => placements
            .iter()
            .map(|p| PlaceRow {
                file_or_all: p.file as i32,
                relation: &p.relation,
            })
            .collect(),
    }
}

/// Marks a job finished, with where its files' rows went and each relation's state now, in
/// one transaction.
pub async fn finish(
    client: &Client,
    job: i64,
    placements: &[Placement],
) -> Result<(), tokio_postgres::Error> {
    if finish_at_once(client, job, placements).await? {
        return Ok(());
    }
    let named: Vec<String> = placements.iter().map(|p| p.relation.clone()).collect();
    let states = relation_states(client, &named).await?;
    let (mut files, mut relations, mut ids, mut generations, mut has_rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let exists = |r: &String| matches!(states.get(r), Some(Some(_)));
    for p in one_relation_for_all(placements, &exists) {
        let Some(Some(state)) = states.get(p.relation) else {
            continue;
        };
        files.push(p.file_or_all);
        relations.push(p.relation.clone());
        ids.push(state.id.clone());
        generations.push(state.generation.clone());
        has_rows.push(state.has_rows);
    }
    // Pipelined: the six go out together, one round trip across a long path, not six. A
    // statement that fails aborts the transaction, the ones after it fail too, the COMMIT
    // then rolls back (the server's rule for a failed transaction block), and the first
    // error is the one returned. The job's lock goes either way: the run is over.
    let places: [&dyn Param; 6] = [&job, &files, &relations, &ids, &generations, &has_rows];
    let (done, committed, unlocked) = futures_util::join!(
        finish_statements(client, &places),
        client.batch_execute("COMMIT"),
        unlock(client, job)
    );
    done.and(committed).and(unlocked)
}

/// [`finish`] in one round trip, where every relation's name is one sluice quoted: each
/// relation's state is read by the server in the transaction that records it (its look under
/// the same bounded lock wait as [`has_rows`]'s, which here bounds the ledger's own statements
/// too). `false`, with nothing changed and the job's lock still held, where the server refused
/// (a look the role may not make, a relation gone since, or a lock that kept it from looking,
/// which the two-step way then waits for again): the two-step way then records what it can
/// tell.
async fn finish_at_once(
    client: &Client,
    job: i64,
    placements: &[Placement],
) -> Result<bool, tokio_postgres::Error> {
    let distinct = distinct_names(placements.iter().map(|p| &p.relation));
    if distinct.is_empty() || !distinct.iter().all(|r| quoted_name(r)) {
        return Ok(false);
    }
    let rows = one_relation_for_all(placements, &|_| true);
    let files: Vec<i32> = rows.iter().map(|p| p.file_or_all).collect();
    let relations: Vec<&String> = rows.iter().map(|p| p.relation).collect();
    let mut params: Vec<&dyn Param> = vec![&job, &files, &relations];
    params.extend(distinct.iter().map(|r| r as &dyn Param));
    // The mark is cleared on its own, then set in the transaction: a rollback takes it back,
    // so that the lock is released behind the COMMIT only where the COMMIT kept the finish.
    let clear = format!("SELECT set_config('{FINISHED_MARK}', '', false)");
    let begin = format!("BEGIN; SET LOCAL lock_timeout = '{STATE_LOCK_WAIT}'");
    let mark = format!("SELECT set_config('{FINISHED_MARK}', $1::text, false)");
    let places = places_read_by_the_server(&distinct);
    let (done, committed, unlocked) = futures_util::join!(
        async {
            tokio::try_join!(
                client.batch_execute(&clear),
                client.batch_execute(&begin),
                client.run(FINISH_DELETE, &params[..1]),
                client.run(&places, &params),
                client.run(FINISH_UPDATE, &params[..1]),
                client.run(&mark, &params[..1])
            )
        },
        client.batch_execute("COMMIT"),
        unlock_if_finished(client, job)
    );
    match (done, committed) {
        // The server's refusal aborted the transaction, and the COMMIT rolled it back.
        (Err(e), Ok(())) if e.as_db_error().is_some() => unlocked.map(|()| false),
        (done, committed) => {
            let finished = done.and(committed).and(unlocked);
            if finished.is_err() {
                // The run is over either way: the job's lock goes, as in [`finish`].
                let _ = unlock(client, job).await;
            }
            finished.map(|_| true)
        }
    }
}

/// A session setting that says the finish of [`finish_at_once`] committed: the job's id, set
/// in its transaction.
const FINISHED_MARK: &str = "sluice.finished_job";

/// The job's places, cleared before they are written again.
const FINISH_DELETE: &str = "DELETE FROM sluice_ledger.job_places WHERE job = $1";

/// The job's row, finished.
const FINISH_UPDATE: &str = "UPDATE sluice_ledger.jobs SET state = 'finished', message = NULL, \
    updated = now(), finished = now() WHERE id = $1";

/// The `INSERT` of [`finish_at_once`]: the rows' files and relations (`$2`, `$3`), each
/// relation's id and generation from the catalog, and whether it has a row, each looked at by
/// the name it was given (`$4` on: `distinct`, in order, every one a name sluice quoted). A
/// relation not there now fails the statement (its look names it), and [`finish`] takes the
/// two-step way, which leaves it out.
fn places_read_by_the_server(distinct: &[&String]) -> String {
    let looks: String = distinct
        .iter()
        .enumerate()
        .map(|(i, r)| format!(" WHEN ${} THEN {}", i + 4, look_of(r)))
        .collect();
    format!(
        "INSERT INTO sluice_ledger.job_places (job, file, relation, rel_id, generation, has_rows) \
         SELECT $1, p.file, p.relation, c.oid::text, {GENERATION}, CASE p.relation{looks} END \
         FROM unnest($2::int[], $3::text[]) AS p(file, relation) \
         JOIN pg_class c ON c.oid = to_regclass(p.relation) ON CONFLICT DO NOTHING"
    )
}

/// The statements of [`finish`], in the transaction it commits.
async fn finish_statements(
    client: &Client,
    places: &[&dyn Param; 6],
) -> Result<(), tokio_postgres::Error> {
    tokio::try_join!(
        client.batch_execute("BEGIN"),
        client.run(FINISH_DELETE, &places[..1]),
        client.run(
            "INSERT INTO sluice_ledger.job_places \
                (job, file, relation, rel_id, generation, has_rows) \
             SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], \
                $6::boolean[]) ON CONFLICT DO NOTHING",
            places,
        ),
        client.run(FINISH_UPDATE, &places[..1])
    )
    .map(drop)
}

/// Removes a job that no process runs, with its files and chunk records.
pub async fn forget(client: &Client, job: i64) -> Result<(), LedgerError> {
    let exists: bool = client
        .fetch_one(
            "SELECT EXISTS (SELECT 1 FROM sluice_ledger.jobs WHERE id = $1)",
            &[&job],
        )
        .await?
        .get(0);
    if !exists {
        return Err(LedgerError::Refused(format!(
            "there is no job {job} in this database (`sluice jobs` lists them)"
        )));
    }
    take_lock(client, job).await?;
    let removed = client
        .batch_execute(&format!(
            "BEGIN; DELETE FROM sluice_ledger.job_chunk_runs WHERE job = {job}; \
             DELETE FROM sluice_ledger.job_commits WHERE job = {job}; \
             DELETE FROM sluice_ledger.job_places WHERE job = {job}; \
             DELETE FROM sluice_ledger.job_claims WHERE job = {job}; \
             DELETE FROM sluice_ledger.job_workers WHERE job = {job}; \
             DELETE FROM sluice_ledger.job_file_runs WHERE job = {job}; \
             DELETE FROM sluice_ledger.jobs WHERE id = {job}; COMMIT"
        ))
        .await;
    if let Err(e) = removed {
        let _ = client.batch_execute("ROLLBACK").await;
        let _ = unlock(client, job).await;
        return Err(e.into());
    }
    Ok(unlock(client, job).await?)
}

/// Inserts chunk records in the open transaction of `client`, in one statement: the first
/// chunks of consecutive files make one row, a run ([`TABLES_4`]).
pub async fn record(
    client: &Client,
    job: i64,
    chunks: &[ChunkRecord],
) -> Result<(), tokio_postgres::Error> {
    if chunks.is_empty() {
        return Ok(());
    }
    let mut chunks = chunks.to_vec();
    chunks.sort_by_key(|c| (c.file, c.start));
    let runs = runs(&chunks, |a, b| {
        a.start == 0 && b.start == 0 && b.file == a.file + 1
    });
    let first = |r: &std::ops::Range<usize>| &chunks[r.start];
    let alone = |r: &std::ops::Range<usize>| r.len() == 1;
    let files: Vec<i32> = runs.iter().map(|r| first(r).file as i32).collect();
    let starts: Vec<i64> = runs.iter().map(|r| first(r).start as i64).collect();
    let ends: Vec<Option<i64>> = (runs.iter())
        .map(|r| first(r).end.filter(|_| alone(r)).map(|e| e as i64))
        .collect();
    let rows: Vec<i64> = (runs.iter())
        .map(|r| chunks[r.clone()].iter().map(|c| c.rows as i64).sum())
        .collect();
    let last: Vec<Option<i32>> = (runs.iter())
        .map(|r| (!alone(r)).then(|| chunks[r.end - 1].file as i32))
        .collect();
    let each_rows: Vec<i64> = chunks.iter().map(|c| c.rows as i64).collect();
    let each_end: Vec<Option<i64>> = chunks.iter().map(|c| c.end.map(|e| e as i64)).collect();
    let (from, to) = bounds(&runs);
    client
        .run(
            "INSERT INTO sluice_ledger.job_chunk_runs (job, file, start_byte, end_byte, rows, \
                last_file, file_rows, file_ends) \
             SELECT $1, r.file, r.start_byte, r.end_byte, r.rows, r.last_file, \
                CASE WHEN r.last_file IS NOT NULL THEN ($7::bigint[])[r.a:r.b] END, \
                CASE WHEN r.last_file IS NOT NULL THEN ($8::bigint[])[r.a:r.b] END \
             FROM unnest($2::int[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], \
                $9::int[], $10::int[]) AS r(file, start_byte, end_byte, rows, last_file, a, b)",
            &[
                &job, &files, &starts, &ends, &rows, &last, &each_rows, &each_end, &from, &to,
            ],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_names_quoted_as_sluice_quotes_them_go_into_a_statement_as_they_are() {
        for ok in [r#""lineitem""#, r#""public"."lineitem""#, r#""a""b"."c.d""#] {
            assert!(super::quoted_name(ok), "{ok}");
        }
        for bad in [
            "lineitem",
            r#""a"."b"."c""#,
            r#""a") x; --"#,
            r#""a"b"#,
            r#""unclosed"#,
            r#""""#,
            r#""a"."#,
            r#""a" "#,
            r#"""."t""#,
        ] {
            assert!(!super::quoted_name(bad), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn runs_break_where_an_item_does_not_follow_the_one_before() {
        let n = [0, 1, 2, 5, 6, 9];
        assert_eq!(runs(&n, |a, b| b == &(a + 1)), vec![0..3, 3..5, 5..6]);
        assert_eq!(bounds(&[0..3, 3..5, 5..6]), (vec![1, 4, 6], vec![3, 5, 6]));
        assert!(runs(&[0; 0], |_, _| true).is_empty());
    }

    #[test]
    fn the_scripts_name_no_placeholder_and_end_at_this_version() {
        for current in [None, Some(1), Some(3)] {
            let script = ledger_script(current);
            assert!(!script.contains("CHUNK_SPAN") && !script.contains("FILES_OF_RUNS"));
            assert!(script.contains("job_chunk_runs_once"));
        }
        assert!(ledger_script(None).contains(&format!("SELECT {VERSION} WHERE")));
        assert!(ledger_script(Some(3)).contains(&format!("SET version = {VERSION}")));
    }
}
