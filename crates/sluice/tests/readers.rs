//! Readers see all of a load or none of it: while a load's streams commit one after another
//! (prepared or back to back), a reader's query waits behind the load's gate and then sees
//! every row, of the table and of the table its trigger writes; a killed load's gate goes with
//! it; a primary with a streaming standby is not held, and says so. Real PostgreSQL servers
//! (the tests' shared one, and a primary with a standby of its own). Apart from the ledger's
//! tests, whose parallel loads these tests' pauses and servers would slow.

mod common;

use common::{assert_has, db, load_t as load, rows, run_bounded, sluice_cmd, stderr, Db};
use std::path::Path;
use std::process::{Command, Stdio};

/// A load of `files` into `t` on two streams with `--prepare prepare`, after emptying
/// `tables` and dropping the ledger: every run is a first load.
fn first_load(d: &Db, tables: &str, prepare: &str, files: &[&Path]) -> Command {
    d.psql(&format!(
        "TRUNCATE {tables}; DROP SCHEMA IF EXISTS sluice_ledger CASCADE"
    ));
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--target", &d.url, "--table", "t", "--jobs", "2",
    ])
    .args(["--prepare", prepare])
    .args(files);
    c
}

/// How many chunk records the ledger holds committed (none before it exists).
fn chunks_committed(d: &Db) -> Option<String> {
    d.try_psql("SELECT count(*) FROM sluice_ledger.job_chunks")
        .ok()
}

/// The streams' transactions commit one after another, prepared or not. A reader whose query
/// comes between two of those commits waits, and then sees every row of the load, never the
/// first stream's alone: the load holds readers back while it commits, of its table and of the
/// table its trigger writes. The load pauses 3 s between its first and second commit, and a
/// count is taken in that pause.
#[test]
fn a_reader_between_two_commits_waits_and_sees_the_whole_load() {
    for prepare in ["on", "off"] {
        let d = db(&format!("ledger_reader_gate_{prepare}"));
        d.psql(
            "CREATE TABLE t (id int, v text); CREATE TABLE audit (id int); \
             CREATE FUNCTION audited() RETURNS trigger LANGUAGE plpgsql AS \
               $$BEGIN INSERT INTO audit VALUES (NEW.id); RETURN NEW; END$$; \
             CREATE TRIGGER audited AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION audited()",
        );
        let a = d.file("a.csv", rows(0, 1000).as_bytes());
        let b = d.file("b.csv", rows(1000, 2000).as_bytes());
        let start = || first_load(&d, "t, audit", prepare, &[&a, &b]);
        // The ledger is not held back: its chunk records say where the load is.
        let chunks = || chunks_committed(&d);
        // The trigger's table first: were it not held, the count would return at once.
        let count = || d.count("audit") * 10_000 + d.count("t");
        let (seen, out) = common::count_between_commits(start, chunks, count);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            seen,
            2000 * 10_000 + 2000,
            "--prepare {prepare}: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("held back"), "{}", stderr(&out));
    }
    // Killed in that pause, with its gate waiting: the gate goes with the process, and a
    // reader sees the first stream's rows at once (the same command completes the rest).
    let d = db("ledger_reader_gate_killed");
    d.psql("CREATE TABLE t (id int, v text)");
    let a = d.file("a.csv", rows(0, 1000).as_bytes());
    let b = d.file("b.csv", rows(1000, 2000).as_bytes());
    let start = || first_load(&d, "t", "on", &[&a, &b]);
    let chunks = || chunks_committed(&d);
    let mut child = common::paused_between_commits(start, chunks, 60_000);
    let gates = "SELECT count(*) FROM pg_locks WHERE NOT granted \
                 AND mode = 'AccessExclusiveLock' AND relation = 't'::regclass";
    assert_eq!(d.psql(gates).trim(), "1", "no gate waits on t");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The gate's session notices its client gone within a quarter second (its own bound is
    // 10 s): well within 5 s, no lock request of it waits on the table.
    common::wait_until("the killed load's gate to end", 5, || {
        d.psql(gates).trim() == "0"
    });
    assert_eq!(d.count("t"), 1000);
    let out = load(&d, &[&a, &b], &["--prepare", "on"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("(SELECT DISTINCT id FROM t) x"), 2000);
}

/// `cmd` as the account the test servers run as (`postgres`, when the tests run as root).
fn as_server_account(cmd: &mut Command, cluster: &sluice_postgres::cluster::Cluster) {
    if !cluster.runs_as_postgres() {
        return;
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: getpwnam with a NUL-terminated name; the fields are read at once.
    let pw = unsafe { libc::getpwnam(c"postgres".as_ptr()) };
    assert!(!pw.is_null(), "no postgres account");
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    cmd.uid(uid).gid(gid).current_dir("/");
}

/// A primary that streams to a standby: a granted `ACCESS EXCLUSIVE` lock is written to the
/// log, and the standby's replay of it would wait for (and in the end cancel) long queries
/// there. So sluice does not hold readers back on such a primary, says so, and loads every row.
#[test]
fn a_primary_with_a_standby_does_not_hold_readers_and_says_so() {
    let root = std::env::temp_dir().join(format!("sluice-standby-{}", std::process::id()));
    let settings = [
        ("wal_level", "replica"),
        ("max_wal_senders", "4"),
        ("max_prepared_transactions", "8"),
    ];
    let (primary, port) = common::bed_server(&root.join("primary"), &settings, &[]);
    let standby = root.join("standby");
    std::fs::create_dir_all(&standby).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&standby, std::fs::Permissions::from_mode(0o700)).unwrap();
    let bin = |name: &str| primary.bindir.join(name);
    if primary.runs_as_postgres() {
        let mut chown = Command::new("chown");
        chown.args(["postgres:postgres"]).arg(&standby);
        assert!(chown.status().unwrap().success());
    }
    let mut backup = Command::new(bin("pg_basebackup"));
    backup
        .arg("-D")
        .arg(&standby)
        .args([
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-h",
            "127.0.0.1",
            "-U",
            "sluice",
        ])
        .args(["-p", &port.to_string()]);
    as_server_account(&mut backup, &primary);
    let out = backup.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let standby_port = sluice_postgres::cluster::free_port().unwrap();
    let auto = standby.join("postgresql.auto.conf");
    let mut conf = std::fs::read_to_string(&auto).unwrap();
    conf.push_str(&format!("port = {standby_port}\nhot_standby = on\n"));
    std::fs::write(&auto, conf).unwrap();
    let pg_ctl = |args: &[&str]| {
        let mut c = Command::new(bin("pg_ctl"));
        c.arg("-D").arg(&standby).args(args).stdout(Stdio::null());
        as_server_account(&mut c, &primary);
        c.status().unwrap()
    };
    let log = standby.join("server.log");
    assert!(pg_ctl(&["start", "-w", "-t", "60", "-l", log.to_str().unwrap()]).success());
    // Both servers stop, and their directories go, whatever the assertions below do.
    struct Stop<F: FnMut()>(F);
    impl<F: FnMut()> Drop for Stop<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    let _stop = Stop(|| {
        let _ = pg_ctl(&["stop", "-m", "immediate"]);
        let _ = primary.destroy();
        let _ = std::fs::remove_dir_all(&root);
    });
    let url = primary.url().unwrap();
    common::wait_until("the standby streaming", 60, || {
        common::psql_at(&primary, &url, "SELECT count(*) FROM pg_stat_replication") == "1"
    });
    common::psql_at(&primary, &url, "CREATE TABLE t (id int, v text)");
    let a = root.join("a.csv");
    let b = root.join("b.csv");
    std::fs::write(&a, rows(0, 1000)).unwrap();
    std::fs::write(&b, rows(1000, 2000)).unwrap();
    let load = || {
        common::psql_at(&primary, &url, "TRUNCATE t");
        let mut c = sluice_cmd();
        c.args([
            "load", "-q", "--jobs", "2", "--target", &url, "--table", "t",
        ])
        .args([&a, &b]);
        run_bounded(c, 120)
    };
    let rows_in = || {
        assert_eq!(
            common::psql_at(&primary, &url, "SELECT count(*) FROM t"),
            "2000"
        )
    };
    let err = common::until_two_streams_say("could not be held back", load, rows_in);
    assert_has(
        &err,
        &["streams to 1 standby(s)", "could cancel long queries there"],
    );
}
