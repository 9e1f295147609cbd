//! Records to the canonical `LOAD DATA` stream, with MariaDB's strict-mode rules checked on
//! the client.
//!
//! The stream has one spelling for everything, whatever the session's `sql_mode`: fields end
//! with a tab, records with a newline, a backslash escapes (`\\`, `\t`, `\n`, `\r`, `\0`), `\N`
//! is NULL, and the bytes are utf8mb4. The `LOAD DATA` statement says all of it explicitly
//! (`stream.rs`), so the server cannot read a byte two ways. One record is one line: a rows
//! count is a newline count.
//!
//! A value of a type sluice checks (integers, `DECIMAL(p,s)`, `DATE`, `DATETIME`, `TIMESTAMP`,
//! `CHAR`/`VARCHAR` in utf8mb4, `ENUM`/`SET`, `YEAR`, `FLOAT`/`DOUBLE`, `TIME`, `BIT`, `JSON`) is
//! refused here with the message the PostgreSQL destination gives for the same fault, or written in
//! its canonical form (an integer's digits, a decimal rounded half away from zero to its scale as
//! MariaDB rounds, so the server has nothing to round and no note to raise). A spelling sluice does
//! not parse (`20240101`, ` 12`, `1e3`) is declined, never decided: it goes to the server as
//! written, whose conversion the warning trap watches.

use super::column::{Column, ColumnType};
use super::json;
use super::members::{self, Verdict};
use super::scalar::{self, Checked};
use sluice_core::error::{RecordError, RecordErrorKind};
use sluice_core::primitives::{days_in_month, parse_decimal, MONTH_NAMES};
use sluice_core::records::Fields;

/// Why a value is refused: the server would refuse it too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

pub(super) fn invalid(reason: impl Into<String>) -> Invalid {
    Invalid(reason.into())
}

/// One table's converter: its columns in field order.
pub struct Converter {
    columns: Vec<Column>,
    /// Each column's type name as messages give it (`int unsigned`, `decimal(15,2)`).
    names: Vec<String>,
    scratch: Vec<u8>,
}

/// How one value goes on the wire.
enum Canonical<'a> {
    /// The input's bytes, escaped.
    Raw(&'a [u8]),
    /// A rewritten spelling (already in `scratch`), escaped.
    Rewritten,
}

impl Converter {
    pub fn new(columns: Vec<Column>) -> Converter {
        let names = columns.iter().map(|c| message_name(&c.type_name)).collect();
        Converter {
            columns,
            names,
            scratch: Vec::new(),
        }
    }

    /// Appends one record's line to `out`; on error `out` is left as it was.
    pub fn encode_record(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        RecordError::check_field_count(fields.len(), self.columns.len())?;
        let rollback = out.len();
        for i in 0..self.columns.len() {
            if i > 0 {
                out.push(b'\t');
            }
            if let Err(kind) = self.encode_one(i, fields.get(i, input), out) {
                out.truncate(rollback);
                return Err(RecordError {
                    column: Some(i),
                    kind,
                    value: fields.get(i, input).map(<[u8]>::to_vec),
                });
            }
        }
        out.push(b'\n');
        Ok(())
    }

    fn encode_one(
        &mut self,
        i: usize,
        value: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordErrorKind> {
        let Some(v) = value else {
            if self.columns[i].not_null {
                return Err(RecordErrorKind::NotNull);
            }
            out.extend_from_slice(b"\\N");
            return Ok(());
        };
        match self.canonical(i, v) {
            Ok(Canonical::Raw(b)) => escape(b, out),
            Ok(Canonical::Rewritten) => escape(&self.scratch, out),
            Err(Invalid(reason)) => return Err(RecordErrorKind::Value(reason)),
        }
        Ok(())
    }

    /// Column `column`'s value in its canonical escaped form, for matching a key the server
    /// names; `None` when the value is refused.
    pub fn encode_field(&mut self, column: usize, raw: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_one(column, Some(raw), &mut out).ok()?;
        Some(out)
    }

    fn canonical<'a>(&mut self, i: usize, v: &'a [u8]) -> Result<Canonical<'a>, Invalid> {
        let name = &self.names[i];
        match &self.columns[i].ty {
            ColumnType::Integer { min, max } => integer(v, *min, *max, name, &mut self.scratch)
                .map(|rewritten| match rewritten {
                    true => Canonical::Rewritten,
                    false => Canonical::Raw(v),
                }),
            ColumnType::Decimal { precision, scale } => {
                decimal(v, *precision, *scale, &mut self.scratch).map(|rewritten| match rewritten {
                    true => Canonical::Rewritten,
                    false => Canonical::Raw(v),
                })
            }
            ColumnType::Date => date(v).map(|_| Canonical::Raw(v)),
            ColumnType::DateTime => datetime(v).map(|_| Canonical::Raw(v)),
            ColumnType::Timestamp(rule) => match datetime(v)? {
                Some(moment) => scalar::timestamp(&moment, rule).map(|_| Canonical::Raw(v)),
                None => Ok(Canonical::Raw(v)),
            },
            ColumnType::Bit { bits } => scalar::bit(v, *bits, name).map(|_| Canonical::Raw(v)),
            ColumnType::Json => json::check(utf8(v)?.as_bytes()).map(|_| Canonical::Raw(v)),
            ColumnType::Chars { max } => chars(v, *max, name).map(Canonical::Raw),
            ColumnType::Enum { members, fold } => {
                member(members::enum_value(v, members, *fold), name).map(|_| Canonical::Raw(v))
            }
            ColumnType::Set { members, fold } => {
                member(members::set_value(v, members, *fold), name).map(|_| Canonical::Raw(v))
            }
            ColumnType::Year => scalar::year(v).map(|_| Canonical::Raw(v)),
            ColumnType::Float { double } => {
                scalar::float(v, *double, name).map(|_| Canonical::Raw(v))
            }
            ColumnType::Time { fsp } => scalar::time(v, *fsp).map(|_| Canonical::Raw(v)),
            ColumnType::Server => Ok(Canonical::Raw(v)),
        }
    }
}

/// An `ENUM` or `SET` value that is no member of the column's list is refused.
fn member(verdict: Verdict, name: &str) -> Result<Checked, Invalid> {
    match verdict {
        Verdict::NotAMember => Err(invalid(format!("not a value of {name}"))),
        Verdict::Member => Ok(Checked::Valid),
        Verdict::Server => Ok(Checked::Server),
    }
}

/// `int(11) unsigned` as messages name it: `int unsigned`; an `ENUM`'s or `SET`'s members as
/// the column spells them (`enum('A','b')`), cut after about 60 characters.
fn message_name(type_name: &str) -> String {
    let lower = type_name.to_ascii_lowercase();
    let base = lower.split('(').next().unwrap_or(&lower).trim().to_string();
    let is_int = ["tinyint", "smallint", "mediumint", "int", "bigint"].contains(&base.as_str());
    match (is_int, lower.contains("unsigned")) {
        (true, true) => format!("{base} unsigned"),
        (true, false) => base,
        (false, _) if base == "enum" || base == "set" => members_named(&base, type_name),
        (false, _) => lower,
    }
}

/// `enum('A','b')` with its members as written, the list cut (`...)`) past 60 characters.
fn members_named(base: &str, type_name: &str) -> String {
    let list = type_name.split_once('(').map_or("", |(_, rest)| rest);
    match list.char_indices().nth(60) {
        None => format!("{base}({list}"),
        Some((cut, _)) => format!("{base}({}...)", &list[..cut]),
    }
}

/// Writes `v` escaped for the canonical stream (`ESCAPED BY '\\'`, NUL as `\0`).
pub fn escape(v: &[u8], out: &mut Vec<u8>) {
    sluice_core::records::escape_text(v, out, true)
}

/// Whether `v` holds a byte no number of any spelling has: then the server refuses it too.
fn not_numeric(v: &[u8]) -> bool {
    v.is_empty()
        || v.iter()
            .any(|&b| !(b.is_ascii_digit() || b" +-.eE\t".contains(&b)))
}

/// An integer: `[+-]digits` is checked against the range and written as plain digits
/// (`true`: rewritten into `scratch`); another numeric-looking spelling goes to the server.
fn integer(
    v: &[u8],
    min: i128,
    max: i128,
    name: &str,
    scratch: &mut Vec<u8>,
) -> Result<bool, Invalid> {
    let (negative, digits) = match v {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, v),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        if not_numeric(v) {
            return Err(invalid(format!("not a valid {name}")));
        }
        return Ok(false);
    }
    let mut n: i128 = 0;
    for &d in digits {
        n = n * 10 + i128::from(d - b'0');
        if n > max.max(-min) + 1 {
            break;
        }
    }
    let n = if negative { -n } else { n };
    if n < min || n > max {
        return Err(invalid(format!("out of range for {name} ({min} to {max})")));
    }
    scratch.clear();
    scratch.extend_from_slice(n.to_string().as_bytes());
    Ok(true)
}

/// A decimal: `[+-]digits[.digits]` rounded half away from zero to `scale` and checked
/// against the precision, written with exactly `scale` fractional digits (`true`: rewritten
/// into `scratch`); an exponent or spaces go to the server.
fn decimal(v: &[u8], precision: u32, scale: u32, scratch: &mut Vec<u8>) -> Result<bool, Invalid> {
    let (negative, body) = match v {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, v),
    };
    let plain = !body.is_empty()
        && body.iter().all(|&b| b.is_ascii_digit() || b == b'.')
        && body.iter().filter(|&&b| b == b'.').count() <= 1
        && body.iter().any(u8::is_ascii_digit);
    if !plain {
        if not_numeric(v) || body.iter().filter(|&&b| b == b'.').count() > 1 {
            return Err(invalid("not a valid number"));
        }
        return Ok(false);
    }
    let mut digits = Vec::new();
    let Some(mut dec) = parse_decimal(negative, body, &mut digits, 1000) else {
        return Err(invalid("not a valid number"));
    };
    dec.round_to_scale(i64::from(scale));
    let int_digits = if dec.digits.is_empty() {
        0
    } else {
        dec.point.max(0)
    };
    let room = i64::from(precision - scale);
    if int_digits > room {
        return Err(invalid(format!(
            "numeric field overflow: decimal({precision},{scale}) must round to an absolute \
             value less than 10^{room}"
        )));
    }
    scratch.clear();
    if dec.negative && !dec.digits.is_empty() {
        scratch.push(b'-');
    }
    let digit_at = |k: i64| -> u8 {
        // Digit k counts from the first significant one, which stands just right of the point.
        if k < 0 || k >= dec.digits.len() as i64 {
            b'0'
        } else {
            b'0' + dec.digits[k as usize]
        }
    };
    if int_digits == 0 {
        scratch.push(b'0');
    } else {
        for k in 0..int_digits {
            scratch.push(digit_at(k));
        }
    }
    if scale > 0 {
        scratch.push(b'.');
        for f in 0..i64::from(scale) {
            scratch.push(digit_at(dec.point + f));
        }
    }
    Ok(true)
}

/// `YYYY-MM-DD`: checked when year, month and day are all non-zero; zero dates, zero parts and
/// other spellings are the server's (its `sql_mode` decides them).
fn date(v: &[u8]) -> Result<(), Invalid> {
    let Some((y, m, d)) = ymd(v) else {
        return Ok(());
    };
    check_date(y, m, d)
}

fn ymd(v: &[u8]) -> Option<(i64, i64, i64)> {
    if v.len() != 10 || v[4] != b'-' || v[7] != b'-' {
        return None;
    }
    let num = |s: &[u8]| -> Option<i64> {
        s.iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    Some((num(&v[0..4])?, num(&v[5..7])?, num(&v[8..10])?))
}

fn check_date(y: i64, m: i64, d: i64) -> Result<(), Invalid> {
    if y == 0 || m == 0 || d == 0 {
        return Ok(());
    }
    if m > 12 {
        return Err(invalid(format!(
            "month {m} does not exist (months are 1 to 12)"
        )));
    }
    let dim = days_in_month(y, m);
    if d > dim {
        return Err(invalid(format!(
            "{} {y} has {dim} days, not {d}",
            MONTH_NAMES[(m - 1) as usize]
        )));
    }
    Ok(())
}

/// A date and time of day as written, checked against the calendar and the clock.
pub struct Moment {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    /// Seconds since midnight.
    pub second_of_day: i64,
    /// Whether a fraction of a second other than zero follows.
    pub fraction: bool,
}

/// `YYYY-MM-DD[ T]HH:MM:SS[.ffffff]` or a date alone: the date as [`date`], the time of day
/// in range, and the moment read; other spellings are the server's (`None`).
fn datetime(v: &[u8]) -> Result<Option<Moment>, Invalid> {
    if v.len() == 10 {
        date(v)?;
        return Ok(ymd(v).map(|(year, month, day)| Moment {
            year,
            month,
            day,
            second_of_day: 0,
            fraction: false,
        }));
    }
    if v.len() < 19 || !(v[10] == b' ' || v[10] == b'T') || v[13] != b':' || v[16] != b':' {
        return Ok(None);
    }
    let Some((y, m, d)) = ymd(&v[..10]) else {
        return Ok(None);
    };
    let two = |s: &[u8]| -> Option<i64> {
        (s[0].is_ascii_digit() && s[1].is_ascii_digit())
            .then(|| i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'))
    };
    let (Some(h), Some(mi), Some(s)) = (two(&v[11..13]), two(&v[14..16]), two(&v[17..19])) else {
        return Ok(None);
    };
    let frac = &v[19..];
    let frac_ok = frac.is_empty()
        || (frac[0] == b'.' && frac.len() <= 7 && frac[1..].iter().all(u8::is_ascii_digit));
    if !frac_ok {
        return Ok(None);
    }
    check_date(y, m, d)?;
    if h > 23 || mi > 59 || s > 59 {
        return Err(invalid(format!(
            "time {h:02}:{mi:02}:{s:02} is out of range"
        )));
    }
    Ok(Some(Moment {
        year: y,
        month: m,
        day: d,
        second_of_day: h * 3600 + mi * 60 + s,
        fraction: frac.iter().any(|&b| (b'1'..=b'9').contains(&b)),
    }))
}

/// `v` as UTF-8, or why not (the server refuses it for a utf8mb4 column too).
fn utf8(v: &[u8]) -> Result<&str, Invalid> {
    std::str::from_utf8(v).map_err(|e| {
        invalid(format!(
            "invalid UTF-8: byte {} of the value starts a malformed sequence",
            e.valid_up_to() + 1
        ))
    })
}

/// `CHAR(n)`/`VARCHAR(n)` in utf8mb4: valid UTF-8 of at most `max` characters; trailing spaces
/// past `max` are cut, as the server cuts them.
fn chars<'a>(v: &'a [u8], max: u32, name: &str) -> Result<&'a [u8], Invalid> {
    let s = utf8(v)?;
    if v.len() <= max as usize {
        return Ok(v);
    }
    let Some((cut, _)) = s.char_indices().nth(max as usize) else {
        return Ok(v);
    };
    if v[cut..].iter().all(|&b| b == b' ') {
        return Ok(&v[..cut]);
    }
    Err(invalid(format!(
        "value too long for type {name}: {} characters",
        s.chars().count()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(ty: ColumnType, type_name: &str) -> Column {
        Column {
            name: "c".into(),
            type_name: type_name.into(),
            ty,
            not_null: false,
        }
    }

    fn one(ty: ColumnType, type_name: &str, v: &str) -> Result<String, String> {
        let mut c = Converter::new(vec![col(ty, type_name)]);
        match c.canonical(0, v.as_bytes()) {
            Ok(Canonical::Raw(b)) => Ok(String::from_utf8(b.to_vec()).unwrap()),
            Ok(Canonical::Rewritten) => Ok(String::from_utf8(c.scratch.clone()).unwrap()),
            Err(Invalid(r)) => Err(r),
        }
    }

    #[test]
    fn integers_check_signed_and_unsigned_ranges() {
        let int = ColumnType::Integer {
            min: -2147483648,
            max: 2147483647,
        };
        assert_eq!(one(int.clone(), "int(11)", "+0042"), Ok("42".into()));
        assert_eq!(
            one(int.clone(), "int(11)", "-2147483648"),
            Ok("-2147483648".into())
        );
        assert_eq!(
            one(int.clone(), "int(11)", "2147483648"),
            Err("out of range for int (-2147483648 to 2147483647)".into())
        );
        assert_eq!(
            one(int.clone(), "int(11)", "12x"),
            Err("not a valid int".into())
        );
        assert_eq!(
            one(int.clone(), "int(11)", ""),
            Err("not a valid int".into())
        );
        // Declined, not decided: the server has its own rules for these.
        assert_eq!(one(int, "int(11)", " 12"), Ok(" 12".into()));
        let u = ColumnType::Integer {
            min: 0,
            max: u64::MAX as i128,
        };
        assert_eq!(
            one(u.clone(), "bigint(20) unsigned", "18446744073709551615"),
            Ok("18446744073709551615".into())
        );
        assert_eq!(
            one(u.clone(), "bigint(20) unsigned", "-1"),
            Err("out of range for bigint unsigned (0 to 18446744073709551615)".into())
        );
        assert!(one(
            u,
            "bigint(20) unsigned",
            "99999999999999999999999999999999999999999"
        )
        .unwrap_err()
        .contains("out of range"));
    }

    #[test]
    fn decimals_round_half_away_from_zero_and_check_precision() {
        let d = ColumnType::Decimal {
            precision: 5,
            scale: 2,
        };
        let t = "decimal(5,2)";
        assert_eq!(one(d.clone(), t, "1.005"), Ok("1.01".into()));
        assert_eq!(one(d.clone(), t, "-1.005"), Ok("-1.01".into()));
        assert_eq!(one(d.clone(), t, "7"), Ok("7.00".into()));
        assert_eq!(one(d.clone(), t, ".5"), Ok("0.50".into()));
        assert_eq!(one(d.clone(), t, "-0.001"), Ok("0.00".into()));
        assert_eq!(one(d.clone(), t, "999.994"), Ok("999.99".into()));
        assert_eq!(
            one(d.clone(), t, "999.995"),
            Err(
                "numeric field overflow: decimal(5,2) must round to an absolute value less \
                 than 10^3"
                    .into()
            )
        );
        assert_eq!(one(d.clone(), t, "1.2.3"), Err("not a valid number".into()));
        assert_eq!(one(d.clone(), t, "abc"), Err("not a valid number".into()));
        assert_eq!(one(d, t, "1e2"), Ok("1e2".into()));
    }

    #[test]
    fn dates_check_the_calendar_and_leave_zero_dates_to_the_server() {
        assert_eq!(
            one(ColumnType::Date, "date", "2024-02-29"),
            Ok("2024-02-29".into())
        );
        assert_eq!(
            one(ColumnType::Date, "date", "2023-02-29"),
            Err("February 2023 has 28 days, not 29".into())
        );
        assert_eq!(
            one(ColumnType::Date, "date", "2023-13-01"),
            Err("month 13 does not exist (months are 1 to 12)".into())
        );
        assert_eq!(
            one(ColumnType::Date, "date", "0000-00-00"),
            Ok("0000-00-00".into())
        );
        assert_eq!(
            one(ColumnType::Date, "date", "20240101"),
            Ok("20240101".into())
        );
        let dt = |v| one(ColumnType::DateTime, "datetime(6)", v);
        assert_eq!(
            dt("2024-01-01 23:59:59.123456"),
            Ok("2024-01-01 23:59:59.123456".into())
        );
        assert_eq!(
            dt("2024-01-01 24:00:00"),
            Err("time 24:00:00 is out of range".into())
        );
        assert_eq!(
            dt("2024-04-31T01:00:00"),
            Err("April 2024 has 30 days, not 31".into())
        );
    }

    #[test]
    fn chars_count_characters_and_cut_trailing_spaces() {
        let v = ColumnType::Chars { max: 3 };
        assert_eq!(one(v.clone(), "varchar(3)", "äöü"), Ok("äöü".into()));
        assert_eq!(one(v.clone(), "varchar(3)", "abc   "), Ok("abc".into()));
        assert_eq!(
            one(v.clone(), "varchar(3)", "abcd"),
            Err("value too long for type varchar(3): 4 characters".into())
        );
        assert!(one(v, "varchar(3)", "a\u{fffd}").is_ok());
        let mut c = Converter::new(vec![col(ColumnType::Chars { max: 3 }, "varchar(3)")]);
        assert!(c.canonical(0, b"a\xff").is_err());
    }

    #[test]
    fn escaping_makes_one_line_per_record() {
        let mut out = Vec::new();
        escape(b"a\tb\nc\\d\re\0", &mut out);
        assert_eq!(out, b"a\\tb\\nc\\\\d\\re\\0");
    }
}
