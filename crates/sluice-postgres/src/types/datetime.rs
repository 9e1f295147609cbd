//! `date`, `time`, `timestamp` and `timestamptz`: text to PostgreSQL's binary integers.
//!
//! Binary dates are days and binary timestamps microseconds since 2000-01-01, computed with
//! PostgreSQL's own Julian-day arithmetic (`date2j`) so that BC dates and leap days match.
//! sluice parses the ISO 8601 spellings that flat files use (`2024-02-29`,
//! `2024-02-29 13:45:00.123456+05:30`, `T` separator, `BC`, `infinity`, `epoch`). Any other
//! spelling PostgreSQL might accept (`Feb 29 2024`, `today`, `J2451187`, two-digit years that
//! depend on DateStyle) is reported as *unsupported*, not invalid, so that the caller can ask the
//! server to convert it: the result is then PostgreSQL's own, not an imitation.
//!
//! Fractions of a second are rounded to microseconds with `rint` on a double, as PostgreSQL
//! does, and then to the column's declared precision with its integer rounding. A
//! `timestamptz` without an offset is local time in the session's `TimeZone`; for a gap or an
//! overlap at a daylight-saving change it follows PostgreSQL: the offset before the change for
//! a gap, standard (later) time for an overlap.

use super::convert::ConvertError;
use chrono::{NaiveDate, NaiveDateTime, Offset, TimeZone};
use chrono_tz::Tz;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::primitives::{
    days_in_month, digits, is_leap, iso_date, julian_day, ymd_prefix, MONTH_NAMES,
};
use sluice_core::swar;

const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
const USECS_PER_DAY: i64 = 86_400_000_000;
/// 4714-11-24 BC (proleptic Gregorian), Julian day 0: the first valid date and timestamp.
const MIN_JULIAN: i64 = 0;
/// The first Julian day past the date range (5874898-01-01).
const DATE_END_JULIAN: i64 = 2_147_483_494;
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
/// 294277-01-01 00:00:00, the first timestamp past the range.
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;

/// PostgreSQL's `date2j`: the Julian day of a proleptic Gregorian date.
pub fn date2j(year: i64, month: i64, day: i64) -> i64 {
    julian_day(year, month, day)
}

/// A parsed point in time before range checks and zone handling.
#[derive(Debug, Clone, Copy)]
struct Parsed {
    /// Julian day.
    julian: i64,
    /// Microseconds since midnight.
    time: i64,
    /// Seconds east of UTC, when the value carried an offset.
    offset: Option<i64>,
}

/// A value of a date/time type: finite, or one of the infinities.
enum Special {
    Infinity,
    NegInfinity,
}

fn special(s: &[u8]) -> Option<Special> {
    if s.eq_ignore_ascii_case(b"infinity") || s.eq_ignore_ascii_case(b"+infinity") {
        Some(Special::Infinity)
    } else if s.eq_ignore_ascii_case(b"-infinity") {
        Some(Special::NegInfinity)
    } else {
        None
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &s[start..end]
}

fn unsupported(what: &str) -> ConvertError {
    ConvertError::Unsupported(format!(
        "not an ISO 8601 {what} (YYYY-MM-DD or YYYY/MM/DD...); sluice leaves other spellings to the server"
    ))
}

/// Parses `YYYY-MM-DD` at the start of `s`, returning the calendar parts and the position after.
fn parse_ymd(s: &[u8], what: &str) -> Result<(i64, i64, i64, usize), ConvertError> {
    // Three or more year digits are taken literally; shorter years depend on DateStyle.
    ymd_prefix(s, 3).ok_or_else(|| unsupported(what))
}

/// Checks a calendar date and turns it into a Julian day. `bc` years count back from 1 BC.
fn julian(year: i64, month: i64, day: i64, bc: bool) -> Result<i64, ConvertError> {
    if year == 0 {
        return Err(ConvertError::invalid(
            "year 0 does not exist: the year before 1 AD is 1 BC",
        ));
    }
    let astronomical = if bc { 1 - year } else { year };
    if !(1..=12).contains(&month) {
        return Err(ConvertError::invalid(format!(
            "month {month} does not exist (months are 1 to 12)"
        )));
    }
    let dim = days_in_month(astronomical, month);
    if day < 1 || day > dim {
        let era = if bc { " BC" } else { "" };
        return Err(ConvertError::invalid(format!(
            "{} {year}{era} has {dim} days, not {day}",
            MONTH_NAMES[(month - 1) as usize]
        )));
    }
    Ok(date2j(astronomical, month, day))
}

/// Parses `HH:MM[:SS[.fraction]]` at `*i`, returning microseconds since midnight.
fn parse_time(s: &[u8], i: &mut usize, what: &str) -> Result<i64, ConvertError> {
    let hour = digits(s, i, 1, 2).ok_or_else(|| unsupported(what))?;
    if s.get(*i) != Some(&b':') {
        return Err(unsupported(what));
    }
    *i += 1;
    let minute = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
    let mut second = 0;
    let mut fsec = 0;
    if s.get(*i) == Some(&b':') {
        *i += 1;
        second = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
        if s.get(*i) == Some(&b'.') {
            let start = *i;
            *i += 1;
            while *i < s.len() && s[*i].is_ascii_digit() {
                *i += 1;
            }
            // PostgreSQL: strtod of the fraction, then rint(frac * 1e6).
            let text = std::str::from_utf8(&s[start..*i]).unwrap_or("0");
            let frac: f64 = format!("0{text}").parse().unwrap_or(0.0);
            fsec = (frac * 1_000_000.0).round_ties_even() as i64;
        }
    }
    if hour > 24 || minute > 59 || second > 60 {
        return Err(ConvertError::invalid(format!(
            "time {hour:02}:{minute:02}:{second:02} is out of range"
        )));
    }
    let usecs = ((hour * 60 + minute) * 60 + second) * 1_000_000 + fsec;
    if hour == 24 && usecs > USECS_PER_DAY {
        return Err(ConvertError::invalid("time is past 24:00:00"));
    }
    Ok(usecs)
}

/// Parses a zone offset (`Z`, `UTC`, `+05`, `+0530`, `+05:30`, `-08:00:00`) at `*i`.
fn parse_offset(s: &[u8], i: &mut usize, what: &str) -> Result<Option<i64>, ConvertError> {
    let rest = &s[*i..];
    for word in [&b"z"[..], b"utc", b"gmt"] {
        if rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word) {
            let after = rest.get(word.len());
            if after.is_none_or(|b| b.is_ascii_whitespace()) {
                *i += word.len();
                return Ok(Some(0));
            }
        }
    }
    let sign = match rest.first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Ok(None),
    };
    *i += 1;
    let start = *i;
    let h = digits(s, i, 1, 2).ok_or_else(|| unsupported(what))?;
    let mut m = 0;
    let mut sec = 0;
    if *i - start == 2 && s.get(*i).is_some_and(|b| b.is_ascii_digit()) {
        m = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
        if s.get(*i).is_some_and(|b| b.is_ascii_digit()) {
            sec = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
        }
    } else if s.get(*i) == Some(&b':') {
        *i += 1;
        m = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
        if s.get(*i) == Some(&b':') {
            *i += 1;
            sec = digits(s, i, 2, 2).ok_or_else(|| unsupported(what))?;
        }
    }
    if h > 15 || m > 59 || sec > 59 {
        return Err(ConvertError::invalid("time zone displacement out of range"));
    }
    Ok(Some(sign * (h * 3600 + m * 60 + sec)))
}

/// Skips spaces, then an optional `BC`/`AD` era word; returns whether it was BC.
fn parse_era(s: &[u8], i: &mut usize) -> Option<bool> {
    let mut j = *i;
    while j < s.len() && s[j] == b' ' {
        j += 1;
    }
    let rest = &s[j..];
    if rest.len() >= 2
        && (rest[..2].eq_ignore_ascii_case(b"bc") || rest[..2].eq_ignore_ascii_case(b"ad"))
    {
        let bc = rest[..2].eq_ignore_ascii_case(b"bc");
        *i = j + 2;
        return Some(bc);
    }
    None
}

/// Parses a full timestamp text (after trimming): date, optional time, optional offset, era.
fn parse_timestamp(s: &[u8], what: &str) -> Result<Parsed, ConvertError> {
    let (year, month, day, mut i) = parse_ymd(s, what)?;
    let mut time = 0;
    let mut offset = None;
    let mut bc = false;
    if i < s.len() && (s[i] == b' ' || s[i] == b'T' || s[i] == b't') {
        let mut j = i + 1;
        while j < s.len() && s[j] == b' ' {
            j += 1;
        }
        if j < s.len() && s[j].is_ascii_digit() {
            i = j;
            time = parse_time(s, &mut i, what)?;
            let mut k = i;
            while k < s.len() && s[k] == b' ' {
                k += 1;
            }
            if let Some(o) = parse_offset(s, &mut k, what)? {
                offset = Some(o);
                i = k;
            }
        }
    }
    if let Some(era) = parse_era(s, &mut i) {
        bc = era;
    }
    while i < s.len() && s[i] == b' ' {
        i += 1;
    }
    if i != s.len() {
        return Err(unsupported(what));
    }
    let julian = julian(year, month, day, bc)?;
    Ok(Parsed {
        julian,
        time,
        offset,
    })
}

/// `YYYY-MM-DD` exactly, as nearly every file spells dates: the Julian day, or `None` to take
/// the general path (which also produces the error messages).
#[inline(always)]
fn iso_date_fast(s: &[u8]) -> Option<i64> {
    iso_date(s).map(|(y, m, d)| julian_day(y, m, d))
}

/// An exact `YYYY-MM-DD` date (year 1 to 9999, a real calendar day) as days since
/// 2000-01-01, its digits read from its first 16 bytes (`head`, [`swar::head16`]); `None` when
/// the general path is needed. The twin of [`iso_date_fast`], tested against it: the day
/// count is three table lookups ([`YEARS`], [`MONTH_DAYS`]) instead of `julian_day`'s divisions.
#[inline(always)]
pub fn iso_date_days(value: &[u8], head: u128) -> Option<i32> {
    if value.len() != 10 {
        return None;
    }
    let (y, m, d) = swar::iso_date_digits(head)?;
    if y == 0 || !(1..=12).contains(&m) {
        return None;
    }
    let year = *YEARS.get(y as usize)?;
    let (before, length) = MONTH_DAYS[(year & 1) as usize][m as usize];
    if d < 1 || d > i64::from(length) {
        return None;
    }
    Some((year >> 1) + before + d as i32 - 1)
}

/// For each year 0 to 9999: the days from 2000-01-01 to its 1 January, times two, plus one
/// for a leap year.
static YEARS: [i32; 10_000] = {
    let mut t = [0i32; 10_000];
    let mut y = 0;
    while y < 10_000 {
        let days = julian_day(y as i64, 1, 1) - POSTGRES_EPOCH_JDATE;
        t[y] = (days as i32) * 2 + is_leap(y as i64) as i32;
        y += 1;
    }
    t
};

/// For a common year and a leap year, for each month 1 to 12: the days of the year before
/// it, and its length.
const MONTH_DAYS: [[(i32, i8); 13]; 2] = {
    let lengths = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut t = [[(0i32, 0i8); 13]; 2];
    let mut leap = 0;
    while leap < 2 {
        let mut before = 0;
        let mut m = 1;
        while m <= 12 {
            let length = lengths[m] + if m == 2 { leap } else { 0 };
            t[leap][m] = (before, length as i8);
            before += length as i32;
            m += 1;
        }
        leap += 1;
    }
    t
};

/// Encodes a `date` as days since 2000-01-01.
#[inline]
pub fn encode_date(value: &[u8], out: &mut Vec<u8>) -> Result<(), ConvertError> {
    if let Some(j) = iso_date_fast(value) {
        out.extend_from_slice(&((j - POSTGRES_EPOCH_JDATE) as i32).to_be_bytes());
        return Ok(());
    }
    let s = trim(value);
    let days = match special(s) {
        Some(Special::Infinity) => i32::MAX as i64,
        Some(Special::NegInfinity) => i32::MIN as i64,
        None if s.eq_ignore_ascii_case(b"epoch") => date2j(1970, 1, 1) - POSTGRES_EPOCH_JDATE,
        None => {
            let p = parse_timestamp(s, "date")?;
            if !(MIN_JULIAN..DATE_END_JULIAN).contains(&p.julian) {
                return Err(ConvertError::invalid(
                    "date out of range (4714-11-24 BC to 5874897-12-31)",
                ));
            }
            p.julian - POSTGRES_EPOCH_JDATE
        }
    };
    out.extend_from_slice(&(days as i32).to_be_bytes());
    Ok(())
}

/// Rounds microseconds to `precision` fractional digits as `AdjustTimestampForTypmod` does.
fn round_precision(t: i64, precision: Option<u32>) -> i64 {
    match precision {
        Some(p) if p < 6 => {
            let scale = 10i64.pow(6 - p);
            let off = scale / 2;
            if t >= 0 {
                (t + off) / scale * scale
            } else {
                -(((-t) + off) / scale * scale)
            }
        }
        _ => t,
    }
}

/// Encodes `time` as microseconds since midnight.
pub fn encode_time(
    value: &[u8],
    precision: Option<u32>,
    out: &mut Vec<u8>,
) -> Result<(), ConvertError> {
    let s = trim(value);
    let mut i = 0;
    let t = parse_time(s, &mut i, "time")?;
    // A trailing offset is accepted and ignored, as `time_in` does.
    while i < s.len() && s[i] == b' ' {
        i += 1;
    }
    parse_offset(s, &mut i, "time")?;
    if i != s.len() {
        return Err(unsupported("time"));
    }
    let t = round_precision(t, precision);
    if t > USECS_PER_DAY {
        return Err(ConvertError::invalid("time is past 24:00:00"));
    }
    out.extend_from_slice(&t.to_be_bytes());
    Ok(())
}

/// Local days (their Julian day) and the offset in force all of each, one word a slot, a
/// slot per day modulo [`DayCache::SLOTS`]: files hold a few years of dates, each day found
/// in its slot after its first value. The zone is shared by reference; a stale or racing
/// slot is only a missed cache.
#[derive(Debug)]
pub struct DayCache(Box<[AtomicU64]>);

impl DayCache {
    const EMPTY: u64 = u64::MAX;
    const SLOTS: usize = 2048;

    fn slot(&self, julian: i64) -> &AtomicU64 {
        &self.0[julian.rem_euclid(DayCache::SLOTS as i64) as usize]
    }

    /// The offset of `julian` when its slot holds it.
    fn get(&self, julian: i64) -> Option<i64> {
        match self.slot(julian).load(Ordering::Relaxed) {
            DayCache::EMPTY => None,
            w if i64::from((w >> 32) as u32 as i32) == julian => Some(i64::from(w as u32 as i32)),
            _ => None,
        }
    }

    fn set(&self, julian: i64, offset: i64) {
        if let (Ok(j), Ok(o)) = (i32::try_from(julian), i32::try_from(offset)) {
            let word = (u64::from(j as u32) << 32) | u64::from(o as u32);
            if word != DayCache::EMPTY {
                self.slot(julian).store(word, Ordering::Relaxed);
            }
        }
    }
}

impl Default for DayCache {
    fn default() -> DayCache {
        DayCache(
            (0..DayCache::SLOTS)
                .map(|_| AtomicU64::new(DayCache::EMPTY))
                .collect(),
        )
    }
}

impl Clone for DayCache {
    fn clone(&self) -> DayCache {
        let slots = self
            .0
            .iter()
            .map(|s| AtomicU64::new(s.load(Ordering::Relaxed)));
        DayCache(slots.collect())
    }
}

/// The session time zone used for `timestamptz` values without an offset.
#[derive(Clone, Debug)]
pub enum SessionZone {
    /// A zone chrono-tz knows, with the local days whose offset held all day long.
    Named(Tz, DayCache),
    /// A zone chrono-tz does not know (a POSIX spec): such values go to the server.
    Unknown(String),
}

impl SessionZone {
    pub fn from_setting(name: &str) -> SessionZone {
        match Tz::from_str_insensitive(name) {
            Ok(tz) => SessionZone::Named(tz, DayCache::default()),
            Err(_) => SessionZone::Unknown(name.to_string()),
        }
    }

    /// Seconds east of UTC for a local wall-clock time, with PostgreSQL's DST rules: from
    /// the cache when the day was looked up before and had no transition, else from the
    /// zone's rules, and the day cached when its first and last second have the same offset.
    fn offset_for_local(&self, julian: i64, time: i64) -> Result<i64, ConvertError> {
        if let SessionZone::Named(_, day) = self {
            if (0..USECS_PER_DAY).contains(&time) {
                if let Some(offset) = day.get(julian) {
                    return Ok(offset);
                }
            }
            let offset = self.offset_from_rules(julian, time)?;
            if (0..USECS_PER_DAY).contains(&time) {
                let first = self.offset_from_rules(julian, 0);
                let last = self.offset_from_rules(julian, USECS_PER_DAY - 1_000_000);
                if first == Ok(offset) && last == Ok(offset) {
                    day.set(julian, offset);
                }
            }
            return Ok(offset);
        }
        self.offset_from_rules(julian, time)
    }

    /// [`SessionZone::offset_for_local`] from the zone's rules.
    fn offset_from_rules(&self, julian: i64, time: i64) -> Result<i64, ConvertError> {
        let SessionZone::Named(tz, _) = self else {
            return Err(ConvertError::Unsupported(
                "a timestamptz without an offset in a session zone sluice cannot read".into(),
            ));
        };
        let days_from_ce = julian - date2j(1, 1, 1) + 1;
        let date = i32::try_from(days_from_ce)
            .ok()
            .and_then(NaiveDate::from_num_days_from_ce_opt)
            .ok_or_else(|| ConvertError::invalid("timestamp out of range"))?;
        let secs = time.div_euclid(1_000_000);
        let naive: NaiveDateTime =
            date.and_hms_opt(0, 0, 0).unwrap_or_default() + chrono::Duration::seconds(secs);
        use chrono::LocalResult;
        match tz.offset_from_local_datetime(&naive) {
            LocalResult::Single(o) => Ok(i64::from(o.fix().local_minus_utc())),
            LocalResult::Ambiguous(a, b) => {
                // Standard (later) time: the smaller offset east gives the later instant.
                Ok(i64::from(
                    a.fix().local_minus_utc().min(b.fix().local_minus_utc()),
                ))
            }
            LocalResult::None => {
                // In a gap: use the offset in force just before the change.
                for back in 1..=48 {
                    let earlier = naive - chrono::Duration::hours(back);
                    if let LocalResult::Single(o) = tz.offset_from_local_datetime(&earlier) {
                        return Ok(i64::from(o.fix().local_minus_utc()));
                    }
                }
                Err(ConvertError::Unsupported(
                    "a local time in a time-zone gap longer than two days".into(),
                ))
            }
        }
    }
}

/// `time` in the form files hold, `HH:MM:SS` with up to 6 digits of fraction, as
/// microseconds since midnight, as [`encode_time`] makes it; `None` for anything else (hour
/// 24, a leap second, a 7th digit to round, spaces, an offset), which [`encode_time`] takes.
#[inline]
pub fn plain_time(v: &[u8]) -> Option<i64> {
    if v.len() < 8 || v[2] != b':' || v[5] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        v[from..to].iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    let (hour, minute, second) = (num(0, 2)?, num(3, 5)?, num(6, 8)?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let usecs = match v.len() {
        8 => 0,
        n if v[8] == b'.' && (10..=15).contains(&n) => num(9, n)? * 10i64.pow(6 - (n - 9) as u32),
        _ => return None,
    };
    Some(((hour * 60 + minute) * 60 + second) * 1_000_000 + usecs)
}

/// `timestamp` (`zone` is `None`) or `timestamptz` in the ISO form files hold, as
/// microseconds since 2000-01-01 (UTC for `timestamptz`), as [`encode_timestamp`] makes
/// them: `YYYY-MM-DD`, a space or `T`, `HH:MM:SS`, up to 6 digits of fraction, then `Z`,
/// `±hh`, `±hh:mm`, `±hhmm` or nothing (the session zone's offset for that local time, from
/// its cache). `None` for anything else (other spellings, a 7th digit to round, year 0,
/// hour 24, a leap second, an offset past 15 hours, a zone sluice cannot read), which
/// [`encode_timestamp`] takes.
#[inline]
pub fn plain_timestamp(v: &[u8], zone: Option<&SessionZone>) -> Option<i64> {
    if v.len() < 19
        || v[4] != b'-'
        || v[7] != b'-'
        || !(v[10] == b' ' || v[10] == b'T')
        || v[13] != b':'
        || v[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        v[from..to].iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if year == 0
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut usecs = 0;
    if v.get(i) == Some(&b'.') {
        let digits = v[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 6 {
            return None;
        }
        usecs = num(i + 1, i + 1 + digits)? * 10i64.pow(6 - digits as u32);
        i += 1 + digits;
    }
    let offset = plain_offset(&v[i..])?;
    let julian = date2j(year, month, day);
    let time = ((hour * 60 + minute) * 60 + second) * 1_000_000 + usecs;
    let local = (julian - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY + time;
    match zone {
        None => Some(local),
        Some(z) => {
            let offset = match offset {
                Some(o) => o,
                None => z.offset_for_local(julian, time).ok()?,
            };
            Some(local - offset * 1_000_000)
        }
    }
}

/// The offset after an ISO time, in seconds east: `Some(None)` when there is none, `None`
/// when it is not one of `Z`, `±hh`, `±hh:mm`, `±hhmm` with hours up to 15.
#[inline]
fn plain_offset(s: &[u8]) -> Option<Option<i64>> {
    let two = |a: u8, b: u8| {
        (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from((a - b'0') * 10 + (b - b'0')))
    };
    let (sign, rest) = match s {
        [] => return Some(None),
        [b'Z'] => return Some(Some(0)),
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    let (hours, minutes) = match *rest {
        [h1, h2] => (two(h1, h2)?, 0),
        [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two(h1, h2)?, two(m1, m2)?),
        _ => return None,
    };
    if hours > 15 || minutes > 59 {
        return None;
    }
    Some(Some(sign * (hours * 3600 + minutes * 60)))
}

/// Encodes `timestamp` (`zone` is `None`) or `timestamptz` as microseconds since 2000-01-01,
/// in UTC for `timestamptz`.
pub fn encode_timestamp(
    value: &[u8],
    precision: Option<u32>,
    zone: Option<&SessionZone>,
    out: &mut Vec<u8>,
) -> Result<(), ConvertError> {
    let s = trim(value);
    let what = if zone.is_some() {
        "timestamptz"
    } else {
        "timestamp"
    };
    let t = match special(s) {
        Some(Special::Infinity) => i64::MAX,
        Some(Special::NegInfinity) => i64::MIN,
        None if s.eq_ignore_ascii_case(b"epoch") => {
            (date2j(1970, 1, 1) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY
        }
        None => {
            let p = parse_timestamp(s, what)?;
            let local = (p.julian - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY + p.time;
            let utc = match zone {
                // `timestamp` ignores an offset in its input, as PostgreSQL does.
                None => local,
                Some(z) => {
                    let offset = match p.offset {
                        Some(o) => o,
                        None => z.offset_for_local(p.julian, p.time)?,
                    };
                    local - offset * 1_000_000
                }
            };
            let t = round_precision(utc, precision);
            if !(MIN_TIMESTAMP..END_TIMESTAMP).contains(&t) {
                return Err(ConvertError::invalid(
                    "timestamp out of range (4713 BC to 294276 AD)",
                ));
            }
            t
        }
    };
    out.extend_from_slice(&t.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> Result<i32, ConvertError> {
        let mut out = Vec::new();
        encode_date(s.as_bytes(), &mut out)?;
        Ok(i32::from_be_bytes(out[..4].try_into().unwrap()))
    }

    fn ts(s: &str, p: Option<u32>, zone: Option<&SessionZone>) -> Result<i64, ConvertError> {
        let mut out = Vec::new();
        encode_timestamp(s.as_bytes(), p, zone, &mut out)?;
        Ok(i64::from_be_bytes(out[..8].try_into().unwrap()))
    }

    /// The table-driven day count agrees with `julian_day` (through [`iso_date_fast`]) on
    /// every year, every month number a file may hold and the days around each month's end.
    #[test]
    fn table_dates_agree_with_the_calendar_arithmetic() {
        let mut taken = 0;
        for y in 0..=9999 {
            for m in 0..=13 {
                for d in [0, 1, 2, 15, 27, 28, 29, 30, 31, 32, 99] {
                    let v = format!("{y:04}-{m:02}-{d:02}");
                    let table = iso_date_days(v.as_bytes(), swar::head16(v.as_bytes(), &[]));
                    let arithmetic =
                        iso_date_fast(v.as_bytes()).map(|j| (j - POSTGRES_EPOCH_JDATE) as i32);
                    assert_eq!(table, arithmetic, "{v}");
                    taken += usize::from(table.is_some());
                }
            }
        }
        assert!(taken > 10_000 * 12 * 7, "most of the grid is a real date");
    }

    #[test]
    fn dates() {
        assert_eq!(date("2000-01-01").unwrap(), 0);
        assert_eq!(date("1999-12-31").unwrap(), -1);
        assert_eq!(date(" 2024-02-29 ").unwrap(), 8825);
        assert_eq!(date("1970-01-01").unwrap(), -10957);
        assert_eq!(date("epoch").unwrap(), -10957);
        assert_eq!(date("infinity").unwrap(), i32::MAX);
        assert_eq!(date("-infinity").unwrap(), i32::MIN);
        // 1 BC is a leap year (astronomical year 0).
        assert!(date("0001-02-29 BC").is_ok());
        assert_eq!(date("4714-11-24 BC").unwrap(), -2_451_545);
        assert!(date("4714-11-23 BC").is_err());
        assert!(date("5874897-12-31").is_ok());
    }

    #[test]
    fn impossible_dates_say_why() {
        let e = date("2023-02-29").unwrap_err();
        assert_eq!(e.to_string(), "February 2023 has 28 days, not 29");
        assert!(matches!(date("2023-13-01"), Err(ConvertError::Invalid(_))));
        assert!(matches!(date("0000-01-01"), Err(ConvertError::Invalid(_))));
        assert!(matches!(
            date("Feb 1 2023"),
            Err(ConvertError::Unsupported(_))
        ));
        assert!(matches!(
            date("01-02-03"),
            Err(ConvertError::Unsupported(_))
        ));
    }

    #[test]
    fn timestamps() {
        assert_eq!(ts("2000-01-01 00:00:00", None, None).unwrap(), 0);
        assert_eq!(ts("2000-01-01T00:00:01.5", None, None).unwrap(), 1_500_000);
        assert_eq!(ts("2000-01-01 00:00:00.0000005", None, None).unwrap(), 0);
        assert_eq!(ts("2000-01-01 00:00:00.0000015", None, None).unwrap(), 2);
        assert_eq!(
            ts("2000-01-01 00:00:00.123456", Some(2), None).unwrap(),
            120_000
        );
        assert_eq!(
            ts("2000-01-01 00:00:00.125", Some(2), None).unwrap(),
            130_000
        );
        // timestamp ignores an offset.
        assert_eq!(ts("2000-01-01 00:00:00+05", None, None).unwrap(), 0);
        assert_eq!(ts("2000-01-01", None, None).unwrap(), 0);
        assert!(ts("2000-01-01 25:00:00", None, None).is_err());
        assert_eq!(
            ts("2000-01-01 23:59:60", None, None).unwrap(),
            USECS_PER_DAY
        );
    }

    #[test]
    fn timestamptz_offsets_and_zones() {
        let utc = SessionZone::from_setting("UTC");
        assert_eq!(
            ts("2000-01-01 05:30:00+05:30", None, Some(&utc)).unwrap(),
            0
        );
        assert_eq!(
            ts("2000-01-01 05:30:00 +0530", None, Some(&utc)).unwrap(),
            0
        );
        assert_eq!(ts("1999-12-31 19:00:00-05", None, Some(&utc)).unwrap(), 0);
        assert_eq!(ts("2000-01-01T00:00:00Z", None, Some(&utc)).unwrap(), 0);
        let ny = SessionZone::from_setting("America/New_York");
        assert_eq!(
            ts("1999-12-31 19:00:00", None, Some(&ny)).unwrap(),
            0,
            "EST is UTC-5"
        );
        // Gap: 02:30 does not exist on 2018-03-11; PostgreSQL uses the EST offset (-5).
        let gap = ts("2018-03-11 02:30:00", None, Some(&ny)).unwrap();
        let expect = ts("2018-03-11 07:30:00Z", None, Some(&utc)).unwrap();
        assert_eq!(gap, expect);
        // Overlap: 01:30 on 2018-11-04 happens twice; PostgreSQL picks standard time (-5).
        let overlap = ts("2018-11-04 01:30:00", None, Some(&ny)).unwrap();
        let expect = ts("2018-11-04 06:30:00Z", None, Some(&utc)).unwrap();
        assert_eq!(overlap, expect);
    }

    #[test]
    fn times() {
        let t = |s: &str, p| {
            let mut out = Vec::new();
            encode_time(s.as_bytes(), p, &mut out)
                .map(|_| i64::from_be_bytes(out[..8].try_into().unwrap()))
        };
        assert_eq!(t("00:00:01", None).unwrap(), 1_000_000);
        assert_eq!(t("24:00:00", None).unwrap(), USECS_PER_DAY);
        assert!(t("24:00:01", None).is_err());
        assert_eq!(t("12:34", None).unwrap(), (12 * 60 + 34) * 60_000_000);
        assert_eq!(t("00:00:00.4", Some(0)).unwrap(), 0);
        assert_eq!(t("00:00:00.5", Some(0)).unwrap(), 1_000_000);
    }
}
