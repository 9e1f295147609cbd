//! Format-neutral parsing primitives that every destination's converter builds on: ASCII
//! digits and integers, the proleptic Gregorian calendar and ISO 8601 dates, and exact
//! decimals with half-away-from-zero rounding.
//!
//! Each destination has its own rules for which spellings a type accepts and its own wire
//! form (PostgreSQL: base-10000 numerics, days since 2000-01-01; MariaDB: packed decimals,
//! `YYYY-MM-DD` text). What they share is reading the digits, so that lives here once, fast
//! and exact, with no allocation and no floats. The functions take byte slices and return
//! numbers or `None`; the wording of an error is the destination's, since it must say what
//! its server would.

/// C's `isspace` in the C locale, which PostgreSQL's input functions skip.
#[inline]
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `s` without leading and trailing [`is_c_space`] bytes.
#[inline]
pub fn trim_c_space(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_c_space(b)).unwrap_or(s.len());
    let end = s[start..]
        .iter()
        .rposition(|&b| !is_c_space(b))
        .map_or(start, |p| start + p + 1);
    &s[start..end]
}

/// The value of `v` when it is 1 to `max_digits` ASCII digits and nothing else (`max_digits`
/// at most 19, so that the value always fits): the fast path for the integers flat files
/// are made of.
#[inline(always)]
pub fn ascii_uint(v: &[u8], max_digits: usize) -> Option<u64> {
    debug_assert!(max_digits <= 19);
    if v.is_empty() || v.len() > max_digits || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &b| n * 10 + u64::from(b - b'0')))
}

/// Reads `min` to `max` ASCII digits at `*i`, advancing past them; `None` (with `*i` past
/// what was read) when there are fewer than `min`.
#[inline]
pub fn digits(s: &[u8], i: &mut usize, min: usize, max: usize) -> Option<i64> {
    let start = *i;
    let mut v: i64 = 0;
    while *i < s.len() && *i - start < max && s[*i].is_ascii_digit() {
        v = v * 10 + i64::from(s[*i] - b'0');
        *i += 1;
    }
    (*i - start >= min).then_some(v)
}

/// Why a signed integer did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntError {
    /// Not an optional sign followed by digits.
    Syntax,
    /// Digits beyond the 64-bit range.
    Overflow,
}

/// An optional sign and decimal digits (no spaces; trim first), as a 64-bit integer.
pub fn parse_i64(s: &[u8]) -> Result<i64, IntError> {
    let (neg, body) = match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    };
    if body.is_empty() || !body.iter().all(u8::is_ascii_digit) {
        return Err(IntError::Syntax);
    }
    let mut n: i128 = 0;
    for &b in body {
        n = n * 10 + i128::from(b - b'0');
        if n > i128::from(i64::MAX) + 1 {
            return Err(IntError::Overflow);
        }
    }
    i64::try_from(if neg { -n } else { n }).map_err(|_| IntError::Overflow)
}

/// Whether an astronomical year (1 BC is 0) is a Gregorian leap year.
#[inline]
pub const fn is_leap(astronomical_year: i64) -> bool {
    astronomical_year % 4 == 0 && (astronomical_year % 100 != 0 || astronomical_year % 400 == 0)
}

/// Days in `month` (1 to 12) of an astronomical year.
#[inline]
pub fn days_in_month(astronomical_year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(astronomical_year) => 29,
        _ => 28,
    }
}

/// The Julian day number of a proleptic Gregorian date (astronomical year), with the
/// integer arithmetic of PostgreSQL's `date2j`, valid far into BC years. Day 2,451,545 is
/// 2000-01-01; day 2,440,588 is 1970-01-01.
#[inline]
pub const fn julian_day(mut year: i64, mut month: i64, day: i64) -> i64 {
    if month > 2 {
        month += 1;
        year += 4800;
    } else {
        month += 13;
        year += 4799;
    }
    let century = year / 100;
    let mut julian = year * 365 - 32167;
    julian += year / 4 - century + century / 4;
    julian += 7834 * month / 256 + day;
    julian
}

/// Exactly `YYYY-MM-DD` with a real calendar date (year 1 to 9999), as nearly every file
/// spells dates: `(year, month, day)`, or `None` for anything else, which a destination's
/// general path then reads (and words the error for).
#[inline(always)]
pub fn iso_date(s: &[u8]) -> Option<(i64, i64, i64)> {
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *s else {
        return None;
    };
    if ![y0, y1, y2, y3, m0, m1, d0, d1]
        .iter()
        .all(u8::is_ascii_digit)
    {
        return None;
    }
    let n = |a: u8, b: u8| i64::from(a - b'0') * 10 + i64::from(b - b'0');
    let year = n(y0, y1) * 100 + n(y2, y3);
    let (month, day) = (n(m0, m1), n(d0, d1));
    is_calendar_date(year, month, day).then_some((year, month, day))
}

/// Whether year 1 to 9999 (as read from four digits), `month` and `day` name a real day of
/// the proleptic Gregorian calendar.
#[inline(always)]
pub fn is_calendar_date(year: i64, month: i64, day: i64) -> bool {
    // Days per month with February at 29, so that only the 29th of February asks about
    // leap years.
    const LONGEST: [i64; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if year == 0 || !(1..=12).contains(&month) || day < 1 || day > LONGEST[month as usize] {
        return false;
    }
    month != 2 || day != 29 || is_leap(year)
}

/// The months' English names, for messages about dates ("February 2023 has 28 days").
pub const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `Y-M-D` or `Y/M/D` (one separator throughout) at the start of `s` with `min_year_digits` to
/// 9 year digits and 1 or 2 month and day digits, unchecked: `(year, month, day, position
/// after)`. A year of three or more digits first makes either spelling year-month-day
/// whatever the DateStyle, on PostgreSQL as on MariaDB.
pub fn ymd_prefix(s: &[u8], min_year_digits: usize) -> Option<(i64, i64, i64, usize)> {
    let mut i = 0;
    let year = digits(s, &mut i, min_year_digits, 9)?;
    let sep = *s.get(i).filter(|&&c| c == b'-' || c == b'/')?;
    i += 1;
    let month = digits(s, &mut i, 1, 2)?;
    if s.get(i) != Some(&sep) {
        return None;
    }
    i += 1;
    let day = digits(s, &mut i, 1, 2)?;
    Some((year, month, day, i))
}

/// An exact decimal `0.d1 d2 d3... x 10^point`: significant digits (0 to 9 each, no
/// leading zeros), where the point is, and how many fractional digits the text showed.
#[derive(Debug, PartialEq, Eq)]
pub struct Decimal<'a> {
    pub negative: bool,
    pub digits: &'a mut Vec<u8>,
    pub point: i64,
    /// Fractional digits as written (after the exponent), at least 0: the display scale.
    pub dscale: i64,
}

/// Parses `digits[.digits][e[+-]digits]` (no sign, no spaces) into `scratch`, which is
/// reused between calls. An exponent beyond `max_exponent` either way is a syntax error,
/// as is anything else that is not a number: `None`.
pub fn parse_decimal<'a>(
    negative: bool,
    s: &[u8],
    scratch: &'a mut Vec<u8>,
    max_exponent: i64,
) -> Option<Decimal<'a>> {
    let digits = scratch;
    digits.clear();
    let mut i = 0;
    let mut int_len: i64 = 0;
    let mut frac_len: i64 = 0;
    let mut seen_point = false;
    let mut any_digit = false;
    while i < s.len() {
        let b = s[i];
        if b.is_ascii_digit() {
            any_digit = true;
            if digits.is_empty() && b == b'0' {
                // Leading zeros carry no value, but still count as positions.
                if seen_point {
                    frac_len += 1;
                }
            } else {
                digits.push(b - b'0');
                if seen_point {
                    frac_len += 1;
                } else {
                    int_len += 1;
                }
            }
        } else if b == b'.' && !seen_point {
            seen_point = true;
        } else {
            break;
        }
        i += 1;
    }
    if !any_digit {
        return None;
    }
    let mut exponent: i64 = 0;
    if i < s.len() && (s[i] == b'e' || s[i] == b'E') {
        i += 1;
        let mut neg = false;
        if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
            neg = s[i] == b'-';
            i += 1;
        }
        let exp_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            exponent = (exponent * 10 + i64::from(s[i] - b'0')).min(max_exponent + 1);
            i += 1;
        }
        if i == exp_start || exponent > max_exponent {
            return None;
        }
        if neg {
            exponent = -exponent;
        }
    }
    if i != s.len() {
        return None;
    }
    // `digits` holds the significant digits; leading fractional zeros shift the point left.
    let leading_frac_zeros = frac_len - (digits.len() as i64 - int_len);
    let point = if int_len > 0 {
        int_len
    } else {
        -leading_frac_zeros
    } + exponent;
    Some(Decimal {
        negative,
        point,
        dscale: (frac_len - exponent).max(0),
        digits,
    })
}

impl Decimal<'_> {
    /// Rounds half away from zero to `scale` fractional digits (PostgreSQL's `round_var`,
    /// MariaDB's decimal rounding) and sets the display scale to it.
    pub fn round_to_scale(&mut self, scale: i64) {
        self.dscale = scale.max(0);
        let keep = self.point + scale;
        let n = self.digits.len() as i64;
        if keep >= n {
            return;
        }
        if keep < 0 {
            self.digits.clear();
            return;
        }
        let keep = keep as usize;
        let round_up = self.digits[keep] >= 5;
        self.digits.truncate(keep);
        if round_up {
            let mut i = keep;
            loop {
                if i == 0 {
                    self.digits.insert(0, 1);
                    self.point += 1;
                    break;
                }
                i -= 1;
                if self.digits[i] == 9 {
                    self.digits[i] = 0;
                } else {
                    self.digits[i] += 1;
                    break;
                }
            }
        }
        while self.digits.last() == Some(&0) {
            self.digits.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(ascii_uint(b"0042", 9), Some(42));
        assert_eq!(ascii_uint(b"1234567890", 9), None, "longer than asked");
        assert_eq!(ascii_uint(b"", 9), None);
        assert_eq!(ascii_uint(b"-1", 9), None);
        assert_eq!(
            ascii_uint(b"9999999999999999999", 19),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_i64(b"-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_i64(b"+9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), Err(IntError::Overflow));
        assert_eq!(
            parse_i64(b"99999999999999999999999"),
            Err(IntError::Overflow)
        );
        for bad in [&b""[..], b"-", b"1 2", b"0x1", b"1e3", b" 1"] {
            assert_eq!(parse_i64(bad), Err(IntError::Syntax), "{bad:?}");
        }
        assert_eq!(trim_c_space(b" \t\x0b7\r\n"), b"7");
        assert_eq!(trim_c_space(b"  "), b"");
        let mut i = 1;
        assert_eq!(digits(b"x123y", &mut i, 2, 9), Some(123));
        assert_eq!(i, 4);
    }

    #[test]
    fn calendar() {
        assert_eq!(julian_day(2000, 1, 1), 2_451_545);
        assert_eq!(julian_day(1970, 1, 1), 2_440_588);
        // 4714-11-24 BC (astronomical -4713) is Julian day 0.
        assert_eq!(julian_day(-4713, 11, 24), 0);
        assert!(is_leap(2000) && is_leap(2024) && !is_leap(1900) && is_leap(0));
        assert_eq!(days_in_month(2023, 2), 28);
        assert_eq!(iso_date(b"2024-02-29"), Some((2024, 2, 29)));
        for bad in [
            &b"2023-02-29"[..],
            b"0000-01-01",
            b"2024-13-01",
            b"2024-1-01",
            b"2024-01-01 ",
            b"2024/01/01",
        ] {
            assert_eq!(iso_date(bad), None, "{bad:?}");
        }
        assert_eq!(ymd_prefix(b"12345-6-7 BC", 3), Some((12345, 6, 7, 9)));
        assert_eq!(ymd_prefix(b"2010/1/02 03:04", 3), Some((2010, 1, 2, 9)));
        assert_eq!(ymd_prefix(b"2010/01-02", 3), None);
        assert_eq!(
            ymd_prefix(b"24-01-01", 3),
            None,
            "two-digit years are not ISO"
        );
    }

    #[test]
    fn decimals_round_half_away_from_zero() {
        let mut scratch = Vec::new();
        let d = parse_decimal(false, b"0012.3450", &mut scratch, 1000).unwrap();
        assert_eq!(
            (d.digits.clone(), d.point, d.dscale),
            (vec![1, 2, 3, 4, 5, 0], 2, 4)
        );
        let mut d = parse_decimal(true, b"9.995", &mut scratch, 1000).unwrap();
        d.round_to_scale(2);
        assert_eq!(
            (d.digits.clone(), d.point, d.dscale),
            (vec![1], 2, 2),
            "-10.00"
        );
        let d = parse_decimal(false, b"0.00123e2", &mut scratch, 1000).unwrap();
        assert_eq!((d.digits.clone(), d.point, d.dscale), (vec![1, 2, 3], 0, 3));
        for bad in [&b""[..], b".", b"1e", b"1e1001", b"1.2.3", b"1x"] {
            assert!(
                parse_decimal(false, bad, &mut scratch, 1000).is_none(),
                "{bad:?}"
            );
        }
    }
}
