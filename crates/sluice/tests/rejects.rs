//! The rejects file as a user meets it: it reloads with the flags of the load that wrote it.
//! With `--header` it starts with the input's header line, so that reloading the fixed rows
//! with the same `--header` skips that line and not the first fixed row. Real PostgreSQL.

mod common;

use common::{db, sluice_cmd, stderr, Db};
use std::io::Write;
use std::process::Stdio;

/// One format's input: a header line, then rows whose `x` quantities the client rejects.
struct Case {
    format: &'static str,
    header: &'static str,
    rows: Vec<String>,
}

fn case(format: &'static str) -> Case {
    let (sep, end) = match format {
        "csv" => (",", ""),
        "text" => ("\t", ""),
        _ => ("|", "|"),
    };
    let rows = (1..=6)
        .map(|i| {
            let qty = if i == 1 || i == 4 {
                "x".to_string()
            } else {
                (i * 10).to_string()
            };
            format!("{i}{sep}{qty}{end}\n")
        })
        .collect();
    Case {
        format,
        header: match format {
            "csv" => "id,qty\n",
            "text" => "id\tqty\n",
            _ => "id|qty|\n",
        },
        rows,
    }
}

/// `sluice load` with the flags a user gives both times, reading `input` (a path, or `-` fed
/// `stdin`).
fn load(
    d: &Db,
    c: &Case,
    input: &str,
    rejects: &str,
    stdin: Option<&[u8]>,
) -> (Option<i32>, String) {
    let mut cmd = sluice_cmd();
    cmd.args(["load", "-q", "--target", &d.url, "--table", "orders"])
        .args(["--format", c.format, "--header", "--max-errors", "10"])
        .args(["--rejects", rejects, input]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        pipe.write_all(bytes).unwrap();
    }
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    (out.status.code(), stderr(&out))
}

fn reject_fix_reload(d: &Db, c: &Case, from_stdin: bool) {
    d.psql("DROP TABLE IF EXISTS orders; CREATE TABLE orders (id int PRIMARY KEY, qty int)");
    let content = format!("{}{}", c.header, c.rows.concat());
    let input = d.file(&format!("orders.{}", c.format), content.as_bytes());
    let bad = d.dir.join(format!("bad.{}", c.format));
    let bad = bad.to_str().unwrap();
    let (code, err) = if from_stdin {
        load(d, c, "-", bad, Some(content.as_bytes()))
    } else {
        load(d, c, input.to_str().unwrap(), bad, None)
    };
    assert_eq!(code, Some(6), "{}: {err}", c.format);
    assert_eq!(d.count("orders"), 4);

    let rejected = std::fs::read_to_string(bad).unwrap();
    let expected = format!("{}{}{}", c.header, c.rows[0], c.rows[3]);
    assert_eq!(rejected, expected, "{}: the rejects file", c.format);

    // The user fixes the quantities and loads the file with the same flags.
    let fixed = d.file("fixed", rejected.replace('x', "7").as_bytes());
    let again = d.dir.join("bad-again");
    let (code, err) = load(d, c, fixed.to_str().unwrap(), again.to_str().unwrap(), None);
    assert_eq!(code, Some(0), "{}: {err}", c.format);
    assert_eq!(
        d.psql("SELECT string_agg(id || ':' || qty, ' ' ORDER BY id) FROM orders")
            .trim(),
        "1:7 2:20 3:30 4:7 5:50 6:60",
        "{}: every row is there",
        c.format
    );
}

#[test]
fn a_fixed_rejects_file_reloads_with_the_same_flags_in_every_format() {
    let d = db("rejects_reload");
    for format in ["csv", "text", "tbl"] {
        reject_fix_reload(&d, &case(format), false);
    }
    // Standard input cannot be read twice: its header line is kept as the load read it.
    reject_fix_reload(&d, &case("csv"), true);
}

/// The details file names the record's offset and the value's apart, and has exactly the fields
/// the README's table documents.
#[test]
fn the_details_name_the_record_and_value_offsets_apart_and_match_the_readme() {
    let d = db("rejects_details");
    d.psql("CREATE TABLE t (id int, qty int)");
    // The bad value `x7` starts 3 bytes into its record, which starts at byte 4.
    let f = d.file("t.csv", b"1,1\n22,x7\n3,3\n");
    let bad = d.dir.join("bad.csv");
    let out = d.load(
        &[
            "--max-errors",
            "5",
            "--rejects",
            bad.to_str().unwrap(),
            f.to_str().unwrap(),
        ],
        &[],
        60,
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let text = std::fs::read_to_string(common::details_path(&bad)).unwrap();
    let row: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(row["byte_offset"], 4, "{row}");
    assert_eq!(row["value_offset"], 7, "{row}");
    assert_eq!(row["line"], 2, "{row}");

    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let documented: std::collections::BTreeSet<String> = readme
        .split("| field | what |")
        .nth(1)
        .unwrap()
        .lines()
        .skip(2)
        .take_while(|l| l.trim_start().starts_with("| `"))
        .map(|l| l.split('`').nth(1).unwrap().to_string())
        .collect();
    let written: std::collections::BTreeSet<String> =
        row.as_object().unwrap().keys().cloned().collect();
    assert_eq!(written, documented);
}
