//! For every supported type, edge values go through both sluice and `psql \copy` into twin
//! tables, which must then hold the same rows (EXCEPT ALL both ways). PostgreSQL is the
//! reference: whatever it loads from the input, sluice must load identically.

mod common;

use common::{db, Db};

/// Writes the values as a CSV file (`id,value`), quoting only where CSV needs it, and as a
/// text-format file, then loads each through sluice and psql and compares.
fn check(test: &str, ty: &str, values: &[Option<&str>]) {
    let d = db(test);
    for (format, ext) in [("csv", "csv"), ("text", "txt")] {
        let a = format!("s_{format}");
        let b = format!("p_{format}");
        d.psql(&format!(
            "CREATE TABLE {a} (id int, v {ty}); CREATE TABLE {b} (id int, v {ty})"
        ));
        let mut body = Vec::new();
        for (i, v) in values.iter().enumerate() {
            match format {
                "csv" => {
                    body.extend_from_slice(format!("{i},").as_bytes());
                    match v {
                        None => {}
                        Some(s) if s.is_empty() || s.contains([',', '"', '\n', '\r']) => body
                            .extend_from_slice(
                                format!("\"{}\"", s.replace('"', "\"\"")).as_bytes(),
                            ),
                        Some(s) => body.extend_from_slice(s.as_bytes()),
                    }
                }
                _ => {
                    body.extend_from_slice(format!("{i}\t").as_bytes());
                    match v {
                        None => body.extend_from_slice(b"\\N"),
                        Some(s) => {
                            let esc = s
                                .replace('\\', "\\\\")
                                .replace('\t', "\\t")
                                .replace('\n', "\\n")
                                .replace('\r', "\\r");
                            body.extend_from_slice(esc.as_bytes());
                        }
                    }
                }
            }
            body.push(b'\n');
        }
        let file = d.file(&format!("{a}.{ext}"), &body);
        let f = file.to_str().unwrap();
        d.sluice_ok(&["load", "-q", "--table", &a, "--format", format, f]);
        d.psql_copy(&b, &file, &format!("format {format}"))
            .unwrap_or_else(|e| panic!("psql rejected the {ty} {format} fixture: {e}"));
        d.assert_same_rows(&a, &b);
        assert_eq!(d.count(&a), values.len() as u64);
    }
}

/// Text comparison of floats (`real`, `double precision`) must see NaN = NaN, which EXCEPT
/// ALL does (it compares with equality semantics where NaN equals NaN in PostgreSQL).
#[test]
fn smallint_integer_bigint() {
    check(
        "int2",
        "smallint",
        &[
            Some("-32768"),
            Some("32767"),
            Some("0"),
            Some(" 42 "),
            Some("+7"),
            None,
        ],
    );
    check(
        "int4",
        "integer",
        &[
            Some("-2147483648"),
            Some("2147483647"),
            Some("-0"),
            Some("007"),
            None,
        ],
    );
    check(
        "int8",
        "bigint",
        &[
            Some("-9223372036854775808"),
            Some("9223372036854775807"),
            Some("1"),
            None,
        ],
    );
}

#[test]
fn numeric_unconstrained() {
    check(
        "numeric",
        "numeric",
        &[
            Some("123456789012345678901234567890"),
            Some("-123456789012345678901234567890.123456789"),
            Some("0.000000000000000000000000000001"),
            Some("0"),
            Some("-0"),
            Some("0.00"),
            Some("000123.4500"),
            Some("1e10"),
            Some("1.5E-3"),
            Some("-2.5e+3"),
            Some(" 17954.55 "),
            Some("NaN"),
            Some("Infinity"),
            Some("-Infinity"),
            Some("inf"),
            None,
        ],
    );
}

#[test]
fn numeric_with_typmods() {
    check(
        "numeric_10_2",
        "numeric(10,2)",
        &[
            Some("12.345"),
            Some("-12.345"),
            Some("12.344"),
            Some("99999999.994"),
            Some("0.005"),
            Some("-0.005"),
            Some("7"),
            Some("NaN"),
            None,
        ],
    );
    check(
        "numeric_30_10",
        "numeric(30,10)",
        &[
            Some("12345678901234567890.1234567890"),
            Some("-12345678901234567890.12345678905"),
            Some("0.00000000005"),
        ],
    );
    check(
        "numeric_5_m2",
        "numeric(5,-2)",
        &[Some("12345"), Some("-9999949"), Some("49")],
    );
}

#[test]
fn real_and_double() {
    check(
        "float4",
        "real",
        &[
            Some("3.4028235e38"),
            Some("-3.4028235e38"),
            Some("1.17549435e-38"),
            Some("1e-45"),
            Some("3.14159"),
            Some("0"),
            Some("-0"),
            Some("NaN"),
            Some("Infinity"),
            Some("-Infinity"),
            Some("-inf"),
            Some(" 1.5 "),
            None,
        ],
    );
    check(
        "float8",
        "double precision",
        &[
            Some("1.7976931348623157e308"),
            Some("2.2250738585072014e-308"),
            Some("4.9e-324"),
            Some("0.1"),
            Some("-0"),
            Some("nan"),
            Some("infinity"),
            Some("-Infinity"),
            Some("1E5"),
            Some(".5"),
            Some("5."),
            None,
        ],
    );
}

#[test]
fn boolean_spellings() {
    check(
        "bool",
        "boolean",
        &[
            Some("t"),
            Some("true"),
            Some("TRUE"),
            Some("tr"),
            Some("y"),
            Some("yes"),
            Some("on"),
            Some("1"),
            Some("f"),
            Some("False"),
            Some("n"),
            Some("no"),
            Some("off"),
            Some("of"),
            Some("0"),
            Some(" true "),
            None,
        ],
    );
}

#[test]
fn dates() {
    check(
        "date",
        "date",
        &[
            Some("2024-02-29"),
            Some("2000-02-29"),
            Some("1900-03-01"),
            Some("0001-01-01"),
            Some("0001-12-31 BC"),
            Some("0001-02-29 BC"),
            Some("4714-11-24 BC"),
            Some("5874897-12-31"),
            Some("infinity"),
            Some("-infinity"),
            Some("epoch"),
            Some("1999-1-8"),
            // Year first with slashes: year-month-day whatever the DateStyle.
            Some("2012/01/01"),
            Some("2012/1/9"),
            Some("201/01/02"),
            Some("2010/01/02 BC"),
            // Spellings sluice leaves to the server (the same one twice: its answer is kept).
            Some("January 8, 1999"),
            Some("January 8, 1999"),
            Some("1/8/1999"),
            Some("19990108"),
            None,
        ],
    );
}

#[test]
fn times() {
    check(
        "time",
        "time",
        &[
            Some("00:00:00"),
            Some("23:59:59.999999"),
            Some("24:00:00"),
            Some("12:34"),
            Some("12:34:56.7890125"),
            Some("23:59:59.9999995"),
            Some("04:05:06 PST"),
            None,
        ],
    );
    check(
        "time2",
        "time(2)",
        &[
            Some("12:34:56.785"),
            Some("12:34:56.794999"),
            Some("12:34:56.005"),
        ],
    );
}

#[test]
fn timestamps() {
    check(
        "timestamp",
        "timestamp",
        &[
            Some("2024-02-29 12:34:56.123456"),
            Some("2000-01-01T00:00:00"),
            Some("0044-03-15 12:00:00 BC"),
            Some("294276-12-31 23:59:59.999999"),
            Some("4714-11-24 00:00:00 BC"),
            Some("infinity"),
            Some("-infinity"),
            Some("epoch"),
            Some("1999-01-08 04:05:06 +02"),
            Some("2024-01-01 00:00:00.0000005"),
            Some("2024-01-01 00:00:00.0000015"),
            Some("2024-01-01"),
            Some("2010/01/01 00:00"),
            Some("2010/1/2 3:04:05.5"),
            Some("Jan 8 1999 04:05:06"),
            None,
        ],
    );
    check(
        "timestamp3",
        "timestamp(3)",
        &[
            Some("2024-02-29 12:34:56.1235"),
            Some("1999-12-31 23:59:59.9995"),
        ],
    );
}

#[test]
fn timestamps_with_time_zones() {
    check(
        "timestamptz",
        "timestamptz",
        &[
            Some("2024-02-29 12:34:56+05:30"),
            Some("2024-02-29 12:34:56 -0800"),
            Some("2000-01-01 00:00:00Z"),
            Some("1999-12-31 23:59:59.999999-08"),
            Some("2024-07-01 12:00:00"),
            Some("2024-01-15 12:00:00"),
            // America/New_York's spring-forward gap and fall-back overlap.
            Some("2024-03-10 02:30:00"),
            Some("2024-11-03 01:30:00"),
            Some("1883-11-18 12:00:00"),
            Some("0044-03-15 12:00:00+00 BC"),
            Some("infinity"),
            Some("-infinity"),
            Some("2024-06-01 12:00:00 America/Los_Angeles"),
            Some("2024-06-01 12:00:00 UTC"),
            None,
        ],
    );
}

#[test]
fn character_types() {
    check(
        "bpchar",
        "char(5)",
        &[
            Some("ab"),
            Some("abcde"),
            Some("abcde   "),
            Some(""),
            Some("é"),
            Some("日本"),
            None,
        ],
    );
    check(
        "varchar",
        "varchar(5)",
        &[
            Some("abcde   "),
            Some("日本語"),
            Some(""),
            Some("a b"),
            Some("ü"),
            None,
        ],
    );
    check(
        "text",
        "text",
        &[
            Some(""),
            Some("multi-byte ü 日本 🎉"),
            Some("quoted \"x\", with comma"),
            Some("new\nline"),
            Some("crlf\r\nin the value"),
            Some("tab\there"),
            Some("back\\slash \\N"),
            Some("  spaces  "),
            Some("\\."),
            None,
        ],
    );
}

#[test]
fn bytea_uuid_json() {
    check(
        "bytea",
        "bytea",
        &[
            Some("\\xdeadbeef"),
            Some("\\x"),
            Some("\\xDE AD"),
            Some("abc\\\\def"),
            Some("\\001\\377x"),
            None,
        ],
    );
    check(
        "uuid",
        "uuid",
        &[
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Some("{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12}"),
            Some("a0eebc999c0b4ef8bb6d6bb9bd380a13"),
            Some("a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a14"),
            None,
        ],
    );
    let json = [
        Some(r#"{"a": [1, 2.5e300, "x"], "b": null}"#),
        Some(r#""str""#),
        Some("null"),
        Some(r#"  {"dup": 1, "dup": 2} "#),
        Some(r#"{"u": "\u00e9 日本"}"#),
        None,
    ];
    check("json", "json", &json);
    check("jsonb", "jsonb", &json);
}

#[test]
fn types_the_server_converts() {
    // interval and inet are not converted by sluice: the table loads through text COPY.
    let d: Db = db("server_types");
    d.psql("CREATE TABLE s (id int, i interval, n inet, v varchar(3)); CREATE TABLE p (LIKE s)");
    let file = d.file(
        "x.csv",
        b"1,1 day 02:00,10.0.0.1/8,abc\n2,,::1,\n3,P1Y2M,192.168.0.1,\"\"\n",
    );
    let out = d.sluice_ok(&["load", "-q", "--table", "s", file.to_str().unwrap()]);
    assert!(out.contains("loads through text COPY"), "{out}");
    assert!(out.contains("i (interval)"), "{out}");
    d.psql_copy("p", &file, "format csv").unwrap();
    d.assert_same_rows("s", "p");
}
