//! Faults that stand on their own (the resume ledger is in ledger.rs):
//! `--jobs 0`, a malformed URI, a compressed name over bytes that are not, and the JSON
//! report of a failed load; a stream cut off by a network partition.

mod common;

use common::{db, run_bounded, sluice_cmd, stderr, Db};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Waits (at most 60 s) until a COPY of this database's load is under way.
fn wait_until_copying(d: &Db) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let active = d.psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND query LIKE 'COPY%'",
            d.name
        ));
        if active.trim() != "0" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the COPY never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn jobs_zero_and_a_malformed_port_are_usage_errors() {
    let d = db("faults_usage");
    d.psql("CREATE TABLE t (id int)");
    let f = d.file("a.csv", b"1\n");
    let out = d.load(
        &["--table", "t", "--jobs", "0", f.to_str().unwrap()],
        &[],
        60,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--jobs must be at least 1"),
        "{}",
        stderr(&out)
    );
    let mut c = sluice_cmd();
    c.args([
        "load",
        "-q",
        "--target",
        "postgresql://u@127.0.0.1:notaport/db",
        "--table",
        "t",
    ])
    .arg(&f);
    let out = run_bounded(c, 60);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid port `notaport`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(d.count("t"), 0);
}

#[test]
fn a_compressed_name_over_other_bytes_is_named_not_read_as_garbage() {
    let d = db("faults_magic");
    d.psql("CREATE TABLE t (id int, v text)");
    let plain = d.file("plain.csv.zst", b"1,a\n2,b\n");
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b"1,a\n").unwrap();
        d.file("really-gzip.csv.zst", &e.finish().unwrap())
    };
    for (f, is) in [(&plain, "not compressed"), (&gz, "gzip")] {
        let out = d.load(&["--table", "t", f.to_str().unwrap()], &[], 60);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("its name promises zstd but its bytes are") && err.contains(is),
            "{err}"
        );
    }
    assert_eq!(d.count("t"), 0);
}

#[test]
fn a_failed_load_still_writes_its_json_report() {
    let d = db("faults_report");
    d.psql("CREATE TABLE t (id int, v text)");
    let f = d.file("bad.csv", b"1,a\n2,b\nthree,c\n");
    let report = d.dir.join("report.json");
    let args = [
        "--table",
        "t",
        "--report-json",
        report.to_str().unwrap(),
        f.to_str().unwrap(),
    ];
    let out = d.load(&args, &[], 60);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["ok"], false);
    let e = &json["error"];
    assert_eq!(e["kind"], "bad_row");
    assert_eq!(e["line"], 3);
    assert_eq!(e["byte_offset"], 8);
    assert_eq!(e["value"], "three");
    assert!(e["file"].as_str().unwrap().ends_with("bad.csv"));
    assert!(e["column"].as_str().unwrap().starts_with("id"));
    assert!(e["message"].as_str().unwrap().contains("bad row"));
    assert_eq!(d.count("t"), 0);
}

/// Truncating a memory-mapped input mid-load ends the load with a message and exit 1, not a
/// bus error (exit 135), and nothing is committed.
#[test]
fn truncating_an_input_while_it_loads_fails_with_a_message() {
    let d = db("faults_truncate");
    d.psql("CREATE TABLE t (id int, v text)");
    let line = "12345,some text that makes the row longer than it needs to be\n";
    let f = d.file("big.csv", line.repeat(4_000_000).as_bytes()); // 252 MB
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--target", &d.url, "--table", "t", "--jobs", "1",
    ])
    .arg(&f)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    // Truncate once the COPY is under way.
    wait_until_copying(&d);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("truncated while sluice read it"), "{err}");
    assert_eq!(d.count("t"), 0);
}

/// A stream's backend terminated mid-COPY with `--retries 0`: exit 5, the stream named, and
/// the message says that nothing was committed (and nothing is).
#[test]
fn a_terminated_stream_says_which_and_that_nothing_was_committed() {
    let d = db("faults_terminate");
    d.psql("CREATE TABLE t (id int, v text)");
    let line = "12345,some text that makes the row longer than it needs to be\n";
    let f = d.file("big.csv", line.repeat(3_000_000).as_bytes());
    let mut c = sluice_cmd();
    c.args([
        "load",
        "-q",
        "--target",
        &d.url,
        "--table",
        "t",
        "--jobs",
        "2",
        "--retries",
        "0",
    ])
    .arg(&f)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    wait_until_copying(&d);
    d.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{}' AND query LIKE 'COPY%' AND pid <> pg_backend_pid()",
        d.name
    ));
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("lost its connection"), "{err}");
    assert!(err.contains("nothing was committed"), "{err}");
    assert_eq!(d.count("t"), 0);
}

/// Each proxied connection: its port on the server's side, its frozen flag, and the socket
/// to the client.
type Conns = Arc<Mutex<Vec<(u16, Arc<AtomicBool>, TcpStream)>>>;

/// A TCP proxy to the test cluster that can cut one connection as a network partition does
/// when only the client's side notices (by its keepalives or `tcp_user_timeout`): the client
/// sees its connection end, while the server's side stays open and silent.
struct Proxy {
    port: u16,
    /// By the server-side port, which `pg_stat_activity` shows as `client_port`.
    conns: Conns,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let list = conns.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                let frozen = Arc::new(AtomicBool::new(false));
                let server_side = server.local_addr().unwrap().port();
                list.lock().unwrap().push((
                    server_side,
                    frozen.clone(),
                    client.try_clone().unwrap(),
                ));
                let (c2, s2, f2) = (
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    frozen.clone(),
                );
                std::thread::spawn(move || pump(client, server, frozen));
                std::thread::spawn(move || pump(s2, c2, f2));
            }
        });
        Proxy { port, conns }
    }

    /// Cuts the connection whose server-side port is `port`: nothing more moves either way,
    /// the client's side is closed, the server's is held open.
    fn partition(&self, port: u16) {
        let conns = self.conns.lock().unwrap();
        let (_, flag, client) = conns
            .iter()
            .find(|(p, _, _)| *p == port)
            .expect("no such connection");
        flag.store(true, Ordering::SeqCst);
        client.shutdown(std::net::Shutdown::Both).unwrap();
    }
}

/// Copies `from` to `to` until EOF; once the pair is cut, forwards and closes nothing more
/// (the sockets stay open until the test process ends).
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let read = from.read(&mut buf);
        if frozen.load(Ordering::SeqCst) {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        match read {
            Ok(n) if n > 0 => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            _ => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
        }
    }
}

/// A connection sluice loses while the server keeps its backend (a network partition that
/// only sluice's side has noticed: the server may keep the transaction open for hours). The
/// stream reconnects and redoes its chunks, and the ledger's chunk rows make the new
/// transaction wait to learn whether the old one committed: without help that wait lasts as
/// long as the partition. The watchdog ends the load's own former backend, which can never
/// commit, and the load finishes with every row once.
#[test]
fn a_stream_cut_off_by_a_partition_does_not_wait_on_its_former_self() {
    let d = db("faults_partition");
    d.psql("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let rows: String = (0..3_000_000)
        .map(|i| format!("{i},some text that makes the row longer than it needs to be\n"))
        .collect();
    let f = d.file("big.csv", rows.as_bytes());
    let proxy = Proxy::start(common::pg().port);
    let target = format!(
        "postgresql://sluice@127.0.0.1:{}/{}?sslmode=disable",
        proxy.port, d.name
    );
    let mut c = sluice_cmd();
    c.args(["load", "-q", "--target", &target, "--table", "t"])
        .args(["--jobs", "2"])
        .arg(&f);
    let c = std::thread::spawn(move || run_bounded(c, 120));
    // A stream that has written rows holds their keys in its open transaction: cut it off
    // while it copies. Its redone rows then wait on its former self, which the server keeps
    // running (the partition hides the client's going), unless sluice ends it.
    let mut port = String::new();
    common::wait_until("no stream wrote a row", 120, || {
        port = d.psql(&format!(
            "SELECT a.client_port FROM pg_stat_activity a \
             WHERE a.datname = '{}' AND a.query LIKE 'COPY%' AND a.state = 'active' \
             AND a.backend_xid IS NOT NULL ORDER BY a.pid LIMIT 1",
            d.name
        ));
        !port.trim().is_empty()
    });
    proxy.partition(port.trim().parse().unwrap());
    let out = c.join().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("lost its connection"), "{err}");
    assert!(
        err.contains("this load's own connection from before a reconnect")
            && err.contains("sluice ended it (pg_terminate_backend)"),
        "{err}"
    );
    assert_eq!(d.count("t"), 3_000_000);
    assert_eq!(d.psql("SELECT count(DISTINCT id) FROM t").trim(), "3000000");
}

/// The watchdog's own session stops answering (its backend frozen with SIGSTOP) while the
/// load waits on a lock held outside it: once the lock goes, the load finishes and exits 0
/// with every row, its end not waiting for the watch's unanswered sample.
#[test]
fn a_frozen_watchdog_session_does_not_hold_up_the_loads_end() {
    let d = db("faults_frozen_watch");
    d.psql("CREATE TABLE t (id int)");
    let body: String = (0..20_000).map(|i| format!("{i}\n")).collect();
    let f = d.file("a.csv", body.as_bytes());
    // A session outside the load holds the table for a few seconds, so that the load is still
    // running (its streams waiting) when its watch is frozen.
    let holder = d.open_session(
        "holder",
        "BEGIN; LOCK TABLE t IN SHARE MODE; SELECT pg_sleep(4); COMMIT;",
    );
    common::wait_until("the holder's lock", 60, || {
        d.psql(
            "SELECT count(*) FROM pg_locks WHERE relation = 't'::regclass AND mode = 'ShareLock' \
             AND granted",
        )
        .trim()
            == "1"
    });
    let mut c = sluice_cmd();
    c.args([
        "load", "-q", "--target", &d.url, "--table", "t", "--jobs", "2",
    ])
    .arg(&f)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let watch_pid = || {
        d.psql(&format!(
            "SELECT pid FROM pg_stat_activity WHERE datname = '{}' \
             AND query LIKE 'SELECT pid, wait_event_type%'",
            d.name
        ))
        .trim()
        .parse::<i32>()
        .ok()
    };
    common::wait_until("the watch's first sample", 60, || watch_pid().is_some());
    let pid = watch_pid().unwrap();
    let _resume = common::Stopped::stop(pid);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the load ended before its watch was frozen: the test saw nothing"
    );
    let out = common::finish(child, 60);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(d.count("t"), 20_000);
    holder.end();
}
