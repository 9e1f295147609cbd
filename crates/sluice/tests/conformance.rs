//! The destination contract's behaviours, written once and run against every destination's
//! real server through the command line, as a user runs it: PostgreSQL and MariaDB. Each behaviour takes a [`Server`] fixture that starts
//! nothing fake: a fresh database on a real server, and the few things only its SQL can do
//! (a partitioned table, ending one of the load's sessions).
//!
//! A destination that declares a capability passes its test; one that lacks it (it cannot
//! stage, it cannot prepare) must take the named fallback and say so. The behaviours: all or
//! nothing across streams, a duplicate across streams, a bad row named with its position,
//! rejects and isolation, the ledger and resume at kill points, prepared commits finished
//! after a kill at each point, a rerun after a truncate, the stage strategy and its publish
//! (cut off by a kill, and with files that cross the partitions' bounds), a lost connection
//! retried.

mod common;

use common::{assert_has, run_bounded, sluice_cmd, stderr, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// A database on a real server, fresh for one test.
trait Target {
    fn url(&self) -> &str;
    fn dir(&self) -> &Path;
    /// Runs SQL, failing the test on an error; returns what it printed.
    fn sql(&self, sql: &str) -> String;
    fn count(&self, table: &str) -> u64;
    /// `CREATE TABLE name (id int, v varchar(40))` partitioned by ranges of `id`, one
    /// partition per `bounds` window; `None` where the destination cannot stage.
    fn partitioned(&self, name: &str, bounds: &[(u32, u32)]) -> Option<()>;
    /// Ends one session of this database that is copying rows (a lost connection).
    fn end_a_loading_session(&self) -> bool;
    /// The prepared (two-phase) transactions of this database that wait for their end.
    fn prepared(&self) -> u64;
    /// Staging tables left in this database.
    fn staging_left(&self) -> u64;
    /// The kill point inside the destination's publish: in its one transaction, or between
    /// two partitions' steps.
    fn publish_point(&self) -> &'static str;
}

/// A kind of server.
trait Server {
    fn fresh(&self, test: &str) -> Box<dyn Target>;
}

/// Rows `id,v` for ids `from..to`, with `odd` values of `v` (or of the whole line) by id.
fn rows(from: u32, to: u32, odd: &[(u32, &str)]) -> String {
    (from..to)
        .map(|i| match odd.iter().find(|(k, _)| *k == i) {
            Some((_, line)) => format!("{line}\n"),
            None => format!("{i},v{i}\n"),
        })
        .collect()
}

fn write(t: &dyn Target, name: &str, text: &str) -> PathBuf {
    let p = t.dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `sluice load -q --target URL --table TABLE --jobs 2 ARGS FILES`, bounded, with `env`.
fn load(
    t: &dyn Target,
    table: &str,
    files: &[&Path],
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut c = sluice_cmd();
    c.args([
        "load",
        "-q",
        "--target",
        t.url(),
        "--table",
        table,
        "--jobs",
        "2",
    ])
    .args(args)
    .args(files);
    for (k, v) in env {
        c.env(k, v);
    }
    run_bounded(c, 300)
}

fn plain(t: &dyn Target) {
    t.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(40))");
}

/// Every id of `from..to` in `t` exactly once.
fn exactly_once(t: &dyn Target, n: u64) {
    assert_eq!(t.count("t"), n);
    assert_eq!(t.count("(SELECT DISTINCT id FROM t) x"), n);
}

fn all_or_nothing_across_streams(s: &dyn Server) {
    let t = s.fresh("conf_all_or_nothing");
    plain(&*t);
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[(4499, "4499,v,extra")]));
    let out = load(&*t, "t", &[&a, &b], &[], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // A bad row, named with its position.
    assert_has(
        &stderr(&out),
        &["b.csv", "line 1500", "byte offset", "nothing was committed"],
    );
    assert_eq!(t.count("t"), 0);
}

fn a_duplicate_across_streams(s: &dyn Server) {
    let t = s.fresh("conf_duplicate");
    plain(&*t);
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[(5000, "17,again")]));
    let out = load(&*t, "t", &[&a, &b], &[], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(&stderr(&out), &["17"]);
    assert_eq!(t.count("t"), 0);
}

fn rejects_and_isolation(s: &dyn Server) {
    let t = s.fresh("conf_rejects");
    plain(&*t);
    let a = write(&*t, "a.csv", &rows(0, 3000, &[(10, "x10,bad id")]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[(5000, "17,again")]));
    let rejects = t.dir().join("r.csv");
    let out = load(
        &*t,
        "t",
        &[&a, &b],
        &["--max-errors", "5", "--rejects", rejects.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_eq!(t.count("t"), 5998);
    // The duplicate's reject is whichever of the two rows came second.
    let kept = std::fs::read_to_string(&rejects).unwrap();
    assert!(
        ["x10,bad id\n17,again\n", "x10,bad id\n17,v17\n"].contains(&kept.as_str()),
        "{kept}"
    );
}

fn the_ledger_resumes_after_a_kill_at_the_commit(s: &dyn Server) {
    for prepare in ["off", "auto"] {
        let t = s.fresh(&format!("conf_ledger_{prepare}"));
        plain(&*t);
        let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
        let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
        let args = ["--prepare", prepare];
        let out = load(&*t, "t", &[&a, &b], &args, &[("SLUICE_KILL_AT", "commit")]);
        assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
        let out = load(&*t, "t", &[&a, &b], &args, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        exactly_once(&*t, 6000);
        let out = load(&*t, "t", &[&a, &b], &args, &[]);
        assert_has(&stderr(&out), &["nothing to load"]);
        exactly_once(&*t, 6000);
    }
}

/// `--prepare on`, killed at each point of the two-phase commit: before the decision
/// (`prepared`: nothing visible, the next run rolls every branch back and loads again), after
/// it (`decided`), and between two commits (`commit`); the same command then finishes what
/// was decided, and leaves no prepared transaction holding its locks.
fn prepared_commits_are_finished_after_a_kill_at_each_point(s: &dyn Server) {
    for point in ["prepared", "decided", "commit"] {
        let t = s.fresh(&format!("conf_prepared_{point}"));
        plain(&*t);
        let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
        let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
        let args = ["--prepare", "on"];
        let out = load(&*t, "t", &[&a, &b], &args, &[("SLUICE_KILL_AT", point)]);
        assert_eq!(
            out.status.code(),
            None,
            "killed at {point}: {}",
            stderr(&out)
        );
        assert!(
            t.prepared() >= 1,
            "killed at {point}: nothing left prepared"
        );
        if point != "commit" {
            assert_eq!(t.count("t"), 0, "killed at {point}: rows visible");
        }
        let out = load(&*t, "t", &[&a, &b], &args, &[]);
        assert!(out.status.success(), "after {point}: {}", stderr(&out));
        let settled = match point {
            "prepared" => "committed 0 of its prepared transaction(s), as it had decided",
            _ => "as it had decided, and rolled back 0",
        };
        assert_has(&stderr(&out), &[settled]);
        exactly_once(&*t, 6000);
        assert_eq!(t.prepared(), 0, "after {point}");
        t.sql("TRUNCATE TABLE t");
    }
    // Forgetting the job finishes its decided commit first (where a prepared transaction's
    // ledger rows would hold up their removal).
    let t = s.fresh("conf_prepared_forget");
    plain(&*t);
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
    let kill = [("SLUICE_KILL_AT", "decided")];
    let out = load(&*t, "t", &[&a, &b], &["--prepare", "on"], &kill);
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
    let mut forget = sluice_cmd();
    forget.args(["jobs", "forget", "1", "--target", t.url()]);
    let out = run_bounded(forget, 120);
    assert!(out.status.success(), "forget: {}", stderr(&out));
    exactly_once(&*t, 6000);
    assert_eq!(t.prepared(), 0, "after forget");
}

fn a_rerun_after_truncate_loads_again(s: &dyn Server) {
    let t = s.fresh("conf_rerun");
    plain(&*t);
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
    let out = load(&*t, "t", &[&a, &b], &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    t.sql("TRUNCATE TABLE t");
    let out = load(&*t, "t", &[&a, &b], &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &["is empty, although job 1 loaded 6,000 rows"],
    );
    exactly_once(&*t, 6000);
}

fn the_stage_strategy_or_its_fallback(s: &dyn Server) {
    let t = s.fresh("conf_stage");
    let bounds = [(0, 3000), (3000, 6000)];
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
    match t.partitioned("p", &bounds) {
        Some(()) => {
            let out = load(&*t, "p", &[&a, &b], &["--strategy", "stage"], &[]);
            assert!(out.status.success(), "{}", stderr(&out));
            assert_has(&String::from_utf8_lossy(&out.stdout), &["strategy: stage"]);
            assert_eq!(t.count("p"), 6000);
        }
        None => {
            plain(&*t);
            let out = load(&*t, "t", &[&a, &b], &["--strategy", "stage"], &[]);
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert_has(&stderr(&out), &["cannot stage", "--strategy direct"]);
        }
    }
}

/// Killed inside the publish (in its transaction, or between two partitions' exchanges), the
/// same command finishes it: every row once, no staging table left.
fn a_publish_cut_off_is_finished_by_the_same_command(s: &dyn Server) {
    let t = s.fresh("conf_stage_kill");
    let bounds = [(0, 3000), (3000, 6000)];
    let a = write(&*t, "a.csv", &rows(0, 3000, &[]));
    let b = write(&*t, "b.csv", &rows(3000, 6000, &[]));
    if t.partitioned("p", &bounds).is_none() {
        return;
    }
    let args = ["--strategy", "stage"];
    let kill = [("SLUICE_KILL_AT", t.publish_point())];
    let out = load(&*t, "p", &[&a, &b], &args, &kill);
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
    let out = load(&*t, "p", &[&a, &b], &args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(t.count("p"), 6000);
    assert_eq!(t.count("(SELECT DISTINCT id FROM p) x"), 6000);
    assert_eq!(t.staging_left(), 0);
}

/// Files whose rows cross the partitions' bounds (another generator's cuts) still load every
/// row once under `--strategy stage`, whatever the strategy does with them.
fn files_across_partition_bounds_load_once(s: &dyn Server) {
    let t = s.fresh("conf_stage_cross");
    let bounds = [(0, 3000), (3000, 6000)];
    if t.partitioned("p", &bounds).is_none() {
        return;
    }
    let a = write(&*t, "a.csv", &rows(0, 1000, &[]));
    // b.csv crosses at its ends (routed); c.csv only in its middle, where the partition's
    // check finds it during the load: it goes in with the publish.
    let b: String = rows(1000, 4500, &[])
        .lines()
        .filter(|l| *l != "2000,v2000")
        .map(|l| format!("{l}\n"))
        .collect();
    let b = write(&*t, "b.csv", &b);
    let c = format!(
        "{}2000,v2000\n{}",
        rows(4500, 5000, &[]),
        rows(5000, 6000, &[])
    );
    let c = write(&*t, "c.csv", &c);
    let out = load(&*t, "p", &[&a, &b, &c], &["--strategy", "stage"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_has(&String::from_utf8_lossy(&out.stdout), &["strategy: stage"]);
    assert_eq!(t.count("p"), 6000);
    assert_eq!(t.count("(SELECT DISTINCT id FROM p) x"), 6000);
    assert_eq!(t.staging_left(), 0);
}

fn a_lost_connection_is_retried(s: &dyn Server) {
    let t = s.fresh("conf_lost");
    t.sql("CREATE TABLE t (id int, v varchar(80))");
    let n = 1_000_000;
    let text: String = (0..n)
        .map(|i| format!("{i},a value long enough to keep the copy busy for a while\n"))
        .collect();
    let f = write(&*t, "big.csv", &text);
    let mut c = sluice_cmd();
    c.args([
        "load",
        "-q",
        "--target",
        t.url(),
        "--table",
        "t",
        "--jobs",
        "2",
    ])
    .arg(&f)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    wait_until("a stream to be copying", 120, || t.end_a_loading_session());
    let ended = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_has(&stderr(&out), &["lost its connection", "retry 1 of 5"]);
    // A liveness bound, not a speed target: the lost session is noticed by the load, not
    // when the kernel gives up on a write to it (MariaDB's ended session left the stream's
    // write waiting about 110 s before the watch looked for it).
    let after = ended.elapsed().as_secs();
    assert!(
        after < 60,
        "the load took {after} s to get over the lost session"
    );
    assert_eq!(t.count("t"), n);
    assert_eq!(t.count("(SELECT DISTINCT id FROM t) x"), n);
}

/// Runs each behaviour against one server fixture, as tests named by both.
macro_rules! conformance {
    ($module:ident, $server:expr, [$($behaviour:ident),* $(,)?]) => {
        mod $module {
            $(
                #[test]
                fn $behaviour() {
                    super::$behaviour(&$server);
                }
            )*
        }
    };
}

conformance!(
    postgres,
    super::Postgres,
    [
        all_or_nothing_across_streams,
        a_duplicate_across_streams,
        rejects_and_isolation,
        the_ledger_resumes_after_a_kill_at_the_commit,
        prepared_commits_are_finished_after_a_kill_at_each_point,
        a_rerun_after_truncate_loads_again,
        the_stage_strategy_or_its_fallback,
        a_publish_cut_off_is_finished_by_the_same_command,
        files_across_partition_bounds_load_once,
        a_lost_connection_is_retried,
    ]
);

/// PostgreSQL: the test cluster (`common::pg`), a database per test.
struct Postgres;

impl Server for Postgres {
    fn fresh(&self, test: &str) -> Box<dyn Target> {
        Box::new(common::db(test))
    }
}

impl Target for common::Db {
    fn url(&self) -> &str {
        &self.url
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn sql(&self, sql: &str) -> String {
        self.psql(sql)
    }

    fn count(&self, table: &str) -> u64 {
        common::Db::count(self, table)
    }

    fn partitioned(&self, name: &str, bounds: &[(u32, u32)]) -> Option<()> {
        let mut sql = format!(
            "CREATE TABLE {name} (id int NOT NULL, v varchar(40)) PARTITION BY RANGE (id);"
        );
        for (k, (lo, hi)) in bounds.iter().enumerate() {
            sql.push_str(&format!(
                "CREATE TABLE {name}_{k} PARTITION OF {name} FOR VALUES FROM ({lo}) TO ({hi});"
            ));
        }
        self.psql(&sql);
        Some(())
    }

    fn end_a_loading_session(&self) -> bool {
        let ended = self.psql(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
             WHERE datname = '{}' AND query LIKE 'COPY%' AND state = 'active' \
               AND pid <> pg_backend_pid() LIMIT 1) x",
            self.name
        ));
        ended.trim() == "1"
    }

    fn prepared(&self) -> u64 {
        self.count("pg_prepared_xacts WHERE database = current_database()")
    }

    fn staging_left(&self) -> u64 {
        self.count("information_schema.tables WHERE table_schema = 'sluice_stage'")
    }

    fn publish_point(&self) -> &'static str {
        "publish"
    }
}

conformance!(
    mariadb,
    super::MariaDb,
    [
        all_or_nothing_across_streams,
        a_duplicate_across_streams,
        rejects_and_isolation,
        the_ledger_resumes_after_a_kill_at_the_commit,
        prepared_commits_are_finished_after_a_kill_at_each_point,
        a_rerun_after_truncate_loads_again,
        the_stage_strategy_or_its_fallback,
        a_publish_cut_off_is_finished_by_the_same_command,
        files_across_partition_bounds_load_once,
        a_lost_connection_is_retried,
    ]
);

/// MariaDB: the test server (`common::mariadb::maria`), a database per test.
struct MariaDb;

impl Server for MariaDb {
    fn fresh(&self, test: &str) -> Box<dyn Target> {
        Box::new(common::mariadb::mdb(test))
    }
}

impl Target for common::mariadb::MDb {
    fn url(&self) -> &str {
        &self.url
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn sql(&self, sql: &str) -> String {
        common::mariadb::MDb::sql(self, sql)
    }

    fn count(&self, table: &str) -> u64 {
        common::mariadb::MDb::count(self, table)
    }

    fn partitioned(&self, name: &str, bounds: &[(u32, u32)]) -> Option<()> {
        let parts: Vec<String> = bounds
            .iter()
            .enumerate()
            .map(|(k, (_, hi))| format!("PARTITION p{k} VALUES LESS THAN ({hi})"))
            .collect();
        self.sql(&format!(
            "CREATE TABLE {name} (id int NOT NULL, v varchar(40), PRIMARY KEY (id), KEY (v)) \
             PARTITION BY RANGE (id) ({})",
            parts.join(", ")
        ));
        Some(())
    }

    fn end_a_loading_session(&self) -> bool {
        let id = self.sql(&format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = '{}' \
             AND INFO LIKE 'LOAD DATA%' LIMIT 1",
            self.name
        ));
        let id = id.trim();
        if id.is_empty() {
            return false;
        }
        self.try_sql(&format!("KILL {id}")).is_ok()
    }

    fn prepared(&self) -> u64 {
        common::mariadb::MDb::prepared(self)
    }

    fn staging_left(&self) -> u64 {
        self.count(
            "information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME LIKE 'sluice!_stage!_%' ESCAPE '!'",
        )
    }

    /// Between two partitions' exchanges.
    fn publish_point(&self) -> &'static str {
        "switched"
    }
}
