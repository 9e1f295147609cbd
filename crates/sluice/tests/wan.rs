//! sluice across a long fat path: the delay line (bench/wan/delayline) holds each packet
//! 100 ms each way (200 ms round trip) and limits the rate to 200 Mbit/s, a bandwidth-delay
//! product of 5 MB, past the 4 MiB a stream's buffer autotunes to on a stock kernel. The
//! server is a private cluster listening on the line's far end. Needs root, TUN devices and
//! network namespaces; where they are missing each test says so and skips.

use delayline::line::Config;
use delayline::path::{self, Path};
use sluice_postgres::cluster::Cluster;
use std::io::Write;
use std::process::Output;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The path and the server at its far end, shared by this binary's tests.
struct Far {
    path: Path,
    cluster: Cluster,
    root: std::path::PathBuf,
    url: String,
}

static FAR: OnceLock<Mutex<Option<Far>>> = OnceLock::new();

extern "C" fn tear_down() {
    if let Some(far) = FAR.get().and_then(|m| m.lock().ok()?.take()) {
        let _ = far.cluster.destroy();
        let _ = std::fs::remove_dir_all(&far.root);
        drop(far.path);
    }
}

/// Says that a test skips, and why, on the real stderr (the harness captures eprintln!).
fn skipped(test: &str) -> bool {
    match path::unavailable() {
        Some(why) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

fn far() -> &'static Mutex<Option<Far>> {
    FAR.get_or_init(|| {
        let config = Config {
            rate: Some(25_000_000),
            ..Config::rtt(Duration::from_millis(200))
        };
        let path = Path::up(config, 1500).expect("the delayed path");
        let root = std::env::temp_dir().join(format!("sluice-wan-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let cluster = Cluster::new(root.join("pg")).expect("PostgreSQL server binaries");
        let listen = format!("127.0.0.1,{}", path.server);
        let settings: Vec<(String, String)> = [
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("listen_addresses", listen.as_str()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        cluster.init(&settings).expect("initdb");
        let hba = root.join("pg/pg_hba.conf");
        let mut text = std::fs::read_to_string(&hba).unwrap();
        text.push_str(&format!("host all all {}/32 trust\n", path.client));
        std::fs::write(&hba, text).unwrap();
        let port = cluster.start().expect("start the cluster");
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(tear_down) };
        // The cluster's own database, reached across the path.
        let url = cluster.url().unwrap().replace(
            &format!("127.0.0.1:{port}"),
            &format!("{}:{port}", path.server),
        );
        Mutex::new(Some(Far {
            path,
            cluster,
            root,
            url,
        }))
    })
}

/// Runs sluice on the path's client side.
fn sluice_across(args: &[&str]) -> (Output, String) {
    let guard = far().lock().unwrap();
    let far = guard.as_ref().expect("the path is up");
    let out = far
        .path
        .client_command(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--target", &far.url])
        .output()
        .unwrap();
    (out, far.url.clone())
}

/// psql on the far server, from this side (127.0.0.1).
fn psql(sql: &str) -> String {
    let guard = far().lock().unwrap();
    let far = guard.as_ref().expect("the path is up");
    let out = std::process::Command::new(far.cluster.bindir.join("psql"))
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1"])
        .arg(far.cluster.url().unwrap())
        .args(["-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_probe_sizes_a_path_whose_product_exceeds_the_default_buffer() {
    if skipped("the_probe_sizes_a_path_whose_product_exceeds_the_default_buffer") {
        return;
    }
    let (out, _) = sluice_across(&["probe", "--jobs", "1,4", "--upload-only", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let _ = writeln!(std::io::stderr(), "{json:#}");
    let rtt = json["round_trip_ms"].as_f64().unwrap();
    assert!((200.0..210.0).contains(&rtt), "round trip {rtt} ms");
    let bdp = json["path_bdp_bytes"].as_u64().unwrap();
    let autotuned = json["kernel_limits"]["tcp_wmem"][2].as_u64().unwrap();
    // The path is what it was made to be: twice its product is past the default maximum.
    assert!(2 * bdp > autotuned, "{json:#}");
    let jobs = json["recommended_jobs"].as_u64().unwrap();
    let buffer = json["recommended_socket_buffer"].as_u64();
    let about_twice_bdp = buffer.is_some_and(|b| (b as f64 / (2 * bdp) as f64 - 1.0).abs() < 0.1);
    assert!(
        jobs > 1 || about_twice_bdp,
        "neither more streams nor a buffer of twice the BDP: {json:#}"
    );
    let reason = json["socket_buffer_reason"].as_str().unwrap();
    assert!(reason.contains("twice the BDP"), "{reason}");
}

#[test]
fn a_load_across_the_path_sizes_its_sockets_and_loads_every_row() {
    if skipped("a_load_across_the_path_sizes_its_sockets_and_loads_every_row") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sluice-wan-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("far.tsv");
    let text: String = (0..50_000).map(|i| format!("{i}\trow {i}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let file = file.to_string_lossy().into_owned();
    // One load (each costs many round trips of 200 ms): `auto`, which measures the round trip
    // and, on a kernel whose SO_SNDBUF ceiling is above autotuning's, sets the buffer.
    psql("CREATE TABLE far_auto (a int, b text)");
    let (out, _) = sluice_across(&[
        "load",
        "--table",
        "far_auto",
        "--jobs",
        "2",
        "--socket-buffer",
        "auto",
        &file,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // A buffer set is said, with the round trip it was sized from; autotuning left alone (a
    // kernel whose SO_SNDBUF ceiling is not above autotuning's) is not.
    assert!(
        stderr.contains("socket buffer: ") == stderr.contains("round trip 20"),
        "{stderr}"
    );
    assert_eq!(psql("SELECT count(*) FROM far_auto"), "50000");
    assert_eq!(
        psql("SELECT count(*) FROM far_auto WHERE b = 'row ' || a"),
        "50000"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
