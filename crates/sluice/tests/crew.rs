//! A job several workers load together (`--job NAME --workers N --worker K`): worker processes
//! started at once against one real PostgreSQL, each with its own files or all with the same
//! shared ones. The result equals a psql `\copy` of the files, row for row, and nothing is
//! visible until every worker is done; a killed worker run again completes the job exactly
//! once; a worker that never starts fails the job after `--wait-workers`, with nothing left
//! committed or prepared; a second process in a live slot is refused.

mod common;

use common::{db, finish, none_then_all, sluice_cmd, succeeded, text, Db};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `n` rows `id,text` with ids from `first`.
fn rows(first: u32, n: u32) -> Vec<u8> {
    (first..first + n)
        .map(|i| format!("{i},row {i} of the crew's test\n"))
        .collect::<String>()
        .into_bytes()
}

/// Three files of `n` rows each, with distinct ids, and the table `t` (and `reference`, loaded
/// by psql `\copy` from the same files).
fn three_files(d: &Db, n: u32) -> Vec<PathBuf> {
    sql(d, "CREATE TABLE t (id int PRIMARY KEY, v text)");
    parts_and_reference(d, n)
}

/// Three files `part0.csv`... of `n` rows each, with distinct ids, loaded into a new table
/// `reference` by psql `\copy`.
fn parts_and_reference(d: &Db, n: u32) -> Vec<PathBuf> {
    sql(d, "CREATE TABLE reference (id int PRIMARY KEY, v text)");
    let files: Vec<PathBuf> = (0..3)
        .map(|k| d.file(&format!("part{k}.csv"), &rows(k * n, n)))
        .collect();
    for f in &files {
        d.psql_copy("reference", f, "FORMAT csv").unwrap();
    }
    files
}

/// The rows the ledger counts as committed, in all.
fn ledger_rows(d: &Db) -> String {
    sql(d, "SELECT sum(rows) FROM sluice_ledger.job_chunks")
}

/// Starts worker `k` of `workers` of job `job`, loading `files` into `t`.
fn worker(d: &Db, job: &str, workers: u32, k: u32, files: &[PathBuf], extra: &[&str]) -> Child {
    worker_cmd(d, job, workers, k, files, extra)
        .spawn()
        .unwrap()
}

/// The command [`worker`] starts, for a test to add to first.
fn worker_cmd(
    d: &Db,
    job: &str,
    workers: u32,
    k: u32,
    files: &[PathBuf],
    extra: &[&str],
) -> Command {
    let mut c = sluice_cmd();
    c.args([
        "load", "--target", &d.url, "--table", "t", "--format", "csv",
    ])
    .args(["--jobs", "2", "--chunk-size", "64k", "--job", job])
    .args([
        "--workers",
        &workers.to_string(),
        "--worker",
        &k.to_string(),
    ])
    .args(extra)
    .args(files)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// Polls `t`'s row count until stopped: every count a reader saw.
struct Reader {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<u64>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Reader {
    fn start(d: &Db) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, v, url) = (stop.clone(), seen.clone(), d.url.clone());
        let name = d.name.clone();
        let thread = std::thread::spawn(move || {
            let reader = Db {
                name,
                url,
                dir: std::env::temp_dir(),
            };
            while !s.load(Ordering::SeqCst) {
                v.lock().unwrap().push(reader.count("t"));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Reader { stop, seen, thread }
    }

    fn counts(self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap();
        let seen = self.seen.lock().unwrap().clone();
        seen
    }
}

/// psql's answer, without its last newline.
fn sql(d: &Db, q: &str) -> String {
    d.psql(q).trim().to_string()
}

fn try_sql(d: &Db, q: &str) -> Result<String, String> {
    d.try_psql(q).map(|s| s.trim().to_string())
}

/// The job's prepared transactions still waiting in the server (in this test's database).
fn prepared_left(d: &Db) -> String {
    sql(
        d,
        "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()",
    )
}

/// What the ledger says of the job's workers: (worker, state), in order.
fn slots(d: &Db) -> Vec<String> {
    sql(
        d,
        "SELECT string_agg(worker || ':' || state, ',' ORDER BY worker) \
         FROM sluice_ledger.job_workers",
    )
    .split(',')
    .map(str::to_string)
    .collect()
}

#[test]
fn three_workers_with_their_own_files_load_the_job_once_and_all_at_once() {
    let d = &db("crew_own");
    let files = three_files(d, 20_000);
    let reader = Reader::start(d);
    let html = |k: u32| d.dir.join(format!("worker{k}.html"));
    let children: Vec<Child> = (0..3)
        .map(|k| {
            let report = html(k + 1);
            let extra = ["--report-html", report.to_str().unwrap()];
            worker(
                d,
                "nightly",
                3,
                k + 1,
                &files[k as usize..=k as usize],
                &extra,
            )
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, 180)).collect();
    let mut seen = reader.counts();
    seen.push(d.count("t"));
    // Every worker's HTML report draws the whole job: a bar per worker, and the commit.
    for k in 1..=3 {
        let page = std::fs::read_to_string(html(k)).unwrap();
        assert!(
            page.contains("Workers of job nightly (3 of them)"),
            "{page}"
        );
        assert_eq!(page.matches("<title>worker ").count(), 3, "{page}");
        assert!(page.contains("committed, "), "{page}");
    }
    for o in &outs {
        succeeded(o);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("job nightly: worker"),
            "{}",
            text(o)
        );
    }
    d.assert_same_rows("t", "reference");
    // Nothing was visible before every worker was done, and then all of it at once.
    assert!(
        none_then_all(&seen, 60_000),
        "a reader saw part of the job before its commit: {seen:?}"
    );
    assert_eq!(slots(d), ["1:prepared", "2:prepared", "3:prepared"]);
    // `sluice jobs` shows each worker: its host, state, streams and rows.
    let listed = d.sluice_ok(&["jobs"]);
    for k in 1..=3 {
        assert!(
            listed.contains(&format!("worker {k} of 3 on ")) && listed.contains("20,000 rows"),
            "{listed}"
        );
    }
    assert_eq!(
        sql(d, "SELECT state || ' ' || workers FROM sluice_ledger.jobs"),
        "finished 3"
    );
    assert_eq!(prepared_left(d), "0");
}

/// Two workers, each loading its own table: the worker that completes the job commits both
/// workers' transactions, one after the other. It pauses 3 s between the two, and a reader's
/// counts of both tables, taken in that pause, wait and then see every row of both: the
/// committer holds back readers of the other worker's table too (its transaction's locks
/// name it).
#[test]
fn a_reader_between_the_crews_commits_sees_both_tables_whole() {
    let d = &db("crew_two_tables");
    sql(
        d,
        "CREATE TABLE t (id int, v text); CREATE TABLE u (id int, v text)",
    );
    let files = [
        d.file("t.csv", &rows(0, 2000)),
        d.file("u.csv", &rows(0, 3000)),
    ];
    let children: Vec<Child> = [("t", &files[0]), ("u", &files[1])]
        .iter()
        .enumerate()
        .map(|(k, (table, file))| {
            let mut c = sluice_cmd();
            c.args([
                "load", "--target", &d.url, "--table", table, "--format", "csv",
            ])
            .args(["--jobs", "1", "--job", "pair", "--workers", "2"])
            .args(["--worker", &(k + 1).to_string()])
            .arg(file)
            .env("SLUICE_PAUSE_AT", "commit:3000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    // One worker's chunk record is committed (the ledger is not held back): the pause.
    common::wait_until("the first of the job's commits", 120, || {
        try_sql(d, "SELECT count(*) FROM sluice_ledger.job_chunks").is_ok_and(|n| n == "1")
    });
    let seen = (d.count("u"), d.count("t"));
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, 120)).collect();
    for o in &outs {
        succeeded(o);
        assert!(!text(o).contains("held back"), "{}", text(o));
    }
    assert_eq!(seen, (3000, 2000));
}

#[test]
fn workers_that_share_their_files_load_each_chunk_once() {
    let d = &db("crew_shared");
    let files = three_files(d, 20_000);
    let children: Vec<Child> = (0..3)
        .map(|k| worker(d, "shared", 3, k + 1, &files, &[]))
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, 180)).collect();
    for o in &outs {
        succeeded(o);
    }
    d.assert_same_rows("t", "reference");
    // Three workers registered each file once, and each chunk.
    assert_eq!(sql(d, "SELECT count(*) FROM sluice_ledger.job_files"), "3");
    assert_eq!(
        sql(
            d,
            "SELECT count(*) = count(DISTINCT (file, start_byte)) \
             AND bool_and(worker IS NOT NULL) FROM sluice_ledger.job_claims"
        ),
        "t"
    );
    assert_eq!(ledger_rows(d), "60000");
}

#[test]
fn a_killed_worker_run_again_completes_the_job_exactly_once() {
    let d = &db("crew_killed");
    let files = three_files(d, 40_000);
    let first = worker(d, "killed", 2, 1, &files[..1], &[]);
    let mut second = worker(d, "killed", 2, 2, &files[1..], &[]);
    // Killed as soon as it has joined: mid-load, or (on a fast machine) while it waits with
    // its part prepared; either way the same command completes the job.
    common::wait_until("worker 2 joins", 60, || {
        try_sql(
            d,
            "SELECT count(*) FROM sluice_ledger.job_workers WHERE worker = 2",
        )
        .is_ok_and(|n| n == "1")
    });
    second.kill().unwrap();
    let _ = second.wait();
    // Its slot comes back once the server ends its session; the same command completes it.
    let again = finish(worker(d, "killed", 2, 2, &files[1..], &[]), 180);
    succeeded(&again);
    succeeded(&finish(first, 180));
    d.assert_same_rows("t", "reference");
    assert_eq!(prepared_left(d), "0");
}

#[test]
fn a_worker_that_never_starts_fails_the_job_after_the_wait() {
    let d = &db("crew_missing");
    let files = three_files(d, 5_000);
    let started = Instant::now();
    let out = finish(
        worker(d, "lonely", 2, 1, &files, &["--wait-workers", "3s"]),
        120,
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 (not started)"), "{err}");
    assert!(err.contains("Nothing of the job is committed"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(d.count("t"), 0);
    assert_eq!(prepared_left(d), "0");
    assert_eq!(sql(d, "SELECT state FROM sluice_ledger.jobs"), "failed");
    // The same two commands, both run this time, complete the job.
    let children: Vec<Child> = (1..=2)
        .map(|k| worker(d, "lonely", 2, k, &files, &[]))
        .collect();
    for c in children {
        succeeded(&finish(c, 180));
    }
    d.assert_same_rows("t", "reference");
}

#[test]
fn a_second_process_in_a_live_slot_is_refused() {
    let d = &db("crew_slot");
    let files = three_files(d, 5_000);
    // Worker 1 of 2 waits for worker 2, holding its slot.
    let waiting = worker(d, "twice", 2, 1, &files[..1], &["--wait-workers", "30s"]);
    common::wait_until("worker 1 prepares", 60, || {
        try_sql(
            d,
            "SELECT state FROM sluice_ledger.job_workers WHERE worker = 1",
        )
        .is_ok_and(|s| s == "prepared")
    });
    // While it waits, it holds its own connection only: its streams' (and any opened ahead
    // that no stream took) and the watch's are closed.
    common::wait_until("worker 1 keeps one connection while it waits", 30, || {
        try_sql(
            d,
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'sluice'",
        )
        .is_ok_and(|n| n == "1")
    });
    let again = finish(worker(d, "twice", 2, 1, &files[1..2], &[]), 60);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("worker 1 of job twice runs already"),
        "{}",
        text(&again)
    );
    let last = finish(worker(d, "twice", 2, 2, &files[1..], &[]), 180);
    succeeded(&last);
    succeeded(&finish(waiting, 180));
    d.assert_same_rows("t", "reference");
}

#[test]
fn without_prepared_transactions_each_worker_commits_its_own_rows_once() {
    let d = &db("crew_unprepared");
    let files = three_files(d, 10_000);
    let children: Vec<Child> = (1..=2)
        .map(|k| worker(d, "plain", 2, k, &files, &["--prepare", "off"]))
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, 180)).collect();
    for o in &outs {
        succeeded(o);
    }
    d.assert_same_rows("t", "reference");
    assert_eq!(slots(d), ["1:committed", "2:committed"]);
    assert_eq!(sql(d, "SELECT state FROM sluice_ledger.jobs"), "finished");
    assert_eq!(prepared_left(d), "0");
    // A worker whose rows committed before the other's says so.
    let said: String = outs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        said.contains("visible now, before the other workers' are")
            && said.contains("every worker's part is committed; the job is finished"),
        "{said}"
    );
}

#[test]
fn a_job_of_several_workers_refuses_stage_with_max_errors_before_joining_it() {
    let d = &db("crew_stage_refused");
    let files = partitioned_files(d, 1_000);
    let out = finish(
        worker(
            d,
            "staged",
            2,
            1,
            &files,
            &["--strategy", "stage", "--max-errors", "10"],
        ),
        60,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--strategy stage in a job of several workers (--workers): --max-errors"),
        "{err}"
    );
    // Refused before it joined: the job was not even begun, so the same workers without
    // the flag load it whole.
    assert_eq!(sql(d, "SELECT count(*) FROM sluice_ledger.jobs"), "0");
    let children: Vec<Child> = (1..=2)
        .map(|k| worker(d, "staged", 2, k, &files, &["--strategy", "stage"]))
        .collect();
    for c in children {
        succeeded(&finish(c, 180));
    }
    d.assert_same_rows("t", "reference");
}

/// Three files of `n` rows each and `t` partitioned by range of `id` in two partitions: the
/// first two files' rows fall in the first, the third's in the second (and `reference`, loaded
/// by psql `\copy` from the same files).
fn partitioned_files(d: &Db, n: u32) -> Vec<PathBuf> {
    sql(
        d,
        &format!(
            "CREATE TABLE t (id int PRIMARY KEY, v text) PARTITION BY RANGE (id); \
             CREATE TABLE t_low PARTITION OF t FOR VALUES FROM (0) TO ({}); \
             CREATE TABLE t_high PARTITION OF t FOR VALUES FROM ({}) TO (MAXVALUE)",
            2 * n,
            2 * n
        ),
    );
    parts_and_reference(d, n)
}

/// The staging tables left in sluice's schema.
fn staging_left(d: &Db) -> String {
    sql(
        d,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'sluice_stage'",
    )
}

#[test]
fn staging_workers_are_published_together_by_the_last_one() {
    let d = &db("crew_staged");
    let files = partitioned_files(d, 20_000);
    let reader = Reader::start(d);
    let children: Vec<Child> = (0..3usize)
        .map(|k| {
            let extra = ["--strategy", "stage"];
            worker(d, "staged", 3, k as u32 + 1, &files[k..=k], &extra)
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| finish(c, 180)).collect();
    let mut seen = reader.counts();
    seen.push(d.count("t"));
    for o in &outs {
        succeeded(o);
    }
    // Workers 1 and 2 each staged their file for t_low, worker 3 for t_high: the worker that
    // completed the job switched in all three, and said so.
    let all = outs.iter().map(text).collect::<Vec<_>>().join("\n");
    assert!(
        all.contains("switched in the job's 3 staging table(s), every worker's"),
        "{all}"
    );
    d.assert_same_rows("t", "reference");
    assert!(
        none_then_all(&seen, 60_000),
        "a reader saw part of the job before its publish: {seen:?}"
    );
    assert_eq!(staging_left(d), "0");
    assert_eq!(sql(d, "SELECT count(*) FROM t_low"), "40000");
    assert_eq!(ledger_rows(d), "60000");
    assert_eq!(sql(d, "SELECT state FROM sluice_ledger.jobs"), "finished");
}

#[test]
fn staging_workers_that_share_their_files_stage_each_chunk_once() {
    let d = &db("crew_staged_shared");
    let files = partitioned_files(d, 20_000);
    let children: Vec<Child> = (1..=3)
        .map(|k| worker(d, "shared", 3, k, &files, &["--strategy", "stage"]))
        .collect();
    for c in children {
        let out = finish(c, 180);
        succeeded(&out);
        // A worker whose chunks the others staged still waits for the job's publish.
        assert!(!text(&out).contains("visible now"), "{}", text(&out));
    }
    d.assert_same_rows("t", "reference");
    assert_eq!(staging_left(d), "0");
    assert_eq!(
        sql(
            d,
            "SELECT count(*) = (SELECT count(*) FROM sluice_ledger.job_claims) \
                AND count(*) = count(DISTINCT (file, start_byte)) AND sum(rows) = 60000 \
             FROM sluice_ledger.job_chunks"
        ),
        "t"
    );
}

/// What the ledger says of worker `k`'s slot (its state), empty before it joins.
fn slot_state(d: &Db, k: u32) -> String {
    try_sql(
        d,
        &format!("SELECT state FROM sluice_ledger.job_workers WHERE worker = {k}"),
    )
    .unwrap_or_default()
}

#[test]
fn a_killed_staging_worker_run_again_completes_the_job_exactly_once() {
    let d = &db("crew_staged_killed");
    let files = partitioned_files(d, 20_000);
    let extra = ["--strategy", "stage"];
    // Worker 2 stages both its files (t_low and t_high), hands its part over and waits for
    // worker 1, which has not started: killed then, its staging tables committed.
    let mut second = worker(d, "killed", 2, 2, &files[1..], &extra);
    common::wait_until("worker 2 hands over", 120, || {
        slot_state(d, 2) == "prepared"
    });
    second.kill().unwrap();
    let _ = second.wait();
    assert_eq!(staging_left(d), "2");
    // Run again, its chunks are all claimed by its tables: it loads nothing, and waits for
    // the job (it does not exit before the job is in).
    let mut again = worker(d, "killed", 2, 2, &files[1..], &extra);
    let pid = again.id();
    common::wait_until("worker 2, run again, hands over", 120, || {
        try_sql(
            d,
            "SELECT state || ':' || pid FROM sluice_ledger.job_workers WHERE worker = 2",
        )
        .is_ok_and(|s| s == format!("prepared:{pid}"))
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        again.try_wait().unwrap().is_none(),
        "worker 2 ended before the job"
    );
    assert_eq!(d.count("t"), 0);
    // Worker 1 completes the job: its table and the killed run's two go in together.
    let first = finish(worker(d, "killed", 2, 1, &files[..1], &extra), 180);
    succeeded(&first);
    let again = finish(again, 180);
    succeeded(&again);
    assert!(
        text(&first).contains("switched in the job's 3 staging table(s)"),
        "{}",
        text(&first)
    );
    d.assert_same_rows("t", "reference");
    assert_eq!(staging_left(d), "0");
    assert_eq!(ledger_rows(d), "60000");
}

#[test]
fn a_bad_row_in_one_staging_worker_drops_every_workers_staging_tables() {
    let d = &db("crew_staged_bad");
    let files = partitioned_files(d, 20_000);
    // Worker 2's file has a bad id on its last line.
    let mut bad = rows(20_000, 20_000);
    bad.extend_from_slice(b"twenty,a bad id\n");
    let bad = d.file("bad.csv", &bad);
    let extra = ["--strategy", "stage"];
    // Workers 1 and 3 stage their files and hand over first; then worker 2 fails.
    let first = worker(d, "bad", 3, 1, &files[..1], &extra);
    let third = worker(d, "bad", 3, 3, &files[2..], &extra);
    common::wait_until("workers 1 and 3 hand over", 120, || {
        slot_state(d, 1) == "prepared" && slot_state(d, 3) == "prepared"
    });
    assert_eq!(staging_left(d), "2");
    let second = finish(
        worker(d, "bad", 3, 2, std::slice::from_ref(&bad), &extra),
        120,
    );
    assert_eq!(second.status.code(), Some(3), "{}", text(&second));
    assert!(text(&second).contains("\"twenty\""), "{}", text(&second));
    for o in [finish(first, 120), finish(third, 120)] {
        assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    }
    // Nothing of the job is visible, no staging table is left, no chunk stays claimed, and
    // every slot failed with the job.
    assert_eq!(d.count("t"), 0);
    assert_eq!(staging_left(d), "0");
    assert_eq!(
        sql(
            d,
            "SELECT count(*) FROM sluice_ledger.job_claims WHERE worker IS NOT NULL"
        ),
        "0"
    );
    assert_eq!(slots(d), ["1:failed", "2:failed", "3:failed"]);
    // Worker 2 run again with its file fixed: alone, it loads its part and waits for the
    // others (their parts went with the failure), who then complete the job.
    let mut again = worker(d, "bad", 3, 2, &files[1..2], &extra);
    common::wait_until("worker 2 hands over again", 120, || {
        slot_state(d, 2) == "prepared"
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        again.try_wait().unwrap().is_none(),
        "worker 2 ended before the job"
    );
    assert_eq!(d.count("t"), 0);
    let others: Vec<Child> = [1u32, 3]
        .iter()
        .map(|&k| worker(d, "bad", 3, k, &files[k as usize - 1..k as usize], &extra))
        .collect();
    for c in others {
        succeeded(&finish(c, 180));
    }
    succeeded(&finish(again, 180));
    d.assert_same_rows("t", "reference");
    assert_eq!(staging_left(d), "0");
}

/// A staged job of two workers whose publisher dies just after deciding: worker 2 (on
/// `files[1..]`) hands its part over and waits; worker 1 (on `files[0]`) completes the job,
/// publishing every staging table with the decision, and is killed before it records the job
/// finished. Nothing was prepared: the decision is the publish alone. Returns worker 2, still
/// waiting.
fn publisher_killed_after_deciding(d: &Db, job: &str, files: &[PathBuf], extra: &[&str]) -> Child {
    let waiting = worker(d, job, 2, 2, &files[1..], extra);
    common::wait_until("worker 2 hands over", 120, || {
        slot_state(d, 2) == "prepared"
    });
    let mut publisher = worker_cmd(d, job, 2, 1, &files[..1], extra);
    publisher.env("SLUICE_KILL_AT", "decided");
    let killed = finish(publisher.spawn().unwrap(), 120);
    assert!(!killed.status.success(), "{}", text(&killed));
    waiting
}

#[test]
fn a_staged_job_whose_publisher_dies_after_deciding_is_finished_by_a_waiting_worker() {
    let d = &db("crew_staged_decider");
    let files = partitioned_files(d, 5_000);
    let extra = ["--strategy", "stage", "--wait-workers", "90s"];
    let waiting = publisher_killed_after_deciding(d, "decider", &files, &extra);
    d.assert_same_rows("t", "reference");
    // The waiting worker sees the decision and, after its grace, records the job finished
    // (rather than fail, after --wait-workers, a job whose rows are all in).
    let out = finish(waiting, 120);
    succeeded(&out);
    assert_eq!(sql(d, "SELECT state FROM sluice_ledger.jobs"), "finished");
    d.assert_same_rows("t", "reference");
}

#[test]
fn a_staged_jobs_publisher_killed_after_deciding_and_run_again_finishes_it_once() {
    let d = &db("crew_staged_rerun");
    let files = partitioned_files(d, 5_000);
    let extra = ["--strategy", "stage"];
    let waiting = publisher_killed_after_deciding(d, "rerun", &files, &extra);
    // Run again at once (within the waiting worker's grace): it has nothing left to load,
    // and it or the waiting worker finishes the job; both exit 0, every row once.
    succeeded(&finish(worker(d, "rerun", 2, 1, &files[..1], &extra), 120));
    succeeded(&finish(waiting, 120));
    assert_eq!(sql(d, "SELECT state FROM sluice_ledger.jobs"), "finished");
    d.assert_same_rows("t", "reference");
    assert_eq!(ledger_rows(d), "15000");
}

#[test]
fn a_staging_worker_whose_file_crosses_a_bound_mid_file_says_to_load_it_directly() {
    let d = &db("crew_staged_mid");
    partitioned_files(d, 20_000);
    // First and last rows in t_low, one row in the middle in t_high: seen only while loading.
    let mut body = rows(0, 10_000);
    body.extend(rows(50_000, 1));
    body.extend(rows(10_000, 10_000));
    let file = d.file("crossing.csv", &body);
    let out = finish(
        worker(d, "mid", 1, 1, &[file], &["--strategy", "stage"]),
        120,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 10001"), "{err}");
    assert!(
        err.contains("give --strategy direct for such files"),
        "{err}"
    );
    assert_eq!(d.count("t"), 0);
    assert_eq!(staging_left(d), "0");
}

#[test]
fn a_staging_worker_with_a_header_alone_for_a_partitioned_table_says_so_before_loading() {
    let d = &db("crew_staged_header");
    let files = partitioned_files(d, 1_000);
    let header = d.file("header.csv", b"id,v\n");
    let out = finish(
        worker(
            d,
            "header",
            1,
            1,
            &[files[0].clone(), header],
            &["--strategy", "stage", "--header"],
        ),
        120,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("header.csv (no first row to route: empty but for a header, or unreadable)"),
        "{err}"
    );
    assert_eq!(d.count("t"), 0);
}
