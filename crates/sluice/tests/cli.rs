//! The command line as a user meets it: exit codes that say whose move it is, messages that
//! say what to do, help that agrees with the README. Real PostgreSQL where a server is needed.

mod common;

use common::{assert_has, db, run_bounded, sluice_cmd, stderr};

/// `sluice ddl tpch --create` where the tables exist is the user's call (exit 2, with the ways
/// on), not a server failure that "the same command resumes" (exit 5); so is a role that may
/// not create them.
#[test]
fn ddl_create_over_existing_tables_or_without_privilege_is_a_usage_error() {
    let d = db("ddl_exists");
    let create = |url: &str, extra: &[&str]| {
        let mut c = sluice_cmd();
        c.args(["ddl", "tpch", "--create", "--target", url])
            .args(extra);
        run_bounded(c, 60)
    };
    let first = create(&d.url, &[]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let again = create(&d.url, &[]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert_has(
        &stderr(&again),
        &["lineitem", "already exist", "--replace", "drop them"],
    );
    let replaced = create(&d.url, &["--replace"]);
    assert_eq!(replaced.status.code(), Some(0), "{}", stderr(&replaced));

    d.psql("DROP ROLE IF EXISTS ddl_reader; CREATE ROLE ddl_reader LOGIN");
    let other = db("ddl_no_create");
    let url = other.url.replace("sluice@", "ddl_reader@");
    let denied = create(&url, &[]);
    assert_eq!(denied.status.code(), Some(2), "{}", stderr(&denied));
    assert_has(&stderr(&denied), &["permission denied"]);
}

/// Help read through a pipe, as in `sluice load --help | less`.
fn help(args: &[&str]) -> String {
    let out = sluice_cmd().args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The help agrees with the README and the code: every exit code of the README's table, the
/// gain `--jobs auto` asks of a stream, `-j` wherever there is a `--jobs`; piped, it wraps at
/// 80 columns.
#[test]
fn help_agrees_with_the_readme_and_wraps_at_80_columns_when_piped() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let table = readme
        .split("| code | meaning |")
        .nth(1)
        .unwrap()
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("| "));
    let top = format!(" {} ", help(&[]).replace('\n', " "));
    for row in table {
        for code in row.split('|').nth(1).unwrap().split(',') {
            let code = code.trim();
            assert!(
                top.contains(&format!(" {code} ")),
                "`sluice --help` does not list exit code {code}:\n{top}"
            );
        }
    }

    let gain = format!(
        "by {}% or more",
        (sluice_engine::calibrate::GAIN * 100.0).round()
    );
    let load = help(&["load"]);
    assert_has(&load.replace('\n', " ").replace("  ", " "), &[&gain]);
    assert_has(
        &readme,
        &[&format!(
            "raised it by {}%",
            (sluice_engine::calibrate::GAIN * 100.0).round()
        )],
    );

    for cmd in [
        &["load"][..],
        &["bench"],
        &["demo"],
        &["probe"],
        &["gen", "tpch"],
    ] {
        let text = help(cmd);
        assert_has(&text, &["-j, --jobs"]);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 80,
                "{cmd:?}: over 80 columns: {line}"
            );
        }
    }
}

/// Inputs are checked before anything connects: standard input without `--format` (exit 2) and
/// a `.gz` whose bytes are not gzip (exit 1) never start the private cluster.
#[test]
fn stdin_without_format_and_a_false_gz_fail_before_anything_connects() {
    let root = std::env::temp_dir().join(format!("sluice-cli-early-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let pg_dir = root.join("pg");
    let fake = root.join("t.csv.gz");
    std::fs::write(&fake, b"1,a\n").unwrap();
    let cases: [(&[&str], i32, &str); 2] = [
        (&["--table", "t", "-"], 2, "needs --format"),
        (&[fake.to_str().unwrap()], 1, "promises gzip"),
    ];
    for (args, code, says) in cases {
        let mut c = sluice_cmd();
        c.args(["load", "--pg-dir"]).arg(&pg_dir).args(args);
        let out = run_bounded(c, 30);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_has(&err, &[says]);
        assert!(!err.contains("private PostgreSQL"), "{err}");
        assert!(!pg_dir.exists(), "a cluster was made for nothing: {err}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Where the target names a server, the inputs are checked while the first connection
/// describes the tables; a bad input is still what the load reports, even when that server
/// cannot be reached.
#[test]
fn a_bad_input_is_said_before_a_server_that_cannot_be_reached() {
    let root = std::env::temp_dir().join(format!("sluice-cli-unreached-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let missing = root.join("missing.csv");
    let mut c = sluice_cmd();
    c.args(["load", "--table", "t", "--target"])
        .arg("postgresql://sluice@127.0.0.1:1/nowhere?connect_timeout=5")
        .arg(&missing);
    let out = run_bounded(c, 60);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_has(&err, &["cannot read", "missing.csv"]);
    let _ = std::fs::remove_dir_all(&root);
}

/// A server that asks for a password none was given for: psql's words, and every place a
/// password can come from, not the library's "invalid configuration: password missing".
#[test]
fn a_missing_password_says_what_psql_says_and_where_a_password_can_come_from() {
    let d = db("no_password");
    d.psql("DROP ROLE IF EXISTS pw_needed; CREATE ROLE pw_needed LOGIN PASSWORD 'pw-1234'");
    let hba = common::pg().cluster.dir.join("pg_hba.conf");
    let text = std::fs::read_to_string(&hba).unwrap();
    if !text.contains("pw_needed") {
        std::fs::write(
            &hba,
            format!("host all pw_needed 127.0.0.1/32 scram-sha-256\n{text}"),
        )
        .unwrap();
        d.psql("SELECT pg_reload_conf()");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let f = d.file("t.csv", b"1\n");
    let url = d.url.replace("sluice@", "pw_needed@");
    let mut c = sluice_cmd();
    c.args(["load", "--table", "t", "--target", &url])
        .arg(&f)
        .env("PGPASSFILE", d.dir.join("no-such-pgpass"));
    let out = run_bounded(c, 60);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert_has(
        &err,
        &[
            "fe_sendauth: no password supplied",
            "PGPASSWORD",
            ".pgpass",
            "PGPASSFILE",
            "postgresql://pw_needed:PASSWORD@127.0.0.1:",
        ],
    );
    assert!(!err.contains("invalid configuration"), "{err}");
}
