//! Rejects and thresholds. A load with bad rows finishes within `--max-errors`:
//! client-side bad rows are dropped before they are sent, server-side ones (unique, check,
//! foreign key, a duplicate key that two streams load) are isolated under savepoints, every
//! good row loads once, and the rejects file holds each bad row's original bytes. Past the
//! threshold nothing is visible. Real PostgreSQL; none of these tests is timed.

mod common;

use common::{assert_has, db, stderr, Db};
use std::collections::BTreeSet;

const TABLE: &str = "CREATE TABLE t (id int PRIMARY KEY, v int CHECK (v < 1000), s text NOT NULL)";

/// What the test knows about a line it wrote.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Good,
    /// The client rejects it (bad integer, missing field, NULL in NOT NULL).
    Client,
    /// The server rejects it (duplicate in its own file, check violation).
    Server,
    /// Its key is also in another file: exactly one of the two is rejected.
    Twin,
}

/// Writes `files` CSV inputs of `rows` lines each with bad lines at fixed places, returns the
/// paths and, per file, each line's bytes and kind.
/// An input file, and each of its lines with what the test made it.
type Input = (std::path::PathBuf, Vec<(Vec<u8>, Kind)>);

fn inputs(d: &Db, files: usize, rows: usize) -> Vec<Input> {
    let mut out = Vec::new();
    for f in 0..files {
        let mut lines: Vec<(Vec<u8>, Kind)> = Vec::new();
        for i in 0..rows {
            let id = f * 1_000_000 + i;
            let (line, kind) = match i % 997 {
                101 => (format!("{id},x{i},a\n"), Kind::Client),
                202 => (format!("{id},5\n"), Kind::Client),
                303 => (format!("{id},5,\n"), Kind::Client),
                404 => (format!("{id},5000,big\n"), Kind::Server),
                // The id of the line before it, in the same file: a duplicate.
                505 => (format!("{},6,dup\n", id - 1), Kind::Server),
                // Ids that every file shares: one of each set loads.
                606 => (format!("{},7,twin\n", 900_000 + i), Kind::Twin),
                _ => (
                    format!("{id},{},row {i} of file {f}\n", i % 1000),
                    Kind::Good,
                ),
            };
            lines.push((line.into_bytes(), kind));
        }
        let path = d.file(
            &format!("t.{f}.csv"),
            &lines.iter().flat_map(|l| l.0.clone()).collect::<Vec<u8>>(),
        );
        out.push((path, lines));
    }
    out
}

/// The rejects file's details: (file, line, byte offset, byte length, cause, rejects offset).
fn details(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn client_and_server_rejects_over_several_streams_load_every_good_row_once() {
    let d = db("rejects_mixed");
    d.psql(TABLE);
    let files = inputs(&d, 3, 4000);
    let rejects = d.dir.join("rejects.csv");
    let mut args: Vec<String> = vec![
        "load".into(),
        "--table".into(),
        "t".into(),
        "--jobs".into(),
        "3".into(),
        "--chunk-size".into(),
        "16k".into(),
        "--max-errors".into(),
        "1000".into(),
        "--rejects".into(),
        rejects.to_str().unwrap().into(),
        "--report-json".into(),
        d.dir.join("report.json").to_str().unwrap().into(),
    ];
    args.extend(files.iter().map(|(p, _)| p.to_str().unwrap().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = d.sluice(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_has(
        &stdout,
        &["rejected: ", "within --max-errors 1000", "rejects.csv"],
    );

    // Every rejected row is byte for byte a line of its input, and the rejects file is those
    // lines in input order.
    let found = details(&common::details_path(&rejects));
    let raw = std::fs::read(&rejects).unwrap();
    let mut expected_bytes = Vec::new();
    let mut rejected: BTreeSet<(usize, usize)> = BTreeSet::new();
    for r in &found {
        let file = r["file"].as_str().unwrap();
        let f = files
            .iter()
            .position(|(p, _)| p.to_str() == Some(file))
            .unwrap();
        let line = r["line"].as_u64().unwrap() as usize;
        let (bytes, _) = &files[f].1[line - 1];
        let offset = r["byte_offset"].as_u64().unwrap() as usize;
        let whole = std::fs::read(&files[f].0).unwrap();
        assert_eq!(
            &whole[offset..offset + bytes.len()],
            bytes.as_slice(),
            "{r}"
        );
        assert_eq!(r["byte_length"].as_u64(), Some(bytes.len() as u64));
        let at = r["rejects_offset"].as_u64().unwrap() as usize;
        assert_eq!(&raw[at..at + bytes.len()], bytes.as_slice(), "{r}");
        expected_bytes.extend_from_slice(bytes);
        assert!(rejected.insert((f, line)), "rejected twice: {r}");
    }
    assert_eq!(
        raw, expected_bytes,
        "the rejects file is the rejected lines, in order"
    );

    // Exactly the bad lines were rejected: every client and server one, and one of each set
    // of twins but the first to load.
    for (f, (_, lines)) in files.iter().enumerate() {
        for (i, (_, kind)) in lines.iter().enumerate() {
            let was = rejected.contains(&(f, i + 1));
            match kind {
                Kind::Good => assert!(!was, "good line {} of file {f} was rejected", i + 1),
                Kind::Client | Kind::Server => {
                    assert!(was, "bad line {} of file {f} ({kind:?}) loaded", i + 1)
                }
                Kind::Twin => {}
            }
        }
    }
    let twins_per_set = files.len();
    let twin_lines: Vec<(usize, usize)> = files
        .iter()
        .enumerate()
        .flat_map(|(f, (_, l))| {
            l.iter()
                .enumerate()
                .filter(|(_, (_, k))| *k == Kind::Twin)
                .map(move |(i, _)| (f, i + 1))
        })
        .collect();
    let twins_rejected = twin_lines.iter().filter(|t| rejected.contains(t)).count();
    assert_eq!(
        twins_rejected,
        twin_lines.len() - twin_lines.len() / twins_per_set,
        "all twins but one per key are rejected"
    );

    // The table holds exactly the lines that were not rejected, as psql loads them.
    d.psql("CREATE TABLE reference (LIKE t)");
    let mut kept = Vec::new();
    for (f, (_, lines)) in files.iter().enumerate() {
        for (i, (bytes, _)) in lines.iter().enumerate() {
            if !rejected.contains(&(f, i + 1)) {
                kept.extend_from_slice(bytes);
            }
        }
    }
    let kept_path = d.file("kept.csv", &kept);
    d.psql_copy("reference", &kept_path, "format csv").unwrap();
    d.assert_same_rows("t", "reference");

    // The JSON report counts the rejects by cause.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.dir.join("report.json")).unwrap()).unwrap();
    let by_cause = &report["rejected"]["by_cause"];
    assert_eq!(
        report["rejected"]["rows"].as_u64(),
        Some(found.len() as u64)
    );
    // Each bad kind is at one place in every 997 lines of each file.
    let each = (files.len() * (0..4000).filter(|i| i % 997 == 101).count()) as u64;
    for cause in [
        "invalid_value",
        "missing_data",
        "not_null_violation",
        "check_violation",
    ] {
        assert_eq!(by_cause[cause].as_u64(), Some(each), "{cause}: {by_cause}");
    }
    assert_eq!(
        by_cause["unique_violation"].as_u64(),
        Some(each + twins_rejected as u64),
        "{by_cause}"
    );
}

/// A file of `rows` good rows and `bad` rows sluice rejects, half on the client, half on the
/// server.
fn threshold_input(d: &Db, rows: usize, bad: usize) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..rows {
        if i % (rows / bad) == 7 && i / (rows / bad) < bad {
            if (i / (rows / bad)).is_multiple_of(2) {
                text.push_str(&format!("{i},oops,x\n"));
            } else {
                text.push_str(&format!("{i},1001,x\n"));
            }
        } else {
            text.push_str(&format!("{i},1,x\n"));
        }
    }
    d.file("t.csv", text.as_bytes())
}

#[test]
fn a_count_threshold_is_held_on_both_sides() {
    let d = db("rejects_count");
    d.psql(TABLE);
    let f = threshold_input(&d, 1000, 10);
    let f = f.to_str().unwrap();
    let rejects = d.dir.join("r.csv");
    let r = rejects.to_str().unwrap();
    // One fewer than the bad rows: the load fails, nothing is visible, and the rows found so
    // far are in the rejects file.
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--max-errors",
        "9",
        "--rejects",
        r,
        f,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(
        &err,
        &[
            "That is 10 rejected row(s), more than --max-errors 9 allows",
            "nothing was committed",
        ],
    );
    assert_eq!(d.count("t"), 0);
    assert_eq!(
        std::fs::read_to_string(&rejects).unwrap().lines().count(),
        10
    );
    // Exactly as many: loaded, exit 6.
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--max-errors",
        "10",
        "--rejects",
        r,
        f,
    ]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_eq!(d.count("t"), 990);
    let text = std::fs::read_to_string(&rejects).unwrap();
    assert_eq!(text.lines().count(), 10);
    assert!(
        text.lines()
            .all(|l| l.contains("oops") || l.contains("1001")),
        "{text}"
    );
    // The default is today's strict behaviour: the first bad row fails the load.
    d.psql("TRUNCATE t");
    let out = d.sluice(&["load", "-q", "--table", "t", "--restart", f]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(d.count("t"), 0);
}

#[test]
fn a_share_threshold_is_decided_on_all_input_rows() {
    let d = db("rejects_share");
    d.psql(TABLE);
    let f = threshold_input(&d, 1000, 10);
    let f = f.to_str().unwrap();
    // 10 of 1000 rows is 1%: 0.9% fails with nothing visible, 1% loads.
    let out = d.sluice(&["load", "-q", "--table", "t", "--max-errors", "0.9%", f]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(&err, &["more than --max-errors 0.9% allows"]);
    assert_eq!(d.count("t"), 0);
    let out = d.sluice(&["load", "-q", "--table", "t", "--max-errors", "1%", f]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_has(
        &stdout,
        &["rejected: 10 rows", "give --rejects PATH to keep them"],
    );
    assert_eq!(d.count("t"), 990);
    // A share already certain to be exceeded stops the load early: every row bad.
    let all_bad: String = (0..2000).map(|i| format!("{i},bad,x\n")).collect();
    let g = d.file("t.bad.csv", all_bad.as_bytes());
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--max-errors",
        "5%",
        g.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let n: u64 = err
        .split("That is ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(n < 2000, "it stopped early, after {n} rejects");
}

#[test]
fn a_foreign_key_whose_parent_a_sibling_loads_rejects_only_bad_rows() {
    let d = db("rejects_fk");
    d.psql(
        "CREATE TABLE parent (p int PRIMARY KEY); \
         CREATE TABLE child (c int, p int REFERENCES parent)",
    );
    let parents: String = (1..=3000).map(|p| format!("{p}\n")).collect();
    let children: String = (1..=3000)
        .map(|c| match c % 500 {
            0 => format!("{c},{}\n", 100_000 + c), // no such parent anywhere
            _ => format!("{c},{c}\n"),
        })
        .collect();
    let parent = d.file("parent.csv", parents.as_bytes());
    let child = d.file("child.csv", children.as_bytes());
    let rejects = d.dir.join("fk.csv");
    let out = d.sluice(&[
        "load",
        "--jobs",
        "2",
        "--chunk-size",
        "4k",
        "--max-errors",
        "10",
        "--rejects",
        rejects.to_str().unwrap(),
        child.to_str().unwrap(),
        parent.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert_has(
        &err,
        &["foreign keys tie tables of this load (child -> parent)"],
    );
    assert_eq!(d.count("parent"), 3000);
    assert_eq!(d.count("child"), 2994);
    let rows = details(&common::details_path(&rejects));
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter().all(|r| r["cause"] == "foreign_key_violation"),
        "{rows:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&rejects).unwrap(),
        (1..=6)
            .map(|k| format!("{},{}\n", k * 500, 100_000 + k * 500))
            .collect::<String>()
    );
}

#[test]
fn under_the_stage_strategy_a_refused_row_is_isolated_in_the_publish() {
    let d = db("rejects_stage");
    d.psql(
        "CREATE TABLE p (id bigint, v int CHECK (v < 1000)) PARTITION BY RANGE (id); \
         CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10000); \
         CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10000) TO (20000)",
    );
    let one: String = (0..5000)
        .map(|i| {
            if i == 1234 {
                format!("{i},5000\n")
            } else {
                format!("{i},1\n")
            }
        })
        .collect();
    let two: String = (10000..15000).map(|i| format!("{i},2\n")).collect();
    let a = d.file("p.1.csv", one.as_bytes());
    let b = d.file("p.2.csv", two.as_bytes());
    let out = d.sluice(&[
        "load",
        "--strategy",
        "stage",
        "--jobs",
        "2",
        "--max-errors",
        "1",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(6), "{err}\n{stdout}");
    assert_has(
        &stdout,
        &[
            "rejected: 1 row (1 check violation)",
            "the server refused a row of",
        ],
    );
    assert_eq!(d.count("p"), 9999);
    assert_eq!(d.count("p1"), 4999);
    assert_eq!(d.psql("SELECT count(*) FROM p WHERE id = 1234").trim(), "0");
}

#[test]
fn a_dry_run_counts_the_rows_it_would_reject() {
    let d = db("rejects_dry");
    d.psql(TABLE);
    let f = threshold_input(&d, 100, 10);
    let out = d.sluice(&[
        "load",
        "--dry-run",
        "-q",
        "--table",
        "t",
        "--max-errors",
        "100",
        f.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    // Only the client's rejects: the check constraint is the server's to apply.
    assert_has(&stdout, &["rejected: 5 rows (5 invalid value)", "dry run"]);
}

#[test]
fn a_password_never_appears_in_the_rejects_files() {
    let d = db("rejects_secret");
    d.psql(TABLE);
    let secret = "Quokka-Secret-4471";
    let url = d.url.replacen("sluice@", &format!("sluice:{secret}@"), 1);
    let f = threshold_input(&d, 100, 10);
    let rejects = d.dir.join("secret.csv");
    let out = common::sluice_cmd()
        .args(["load", "--table", "t", "--max-errors", "50", "--rejects"])
        .arg(&rejects)
        .arg(&f)
        .args(["--target", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let seen = [
        std::fs::read_to_string(&rejects).unwrap(),
        std::fs::read_to_string(common::details_path(&rejects)).unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    ]
    .concat();
    assert!(seen.contains("1001"), "the rejects are there: {seen}");
    assert!(!seen.contains(secret) && !seen.contains("Quokka"), "{seen}");
}
