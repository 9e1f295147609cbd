//! A PostgreSQL server that stops answering in the middle of a load: its processes stopped
//! with SIGSTOP, so their kernel still takes the connections and acknowledges what fits in
//! their buffers, and no keepalive or `tcp_user_timeout` ever fires. The load must not wait
//! forever, in any phase: once the server has answered nothing for the target's
//! `tcp_user_timeout`, sluice gives its connections up. Stopped during the COPYs, the load
//! fails (exit 5) with nothing committed; stopped during the commit, it fails with its streams
//! prepared; either way the same command completes the job once the server is back, every row
//! once. A server back within the retries is ridden out, and one silent for longer than the
//! watchdog's patience is told of once. And a server that is slow but answers (a statement
//! that takes longer than the bound) is never given up.
//!
//! A binary of its own: it stops its server, which would hold up any other test sharing it
//! (and its tests take turns).

mod common;

use common::{db, finish, load_two_streams, stderr, wait_until, Db, Stopped};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The tests stop the one server in turn.
static TURN: Mutex<()> = Mutex::new(());

const ROWS: u64 = 1_000_000;

/// Every process of the test cluster, stopped: the postmaster first (so that it starts no
/// new backend), then its children. Each is resumed when the value is dropped.
fn stop_the_server() -> Vec<Stopped> {
    let postmaster = common::pg().cluster.pid_file_pid().expect("postmaster.pid") as i32;
    let mut stopped = vec![Stopped::stop(postmaster)];
    let children = Command::new("pgrep")
        .args(["-P", &postmaster.to_string()])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&children.stdout).split_whitespace() {
        stopped.push(Stopped::stop(pid.parse().unwrap()));
    }
    stopped
}

/// A million rows of `id,v`.
fn big_file(d: &Db) -> std::path::PathBuf {
    d.file("big.csv", common::busy_rows(ROWS).as_bytes())
}

/// Whether one of `d`'s sessions runs a COPY now.
fn copying(d: &Db) -> bool {
    d.psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND query LIKE 'COPY%'",
        d.name
    ))
    .trim()
        != "0"
}

/// A million rows loaded into `d`'s table `t` through a server stopped for `secs` seconds in
/// the middle of the COPYs, under a bound of `bound_ms` and `retries`: the load succeeds, and
/// what it said is returned.
fn loaded_through_a_stop(d: &Db, bound_ms: u32, retries: &str, secs: u64) -> String {
    let f = big_file(d);
    let target = format!("{}&tcp_user_timeout={bound_ms}", d.url);
    let child = load_two_streams(&target, &f, retries).spawn().unwrap();
    wait_until("a COPY under way", 120, || copying(d));
    let stopped = stop_the_server();
    std::thread::sleep(Duration::from_secs(secs));
    drop(stopped);
    let out = finish(child, 240);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    err
}

/// The same command, once the server is back: every row, once.
fn rerun_loads_every_row_once(d: &Db, target: &str, f: &Path) {
    let again = finish(load_two_streams(target, f, "1").spawn().unwrap(), 120);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(d.count("t"), ROWS);
    assert_eq!(d.count("(SELECT DISTINCT id FROM t) x"), ROWS);
    assert_eq!(
        d.psql("SELECT count(*) FROM pg_prepared_xacts").trim(),
        "0",
        "no transaction left prepared"
    );
}

#[test]
fn a_server_stopped_during_the_copies_is_given_up_and_the_rerun_loads_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = db("silent_copy");
    d.psql("CREATE TABLE t (id int, v text)");
    let f = big_file(&d);
    let target = format!("{}&tcp_user_timeout=10000", d.url);
    let child = load_two_streams(&target, &f, "1").spawn().unwrap();
    wait_until("a COPY under way", 120, || copying(&d));
    let stopped = stop_the_server();
    // The bound (10 s), two looks cut short, a retry's connection given up at the next look,
    // the failed job's record likewise: well inside this test's bound. (Here the kernel may
    // end the COPYs first: 10 s is also its bound on data held behind a closed window. What
    // the test holds is that nothing waits forever, and the message names the bound.)
    common::given_up(
        child,
        stopped,
        &[
            "tcp_user_timeout (milliseconds) in the target sets this bound (10 s)",
            "lost its connection",
        ],
    );
    wait_until("the given-up sessions gone", 60, || {
        d.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%'")
            .trim()
            == "0"
    });
    assert_eq!(d.count("t"), 0, "nothing committed");
    rerun_loads_every_row_once(&d, &target, &f);
}

/// The hardest moment: every stream prepared, the decision not yet in the ledger. The wait
/// for the decision's answer is what used to last forever.
#[test]
fn a_server_stopped_during_the_commit_is_given_up_and_the_same_command_completes_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = db("silent_commit");
    d.psql("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let f = big_file(&d);
    let target = format!("{}&tcp_user_timeout=10000", d.url);
    let mut c = load_two_streams(&target, &f, "1");
    c.env("SLUICE_PAUSE_AT", "prepared:8000");
    let mut child = c.spawn().unwrap();
    wait_until("the streams prepared", 120, || {
        d.psql("SELECT count(*) FROM pg_prepared_xacts").trim() != "0"
            || child.try_wait().unwrap().is_some()
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the load ended before its commit"
    );
    let stopped = stop_the_server();
    common::given_up(
        child,
        stopped,
        &[
            "tcp_user_timeout (milliseconds) in the target sets this bound (10 s)",
            "run the same command again",
        ],
    );
    rerun_loads_every_row_once(&d, &target, &f);
}

/// The server comes back while the retries wait: the load finishes, every row once, into a
/// table with a primary key (a redo that met the given-up sessions' rows would fail as a
/// duplicate).
#[test]
fn a_server_silent_for_a_while_is_ridden_out_by_the_retries() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = db("silent_while");
    d.psql("CREATE TABLE t (id int PRIMARY KEY, v text)");
    // Past the bound and two looks cut short (the first 5 s into the wait, the next 5 s after
    // it failed, each failing after 5 s), so that the streams are given up.
    let err = loaded_through_a_stop(&d, 5000, "5", 25);
    // Given up by the silence's bound or by the kernel's (`tcp_user_timeout` also ends a
    // connection whose data waits unacknowledged behind a closed window): whichever comes
    // first, a lost connection.
    common::assert_has(&err, &["lost its connection", "retry 1 of 5"]);
    assert_eq!(d.count("t"), ROWS);
    assert_eq!(d.count("(SELECT DISTINCT id FROM t) x"), ROWS);
}

/// Slow is not silent: a statement that takes three times the bound, on a server that answers
/// the watcher's looks, is waited for.
#[test]
fn a_server_that_is_slow_but_answers_is_waited_for() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = db("slow");
    d.psql(
        "CREATE TABLE t (id int, v text); \
         CREATE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN PERFORM pg_sleep(12); RETURN NULL; END $$; \
         CREATE TRIGGER nap AFTER INSERT ON t FOR EACH STATEMENT EXECUTE FUNCTION nap()",
    );
    let f = d.file("few.csv", common::rows(0, 1000).as_bytes());
    let target = format!("{}&tcp_user_timeout=4000", d.url);
    let began = std::time::Instant::now();
    let out = finish(load_two_streams(&target, &f, "0").spawn().unwrap(), 120);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        began.elapsed() >= Duration::from_secs(12),
        "the statement's 12 s were waited for"
    );
    assert!(!err.contains("answered nothing"), "{err}");
    assert_eq!(d.count("t"), 1000);
}

/// A silence longer than the watchdog's own patience (30 s), under a bound longer still: the
/// load says once that the server answers nothing (the watchdog, whose question goes
/// unanswered too, does not say it again), and goes on once the server is back.
#[test]
fn a_long_silence_is_told_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = db("silent_told_once");
    d.psql("CREATE TABLE t (id int, v text)");
    let err = loaded_through_a_stop(&d, 90_000, "1", 36);
    common::assert_has(&err, &["the server has answered nothing for"]);
    assert!(
        !err.contains("watchdog's query"),
        "the silence was told twice: {err}"
    );
    assert_eq!(d.count("t"), ROWS);
}
