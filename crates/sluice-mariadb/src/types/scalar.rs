//! `YEAR`, `FLOAT`/`DOUBLE`, `TIME`, `TIMESTAMP` and `BIT` values, checked as MariaDB's strict
//! mode checks them
//! (each rule below was compared with the server's own `LOAD DATA INFILE`; the tests load
//! both). A spelling outside the forms parsed here goes to the server as written.

use super::column::TimestampRule;
use super::convert::{invalid, Invalid, Moment};
use sluice_core::primitives::julian_day;

/// What sluice makes of a value: sent as written, or the server's to decide.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    Valid,
    Server,
}

/// `YEAR`: digits only. 0 to 99 (two-digit years: `0001` is 2001, `0` and `00` are 2000,
/// `0000` is the zero year) and 1901 to 2155 are years; 100 to 1900 and past 2155 are out of
/// range. Which year a short one means is the server's: sluice sends the digits as written.
pub fn year(v: &[u8]) -> Result<Checked, Invalid> {
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return Ok(Checked::Server);
    }
    let n = v.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    match n <= 99 || (1901..=2155).contains(&n) {
        true => Ok(Checked::Valid),
        false => Err(invalid(format!(
            "out of range for year ({n}: 1901 to 2155)"
        ))),
    }
}

/// `FLOAT` or `DOUBLE` (without `(M,D)`): `[+-]digits[.digits][e[+-]digits]` (or `.digits`),
/// correctly rounded; beyond the type's largest finite value it is out of range. Bytes no
/// number has (`abc`, `inf`, `NaN`, empty) are refused; other spellings (spaces) are the
/// server's.
pub fn float(v: &[u8], double: bool, name: &str) -> Result<Checked, Invalid> {
    if !plain_number(v) {
        let numberish = !v.is_empty() && v.iter().all(|b| b" +-.eE0123456789\t".contains(b));
        return match numberish {
            true => Ok(Checked::Server),
            false => Err(invalid(format!("not a valid {name}"))),
        };
    }
    let x: f64 = std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("not a valid {name}")))?;
    let max = if double {
        f64::MAX
    } else {
        f64::from(f32::MAX)
    };
    match x.is_finite() && x.abs() <= max {
        true => Ok(Checked::Valid),
        false => Err(invalid(format!("out of range for {name}"))),
    }
}

/// `[+-](digits[.digits*]|.digits)([eE][+-]digits)?`.
fn plain_number(v: &[u8]) -> bool {
    let body = v.strip_prefix(b"-").or(v.strip_prefix(b"+")).unwrap_or(v);
    let (mantissa, exponent) = match body.iter().position(|&b| b == b'e' || b == b'E') {
        Some(p) => (&body[..p], Some(&body[p + 1..])),
        None => (body, None),
    };
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(p) => (&mantissa[..p], &mantissa[p + 1..]),
        None => (mantissa, &[][..]),
    };
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    let mantissa_ok = digits(int) && digits(frac) && !(int.is_empty() && frac.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(b"-").or(e.strip_prefix(b"+")).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// `TIME(fsp)`: `[-]H:MM:SS[.f]` with one to three digits of hours; minutes and seconds past
/// 59, or more than 838 hours, are refused. A fraction longer than `fsp` (which the server
/// rounds, with a note), the limit with a fraction, and other spellings (days, no colons) are
/// the server's.
pub fn time(v: &[u8], fsp: u32) -> Result<Checked, Invalid> {
    let body = v.strip_prefix(b"-").unwrap_or(v);
    let (clock, frac) = match body.iter().position(|&b| b == b'.') {
        Some(p) => (&body[..p], &body[p + 1..]),
        None => (body, &[][..]),
    };
    let parts: Vec<&[u8]> = clock.split(|&b| b == b':').collect();
    let num = |s: &[u8]| -> Option<u32> {
        (!s.is_empty() && s.iter().all(u8::is_ascii_digit))
            .then(|| s.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
    };
    let [h, m, s] = parts[..] else {
        return Ok(Checked::Server);
    };
    let frac_ok = frac.len() <= fsp as usize && frac.iter().all(u8::is_ascii_digit);
    let (Some(h), Some(m), Some(s)) = (num(h), num(m), num(s)) else {
        return Ok(Checked::Server);
    };
    let two = |p: &[u8]| p.len() == 2;
    if parts[0].len() > 3 || !two(parts[1]) || !two(parts[2]) || !frac_ok {
        return Ok(Checked::Server);
    }
    if m > 59 || s > 59 || h > 838 {
        return Err(invalid(format!(
            "time {h}:{m:02}:{s:02} is out of range (-838:59:59 to 838:59:59, minutes and \
             seconds below 60)"
        )));
    }
    let at_limit = (h, m, s) == (838, 59, 59) && frac.iter().any(|&d| d != b'0');
    match at_limit {
        true => Ok(Checked::Server),
        false => Ok(Checked::Valid),
    }
}

/// The Julian day of 1970-01-01.
const UNIX_EPOCH_DAY: i64 = 2_440_588;

/// A longest offset from UTC a time zone has had since 1970 is 14 hours: a day is past any.
const ANY_ZONE: i64 = 86_400;

/// `TIMESTAMP`: a moment (its calendar already checked) from 1970-01-01 00:00:01 UTC to the
/// rule's last second, read in the session's time zone. With a fraction of a second, the
/// seconds each side of it are in or out depending on whether the server rounds
/// (`TIME_ROUND_FRACTIONAL`): those are the server's. In a zone with rules (summer time),
/// anything within a day of the range is the server's. Zero dates are the server's
/// (`sql_mode` decides them).
pub fn timestamp(m: &Moment, rule: &TimestampRule) -> Result<Checked, Invalid> {
    if m.year == 0 || m.month == 0 || m.day == 0 {
        return Ok(Checked::Server);
    }
    let local = (julian_day(m.year, m.month, m.day) - UNIX_EPOCH_DAY) * 86_400 + m.second_of_day;
    let (earliest, latest) = match rule.offset {
        Some(offset) => (local - offset, local - offset),
        None => (local - ANY_ZONE, local + ANY_ZONE),
    };
    let latest = latest + i64::from(m.fraction);
    if latest < 1 || earliest > rule.max {
        return Err(invalid(format!(
            "out of range for timestamp (1970-01-01 00:00:01 to {} UTC, read in the session's \
             time zone, {})",
            utc_text(rule.max),
            rule.zone
        )));
    }
    match earliest >= 1 && latest <= rule.max {
        true => Ok(Checked::Valid),
        false => Ok(Checked::Server),
    }
}

/// The rule's last second as UTC text (it is one of two).
fn utc_text(seconds: i64) -> &'static str {
    match seconds == i64::from(i32::MAX) {
        true => "2038-01-19 03:14:07",
        false => "2106-02-07 06:28:15",
    }
}

/// `BIT(M)`: `LOAD DATA` stores the field's bytes as they are (leading zero bytes dropped),
/// right-aligned in `M` bits; more bits than `M` is too long. The text `101` is three bytes,
/// not five: the server's own `LOAD DATA INFILE` refuses it for `BIT(8)` too.
pub fn bit(v: &[u8], bits: u32, name: &str) -> Result<Checked, Invalid> {
    let start = v.iter().position(|&b| b != 0).unwrap_or(v.len());
    let v = &v[start..];
    let (whole, rest) = ((bits / 8) as usize, bits % 8);
    let fits =
        v.len() <= whole || (rest > 0 && v.len() == whole + 1 && u32::from(v[0]) < 1 << rest);
    if fits {
        return Ok(Checked::Valid);
    }
    let hex: String = v.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let more = if v.len() > 8 { "..." } else { "" };
    let significant = (v.len() - 1) * 8 + (8 - v[0].leading_zeros() as usize);
    Err(invalid(format!(
        "value too long for type {name}: LOAD DATA stores a bit value's bytes as they are, \
         and 0x{hex}{more} has {significant} significant bits where the column holds {bits}; \
         write the value's bytes, not its digits"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Result<Checked, Invalid>) -> String {
        match r {
            Err(Invalid(why)) => why,
            Ok(c) => panic!("accepted: {c:?}"),
        }
    }

    fn moment(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, fraction: bool) -> Moment {
        Moment {
            year: y,
            month: mo,
            day: d,
            second_of_day: h * 3600 + mi * 60 + s,
            fraction,
        }
    }

    #[test]
    fn timestamps_fit_the_range_in_the_session_zone() {
        let utc = TimestampRule::of("10.11.19-MariaDB", "+00:00", "UTC");
        let ts = |m: Moment| timestamp(&m, &utc);
        assert_eq!(ts(moment(1970, 1, 1, 0, 0, 1, false)), Ok(Checked::Valid));
        assert_eq!(ts(moment(2038, 1, 19, 3, 14, 7, false)), Ok(Checked::Valid));
        let why = refused(ts(moment(2038, 1, 19, 3, 14, 8, false)));
        assert_eq!(
            why,
            "out of range for timestamp (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC, \
             read in the session's time zone, +00:00)"
        );
        assert!(refused(ts(moment(1970, 1, 1, 0, 0, 0, false))).contains("out of range"));
        assert!(refused(ts(moment(1000, 1, 1, 0, 0, 0, false))).contains("out of range"));
        // Rounding or truncating a fraction decides these: the server's.
        assert_eq!(ts(moment(2038, 1, 19, 3, 14, 7, true)), Ok(Checked::Server));
        assert_eq!(ts(moment(1970, 1, 1, 0, 0, 0, true)), Ok(Checked::Server));
        assert_eq!(ts(moment(0, 0, 0, 0, 0, 0, false)), Ok(Checked::Server));
        // Two hours east: local 02:00:01 is the first second.
        let east = TimestampRule::of("10.11.19-MariaDB", "+02:00", "UTC");
        assert!(timestamp(&moment(1970, 1, 1, 2, 0, 0, false), &east).is_err());
        assert_eq!(
            timestamp(&moment(1970, 1, 1, 2, 0, 1, false), &east),
            Ok(Checked::Valid)
        );
        // A zone with rules: a day's margin each side.
        let cet = TimestampRule::of("10.11.19-MariaDB", "SYSTEM", "CET");
        assert_eq!(
            timestamp(&moment(1970, 1, 1, 12, 0, 0, false), &cet),
            Ok(Checked::Server)
        );
        assert_eq!(
            timestamp(&moment(1970, 1, 2, 0, 0, 1, false), &cet),
            Ok(Checked::Valid)
        );
        assert!(timestamp(&moment(1969, 12, 30, 23, 0, 0, false), &cet).is_err());
        assert!(timestamp(&moment(2038, 1, 20, 3, 14, 8, false), &cet).is_err());
        assert_eq!(utc_text(i64::from(u32::MAX)), "2106-02-07 06:28:15");
    }

    #[test]
    fn bits_hold_their_bytes_right_aligned() {
        let b = |v: &[u8], m| bit(v, m, "bit(m)");
        assert_eq!(b(b"a", 10), Ok(Checked::Valid));
        assert_eq!(b(b"\0\0a", 10), Ok(Checked::Valid));
        assert_eq!(b(b"", 1), Ok(Checked::Valid));
        assert_eq!(b(b"\x01", 1), Ok(Checked::Valid));
        assert_eq!(b(b"\x03b", 10), Ok(Checked::Valid));
        assert_eq!(b(b"12345678", 64), Ok(Checked::Valid));
        assert!(
            refused(b(b"1", 1)).contains("0x31 has 6 significant bits where the column holds 1;")
        );
        assert!(refused(b(b"ab", 10)).contains("too long"));
        assert!(refused(b(b"123456789", 64)).contains("too long"));
        assert!(refused(b(b"ab", 8)).contains("too long"));
    }

    #[test]
    fn years_as_the_server_reads_them() {
        for ok in ["0", "00", "0000", "0001", "99", "1901", "2155"] {
            assert_eq!(year(ok.as_bytes()), Ok(Checked::Valid), "{ok}");
        }
        for out in ["100", "1000", "1900", "2156", "99999"] {
            assert!(refused(year(out.as_bytes())).contains("out of range for year"));
        }
        for server in ["  99", "", "2024a", "1234567890"] {
            assert_eq!(year(server.as_bytes()), Ok(Checked::Server), "{server}");
        }
    }

    #[test]
    fn floats_and_doubles_as_the_server_reads_them() {
        let f = |v: &str| float(v.as_bytes(), false, "float");
        let d = |v: &str| float(v.as_bytes(), true, "double");
        for ok in [
            "3.402823466e38",
            "-3.402823466e38",
            "1e-50",
            "+.5",
            "5.",
            "0",
        ] {
            assert_eq!(f(ok), Ok(Checked::Valid), "{ok}");
        }
        assert_eq!(d("1.7976931348623157e308"), Ok(Checked::Valid));
        assert_eq!(refused(f("3.4028235e38")), "out of range for float");
        assert_eq!(refused(f("-1e39")), "out of range for float");
        assert_eq!(refused(d("1e309")), "out of range for double");
        for bad in ["abc", "", "inf", "NaN", "1.5x"] {
            assert_eq!(refused(d(bad)), "not a valid double", "{bad}");
        }
        for server in ["1.5 ", " 1", ".e1", "1e", "--1"] {
            assert_eq!(d(server), Ok(Checked::Server), "{server}");
        }
    }

    #[test]
    fn times_as_the_server_reads_them() {
        for ok in [
            "838:59:59",
            "-838:59:59",
            "1:02:03",
            "24:00:00",
            "00:00:00.5",
        ] {
            assert_eq!(time(ok.as_bytes(), 1), Ok(Checked::Valid), "{ok}");
        }
        assert!(refused(time(b"839:00:00", 0)).contains("out of range"));
        assert!(refused(time(b"12:60:00", 0)).contains("out of range"));
        for server in [
            "12:34:56.5",
            "100 10:00:00",
            "1:2:3",
            "12:34",
            "838:59:59.9",
        ] {
            assert_eq!(time(server.as_bytes(), 0), Ok(Checked::Server), "{server}");
        }
    }
}
