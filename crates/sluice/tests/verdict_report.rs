//! The bottleneck verdict. Each kind that can be forced on one machine is forced
//! with conditions about ten times apart, so that noise cannot flip it: a slow pipe
//! (client-bound), a trigger that sleeps per batch (server-bound), many one-row files each
//! loaded on its own (round trips), one big uncut compressed file beside small ones (a long
//! tail). Real PostgreSQL; nothing here is timed.

mod common;

use common::{db, run_bounded, sluice_cmd, stderr, Db};
use std::io::Write;
use std::process::Stdio;

/// The JSON report of a load, after checking that it succeeded.
fn report(d: &Db, out: &std::process::Output, path: &std::path::Path) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    let _ = d;
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_slow_pipe_is_client_bound() {
    let d = db("verdict_pipe");
    d.psql("CREATE TABLE t (a int, s text)");
    let json = d.dir.join("pipe.json");
    let mut child = sluice_cmd()
        .args([
            "load", "-q", "--table", "t", "--format", "csv", "--target", &d.url,
        ])
        .arg("--report-json")
        .arg(&json)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // 40 batches of 50 rows, 100 ms apart: about 4 s in which sluice mostly waits.
    for batch in 0..40 {
        let rows: String = (0..50)
            .map(|i| format!("{},row {i}\n", batch * 50 + i))
            .collect();
        stdin.write_all(rows.as_bytes()).unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let r = report(&d, &out, &json);
    assert_eq!(d.count("t"), 2000);
    let v = &r["verdict"];
    assert_eq!(v["kind"], "client-bound", "{v}");
    assert!(
        v["because"]
            .as_str()
            .unwrap()
            .contains("waiting for standard input"),
        "{v}"
    );
    let waiting = v["figures"]["server_waiting_for_client"].as_f64().unwrap();
    assert!(waiting > 0.8, "the server waited for sluice {waiting}: {v}");
    assert!(v["figures"]["stream_read"].as_f64().unwrap() > 0.8, "{v}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verdict: client-bound:"), "{stdout}");
    assert!(
        r["server_waits"]["samples"].as_u64().unwrap() >= 10,
        "{}",
        r["server_waits"]
    );
}

/// A trigger that sleeps 20 ms every `every` rows.
fn sleepy_trigger(d: &Db, table: &str, every: u32) {
    d.psql(&format!(
        "CREATE FUNCTION {table}_slow() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.a % {every} = 0 THEN PERFORM pg_sleep(0.02); END IF; RETURN NEW; END $$; \
         CREATE TRIGGER {table}_slow BEFORE INSERT ON {table} \
         FOR EACH ROW EXECUTE FUNCTION {table}_slow()"
    ));
}

#[test]
fn a_trigger_that_sleeps_is_server_bound() {
    let d = db("verdict_trigger");
    d.psql("CREATE TABLE t (a int, s text)");
    sleepy_trigger(&d, "t", 200);
    // 30,000 rows: 150 sleeps of 20 ms, 3 s of server time against well under 0.3 s of
    // conversion.
    let rows: String = (0..30_000).map(|i| format!("{i},row {i}\n")).collect();
    let f = d.file("t.csv", rows.as_bytes());
    let json = d.dir.join("trigger.json");
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--jobs",
        "1",
        "--report-json",
        json.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    let r = report(&d, &out, &json);
    assert_eq!(d.count("t"), 30_000);
    let v = &r["verdict"];
    assert_eq!(v["kind"], "server-bound", "{v}");
    let because = v["because"].as_str().unwrap();
    assert!(because.contains("PgSleep"), "{v}");
    assert!(because.contains("more client speed would not help"), "{v}");
    assert!(
        v["figures"]["server_waiting_for_client"].as_f64().unwrap() < 0.2,
        "{v}"
    );
}

#[test]
fn many_files_each_loaded_on_its_own_are_round_trip_bound() {
    let d = db("verdict_trips");
    d.psql("CREATE TABLE t (a int, s text)");
    // 3,000 files of one row, under --max-errors: each file is a load of its own under a
    // savepoint (four waits on the server), so the streams wait on the server ten times as
    // long as they convert.
    let files: Vec<String> = (0..3000)
        .map(|i| {
            let f = d.file(&format!("t{i:04}.csv"), format!("{i},row {i}\n").as_bytes());
            f.to_str().unwrap().to_string()
        })
        .collect();
    let json = d.dir.join("trips.json");
    let mut args = vec![
        "load",
        "-q",
        "--table",
        "t",
        "--jobs",
        "2",
        "--max-errors",
        "10",
        "--report-json",
        json.to_str().unwrap(),
    ];
    args.extend(files.iter().map(|f| f.as_str()));
    let out = d.sluice(&args);
    let r = report(&d, &out, &json);
    assert_eq!(d.count("t"), 3000);
    let v = &r["verdict"];
    assert_eq!(v["kind"], "round-trip-bound", "{v}");
    assert!(
        v["figures"]["round_trips_per_chunk"].as_f64().unwrap() >= 2.0,
        "{v}"
    );
    assert_eq!(v["figures"]["chunks"].as_f64().unwrap(), 3000.0, "{v}");
    assert!(
        v["next_step"]
            .as_str()
            .unwrap()
            .contains("fewer, larger files"),
        "{v}"
    );
}

#[test]
fn one_big_uncut_compressed_file_is_a_long_tail() {
    let d = db("verdict_tail");
    d.psql("CREATE TABLE big (a int, s text); CREATE TABLE small (a int, s text)");
    // The big file's table is slow to fill (3 s of sleeps), the small files take a moment.
    sleepy_trigger(&d, "big", 100);
    let rows: String = (0..15_000).map(|i| format!("{i},row {i}\n")).collect();
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(rows.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let big = d.file("big.csv.gz", &gz);
    let mut args: Vec<String> = vec![
        "load".into(),
        "-q".into(),
        "--jobs".into(),
        "2".into(),
        "--report-json".into(),
        d.dir.join("tail.json").to_str().unwrap().into(),
        big.to_str().unwrap().into(),
    ];
    for k in 0..4 {
        let small: String = (0..100).map(|i| format!("{i},small {k}\n")).collect();
        let f = d.file(&format!("small.{k}.csv"), small.as_bytes());
        args.push(f.to_str().unwrap().into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = d.sluice(&args);
    let r = report(&d, &out, &d.dir.join("tail.json"));
    assert_eq!((d.count("big"), d.count("small")), (15_000, 400));
    let v = &r["verdict"];
    assert_eq!(v["kind"], "long-tail", "{v}");
    assert!(v["because"].as_str().unwrap().contains("big.csv.gz"), "{v}");
    assert!(
        v["next_step"]
            .as_str()
            .unwrap()
            .contains("cannot be cut into chunks"),
        "{v}"
    );
    let (tail, median) = (
        v["figures"]["tail_stream_end_seconds"].as_f64().unwrap(),
        v["figures"]["median_stream_end_seconds"].as_f64().unwrap(),
    );
    assert!(tail > 2.0 * median, "tail {tail} s, median {median} s");
    // Every stream reports where its time went.
    for s in r["streams"].as_array().unwrap() {
        let t = &s["timing"];
        let sum: f64 = [
            "read_seconds",
            "convert_seconds",
            "send_seconds",
            "server_seconds",
        ]
        .iter()
        .map(|k| t[k].as_f64().unwrap())
        .sum();
        assert!(sum <= s["seconds"].as_f64().unwrap() + 0.05, "{s}");
    }
}

#[test]
fn the_probe_measures_and_recommends_without_leaving_anything() {
    let d = db("probe");
    d.psql("CREATE TABLE t (a int, s text)");
    let rows: String = (0..50_000).map(|i| format!("{i},row {i}\n")).collect();
    let f = d.file("t.csv", rows.as_bytes());
    let out = d.sluice(&[
        "probe",
        "--jobs",
        "1,2",
        "--seconds",
        "0.3",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(p["round_trip_ms"].as_f64().unwrap() > 0.0, "{p}");
    let streams = p["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{p}");
    for s in streams {
        for k in [
            "upload_mb_per_s",
            "store_text_mb_per_s",
            "store_binary_mb_per_s",
        ] {
            assert!(s[k].as_f64().unwrap() > 0.0, "{k}: {p}");
        }
    }
    assert!(p["parse_mb_per_cpu_second"].as_f64().unwrap() > 0.0, "{p}");
    assert!(
        [1, 2].contains(&p["recommended_jobs"].as_u64().unwrap()),
        "{p}"
    );
    assert!(
        p["recommended_copy_buffer"].as_u64().unwrap() >= 256 << 10,
        "{p}"
    );
    assert!(p["expected_bottleneck"].as_str().unwrap().len() > 3, "{p}");
    // Its error, as measured and written down in BENCHMARKS.md.
    let e = &p["expected_error"];
    let benchmarks = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../BENCHMARKS.md"),
    )
    .unwrap();
    let written = format!(
        "Median {:.2} ({:.2} to {:.2})",
        e["load_share_median"].as_f64().unwrap(),
        e["load_share_min"].as_f64().unwrap(),
        e["load_share_max"].as_f64().unwrap()
    );
    assert!(
        benchmarks.contains(&written),
        "{written} is not in BENCHMARKS.md"
    );
    // Nothing stays: no probe table, and the user's table untouched.
    assert_eq!(
        d.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'sluice_probe%'")
            .trim(),
        "0"
    );
    assert_eq!(d.count("t"), 0);
    // The table people read.
    let out = d.sluice(&["probe", "--jobs", "1", "--seconds", "0.2"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for part in [
        "round trip:",
        "upload MB/s",
        "expected bottleneck:",
        "how close: an upper bound",
        "recommended: --jobs 1",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

/// A role that may not create tables in its schema (PostgreSQL 15's default for `public`)
/// still has its path measured: the measurement's table, refused in the transaction's first
/// round trip, is made a temporary one at the savepoint before it, and nothing stays behind.
#[test]
fn the_probe_measures_for_a_role_that_may_not_create_tables() {
    let d = db("probe_weak");
    d.psql(&format!(
        "DROP ROLE IF EXISTS probe_weak; CREATE ROLE probe_weak LOGIN; \
         GRANT CONNECT ON DATABASE {} TO probe_weak; REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        d.name
    ));
    let url = d.url.replace("sluice@", "probe_weak@");
    let mut c = sluice_cmd();
    c.args([
        "probe",
        "--upload-only",
        "--jobs",
        "1,2",
        "--seconds",
        "0.2",
        "--json",
        "--target",
        &url,
    ]);
    let out = run_bounded(c, 60);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let streams = p["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{p}");
    for s in streams {
        assert!(s["upload_mb_per_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    let left = d.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'sluice_probe%'");
    assert_eq!(left.trim(), "0", "{left}");
}

#[test]
fn jobs_auto_adds_streams_while_they_help_and_reports_its_curve() {
    let d = db("jobs_auto");
    d.psql("CREATE TABLE t (a int, s text)");
    // Rows sleep 0.2 ms on average in the server, a wait more streams share out: throughput rises
    // with each stream, so the calibration goes on, and the load lasts long enough to measure.
    d.psql(
        "CREATE FUNCTION t_slow() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.a % 10 = 0 THEN PERFORM pg_sleep(0.002); END IF; RETURN NEW; END $$; \
         CREATE TRIGGER t_slow BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION t_slow()",
    );
    let mut files = Vec::new();
    for k in 0..8 {
        let rows: String = (0..4000)
            .map(|i| format!("{},row {i} of {k}\n", k * 4000 + i))
            .collect();
        files.push(d.file(&format!("t.{k}.csv"), rows.as_bytes()));
    }
    let json = d.dir.join("auto.json");
    let mut args = vec![
        "load".to_string(),
        "--jobs".into(),
        "auto".into(),
        // Small messages: the throughput is counted as they go, not in lumps.
        "--copy-buffer".into(),
        "4k".into(),
        "--report-json".into(),
        json.to_str().unwrap().into(),
    ];
    args.extend(files.iter().map(|f| f.to_str().unwrap().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = d.sluice(&args);
    let r = report(&d, &out, &json);
    assert_eq!(d.psql("SELECT count(DISTINCT a) FROM t").trim(), "32000");
    assert_eq!(d.count("t"), 32_000);
    let c = &r["calibration"];
    let curve = c["curve"].as_array().unwrap();
    assert!(curve.len() >= 2, "{c}");
    assert_eq!(curve[0]["jobs"], 1, "{c}");
    // One stream and two moved data (a later window may find the load ending).
    let moved = |p: &serde_json::Value| p["mb_per_s"].as_f64().unwrap() > 0.0;
    assert!(curve[..2].iter().all(moved), "{c}");
    let chosen = c["chosen"].as_u64().unwrap();
    assert!(chosen >= 1 && chosen <= r["jobs"].as_u64().unwrap(), "{c}");
    if let Some(knee) = c["knee"].as_u64() {
        // The stream after the knee stays unless it slowed the load.
        assert!(chosen == knee || chosen == knee + 1, "{c}");
    }
    assert!(!c["why"].as_str().unwrap().is_empty(), "{c}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("jobs auto: 1 -> "), "{stdout}");
    // Streams never admitted did nothing; the admitted ones loaded every row.
    let loaded: u64 = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(loaded, 32_000);
}

/// Headless Chromium: `scripts/ensure-chromium.sh` installs it from Debian's packages.
fn chromium() -> std::path::PathBuf {
    let found = std::env::var_os("SLUICE_CHROMIUM")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .find_map(|b| {
                    let out = std::process::Command::new("sh")
                        .args(["-c", &format!("command -v {b}")])
                        .output()
                        .ok()?;
                    let p = String::from_utf8(out.stdout).ok()?;
                    (!p.trim().is_empty()).then(|| std::path::PathBuf::from(p.trim()))
                })
        });
    found.expect("the HTML report is tested in a real browser: install chromium (scripts/ensure-chromium.sh, which scripts/test.sh runs, does)")
}

#[test]
fn the_html_report_renders_in_a_browser_with_charts_that_have_content() {
    let d = db("html");
    d.psql("CREATE TABLE a (a int, s text); CREATE TABLE b (a int, s text)");
    // A second and more of server time, so that the server's activity has samples.
    sleepy_trigger(&d, "a", 1000);
    let mut args = vec!["load".to_string(), "-q".into(), "--jobs".into(), "2".into()];
    for (t, n) in [("a", 3), ("b", 2)] {
        for k in 0..n {
            let rows: String = (0..20_000).map(|i| format!("{i},{t} {k} {i}\n")).collect();
            args.push(
                d.file(&format!("{t}.{k}.csv"), rows.as_bytes())
                    .to_str()
                    .unwrap()
                    .into(),
            );
        }
    }
    let html = d.dir.join("report.html");
    let json = d.dir.join("report.json");
    args.extend(["--report-html".into(), html.to_str().unwrap().into()]);
    args.extend(["--report-json".into(), json.to_str().unwrap().into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = d.sluice(&args);
    let r = report(&d, &out, &json);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing fetched"
    );
    assert!(!page.contains("<script"), "no scripts");
    // The DOM as the browser built it.
    let browser = chromium();
    let url = format!("file://{}", html.display());
    let dom = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            &url,
        ])
        .output()
        .unwrap();
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let count = |needle: &str| dom.matches(needle).count();
    for id in ["timeline", "throughput", "stages", "server"] {
        assert!(dom.contains(&format!("id=\"{id}\"")), "chart {id} missing");
    }
    let chunks: usize = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["chunks"].as_array().unwrap().len())
        .sum();
    assert_eq!(count("class=\"chunk\""), chunks, "a bar per chunk");
    assert_eq!(
        count("class=\"series\""),
        3,
        "a line per table and the total"
    );
    assert_eq!(
        count("class=\"stage\""),
        4 * r["streams"].as_array().unwrap().len()
    );
    assert!(
        count("class=\"sample\"") > 0,
        "the server's activity has samples"
    );
    assert!(
        dom.contains(r["verdict"]["kind"].as_str().unwrap()),
        "the verdict is shown"
    );
    // And it renders to pixels.
    let png = d.dir.join("report.png");
    let shot = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg("--window-size=1100,2400")
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(shot.status.success(), "{}", stderr(&shot));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
    let (w, h) = (
        u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
        u32::from_be_bytes(bytes[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (1100, 2400));
    assert!(
        bytes.len() > 20_000,
        "a page with content, not a blank one: {} bytes",
        bytes.len()
    );
}
