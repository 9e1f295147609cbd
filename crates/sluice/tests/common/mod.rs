//! Test harness: one private PostgreSQL per test binary, a fresh database per test, and helpers
//! to run sluice and psql side by side.
//!
//! The cluster is a real server (initdb in a temp dir, a free port on 127.0.0.1, run as
//! `postgres` when the tests run as root), never a mock. It is stopped and deleted when the test
//! binary exits.

#![allow(dead_code)]

pub mod mariadb;

use sluice_postgres::cluster::Cluster;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

pub struct Pg {
    pub cluster: Cluster,
    pub port: u16,
    pub root: PathBuf,
}

static PG: OnceLock<Pg> = OnceLock::new();

extern "C" fn stop_cluster() {
    if let Some(pg) = PG.get() {
        let _ = pg.cluster.destroy();
        let _ = std::fs::remove_dir_all(&pg.root);
    }
}

/// The binary's shared cluster, started on first use.
pub fn pg() -> &'static Pg {
    PG.get_or_init(|| {
        let root = std::env::temp_dir().join(format!(
            "sluice-test-{}-{}",
            std::process::id(),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        std::fs::create_dir_all(&root).unwrap();
        let cluster = Cluster::new(root.join("pg")).expect("PostgreSQL server binaries");
        let settings: Vec<(String, String)> = [
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
            ("shared_buffers", "128MB"),
            ("max_connections", "200"),
            ("max_prepared_transactions", "64"),
            ("TimeZone", "America/New_York"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        cluster.init(&settings).expect("initdb");
        let port = cluster.start().expect("start the test cluster");
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe {
            libc::atexit(stop_cluster);
        }
        Pg {
            cluster,
            port,
            root,
        }
    })
}

static DB_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh database for one test.
pub struct Db {
    pub name: String,
    pub url: String,
    pub dir: PathBuf,
}

pub fn db(test: &str) -> Db {
    let pg = pg();
    let name = format!(
        "{}_{}",
        test.to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        DB_SEQ.fetch_add(1, Ordering::SeqCst)
    );
    let admin = Db {
        name: "postgres".into(),
        url: String::new(),
        dir: pg.root.clone(),
    };
    admin.psql(&format!("DROP DATABASE IF EXISTS {name}"));
    admin.psql(&format!("CREATE DATABASE {name}"));
    let dir = pg.root.join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    Db {
        url: format!(
            "postgresql://sluice@127.0.0.1:{}/{name}?sslmode=disable",
            pg.port
        ),
        name,
        dir,
    }
}

pub fn psql_bin() -> PathBuf {
    pg().cluster.bindir.join("psql")
}

impl Db {
    /// psql on this database (session zone America/New_York unless the caller changes PGTZ).
    pub fn psql_cmd(&self) -> Command {
        let mut c = Command::new(psql_bin());
        c.args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "sluice",
        ])
        .args(["-p", &pg().port.to_string(), "-d", &self.name])
        .env("PGTZ", "America/New_York")
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null());
        c
    }

    /// A psql session that stays open (a transaction, a lock held) while the test goes on:
    /// as application `app`, it has been sent `sql` and waits for more.
    pub fn open_session(&self, app: &str, sql: &str) -> Session {
        use std::io::Write;
        let mut child = self
            .psql_cmd()
            .env("PGAPPNAME", app)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{sql}").unwrap();
        stdin.flush().unwrap();
        Session {
            child,
            stdin: Some(stdin),
        }
    }

    /// Runs SQL, panicking on failure; returns unaligned, tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        let out = self.psql_cmd().args(["-Atq", "-c", sql]).output().unwrap();
        assert!(
            out.status.success(),
            "psql failed on {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs SQL, returning stderr on failure.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let out = self.psql_cmd().args(["-Atq", "-c", sql]).output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `\copy table FROM file WITH (options)` through psql: the reference loader.
    pub fn psql_copy(&self, table: &str, file: &Path, options: &str) -> Result<(), String> {
        let cmd = format!("\\copy {table} from '{}' with ({options})", file.display());
        self.try_psql(&cmd).map(drop)
    }

    pub fn count(&self, table: &str) -> u64 {
        self.psql(&format!("SELECT count(*) FROM {table}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Asserts that two tables hold the same multiset of rows (EXCEPT ALL both ways), comparing
    /// each row's text form: stricter than typed equality (it sees `1.0` versus `1.00`), and it
    /// works for types without an equality operator, such as json.
    pub fn assert_same_rows(&self, a: &str, b: &str) {
        let diff = self.psql(&format!(
            "SELECT 'only in {a}: ' || r FROM (SELECT x::text AS r FROM {a} x \
               EXCEPT ALL SELECT x::text FROM {b} x) d \
             UNION ALL \
             SELECT 'only in {b}: ' || r FROM (SELECT x::text AS r FROM {b} x \
               EXCEPT ALL SELECT x::text FROM {a} x) d \
             LIMIT 20"
        ));
        assert!(diff.is_empty(), "{a} and {b} differ:\n{diff}");
        assert_eq!(self.count(a), self.count(b), "row counts of {a} and {b}");
    }

    /// Runs sluice against this database.
    pub fn sluice(&self, args: &[&str]) -> Output {
        sluice_cmd()
            .args(args)
            .args(["--target", &self.url])
            .output()
            .unwrap()
    }

    /// Runs sluice and asserts success.
    pub fn sluice_ok(&self, args: &[&str]) -> String {
        let out = self.sluice(args);
        assert!(
            out.status.success(),
            "sluice {args:?} failed ({:?}):\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Writes a file in this test's directory.
    pub fn file(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

/// The sluice binary, with an environment that names no server.
pub fn sluice_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    for k in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGDATABASE",
        "PGPASSWORD",
        "DATABASE_URL",
        "MYSQL_HOST",
        "MYSQL_TCP_PORT",
        "MYSQL_PWD",
        "MYSQL_UNIX_PORT",
    ] {
        c.env_remove(k);
    }
    c.stdin(Stdio::null());
    c
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The repository's test fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(rel)
}

/// Runs a command, failing the test if it has not ended after `secs` seconds (a hang is the
/// bug some tests guard against: they must fail, not hang the suite).
pub fn run_bounded(mut cmd: Command, secs: u64) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still ran after {secs} s (a hang):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A psql session [`Db::open_session`] keeps open.
pub struct Session {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl Session {
    /// Ends its input (psql then quits, rolling back what is open) and waits for psql.
    pub fn end(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}

/// Polls `done` every 20 ms, failing the test with `what` if it is still false after `secs`
/// seconds.
pub fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A `.tbl` file without its trailing `|`s, which psql's `\copy` (delimiter `|`) would read
/// as an extra column.
pub fn strip_trailing_bars(src: &Path, dst: &Path) {
    let text = std::fs::read_to_string(src).unwrap();
    let mut out = String::with_capacity(text.len());
    for l in text.lines() {
        out.push_str(l.strip_suffix('|').unwrap_or(l));
        out.push('\n');
    }
    std::fs::write(dst, out).unwrap();
}

/// `sluice gen tpch -q --scale SCALE --parts PARTS --out OUT`, asserting success; returns the
/// `.tbl` files it wrote, in a stable order.
pub fn gen_tpch(out: &Path, scale: &str, parts: &str) -> Vec<PathBuf> {
    let o = sluice_cmd()
        .args([
            "gen", "tpch", "-q", "--scale", scale, "--parts", parts, "--out",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files = Vec::new();
    let mut dirs = vec![out.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "tbl") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// `sluice ddl tpch ARGS`, asserting success: the statements it prints.
pub fn tpch_ddl(args: &[&str]) -> String {
    let o = sluice_cmd()
        .args(["ddl", "tpch"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The table a TPC-H file loads into: its name up to the first dot.
pub fn tpch_table(file: &Path) -> String {
    let name = file.file_name().unwrap().to_str().unwrap();
    name.split('.').next().unwrap().to_string()
}

impl Db {
    /// Loads TPC-H `.tbl` files into `schema` with psql `\copy`, the reference loader.
    pub fn psql_copy_tbl(&self, schema: &str, files: &[PathBuf]) {
        let stripped = self.dir.join("stripped.txt");
        for f in files {
            strip_trailing_bars(f, &stripped);
            self.psql_copy(
                &format!("{schema}.{}", tpch_table(f)),
                &stripped,
                "delimiter '|'",
            )
            .unwrap_or_else(|e| panic!("psql \\copy {}: {e}", f.display()));
        }
    }
}

/// Asserts that `text` contains every one of `parts`, showing the whole text when not.
pub fn assert_has(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "expected {p:?} in:\n{text}");
    }
}

impl Db {
    /// `sluice load -q --target <this db> ARGS` with `env` set, failing the test (a hang) if it
    /// has not ended after `secs` seconds.
    pub fn load(&self, args: &[&str], env: &[(&str, &str)], secs: u64) -> Output {
        let mut c = sluice_cmd();
        c.args(["load", "-q", "--target", &self.url]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        run_bounded(c, secs)
    }
}

/// The details file `sluice load --rejects PATH` writes beside PATH.
pub fn details_path(rejects: &Path) -> PathBuf {
    let mut p = rejects.as_os_str().to_owned();
    p.push(".jsonl");
    PathBuf::from(p)
}

/// A self-signed certificate authority named `name`, for the TLS tests' servers.
pub fn test_authority(name: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}

/// Whether a reader's counts (polled every 100 ms, the last after the load ended) saw nothing
/// of a job of `total` rows, then all of it: a job's commits run while readers are held back,
/// and a publish switches every staging table in at once, so that no poll sees some of the
/// job and not the rest.
pub fn none_then_all(seen: &[u64], total: u64) -> bool {
    if seen.last() != Some(&total) {
        return false;
    }
    let first_all = seen.iter().position(|&n| n == total).unwrap_or(seen.len());
    seen[..first_all].iter().all(|&n| n == 0) && seen[first_all..].iter().all(|&n| n == total)
}

/// Waits for a spawned sluice, failing the test after `secs` seconds (a hang), with what it
/// printed.
pub fn finish(mut child: std::process::Child, secs: u64) -> Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("a process still ran after {secs} s:\n{}", text(&out));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A process's exit code and output, for an assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts that a process exited 0, showing its output when not.
pub fn succeeded(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

/// psql against `url` with `cluster`'s own client, asserting success: its output, trimmed.
pub fn psql_at(cluster: &Cluster, url: &str, sql: &str) -> String {
    let out = Command::new(cluster.bindir.join("psql"))
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1"])
        .arg(url)
        .args(["-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A test bed's own server under `root/pg`, for clients in other network namespaces:
/// durability off, `settings` added, trust for the client addresses `trusted` (CIDR forms),
/// started. The cluster and its port.
pub fn bed_server(root: &Path, settings: &[(&str, &str)], trusted: &[String]) -> (Cluster, u16) {
    std::fs::create_dir_all(root).unwrap();
    let cluster = Cluster::new(root.join("pg")).expect("PostgreSQL server binaries");
    let settings: Vec<(String, String)> = [("fsync", "off"), ("synchronous_commit", "off")]
        .iter()
        .chain(settings)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    cluster.init(&settings).expect("initdb");
    let hba = root.join("pg/pg_hba.conf");
    let mut text = std::fs::read_to_string(&hba).unwrap();
    for address in trusted {
        text.push_str(&format!("host all all {address} trust\n"));
    }
    std::fs::write(&hba, text).unwrap();
    let port = cluster.start().expect("start the cluster");
    (cluster, port)
}

/// A load of two files on two streams, paused for `ms` between its two commits
/// (`SLUICE_PAUSE_AT=commit:ms`, set here), returned in that pause. `start` empties the table
/// and the ledger's chunk records and makes the command; `chunks` reads how many chunk records
/// are committed (one: the pause). On a busy machine one stream may take both files before the
/// other starts, and then there is one commit: that run proves nothing, and the load runs
/// again, at most five times.
pub fn paused_between_commits(
    start: impl Fn() -> Command,
    chunks: impl Fn() -> Option<String>,
    ms: u64,
) -> std::process::Child {
    for _ in 0..5 {
        let mut c = start();
        c.env("SLUICE_PAUSE_AT", format!("commit:{ms}"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let paused = || chunks().is_some_and(|n| n.trim() == "1");
        wait_until("the first stream's commit, or the load's end", 60, || {
            paused() || child.try_wait().unwrap().is_some()
        });
        if child.try_wait().unwrap().is_none() {
            return child;
        }
    }
    panic!("five loads of two files ran on one stream");
}

/// [`paused_between_commits`] for 3 s, and `count` taken in the pause: the count and the load's
/// output.
pub fn count_between_commits(
    start: impl Fn() -> Command,
    chunks: impl Fn() -> Option<String>,
    count: impl Fn() -> u64,
) -> (u64, Output) {
    let child = paused_between_commits(start, chunks, 3000);
    let seen = count();
    (seen, finish(child, 60))
}

/// Runs `load` until its stderr says `said` (a load of two files that ran on two streams:
/// on a busy machine one stream may take both), at most five times; every run must succeed,
/// and `check` looks at each. The stderr that said it.
pub fn until_two_streams_say(
    said: &str,
    mut load: impl FnMut() -> Output,
    check: impl Fn(),
) -> String {
    for _ in 0..5 {
        let out = load();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        check();
        if err.contains(said) {
            return err;
        }
    }
    panic!("no load of two files ran on two streams (none said {said:?})");
}

/// A process stopped with SIGSTOP (a server, or one backend of it) that is resumed when this
/// is dropped, whatever the test's outcome: a stopped server would hold up the test's end.
pub struct Stopped(i32);

impl Stopped {
    pub fn stop(pid: i32) -> Stopped {
        // SAFETY: a signal to a process id; no memory is shared.
        let sent = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(sent, 0, "SIGSTOP to {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

/// Writes `content` back into `path` with modification time `modified`: the file as an
/// earlier load saw it (the ledger knows a file by its size, time and content).
pub fn put_back(path: &Path, content: &[u8], modified: std::time::SystemTime) {
    std::fs::write(path, content).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

/// `from..to` as CSV lines `id,row id`.
pub fn rows(from: u32, to: u32) -> String {
    (from..to).map(|i| format!("{i},row {i}\n")).collect()
}

/// `sluice load` of `files` into table `t` on two streams, with `extra` flags and `env` set,
/// bounded at 120 s.
pub fn load_t(d: &Db, files: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args: Vec<&str> = vec!["--table", "t", "--jobs", "2"];
    args.extend(extra);
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    d.load(&args, env, 120)
}

/// `sluice load` of `file` into table `t` through `target`, two streams, `retries` retries,
/// its output piped: the silent-server tests' load.
pub fn load_two_streams(target: &str, file: &Path, retries: &str) -> Command {
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--target", target, "--table", "t", "--jobs", "2",
    ])
    .args(["--retries", retries])
    .arg(file)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// `rows` lines of `id,v`, the value long enough to keep a load busy for a while.
pub fn busy_rows(rows: u64) -> String {
    (0..rows)
        .map(|i| format!("{i},a value long enough to keep the load busy for a while\n"))
        .collect()
}

/// Waits (150 s at most) for a load whose server `stopped` holds stopped, then resumes it: the
/// load must have given the silent server up and failed with exit 5, saying so and `says`.
pub fn given_up<T>(child: std::process::Child, stopped: T, says: &[&str]) {
    let out = finish(child, 150);
    drop(stopped);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_has(&err, &["the server has answered nothing for"]);
    assert_has(&err, says);
}
