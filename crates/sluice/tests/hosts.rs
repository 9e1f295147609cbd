//! A job loaded from several source hosts: each host a network namespace of its own, joined to
//! this one by a veth pair shaped with `tbf`, running its own `sluice load --job` worker
//! process against one real PostgreSQL listening on this side of every pair.
//! - three hosts with host-local files (the same file name, other contents, on each) load one
//!   job; the table equals a single-host load of the same files, row for row;
//! - a host cut off mid-load (its link down, its process gone): the server ends its sessions,
//!   and the worker's claims with them, within the keepalive bound sluice sets (about a
//!   minute); the same command run again on that host completes the job exactly once.
//!
//! Needs root and network namespaces; where they are missing each test says so and skips.

mod common;

use common::{finish, gen_tpch, sluice_cmd, succeeded, text};
use sluice_postgres::cluster::Cluster;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A source host: a namespace and the veth pair to it, addresses 10.96.N.2 (host) and
/// 10.96.N.1 (this side).
struct Host {
    namespace: String,
    server_end: String,
    host_end: String,
    server: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tc(namespace: Option<&str>, args: &[&str]) {
    let mut c = match namespace {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "tc"]);
            c
        }
        None => Command::new("tc"),
    };
    let out = c.args(args).output().unwrap();
    assert!(
        out.status.success(),
        "tc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Host {
    /// Host `n` (1 to 9) of this test process, its link shaped to `rate` both ways.
    fn up(n: u8, rate: &str) -> Host {
        let tag = std::process::id() % 10_000;
        let h = Host {
            namespace: format!("sluice-h{tag}-{n}"),
            server_end: format!("hs{tag}s{n}"),
            host_end: format!("hs{tag}h{n}"),
            server: format!("10.96.{n}.1"),
        };
        ip(&["netns", "add", &h.namespace]);
        ip(&[
            "link",
            "add",
            &h.server_end,
            "type",
            "veth",
            "peer",
            "name",
            &h.host_end,
        ]);
        ip(&["link", "set", &h.host_end, "netns", &h.namespace]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", h.server),
            "dev",
            &h.server_end,
        ]);
        ip(&["link", "set", &h.server_end, "up"]);
        let ns = h.namespace.as_str();
        let host_addr = format!("10.96.{n}.2/24");
        ip(&["-n", ns, "addr", "add", &host_addr, "dev", &h.host_end]);
        ip(&["-n", ns, "link", "set", &h.host_end, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        h.shape(rate);
        h
    }

    /// Shapes both ends of the link to `rate` (replacing an earlier shaping).
    fn shape(&self, rate: &str) {
        let tbf = [
            "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms",
        ];
        let mut host = vec!["qdisc", "replace", "dev", &self.host_end];
        host.extend(tbf);
        tc(Some(&self.namespace), &host);
        let mut server = vec!["qdisc", "replace", "dev", &self.server_end];
        server.extend(tbf);
        tc(None, &server);
    }

    /// Takes the host's end of the link down (`true`) or up again.
    fn cut(&self, down: bool) {
        let state = if down { "down" } else { "up" };
        ip(&["-n", &self.namespace, "link", "set", &self.host_end, state]);
    }

    /// `sluice` run on this host.
    fn sluice(&self) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.namespace,
            env!("CARGO_BIN_EXE_sluice"),
        ]);
        c.stdin(Stdio::null());
        c
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.server_end])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .output();
    }
}

/// Says that a test skips, and why, on the real stderr (the harness captures eprintln!).
fn skipped(test: &str) -> bool {
    match delayline::path::unavailable() {
        Some(why) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

/// The server on this side of every host's link, one per test binary.
struct Server {
    cluster: Cluster,
    root: PathBuf,
    port: u16,
}

static SERVER: OnceLock<Server> = OnceLock::new();

extern "C" fn stop_server() {
    if let Some(s) = SERVER.get() {
        let _ = s.cluster.destroy();
        let _ = std::fs::remove_dir_all(&s.root);
    }
}

/// The server, listening on 127.0.0.1 and on this side of hosts 1 to 9 (the addresses are
/// bound once their links are up: `listen_addresses = '*'`, trust for 10.96/16).
fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("sluice-hosts-{}", std::process::id()));
        let (cluster, port) = common::bed_server(
            &root,
            &[
                ("listen_addresses", "*"),
                ("max_prepared_transactions", "32"),
            ],
            &["10.96.0.0/16".to_string()],
        );
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(stop_server) };
        Server {
            cluster,
            root,
            port,
        }
    })
}

impl Server {
    /// A fresh database; its URL from this side and from host `n`.
    fn database(&self, name: &str) -> String {
        self.psql("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        name.to_string()
    }

    fn url(&self, db: &str, from: Option<&Host>) -> String {
        let addr = from.map_or("127.0.0.1", |h| h.server.as_str());
        format!(
            "postgresql://sluice@{addr}:{}/{db}?sslmode=disable",
            self.port
        )
    }

    fn psql(&self, db: &str, sql: &str) -> String {
        common::psql_at(&self.cluster, &self.url(db, None), sql)
    }
}

/// SF0.1 lineitem in 3 parts, generated once per test binary.
fn parts() -> &'static Vec<PathBuf> {
    static PARTS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    PARTS.get_or_init(|| {
        let out = server().root.join("tpch");
        gen_tpch(&out, "0.1", "3")
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("lineitem"))
            .collect()
    })
}

/// `part` copied to a path of host `n`'s own: `DIR/hostN/lineitem.tbl`, the same name on
/// every host.
fn host_local(dir: &Path, n: u8, part: &Path) -> PathBuf {
    let d = dir.join(format!("host{n}"));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("lineitem.tbl");
    std::fs::copy(part, &p).unwrap();
    p
}

/// The TPC-H lineitem table in `db` (with `ddl`'s options), and `reference` of the same shape
/// loaded by one sluice on this side from `files`.
fn tables(s: &Server, db: &str, files: &[&Path], ddl: &[&str]) {
    let out = sluice_cmd()
        .args(["ddl", "tpch", "--create", "--target", &s.url(db, None)])
        .args(ddl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    s.psql(db, "CREATE TABLE reference (LIKE lineitem)");
    let mut c = sluice_cmd();
    c.args([
        "load",
        "-q",
        "--target",
        &s.url(db, None),
        "--table",
        "reference",
    ])
    .args(files);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// Worker `k` of `workers` of job `job`, on host `h`, loading `files` into lineitem.
fn worker(
    s: &Server,
    db: &str,
    h: &Host,
    job: (&str, u32, u32),
    files: &[&Path],
    extra: &[&str],
) -> Child {
    let (job, workers, k) = job;
    let mut c = h.sluice();
    c.args([
        "load",
        "--target",
        &s.url(db, Some(h)),
        "--table",
        "lineitem",
    ])
    .args(["--jobs", "2", "--job", job, "--wait-workers", "5min"])
    .args([
        "--workers",
        &workers.to_string(),
        "--worker",
        &k.to_string(),
    ])
    .args(extra)
    .args(files)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// Job `job` of one worker per host, host `i` loading `files[i]`, with `extra`: every worker's
/// output once all have ended.
fn job_on_hosts(
    s: &Server,
    db: &str,
    hosts: &[Host],
    job: &str,
    files: &[PathBuf],
    extra: &[&str],
) -> Vec<Output> {
    let n = hosts.len() as u32;
    let children: Vec<Child> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| worker(s, db, h, (job, n, i as u32 + 1), &[&files[i]], extra))
        .collect();
    children.into_iter().map(|c| finish(c, 300)).collect()
}

/// The rows of `table` in `db`.
fn count(db: &str, table: &str) -> u64 {
    let n = server().psql(db, &format!("SELECT count(*) FROM {table}"));
    n.parse().unwrap()
}

/// lineitem and reference hold the same rows, and the ledger counts each row once.
fn same_as_reference(s: &Server, db: &str) {
    for (a, b) in [("lineitem", "reference"), ("reference", "lineitem")] {
        let diff = s.psql(
            db,
            &format!("SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) d"),
        );
        assert_eq!(diff, "0", "{a} has rows {b} lacks");
    }
    assert_eq!(
        s.psql(
            db,
            "SELECT sum(c.rows) FROM sluice_ledger.job_chunks c \
             JOIN sluice_ledger.jobs j ON j.id = c.job WHERE j.key LIKE 'crew:%'"
        ),
        s.psql(db, "SELECT count(*) FROM lineitem")
    );
}

#[test]
fn three_hosts_with_host_local_files_load_one_job_equal_to_one_host() {
    if skipped("three_hosts_with_host_local_files_load_one_job_equal_to_one_host") {
        return;
    }
    let s = server();
    let db = s.database("three_hosts");
    let dir = s.root.join("three");
    let hosts: Vec<Host> = (1..=3).map(|n| Host::up(n, "200mbit")).collect();
    let files: Vec<PathBuf> = (1..=3)
        .map(|n| host_local(&dir, n, &parts()[n as usize - 1]))
        .collect();
    let refs: Vec<&Path> = parts().iter().map(PathBuf::as_path).collect();
    tables(s, &db, &refs, &[]);
    let outs = job_on_hosts(s, &db, &hosts, "three", &files, &[]);
    for o in &outs {
        succeeded(o);
    }
    same_as_reference(s, &db);
    // `--wire auto` was decided once: one worker measured the path, the others took its
    // answer (three measuring at once would each see the server busy with the others').
    let shared = outs
        .iter()
        .filter(|o| String::from_utf8_lossy(&o.stdout).contains("decided once for job three"))
        .count();
    assert_eq!(shared, 2, "{}", outs.iter().map(text).collect::<String>());
    // Three files of one name on three hosts are three files of the job.
    assert_eq!(
        s.psql(
            &db,
            "SELECT count(*) FROM sluice_ledger.job_files f \
             JOIN sluice_ledger.jobs j ON j.id = f.job WHERE j.key = 'crew:three'"
        ),
        "3"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_host_cut_off_mid_load_gives_its_claims_back_within_a_minute_and_the_job_completes_once() {
    if skipped(
        "a_host_cut_off_mid_load_gives_its_claims_back_within_a_minute_and_the_job_completes_once",
    ) {
        return;
    }
    let s = server();
    let db = s.database("cut_off");
    let dir = s.root.join("cut");
    let fast = Host::up(4, "200mbit");
    // Host 2's link carries 0.5 MB/s: its 50 MB take long enough to be cut mid-load.
    let slow = Host::up(5, "4mbit");
    let one = host_local(&dir, 4, &parts()[0]);
    let two: Vec<&Path> = vec![&parts()[1], &parts()[2]];
    let refs: Vec<&Path> = parts().iter().map(PathBuf::as_path).collect();
    tables(s, &db, &refs, &[]);
    let first = worker(s, &db, &fast, ("cut", 2, 1), &[&one], &[]);
    let mut second = worker(s, &db, &slow, ("cut", 2, 2), &two, &[]);
    // A claim is invisible until the job commits; a COPY from the host is not.
    let claimed = || {
        s.psql(
            &db,
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE client_addr = '10.96.5.2' \
             AND query LIKE 'COPY%'",
        ) == "t"
    };
    common::wait_until("worker 2 loads", 120, claimed);
    std::thread::sleep(Duration::from_secs(2));
    // The host goes away: its link down, its process gone with it.
    slow.cut(true);
    let cut_at = Instant::now();
    second.kill().unwrap();
    let _ = second.wait();
    // The server ends the host's sessions on its own; the slot's lock goes with them.
    let live = "SELECT count(*) FROM pg_stat_activity WHERE client_addr = '10.96.5.2'";
    while s.psql(&db, live) != "0" {
        assert!(
            cut_at.elapsed() < Duration::from_secs(100),
            "the cut-off host's sessions outlived the keepalive bound"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let freed = cut_at.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "sessions ended {:.0} s after the cut",
        freed.as_secs_f64()
    );
    assert_eq!(s.psql(&db, "SELECT count(*) FROM lineitem"), "0");
    // The host comes back, faster; the same command completes the job, exactly once.
    slow.cut(false);
    slow.shape("200mbit");
    succeeded(&finish(
        worker(s, &db, &slow, ("cut", 2, 2), &two, &[]),
        300,
    ));
    succeeded(&finish(first, 300));
    same_as_reference(s, &db);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_hosts_stage_their_partitions_and_the_last_publishes_them_at_once() {
    if skipped("three_hosts_stage_their_partitions_and_the_last_publishes_them_at_once") {
        return;
    }
    let s = server();
    let db = s.database("three_staged");
    let dir = s.root.join("staged");
    let hosts: Vec<Host> = (6..=8).map(|n| Host::up(n, "200mbit")).collect();
    let files: Vec<PathBuf> = (0..3)
        .map(|i| host_local(&dir, i as u8 + 6, &parts()[i]))
        .collect();
    let refs: Vec<&Path> = parts().iter().map(PathBuf::as_path).collect();
    // lineitem in three partitions, one a part: each host stages its own.
    tables(s, &db, &refs, &["--partitions", "3", "--scale", "0.1"]);
    let total = count(&db, "reference");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, db) = (stop.clone(), db.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                seen.push(count(&db, "lineitem"));
                std::thread::sleep(Duration::from_millis(100));
            }
            seen
        })
    };
    let outs = job_on_hosts(s, &db, &hosts, "staged", &files, &["--strategy", "stage"]);
    stop.store(true, Ordering::SeqCst);
    let mut seen = reader.join().unwrap();
    seen.push(count(&db, "lineitem"));
    for o in &outs {
        succeeded(o);
    }
    let all: String = outs.iter().map(text).collect();
    assert!(
        all.contains("switched in the job's 3 staging table(s), every worker's"),
        "{all}"
    );
    same_as_reference(s, &db);
    // A reader saw none of the job, then all of it.
    assert!(common::none_then_all(&seen, total), "{seen:?}");
    assert_eq!(
        s.psql(
            &db,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'sluice_stage'"
        ),
        "0"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
