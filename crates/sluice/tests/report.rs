//! The HTML report checked against the load's own figures (its JSON report, which the summary
//! prints): the streams it names and draws are the streams that ran, a stage load shows its
//! steps and WAL as the terminal does, a tiny load's axes read something other than zero and
//! it draws no empty chart. Real PostgreSQL; the page is read as text (the browser test is in
//! `issue12_verdict.rs`).

mod common;

use common::{assert_has, db, stderr, Db};

/// Loads `files` into `table` with `extra` flags; returns (JSON report, HTML page).
fn load(
    d: &Db,
    table: &str,
    files: &[std::path::PathBuf],
    extra: &[&str],
) -> (serde_json::Value, String) {
    let json = d.dir.join(format!("{table}.json"));
    let html = d.dir.join(format!("{table}.html"));
    let mut args = vec![
        "--table",
        table,
        "--report-json",
        json.to_str().unwrap(),
        "--report-html",
        html.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = d.load(&args, &[], 120);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (json, std::fs::read_to_string(html).unwrap())
}

/// The streams that loaded a chunk, by the JSON report.
fn streams_that_ran(r: &serde_json::Value) -> usize {
    r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["chunks"].as_array().unwrap().is_empty())
        .count()
}

/// The page's checks against the JSON: one lane per stream that ran, in the header too, a bar
/// per chunk.
fn check_streams(r: &serde_json::Value, page: &str) {
    let ran = streams_that_ran(r);
    assert_eq!(r["jobs"].as_u64().unwrap() as usize, ran, "{}", r["jobs"]);
    assert_has(page, &[&format!("{ran} stream(s)")]);
    let timeline = page.split(r#"id="timeline""#).nth(1).unwrap();
    let timeline = timeline.split("</svg>").next().unwrap();
    assert_eq!(timeline.matches(">stream ").count(), ran, "lanes");
    let chunks: usize = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["chunks"].as_array().unwrap().len())
        .sum();
    assert_eq!(timeline.matches(r#"class="chunk""#).count(), chunks);
    let stages = page.split(r#"id="stages""#).nth(1).unwrap();
    let stages = stages.split("</svg>").next().unwrap();
    assert_eq!(stages.matches(">stream ").count(), ran, "stage lanes");
    // A row of TCP figures per stream that ran over TCP, as the JSON has them.
    let over_tcp = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["chunks"].as_array().unwrap().is_empty())
        .filter(|s| s["transport"]["busy_us"].as_u64().is_some())
        .count();
    let rows = page.split(r#"id="tcp""#).nth(1).map_or(0, |t| {
        t.split("</table>")
            .next()
            .unwrap()
            .matches("<tr><td>")
            .count()
    });
    assert_eq!(rows, over_tcp, "connection rows");
}

#[test]
fn a_tiny_load_has_readable_axes_and_no_empty_chart() {
    let d = db("report_tiny");
    d.psql("CREATE TABLE t (a int, s text)");
    let f = d.file("t.csv", b"1,a\n2,b\n3,c\n");
    let (r, page) = load(&d, "t", &[f], &["--jobs", "4"]);
    check_streams(&r, &page);
    let ticks: Vec<&str> = page
        .split(r#"id="throughput""#)
        .nth(1)
        .unwrap()
        .split("</svg>")
        .next()
        .unwrap()
        .split(r#"text-anchor="end">"#)
        .skip(1)
        .map(|t| t.split('<').next().unwrap())
        .collect();
    assert_eq!(ticks.len(), 5, "{ticks:?}");
    let distinct: std::collections::BTreeSet<&&str> = ticks.iter().collect();
    assert_eq!(distinct.len(), 5, "every tick reads differently: {ticks:?}");
    // The time axis has ticks past zero however short the load.
    let timeline = page.split(r#"id="timeline""#).nth(1).unwrap();
    let timeline = timeline.split("</svg>").next().unwrap();
    assert!(
        timeline.matches(r#"text-anchor="middle">"#).count() >= 3,
        "{timeline}"
    );
    let samples = r["server_waits"]["series"].as_array().unwrap().len();
    assert_eq!(
        page.contains(r#"id="server""#),
        samples > 0,
        "{samples} samples"
    );
}

#[test]
fn a_stage_load_shows_its_steps_and_wal_and_auto_draws_only_the_streams_it_ran() {
    let d = db("report_stage");
    d.psql(
        "CREATE TABLE p (id int PRIMARY KEY, s text) PARTITION BY RANGE (id); \
         CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (1000); \
         CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (1000) TO (2000)",
    );
    let rows =
        |from: u32| -> String { (from..from + 1000).map(|i| format!("{i},r{i}\n")).collect() };
    let a = d.file("a.csv", rows(0).as_bytes());
    let b = d.file("b.csv", rows(1000).as_bytes());
    let (r, page) = load(&d, "p", &[a, b], &["--strategy", "stage"]);
    check_streams(&r, &page);
    assert_eq!(r["strategy"], "stage");
    let steps = page.split(r#"id="steps""#).nth(1).expect("a steps table");
    assert_has(
        steps,
        &[
            "staging tables</td><td>2<",
            "index build",
            "publish",
            "WAL written during the load",
        ],
    );
    // Each stream's own index build and commit of a staging table is drawn on its lane, where
    // the timeline would otherwise show a gap in which no rows moved.
    let spans: usize = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["steps"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(spans, 2, "one step span per staging table");
    let timeline = page.split(r#"id="timeline""#).nth(1).unwrap();
    assert_eq!(timeline.matches(r#"class="step""#).count(), 2);
    assert!(timeline.contains("index build, statistics, commit of its staging table"));

    d.psql("CREATE TABLE many (a int, s text)");
    let files: Vec<_> = (0..6)
        .map(|k| {
            let body: String = (0..2000)
                .map(|i| format!("{i},file {k} row {i}\n"))
                .collect();
            d.file(&format!("m{k}.csv"), body.as_bytes())
        })
        .collect();
    let (r, page) = load(&d, "many", &files, &["--jobs", "auto"]);
    check_streams(&r, &page);
}
