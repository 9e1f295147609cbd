//! `--wire binary|text`: the encoding rows travel in. Text COPY lines (fewer bytes for most
//! tables) load exactly what binary tuples and `psql \copy` load, for every kind of value a
//! real table has; sluice validates every value either way, so a bad row is still named by
//! its line before anything is sent; the summary and the JSON report count the bytes sent.
//! Real PostgreSQL.

mod common;

use common::{assert_has, db, stderr, Db};
use std::path::Path;

const COLUMNS: &str = "id bigint, at timestamptz, n int, name text, amount numeric(12,2), \
                       ok bool, x float8, u uuid, d date";

/// Rows with negatives, NULLs, non-ASCII text, quotes and commas inside quoted fields.
fn events(d: &Db) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..3000i64 {
        let name = match i % 4 {
            0 => "Zürich".to_string(),
            1 => "\"São Paulo, \"\"SP\"\"\"".to_string(),
            2 => "東京".to_string(),
            _ => String::new(),
        };
        text.push_str(&format!(
            "{id},2024-0{m}-1{s} 0{h}:1{s}:2{s}.{i:03}+0{h},{n},{name},{amount}.{c:02},{ok},{x},\
             {u:08x}-0000-4000-8000-{i:012x},2024-01-{dd:02}\n",
            id = i - 1500,
            m = 1 + i % 9,
            s = i % 10,
            h = i % 10,
            n = if i % 7 == 0 {
                String::new()
            } else {
                (-(i * 37)).to_string()
            },
            amount = i * 13 - 20000,
            c = i % 100,
            ok = ["t", "false", "yes", "0"][(i % 4) as usize],
            x = (i as f64) * -1.25e-3,
            u = i * 7919,
            dd = 1 + i % 28,
        ));
    }
    d.file("events.csv", text.as_bytes())
}

fn load(d: &Db, table: &str, file: &Path, wire: &str, json: &Path) -> (i32, String, String) {
    let out = d.load(
        &[
            "--table",
            table,
            "--jobs",
            "2",
            "--wire",
            wire,
            "--report-json",
            json.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        &[],
        120,
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}

fn wire_bytes(json: &Path) -> u64 {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    report["total"]["wire_bytes"]
        .as_u64()
        .expect("wire_bytes in the report")
}

#[test]
fn text_and_binary_load_what_psql_loads_and_count_their_bytes() {
    let d = db("wire_types");
    d.psql(&format!(
        "CREATE TABLE t_text ({COLUMNS}); CREATE TABLE t_bin ({COLUMNS}); \
         CREATE TABLE t_ref ({COLUMNS})"
    ));
    let file = events(&d);
    d.psql_copy("t_ref", &file, "format csv").unwrap();
    let (jt, jb) = (d.dir.join("text.json"), d.dir.join("bin.json"));
    let (code, out, err) = load(&d, "t_text", &file, "text", &jt);
    assert_eq!(code, 0, "{err}");
    assert_has(
        &out,
        &["loads through text COPY (--wire text)", "wire: ", "(text)"],
    );
    let (code, out, err) = load(&d, "t_bin", &file, "binary", &jb);
    assert_eq!(code, 0, "{err}");
    assert_has(&out, &["(binary)"]);
    d.assert_same_rows("t_text", "t_ref");
    d.assert_same_rows("t_bin", "t_ref");
    // Which is smaller depends on the table: here uuids (36 characters against 16 bytes) and
    // timestamps make binary the smaller; `lineitem` below goes the other way.
    assert!(wire_bytes(&jt) > 0 && wire_bytes(&jb) > 0);
}

/// TPC-H `lineitem`: binary tuples are far bigger than its text (a length word before every
/// field, numerics as base-10000 groups), text COPY about the input's size.
#[test]
fn text_sends_fewer_bytes_than_binary_for_lineitem() {
    let d = db("wire_lineitem");
    let files = common::gen_tpch(&d.dir.join("sf"), "0.01", "1");
    let lineitem = files
        .iter()
        .find(|f| common::tpch_table(f) == "lineitem")
        .unwrap();
    let ddl = common::tpch_ddl(&[]);
    d.psql(&format!("CREATE SCHEMA a; SET search_path = a; {ddl}"));
    d.psql(&format!("CREATE SCHEMA b; SET search_path = b; {ddl}"));
    let (jt, jb) = (d.dir.join("text.json"), d.dir.join("bin.json"));
    let (code, _, err) = load(&d, "a.lineitem", lineitem, "text", &jt);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = load(&d, "b.lineitem", lineitem, "binary", &jb);
    assert_eq!(code, 0, "{err}");
    d.assert_same_rows("a.lineitem", "b.lineitem");
    let input = std::fs::metadata(lineitem).unwrap().len() as f64;
    let (text, binary) = (wire_bytes(&jt) as f64, wire_bytes(&jb) as f64);
    assert!(text < binary, "text {text} bytes, binary {binary}");
    assert!(
        text / input < 1.1 && binary / input > 1.4,
        "{text} {binary} of {input}"
    );
}

#[test]
fn a_bad_value_is_still_named_by_its_line_under_text() {
    let d = db("wire_bad");
    d.psql("CREATE TABLE t (id int, v date)");
    let file = d.file("t.csv", b"1,2024-01-01\n2,2024-02-30\n3,2024-03-01\n");
    let json = d.dir.join("r.json");
    let (code, _, err) = load(&d, "t", &file, "text", &json);
    assert_eq!(code, 3, "{err}");
    assert_has(&err, &["line 2", "2024-02-30"]);
    assert_eq!(d.count("t"), 0);
}

/// A dry run measures no path: under `--wire auto` it says that it encoded binary, and that
/// a load may send text, in its summary and its JSON.
#[test]
fn a_dry_run_says_what_wire_auto_would_still_decide() {
    let d = db("wire_dry");
    d.psql("CREATE TABLE t (id int, v numeric(12,2))");
    let file = d.file("t.csv", b"1,2.50\n2,3.75\n");
    let json = d.dir.join("dry.json");
    let out = d.sluice(&[
        "load",
        "--table",
        "t",
        "--dry-run",
        "--report-json",
        json.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(&stdout, &["dry run: --wire auto: binary in a dry run"]);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(r["wire_choice"].as_str().unwrap().contains("may send text"));
    assert_eq!(d.count("t"), 0);
}
