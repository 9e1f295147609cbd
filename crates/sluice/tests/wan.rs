//! sluice across real network paths made by the delay line (bench/wan/delayline), to one
//! private cluster listening on each path's far end:
//! - a long fat path: each packet held 100 ms each way (200 ms round trip) at 200 Mbit/s, a
//!   bandwidth-delay product of 5 MB, past the 4 MiB a stream's buffer autotunes to on a stock
//!   kernel;
//! - a 100 ms round trip with no rate limit;
//! - a tight link: 1.5 MB/s with a 2 ms round trip, which a few streams fill.
//!
//! Needs root, TUN devices and network namespaces; where they are missing each test says so
//! and skips.

mod common;

use delayline::line::Config;
use delayline::path::{self, Path};
use sluice_postgres::cluster::Cluster;
use std::io::Write;
use std::process::Output;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The paths and the server at their far ends, shared by this binary's tests.
struct Far {
    paths: Vec<Path>,
    cluster: Cluster,
    root: std::path::PathBuf,
    port: u16,
}

/// The paths, by their index in [`Far::paths`].
#[derive(Clone, Copy)]
enum Via {
    /// 200 ms, 200 Mbit/s.
    Long = 0,
    /// 100 ms, no rate limit.
    Mid = 1,
    /// 2 ms, 1.5 MB/s.
    Tight = 2,
}

impl Far {
    /// The cluster's own database, reached across a path.
    fn url(&self, via: Via) -> String {
        let server = self.paths[via as usize].server;
        self.cluster.url().unwrap().replace(
            &format!("127.0.0.1:{}", self.port),
            &format!("{server}:{}", self.port),
        )
    }
}

static FAR: OnceLock<Mutex<Option<Far>>> = OnceLock::new();

extern "C" fn tear_down() {
    if let Some(far) = FAR.get().and_then(|m| m.lock().ok()?.take()) {
        let _ = far.cluster.destroy();
        let _ = std::fs::remove_dir_all(&far.root);
        drop(far.paths);
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
        let configs = [
            Config {
                rate: Some(25_000_000),
                ..Config::rtt(Duration::from_millis(200))
            },
            Config::rtt(Duration::from_millis(100)),
            Config {
                rate: Some(1_500_000),
                ..Config::rtt(Duration::from_millis(2))
            },
        ];
        let paths: Vec<Path> = configs
            .into_iter()
            .map(|c| Path::up(c, 1500).expect("a delayed path"))
            .collect();
        let root = std::env::temp_dir().join(format!("sluice-wan-{}", std::process::id()));
        let servers: Vec<String> = paths.iter().map(|p| p.server.to_string()).collect();
        let listen = format!("127.0.0.1,{}", servers.join(","));
        let clients: Vec<String> = paths.iter().map(|p| format!("{}/32", p.client)).collect();
        let (cluster, port) =
            common::bed_server(&root, &[("listen_addresses", listen.as_str())], &clients);
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(tear_down) };
        Mutex::new(Some(Far {
            paths,
            cluster,
            root,
            port,
        }))
    })
}

/// Runs sluice on a path's client side, to the server at its far end.
fn sluice_via(via: Via, args: &[&str]) -> Output {
    sluice_as(via, |url| url, args)
}

/// Runs sluice on a path's client side, with the target's URL as `target` makes it.
fn sluice_as(via: Via, target: impl Fn(String) -> String, args: &[&str]) -> Output {
    let guard = far().lock().unwrap();
    let far = guard.as_ref().expect("the paths are up");
    far.paths[via as usize]
        .client_command(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--target", &target(far.url(via))])
        .output()
        .unwrap()
}

/// Runs sluice on the long fat path's client side.
fn sluice_across(args: &[&str]) -> (Output, String) {
    let out = sluice_via(Via::Long, args);
    let guard = far().lock().unwrap();
    (
        out,
        guard.as_ref().expect("the paths are up").url(Via::Long),
    )
}

/// Runs sluice on this side, to the server on 127.0.0.1.
fn sluice_near(args: &[&str]) -> Output {
    let url = {
        let guard = far().lock().unwrap();
        guard
            .as_ref()
            .expect("the paths are up")
            .cluster
            .url()
            .unwrap()
    };
    common::sluice_cmd()
        .args(args)
        .args(["--target", &url])
        .output()
        .unwrap()
}

/// psql on the far server, from this side (127.0.0.1).
fn psql(sql: &str) -> String {
    let guard = far().lock().unwrap();
    let far = guard.as_ref().expect("the paths are up");
    common::psql_at(&far.cluster, &far.cluster.url().unwrap(), sql)
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

/// A scratch directory for one test's files.
fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-wan-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A two-column file of `rows` rows of about 25 bytes.
fn narrow_file(dir: &std::path::Path, rows: usize) -> String {
    let file = dir.join("narrow.tsv");
    let text: String = (0..rows)
        .map(|i| format!("{i}\trow {i} of the file\n"))
        .collect();
    std::fs::write(&file, text).unwrap();
    file.to_string_lossy().into_owned()
}

fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts a load succeeded, and returns its stderr.
fn succeeded(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_load_across_a_100_ms_round_trip_equals_the_same_load_on_loopback() {
    if skipped("a_load_across_a_100_ms_round_trip_equals_the_same_load_on_loopback") {
        return;
    }
    let dir = scratch("mid");
    let gen = common::sluice_cmd()
        .args(["gen", "tpch", "-q", "--scale", "0.1", "--parts", "2"])
        .args(["--tables", "lineitem", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    succeeded(&gen);
    let mut files: Vec<String> = std::fs::read_dir(dir.join("lineitem"))
        .unwrap()
        .map(|e| e.unwrap().path().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let ddl = common::tpch_ddl(&[]);
    psql(&format!("CREATE SCHEMA far; SET search_path = far; {ddl}"));
    psql(&format!(
        "CREATE SCHEMA near; SET search_path = near; {ddl}"
    ));
    let load = |table: &'static str| -> Vec<&str> {
        let mut args = vec!["load", "--table", table, "--jobs", "2"];
        args.extend(files.iter().map(String::as_str));
        args
    };
    succeeded(&sluice_via(Via::Mid, &load("far.lineitem")));
    succeeded(&sluice_near(&load("near.lineitem")));
    let rows: u64 = psql("SELECT count(*) FROM near.lineitem").parse().unwrap();
    assert!(rows > 500_000, "{rows}");
    assert_eq!(psql("SELECT count(*) FROM far.lineitem"), rows.to_string());
    for (a, b) in [("far", "near"), ("near", "far")] {
        let only = psql(&format!(
            "SELECT count(*) FROM (SELECT * FROM {a}.lineitem EXCEPT ALL \
             SELECT * FROM {b}.lineitem) d"
        ));
        assert_eq!(only, "0", "rows in {a}.lineitem and not in {b}.lineitem");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_stream_with_a_small_buffer_across_a_long_path_is_window_bound() {
    if skipped("one_stream_with_a_small_buffer_across_a_long_path_is_window_bound") {
        return;
    }
    let dir = scratch("window");
    let file = narrow_file(&dir, 40_000);
    let json = dir.join("r.json");
    psql("CREATE TABLE windowed (a int, b text)");
    let out = sluice_via(
        Via::Long,
        &[
            "load",
            "--table",
            "windowed",
            "--jobs",
            "1",
            "--socket-buffer",
            "64k",
            "--report-json",
            json.to_str().unwrap(),
            &file,
        ],
    );
    succeeded(&out);
    assert_eq!(psql("SELECT count(*) FROM windowed"), "40000");
    let r = report(&json);
    let v = &r["verdict"];
    let _ = writeln!(std::io::stderr(), "{v:#}");
    assert_eq!(v["kind"], "window-bound", "{v:#}");
    let because = v["because"].as_str().unwrap();
    assert!(because.contains("its own send buffer"), "{because}");
    assert!(
        v["figures"]["tcp_sndbuf_limited"].as_f64().unwrap() >= 0.5,
        "{v:#}"
    );
    assert!(v["next_step"].as_str().unwrap().contains("--socket-buffer"));
    // The stream's own figures, as the HTML report draws them.
    let t = &r["streams"][0]["transport"];
    let rtt = t["rtt_us"].as_u64().unwrap();
    assert!((195_000..300_000).contains(&rtt), "{t:#}");
    assert_eq!(t["send_buffer"].as_u64(), Some(64 << 10), "{t:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn several_streams_on_a_tight_link_are_link_bound() {
    if skipped("several_streams_on_a_tight_link_are_link_bound") {
        return;
    }
    let dir = scratch("tight");
    let file = narrow_file(&dir, 320_000);
    let json = dir.join("r.json");
    psql("CREATE TABLE tight (a int, b text)");
    let out = sluice_via(
        Via::Tight,
        &[
            "load",
            "--table",
            "tight",
            "--jobs",
            "3",
            "--chunk-size",
            "1M",
            "--report-json",
            json.to_str().unwrap(),
            &file,
        ],
    );
    succeeded(&out);
    assert_eq!(psql("SELECT count(*) FROM tight"), "320000");
    let r = report(&json);
    let v = &r["verdict"];
    let _ = writeln!(std::io::stderr(), "{v:#}");
    assert_eq!(v["kind"], "link-bound", "{v:#}");
    let because = v["because"].as_str().unwrap();
    assert!(because.contains("not held by a window"), "{because}");
    assert!(
        v["figures"]["tcp_sndbuf_limited"].as_f64().unwrap() < 0.5,
        "{v:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn small_tables_across_a_long_path_are_round_trip_bound() {
    if skipped("small_tables_across_a_long_path_are_round_trip_bound") {
        return;
    }
    // Eight tables of 3 kB each across 200 ms: each stream's time is its answers in turn
    // (each table's load, the commit), not the link's rate (it carries 25 MB/s).
    let dir = scratch("answers");
    let mut files = Vec::new();
    for t in 1..=8 {
        psql(&format!("CREATE TABLE answers_{t} (a int, b text)"));
        let file = dir.join(format!("answers_{t}.tsv"));
        let text: String = (0..200).map(|i| format!("{i}\trow {i} of {t}\n")).collect();
        std::fs::write(&file, text).unwrap();
        files.push(file.to_string_lossy().into_owned());
    }
    let json = dir.join("r.json");
    let mut args = vec![
        "load",
        "--jobs",
        "2",
        "--report-json",
        json.to_str().unwrap(),
    ];
    args.extend(files.iter().map(String::as_str));
    succeeded(&sluice_via(Via::Long, &args));
    for t in 1..=8 {
        assert_eq!(psql(&format!("SELECT count(*) FROM answers_{t}")), "200");
    }
    let v = &report(&json)["verdict"];
    let _ = writeln!(std::io::stderr(), "{v:#}");
    assert_eq!(v["kind"], "round-trip-bound", "{v:#}");
    assert!(
        v["figures"]["round_trip_share"].as_f64().unwrap() >= 0.5,
        "{v:#}"
    );
    let because = v["because"].as_str().unwrap();
    assert!(because.contains("the link was not full"), "{because}");
    assert!(
        !v["next_step"].as_str().unwrap().contains("--wire"),
        "{v:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// psql `\copy` of a text-format file into `table` on the far server, from this side: the
/// reference load.
fn psql_copy(table: &str, file: &str) {
    psql(&format!("\\copy {table} FROM '{file}' (FORMAT text)"));
}

/// Asserts two tables hold the same rows (EXCEPT ALL both ways).
fn same_rows(a: &str, b: &str) {
    for (x, y) in [(a, b), (b, a)] {
        let only = psql(&format!(
            "SELECT count(*) FROM (SELECT * FROM {x} EXCEPT ALL SELECT * FROM {y}) d"
        ));
        assert_eq!(only, "0", "rows in {x} and not in {y}");
    }
}

/// Types whose text is smaller than their binary form, with negative numbers, non-ASCII
/// text and NULLs: TPC-H's mix and more.
const COMPACT: &str = "id int8, small int2, qty int4, amount numeric(12,2), ratio float8, \
                       f4 float4, flag bool, day date, at time, name text, code varchar(20), \
                       cc char(3), raw bytea";

fn compact_row(i: usize) -> String {
    let names = ["Zürich", "東京", "São Paulo", "Oslo"];
    let name = match i % 17 {
        0 => "\\N".to_string(),
        _ => names[i % 4].to_string(),
    };
    format!(
        "{i}\t{}\t{}\t{}.{:02}\t{}\t{}\t{}\t2024-{:02}-{:02}\t{:02}:{:02}:{:02}\t{name}\tc{}\t{}\t\\\\x{:02x}\n",
        i % 200,
        -((i % 50) as i64),
        (i % 10_000) as i64 - 5_000,
        i % 100,
        i as f64 * 0.25,
        (i % 8) as f32 * -1.5,
        if i.is_multiple_of(3) { "t" } else { "f" },
        i % 12 + 1,
        i % 28 + 1,
        i % 24,
        i % 60,
        (i * 7) % 60,
        i % 1000,
        ["abc", "de", "\\N"][i % 3],
        i % 256,
    )
}

/// Types whose binary form is the smaller: uuids, timestamps with fractions, big keys.
const WIDE: &str = "id int8, u uuid, at timestamp, atz timestamptz, n int2";

fn wide_row(i: usize) -> String {
    format!(
        "{}\t{:08x}-1234-4abc-8def-{:012x}\t2024-03-{:02} 12:34:56.{:06}\t2024-03-{:02} \
         01:02:03.{:06}+02\t{}\n",
        9_000_000_000_000u64 + i as u64,
        i,
        i * 7919,
        i % 28 + 1,
        i % 1_000_000,
        i % 28 + 1,
        (i * 13) % 1_000_000,
        i % 300,
    )
}

/// Loads `rows` rows of `row` into `table` (of `columns`) with `--wire auto` through `run`,
/// and into its twin with psql; both must hold the same rows. Returns the report.
fn auto_against_psql(
    dir: &std::path::Path,
    table: &str,
    columns: &str,
    rows: usize,
    row: fn(usize) -> String,
    run: impl Fn(&[&str]) -> Output,
) -> serde_json::Value {
    let file = dir.join(format!("{table}.txt"));
    std::fs::write(&file, (0..rows).map(row).collect::<String>()).unwrap();
    let file = file.to_string_lossy().into_owned();
    psql(&format!(
        "CREATE TABLE {table} ({columns}); CREATE TABLE {table}_psql ({columns})"
    ));
    let json = dir.join(format!("{table}.json"));
    let out = run(&[
        "load",
        "--table",
        table,
        "--format",
        "text",
        "--jobs",
        "2",
        "--report-json",
        json.to_str().unwrap(),
        &file,
    ]);
    succeeded(&out);
    psql_copy(&format!("{table}_psql"), &file);
    assert_eq!(
        psql(&format!("SELECT count(*) FROM {table}")),
        rows.to_string()
    );
    same_rows(table, &format!("{table}_psql"));
    report(&json)
}

#[test]
fn wire_auto_sends_the_smaller_encoding_on_a_tight_link_and_binary_on_loopback() {
    if skipped("wire_auto_sends_the_smaller_encoding_on_a_tight_link_and_binary_on_loopback") {
        return;
    }
    let dir = scratch("auto");
    // A tight link: text is the smaller for these types, and the link is the limit.
    let r = auto_against_psql(&dir, "compact_far", COMPACT, 110_000, compact_row, |a| {
        sluice_via(Via::Tight, a)
    });
    let why = r["wire_choice"].as_str().unwrap();
    let _ = writeln!(std::io::stderr(), "--wire auto: {why}");
    assert!(why.starts_with("text: "), "{why}");
    assert!(why.contains("the link is the limit"), "{why}");
    assert_eq!(r["tables"][0]["copy_format"], "text", "{why}");
    // The same link, types whose binary form is the smaller: binary, without measuring.
    let r = auto_against_psql(&dir, "wide_far", WIDE, 85_000, wide_row, |a| {
        sluice_via(Via::Tight, a)
    });
    let why = r["wire_choice"].as_str().unwrap();
    let _ = writeln!(std::io::stderr(), "--wire auto: {why}");
    assert!(why.contains("text is not clearly smaller"), "{why}");
    assert_eq!(r["tables"][0]["copy_format"], "binary", "{why}");
    // On loopback, the compact types go binary: the server is near.
    let r = auto_against_psql(
        &dir,
        "compact_near",
        COMPACT,
        110_000,
        compact_row,
        sluice_near,
    );
    let why = r["wire_choice"].as_str().unwrap();
    let _ = writeln!(std::io::stderr(), "--wire auto: {why}");
    assert!(why.contains("the server is on this machine"), "{why}");
    assert_eq!(r["tables"][0]["copy_format"], "binary", "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wire_auto_stays_binary_and_says_why_when_the_path_cannot_be_measured() {
    if skipped("wire_auto_stays_binary_and_says_why_when_the_path_cannot_be_measured") {
        return;
    }
    let dir = scratch("meek");
    // A role that may insert into its table and create nothing else, not even a temporary
    // table: the measurement's sink cannot be made.
    psql(&format!(
        "CREATE ROLE meek LOGIN; CREATE TABLE meek_t ({COMPACT}); \
         CREATE TABLE meek_t_psql ({COMPACT}); GRANT SELECT, INSERT ON meek_t TO meek; \
         DO $$ BEGIN EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', \
         current_database()); END $$"
    ));
    let file = dir.join("meek.txt");
    std::fs::write(&file, (0..110_000).map(compact_row).collect::<String>()).unwrap();
    let json = dir.join("meek.json");
    let out = sluice_as(
        Via::Tight,
        |url| url.replace("sluice@", "meek@"),
        &[
            "load",
            "--table",
            "meek_t",
            "--format",
            "text",
            "--report-json",
            json.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    psql(
        "DO $$ BEGIN EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', \
         current_database()); END $$",
    );
    succeeded(&out);
    let r = report(&json);
    let why = r["wire_choice"].as_str().unwrap();
    let _ = writeln!(std::io::stderr(), "--wire auto: {why}");
    assert!(
        why.starts_with("binary: the path could not be measured"),
        "{why}"
    );
    assert_eq!(r["tables"][0]["copy_format"], "binary", "{why}");
    psql_copy("meek_t_psql", file.to_str().unwrap());
    same_rows("meek_t", "meek_t_psql");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A load whose text would save fewer bytes than a fast path carries in the measurement's
/// time: the measurement ends once the path has carried them, and the load goes binary,
/// saying so (a small load across a long path does not wait out a 3 s measurement).
#[test]
fn wire_auto_stops_measuring_a_fast_path_once_it_carried_what_text_would_save() {
    if skipped("wire_auto_stops_measuring_a_fast_path_once_it_carried_what_text_would_save") {
        return;
    }
    let dir = scratch("budget");
    // 100 ms and no rate limit: two streams carry binary's few extra MB within a second.
    let r = auto_against_psql(&dir, "compact_mid", COMPACT, 110_000, compact_row, |a| {
        sluice_via(Via::Mid, a)
    });
    let why = r["wire_choice"].as_str().unwrap();
    let _ = writeln!(std::io::stderr(), "--wire auto: {why}");
    assert!(
        why.starts_with("binary: on ") && why.contains(" the path carried the "),
        "{why}"
    );
    assert!(
        why.contains("that text would save in less than the measurement's 3.0 s"),
        "{why}"
    );
    assert_eq!(r["tables"][0]["copy_format"], "binary", "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Across a long path the sessions of the readers' gates open while the streams load, not in
/// series with the commit: with two streams committed back to back (this server prepares no
/// transaction), one per table. Polled in the server, they are there, idle after their
/// opening's last statement, while a COPY runs; and the commit opens no more (every backend the
/// load had is one of its own eight: its connection, the watch, two streams, four gates). The
/// load is all there, and equal to psql's.
/// The application name the readers' gates test's load gives its sessions (the target's URL
/// names it, as libpq's would).
const GATES_APP: &str = "sluice_gates_test";

#[test]
fn across_a_long_path_the_readers_gates_sessions_open_while_the_streams_load() {
    if skipped("across_a_long_path_the_readers_gates_sessions_open_while_the_streams_load") {
        return;
    }
    let dir = scratch("gates");
    let tables = ["gate_a", "gate_b", "gate_c", "gate_d"];
    let mut files = Vec::new();
    for t in tables {
        psql(&format!("CREATE TABLE {t} ({COMPACT})"));
        let file = dir.join(format!("{t}.txt"));
        std::fs::write(&file, (0..30_000).map(compact_row).collect::<String>()).unwrap();
        files.push(file.to_string_lossy().into_owned());
    }
    let (mut load, local, client, bindir) = {
        let guard = far().lock().unwrap();
        let far = guard.as_ref().expect("the paths are up");
        let path = &far.paths[Via::Mid as usize];
        let mut c = path.client_command(env!("CARGO_BIN_EXE_sluice"));
        c.args([
            "load", "-q", "--format", "text", "--jobs", "2", "--wire", "binary",
        ])
        .args(["--prepare", "off"])
        .args(&files)
        .args([
            "--target",
            &format!("{}&application_name={GATES_APP}", far.url(Via::Mid)),
        ]);
        let bindir = far.cluster.bindir.clone();
        (
            c,
            far.cluster.url().unwrap(),
            path.client.to_string(),
            bindir,
        )
    };
    let mut child = load
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Copies running, sessions idle after the identity question that opening one asks last,
    // and every backend of this load (its application name: another test's load may cross the
    // same path, from the same address, at the same time).
    let poll = format!(
        "SELECT count(*) FILTER (WHERE state = 'active' AND query LIKE 'COPY %') || ' ' || \
         count(*) FILTER (WHERE state = 'idle' AND (query LIKE '%pg_control_system()%' \
         OR query LIKE '%pg_backend_pid()%')) || ' ' || coalesce(string_agg(pid::text, ','), '') \
         FROM pg_stat_activity WHERE client_addr = '{client}' \
         AND application_name = '{GATES_APP}'"
    );
    let started = std::time::Instant::now();
    let (mut seen, mut polls) = (0u32, Vec::new());
    let mut backends = std::collections::BTreeSet::new();
    // Polled until the load ends; past 120 s `common::finish` kills it and fails the test.
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(120) {
        let o = std::process::Command::new(bindir.join("psql"))
            .args(["-X", "-At", &local, "-c", &poll])
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let mut n = line.split(' ');
        let mut count = || n.next().and_then(|x| x.parse::<u32>().ok()).unwrap_or(0);
        let (copies, idle) = (count(), count());
        if copies > 0 {
            seen = seen.max(idle);
        }
        backends.extend(
            line.split(' ')
                .nth(2)
                .unwrap_or("")
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string),
        );
        polls.push(line);
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = common::finish(child, 1);
    assert!(
        backends.len() <= 8,
        "the commit opened more connections: {backends:?}; polls: {polls:?}"
    );
    succeeded(&out);
    assert!(
        seen >= 4,
        "four gates' sessions open while a COPY ran; polls (copies, idle sessions): {polls:?}"
    );
    for (t, f) in tables.iter().zip(&files) {
        psql(&format!("CREATE TABLE {t}_psql ({COMPACT})"));
        psql_copy(&format!("{t}_psql"), f);
        same_rows(t, &format!("{t}_psql"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
