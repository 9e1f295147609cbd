//! MariaDB as a destination, against a real private server the tests start
//! (`common/mariadb.rs`): what sluice loads equals what the server's own strict
//! `LOAD DATA INFILE` loads from the same input; a value the server alone refuses fails the
//! load (the warning trap of `LOAD DATA LOCAL` is closed); a stream that fails in the middle of
//! a LOAD leaves nothing committed; a rerun skips what the ledger says is in; the password is
//! never printed.

mod common;

use common::mariadb::{mdb, MDb};
use common::{assert_has, gen_tpch, sluice_cmd, stderr, strip_trailing_bars, tpch_ddl, tpch_table};
use std::os::unix::fs::PermissionsExt;

/// Everything a command printed.
fn printed(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_ok(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "sluice failed ({:?}):\n{}",
        o.status.code(),
        printed(o)
    );
}

/// Staging tables left in `d`'s database.
fn staging_left(d: &MDb) -> u64 {
    d.count(
        "information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME LIKE 'sluice!_stage!_%' ESCAPE '!'",
    )
}

/// The TPC-H DDL `sluice ddl tpch` prints (standard SQL that MariaDB takes as it is) in
/// database `db`.
fn create_tpch(d: &MDb, db: &str) {
    d.sql(&format!(
        "CREATE DATABASE IF NOT EXISTS {db}; USE {db}; {}",
        tpch_ddl(&[])
    ));
}

#[test]
fn tpch_sf01_matches_the_servers_own_strict_load_data_infile() {
    let d = mdb("tpch");
    let files = gen_tpch(&d.dir.join("sf01"), "0.1", "2");
    create_tpch(&d, &d.name);
    let reference = format!("{}_ref", d.name);
    create_tpch(&d, &reference);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.to_str().unwrap().to_string())
        .collect();
    let mut args = vec!["--jobs", "2", "--chunk-size", "4M"];
    args.extend(names.iter().map(String::as_str));
    assert_ok(&d.load(&args, &[], 600));
    let stripped = d.dir.join("stripped.tbl");
    for f in &files {
        strip_trailing_bars(f, &stripped);
        d.server_load(&format!("{reference}.{}", tpch_table(f)), &stripped, "|")
            .unwrap_or_else(|e| panic!("the server's LOAD DATA INFILE of {}: {e}", f.display()));
    }
    for t in [
        "nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem",
    ] {
        d.assert_same_rows(t, &format!("{reference}.{t}"));
    }
    assert_eq!(d.count("lineitem"), 600_572);
}

#[test]
fn edge_values_match_the_servers_own_strict_load_data_infile() {
    let d = mdb("edges");
    d.sql(
        "CREATE TABLE e (ti tinyint, tu tinyint unsigned, si smallint, mi mediumint, \
         i int, iu int unsigned, bi bigint, bu bigint unsigned, p decimal(5,2), \
         q decimal(38,10), dt date, ts datetime(6), v varchar(4) CHARACTER SET utf8mb4, \
         c char(3) CHARACTER SET utf8mb4, t text); CREATE TABLE e_ref LIKE e",
    );
    let lines = [
        "-128\t0\t-32768\t-8388608\t-2147483648\t0\t-9223372036854775808\t0\t-999.99\t\
         -9999999999999999999999999999.9999999999\t1000-01-01\t1000-01-01 00:00:00\t\t\t",
        "127\t255\t32767\t8388607\t2147483647\t4294967295\t9223372036854775807\t\
         18446744073709551615\t999.99\t0.0000000001\t9999-12-31\t9999-12-31 23:59:59.999999\t\
         äöüß\tab \tline\\nbreak\\ttab\\\\slash",
        "+7\t007\t-0\t0\t1\t1\t1\t1\t1.005\t-0.00000000005\t2024-02-29\t\
         2024-02-29T12:34:56.5\tabc   \té\t\\N",
        "\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t-1.005\t\\N\t\\N\t\\N\t\\N\t\\N\t🦀",
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let f = d.file("edges.txt", text.as_bytes());
    d.server_load("e_ref", &f, "\\t")
        .unwrap_or_else(|e| panic!("the server's strict LOAD DATA INFILE: {e}"));
    assert_ok(&d.load(
        &["--table", "e", "--format", "text", f.to_str().unwrap()],
        &[],
        60,
    ));
    d.assert_same_rows("e", "e_ref");
    assert_eq!(d.count("e"), 4);
}

#[test]
fn a_value_only_the_server_refuses_fails_the_load_and_commits_nothing() {
    let d = mdb("trap");
    // sluice does not decide an ENUM's numeric index itself: the server does, and under LOAD
    // DATA LOCAL (which implies IGNORE) it stores '' with a warning instead of refusing the
    // row.
    d.sql("CREATE TABLE e (i int NOT NULL, k enum('a','b')); CREATE TABLE e_ref LIKE e");
    // (A number is an ENUM's index, which sluice leaves to the server: 5 is no index here.)
    let f = d.file("enum.txt", b"1\ta\n2\t5\n3\tb\n");
    let refused = d.server_load("e_ref", &f, "\\t").unwrap_err();
    assert!(
        refused.contains("Data truncated for column 'k' at row 2"),
        "{refused}"
    );
    let o = d.load(
        &["--table", "e", "--format", "text", f.to_str().unwrap()],
        &[],
        60,
    );
    assert_eq!(o.status.code(), Some(3), "{}", printed(&o));
    let err = stderr(&o);
    for part in [
        "enum.txt, line 2",
        "column k",
        "value \"5\"",
        "Data truncated for column 'k' at row 2",
        "nothing was committed",
    ] {
        assert!(err.contains(part), "expected {part:?} in:\n{err}");
    }
    assert_eq!(d.count("e"), 0);
}

#[test]
fn client_checks_give_postgresqls_messages() {
    let d = mdb("checks");
    d.sql(
        "CREATE TABLE t (i tinyint unsigned, p decimal(5,2), d date, v varchar(3) \
         CHARACTER SET utf8mb4)",
    );
    for (row, reason) in [
        (
            "256\t1\t2024-01-01\tabc\n",
            "out of range for tinyint unsigned (0 to 255)",
        ),
        (
            "1\t999.995\t2024-01-01\tabc\n",
            "numeric field overflow: decimal(5,2)",
        ),
        (
            "1\t1\t2023-02-29\tabc\n",
            "February 2023 has 28 days, not 29",
        ),
        (
            "1\t1\t2024-01-01\tabcd\n",
            "value too long for type varchar(3): 4 characters",
        ),
    ] {
        let f = d.file("bad.txt", format!("0\t0\t2024-01-01\tok\n{row}").as_bytes());
        let o = d.load(
            &["--table", "t", "--format", "text", f.to_str().unwrap()],
            &[],
            60,
        );
        assert_eq!(o.status.code(), Some(3), "{}", printed(&o));
        let err = stderr(&o);
        assert!(
            err.contains("bad.txt, line 2") && err.contains(reason),
            "{reason}:\n{err}"
        );
        assert_eq!(d.count("t"), 0);
    }
    // Rounded on the client as the server rounds: the server has nothing left to note.
    let f = d.file("ok.txt", "255\t-1.005\t2024-02-29\täöü  \n".as_bytes());
    assert_ok(&d.load(
        &["--table", "t", "--format", "text", f.to_str().unwrap()],
        &[],
        60,
    ));
    assert_eq!(
        d.sql("SELECT i, p, d, v FROM t").trim(),
        "255\t-1.01\t2024-02-29\täöü"
    );
}

#[test]
fn a_stream_that_fails_mid_load_leaves_nothing_committed() {
    let d = mdb("midload");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    // Many good rows, sent in small messages and several chunks, then one bad row late in
    // the file: the LOAD of its chunk is cut off after much of its data went to the server.
    let mut data = String::new();
    for i in 0..200_000 {
        data.push_str(&format!("{i}\trow {i}\n"));
    }
    data.push_str("x\tbad\n");
    let f = d.file("big.txt", data.as_bytes());
    let o = d.load(
        &[
            "--table",
            "t",
            "--format",
            "text",
            "--jobs",
            "1",
            "--chunk-size",
            "1M",
            "--copy-buffer",
            "16k",
            f.to_str().unwrap(),
        ],
        &[],
        120,
    );
    assert_eq!(o.status.code(), Some(3), "{}", printed(&o));
    assert!(stderr(&o).contains("line 200001"), "{}", stderr(&o));
    assert_eq!(d.count("t"), 0);
}

#[test]
fn a_rerun_skips_what_the_ledger_says_is_loaded() {
    let d = mdb("rerun");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    let f = d.file("t.txt", b"1\ta\n2\tb\n3\t\\N\n");
    let args = ["--table", "t", "--format", "text", f.to_str().unwrap()];
    assert_ok(&d.load(&args, &[], 60));
    let again = d.load(&args, &[], 60);
    assert_ok(&again);
    assert!(
        stderr(&again).contains("skipping 1 file(s) job 1 loaded"),
        "{}",
        printed(&again)
    );
    assert_eq!(d.count("t"), 3);
    assert_eq!(d.count("t WHERE s IS NULL"), 1);
    let jobs = sluice_cmd()
        .args(["jobs", "--target", &d.url])
        .output()
        .unwrap();
    assert_ok(&jobs);
    let listed = String::from_utf8_lossy(&jobs.stdout);
    assert!(listed.contains("finished"), "{listed}");
}

/// A list of more files than one ledger question names (500): the rerun finds each file's job,
/// a file changed since is loaded again alone, and after a TRUNCATE every file loads again.
#[test]
fn a_rerun_of_many_files_finds_each_one_and_loads_only_the_changed() {
    let d = mdb("rerun_many");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    let files: Vec<_> = (0..1200)
        .map(|i| d.file(&format!("f{i:04}.txt"), format!("{i}\tf{i}\n").as_bytes()))
        .collect();
    let pattern = d.dir.join("f*.txt");
    let args = ["--table", "t", "--format", "text", "--jobs", "2"];
    let load = || {
        let mut a = args.to_vec();
        a.push(pattern.to_str().unwrap());
        d.load(&a, &[], 120)
    };
    assert_ok(&load());
    assert_eq!(d.count("t"), 1200);
    let places = d.sql("SELECT COUNT(*) FROM sluice_ledger_job_places WHERE job = 1");
    assert_eq!(places.trim(), "1200");
    let again = load();
    assert_ok(&again);
    assert_has(
        &stderr(&again),
        &["nothing to load", "skipping 1200 file(s) job 1 loaded"],
    );
    std::fs::write(&files[700], b"100700\tchanged\n").unwrap();
    let changed = load();
    assert_ok(&changed);
    assert_has(&stderr(&changed), &["skipping 1199 file(s) job 1 loaded"]);
    assert_eq!(d.count("t"), 1201);
    assert_eq!(d.count("t WHERE s = 'changed'"), 1);
    d.sql("TRUNCATE TABLE t");
    let reload = load();
    assert_ok(&reload);
    assert_has(
        &stderr(&reload),
        &[
            "is empty, although job 1 loaded",
            "loading its 1199 file(s) again",
            "job 2 loaded",
            "loading its 1 file(s) again",
        ],
    );
    assert_eq!(d.count("t"), 1200);
}

/// The walk through the ledger past its first look (the four newest jobs): a file put back as
/// the first of six jobs loaded it is found in that job, in the older jobs' batches.
#[test]
fn a_file_put_back_as_an_old_job_loaded_it_is_found_past_the_newest_jobs() {
    let d = mdb("rerun_walk");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    let rows = |from: u32| -> Vec<u8> {
        (from..from + 10)
            .flat_map(|i| format!("{i}\trow {i}\n").into_bytes())
            .collect()
    };
    let a = d.file("a.txt", &rows(0));
    let b = d.file("b.txt", &rows(10));
    let first = std::fs::read(&a).unwrap();
    let modified = std::fs::metadata(&a).unwrap().modified().unwrap();
    let args = [
        "--table",
        "t",
        "--format",
        "text",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ];
    assert_ok(&d.load(&args, &[], 60));
    // Jobs 2 to 6 each load another version of a.txt (b.txt unchanged, skipped).
    for job in 2..=6u32 {
        std::fs::write(&a, rows(job * 100)).unwrap();
        let out = d.load(&args, &[], 60);
        assert_ok(&out);
        assert_has(&stderr(&out), &["job 1 loaded"]);
    }
    assert_eq!(d.count("t"), 20 + 5 * 10);
    // a.txt as job 1 loaded it: same bytes, same modification time.
    common::put_back(&a, &first, modified);
    let again = d.load(&args, &[], 60);
    assert_ok(&again);
    assert_has(
        &stderr(&again),
        &["nothing to load", "skipping 2 file(s) job 1 loaded"],
    );
    assert_eq!(d.count("t"), 20 + 5 * 10);
}

/// Two runs of one command started at the same moment record one job: the run held between
/// its look and its record (`SLUICE_PAUSE_AT=looked`) looks again and finds the other's job,
/// finished (it loads nothing) or still running (held after its start: it is refused).
#[test]
fn two_runs_of_one_command_started_at_once_load_it_once() {
    let d = mdb("twins");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    let rows = |from: u32| -> Vec<u8> {
        (from..from + 100)
            .flat_map(|i| format!("{i}\trow {i}\n").into_bytes())
            .collect()
    };
    let both = |name: &str, from: u32, first: &[(&str, &str)], second: &[(&str, &str)]| {
        let (a, b) = (format!("{name}_a.txt"), format!("{name}_b.txt"));
        let files = [d.file(&a, &rows(from)), d.file(&b, &rows(from + 100))];
        let args: Vec<&str> = ["--table", "t", "--format", "text", "--jobs", "2"]
            .into_iter()
            .chain(files.iter().map(|f| f.to_str().unwrap()))
            .collect();
        std::thread::scope(|s| {
            let held = s.spawn(|| d.load(&args, first, 120));
            // The held run has looked by now (a look takes milliseconds; it sleeps 5 s).
            std::thread::sleep(std::time::Duration::from_secs(2));
            let other = d.load(&args, second, 120);
            (held.join().unwrap(), other)
        })
    };
    let jobs = || d.sql("SELECT GROUP_CONCAT(id, ' ', state ORDER BY id) FROM sluice_ledger_jobs");
    let (held, other) = both("done", 0, &[("SLUICE_PAUSE_AT", "looked:5000")], &[]);
    assert_ok(&other);
    assert_ok(&held);
    assert_has(&stderr(&held), &["nothing to load", "job 1 loaded"]);
    assert_eq!(d.count("t"), 200);
    assert_eq!(jobs().trim(), "1 finished");
    let (held, other) = both(
        "running",
        200,
        &[("SLUICE_PAUSE_AT", "looked:5000")],
        &[("SLUICE_PAUSE_AT", "planned:6000")],
    );
    assert_ok(&other);
    assert_eq!(held.status.code(), Some(2), "{}", printed(&held));
    assert_has(
        &stderr(&held),
        &["job 2 is being run by another sluice now"],
    );
    assert_eq!(d.count("t"), 400);
    assert_eq!(d.count("(SELECT DISTINCT i FROM t) x"), 400);
    assert_eq!(jobs().trim(), "1 finished,2 finished");
}

/// Both runs look before either records (held 1.5 s at `looked`), then wait on the job key's
/// named lock, which a session of the test holds for 5 s as a third run recording its job
/// would: let go, one records its job, the other finds it and is refused or loads nothing.
/// One job, every row once.
#[test]
fn two_runs_waiting_on_the_key_lock_record_one_job() {
    let d = mdb("keylock");
    d.sql("CREATE TABLE t (i int NOT NULL, s varchar(20))");
    let rows: Vec<u8> = (0..100)
        .flat_map(|i| format!("{i}\trow {i}\n").into_bytes())
        .collect();
    let f = d.file("t.txt", &rows);
    let args = [
        "--table",
        "t",
        "--format",
        "text",
        "--jobs",
        "2",
        f.to_str().unwrap(),
    ];
    // The job's key, from a first load whose rows and ledger rows are then dropped.
    assert_ok(&d.load(&args, &[], 60));
    let key = d
        .sql("SELECT job_key FROM sluice_ledger_jobs")
        .trim()
        .to_string();
    d.sql("TRUNCATE t; DELETE FROM sluice_ledger_job_files; DELETE FROM sluice_ledger_jobs");
    let sql = format!(
        "SELECT GET_LOCK(CONCAT('sluice:', '{}', ':key:', '{}'), 0), SLEEP(5)",
        d.name,
        &key[..8]
    );
    let holder = std::thread::spawn(move || {
        common::mariadb::maria().cluster.root_sql(&sql).unwrap();
    });
    let held = [("SLUICE_PAUSE_AT", "looked:1500")];
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| d.load(&args, &held, 60));
        let b = s.spawn(|| d.load(&args, &held, 60));
        let waiting = format!(
            "information_schema.PROCESSLIST WHERE STATE = 'User lock' AND DB = '{}'",
            d.name
        );
        common::wait_until("the runs never waited on the key", 5, || {
            d.count(&waiting) >= 2
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    holder.join().unwrap();
    let said = format!("{}\n---\n{}", printed(&a), printed(&b));
    let codes = [a.status.code(), b.status.code()];
    assert!(
        codes == [Some(0), Some(0)] && said.contains("nothing to load")
            || codes.contains(&Some(0))
                && codes.contains(&Some(2))
                && said.contains("is being run by another sluice now"),
        "{codes:?} {said}"
    );
    assert_eq!(d.count("t"), 100, "{said}");
    assert_eq!(
        d.sql("SELECT GROUP_CONCAT(state) FROM sluice_ledger_jobs")
            .trim(),
        "finished"
    );
}

#[test]
fn the_password_is_never_printed() {
    let d = mdb("secret");
    d.sql("CREATE TABLE t (i int NOT NULL)");
    let good = d.file("good.txt", b"1\n");
    let bad = d.file("bad.txt", b"1\nx\n");
    let pw = d.password();
    let mut outputs = vec![
        d.load(
            &["--table", "t", "--format", "text", good.to_str().unwrap()],
            &[],
            60,
        ),
        d.load(
            &["--table", "t", "--format", "text", bad.to_str().unwrap()],
            &[],
            60,
        ),
        d.load(
            &[
                "--table",
                "nope",
                "--format",
                "text",
                good.to_str().unwrap(),
            ],
            &[],
            60,
        ),
    ];
    // A wrong password: the message says the login failed, and shows neither password.
    let wrong = d.url.replace(pw, "wrong-pw-4711");
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--target", &wrong, "--table", "t", "--format", "text",
    ])
    .arg(&good);
    let o = common::run_bounded(c, 60);
    assert_eq!(o.status.code(), Some(4), "{}", printed(&o));
    assert!(!printed(&o).contains("wrong-pw-4711"), "{}", printed(&o));
    outputs.push(o);
    // MYSQL_PWD: used, with the client's warning, and not printed.
    let bare = d.url.replace(&format!(":{pw}@"), "@");
    let mut c = sluice_cmd();
    c.args([
        "load", "--target", &bare, "--table", "t", "--format", "text",
    ])
    .arg(&good)
    .env("MYSQL_PWD", pw);
    let o = common::run_bounded(c, 60);
    assert_ok(&o);
    assert!(
        stderr(&o).contains("MYSQL_PWD is insecure"),
        "{}",
        printed(&o)
    );
    outputs.push(o);
    for o in &outputs {
        assert!(
            !printed(o).contains(pw),
            "the password was printed:\n{}",
            printed(o)
        );
    }
}

#[test]
fn my_cnf_client_section_gives_user_password_and_port() {
    let d = mdb("mycnf");
    d.sql("CREATE TABLE t (i int NOT NULL)");
    let home = d.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cnf = home.join(".my.cnf");
    let port = common::mariadb::maria().port;
    std::fs::write(
        &cnf,
        format!(
            "[client]\nuser=sluice\npassword=\"{}\"\nport={port}\n",
            d.password()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cnf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = d.file("t.txt", b"7\n");
    let target = format!("mariadb://127.0.0.1/{}", d.name);
    let run = |cnf_mode: u32| {
        std::fs::set_permissions(&cnf, std::fs::Permissions::from_mode(cnf_mode)).unwrap();
        let mut c = sluice_cmd();
        c.args([
            "load", "-q", "--target", &target, "--table", "t", "--format", "text",
        ])
        .arg(&f)
        .env("HOME", &home);
        common::run_bounded(c, 60)
    };
    let o = run(0o600);
    assert_ok(&o);
    assert_eq!(d.count("t"), 1);
    // Anyone may write it: ignored, as the client ignores it (no password, no port: refused).
    let o = run(0o666);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is ignored: anyone may write it"),
        "{}",
        printed(&o)
    );
}

/// `probe` is not on MariaDB yet, and says so; `--strategy stage` of a plain table is refused
/// with what staging needs.
#[test]
fn commands_not_on_mariadb_yet_say_so() {
    let d = mdb("notyet");
    d.sql("CREATE TABLE t (i int NOT NULL)");
    let f = d.file("t.txt", b"1\n");
    let file = f.to_str().unwrap();
    let o = d.load(
        &[
            "--table",
            "t",
            "--format",
            "text",
            "--socket-buffer",
            "4M",
            file,
        ],
        &[],
        60,
    );
    assert_eq!(o.status.code(), Some(2), "{}", printed(&o));
    assert!(stderr(&o).contains("not on MariaDB yet"), "{}", printed(&o));
    assert!(!printed(&o).contains(d.password()), "{}", printed(&o));
    let o = d.load(
        &[
            "--table",
            "t",
            "--format",
            "text",
            "--strategy",
            "stage",
            f.to_str().unwrap(),
        ],
        &[],
        60,
    );
    assert_eq!(o.status.code(), Some(2), "{}", printed(&o));
    assert_has(
        &stderr(&o),
        &[
            "no input can be staged",
            "partitioned by one integer column",
        ],
    );
    assert_eq!(d.count("t"), 0);
}

/// `sluice probe` against MariaDB measures the round trip, the upload and the store rate on
/// each stream count, and this machine's parsing of a file (a dry run into the target's
/// table), recommends `--jobs`, and leaves nothing behind (its tables are temporary, its rows
/// rolled back); the password is never printed.
#[test]
fn probe_measures_a_mariadb_server_and_leaves_nothing() {
    let d = mdb("probe");
    d.sql("CREATE TABLE p (a int, b varchar(10))");
    let rows: String = (0..20_000).map(|i| format!("{i},x{i}\n")).collect();
    let f = d.file("p.csv", rows.as_bytes());
    let tables = || d.count("information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()");
    let before = tables();
    let o = sluice_cmd()
        .args([
            "probe",
            "--target",
            &d.url,
            "--jobs",
            "1,2",
            "--seconds",
            "0.6",
        ])
        .args(["--json", "--table", "p", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(!printed(&o).contains(d.password()), "{}", printed(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["round_trip_ms"].as_f64().unwrap() > 0.0, "{r}");
    for s in r["streams"].as_array().unwrap() {
        assert!(s["upload_mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(s["store_text_mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(r["parse_mb_per_cpu_second"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["recommended_jobs"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!((tables(), d.count("p")), (before, 0));
    let o = sluice_cmd()
        .args([
            "probe",
            "--target",
            &d.url,
            "--jobs",
            "1",
            "--seconds",
            "0.3",
        ])
        .arg("--upload-only")
        .output()
        .unwrap();
    assert_ok(&o);
    assert_has(
        &String::from_utf8_lossy(&o.stdout),
        &[
            "round trip:",
            "expected bottleneck: the upload path",
            "recommended: --jobs 1",
        ],
    );
}

/// `XA RECOVER` lists the whole server's prepared transactions, and two databases number their
/// jobs alike. A run of job 1 in one database that finds its last run's branches prepared
/// rolls back its own (undecided) and never touches job 1 of the other database, whose
/// decided branches its own next run commits: each database's rows exactly once.
#[test]
fn prepared_branches_of_another_databases_job_are_not_this_ones() {
    let a = mdb("xa_db_a");
    let b = mdb("xa_db_b");
    let files = |d: &MDb| {
        d.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(20))");
        let rows =
            |from: u32, to: u32| -> String { (from..to).map(|i| format!("{i}\tv{i}\n")).collect() };
        let f1 = d.file("a.txt", rows(0, 2000).as_bytes());
        let f2 = d.file("b.txt", rows(2000, 4000).as_bytes());
        [f1, f2]
    };
    let run = |d: &MDb, files: &[std::path::PathBuf; 2], kill: Option<&str>| {
        let mut args = vec!["--table", "t", "--format", "text", "--jobs", "2"];
        args.extend(["--prepare", "on"]);
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        let env: Vec<(&str, &str)> = kill.map(|p| ("SLUICE_KILL_AT", p)).into_iter().collect();
        d.load(&args, &env, 120)
    };
    let (fa, fb) = (files(&a), files(&b));
    let killed = run(&a, &fa, Some("decided"));
    assert_eq!(killed.status.code(), None, "{}", printed(&killed));
    let killed = run(&b, &fb, Some("prepared"));
    assert_eq!(killed.status.code(), None, "{}", printed(&killed));
    let (left_a, left_b) = (a.prepared(), b.prepared());
    assert!(left_a >= 1 && left_b >= 1, "{left_a} and {left_b} prepared");
    // B's job 1: its own branches rolled back, its files loaded again; A's untouched.
    let again = run(&b, &fb, None);
    assert_ok(&again);
    assert_has(
        &stderr(&again),
        &[&format!("rolled back {left_b} it had not")],
    );
    assert_eq!((b.count("t"), b.prepared()), (4000, 0));
    assert_eq!((a.prepared(), a.count("t")), (left_a, 0));
    // A's job 1: its decided branches committed, nothing loaded twice.
    let again = run(&a, &fa, None);
    assert_ok(&again);
    assert_has(
        &stderr(&again),
        &[&format!("committed {left_a} of its prepared")],
    );
    assert_eq!((a.count("t"), a.prepared()), (4000, 0));
    assert_eq!(a.count("(SELECT DISTINCT id FROM t) x"), 4000);
}

/// The streams' branches commit one after another, XA or not. A reader whose query comes
/// between two of those commits waits, and then sees every row of the load: the load holds
/// readers back while it commits. The load pauses 3 s between its first and second commit,
/// and a count is taken in that pause.
#[test]
fn a_reader_between_two_commits_waits_and_sees_the_whole_load() {
    for prepare in ["on", "off"] {
        let d = mdb(&format!("reader_gate_{prepare}"));
        d.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(20))");
        let rows =
            |from: u32, to: u32| -> String { (from..to).map(|i| format!("{i}\tv{i}\n")).collect() };
        let a = d.file("a.txt", rows(0, 2000).as_bytes());
        let b = d.file("b.txt", rows(2000, 4000).as_bytes());
        let start = || {
            d.sql("TRUNCATE t; DROP TABLE IF EXISTS sluice_ledger_job_chunks");
            let mut c = sluice_cmd();
            c.args([
                "load", "-q", "--target", &d.url, "--table", "t", "--format", "text",
            ])
            .args(["--jobs", "2", "--prepare", prepare])
            .args([&a, &b]);
            c
        };
        // The ledger is not held back: its chunk records say where the load is.
        let chunks = || {
            d.try_sql("SELECT COUNT(*) FROM sluice_ledger_job_chunks")
                .ok()
        };
        let (seen, out) = common::count_between_commits(start, chunks, || d.count("t"));
        assert_ok(&out);
        assert_eq!(seen, 4000, "--prepare {prepare}: {}", printed(&out));
        assert!(
            !printed(&out).contains("could not be held back"),
            "{}",
            printed(&out)
        );
    }
}

/// Four streams into two tables: a bad row in the last file of the second table fails the
/// load, and neither table keeps a row of it, nor the server a prepared branch; with the row
/// mended, the same command loads both tables whole.
#[test]
fn four_streams_into_two_tables_commit_all_or_nothing() {
    let d = mdb("four_two");
    d.sql(
        "CREATE TABLE pa (id int PRIMARY KEY, v varchar(20)); \
         CREATE TABLE pb (id int PRIMARY KEY, v varchar(20))",
    );
    let write = |bad: bool| -> Vec<String> {
        let mut files = Vec::new();
        for table in ["pa", "pb"] {
            for part in 0..4u32 {
                let mut text: String = (part * 1000..part * 1000 + 1000)
                    .map(|i| format!("{i}\t{table}{i}\n"))
                    .collect();
                if bad && table == "pb" && part == 3 {
                    text.push_str("not a number\tlate\n");
                }
                let f = d.file(&format!("{table}.{part}.txt"), text.as_bytes());
                files.push(f.to_str().unwrap().to_string());
            }
        }
        files
    };
    let run = |files: &[String]| {
        let mut args = vec!["--format", "text", "--jobs", "4"];
        args.extend(files.iter().map(String::as_str));
        d.load(&args, &[], 120)
    };
    let failed = run(&write(true));
    assert_eq!(failed.status.code(), Some(3), "{}", printed(&failed));
    assert_has(&stderr(&failed), &["pb.3.txt"]);
    assert_eq!((d.count("pa"), d.count("pb"), d.prepared()), (0, 0, 0));
    assert_ok(&run(&write(false)));
    assert_eq!(
        (d.count("pa"), d.count("pb"), d.prepared()),
        (4000, 4000, 0)
    );
}

/// Two sessions writing into one InnoDB table slow each other down, so a stream takes a table
/// no other stream is loading first: a small table's one file, last in the biggest-first
/// order, is taken while the other stream loads the big table, not after all of it. The JSON
/// report's chunk starts show the order.
#[test]
fn a_stream_takes_a_table_no_other_stream_is_loading() {
    let d = mdb("apart");
    d.sql("CREATE TABLE big (id int, v varchar(60)); CREATE TABLE small (id int, v varchar(60))");
    let mut files = Vec::new();
    for part in 0..6u32 {
        let text: String = (part * 40_000..(part + 1) * 40_000)
            .map(|i| format!("{i}\tsome text to make the rows of the big table longer {i}\n"))
            .collect();
        files.push(d.file(&format!("big.{part}.txt"), text.as_bytes()));
    }
    files.push(d.file("small.txt", b"1\tone\n2\ttwo\n"));
    let report = d.file("report.json", b"");
    let mut args = vec!["--format", "text", "--jobs", "2", "--report-json"];
    args.push(report.to_str().unwrap());
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    assert_ok(&d.load(&args, &[], 120));
    assert_eq!((d.count("big"), d.count("small")), (240_000, 2));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let mut starts: Vec<(f64, String)> = Vec::new();
    for s in r["streams"].as_array().unwrap() {
        for c in s["chunks"].as_array().unwrap() {
            let table = c["table"].as_str().unwrap().to_string();
            starts.push((c["start"].as_f64().unwrap(), table));
        }
    }
    starts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let small = starts
        .iter()
        .position(|(_, t)| t.contains("small"))
        .unwrap();
    assert!(
        small + 1 < starts.len(),
        "the small table's file loaded after every chunk of the big one: {starts:?}"
    );
}

/// `ENUM`, `SET`, `YEAR`, `FLOAT`, `DOUBLE` and `TIME`, checked on the client: their edge values
/// load as the server's own strict `LOAD DATA INFILE` loads them, and each value the server
/// refuses, sluice refuses first, with its own reason, the file and line, nothing committed.
#[test]
fn more_types_are_checked_on_the_client_as_the_servers_strict_load_checks_them() {
    let d = mdb("more_types");
    d.sql(
        "CREATE TABLE m (k enum('a','b c','It''s'), s set('x','y','z'), y year, f float, \
         g double, t time(1)); CREATE TABLE m_ref LIKE m",
    );
    let good = [
        "a\tx\t0\t3.402823466e38\t1.7976931348623157e308\t838:59:59",
        "B C  \tX,z,x\t99\t-3.402823466e38\t-1e-320\t-838:59:59.0",
        "it's\t\t0001\t1e-50\t+.5\t1:02:03.5",
        "\\N\ty,y\t2155\t5.\t0\t24:00:00",
        "b c\tz\t1901\t0.1\t-0\t00:00:00",
    ];
    assert_both_load(&d, "m", "m_ref", good.join("\n").as_bytes());
    let run = |f: &std::path::Path| load_text(&d, "m", f);
    let bad = [
        (
            "c\tx\t0\t0\t0\t0:00:00",
            "not a value of enum('a','b c','It''s')",
        ),
        (" a\tx\t0\t0\t0\t0:00:00", "not a value of enum"),
        (
            "a\tx,w\t0\t0\t0\t0:00:00",
            "not a value of set('x','y','z')",
        ),
        ("a\tx,\t0\t0\t0\t0:00:00", "not a value of set"),
        (
            "a\tx\t1900\t0\t0\t0:00:00",
            "out of range for year (1900: 1901 to 2155)",
        ),
        ("a\tx\t2156\t0\t0\t0:00:00", "out of range for year"),
        (
            "a\tx\t0\t3.4028235e38\t0\t0:00:00",
            "out of range for float",
        ),
        ("a\tx\t0\tNaN\t0\t0:00:00", "not a valid float"),
        ("a\tx\t0\t0\t1e309\t0:00:00", "out of range for double"),
        ("a\tx\t0\t0\tabc\t0:00:00", "not a valid double"),
        ("a\tx\t0\t0\t0\t839:00:00", "time 839:00:00 is out of range"),
        ("a\tx\t0\t0\t0\t12:60:00", "time 12:60:00 is out of range"),
    ];
    assert_both_refuse(
        &d,
        "m_ref",
        "a\tx\t0\t0\t0\t0:00:00",
        &bad,
        run,
        &["m", "m_ref"],
    );
}

/// `rows` (tab-separated lines) loaded by the server's strict `LOAD DATA INFILE` into
/// `reference` and by sluice into `table`: the same rows. Both are emptied after.
fn assert_both_load(d: &MDb, table: &str, reference: &str, rows: &[u8]) {
    let f = d.file("good.txt", &[rows, b"\n"].concat());
    d.server_load(reference, &f, "\\t")
        .unwrap_or_else(|e| panic!("the server's strict LOAD DATA INFILE: {e}"));
    assert_ok(&load_text(d, table, &f));
    d.assert_same_rows(table, reference);
    d.sql(&format!(
        "TRUNCATE TABLE {table}; TRUNCATE TABLE {reference}"
    ));
}

/// `sluice load --table TABLE --format text FILE` into `d`.
fn load_text(d: &MDb, table: &str, file: &std::path::Path) -> std::process::Output {
    let file = file.to_str().unwrap();
    d.load(&["--table", table, "--format", "text", file], &[], 60)
}

/// Each of `bad` rows, after a good `first` row: the server's strict `LOAD DATA INFILE` into
/// `reference` refuses it, and sluice (`run`) refuses it first (exit 3) with `reason` and the
/// file and line, not the server's message; `tables` stay empty.
fn assert_both_refuse(
    d: &MDb,
    reference: &str,
    first: &str,
    bad: &[(&str, &str)],
    run: impl Fn(&std::path::Path) -> std::process::Output,
    tables: &[&str],
) {
    for &(row, reason) in bad {
        let f = d.file("bad.txt", format!("{first}\n{row}\n").as_bytes());
        assert!(
            d.server_load(reference, &f, "\\t").is_err(),
            "the server's strict load took {row:?}"
        );
        let o = run(&f);
        assert_eq!(o.status.code(), Some(3), "{row:?}: {}", printed(&o));
        let err = stderr(&o);
        assert!(
            err.contains("bad.txt, line 2")
                && err.contains(reason)
                && !err.contains("MariaDB error"),
            "{row:?}, {reason}:\n{err}"
        );
        for t in tables {
            assert_eq!(d.count(t), 0, "{t} after {row:?}");
        }
    }
}

/// `TIMESTAMP`, `BIT` and MariaDB's `JSON` (a `LONGTEXT` whose check is `json_valid`),
/// checked on the client: their edge values load as the server's own strict
/// `LOAD DATA INFILE` loads them, and each value it refuses, sluice refuses first with its own
/// reason (a `TIMESTAMP` past the range read in the session's zone, a `BIT` whose bytes
/// hold more bits than the column, JSON that `json_valid` refuses), nothing committed.
#[test]
fn timestamps_bits_and_json_are_checked_as_the_servers_strict_load_checks_them() {
    let d = mdb("ts_bit_json");
    d.sql("CREATE TABLE x (ts timestamp(6) NULL, b bit(10), j json); CREATE TABLE x_ref LIKE x");
    let utc = d.sql("SELECT @@time_zone").trim() == "+00:00";
    let mut good: Vec<&[u8]> = vec![
        b"2024-02-29 12:00:00.5\ta\t{\"a\":[1,2.,-0],\"a\":null}",
        b"2000-01-01\t\x03b\t[-]",
        b"\\N\t\t\"\\\\x\"",
        b"2037-12-31 23:59:59.999999\t\x01\t1e400",
        b"1971-01-01T00:00:00\t\\N\t{\"\xc3\xa9\": {}, \"  \": [1e]}",
        b"2020-06-01 00:00:00\tz\t\\N",
    ];
    if utc {
        good.push(b"1970-01-01 00:00:01\ta\t0");
        good.push(b"2038-01-19 03:14:07\ta\t0");
    } else {
        eprintln!("the server's time zone is not +00:00: the range's exact edges are not loaded");
    }
    assert_both_load(&d, "x", "x_ref", &good.join(&b"\n"[..]));
    let nested = format!("\\N\ta\t{}1{}", "[".repeat(32), "]".repeat(32));
    let mut bad = vec![
        ("2040-01-01 00:00:00\ta\t0", "out of range for timestamp"),
        (
            "2023-02-29 00:00:00\ta\t0",
            "February 2023 has 28 days, not 29",
        ),
        ("\\N\tab\t0", "value too long for type bit(10)"),
        (
            "\\N\t1234\t0",
            "0x31323334 has 30 significant bits where the column holds 10",
        ),
        (
            "\\N\ta\t[1,]",
            "not valid JSON (the column's json_valid check): ']'",
        ),
        ("\\N\ta\t{\"a\":1", "it ends too early"),
        ("\\N\ta\t", "not valid JSON"),
        (
            "\\N\ta\t\"\\\\ud800\"",
            "\\uD800 is a surrogate with no pair",
        ),
        (&nested, "nested deeper than 31 levels"),
    ];
    if utc {
        bad.push(("1970-01-01 00:00:00\ta\t0", "out of range for timestamp"));
    }
    let run = |f: &std::path::Path| load_text(&d, "x", f);
    assert_both_refuse(&d, "x_ref", "\\N\ta\t0", &bad, run, &["x", "x_ref"]);
}

/// sluice's `JSON` check gives the server's own `json_valid` answer on thousands of strings
/// near JSON (valid values with characters inserted, deleted and replaced), apart from the few
/// it leaves to the server.
#[test]
fn the_json_check_agrees_with_the_servers_json_valid() {
    let d = mdb("json_valid");
    let values = near_json(4000);
    let file: String = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{i}\t{}\n", hex(v.as_bytes())))
        .collect();
    let f = d.file("values.txt", file.as_bytes());
    d.sql(&format!(
        "CREATE TABLE v (id int PRIMARY KEY, v longtext CHARACTER SET utf8mb4 COLLATE \
         utf8mb4_bin); LOAD DATA INFILE '{}' INTO TABLE v FIELDS TERMINATED BY '\\t' \
         (id, @h) SET v = UNHEX(@h)",
        f.display()
    ));
    let answers = d.sql("SELECT json_valid(v) FROM v ORDER BY id");
    let answers: Vec<&str> = answers.lines().collect();
    assert_eq!(answers.len(), values.len());
    let (mut left, mut valid) = (0, 0);
    for (v, server) in values.iter().zip(answers) {
        let ours = match sluice_mariadb::types::json::check(v.as_bytes()) {
            Ok(sluice_mariadb::types::scalar::Checked::Valid) => "1",
            Ok(sluice_mariadb::types::scalar::Checked::Server) => {
                left += 1;
                continue;
            }
            Err(_) => "0",
        };
        valid += usize::from(ours == "1");
        assert_eq!(ours, server, "json_valid({v:?})");
    }
    eprintln!(
        "{valid} valid, {left} left to the server, of {}",
        values.len()
    );
    assert!(
        left * 10 < values.len(),
        "{left} of {} left to the server",
        values.len()
    );
    assert!(
        valid * 5 > values.len() && valid * 5 < values.len() * 4,
        "{valid} valid"
    );
}

/// `n` strings near JSON: valid values with a few characters inserted, deleted or replaced,
/// from a fixed seed.
fn near_json(n: usize) -> Vec<String> {
    const BASES: [&str; 13] = [
        "{\"a\": [1, 2.5, -3e4, true, false, null]}",
        "[\"\\u00e9\\n\", {\"k\": {}}, []]",
        "\"\\uD83D\\uDE00 caf\u{e9}\"",
        "-0.0e+10",
        "{\"\u{540d}\u{524d}\": \"\u{6771}\u{4eac}\", \" x\" : [1.,-]}",
        "[[[[1]]], {\"a\":{\"b\":[null]}}]",
        "123",
        "\"\\\"\\\\\\/\\b\\f\\r\\t\"",
        "{}",
        "[ 1 , 2 ]",
        "true",
        "{\"\": 0}",
        "[0e5, -0E+1, 0.0]",
    ];
    const PIECES: [&str; 26] = [
        "{", "}", "[", "]", ":", ",", "\"", "\\", "-", "+", ".", "0", "7", "e", "E", "t", "n", "u",
        "x", " ", "\t", "\u{e9}", "\\u", "D800", "null", "\n",
    ];
    let mut seed: u64 = 0x5eed_1234_abcd_0001;
    let mut next = move |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    (0..n)
        .map(|_| {
            let mut v: Vec<char> = BASES[next(BASES.len())].chars().collect();
            for _ in 0..next(4) {
                let at = next(v.len() + 1);
                match next(3) {
                    0 => v
                        .splice(at..at, PIECES[next(PIECES.len())].chars())
                        .for_each(drop),
                    1 if at < v.len() => drop(v.remove(at)),
                    _ if at < v.len() => v
                        .splice(at..=at, PIECES[next(PIECES.len())].chars())
                        .for_each(drop),
                    _ => {}
                }
            }
            v.into_iter().collect()
        })
        .collect()
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// The verdict of a load `args` into `d`, from its JSON report: (kind, because, next step).
fn verdict(d: &MDb, args: &[&str]) -> (String, String, String) {
    let json = d.dir.join("report.json");
    let mut all = vec!["--report-json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    assert_ok(&d.load(&all, &[], 120));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = &r["verdict"];
    eprintln!(
        "{} s, strategy {} steps {} job {}",
        r["elapsed_seconds"], r["strategy"], r["steps"], r["job"]
    );
    assert!(
        v["figures"]["server_samples"].as_f64().unwrap_or(0.0) >= 5.0,
        "the server's sessions were sampled: {v}"
    );
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    (text("kind"), text("because"), text("next_step"))
}

/// The verdict on MariaDB names what the server's sessions were doing, from its process list
/// and InnoDB's transactions: a table with four secondary indexes keeps the server busy in its
/// statements (which MariaDB does not split into CPU and data files, and the verdict says so),
/// and the advice names those indexes and nothing the table lacks; a table another session
/// holds with `LOCK TABLES` makes the load lock-bound, waiting on its metadata lock.
#[test]
fn the_verdict_names_what_mariadbs_sessions_were_doing() {
    let d = mdb("verdict");
    d.sql(
        "CREATE TABLE v (a int PRIMARY KEY, b varchar(40), c double, e varchar(40), \
         KEY kb (b), KEY kc (c), KEY ke (e), KEY kbe (b, e))",
    );
    let rows: String = (1..=200_000u64)
        .map(|i| {
            format!(
                "{i}\tn{}\t{}.5\tx{}\n",
                i * 7919 % 1_000_003,
                i,
                i * 104_729 % 999_983
            )
        })
        .collect();
    let f = d.file("v.txt", rows.as_bytes());
    let f = f.to_str().unwrap();
    let load = ["--table", "v", "--format", "text", "--jobs", "2", f];
    let (kind, because, next) = verdict(&d, &load);
    assert_eq!(kind, "server-bound", "{because}");
    assert!(
        because.contains(
            "in its statements (on CPU or in its data files: MariaDB does not say which)"
        ),
        "{because}"
    );
    assert!(
        next.contains("indexes on v (kb, kbe, kc, ke, PRIMARY)"),
        "{next}"
    );
    assert!(
        !next.contains("trigger") && !next.contains("check"),
        "{next}"
    );

    // Another file (a new job): a rerun of the first would look into the table first.
    d.sql("TRUNCATE TABLE v");
    let fewer: String = rows
        .lines()
        .take(50_000)
        .map(|l| format!("{l}\n"))
        .collect();
    let g = d.file("w.txt", fewer.as_bytes());
    let holder = hold_table_locked(&d, "v", 6);
    let (kind, because, next) = verdict(
        &d,
        &["--table", "v", "--format", "text", g.to_str().unwrap()],
    );
    holder.join().unwrap();
    assert_eq!(kind, "lock-bound", "{because}");
    assert!(
        because.contains("Waiting for table metadata lock"),
        "{because}"
    );
    assert!(next.contains("SHOW PROCESSLIST names it"), "{next}");
    assert_eq!(d.count("v"), 50_000);
}

/// Table `v (a int PRIMARY KEY)` in `d`, and a file of its keys 1 to 1000.
fn thousand_keys(d: &MDb) -> std::path::PathBuf {
    d.sql("CREATE TABLE v (a int PRIMARY KEY)");
    let rows: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    d.file("v.txt", rows.as_bytes())
}

/// Another session holds `table` with `LOCK TABLES ... WRITE` for `seconds`, from when this
/// returns; the thread ends when it lets go.
fn hold_table_locked(d: &MDb, table: &str, seconds: u32) -> std::thread::JoinHandle<()> {
    let sql = format!(
        "USE {}; LOCK TABLES {table} WRITE; SELECT SLEEP({seconds}); UNLOCK TABLES",
        d.name
    );
    let holder = std::thread::spawn(move || {
        common::mariadb::maria().cluster.root_sql(&sql).unwrap();
    });
    let held = format!(
        "information_schema.PROCESSLIST WHERE STATE = 'User sleep' AND DB = '{}'",
        d.name
    );
    common::wait_until("the lock's holder did not start", 30, || d.count(&held) > 0);
    holder
}

/// A stream waiting on a lock another session holds is watched, not left silent: after 10 s
/// sluice says which wait it is and what to do, keeps waiting (`-q` does not hide it), and
/// loads once the lock is gone.
#[test]
fn a_stream_waiting_on_another_sessions_lock_is_reported_and_loads_after() {
    let d = mdb("stream_locked");
    let f = thousand_keys(&d);
    let holder = hold_table_locked(&d, "v", 20);
    let o = load_text(&d, "v", &f);
    holder.join().unwrap();
    assert_ok(&o);
    assert_has(
        &stderr(&o),
        &[
            "stream 1 has waited 1",
            "on a lock another session holds (Waiting for table metadata lock)",
            "SHOW PROCESSLIST names the session",
        ],
    );
    assert_eq!(d.count("v"), 1000);
}

/// A rerun looks into a table an earlier job loaded, to see whether its rows are still there
/// (here: truncated since). Another session holding the table locked makes that look wait at
/// most 10 s, then the load fails (exit 5) saying so and what to do; once the lock is gone the
/// same command loads the file again.
#[test]
fn a_rerun_does_not_wait_without_end_on_a_table_another_session_holds() {
    let d = mdb("rerun_locked");
    let f = thousand_keys(&d);
    let f = f.to_str().unwrap();
    let load = ["--table", "v", "--format", "text", f];
    assert_ok(&d.load(&load, &[], 60));
    d.sql("TRUNCATE TABLE v");
    let holder = hold_table_locked(&d, "v", 14);
    let since = std::time::Instant::now();
    let o = d.load(&load, &[], 60);
    let waited = since.elapsed().as_secs_f64();
    assert_eq!(o.status.code(), Some(5), "{}", printed(&o));
    assert_has(
        &stderr(&o),
        &[
            "another session has held a lock on `",
            "for 10 s",
            "SHOW PROCESSLIST",
            "run the same command again",
        ],
    );
    assert!(waited < 13.0, "the look waited {waited} s");
    holder.join().unwrap();
    assert_ok(&d.load(&load, &[], 60));
    assert_eq!(d.count("v"), 1000);
}

/// `sluice ddl tpch --create` against a MariaDB target makes MariaDB's tables: plain with keys,
/// refused (exit 2, naming them) when they exist, and with `--replace --partitions 4` each big
/// table partitioned by key range, aligned with `sluice gen tpch --parts 4`: a load puts each
/// part's rows in its own partition.
#[test]
fn ddl_tpch_creates_mariadbs_tables_plain_and_partitioned() {
    let d = mdb("ddl");
    let ddl = |args: &[&str]| {
        sluice_cmd()
            .args(["ddl", "tpch", "--create", "--target", &d.url])
            .args(args)
            .output()
            .unwrap()
    };
    assert_ok(&ddl(&["--keys"]));
    assert_eq!(
        d.sql(
            "SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = \
               DATABASE() AND CONSTRAINT_TYPE = 'PRIMARY KEY'"
        )
        .trim(),
        "8"
    );
    let again = ddl(&[]);
    assert_eq!(again.status.code(), Some(2), "{}", printed(&again));
    assert_has(&stderr(&again), &["already exist"]);
    assert!(!printed(&again).contains(d.password()));
    assert_ok(&ddl(&[
        "--replace",
        "--partitions",
        "4",
        "--scale",
        "0.01",
        "--keys",
    ]));
    let partitions = |t: &str| -> Vec<u64> {
        d.sql(&format!(
            "SELECT TABLE_ROWS FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = \
             DATABASE() AND TABLE_NAME = '{t}' ORDER BY PARTITION_ORDINAL_POSITION"
        ))
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
    };
    assert_eq!(partitions("lineitem").len(), 4);
    // More partitions than a table has rows at the scale: refused, not invalid SQL.
    let too_many = ddl(&["--replace", "--partitions", "16", "--scale", "0.001"]);
    assert_eq!(too_many.status.code(), Some(2), "{}", printed(&too_many));
    assert_has(&stderr(&too_many), &["would be empty"]);
    let files = gen_tpch(&d.dir.join("sf001"), "0.01", "4");
    let names: Vec<String> = files.iter().map(|f| f.to_str().unwrap().into()).collect();
    let mut args = vec!["--jobs", "2"];
    args.extend(names.iter().map(String::as_str));
    assert_ok(&d.load(&args, &[], 300));
    // Each part's rows in its own partition: the exact count of one partition's key range.
    for (p, part) in [(1, "p1"), (4, "p4")] {
        let file = files
            .iter()
            .find(|f| f.file_name().unwrap().to_str() == Some(&format!("orders.{p}.tbl")))
            .unwrap_or_else(|| panic!("no orders part {p} in {files:?}"));
        let lines = std::fs::read_to_string(file).unwrap().lines().count() as u64;
        assert_eq!(d.count(&format!("orders PARTITION ({part})")), lines);
    }
    assert_eq!(d.count("orders"), 15_000);
}

/// `sluice ddl tpch --partitions 4` and `gen --parts 4` line up: each part is staged into its
/// partition's own table and exchanged in, and the result equals a direct load's, row for row.
#[test]
fn tpch_parts_are_staged_and_exchanged_into_their_partitions() {
    let d = mdb("stage_tpch");
    let e = mdb("stage_tpch_direct");
    let ddl = |url: &str, partitions: &str| {
        let mut c = sluice_cmd();
        c.args(["ddl", "tpch", "--create", "--keys", "--target", url]);
        c.args(["--partitions", partitions, "--scale", "0.01"]);
        assert_ok(&c.output().unwrap());
    };
    ddl(&d.url, "4");
    ddl(&e.url, "1");
    let files = gen_tpch(&d.dir.join("sf001"), "0.01", "4");
    let names: Vec<String> = files.iter().map(|f| f.to_str().unwrap().into()).collect();
    let mut args = vec!["--jobs", "2", "--strategy", "stage"];
    args.extend(names.iter().map(String::as_str));
    let bulk = || -> u64 {
        let status = d.sql("SHOW GLOBAL STATUS LIKE 'Innodb_bulk_operations'");
        status.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = bulk();
    let out = d.load(&args, &[], 300);
    assert_ok(&out);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_has(&summary, &["strategy: stage", "24 staging tables"]);
    // Each of the 24 staging tables (6 tables, 4 parts) filled on InnoDB's bulk path (the
    // server's count: other tests running at once can only add to it).
    assert!(bulk() - before >= 24, "the bulk path was not taken");
    args[3] = "direct";
    assert_ok(&e.load(&args, &[], 300));
    for t in [
        "lineitem", "orders", "customer", "part", "partsupp", "supplier",
    ] {
        d.assert_same_rows(t, &format!("{}.{t}", e.name));
    }
    let left = staging_left(&d);
    assert_eq!(left, 0, "staging tables left behind");
}

/// `--strategy auto` (the default) stages on MariaDB what was measured faster staged: a
/// partitioned table with a secondary index (built after the rows); one whose only index is its
/// primary key loads directly, and the summary says why, once for the table.
#[test]
fn auto_stages_where_staging_measured_faster() {
    let d = mdb("stage_auto");
    let text = |r: std::ops::Range<u32>| -> String { r.map(|i| format!("{i},v{i}\n")).collect() };
    let a = d.file("a.csv", text(0..3000).as_bytes());
    let b = d.file("b.csv", text(3000..6000).as_bytes());
    for (table, index) in [("plain_keys", ""), ("indexed", ", KEY (v)")] {
        d.sql(&format!(
            "CREATE TABLE {table} (id int NOT NULL, v varchar(40), PRIMARY KEY (id){index}) \
             PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (3000), \
             PARTITION p1 VALUES LESS THAN (6000))"
        ));
        let args = [
            "--table",
            table,
            "--jobs",
            "2",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ];
        let out = d.load(&args, &[], 120);
        assert_ok(&out);
        let summary = String::from_utf8_lossy(&out.stdout);
        match index.is_empty() {
            true => {
                assert_has(
                    &summary,
                    &[
                        "and 1 more file(s) (table plain_keys)",
                        "it has no secondary index",
                        "--strategy stage stages it",
                    ],
                );
                assert!(!summary.contains("strategy: stage"), "{summary}");
            }
            false => assert_has(&summary, &["strategy: stage", "2 staging tables"]),
        }
        assert_eq!(d.count(table), 6000);
        // The exchanged table is the one the ledger knows: the same command loads nothing.
        let again = d.load(&args, &[], 120);
        assert_ok(&again);
        assert_has(&stderr(&again), &["nothing to load"]);
        assert_eq!(d.count(table), 6000);
    }
}

/// A key twice in the rows one transaction loads (a file and another of the same partition):
/// the server's warning 1062 names only the entry and the index, and sluice names the row, with
/// file and line, as a bad row (exit 3, nothing committed, no staging table left), directly
/// and on the staged bulk path alike; a rerun could not fix it, so it is not a server error.
#[test]
fn a_duplicate_key_in_one_streams_rows_is_a_bad_row_named_by_its_line() {
    let d = mdb("dup_line");
    d.sql(
        "CREATE TABLE p (id int NOT NULL, v varchar(40), PRIMARY KEY (id), KEY (v)) \
         PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (3000), \
         PARTITION p1 VALUES LESS THAN (6000))",
    );
    let text = |r: std::ops::Range<u32>| -> String { r.map(|i| format!("{i},v{i}\n")).collect() };
    let a = d.file("a.csv", text(0..3000).as_bytes());
    let b = d.file(
        "b.csv",
        format!("{}17,again\n", text(3000..4000)).as_bytes(),
    );
    for strategy in ["stage", "direct"] {
        let args = [
            "--table",
            "p",
            "--jobs",
            "1",
            "--strategy",
            strategy,
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ];
        let out = d.load(&args, &[], 120);
        assert_eq!(out.status.code(), Some(3), "{strategy}: {}", printed(&out));
        assert_has(
            &stderr(&out),
            &[
                "b.csv, line 1001",
                "Duplicate entry '17'",
                "nothing was committed",
            ],
        );
        assert_eq!(d.count("p"), 0);
        let left = staging_left(&d);
        assert_eq!(left, 0, "{strategy}: staging tables left behind");
    }
}

/// Tables `tables`, each `(id, v)` keyed and RANGE-partitioned by `id` in two (below 3000, and
/// 3000 to 6000), and one file for each partition (`a.csv`: ids 0 to 2999, `b.csv`: 3000 to
/// 5999).
fn two_partitions(d: &MDb, tables: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    for t in tables {
        d.sql(&format!(
            "CREATE TABLE {t} (id int NOT NULL, v varchar(40), PRIMARY KEY (id)) \
             PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (3000), \
             PARTITION p1 VALUES LESS THAN (6000))"
        ));
    }
    let text = |r: std::ops::Range<u32>| -> String { r.map(|i| format!("{i},v{i}\n")).collect() };
    (
        d.file("a.csv", text(0..3000).as_bytes()),
        d.file("b.csv", text(3000..6000).as_bytes()),
    )
}

/// A partition's step cut off between its `EXCHANGE PARTITION` and its record (made here by
/// hand, with the statements the step runs, after a kill between two partitions), and one cut
/// off just before its exchange: the same command settles each, and loads nothing twice.
#[test]
fn an_exchange_cut_off_before_its_record_is_settled_by_the_same_command() {
    for exchanged in [true, false] {
        let d = mdb(&format!("stage_settle_{exchanged}"));
        let (a, b) = two_partitions(&d, &["p"]);
        let args = [
            "--table",
            "p",
            "--jobs",
            "2",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ];
        let out = d.load(&args, &[("SLUICE_KILL_AT", "switched")], 120);
        assert_eq!(out.status.code(), None, "killed: {}", printed(&out));
        let left = d.sql("SELECT staging, part FROM sluice_ledger_staged");
        let (staging, part) = left
            .trim()
            .split_once('\t')
            .expect("one staging table left");
        d.sql("UPDATE sluice_ledger_staged SET switching = TRUE");
        if exchanged {
            d.sql(&format!(
                "ALTER TABLE p EXCHANGE PARTITION {part} WITH TABLE {staging}"
            ));
        }
        let out = d.load(&args, &[], 120);
        assert_ok(&out);
        assert_eq!(d.count("p"), 6000, "exchanged: {exchanged}");
        assert_eq!(d.count("(SELECT DISTINCT id FROM p) x"), 6000);
        assert_eq!(d.count("sluice_ledger_staged"), 0);
        let left = d.sql(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME LIKE 'sluice!_stage!_%' ESCAPE '!'",
        );
        assert_eq!(
            left.trim(),
            "",
            "staging tables left behind (exchanged by hand: {exchanged}, the first run's \
             leftover {staging}): {}",
            printed(&out)
        );
    }
}

/// A staged unit retried in a run that was then killed (here its record waited past
/// `--lock-wait-timeout` on a lock another session holds on the records table; in CI it was
/// a deadlock of two streams' records) leaves a staging table without a record. The rerun,
/// with every chunk settled and nothing left to load, readies no staging area: resuming the
/// job drops that table and says so, and exits 0 with nothing left behind.
#[test]
fn a_retried_units_unrecorded_staging_table_is_dropped_by_the_rerun() {
    let d = mdb("stage_orphan");
    let (a, b) = two_partitions(&d, &["p", "q"]);
    // A staged load of another table makes the records table.
    assert_ok(&d.load(
        &["--table", "q", "--strategy", "stage", a.to_str().unwrap()],
        &[],
        120,
    ));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = [
        "--table",
        "p",
        "--jobs",
        "2",
        "--strategy",
        "stage",
        "--lock-wait-timeout",
        "2s",
        "--retries",
        "8",
        a,
        b,
    ];
    // Held 8 s from before the load starts: a record whose insert begins in its first 6 s
    // waits 2 s and is refused, and its unit is retried (as often as it takes).
    let db = d.name.clone();
    let holder = std::thread::spawn(move || {
        common::mariadb::maria().cluster.root_sql(&format!(
            "USE {db}; START TRANSACTION; SELECT * FROM sluice_ledger_staged FOR UPDATE; \
             SELECT SLEEP(8) AS sluice_test_hold; COMMIT"
        ))
    });
    let holding = "information_schema.PROCESSLIST WHERE INFO LIKE '%AS sluice!_test!_hold%' \
                   ESCAPE '!' AND INFO NOT LIKE '%PROCESSLIST%'";
    let asked = std::time::Instant::now();
    while d.count(holding) == 0 {
        assert!(
            asked.elapsed().as_secs() < 30,
            "the holding session never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = d.load(&args, &[("SLUICE_KILL_AT", "switched")], 120);
    holder.join().unwrap().unwrap();
    assert_eq!(out.status.code(), None, "killed: {}", printed(&out));
    let recorded = d.count("sluice_ledger_staged");
    assert!(
        staging_left(&d) > recorded,
        "no unrecorded staging table: the hold retried nothing ({})",
        printed(&out)
    );
    // The cut-off step settled as in the test above: exchanged by hand, recorded by the rerun.
    let left = d.sql("SELECT staging, part FROM sluice_ledger_staged");
    assert_eq!(
        left.trim().lines().count(),
        1,
        "one recorded table left: {left}"
    );
    let (staging, part) = left.trim().split_once('\t').unwrap();
    d.sql(&format!(
        "UPDATE sluice_ledger_staged SET switching = TRUE; \
         ALTER TABLE p EXCHANGE PARTITION {part} WITH TABLE {staging}"
    ));
    let out = d.load(&args, &[], 120);
    assert_ok(&out);
    assert_has(&stderr(&out), &["dropped", "left unfinished"]);
    assert_eq!(d.count("p"), 6000);
    assert_eq!(d.count("(SELECT DISTINCT id FROM p) x"), 6000);
    assert_eq!(staging_left(&d), 0, "{}", printed(&out));
}

/// `sluice demo --engine mariadb`: the whole job on a private MariaDB server of its own (made
/// in its directory, started with the bulk-load settings, stopped at the end): TPC-H
/// generated, tables created, loaded, every count verified, Q1 run; a second run starts the
/// same server again.
#[test]
fn demo_runs_end_to_end_on_a_private_mariadb() {
    let d = mdb("demo");
    let (data, server) = (d.dir.join("data"), d.dir.join("server"));
    let demo = || {
        let mut c = sluice_cmd();
        c.args([
            "demo", "--engine", "mariadb", "--scale", "0.01", "--parts", "2", "-q",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--mariadb-dir")
        .arg(&server);
        common::run_bounded(c, 600)
    };
    for _ in 0..2 {
        let o = demo();
        assert_ok(&o);
        assert_has(
            &String::from_utf8_lossy(&o.stdout),
            &[
                "verified: all eight tables hold exactly the generated rows",
                "TPC-H Q1",
                "count_order",
                "the private MariaDB stopped with the demo",
            ],
        );
    }
    // Stopped: nothing listens on its socket any more.
    let socket = server.join("mariadb.sock");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_err(),
        "the demo's server still runs"
    );
    // A directory of other files is not made a server's (as root it would be given to mysql),
    // and a PostgreSQL target is not silently replaced by a private MariaDB.
    let other = d.dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), b"mine").unwrap();
    for args in [
        vec!["--mariadb-dir", other.to_str().unwrap()],
        vec!["--target", "postgresql://localhost/x"],
    ] {
        let mut c = sluice_cmd();
        c.args([
            "demo", "--engine", "mariadb", "--scale", "0.01", "--parts", "2", "-q",
        ])
        .arg("--data")
        .arg(&data)
        .args(&args);
        let o = common::run_bounded(c, 120);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", printed(&o));
    }
    assert_eq!(std::fs::read(other.join("keep.txt")).unwrap(), b"mine");
}

/// A server that refuses `LOAD DATA LOCAL` (`local_infile` off, which sluice loads with) is
/// named before anything starts, as a usage error (exit 2) with what to set, not a failure
/// that "the same command resumes"; and nothing is created in the database.
#[test]
fn a_server_that_refuses_load_data_local_is_named_before_anything_starts() {
    let d = mdb("no_local_infile");
    let server = sluice_mariadb::cluster::Cluster::new(d.dir.join("server")).unwrap();
    server.init().unwrap();
    let mut settings = sluice_mariadb::cluster::bulk_load_settings();
    settings.retain(|(k, _)| !k.contains("local_infile") && !k.contains("local-infile"));
    settings.push(("local-infile".into(), "0".into()));
    settings.push(("innodb_buffer_pool_size".into(), "64M".into()));
    settings.push(("innodb_log_file_size".into(), "64M".into()));
    server.start(&settings).unwrap();
    server
        .root_sql("CREATE DATABASE l; CREATE TABLE l.t (i int)")
        .unwrap();
    let f = d.file("t.txt", b"1\n2\n");
    let mut c = sluice_cmd();
    c.args(["load", "--table", "t", "--format", "text", "--target"])
        .arg(server.url("l").unwrap())
        .arg(&f);
    let o = common::run_bounded(c, 60);
    assert_eq!(o.status.code(), Some(2), "{}", printed(&o));
    assert_has(
        &stderr(&o),
        &["local_infile is OFF", "SET GLOBAL local_infile"],
    );
    let tables = server
        .root_sql("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'l'")
        .unwrap();
    assert_eq!(
        tables.trim(),
        "1",
        "only the user's table: no ledger was created"
    );
    server.destroy();
}
