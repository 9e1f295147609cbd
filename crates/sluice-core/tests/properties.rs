//! Property tests of the record splitter and the chunk boundary finder (issue 11), on
//! generated CSV and text with quotes, escapes, CRLF and multibyte characters:
//! - parsing a whole input gives the records it was written from (and, for CSV, the same
//!   records as the `csv` crate);
//! - cutting the input anywhere the boundary finder allows, and parsing both sides alone,
//!   gives the same records as not cutting.

use proptest::prelude::*;
use sluice_core::boundary::{count_quotes, next_record_start};
use sluice_core::dialect::{Dialect, Format, LineEnding};
use sluice_core::records::{Fields, RecordParser, Step};

/// A record as parsed: each field's bytes (`None` for NULL).
type Record = Vec<Option<Vec<u8>>>;

/// Every record of `bytes`, parsed as a whole input.
fn parse_all(d: &Dialect, bytes: &[u8]) -> Vec<Record> {
    let parser = RecordParser::new(d);
    let mut fields = Fields::new();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        match parser
            .parse(bytes, at, true, &mut fields)
            .expect("no syntax error")
        {
            Step::Record { end, .. } => {
                out.push(
                    (0..fields.len())
                        .map(|i| fields.get(i, bytes).map(<[u8]>::to_vec))
                        .collect(),
                );
                at = end;
            }
            Step::End => return out,
            Step::NeedMore => panic!("NeedMore at the end of the input"),
        }
    }
}

/// Parses `bytes` cut at the record start the boundary finder picks at or after `cut`.
fn parse_cut(d: &Dialect, bytes: &[u8], cut: usize) -> Vec<Record> {
    if cut == 0 || cut >= bytes.len() {
        return parse_all(d, bytes);
    }
    let quoted = d.format == Format::Csv && count_quotes(&bytes[..cut], d.quote) % 2 == 1;
    let Some(start) = next_record_start(d, &bytes[cut..], 0, quoted) else {
        return parse_all(d, bytes);
    };
    let at = cut + start;
    let mut records = parse_all(d, &bytes[..at]);
    records.extend(parse_all(d, &bytes[at..]));
    records
}

fn csv_field() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("a"),
            Just("Z9"),
            Just(","),
            Just("\""),
            Just("\n"),
            Just("\r"),
            Just("\r\n"),
            Just(" "),
            Just("é"),
            Just("日本"),
            Just("\u{1F600}"),
        ],
        0..6,
    )
    .prop_map(|parts| parts.concat())
}

/// Writes a CSV field as PostgreSQL and the `csv` crate read it.
fn write_csv_field(v: &str, only: bool) -> String {
    if v.contains([',', '"', '\n', '\r']) || (v.is_empty() && only) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

fn text_field() -> impl Strategy<Value = Option<String>> {
    proptest::option::weighted(
        0.9,
        proptest::collection::vec(
            prop_oneof![
                Just("a"),
                Just("\\"),
                Just("\t"),
                Just("\n"),
                Just("\r"),
                Just("é"),
                Just("N"),
                Just("."),
            ],
            0..6,
        )
        .prop_map(|parts| parts.concat()),
    )
}

/// Writes a text-format field: backslash escapes for the delimiter, line ends and backslash.
fn write_text_field(v: &Option<String>) -> String {
    match v {
        None => "\\N".into(),
        Some(v) => v
            .replace('\\', "\\\\")
            .replace('\t', "\\t")
            .replace('\n', "\\n")
            .replace('\r', "\\r"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn csv_records_survive_any_allowed_cut(
        records in proptest::collection::vec(proptest::collection::vec(csv_field(), 1..5), 1..12),
        crlf in any::<bool>(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..6),
    ) {
        let end = if crlf { "\r\n" } else { "\n" };
        let text: String = records
            .iter()
            .map(|r| {
                let fields: Vec<String> =
                    r.iter().map(|f| write_csv_field(f, r.len() == 1)).collect();
                fields.join(",") + end
            })
            .collect();
        let bytes = text.as_bytes();
        let mut d = Dialect::new(Format::Csv);
        d.line_ending = if crlf { LineEnding::CrLf } else { LineEnding::Lf };
        let whole = parse_all(&d, bytes);
        // The records written, with NULL (an unquoted empty field) read as empty.
        let as_written: Vec<Vec<Vec<u8>>> = records
            .iter()
            .map(|r| r.iter().map(|f| f.as_bytes().to_vec()).collect())
            .collect();
        let flat = |rs: &[Record]| -> Vec<Vec<Vec<u8>>> {
            rs.iter()
                .map(|r| r.iter().map(|f| f.clone().unwrap_or_default()).collect())
                .collect()
        };
        prop_assert_eq!(&flat(&whole), &as_written);
        // The csv crate reads the same records.
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(bytes);
        let theirs: Vec<Vec<Vec<u8>>> = reader
            .byte_records()
            .map(|r| r.unwrap().iter().map(<[u8]>::to_vec).collect())
            .collect();
        prop_assert_eq!(&flat(&whole), &theirs);
        for cut in cuts {
            let at = cut.index(bytes.len() + 1);
            prop_assert_eq!(&parse_cut(&d, bytes, at), &whole, "cut at {}", at);
        }
    }

    #[test]
    fn text_records_survive_any_allowed_cut(
        records in proptest::collection::vec(proptest::collection::vec(text_field(), 1..5), 1..12),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..6),
    ) {
        let text: String = records
            .iter()
            .map(|r| r.iter().map(write_text_field).collect::<Vec<_>>().join("\t") + "\n")
            .collect();
        let bytes = text.as_bytes();
        let d = Dialect::new(Format::Text);
        let whole = parse_all(&d, bytes);
        let as_written: Vec<Record> = records
            .iter()
            .map(|r| r.iter().map(|f| f.as_ref().map(|s| s.as_bytes().to_vec())).collect())
            .collect();
        prop_assert_eq!(&whole, &as_written);
        for cut in cuts {
            let at = cut.index(bytes.len() + 1);
            prop_assert_eq!(&parse_cut(&d, bytes, at), &whole, "cut at {}", at);
        }
    }

    #[test]
    fn the_parser_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        format in prop_oneof![Just(Format::Csv), Just(Format::Text), Just(Format::Tbl)],
    ) {
        let d = Dialect::new(format);
        let parser = RecordParser::new(&d);
        let mut fields = Fields::new();
        let mut at = 0;
        while let Ok(Step::Record { end, .. }) = parser.parse(&bytes, at, true, &mut fields) {
            prop_assert!(end > at && end <= bytes.len());
            for i in 0..fields.len() {
                let _ = fields.get(i, &bytes);
            }
            at = end;
        }
    }
}
