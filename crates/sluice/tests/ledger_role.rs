//! The ledger as a role meets it: a role that may not use the ledger's schema is told the GRANT
//! that lets it, and that GRANT, run as printed, is enough. Real PostgreSQL.

mod common;

use common::{assert_has, db, run_bounded, sluice_cmd, stderr};

#[test]
fn a_role_that_may_not_use_the_ledger_is_given_the_grant_that_fixes_it() {
    let d = db("ledger_grant");
    d.psql("CREATE TABLE t (id int)");
    let f = d.file("t.csv", b"1\n2\n");
    // The owner's first load makes the ledger.
    d.sluice_ok(&["load", "-q", f.to_str().unwrap()]);
    d.psql(&format!(
        "DROP ROLE IF EXISTS ledger_guest; CREATE ROLE ledger_guest LOGIN; \
         GRANT CONNECT ON DATABASE {} TO ledger_guest; GRANT INSERT, SELECT ON t TO ledger_guest",
        d.name
    ));
    let url = d.url.replace("sluice@", "ledger_guest@");
    let load = || {
        let mut c = sluice_cmd();
        c.args(["load", "-q", "--restart", "--target", &url])
            .arg(&f);
        run_bounded(c, 60)
    };
    let out = load();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_has(&err, &["may not use the ledger's schema"]);
    let at = err
        .find("GRANT USAGE ON SCHEMA sluice_ledger TO ledger_guest")
        .unwrap_or_else(|| panic!("no GRANT in: {err}"));
    let grant = err[at..].lines().next().unwrap();
    // The owner runs it as printed; the role's next load keeps a ledger.
    d.psql(grant);
    let out = load();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("ledger"), "{err}");
    assert_has(
        &d.psql("SELECT count(*) FROM sluice_ledger.jobs WHERE state = 'finished'"),
        &["2"],
    );
}

/// A role that may insert into the table but not lock it (`ACCESS EXCLUSIVE` needs `UPDATE`,
/// `DELETE` or `TRUNCATE`) cannot hold readers back while its streams commit: the load says so,
/// with the server's reason, and loads every row as before.
#[test]
fn a_role_that_may_not_lock_the_table_is_told_readers_were_not_held_back() {
    let d = db("ledger_no_lock");
    d.psql("CREATE TABLE t (id int)");
    d.psql(&format!(
        "DROP ROLE IF EXISTS insert_only; CREATE ROLE insert_only LOGIN; \
         GRANT CONNECT ON DATABASE {} TO insert_only; GRANT INSERT, SELECT ON t TO insert_only",
        d.name
    ));
    let a = d.file("a.csv", "1\n".repeat(5000).as_bytes());
    let b = d.file("b.csv", "2\n".repeat(5000).as_bytes());
    let url = d.url.replace("sluice@", "insert_only@");
    let load = || {
        d.psql("TRUNCATE t");
        let mut c = sluice_cmd();
        c.args([
            "load", "-q", "--jobs", "2", "--target", &url, "--table", "t",
        ])
        .args([&a, &b]);
        run_bounded(c, 60)
    };
    let rows_in = || assert_eq!(d.count("t"), 10_000);
    let err = common::until_two_streams_say("could not be held back", load, rows_in);
    assert_has(
        &err,
        &[
            "warning: readers of the load's tables",
            "permission denied",
            "needs UPDATE, DELETE or TRUNCATE on it",
        ],
    );
}

/// A role that may insert into the table but not read it: the job's end cannot look at
/// whether the table has rows (the server refuses the look in the transaction that records
/// the job's end, which then rolls back), so it records the job finished with that left
/// unknown, and lets the job go; the same command then finds the job finished and loads
/// nothing again.
#[test]
fn a_role_that_may_not_read_the_table_still_finishes_its_job() {
    let d = db("ledger_no_select");
    d.psql("CREATE TABLE t (id int)");
    d.psql(&format!(
        "DROP ROLE IF EXISTS write_only; CREATE ROLE write_only LOGIN; \
         GRANT CONNECT, CREATE ON DATABASE {} TO write_only; GRANT INSERT ON t TO write_only",
        d.name
    ));
    let f = d.file("t.csv", b"1\n2\n3\n");
    let url = d.url.replace("sluice@", "write_only@");
    let load = || {
        let mut c = sluice_cmd();
        c.args(["load", "-q", "--target", &url, "--table", "t"])
            .arg(&f);
        run_bounded(c, 60)
    };
    let out = load();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        d.psql(
            "SELECT j.state, p.relation, p.has_rows IS NULL FROM sluice_ledger.jobs j \
             JOIN sluice_ledger.job_places p ON p.job = j.id"
        )
        .trim(),
        "finished|\"public\".\"t\"|t"
    );
    let out = load();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_has(&err, &["nothing to load", "job 1 loaded"]);
    assert_eq!(d.count("t"), 3);
}
