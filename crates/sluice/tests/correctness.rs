//! Correctness under a hostile test: a duplicate key across streams hung
//! the load, session settings from the environment were ignored (timestamps shifted silently),
//! `--columns` did not follow SQL identifier rules, connections did not behave like psql's,
//! and some server errors named no line. Every test runs against a real PostgreSQL; the ones
//! about a hang are bounded, so that a regression fails instead of hanging the suite.

mod common;

use common::{assert_has, db, pg, run_bounded, sluice_cmd, stderr, wait_until, Db};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Output;

/// `sluice load -q --target <db> ARGS`, failing the test after 60 s.
fn load(d: &Db, args: &[&str]) -> Output {
    load_env(d, args, &[])
}

fn load_env(d: &Db, args: &[&str], env: &[(&str, &str)]) -> Output {
    d.load(args, env, 60)
}

/// Ids `from..=to`, one per line.
fn ids(from: u32, to: u32) -> String {
    (from..=to).map(|i| format!("{i}\n")).collect()
}

/// Asserts a failed load: exit 3, the key and both rows named, nothing committed.
fn assert_conflict(d: &Db, out: &Output, table: &str, key: &str, rows: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(&err, &[key, "nothing was committed"]);
    assert_has(&err, rows);
    assert_eq!(d.count(table), 0, "rows were committed: {err}");
}

// 1. A duplicate key across two streams.

#[test]
fn duplicate_key_across_two_files_fails_naming_both_rows() {
    let d = db("dup_files");
    d.psql("CREATE TABLE pk (id int PRIMARY KEY)");
    let a = d.file("a.csv", ids(1, 50_000).as_bytes());
    let b = d.file("b.csv", (ids(50_001, 100_000) + "50000\n").as_bytes());
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = load(&d, &["--table", "pk", "--jobs", "2", a, b]);
    assert_conflict(
        &d,
        &out,
        "pk",
        "(id)=(50000)",
        &["a.csv, line 50000", "b.csv, line 50001", "pk_pkey"],
    );
}

#[test]
fn duplicate_key_inside_one_chunked_file_fails() {
    let d = db("dup_chunks");
    d.psql("CREATE TABLE pk (id int PRIMARY KEY)");
    let f = d.file("ab.csv", (ids(1, 100_000) + "50000\n").as_bytes());
    let out = load(
        &d,
        &[
            "--table",
            "pk",
            "--jobs",
            "2",
            "--chunk-size",
            "256k",
            f.to_str().unwrap(),
        ],
    );
    assert_conflict(
        &d,
        &out,
        "pk",
        "(id)=(50000)",
        &["ab.csv, line 50000", "ab.csv, line 100001"],
    );
}

#[test]
fn the_same_file_given_twice_fails() {
    let d = db("dup_twice");
    d.psql("CREATE TABLE pk (id int PRIMARY KEY)");
    let f = d.file("a.csv", ids(1, 20_000).as_bytes());
    let f = f.to_str().unwrap();
    let out = load(&d, &["--table", "pk", "--jobs", "2", f, f]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(&err, &["a.csv, line ", "nothing was committed"]);
    assert!(
        err.contains("(id)=(") || err.contains("Key (id)=("),
        "{err}"
    );
    assert_eq!(d.count("pk"), 0);
}

/// A deferred unique key duplicated across streams: both orders in which the streams can reach
/// the commit barrier. Before the fix, one order hung in COMMIT and the other committed one
/// stream's rows and failed the other.
#[test]
fn deferred_unique_key_across_streams_fails_in_both_orders() {
    let d = db("dup_deferred");
    d.psql("CREATE TABLE dk (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)");
    // Small file with the key early (it finishes first), big file with the key last.
    let small = d.file("small.csv", ids(1, 1_000).as_bytes());
    let big = d.file("big.csv", (ids(1_001, 150_000) + "500\n").as_bytes());
    // Big file with the key first (inserted first), small file with the key last.
    let small2 = d.file(
        "small2.csv",
        (ids(150_001, 151_000) + "150001\n").as_bytes(),
    );
    let big2 = d.file("big2.csv", (ids(151_001, 300_000)).as_bytes());
    let mut big2_first = std::fs::read_to_string(&big2).unwrap();
    big2_first.insert_str(0, "150500\n");
    let small3 = d.file("small3.csv", ids(150_400, 150_600).as_bytes());
    std::fs::write(&big2, big2_first).unwrap();
    for (files, key) in [
        ([&small, &big], "(id)=(500)"),
        ([&big, &small], "(id)=(500)"),
        ([&small3, &big2], "(id)=(150500)"),
        ([&big2, &small3], "(id)=(150500)"),
    ] {
        let (x, y) = (files[0].to_str().unwrap(), files[1].to_str().unwrap());
        let out = load(&d, &["--table", "dk", "--jobs", "2", x, y]);
        assert_conflict(&d, &out, "dk", key, &["line "]);
    }
    // A duplicate inside one stream's own rows is caught by the same check, with both lines.
    let out = load(
        &d,
        &["--table", "dk", "--jobs", "1", small2.to_str().unwrap()],
    );
    assert_conflict(
        &d,
        &out,
        "dk",
        "(id)=(150001)",
        &["small2.csv, line 1", "small2.csv, line 1001"],
    );
}

// 2. Session settings from the environment, twinned with psql.

/// Loads `content` into `sluice_t` with sluice and into `psql_t` with `psql \copy`, both under
/// `env`, and asserts the same rows.
fn twin(d: &Db, ddl: &str, content: &str, env: &[(&str, &str)]) {
    d.psql(&format!(
        "DROP TABLE IF EXISTS sluice_t, psql_t; CREATE TABLE sluice_t ({ddl}); \
         CREATE TABLE psql_t ({ddl})"
    ));
    let f = d.file("twin.csv", content.as_bytes());
    let out = load_env(d, &["--table", "sluice_t", f.to_str().unwrap()], env);
    assert!(out.status.success(), "{env:?}: {}", stderr(&out));
    let mut psql = d.psql_cmd();
    psql.env_remove("PGTZ");
    for (k, v) in env {
        psql.env(k, v);
    }
    let copy = format!("\\copy psql_t from '{}' with (format csv)", f.display());
    let done = psql.args(["-Atq", "-c", &copy]).output().unwrap();
    assert!(done.status.success(), "{}", stderr(&done));
    d.assert_same_rows("sluice_t", "psql_t");
}

#[test]
fn session_variables_from_the_environment_match_psql() {
    let d = db("session_env");
    let ddl = "t timestamptz, d date, ts timestamp";
    let rows = "2024-01-01 12:00:00,2024-02-03,2024-07-01 00:30:00\n\
                2024-07-01 23:59:59.5,01/02/2024,1999-12-31 23:59:59\n";
    twin(&d, ddl, rows, &[("PGTZ", "Asia/Kolkata")]);
    // The silent shift the issue found: 12:00 in Kolkata is 06:30 UTC.
    assert_eq!(
        d.psql("SET timezone = 'UTC'; SELECT t FROM sluice_t ORDER BY t LIMIT 1")
            .trim(),
        "2024-01-01 06:30:00+00"
    );
    twin(
        &d,
        ddl,
        rows,
        &[("PGOPTIONS", "-c timezone=America/Los_Angeles")],
    );
    // DMY reads 01/02/2024 as the first of February.
    twin(
        &d,
        ddl,
        rows,
        &[("PGDATESTYLE", "SQL, DMY"), ("PGTZ", "Europe/Paris")],
    );
    twin(&d, ddl, rows, &[("PGDATESTYLE", "ISO, MDY")]);
    twin(&d, ddl, rows, &[("PGCLIENTENCODING", "UTF8")]);
    // What ALTER DATABASE ... SET gives the session counts too.
    d.psql(&format!(
        "ALTER DATABASE {} SET timezone = 'Pacific/Chatham'",
        d.name
    ));
    twin(&d, ddl, rows, &[]);
    // PGTZ wins over PGOPTIONS, as in libpq.
    twin(
        &d,
        ddl,
        rows,
        &[("PGOPTIONS", "-c timezone=UTC"), ("PGTZ", "Asia/Tokyo")],
    );
}

/// `PGOPTIONS='-c search_path=...'` decides where an unqualified table is, as for psql.
#[test]
fn search_path_from_pgoptions_finds_the_table() {
    let d = db("search_path");
    d.psql("CREATE SCHEMA s1; CREATE TABLE s1.tt (a int)");
    let f = d.file("tt.csv", b"7\n");
    let args = ["--table", "tt", f.to_str().unwrap()];
    let out = load_env(&d, &args, &[("PGOPTIONS", "-c search_path=s1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.psql("SELECT a FROM s1.tt").trim(), "7");
    let out = load(&d, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `PGOPTIONS='-c default_transaction_read_only=on'`: psql's `\copy` fails, and so does
/// sluice, as a usage error that says where the setting may come from and how to override it.
#[test]
fn a_read_only_session_from_pgoptions_is_named_with_the_way_out() {
    let d = db("read_only");
    d.psql("CREATE TABLE ro (a int)");
    let f = d.file("ro.csv", b"7\n");
    let env = [("PGOPTIONS", "-c default_transaction_read_only=on")];
    let mut psql = d.psql_cmd();
    psql.env("PGOPTIONS", env[0].1).args([
        "-c",
        &format!("\\copy ro from '{}' with (format csv)", f.display()),
    ]);
    assert!(!psql.output().unwrap().status.success(), "psql loaded it");
    for strategy in ["direct", "stage"] {
        let args = ["--table", "ro", "--strategy", strategy, f.to_str().unwrap()];
        let out = load_env(&d, &args, &env);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_has(
            &stderr(&out),
            &[
                "the session is read-only",
                "default_transaction_read_only=off",
            ],
        );
    }
    // A dry run writes nothing, so it may run there.
    let args = ["--table", "ro", "--dry-run", f.to_str().unwrap()];
    let out = load_env(&d, &args, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("ro"), 0);
    let out = load(&d, &["--table", "ro", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("ro"), 1);
}

#[test]
fn a_client_encoding_sluice_does_not_read_is_refused() {
    let d = db("client_encoding");
    d.psql("CREATE TABLE t (v text)");
    let f = d.file("t.csv", "caf\u{e9}\n".as_bytes());
    let out = load_env(
        &d,
        &["--table", "t", f.to_str().unwrap()],
        &[("PGCLIENTENCODING", "LATIN1")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_has(&stderr(&out), &["LATIN1", "PGCLIENTENCODING", "UTF-8"]);
    assert_eq!(d.count("t"), 0);
}

// 3. `--columns` follows SQL identifier rules.

#[test]
fn column_lists_follow_sql_rules_like_psql() {
    let d = db("columns");
    d.psql(
        r#"CREATE TABLE s ("ID" int, id int, v text);
           CREATE TABLE p ("ID" int, id int, v text);
           CREATE TABLE q ("Ünï ""q""" text, "my col" text, "ColA" int)"#,
    );
    let f = d.file("c.csv", b"1,a\n2,b\n");
    let file = f.to_str().unwrap();
    // Unquoted folds to lower case: into id, as psql's \copy s(ID,v).
    let ok = load(&d, &["--table", "s", "--columns", "ID,v", file]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    d.psql_copy("p(ID,v)", &f, "format csv").unwrap();
    d.assert_same_rows("s", "p");
    assert_eq!(d.psql(r#"SELECT count("ID") FROM s"#).trim(), "0");
    // Quoted keeps case.
    let ok = load(&d, &["--table", "s", "--columns", r#""ID",v"#, file]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    d.psql_copy(r#"p("ID",v)"#, &f, "format csv").unwrap();
    d.assert_same_rows("s", "p");
    // Quoted names with quotes, spaces, Unicode.
    let g = d.file("q.csv", b"x,y\n");
    let ok = load(
        &d,
        &[
            "--table",
            "q",
            "--columns",
            r#""Ünï ""q""", "my col""#,
            g.to_str().unwrap(),
        ],
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(
        d.psql(r#"SELECT "Ünï ""q""" || "my col" FROM q"#).trim(),
        "xy"
    );
    // `cola` is not "ColA": refused, as psql refuses it.
    let bad = load(&d, &["--table", "q", "--columns", "cola", file]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert_has(
        &stderr(&bad),
        &["no column \"cola\"", "--columns '\"ColA\"'"],
    );
    assert!(d.psql_copy("q(cola)", &f, "format csv").is_err());
}

// 4. Connecting wherever psql connects.

/// A TCP listener on 127.0.0.1 that accepts connections and answers each as `answer` says.
fn listener(answer: fn(std::net::TcpStream)) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || answer(c));
        }
    });
    port
}

/// Accepts and never answers, for at most a minute.
fn silent(c: std::net::TcpStream) {
    std::thread::sleep(std::time::Duration::from_secs(60));
    drop(c);
}

/// Answers like a web server, then reads what the client still sends until it hangs up (so
/// that closing never resets the connection before the client has read the answer).
fn http(mut c: std::net::TcpStream) {
    let mut buf = [0u8; 512];
    let _ = c.read(&mut buf);
    let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let _ = c.shutdown(std::net::Shutdown::Write);
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn load_target(target: &str, env: &[(&str, &str)], secs: u64) -> Output {
    let d = db("conn_file");
    let f = d.file("t.csv", b"1\n");
    let mut c = sluice_cmd();
    c.args(["load", "-q", "--table", "t", "--target", target])
        .arg(f.to_str().unwrap());
    for (k, v) in env {
        c.env(k, v);
    }
    run_bounded(c, secs)
}

#[test]
fn connect_timeout_bounds_a_server_that_never_answers() {
    let port = listener(silent);
    // Bounded: a run still going after 30 s fails the test (the server never answers).
    let out = load_target(
        &format!("postgresql://u@127.0.0.1:{port}/db?sslmode=disable&connect_timeout=2"),
        &[],
        30,
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_has(&stderr(&out), &["timeout expired after 2 s"]);
    // The environment variable, and TLS negotiation (sslmode=prefer) inside the bound too.
    let out = load_target(
        &format!("postgresql://u@127.0.0.1:{port}/db"),
        &[("PGCONNECT_TIMEOUT", "2")],
        30,
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_has(&stderr(&out), &["timeout expired"]);
}

#[test]
fn a_server_that_is_not_postgresql_is_named_as_such() {
    let port = listener(http);
    for mode in ["disable", "prefer"] {
        let out = load_target(
            &format!("postgresql://u@127.0.0.1:{port}/db?sslmode={mode}"),
            &[],
            30,
        );
        assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
        assert_has(&stderr(&out), &["did not answer like a PostgreSQL server"]);
    }
}

#[test]
fn multiple_hosts_are_tried_in_turn() {
    let d = db("multi_host");
    d.psql("CREATE TABLE t (a int)");
    let f = d.file("t.csv", ids(1, 1000).as_bytes());
    let (dead, live) = (dead_port(), pg().port);
    let silent_port = listener(silent);
    for target in [
        format!(
            "postgresql://sluice@127.0.0.1:{dead},127.0.0.1:{live}/{}?sslmode=disable",
            d.name
        ),
        format!(
            "host=127.0.0.1,127.0.0.1 port={dead},{live} user=sluice dbname={} sslmode=disable",
            d.name
        ),
        format!(
            "postgresql://sluice@127.0.0.1:{silent_port},127.0.0.1:{live}/{}?sslmode=disable\
             &connect_timeout=2&target_session_attrs=read-write",
            d.name
        ),
    ] {
        let mut c = sluice_cmd();
        c.args([
            "load",
            "-q",
            "--restart",
            "--table",
            "t",
            "--jobs",
            "2",
            "--target",
            &target,
        ])
        .arg(f.to_str().unwrap());
        let out = run_bounded(c, 60);
        assert!(out.status.success(), "{target}: {}", stderr(&out));
    }
    assert_eq!(d.count("t"), 3000);
    // No standby here: every host is refused, and the message says why for each.
    let mut c = sluice_cmd();
    c.args(["load", "-q", "--table", "t", "--target"])
        .arg(format!(
            "postgresql://sluice@127.0.0.1:{dead},127.0.0.1:{live}/{}?sslmode=disable\
             &target_session_attrs=standby",
            d.name
        ))
        .arg(f.to_str().unwrap());
    let out = run_bounded(c, 60);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            &format!("127.0.0.1:{dead}: "),
            "target_session_attrs is standby",
        ],
    );
    assert_eq!(d.count("t"), 3000);
}

#[test]
fn a_malformed_target_is_a_usage_error() {
    let out = load_target("postgresql://u@127.0.0.1:notaport/db", &[], 30);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_has(&stderr(&out), &["invalid port `notaport`"]);
}

/// A role whose settings would end a bulk load: sluice sets its own session values, as
/// pg_dump and pg_restore do, so the load completes.
#[test]
fn role_timeouts_do_not_end_a_load() {
    let d = db("role_timeouts");
    d.psql(&format!(
        "CREATE TABLE t (a int, b text); \
         DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hasty') THEN \
           CREATE ROLE hasty LOGIN; END IF; END $$; \
         GRANT ALL ON TABLE t TO hasty; GRANT CREATE, CONNECT ON DATABASE {0} TO hasty; \
         ALTER ROLE hasty IN DATABASE {0} SET statement_timeout = '5ms'; \
         ALTER ROLE hasty IN DATABASE {0} SET lock_timeout = '5ms'; \
         ALTER ROLE hasty IN DATABASE {0} SET idle_in_transaction_session_timeout = '20ms'",
        d.name
    ));
    // One big and one small file: the small file's stream waits at the barrier.
    let rows: String = (0..300_000).map(|i| format!("{i},row {i}\n")).collect();
    let big = d.file("big.csv", rows.as_bytes());
    let small = d.file("small.csv", b"1,x\n");
    let target = format!(
        "postgresql://hasty@127.0.0.1:{}/{}?sslmode=disable",
        pg().port,
        d.name
    );
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--table", "t", "--jobs", "2", "--target", &target,
    ])
    .args([big.to_str().unwrap(), small.to_str().unwrap()]);
    let out = run_bounded(c, 120);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("t"), 300_001);
}

// 5. Server errors that name no line.

#[test]
fn a_foreign_key_violation_names_its_row() {
    let d = db("fk");
    d.psql(
        "CREATE TABLE parent (p int PRIMARY KEY); INSERT INTO parent VALUES (1), (2); \
         CREATE TABLE child (c int, p int REFERENCES parent)",
    );
    let f = d.file("child.csv", b"10,1\n11,2\n12,3\n13,1\n");
    let out = load(&d, &["--table", "child", f.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "child.csv, line 3 (record at byte offset 10)",
            "column p (integer)",
            "Key (p)=(3) is not present in table \"parent\"",
        ],
    );
    assert!(!err.contains("parent first"), "{err}");
    assert_eq!(d.count("child"), 0);
    // The parent loaded by the same command, on two streams: the parent's rows load first on
    // the child's stream, so the check sees them, and the load succeeds.
    d.psql("TRUNCATE child, parent");
    let parent = d.file("parent.csv", b"1\n2\n3\n");
    let out = load(
        &d,
        &["--jobs", "2", f.to_str().unwrap(), parent.to_str().unwrap()],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!((d.count("child"), d.count("parent")), (4, 3));
    // A child row whose parent is in neither the table nor the load is a bad row, named
    // without the caveat that the parent may not have been visible.
    d.psql("TRUNCATE child, parent");
    let bad = d.file("child.csv", b"10,1\n11,2\n12,4\n");
    let out = load(
        &d,
        &[
            "--jobs",
            "2",
            "--restart",
            bad.to_str().unwrap(),
            parent.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "child.csv -> table child, line 3",
            "Key (p)=(4) is not present",
        ],
    );
    assert!(!err.contains("parent first"), "{err}");
    assert_eq!(d.count("child") + d.count("parent"), 0);
}

#[test]
fn a_byte_order_mark_is_visible_in_the_message() {
    let d = db("bom");
    d.psql("CREATE TABLE t (a int, b text)");
    let f = d.file("bom.csv", "\u{feff}1,x\n".as_bytes());
    let out = load(&d, &["--table", "t", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(&stderr(&out), &["value \"<U+FEFF>1\"", "line 1"]);
    // psql rejects it too.
    assert!(d.psql_copy("t", &f, "format csv").is_err());
}

/// Starts a two-stream load of two million rows into a new table `t`, and returns once its
/// COPYs run (within 30 s).
fn start_long_load(d: &Db) -> std::process::Child {
    d.psql("CREATE TABLE t (a int, b text)");
    let rows: String = (0..2_000_000).map(|i| format!("{i},row {i}\n")).collect();
    let f = d.file("big.csv", rows.as_bytes());
    let child = sluice_cmd()
        .args([
            "load", "-q", "--table", "t", "--jobs", "2", "--target", &d.url,
        ])
        .arg(f.to_str().unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while d
        .psql(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%' \
             AND datname = current_database()",
        )
        .trim()
        == "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the load never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

/// SIGTERM before the commit: the process ends as the signal says, tells the user that
/// nothing was committed, and nothing is.
#[test]
fn sigterm_mid_load_commits_nothing() {
    use std::os::unix::process::ExitStatusExt;
    let d = db("sigterm");
    let child = start_long_load(&d);
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{}", stderr(&out));
    assert_has(&stderr(&out), &["interrupted: nothing was committed"]);
    // The server notices the closed connections and rolls back: once the load's sessions
    // are gone, nothing of it is there (and nothing was visible before either).
    wait_until("the load's sessions to end", 30, || {
        d.psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
             AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            d.name
        ))
        .trim()
            == "0"
    });
    assert_eq!(d.count("t"), 0);
}

/// The watchdog's own connection terminated mid-load (by an administrator, say): it connects
/// again, and a conflict that comes later is still caught rather than hanging.
#[test]
fn the_watchdog_survives_losing_its_connection() {
    let d = db("watchdog_reconnect");
    d.psql("CREATE TABLE pk (id int PRIMARY KEY)");
    let a = d.file("a.csv", ids(1, 10).as_bytes());
    let b = d.file("b.csv", (ids(11, 1_500_000) + "5\n").as_bytes());
    let child = sluice_cmd()
        .args([
            "load", "-q", "--table", "pk", "--jobs", "2", "--target", &d.url,
        ])
        .args([a.to_str().unwrap(), b.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let terminated = loop {
        let n = d.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE query LIKE '%pg_blocking_pids%' AND datname = current_database() \
             AND pid <> pg_backend_pid()",
        );
        if n.trim() != "0" {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(terminated, "never saw the watchdog's connection");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let start = std::time::Instant::now();
    while !waiter.is_finished() {
        if start.elapsed().as_secs() > 60 {
            // SAFETY: killing our own hung child so that the test fails instead of hanging.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            panic!("the load hung after its watchdog lost its connection");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = waiter.join().unwrap();
    assert_conflict(&d, &out, "pk", "(id)=(5)", &["b.csv, line 1499991"]);
}

/// kill -9 of sluice mid-load: its connections close and every transaction rolls back.
#[test]
fn kill_9_mid_load_commits_nothing() {
    let d = db("kill9");
    let mut child = start_long_load(&d);
    child.kill().unwrap();
    child.wait().unwrap();
    // The server notices the closed connections and rolls back, with no sluice left to ask.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while d
        .psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sluice' \
             AND datname = current_database()",
        )
        .trim()
        != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "backends outlived sluice"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(d.count("t"), 0);
}

/// A role's CONNECTION LIMIT bounds the streams as `max_connections` does: the plan uses the
/// slots the role has left (with the publish's when it stages, and two per stream when it
/// also loads a table directly) and says so, instead of streams failing to connect and
/// retrying.
#[test]
fn a_role_connection_limit_bounds_the_streams() {
    let d = db("conn_limit");
    d.psql(&format!(
        "DROP ROLE IF EXISTS conn_limited; CREATE ROLE conn_limited LOGIN CONNECTION LIMIT 5; \
         GRANT CREATE, CONNECT ON DATABASE {} TO conn_limited; \
         GRANT USAGE, CREATE ON SCHEMA public TO conn_limited; \
         CREATE TABLE plain (id int, v text); ALTER TABLE plain OWNER TO conn_limited; \
         CREATE TABLE t (id int NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE t_1 PARTITION OF t FOR VALUES FROM (MINVALUE) TO (1000); \
         CREATE TABLE t_2 PARTITION OF t FOR VALUES FROM (1000) TO (MAXVALUE); \
         ALTER TABLE t OWNER TO conn_limited; ALTER TABLE t_1 OWNER TO conn_limited; \
         ALTER TABLE t_2 OWNER TO conn_limited",
        d.name
    ));
    let rows =
        |from: u32, to: u32| -> String { (from..to).map(|i| format!("{i},row {i}\n")).collect() };
    let ranges = [(1, 500), (500, 999), (1000, 1500), (1500, 2000)];
    let files = |prefix: &str| -> Vec<String> {
        ranges
            .iter()
            .enumerate()
            .map(|(n, &(a, b))| {
                let f = d.file(&format!("{prefix}{n}.csv"), rows(a, b).as_bytes());
                f.to_str().unwrap().to_owned()
            })
            .collect()
    };
    let (plain, staged) = (files("plain."), files("t."));
    let url = d.url.replace("sluice@", "conn_limited@");
    // The role's five slots, one of them the planning connection's.
    for (args, jobs, was_staged) in [
        (vec!["--table", "plain"], "using 3 jobs", false),
        (vec!["--table", "t"], "using 2 jobs", true),
        // The same files again, both tables in one load (the ledger would skip them).
        (vec!["--restart"], "using 1 job", true),
    ] {
        let inputs: Vec<&String> = match args.as_slice() {
            [_, "plain"] => plain.iter().collect(),
            [_, "t"] => staged.iter().collect(),
            _ => plain.iter().chain(&staged).collect(),
        };
        if args == ["--restart"] {
            // Empty partitions again, so that t is staged.
            d.psql("TRUNCATE t");
        }
        let mut c = sluice_cmd();
        c.args(["load", "--target", &url, "--jobs", "4"])
            .args(&args)
            .args(inputs);
        let out = run_bounded(c, 60);
        let err = stderr(&out);
        assert!(out.status.success(), "{args:?}: {err}");
        assert_has(&err, &["leaves 4 free connection slots", jobs]);
        assert!(!err.contains("lost its connection"), "{args:?}: {err}");
        let summary = String::from_utf8_lossy(&out.stdout);
        assert_eq!(summary.contains("staged: t"), was_staged, "{summary}");
    }
    assert_eq!(d.count("plain"), 2 * 1998);
    assert_eq!(d.count("t"), 1998);
}
