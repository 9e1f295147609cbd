//! One fixture per kind of bad input (tests/data/bad/). Each load must fail with exit code 3,
//! a message naming file, line, byte offset, column, value and reason, and leave the table
//! empty. PostgreSQL must reject the same file too: sluice rejects what the server rejects.

mod common;

use common::{assert_has, db, fixture, stderr, Db};

const TABLE: &str = "CREATE TABLE bad (
    id int NOT NULL PRIMARY KEY,
    qty numeric(5,2) CHECK (qty >= 0),
    d date,
    code varchar(3),
    flag char(2),
    note text)";

/// Loads `name` and returns sluice's stderr after checking the exit code, that the table is
/// empty, and that psql rejects the same file.
fn reject(name: &str, extra: &[&str]) -> (Db, String) {
    let d = db(name);
    d.psql(TABLE);
    let path = fixture(&format!("bad/{name}"));
    let p = path.to_str().unwrap();
    let mut args = vec!["load", "-q", "--table", "bad"];
    args.extend_from_slice(extra);
    args.push(p);
    let out = d.sluice(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "exit code for {name}: {err}");
    assert_eq!(d.count("bad"), 0, "{name} left rows behind");
    assert!(
        err.contains(&format!("tests/data/bad/{name}")),
        "file not named: {err}"
    );
    assert!(err.contains("nothing was committed"), "{err}");
    // The reference: PostgreSQL rejects the file as well (tbl with its trailing bars removed).
    let format = if name.ends_with(".csv") {
        "csv"
    } else {
        "text"
    };
    let delim = if name.ends_with(".tbl") {
        ", delimiter '|'"
    } else {
        ""
    };
    let reference = if name.ends_with(".tbl") {
        let stripped: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| format!("{}\n", l.strip_suffix('|').unwrap_or(l)))
            .collect();
        d.file("stripped.txt", stripped.as_bytes())
    } else {
        path.clone()
    };
    d.psql("CREATE TABLE ref (LIKE bad INCLUDING ALL)");
    assert!(
        d.psql_copy("ref", &reference, &format!("format {format}{delim}"))
            .is_err(),
        "psql accepted {name}"
    );
    (d, err)
}

#[test]
fn integer_out_of_range() {
    let (_, e) = reject("integer_range.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3 (value at byte offset 56)",
            "column id (integer)",
            "value \"2147483648\"",
            "out of range for integer (-2147483648 to 2147483647)",
        ],
    );
}

#[test]
fn numeric_precision_overflow() {
    let (_, e) = reject("numeric_overflow.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3 (value at byte offset 58)",
            "column qty (numeric(5,2))",
            "value \"1000.00\"",
            "numeric field overflow",
        ],
    );
}

#[test]
fn impossible_date() {
    let (_, e) = reject("impossible_date.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column d (date)",
            "value \"2023-02-29\"",
            "February 2023 has 28 days, not 29",
        ],
    );
}

#[test]
fn varchar_too_long() {
    let (_, e) = reject("varchar_too_long.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column code (character varying(3))",
            "value \"ghij\"",
            "value too long for type character varying(3): 4 characters",
        ],
    );
}

#[test]
fn char_too_long() {
    let (_, e) = reject("char_too_long.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column flag (character(2))",
            "value \"efg\"",
            "value too long",
        ],
    );
}

#[test]
fn null_in_not_null_column() {
    let (_, e) = reject("null_in_not_null.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3 (record at byte offset 56)",
            "column id (integer)",
            "NULL in a NOT NULL column",
        ],
    );
}

#[test]
fn too_few_fields() {
    let (_, e) = reject("too_few_fields.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column code (character varying(3))",
            // The row itself, as psql shows it (issue 7).
            "row \"3,3.50,2024-01-03\"",
            "missing data: 3 fields where the table takes 6",
        ],
    );
}

#[test]
fn too_many_fields() {
    let (_, e) = reject("too_many_fields.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "row \"3,3.50,2024-01-03,ghi,ef,bad,extra\"",
            "extra data: 7 fields where the table takes 6",
        ],
    );
    let (_, e) = reject("too_many_fields.tbl", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "row \"3|3.50|2024-01-03|ghi|ef|bad|extra|\"",
            "extra data: 7 fields where the table takes 6",
        ],
    );
}

#[test]
fn invalid_utf8() {
    let (_, e) = reject("invalid_utf8.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column note (text)",
            "value \"caf\\xe9\"",
            "invalid UTF-8: byte 4 of the value",
        ],
    );
}

#[test]
fn unterminated_quote_at_end_of_file() {
    let (_, e) = reject("unterminated_quote.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3 (error at byte offset 81)",
            "unterminated CSV quoted field",
        ],
    );
}

#[test]
fn not_a_number_in_text_format() {
    let (_, e) = reject("not_a_number.txt", &[]);
    assert_has(
        &e,
        &[
            "line 3",
            "column qty (numeric(5,2))",
            "value \"x.50\"",
            "not a valid number",
        ],
    );
}

#[test]
fn unique_violation_from_the_server() {
    let (_, e) = reject("unique_violation.csv", &[]);
    assert_has(
        &e,
        &[
            "line 3 (record at byte offset 56)",
            "rejected by the server: duplicate key value violates unique constraint \"bad_pkey\"",
            "Key (id)=(1) already exists.",
        ],
    );
}

#[test]
fn check_violation_from_the_server() {
    let (_, e) = reject("check_violation.csv", &[]);
    assert_has(
        &e,
        &["line 3", "violates check constraint \"bad_qty_check\""],
    );
}

#[test]
fn dry_run_reports_like_a_load_and_sends_nothing() {
    let d = db("dry_run_bad");
    d.psql(TABLE);
    let p = fixture("bad/impossible_date.csv");
    let out = d.sluice(&[
        "load",
        "-q",
        "--dry-run",
        "--table",
        "bad",
        p.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert_has(&stderr(&out), &["line 3", "February 2023 has 28 days"]);
    let good = d.file("good.csv", b"1,1.50,2024-01-01,abc,ab,ok\n");
    let out = d.sluice_ok(&[
        "load",
        "-q",
        "--dry-run",
        "--table",
        "bad",
        good.to_str().unwrap(),
    ]);
    assert!(out.contains("dry run"), "{out}");
    assert_eq!(d.count("bad"), 0);
}

#[test]
fn usage_errors_exit_2_with_advice() {
    let d = db("usage");
    let f = d.file("nosuch.csv", b"1\n");
    let out = d.sluice(&["load", "-q", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_has(
        &stderr(&out),
        &["table nosuch does not exist", "sluice ddl tpch --create"],
    );
    d.psql("CREATE TABLE t (a int)");
    let f = d.file("t.dat", b"1\n");
    let out = d.sluice(&["load", "-q", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_has(&stderr(&out), &["give --format tbl|csv|text"]);
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--columns",
        "b",
        f.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_has(&stderr(&out), &["has no column \"b\" (it has: a)"]);
}

#[test]
fn connection_failure_exits_4_without_the_password() {
    let out = common::sluice_cmd()
        .args(["load", "-q", "--table", "t", "--format", "csv", "-"])
        .args([
            "--target",
            "postgresql://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = stderr(&out);
    assert!(
        err.contains("cannot connect to postgresql://u:***@127.0.0.1:1/db"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}
