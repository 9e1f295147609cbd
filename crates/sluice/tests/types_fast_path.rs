//! The fast path's converters against the server's own input functions: edge values of each
//! type the client converts at full speed, repeated so that they sit in the middle of indexed
//! runs (where the fast path takes them, or converts them in place), loaded by sluice and by
//! `psql \copy` into twin tables that must then hold the same rows; and invalid values, in
//! the middle of good rows, which both must refuse, loading nothing.

mod common;

use common::{db, Db};

/// How many times the valid values are repeated: enough that each lands in an indexed run.
const REPEAT: usize = 40;

fn csv_field(v: Option<&str>) -> String {
    match v {
        None => String::new(),
        Some(s) if s.is_empty() || s.contains([',', '"', '\n', '\r']) => {
            format!("\"{}\"", s.replace('"', "\"\""))
        }
        Some(s) => s.to_string(),
    }
}

fn text_field(v: Option<&str>) -> String {
    match v {
        None => "\\N".into(),
        Some(s) => s
            .replace('\\', "\\\\")
            .replace('\t', "\\t")
            .replace('\n', "\\n")
            .replace('\r', "\\r"),
    }
}

/// A file of `id,value` records, the values repeated [`REPEAT`] times.
fn body(values: &[Option<&str>], csv: bool) -> Vec<u8> {
    let mut out = String::new();
    for rep in 0..REPEAT {
        for (j, v) in values.iter().enumerate() {
            let (d, field) = if csv {
                (',', csv_field(*v))
            } else {
                ('\t', text_field(*v))
            };
            out.push_str(&format!("{}{d}{field}\n", rep * values.len() + j));
        }
    }
    out.into_bytes()
}

/// Valid values load identically through sluice and psql, in CSV and text; each invalid
/// one, between good rows, makes both refuse the file.
fn twin(test: &str, ty: &str, valid: &[Option<&str>], invalid: &[&str]) {
    let d = db(test);
    for (format, csv) in [("csv", true), ("text", false)] {
        let (s, p) = (format!("s_{format}"), format!("p_{format}"));
        d.psql(&format!(
            "CREATE TABLE {s} (id int, v {ty}); CREATE TABLE {p} (id int, v {ty})"
        ));
        let file = d.file(&format!("{s}.{format}"), &body(valid, csv));
        let f = file.to_str().unwrap();
        d.sluice_ok(&["load", "-q", "--table", &s, "--format", format, f]);
        d.psql_copy(&p, &file, &format!("format {format}"))
            .unwrap_or_else(|e| panic!("psql rejected a valid {ty} value: {e}"));
        d.assert_same_rows(&s, &p);
        assert_eq!(d.count(&s), (valid.len() * REPEAT) as u64);
    }
    refused(&d, ty, valid[0], invalid);
}

fn refused(d: &Db, ty: &str, good: Option<&str>, invalid: &[&str]) {
    let invalid: Vec<Option<&str>> = invalid.iter().map(|&v| Some(v)).collect();
    refused_values(d, ty, good, &invalid);
}

/// Each of `invalid` (`None` for NULL) in the middle of good rows: sluice and psql refuse it.
fn refused_values(d: &Db, ty: &str, good: Option<&str>, invalid: &[Option<&str>]) {
    d.psql(&format!(
        "CREATE TABLE s_bad (id int, v {ty}); CREATE TABLE p_bad (id int, v {ty})"
    ));
    for (k, &bad) in invalid.iter().enumerate() {
        let mut values = vec![good; 60];
        values[30] = bad;
        let file = d.file(&format!("bad{k}.csv"), &body(&values, true)[..]);
        let f = file.to_str().unwrap();
        let out = d.sluice(&["load", "-q", "--table", "s_bad", "--format", "csv", f]);
        assert!(!out.status.success(), "sluice loaded {ty} {bad:?}");
        assert!(
            d.psql_copy("p_bad", &file, "format csv").is_err(),
            "psql loaded {ty} {bad:?}: not an invalid value"
        );
        assert_eq!((d.count("s_bad"), d.count("p_bad")), (0, 0), "{bad:?}");
    }
}

#[test]
fn signed_integers() {
    twin(
        "fast_int2",
        "smallint",
        &[
            Some("-32768"),
            Some("32767"),
            Some("+5"),
            Some("-0"),
            Some(" 12"),
            Some("7 "),
            None,
        ],
        &["32768", "-32769", "1.5", "--1", "+", "1e3", ""],
    );
    twin(
        "fast_int4",
        "integer",
        &[
            Some("-2147483648"),
            Some("2147483647"),
            Some("+2147483647"),
            Some("-1"),
            Some("0042"),
            None,
        ],
        &["2147483648", "-2147483649", "12a", "-"],
    );
    twin(
        "fast_int8",
        "bigint",
        &[
            Some("-9223372036854775808"),
            Some("9223372036854775807"),
            Some("-999999999999999"),
            Some("+1234567890123456"),
            Some("1234567890123456"),
            Some("12345678901234567"),
            None,
        ],
        &["9223372036854775808", "- 1", "-9223372036854775809"],
    );
}

#[test]
fn floats_have_the_servers_bits() {
    twin(
        "fast_float8",
        "double precision",
        &[
            Some("0.1"),
            Some("-1.5e-3"),
            Some("1.7976931348623157e308"),
            Some("4.9e-324"),
            Some("2.2250738585072011e-308"),
            Some("2.4703282292062328e-324"),
            Some("123456789012345678901234567890"),
            Some("0.30000000000000004"),
            Some("9007199254740993"),
            Some("1e22"),
            Some("-0"),
            Some("0.000"),
            Some("NaN"),
            Some("-Infinity"),
            Some("inf"),
            Some("  1.5"),
            Some("0x10"),
            Some("1."),
            Some(".5"),
            None,
        ],
        &[
            "1e309",
            "1e-400",
            "2.4703282292062327e-324",
            "abc",
            "1e",
            "-",
            "",
        ],
    );
    twin(
        "fast_float4",
        "real",
        &[
            Some("3.4028235e38"),
            Some("1.4e-45"),
            Some("1.17549435e-38"),
            Some("0.1"),
            Some("16777217"),
            Some("3.14159265358979"),
            Some("-7.5e-3"),
            Some("NaN"),
            Some("Infinity"),
            None,
        ],
        &["3.4028236e38", "7e-46", "1e-46", "x"],
    );
}

#[test]
fn boolean_spellings_on_the_fast_path() {
    twin(
        "fast_bool",
        "boolean",
        &[
            Some("t"),
            Some("f"),
            Some("true"),
            Some("false"),
            Some("TRUE"),
            Some("False"),
            Some("yes"),
            Some("no"),
            Some("y"),
            Some("N"),
            Some("on"),
            Some("off"),
            Some("of"),
            Some("1"),
            Some("0"),
            Some(" t"),
            Some("tr"),
            None,
        ],
        &["o", "2", "tru e", "yess", ""],
    );
}

#[test]
fn uuids_on_the_fast_path() {
    twin(
        "fast_uuid",
        "uuid",
        &[
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Some("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12"),
            Some("a0eebc999c0b4ef8bb6d6bb9bd380a13"),
            Some("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14}"),
            Some("a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a15"),
            None,
        ],
        &[
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "",
        ],
    );
}

#[test]
fn timestamps_on_the_fast_path() {
    let values = [
        Some("2024-03-01 10:00:00"),
        Some("2024-03-01T10:00:00"),
        Some("2024-03-01 10:00:00.1234567"),
        Some("2024-03-01 10:00:00.9999995"),
        Some("2024-03-01 10:00:00Z"),
        Some("2024-03-01 10:00:00+02"),
        Some("2024-03-01 10:00:00.5-05:30"),
        Some("2024-03-01 10:00:00-0800"),
        // America/New_York's spring-forward gap and fall-back overlap, and the days around.
        Some("2024-03-09 23:59:59"),
        Some("2024-03-10 02:30:00"),
        Some("2024-03-10 12:00:00"),
        Some("2024-11-03 01:30:00"),
        Some("2024-11-03 12:00:00"),
        Some("infinity"),
        None,
    ];
    let invalid = ["2024-02-30 00:00:00", "2024-01-01 25:00:00", "x"];
    twin("fast_timestamptz", "timestamptz", &values, &invalid);
    twin("fast_timestamp", "timestamp", &values, &invalid);
}

#[test]
fn times_on_the_fast_path() {
    twin(
        "fast_time",
        "time",
        &[
            Some("00:00:00"),
            Some("23:59:59.999999"),
            Some("12:34:56.5"),
            Some("12:34:56.1234567"),
            Some("23:59:59.9999999"),
            Some("24:00:00"),
            Some("12:34"),
            Some("1:02:03"),
            None,
        ],
        &["25:00:00", "12:60:00", "x"],
    );
}

#[test]
fn nulls_and_non_ascii_text_on_the_fast_path() {
    twin(
        "fast_text",
        "text",
        &[
            Some("Zürich"),
            Some("東京"),
            Some("São Paulo"),
            Some("say \"hi\", then go"),
            Some(""),
            Some("\\N"),
            None,
        ],
        &[],
    );
    twin(
        "fast_varchar",
        "varchar(5)",
        &[
            Some("São P"),
            Some("東京"),
            Some("日本語  "),
            Some("ü"),
            None,
        ],
        &["Zürich", "abcdef", "日本語日本語"],
    );
    twin(
        "fast_char",
        "char(4)",
        &[Some("ü"), Some("日本"), Some("abcd   "), None],
        &["abcde"],
    );
    let d = db("fast_not_null");
    refused_values(&d, "int NOT NULL", Some("1"), &[None, Some("")]);
}

/// A compressed input comes in blocks that the reader recycles: the fast path goes on over its
/// index after a refused record only within the same block, and loads what psql loads. Events
/// with values off the fast path in every record, and a bad row every 50, past several
/// blocks; sluice keeps the bad rows aside (`--max-errors`), psql loads the file without them.
#[test]
fn compressed_blocks_with_refused_records_load_as_psql_loads() {
    use std::io::Write;
    let d = db("fast_gz");
    let table = "(id bigint, at timestamptz, n int, name text, ok bool, score float8, key uuid)";
    d.psql(&format!(
        "CREATE TABLE s_ev {table}; CREATE TABLE p_ev {table}"
    ));
    let (mut all, mut good) = (String::new(), String::new());
    let mut bad = 0;
    for i in 0..120_000u64 {
        let line = if i % 50 == 7 {
            bad += 1;
            format!(
                "{i},2024-01-01 00:00:00,not a number,x,t,1,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\n"
            )
        } else {
            format!(
                "{i},2024-{:02}-{:02} {:02}:00:00{},{},{},{},{},{{a0eebc99-9c0b-4ef8-bb6d-{:012x}}}\n",
                1 + i % 12,
                1 + i % 28,
                i % 24,
                ["", "+02", ".5Z", "-05:30"][(i % 4) as usize],
                -(i as i64) * 7,
                ["Zürich", "東京", "\"a, \"\"b\"\"\"", "plain"][(i % 4) as usize],
                ["t", "no", "", "ON"][(i % 4) as usize],
                ["1.5e-3", "NaN", "-0", "12345.678"][(i % 4) as usize],
                i
            )
        };
        all.push_str(&line);
        if i % 50 != 7 {
            good.push_str(&line);
        }
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(all.as_bytes()).unwrap();
    let gz_file = d.file("events.csv.gz", &gz.finish().unwrap());
    let good_file = d.file("good.csv", good.as_bytes());
    let rejects = d.dir.join("rejects.csv");
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "s_ev",
        "--format",
        "csv",
        "--max-errors",
        "10000",
        "--rejects",
        rejects.to_str().unwrap(),
        gz_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(6), "{}", common::stderr(&out));
    d.psql_copy("p_ev", &good_file, "format csv").unwrap();
    d.assert_same_rows("s_ev", "p_ev");
    assert_eq!(d.count("s_ev"), 120_000 - bad);
}
