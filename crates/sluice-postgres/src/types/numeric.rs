//! `numeric`: exact decimal text to PostgreSQL's binary base-10000 form, with no floats.
//!
//! PostgreSQL's `numeric_in` accepts surrounding whitespace, a sign, `NaN`, `Infinity`/`inf`,
//! digits with an optional point and an optional exponent. With a typmod `numeric(p,s)` it
//! rounds to `s` fractional digits half away from zero (`round_var`) and then rejects a value
//! with more than `p - s` integer digits. This module does the same on decimal digits, then
//! groups them four at a time around the decimal point, which is the wire format:
//! `ndigits, weight, sign, dscale` as int16 followed by the base-10000 digits.

use super::convert::ConvertError;
use sluice_core::primitives::{parse_decimal, trim_c_space, Decimal};
use sluice_core::swar;

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
/// PostgreSQL's limit on the exponent in numeric input.
const MAX_EXPONENT: i64 = 1000;

/// A numeric column's plan for the fast path, worked out once per column rather than per
/// value: its typmod, and how many digits either side of the point the aligned step
/// ([`encode_aligned`]) takes with no rounding and no overflow possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastNumeric {
    /// The typmod's precision, or 0 for a column without one (a precision is at least 1).
    precision: i16,
    /// The typmod's scale (with a precision).
    scale: i16,
    /// The most integer digits the aligned step takes: 8, or fewer when the typmod allows
    /// fewer (a value with leading zeros past that takes the plain step), 0 when the
    /// aligned step does not apply to the column.
    max_int: u8,
    /// The most fraction digits the aligned step takes: the scale, or 8 with no typmod.
    max_frac: u8,
}

impl FastNumeric {
    /// The plan for a column of `typmod`, or `None` when it is beyond the fast path.
    pub fn new(typmod: Option<(i32, i32)>) -> Option<Self> {
        let Some((precision, scale)) = typmod else {
            return Some(FastNumeric {
                precision: 0,
                scale: 0,
                max_int: 8,
                max_frac: 8,
            });
        };
        let (p, s) = (i16::try_from(precision).ok()?, i16::try_from(scale).ok()?);
        if p < 1 {
            return None;
        }
        let aligned = (0..=8).contains(&scale) && precision >= scale;
        Some(FastNumeric {
            precision: p,
            scale: s,
            max_int: if aligned {
                (precision - scale).min(8) as u8
            } else {
                0
            },
            max_frac: if aligned { scale as u8 } else { 0 },
        })
    }

    /// The column's typmod.
    #[inline(always)]
    pub fn typmod(self) -> Option<(i32, i32)> {
        (self.precision > 0).then(|| (i32::from(self.precision), i32::from(self.scale)))
    }
}

/// The inlined fast path: a plain `-?digits[.digits]` value of at most 16 bytes that
/// [`encode_plain`] takes and that is valid, read with word operations from `head`, its
/// first 16 bytes ([`swar::head16`]), into `dst`: the length written, or `None` when the
/// general path is needed, which also words every error.
#[inline(always)]
pub fn encode_numeric_fast(
    value: &[u8],
    head: u128,
    column: FastNumeric,
    dst: &mut [u8; 32],
) -> Option<usize> {
    let negative = head as u8 == b'-' && !value.is_empty();
    let (n, x) = if negative {
        (value.len() - 1, head >> 8)
    } else {
        (value.len(), head)
    };
    if let Some(len) = encode_aligned(negative, n, x, column, dst) {
        return Some(len);
    }
    encode_unaligned(negative, n, x, column, dst)
}

/// The values [`encode_aligned`] declines, out of line so that the loop it is inlined into
/// keeps its registers for the common case.
#[inline(never)]
fn encode_unaligned(
    negative: bool,
    n: usize,
    x: u128,
    column: FastNumeric,
    dst: &mut [u8; 32],
) -> Option<usize> {
    encode_plain(negative, scan_plain_swar(n, x)?, column.typmod(), dst)?.ok()
}

/// `BELOW[k]`: the low `k` bytes of a word set.
const BELOW: [u64; 9] = {
    let mut t = [0u64; 9];
    let mut i = 1;
    while i <= 8 {
        t[i] = u64::MAX >> (64 - 8 * i);
        i += 1;
    }
    t
};

/// The commonest decimals in one step: up to the column's [`FastNumeric::max_int`] digits
/// (at most 8) before the point and its `max_frac` (at most 8, at most the scale, so with no
/// rounding to do) after. The digits go straight into base-10000 groups: the integer part is
/// moved to end at byte 8 and the fraction to start there, so that the point falls on a
/// group boundary, and the four groups are computed at once ([`swar::groups8`]), with no
/// division. The first `n` bytes of `x` are the value without its sign. `None` when the
/// value is anything else (the plain step or the general path decides); counting integer
/// digits rather than comparing the value leaves nothing the precision could refuse.
#[inline(always)]
fn encode_aligned(
    negative: bool,
    n: usize,
    x: u128,
    column: FastNumeric,
    dst: &mut [u8; 32],
) -> Option<usize> {
    if n == 0 || n > 16 {
        return None;
    }
    let others = swar::nondigits(x, n);
    let (dot, frac) = if others == 0 {
        (n, 0)
    } else {
        // One byte that is not a digit, and it is the point.
        if others & (others - 1) != 0 || swar::equal(x, n, b'.') != others {
            return None;
        }
        let dot = others.trailing_zeros() as usize;
        (dot, n - dot - 1)
    };
    if dot > usize::from(column.max_int) || frac > usize::from(column.max_frac) || dot + frac == 0 {
        return None;
    }
    let dscale = if column.precision > 0 {
        column.scale as usize
    } else {
        frac
    };
    // Digit values: '0'..'9' are 0x30..0x39, so XOR leaves 0..9 in each byte.
    let values = x ^ 0x3030_3030_3030_3030_3030_3030_3030_3030;
    // The integer digits end at byte 8: the 8-digit integer part, zero-padded in front
    // (with no integer digit, nothing is shifted, by 64 bits or none).
    let int = (values as u64 & BELOW[dot]).wrapping_shl(8 * (8 - dot) as u32);
    // The fraction digits start at byte 0 of the next word: zero-padded behind.
    let fraction = (values >> (8 * (dot + 1))) as u64 & BELOW[frac];
    let (int, fraction) = (swar::groups8(int), swar::groups8(fraction));
    // The four groups, most significant first, from the top of one word down.
    let packed = ((int & 0xffff) << 48)
        | ((int >> 32) << 32)
        | ((fraction & 0xffff) << 16)
        | (fraction >> 32);
    if packed == 0 {
        dst[..8].copy_from_slice(&(dscale as u64).to_be_bytes());
        return Some(8);
    }
    let first = packed.leading_zeros() as usize / 16;
    let ndigits = 4 - first - packed.trailing_zeros() as usize / 16;
    let sign = if negative { NUMERIC_NEG } else { NUMERIC_POS };
    dst[..8].copy_from_slice(&header(ndigits, 4 - first, 2, sign, dscale));
    dst[8..16].copy_from_slice(&(packed << (16 * first)).to_be_bytes());
    Some(8 + 2 * ndigits)
}

/// Encodes `value` as binary numeric into `out`, applying `typmod` (precision, scale).
/// `digits` is scratch space reused between calls.
pub fn encode_numeric(
    value: &[u8],
    typmod: Option<(i32, i32)>,
    digits: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(), ConvertError> {
    let s = trim_c_space(value);
    if s.is_empty() {
        return Err(ConvertError::invalid("not a number: the value is empty"));
    }
    if s.eq_ignore_ascii_case(b"nan") {
        return write_special(out, NUMERIC_NAN);
    }
    let (negative, body) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let mut buf = [0u8; 32];
    if let Some(done) = scan_plain(body).and_then(|p| encode_plain(negative, p, typmod, &mut buf)) {
        return done.map(|len| out.extend_from_slice(&buf[..len]));
    }
    if body.eq_ignore_ascii_case(b"infinity") || body.eq_ignore_ascii_case(b"inf") {
        if let Some((p, sc)) = typmod {
            return Err(ConvertError::invalid(format!(
                "numeric field overflow: numeric({p},{sc}) cannot hold an infinite value"
            )));
        }
        return write_special(out, if negative { NUMERIC_NINF } else { NUMERIC_PINF });
    }
    encode_general(negative, body, typmod, digits, out)
}

/// The general path for a finite value: any number of digits and any exponent, in decimal
/// digits, then rounded and checked against the typmod.
fn encode_general(
    negative: bool,
    body: &[u8],
    typmod: Option<(i32, i32)>,
    digits: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(), ConvertError> {
    let mut dec = parse_decimal(negative, body, digits, MAX_EXPONENT).ok_or_else(syntax)?;
    if let Some((precision, scale)) = typmod {
        dec.round_to_scale(scale as i64);
        let int_digits = if dec.digits.is_empty() {
            0
        } else {
            dec.point.max(0)
        };
        if int_digits > (precision - scale) as i64 {
            return Err(ConvertError::invalid(format!(
                "numeric field overflow: numeric({precision},{scale}) must round to an absolute \
                 value less than 10^{}",
                precision - scale
            )));
        }
    }
    write_decimal(&dec, out)
}

const POW10: [u64; 20] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
    10_000_000_000_000_000_000,
];

/// A plain decimal's digits as one integer: the value is `m / 10^frac`; `digits` counts
/// every digit written, leading zeros included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plain {
    m: u64,
    digits: usize,
    frac: usize,
}

/// `digits[.digits]` (at most 18 digits, at least one) as a [`Plain`], a byte at a time:
/// the general path's reading, and the reference for [`scan_plain_swar`].
fn scan_plain(s: &[u8]) -> Option<Plain> {
    let mut m: u64 = 0;
    let mut digits = 0usize;
    let mut frac: usize = 0;
    let mut seen_point = false;
    for &b in s {
        if b.is_ascii_digit() {
            if digits == 18 {
                return None;
            }
            m = m * 10 + u64::from(b - b'0');
            digits += 1;
            if seen_point {
                frac += 1;
            }
        } else if b == b'.' && !seen_point {
            seen_point = true;
        } else {
            return None;
        }
    }
    (digits > 0).then_some(Plain { m, digits, frac })
}

/// [`scan_plain`] for values of up to 16 bytes (`n` of them, the first 16 in `x`), with
/// word operations: the point is found in one step and the digits are read eight at a time.
/// `None` for anything longer or anything [`scan_plain`] would refuse.
#[inline(always)]
fn scan_plain_swar(n: usize, x: u128) -> Option<Plain> {
    if n == 0 || n > 16 {
        return None;
    }
    let others = swar::nondigits(x, n);
    if others == 0 {
        return Some(Plain {
            m: swar::value16(x, n),
            digits: n,
            frac: 0,
        });
    }
    // One byte that is not a digit, and it is the point.
    if others & (others - 1) != 0 || swar::equal(x, n, b'.') != others {
        return None;
    }
    let dot = others.trailing_zeros() as usize;
    let frac = n - dot - 1;
    if dot + frac == 0 {
        return None;
    }
    if n <= 9 {
        // Up to 8 digits around the point: close the gap (the bytes after the point move
        // down one) and read them as one number.
        let below = BELOW[dot];
        let joined = (x as u64 & below) | ((x >> 8) as u64 & !below);
        return Some(Plain {
            m: swar::value16(u128::from(joined), dot + frac),
            digits: dot + frac,
            frac,
        });
    }
    let int = if dot == 0 { 0 } else { swar::value16(x, dot) };
    let fraction = if frac == 0 {
        0
    } else {
        swar::value16(x >> (8 * (dot + 1)), frac)
    };
    Some(Plain {
        m: int * POW10[frac] + fraction,
        digits: dot + frac,
        frac,
    })
}

/// Encodes a [`Plain`] with the typmod's rounding and overflow check into `dst`, in u64
/// arithmetic: the length written, or `None` for a scale outside 0..=16 or a value whose
/// aligned digits pass 64 bits, which the general path handles. Same rules, same results.
/// `dst` may be the output's own reserved room: nothing is staged on the stack.
#[inline(always)]
fn encode_plain(
    negative: bool,
    plain: Plain,
    typmod: Option<(i32, i32)>,
    dst: &mut [u8; 32],
) -> Option<Result<usize, ConvertError>> {
    let Plain {
        mut m,
        digits,
        frac,
    } = plain;
    let dscale = match typmod {
        None => frac,
        Some((precision, scale)) => {
            if !(0..=16).contains(&scale) {
                return None;
            }
            let scale = scale as usize;
            if frac > scale {
                let div = POW10[frac - scale];
                let (q, r) = (m / div, m % div);
                m = q + u64::from(r * 2 >= div);
            } else if frac < scale {
                if digits + (scale - frac) > 18 {
                    return None;
                }
                m *= POW10[scale - frac];
            }
            if precision < scale as i32 {
                return None;
            }
            // m / 10^scale >= 10^(precision - scale), without the division.
            if precision <= 19 && m >= POW10[precision as usize] {
                let allowed = precision - scale as i32;
                return Some(Err(ConvertError::invalid(format!(
                    "numeric field overflow: numeric({precision},{scale}) must round to an \
                     absolute value less than 10^{allowed}"
                ))));
            }
            scale
        }
    };
    if dscale > 16 {
        return None;
    }
    let sign = if negative { NUMERIC_NEG } else { NUMERIC_POS };
    if m == 0 {
        dst[..8].copy_from_slice(&(u64::from(dscale as u16)).to_be_bytes());
        return Some(Ok(8));
    }
    // Align the point to a group boundary: value = v / 10000^frac_groups.
    let frac_groups = dscale.div_ceil(4);
    let mut v = m.checked_mul(POW10[frac_groups * 4 - dscale])?;
    if v < 1_000_000_000_000 {
        // Up to three base-10000 digits, as flat files' prices and rates have: computed with
        // two constant divisions and written with one store.
        let (g0, t) = (v % 10_000, v / 10_000);
        let (g1, g2) = (t % 10_000, t / 10_000);
        let groups = 1 + usize::from(t != 0) + usize::from(g2 != 0);
        let low = if g0 != 0 {
            0
        } else if g1 != 0 {
            1
        } else {
            2
        };
        let ndigits = groups - low;
        dst[..8].copy_from_slice(&header(ndigits, groups, frac_groups, sign, dscale));
        // The significant groups at the top of one word, most significant first.
        let packed = ((g2 << 32) | (g1 << 16) | g0) << (16 * (4 - groups));
        dst[8..16].copy_from_slice(&packed.to_be_bytes());
        return Some(Ok(8 + 2 * ndigits));
    }
    // Base-10000 digits: how many, then the trailing zero groups dropped.
    let mut groups = 1;
    while groups < 5 && v >= POW10[4 * groups] {
        groups += 1;
    }
    let mut low = 0;
    while v % 10_000 == 0 {
        v /= 10_000;
        low += 1;
    }
    let ndigits = groups - low;
    dst[..8].copy_from_slice(&header(ndigits, groups, frac_groups, sign, dscale));
    for k in (0..ndigits).rev() {
        dst[8 + 2 * k..10 + 2 * k].copy_from_slice(&((v % 10_000) as u16).to_be_bytes());
        v /= 10_000;
    }
    Some(Ok(8 + 2 * ndigits))
}

/// A numeric's header, for a value of `groups` base-10000 digits (from its most significant
/// one down to the last of its `frac_groups` fraction digits), of which `ndigits` are kept
/// (trailing zero digits dropped): the digit count, the weight (the first digit's power of
/// 10000), the sign and the display scale.
#[inline(always)]
fn header(ndigits: usize, groups: usize, frac_groups: usize, sign: u16, dscale: usize) -> [u8; 8] {
    let weight = groups as i64 - frac_groups as i64 - 1;
    (((ndigits as u64) << 48)
        | ((weight as u16 as u64) << 32)
        | (u64::from(sign) << 16)
        | dscale as u64)
        .to_be_bytes()
}

fn write_special(out: &mut Vec<u8>, sign: u16) -> Result<(), ConvertError> {
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    Ok(())
}

fn syntax() -> ConvertError {
    ConvertError::invalid("not a valid number")
}

fn write_decimal(dec: &Decimal<'_>, out: &mut Vec<u8>) -> Result<(), ConvertError> {
    let dscale = dec.dscale;
    if dscale > 0x3FFF {
        return Err(ConvertError::invalid(
            "value overflows numeric format: too many fractional digits",
        ));
    }
    let significant = dec
        .digits
        .iter()
        .rposition(|&d| d != 0)
        .map_or(0, |p| p + 1);
    if significant == 0 {
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&NUMERIC_POS.to_be_bytes());
        out.extend_from_slice(&(dscale as u16).to_be_bytes());
        return Ok(());
    }
    let first_exp = dec.point - 1;
    let weight = first_exp.div_euclid(4);
    if weight > i16::MAX as i64 || weight < i16::MIN as i64 {
        return Err(ConvertError::invalid("value overflows numeric format"));
    }
    let pad = (3 - first_exp.rem_euclid(4)) as usize;
    let total = pad + significant;
    let ngroups = total.div_ceil(4);
    out.extend_from_slice(&(ngroups as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    let sign = if dec.negative {
        NUMERIC_NEG
    } else {
        NUMERIC_POS
    };
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(dscale as u16).to_be_bytes());
    let digit = |k: usize| -> u16 {
        if k < pad || k - pad >= significant {
            0
        } else {
            u16::from(dec.digits[k - pad])
        }
    };
    for g in 0..ngroups {
        let k = g * 4;
        let v = digit(k) * 1000 + digit(k + 1) * 100 + digit(k + 2) * 10 + digit(k + 3);
        out.extend_from_slice(&v.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the binary form back to PostgreSQL's text output, for readable assertions.
    fn decode(b: &[u8]) -> String {
        let rd = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let n = rd(0) as usize;
        let weight = rd(2) as i16 as i64;
        let sign = rd(4);
        let dscale = rd(6) as i64;
        match sign {
            NUMERIC_NAN => return "NaN".into(),
            NUMERIC_PINF => return "Infinity".into(),
            NUMERIC_NINF => return "-Infinity".into(),
            _ => {}
        }
        let groups: Vec<u16> = (0..n).map(|g| rd(8 + 2 * g)).collect();
        let mut int = String::new();
        for w in (0..=weight.max(0)).rev() {
            let idx = weight - w;
            let g = if idx >= 0 && (idx as usize) < n {
                groups[idx as usize]
            } else {
                0
            };
            if int.is_empty() {
                if g != 0 {
                    int = g.to_string();
                }
            } else {
                int.push_str(&format!("{g:04}"));
            }
        }
        if int.is_empty() {
            int = "0".into();
        }
        let mut frac = String::new();
        let mut w = -1;
        while (frac.len() as i64) < dscale {
            let idx = weight - w;
            let g = if idx >= 0 && (idx as usize) < n {
                groups[idx as usize]
            } else {
                0
            };
            frac.push_str(&format!("{g:04}"));
            w -= 1;
        }
        frac.truncate(dscale as usize);
        let neg = if sign == NUMERIC_NEG { "-" } else { "" };
        if dscale > 0 {
            format!("{neg}{int}.{frac}")
        } else {
            format!("{neg}{int}")
        }
    }

    fn enc(s: &str, typmod: Option<(i32, i32)>) -> Result<String, ConvertError> {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        encode_numeric(s.as_bytes(), typmod, &mut scratch, &mut out)?;
        Ok(decode(&out))
    }

    #[test]
    fn plain_values() {
        assert_eq!(enc("17954.55", None).unwrap(), "17954.55");
        assert_eq!(enc("  -0.0010 ", None).unwrap(), "-0.0010");
        assert_eq!(enc("0", None).unwrap(), "0");
        assert_eq!(enc("-0.00", None).unwrap(), "0.00");
        assert_eq!(enc("+12345678", None).unwrap(), "12345678");
        assert_eq!(enc(".5", None).unwrap(), "0.5");
        assert_eq!(enc("5.", None).unwrap(), "5");
        assert_eq!(
            enc("123456789012345678901234567890", None).unwrap(),
            "123456789012345678901234567890"
        );
    }

    #[test]
    fn exponents() {
        assert_eq!(enc("1.5e3", None).unwrap(), "1500");
        assert_eq!(enc("1.5E-3", None).unwrap(), "0.0015");
        assert_eq!(enc("12e-1", None).unwrap(), "1.2");
        assert!(enc("1e1001", None).is_err());
        assert!(enc("1e", None).is_err());
    }

    #[test]
    fn specials() {
        assert_eq!(enc("NaN", None).unwrap(), "NaN");
        assert_eq!(enc("-Infinity", None).unwrap(), "-Infinity");
        assert_eq!(enc("inf", None).unwrap(), "Infinity");
        assert_eq!(enc("nan", Some((5, 2))).unwrap(), "NaN");
        assert!(enc("Infinity", Some((5, 2))).is_err());
        assert!(enc("-NaN", None).is_err());
    }

    #[test]
    fn typmod_rounds_half_away_from_zero() {
        assert_eq!(enc("2.345", Some((10, 2))).unwrap(), "2.35");
        assert_eq!(enc("-2.345", Some((10, 2))).unwrap(), "-2.35");
        assert_eq!(enc("2.344", Some((10, 2))).unwrap(), "2.34");
        assert_eq!(enc("9.999", Some((10, 2))).unwrap(), "10.00");
        assert_eq!(enc("0.004", Some((10, 2))).unwrap(), "0.00");
        assert_eq!(enc("0.005", Some((10, 2))).unwrap(), "0.01");
        assert_eq!(enc("0.6", Some((3, 0))).unwrap(), "1");
        assert_eq!(enc("7", Some((5, 3))).unwrap(), "7.000");
        assert_eq!(enc("12345", Some((2, -3))).unwrap(), "12000");
    }

    #[test]
    fn typmod_precision_overflow() {
        assert!(enc("1000.00", Some((5, 2))).is_err());
        assert!(enc("999.995", Some((5, 2))).is_err());
        assert_eq!(enc("999.994", Some((5, 2))).unwrap(), "999.99");
        let e = enc("123456", Some((5, 0))).unwrap_err();
        assert!(e.to_string().contains("numeric field overflow"), "{e}");
    }

    #[test]
    fn fast_path_agrees_with_general_path() {
        let cases = [
            "0",
            "-0",
            "0.00",
            "1",
            "-1",
            "17954.55",
            "0.04",
            "-0.005",
            "12.345",
            "99999999.994",
            "123456789012345678",
            "0.000000000000001",
            "1000",
            "10000.0001",
            "9999.9999",
            "100000000",
            "-2.345",
            "7",
            "0.6",
            "21168.23",
            "-0.05",
            "99999999",
            "99999999.99999999",
            "0.00000001",
            "12345678.1234",
            "1.",
            ".5",
            "-.5",
            "00001234.5000",
            "123456789.1",
            "1.123456789",
        ];
        let typmods = [
            None,
            Some((10, 2)),
            Some((15, 2)),
            Some((18, 6)),
            Some((5, 0)),
            Some((30, 10)),
            Some((10, 4)),
            Some((5, 2)),
            Some((8, 8)),
            Some((2, 0)),
            Some((18, 9)),
            Some((3, -1)),
        ];
        for c in cases {
            for t in typmods {
                // The whole fast path, the aligned step first.
                fast_equals_general(c.as_bytes(), t);
                // The plain step alone.
                let mut fast = Vec::new();
                let (neg, body) = match c.strip_prefix('-') {
                    Some(b) => (true, b),
                    None => (false, c),
                };
                let plain = scan_plain(body.as_bytes());
                assert_eq!(
                    scan_plain_swar(body.len(), swar::head16(body.as_bytes(), &[])),
                    plain.filter(|_| body.len() <= 16),
                    "{c}"
                );
                let mut buf = [0u8; 32];
                let Some(fast_result) = plain.and_then(|p| encode_plain(neg, p, t, &mut buf))
                else {
                    continue;
                };
                let fast_result = fast_result.map(|len| fast.extend_from_slice(&buf[..len]));
                let mut general = Vec::new();
                let general_result =
                    encode_general(neg, body.as_bytes(), t, &mut Vec::new(), &mut general);
                assert_eq!(fast_result.is_ok(), general_result.is_ok(), "{c} {t:?}");
                if fast_result.is_ok() {
                    assert_eq!(decode(&fast), decode(&general), "{c} {t:?}");
                    assert_eq!(fast, general, "{c} {t:?} bytes");
                }
            }
        }
    }

    /// [`encode_numeric_fast`] (the aligned step first, then the plain one) on `v`, against
    /// the general path: where the fast path answers, the bytes are the same.
    fn fast_equals_general(v: &[u8], typmod: Option<(i32, i32)>) -> bool {
        let mut padded = v.to_vec();
        padded.extend_from_slice(b"|9.5|12345678901234");
        let head = swar::head16(&padded[..v.len()], &padded);
        let mut buf = [0u8; 32];
        let Some(column) = FastNumeric::new(typmod) else {
            return false;
        };
        let Some(len) = encode_numeric_fast(v, head, column, &mut buf) else {
            return false;
        };
        let mut general = Vec::new();
        let result = encode_numeric(v, typmod, &mut Vec::new(), &mut general);
        assert!(
            result.is_ok(),
            "{v:?} {typmod:?}: fast took what general refused"
        );
        assert_eq!(
            &buf[..len],
            &general[..],
            "{:?} {typmod:?}",
            String::from_utf8_lossy(v)
        );
        true
    }

    /// The aligned step takes the commonest values, so that the comparisons above are not
    /// vacuous for it, and declines what would overflow.
    #[test]
    fn aligned_step_takes_the_common_values() {
        let mut dst = [0u8; 32];
        for (c, t) in [
            ("21168.23", Some((15, 2))),
            ("0.04", Some((15, 2))),
            ("17", None),
        ] {
            let x = swar::head16(c.as_bytes(), &[]);
            let column = FastNumeric::new(t).unwrap();
            assert!(
                encode_aligned(false, c.len(), x, column, &mut dst).is_some(),
                "{c} takes the aligned step, so the comparison is not vacuous"
            );
        }
        let x = swar::head16(b"1000.00", &[]);
        let column = FastNumeric::new(Some((5, 2))).unwrap();
        assert_eq!(
            encode_aligned(false, 7, x, column, &mut dst),
            None,
            "overflow"
        );
        assert_eq!(
            FastNumeric::new(Some((3, -1))).map(|c| (c.max_int, c.max_frac)),
            Some((0, 0)),
            "a negative scale is left to the plain step"
        );
    }

    #[test]
    fn syntax_errors() {
        for bad in ["", "abc", "1.2.3", "--1", "1 2", "0x10", "."] {
            assert!(enc(bad, None).is_err(), "{bad:?} should fail");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]

        /// The word-at-a-time reading of a plain decimal equals the byte-at-a-time one, and
        /// both encodings equal the general path's, on generated values and garbage.
        #[test]
        fn plain_scans_agree(
            int in proptest::collection::vec(b'0'..=b'9', 0..12),
            frac in proptest::option::of(proptest::collection::vec(b'0'..=b'9', 0..10)),
            noise in proptest::option::of((0usize..20, proptest::prelude::any::<u8>())),
            scale in 0i32..8,
        ) {
            let mut v = int;
            if let Some(f) = frac {
                v.push(b'.');
                v.extend_from_slice(&f);
            }
            if let Some((at, b)) = noise {
                if at < v.len() {
                    v[at] = b;
                }
            }
            let plain = scan_plain(&v);
            let mut padded = v.clone();
            padded.extend_from_slice(b"|.5|12345678901234");
            let swar = scan_plain_swar(v.len(), swar::head16(&padded[..v.len()], &padded));
            proptest::prop_assert_eq!(swar, plain.filter(|_| v.len() <= 16));
            for t in [None, Some((15, scale)), Some((4, scale.min(3)))] {
                let mut buf = [0u8; 32];
                let Some(Ok(len)) = plain.and_then(|p| encode_plain(false, p, t, &mut buf)) else {
                    continue;
                };
                let mut general = Vec::new();
                encode_general(false, &v, t, &mut Vec::new(), &mut general).unwrap();
                proptest::prop_assert_eq!(&buf[..len], &general[..]);
            }
        }

        /// The whole fast path, the aligned step first, equals the general path on
        /// generated signed values, for typmods with and without room and rounding.
        #[test]
        fn fast_path_agrees_on_generated_values(
            negative in proptest::prelude::any::<bool>(),
            int in proptest::collection::vec(b'0'..=b'9', 0..11),
            frac in proptest::option::of(proptest::collection::vec(b'0'..=b'9', 0..11)),
            noise in proptest::option::of((0usize..20, proptest::prelude::any::<u8>())),
            precision in 1i32..20,
            scale in -2i32..10,
        ) {
            let mut v = if negative { b"-".to_vec() } else { Vec::new() };
            v.extend_from_slice(&int);
            if let Some(f) = frac {
                v.push(b'.');
                v.extend_from_slice(&f);
            }
            if let Some((at, b)) = noise {
                if at < v.len() {
                    v[at] = b;
                }
            }
            for t in [None, Some((precision, scale)), Some((precision.max(scale), scale))] {
                fast_equals_general(&v, t);
            }
        }
    }
}
