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
