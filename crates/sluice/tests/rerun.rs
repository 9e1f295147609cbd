//! A rerun after the target changed: a finished job's skip holds only while its rows can still
//! be there. The same command after TRUNCATE, DELETE of every row, or a dropped and re-created
//! table loads the files again and says why; after a rewrite that left rows (VACUUM FULL, a
//! TRUNCATE followed by other inserts) it loads nothing and says which table changed and how;
//! a partitioned table is judged partition by partition. Every outcome is printed under `-q`,
//! and the JSON report lists the skipped files. Real PostgreSQL.

mod common;

use common::{assert_has, db, stderr, Db};
use std::path::PathBuf;

/// `n` rows `id,text` with ids from `first`.
fn rows(first: u32, n: u32) -> Vec<u8> {
    (first..first + n)
        .map(|i| format!("{i},row {i}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Two files of 500 rows each (ids 0..1000), and table `t` to load them into.
fn plain(d: &Db) -> Vec<PathBuf> {
    d.psql("CREATE TABLE t (id int PRIMARY KEY, v text)");
    vec![
        d.file("a.csv", &rows(0, 500)),
        d.file("b.csv", &rows(500, 500)),
    ]
}

/// The same load command each time, quiet, as a script runs it: (exit code, stderr).
fn load(d: &Db, table: &str, files: &[PathBuf], extra: &[&str]) -> (i32, String) {
    let mut args = vec!["--table", table, "--jobs", "2"];
    args.extend_from_slice(extra);
    let files: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    args.extend(files);
    let out = d.load(&args, &[], 120);
    (out.status.code().unwrap_or(-1), stderr(&out))
}

#[test]
fn truncate_then_the_same_command_loads_again_and_names_the_table_and_job() {
    let d = db("rerun_truncate");
    let files = plain(&d);
    let (code, _) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0);
    assert_eq!(d.count("t"), 1000);
    // Both files went to one table: one row records where, for every file of the job.
    let places = d.psql("SELECT count(*) || ' ' || min(file) FROM sluice_ledger.job_places");
    assert_eq!(places.trim(), "1 -1", "{places}");
    // Unchanged: the skip holds, and it is said under -q.
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &err,
        &["nothing to load", "job 1 loaded", "have not changed since"],
    );
    assert_eq!(d.count("t"), 1000);
    d.psql("TRUNCATE t");
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &err,
        &[
            "t is empty",
            "although job 1 loaded 1,000 rows",
            "loading its 2 file(s) again",
        ],
    );
    assert_eq!(d.count("t"), 1000);
    // And the reload is a finished job of its own: the next rerun skips again.
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["nothing to load", "job 2 loaded"]);
    assert_eq!(d.count("t"), 1000);
}

#[test]
fn delete_of_every_row_loads_again_and_a_partial_delete_is_not_seen() {
    let d = db("rerun_delete");
    let files = plain(&d);
    assert_eq!(load(&d, "t", &files, &[]).0, 0);
    d.psql("DELETE FROM t WHERE id < 10");
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["nothing to load", "have not changed since"]);
    assert_eq!(
        d.count("t"),
        990,
        "a partial delete is documented as unseen"
    );
    d.psql("DELETE FROM t");
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["t is empty", "loading its 2 file(s) again"]);
    assert_eq!(d.count("t"), 1000);
}

#[test]
fn a_rewrite_that_left_rows_loads_nothing_and_names_the_rewrite() {
    let d = db("rerun_rewrite");
    let files = plain(&d);
    assert_eq!(load(&d, "t", &files, &[]).0, 0);
    d.psql("VACUUM FULL t");
    let json = d.dir.join("report.json");
    let (code, err) = load(&d, "t", &files, &["--report-json", json.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &err,
        &[
            "nothing to load",
            "t was rewritten",
            "storage was replaced",
            "--restart",
        ],
    );
    assert_eq!(d.count("t"), 1000);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let skipped = report["skipped"].as_array().expect("skipped files listed");
    assert_eq!(skipped.len(), 2, "{report}");
    assert_eq!(skipped[0]["job"], 1);
    assert!(skipped[0]["reason"].as_str().unwrap().contains("rewritten"));
    // TRUNCATE, then rows of another origin: the same.
    d.psql("TRUNCATE t; INSERT INTO t VALUES (5000, 'other')");
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["nothing to load", "rewritten", "has rows"]);
    assert_eq!(d.count("t"), 1);
    // --restart loads them again, as it says.
    d.psql("TRUNCATE t");
    assert_eq!(load(&d, "t", &files, &["--restart"]).0, 0);
    assert_eq!(d.count("t"), 1000);
}

#[test]
fn a_table_dropped_and_created_again_loads_again_but_one_restored_with_rows_does_not() {
    let d = db("rerun_recreate");
    let files = plain(&d);
    assert_eq!(load(&d, "t", &files, &[]).0, 0);
    d.psql("DROP TABLE t; CREATE TABLE t (id int PRIMARY KEY, v text)");
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &err,
        &["dropped and created again", "loading its 2 file(s) again"],
    );
    assert_eq!(d.count("t"), 1000);
    // A restore from a backup: another table of the same name, with the rows in it.
    d.psql(
        "CREATE TABLE saved AS SELECT * FROM t; DROP TABLE t; \
         CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT * FROM saved",
    );
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["nothing to load", "restored from a backup"]);
    assert_eq!(d.count("t"), 1000);
}

#[test]
fn a_truncated_partition_loads_its_files_again_and_no_other() {
    let d = db("rerun_partition");
    d.psql(
        "CREATE TABLE p (id int NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE p0 PARTITION OF p FOR VALUES FROM (0) TO (1000); \
         CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (1000) TO (2000); \
         CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (2000) TO (3000)",
    );
    let files = vec![
        d.file("p0.csv", &rows(0, 1000)),
        d.file("p1.csv", &rows(1000, 1000)),
        d.file("p2.csv", &rows(2000, 1000)),
    ];
    let (code, err) = load(&d, "p", &files, &["--strategy", "stage"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.count("p"), 3000);
    d.psql("TRUNCATE p1");
    let (code, err) = load(&d, "p", &files, &["--strategy", "stage"]);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &err,
        &[
            "p1 is empty",
            "loading its 1 file(s) again: ",
            "p1.csv",
            "skipping 2 file(s)",
        ],
    );
    assert_eq!(d.count("p"), 3000);
    assert_eq!(d.count("p1"), 1000);
    let distinct = d.psql("SELECT count(DISTINCT id) FROM p");
    assert_eq!(distinct.trim(), "3000", "every row exactly once");
}

/// "nothing to load" is said once, on stderr (an outcome, printed under `-q`), and the summary
/// on stdout does not repeat it.
#[test]
fn nothing_to_load_is_said_once_on_stderr() {
    let d = db("rerun_once");
    let files = plain(&d);
    let args = ["--table", "t", files[0].to_str().unwrap()];
    assert_eq!(d.load(&args, &[], 120).status.code(), Some(0));
    let out = d.load(&args, &[], 120);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("nothing to load"), "{stdout}");
    assert_eq!(
        stderr(&out).matches("nothing to load").count(),
        1,
        "{}",
        stderr(&out)
    );
}

/// Blocks of `sluice_ledger.job_file_runs`' TOAST table read so far (a job's arrays of paths,
/// sizes and fingerprints live there once a run names a few hundred files), once every other
/// session of the database has ended and flushed its statistics.
fn ledger_toast_blocks(d: &Db) -> u64 {
    common::wait_until("the load's sessions to end", 30, || {
        d.psql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .trim()
            == "0"
    });
    d.psql(
        "SELECT coalesce(toast_blks_read, 0) + coalesce(toast_blks_hit, 0) \
         FROM pg_statio_all_tables WHERE relid = 'sluice_ledger.job_file_runs'::regclass",
    )
    .trim()
    .parse()
    .unwrap()
}

#[test]
fn a_rerun_reads_the_newest_job_that_loaded_the_files_not_the_whole_history() {
    // A nightly reload (TRUNCATE, then the same command) must not slow down night after
    // night: each rerun used to unfold every earlier job's records of the same files.
    let d = db("rerun_history");
    d.psql("CREATE TABLE t (id int, v text)");
    let files: Vec<PathBuf> = (0..400)
        .map(|i| d.file(&format!("file-with-a-long-name-{i:04}.csv"), &rows(i, 1)))
        .collect();
    let rerun = |d: &Db| {
        d.psql("TRUNCATE t");
        let (code, err) = load(d, "t", &files, &[]);
        assert_eq!(code, 0, "{err}");
        assert_has(&err, &["t is empty", "loading its 400 file(s) again"]);
        assert_eq!(d.count("t"), 400);
    };
    assert_eq!(load(&d, "t", &files, &[]).0, 0);
    rerun(&d);
    // The third run, with two earlier jobs of these files, against the eighth, with seven.
    let before = ledger_toast_blocks(&d);
    rerun(&d);
    let third = ledger_toast_blocks(&d) - before;
    for _ in 0..4 {
        rerun(&d);
    }
    let before = ledger_toast_blocks(&d);
    rerun(&d);
    let eighth = ledger_toast_blocks(&d) - before;
    assert!(
        third > 0,
        "the runs' arrays are not in TOAST: the test measures nothing"
    );
    // A block or two of slack: each run also writes its job's arrays into the same TOAST
    // table, and where the previous job's left off moves the count by one.
    assert!(
        eighth <= third + 2,
        "the eighth run read {eighth} blocks of the ledger's file records, the third {third}"
    );
    let jobs = d.psql("SELECT count(*) FROM sluice_ledger.jobs WHERE state = 'finished'");
    assert_eq!(jobs.trim(), "8");
}

#[test]
fn a_file_loaded_as_it_is_now_by_an_older_job_than_the_newest_few_is_still_found() {
    // The walk through the ledger goes newest first, a few jobs at a time; a file is known by
    // its content, so a file put back as it was is found in the job that loaded it then.
    let d = db("rerun_walk");
    let files = plain(&d);
    let first = std::fs::read(&files[0]).unwrap();
    let modified = std::fs::metadata(&files[0]).unwrap().modified().unwrap();
    assert_eq!(load(&d, "t", &files, &[]).0, 0);
    // Jobs 2 to 6 each load another version of a.csv (b.csv unchanged, skipped).
    for job in 2..=6u32 {
        std::fs::write(&files[0], rows(job * 1000, 500)).unwrap();
        let (code, err) = load(&d, "t", &files, &[]);
        assert_eq!(code, 0, "{err}");
        assert_has(&err, &["job 1 loaded"]);
    }
    assert_eq!(d.count("t"), 1000 + 5 * 500);
    // a.csv as job 1 loaded it: same bytes, same modification time.
    common::put_back(&files[0], &first, modified);
    let (code, err) = load(&d, "t", &files, &[]);
    assert_eq!(code, 0, "{err}");
    assert_has(&err, &["nothing to load", "job 1 loaded"]);
    assert_eq!(d.count("t"), 1000 + 5 * 500);
}
