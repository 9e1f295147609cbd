//! A MariaDB server that stops answering in the middle of a load: its process stopped with
//! SIGSTOP, so its kernel still takes the connections and acknowledges what fits in their
//! buffers, and no write or read of sluice's ever fails. The load must not wait forever: the
//! watch gives the streams up once the server has answered nothing for the target's
//! `answer-timeout=`; the retries find no server, the load fails (exit 5) with nothing
//! committed, and the same command loads every row once when the server is back. Stopped
//! during the commit, past the LOADs, the load is given up as well, and the same command
//! completes it. A server that comes back while the retries wait is ridden out: the sessions
//! given up are ended, and the load finishes with every row once.
//!
//! A binary of its own: it stops its server, which would hold up any other test sharing it
//! (and its tests take turns).

mod common;

use common::mariadb::{maria, mdb};
use common::{finish, load_two_streams, stderr, wait_until, Stopped};
use std::sync::Mutex;
use std::time::Duration;

/// The tests stop the one server in turn.
static TURN: Mutex<()> = Mutex::new(());

/// The server's process id.
fn server_pid() -> i32 {
    let pid_file = maria().cluster.dir.join("mariadb.pid");
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A million rows of `id,v`.
fn big_file(db: &common::mariadb::MDb) -> std::path::PathBuf {
    db.file("big.csv", common::busy_rows(ROWS).as_bytes())
}

const ROWS: u64 = 1_000_000;

/// Waits until a `LOAD DATA` of `db` runs, then stops the server.
fn stop_the_server_mid_load(db: &common::mariadb::MDb) -> Stopped {
    wait_until("a LOAD DATA under way", 120, || {
        let loading = db.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = '{}' AND INFO LIKE 'LOAD DATA%'",
            db.name
        ));
        loading.trim() != "0"
    });
    Stopped::stop(server_pid())
}

/// The same command, once the server is back: every row, once.
fn rerun_loads_every_row_once(db: &common::mariadb::MDb, target: &str, f: &std::path::Path) {
    let again = finish(load_two_streams(target, f, "1").spawn().unwrap(), 120);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(db.count("t"), ROWS);
    assert_eq!(db.count("(SELECT DISTINCT id FROM t) x"), ROWS);
}

#[test]
fn a_server_that_stops_answering_mid_load_is_given_up_and_the_rerun_loads_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let db = mdb("silent");
    db.sql("CREATE TABLE t (id int, v varchar(80))");
    let f = big_file(&db);
    let target = format!("{}?answer-timeout=10", db.url);
    let child = load_two_streams(&target, &f, "1").spawn().unwrap();
    let stopped = stop_the_server_mid_load(&db);
    // The bound (10 s) with two looks cut short, a retry's connection given up at the next
    // look, and the failed job's record (15 s at most): well inside this test's bound.
    common::given_up(
        child,
        stopped,
        &[
            "answer-timeout= in the target sets this bound (10 s)",
            "lost its connection",
            "nothing was committed",
        ],
    );
    assert_eq!(db.count("t"), 0);

    rerun_loads_every_row_once(&db, &target, &f);
}

/// The moment past the LOADs: every stream's branch prepared (`XA PREPARE`), the decision not
/// yet in the ledger. The wait for the decision's answer, outside any LOAD, is given up too;
/// the same command then finishes the branches as the ledger says, every row once.
#[test]
fn a_server_stopped_during_the_commit_is_given_up_and_the_same_command_completes_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let db = mdb("silent_commit");
    db.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(80))");
    let f = big_file(&db);
    let target = format!("{}?answer-timeout=10", db.url);
    let mut c = load_two_streams(&target, &f, "1");
    c.env("SLUICE_PAUSE_AT", "prepared:8000");
    let mut child = c.spawn().unwrap();
    wait_until("the streams' branches prepared", 120, || {
        !db.sql("XA RECOVER").trim().is_empty() || child.try_wait().unwrap().is_some()
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the load ended before its commit"
    );
    let stopped = Stopped::stop(server_pid());
    common::given_up(
        child,
        stopped,
        &[
            "answer-timeout= in the target sets this bound (10 s)",
            "run the same command again",
        ],
    );
    rerun_loads_every_row_once(&db, &target, &f);
    assert_eq!(db.sql("XA RECOVER").trim(), "", "no branch left prepared");
}

/// The server comes back while the retries wait: the load finishes, every row once. The key
/// is what makes it hard: the sessions given up still hold their rows when the server
/// resumes, and the streams that redo those rows must wait until the watch has ended them (a
/// redo that raced their rollback waited on a sibling's locks on the gaps, a false duplicate).
#[test]
fn a_server_silent_for_a_while_is_ridden_out_by_the_retries() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let db = mdb("silent_while");
    db.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(80))");
    let f = big_file(&db);
    let target = format!("{}?answer-timeout=5", db.url);
    let child = load_two_streams(&target, &f, "5").spawn().unwrap();
    let stopped = stop_the_server_mid_load(&db);
    // Past the bound and two looks cut short (the first 5 s into the wait, the next 5 s after
    // it failed, each failing after 5 s), so that the streams are given up.
    std::thread::sleep(Duration::from_secs(25));
    drop(stopped);
    let out = finish(child, 240);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    common::assert_has(
        &err,
        &[
            "the server has answered nothing for",
            "lost its connection",
            "retry 1 of 5",
        ],
    );
    assert_eq!(db.count("t"), ROWS);
    assert_eq!(db.count("(SELECT DISTINCT id FROM t) x"), ROWS);
}
