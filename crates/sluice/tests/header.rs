//! `--header` and `--match-header` against what spreadsheets write: a UTF-8 byte-order mark
//! before the header names no column, the data rows load as `psql \copy ... (header)` loads
//! them, and a name that matches nothing is shown with its invisible characters spelled out.
//! Real PostgreSQL, psql as the reference.

mod common;

use common::{assert_has, db, stderr};

#[test]
fn a_byte_order_mark_before_the_header_is_ignored_by_match_header_and_loads_as_psql_loads() {
    let d = db("header_bom");
    d.psql(
        "CREATE TABLE people (id int, name text, born date); \
         CREATE TABLE people_psql (id int, name text, born date)",
    );
    // Excel's "CSV UTF-8": a mark, a header in the table's order, CRLF line ends.
    let excel = "\u{feff}id,name,born\r\n1,Ada,1815-12-10\r\n2,\u{feff}Alan,1912-06-23\r\n";
    let f = d.file("people.csv", excel.as_bytes());
    let f = f.to_str().unwrap();
    d.sluice_ok(&["load", "-q", "--header", "--match-header", f]);
    d.psql_copy(
        "people_psql",
        std::path::Path::new(f),
        "format csv, header true",
    )
    .unwrap();
    d.assert_same_rows("people", "people_psql");
    // A mark inside a data row is data, for psql and sluice alike.
    assert_eq!(
        d.psql("SELECT count(*) FROM people WHERE name = E'\\uFEFFAlan'")
            .trim(),
        "1"
    );

    // A header name that matches no column shows the characters the terminal would hide.
    d.file(
        "odd.csv",
        "id,\u{200b}name,born\n1,x,2000-01-01\n".as_bytes(),
    );
    let out = d.sluice(&[
        "load",
        "--table",
        "people",
        "--header",
        "--match-header",
        d.dir.join("odd.csv").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &["names \"<U+200B>name\", which is not a column"],
    );
}
