//! `sluice bench` at scale 0.01: results and charts are produced, every run is verified, and a
//! deliberately lost chunk (a test hook) fails the run loudly.

mod common;

use common::{db, sluice_cmd, stderr};

fn dir(name: &str) -> std::path::PathBuf {
    let d = common::pg().root.join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn bench_sweep_writes_results_and_charts() {
    let out = dir("bench-out");
    let data = dir("bench-data");
    let o = sluice_cmd()
        .args([
            "bench", "--scale", "0.01", "--parts", "2", "--jobs", "1,2", "--repeat", "2",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(md.contains("| jobs | median s |"), "{md}");
    assert!(md.contains("best: --jobs"), "{md}");
    assert_eq!(std::fs::read_to_string(out.join("results.md")).unwrap(), md);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "2 settings x 2 repeats");
    for run in runs {
        let jobs = run["jobs"].as_u64().unwrap() as usize;
        let streams = run["streams"].as_array().unwrap();
        assert_eq!(streams.len(), jobs, "every stream reported");
        assert_eq!(run["rows"].as_u64(), Some(86_805), "SF0.01 has 86,805 rows");
        for s in streams {
            let chunk_rows: u64 = s["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["rows"].as_u64().unwrap())
                .sum();
            assert_eq!(s["rows"].as_u64().unwrap(), chunk_rows);
        }
    }
    let settings = json["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 2);
    for s in settings {
        assert!(s["min_seconds"].as_f64() <= s["median_seconds"].as_f64());
        assert!(s["median_seconds"].as_f64() <= s["max_seconds"].as_f64());
    }
    assert!(json["server_settings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|kv| kv[0] == "shared_buffers" && kv[1] == "1GB"));
    for chart in ["throughput.svg", "timeline.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
        assert!(svg.contains("<rect"), "{chart} draws something");
    }
    let timeline = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    assert!(timeline.contains("lineitem"), "the legend names the tables");
    // Fresh clusters are removed after each run.
    let left = std::fs::read_dir(out.join("clusters")).map_or(0, |d| d.count());
    assert_eq!(left, 0);
}

#[test]
fn a_target_needs_yes() {
    let d = db("bench_target");
    let out = dir("bench-target");
    let data = dir("bench-target-data");
    let base = || {
        let mut c = sluice_cmd();
        c.args([
            "bench", "-q", "--scale", "0.01", "--parts", "1", "--jobs", "2", "--repeat", "1",
        ])
        .args(["--target", &d.url])
        .arg("--out")
        .arg(&out)
        .arg("--data")
        .arg(&data);
        c
    };
    let o = base().output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("add --yes"), "{}", stderr(&o));
    let o = base().arg("--yes").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(d.count("lineitem"), 60_175);
}

/// The record's configuration: minimal WAL, the partitioned layout, the stage strategy; every
/// run still verified.
#[test]
fn minimal_server_config_runs_without_wal_senders_and_stages_partitions() {
    let out = dir("bench-minimal");
    let data = dir("bench-minimal-data");
    let o = sluice_cmd()
        .args([
            "bench", "-q", "--scale", "0.01", "--parts", "2", "--jobs", "2", "--repeat", "1",
        ])
        .args(["--layout", "partitioned", "--strategy", "stage"])
        .args(["--server-config", "minimal", "--out"])
        .arg(&out)
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let settings = json["server_settings"].as_array().unwrap();
    let has = |k: &str, v: &str| settings.iter().any(|kv| kv[0] == k && kv[1] == v);
    assert!(has("wal_level", "minimal"), "{settings:?}");
    assert!(has("max_wal_senders", "0"), "{settings:?}");
    assert_eq!(json["server_config"], "minimal");
    assert_eq!(json["layout"], "partitioned");
    // nation and region are plain tables and load directly.
    assert_eq!(json["strategy"], "stage+direct");
    assert_eq!(json["runs"][0]["rows"].as_u64(), Some(86_805));
}
