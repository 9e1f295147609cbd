//! Reading short fields a machine word at a time (SWAR: SIMD within a register).
//!
//! A flat file's fields are short: a key of 1 to 9 digits, a price like `21168.23`, a date
//! of exactly ten bytes, a flag of one letter. Byte-at-a-time loops spend a compare and a
//! branch per byte on them. Here a field's first 16 bytes are loaded at once ([`head16`]) and
//! checked and converted with a few word operations, independent of the field's length:
//! which bytes are not digits (or not ASCII, or a `.`) is one SSE2 compare and a `movemask`
//! into a bit mask, and 8 digits become a number in three multiplies (the technique of
//! simdjson's `parse_eight_digits_unrolled`).
//!
//! Loading 16 bytes from a field of 3 reads bytes that belong to the next fields. That is
//! sound only inside a slice that holds them, so [`head16`] takes the *window* the field lies
//! in (the parser's input) and reads past the field only when the window has 16 bytes there,
//! through a pointer derived from the window; otherwise it copies the field into a zeroed
//! buffer. Every function masks what lies past the field's length, so the two are
//! indistinguishable to the caller.
//!
//! Each function here has a plain scalar twin in [`crate::primitives`] (or inline in its
//! tests); the tests check them against each other on edge values and on generated values.

const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The first 16 bytes at `v`, little-endian (byte 0 of `v` is the lowest byte): exact for
/// `v.len()` bytes, unspecified past them. `window` is a slice that may contain `v`; when it
/// holds 16 bytes from `v`'s start, they are read in one load.
#[inline(always)]
pub fn head16(v: &[u8], window: &[u8]) -> u128 {
    let at = (v.as_ptr() as usize).wrapping_sub(window.as_ptr() as usize);
    if at <= window.len() && window.len() - at >= 16 {
        // SAFETY: `window[at..at + 16]` is in bounds (checked just above), and the pointer is
        // derived from `window`, which owns those bytes.
        let bytes: [u8; 16] = unsafe { window.as_ptr().add(at).cast::<[u8; 16]>().read() };
        return u128::from_le_bytes(bytes);
    }
    let mut bytes = [0u8; 16];
    let n = v.len().min(16);
    bytes[..n].copy_from_slice(&v[..n]);
    u128::from_le_bytes(bytes)
}

/// Bit `i` set where byte `i` of `x` satisfies a byte test, for the 16 bytes of `x`. On
/// x86-64 each mask is one SSE2 compare and a `movemask`, whatever the field's length.
#[cfg(target_arch = "x86_64")]
mod masks {
    use std::arch::x86_64::*;

    #[inline(always)]
    fn vector(x: u128) -> __m128i {
        // SAFETY: SSE2 is part of the x86-64 baseline.
        unsafe { _mm_set_epi64x((x >> 64) as i64, x as i64) }
    }

    /// Bytes that are not ASCII digits.
    #[inline(always)]
    pub fn nondigits(x: u128) -> u32 {
        // SAFETY: SSE2 is part of the x86-64 baseline. The compares are signed, so bytes of
        // 0x80 and up count as below '0'.
        unsafe {
            let v = vector(x);
            let low = _mm_cmplt_epi8(v, _mm_set1_epi8(b'0' as i8));
            let high = _mm_cmpgt_epi8(v, _mm_set1_epi8(b'9' as i8));
            _mm_movemask_epi8(_mm_or_si128(low, high)) as u32
        }
    }

    /// Bytes outside 1..=0x7f: not ASCII, or NUL.
    #[inline(always)]
    pub fn nonascii(x: u128) -> u32 {
        // SAFETY: as above; 1..=0x7f are exactly the bytes greater than 0 as signed.
        unsafe {
            let ok = _mm_cmpgt_epi8(vector(x), _mm_setzero_si128());
            !(_mm_movemask_epi8(ok) as u32) & 0xffff
        }
    }

    /// Bytes equal to `b`.
    #[inline(always)]
    pub fn equal(x: u128, b: u8) -> u32 {
        // SAFETY: as above.
        unsafe { _mm_movemask_epi8(_mm_cmpeq_epi8(vector(x), _mm_set1_epi8(b as i8))) as u32 }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod masks {
    #[inline(always)]
    fn each(x: u128, test: impl Fn(u8) -> bool) -> u32 {
        x.to_le_bytes()
            .iter()
            .enumerate()
            .fold(0, |m, (i, &b)| m | (u32::from(test(b)) << i))
    }

    pub fn nondigits(x: u128) -> u32 {
        each(x, |b| !b.is_ascii_digit())
    }

    pub fn nonascii(x: u128) -> u32 {
        each(x, |b| !(1..=0x7f).contains(&b))
    }

    pub fn equal(x: u128, b: u8) -> u32 {
        each(x, |c| c == b)
    }
}

/// The low `n` bits (`n` at most 16).
#[inline(always)]
fn low_bits(n: usize) -> u32 {
    (1u32 << n) - 1
}

/// Bit `i` set where byte `i` (of the first `n`) is not an ASCII digit.
#[inline(always)]
pub fn nondigits(x: u128, n: usize) -> u32 {
    masks::nondigits(x) & low_bits(n)
}

/// Bit `i` set where byte `i` (of the first `n`) is not in 1..=0x7f: not ASCII, or NUL.
#[inline(always)]
pub fn nonascii(x: u128, n: usize) -> u32 {
    masks::nonascii(x) & low_bits(n)
}

/// Bit `i` set where byte `i` of three consecutive 16-byte words (of the first `n`, at
/// most 48) is not in 1..=0x7f: a value of up to 48 bytes checked with no branch on its
/// length.
#[inline(always)]
pub fn nonascii48(blocks: [u128; 3], n: usize) -> u64 {
    debug_assert!(n <= 48);
    let [a, b, c] = blocks.map(|x| u64::from(masks::nonascii(x)));
    (a | b << 16 | c << 32) & ((1u64 << n) - 1)
}

/// Bit `i` set where byte `i` (of the first `n`) is `b`.
#[inline(always)]
pub fn equal(x: u128, n: usize, b: u8) -> u32 {
    masks::equal(x, b) & low_bits(n)
}

/// The value of `n` digits (1 to 8) in the low bytes of `word`, already known to be ASCII
/// digits; bytes past `n` are ignored.
#[inline(always)]
fn value8(word: u64, n: usize) -> u64 {
    debug_assert!((1..=8).contains(&n));
    let keep = u64::MAX >> (8 * (8 - n));
    // Subtracting '0' from every byte borrows only out of the bytes past `n`, upward, and
    // those are masked away. Shifting the digits to the top leaves zero digits below them.
    combine8(((word.wrapping_sub(ZEROS)) & keep) << (8 * (8 - n)))
}

/// Eight digit values (0 to 9, the most significant in byte 0) as one number.
#[inline(always)]
fn combine8(d: u64) -> u64 {
    let d = groups8(d);
    (d.wrapping_mul(10_000) + (d >> 32)) & 0xffff_ffff
}

/// Eight digit values (0 to 9, the most significant in byte 0) as two base-10000 digits:
/// the first four digits' value in bits 0..16, the last four's in bits 32..48, zero
/// elsewhere. Base 10000 is PostgreSQL's `numeric` digit.
#[inline(always)]
pub fn groups8(d: u64) -> u64 {
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
    (d.wrapping_mul(100) + (d >> 16)) & 0x0000_ffff_0000_ffff
}

/// The value of the first `n` bytes (1 to 16) of `x`, already known to be ASCII digits.
#[inline(always)]
pub fn value16(x: u128, n: usize) -> u64 {
    if n <= 8 {
        value8(x as u64, n)
    } else {
        let high = value8(x as u64, n - 8);
        let low = value8((x >> (8 * (n - 8))) as u64, 8);
        high * 100_000_000 + low
    }
}

/// The value of the first `n` bytes of `x` when they are 1 to 16 ASCII digits and nothing
/// else: the twin of [`crate::primitives::ascii_uint`] for fields of up to 16 bytes.
#[inline(always)]
pub fn digits16(x: u128, n: usize) -> Option<u64> {
    if n == 0 || n > 16 || nondigits(x, n) != 0 {
        return None;
    }
    Some(value16(x, n))
}

/// Whether every one of the first `n` (at most 16) bytes of `x` is in 1..=0x7f: ASCII
/// without NUL, so valid text whose length is its character count.
#[inline(always)]
pub fn plain_ascii16(x: u128, n: usize) -> bool {
    debug_assert!(n <= 16);
    nonascii(x, n) == 0
}

/// Whether every byte of `v` is in 1..=0x7f, 16 bytes per step; `head` is `v`'s first 16
/// bytes ([`head16`]), all a value of up to 16 bytes needs.
#[inline(always)]
pub fn plain_ascii(v: &[u8], head: u128) -> bool {
    if v.len() <= 16 {
        return plain_ascii16(head, v.len());
    }
    let block = |b: &[u8]| masks::nonascii(u128::from_le_bytes(b.try_into().unwrap_or([0; 16])));
    let bad = v.chunks_exact(16).fold(0, |bad, b| bad | block(b));
    // The last block overlaps the one before it rather than reading past the field.
    bad | block(&v[v.len() - 16..]) == 0
}

/// `YYYY-MM-DD` in the first ten bytes of `x`, each of the eight digit bytes checked, as
/// `(year, month, day)` unchecked against the calendar: the twin of the digit reading in
/// [`crate::primitives::iso_date`], which the caller's calendar check completes.
#[inline(always)]
pub fn iso_date_digits(x: u128) -> Option<(i64, i64, i64)> {
    const DASHES: u32 = (1 << 4) | (1 << 7);
    if nondigits(x, 10) != DASHES || equal(x, 10, b'-') != DASHES {
        return None;
    }
    // Gather YYYY, MM and DD into one word of eight digits.
    let w = x as u64;
    let digits = (w & 0xffff_ffff) | (((w >> 40) & 0xffff) << 32) | (((x >> 64) as u64) << 48);
    let d = digits.wrapping_sub(ZEROS);
    // Pairs of digits: YY, YY, MM, DD in the four 16-bit lanes.
    let pairs = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
    let year = (pairs & 0xff) * 100 + ((pairs >> 16) & 0xff);
    let month = (pairs >> 32) & 0xff;
    let day = pairs >> 48;
    Some((year as i64, month as i64, day as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primitives::ascii_uint;

    fn word(v: &[u8]) -> u128 {
        head16(v, &[])
    }

    fn scalar_ascii(v: &[u8]) -> bool {
        v.iter().all(|&b| (1..=0x7f).contains(&b))
    }

    #[test]
    fn head16_reads_inside_the_window_only() {
        let data = b"0123456789abcdefghij";
        assert_eq!(head16(&data[2..5], data) as u8, b'2');
        assert_eq!(
            (head16(&data[2..5], data) >> 24) as u8,
            b'5',
            "the window's next byte"
        );
        assert_eq!(
            (head16(&data[10..13], data) >> 24) as u8,
            0,
            "too close to the end: copied"
        );
        assert_eq!(head16(b"", data), 0);
    }

    #[test]
    fn digits_agree_with_the_scalar_path() {
        let cases: &[&[u8]] = &[
            b"0",
            b"7",
            b"09",
            b"99999999",
            b"100000000",
            b"1234567890123456",
            b"9999999999999999",
            b"12a",
            b"/",
            b":",
            b"1 ",
            b" 1",
            b"-1",
            b"1.5",
            b"\xff9",
            b"12345678\x00",
        ];
        for &c in cases {
            assert_eq!(
                digits16(head16(c, c), c.len()),
                ascii_uint(c, 16),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
    }

    #[test]
    fn ascii_agrees_with_the_scalar_path() {
        for len in 0..=48 {
            for bad in [None, Some(0u8), Some(0x80), Some(0xff), Some(0x7f), Some(1)] {
                for at in 0..len {
                    let mut v = vec![b'a'; len];
                    if let Some(b) = bad {
                        v[at] = b;
                    }
                    let scalar = scalar_ascii(&v);
                    assert_eq!(plain_ascii(&v, word(&v)), scalar, "{v:?}");
                    // Three words over the value and what follows it, which is not ASCII.
                    let mut padded = v.clone();
                    padded.resize(48, 0x80);
                    let blocks = [0, 16, 32].map(|k| word(&padded[k..k + 16]));
                    assert_eq!(nonascii48(blocks, len) == 0, scalar, "{v:?}");
                }
            }
        }
    }

    #[test]
    fn dates_read_each_digit() {
        assert_eq!(iso_date_digits(word(b"1996-03-13")), Some((1996, 3, 13)));
        assert_eq!(iso_date_digits(word(b"0001-01-01")), Some((1, 1, 1)));
        assert_eq!(iso_date_digits(word(b"9999-12-31")), Some((9999, 12, 31)));
        for bad in [
            &b"1996/03/13"[..],
            b"1996-3-13 ",
            b"199a-03-13",
            b"1996-03-1x",
        ] {
            assert_eq!(iso_date_digits(word(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn byte_masks_are_exact() {
        let x = word(b"21168.23");
        assert_eq!(equal(x, 8, b'.'), 1 << 5);
        assert_eq!(nondigits(x, 8), 1 << 5);
        assert_eq!(equal(word(b"..."), 3, b'.'), 0b111);
        assert_eq!(equal(word(b"abc."), 3, b'.'), 0, "past n");
        assert_eq!(
            nondigits(word(b"0123456789/:\x80\xff"), 14),
            0b11_1100_0000_0000
        );
    }

    mod generated {
        use super::super::*;
        use crate::primitives::{ascii_uint, iso_date};
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn digits_match(v in proptest::collection::vec(
                prop_oneof![b'0'..=b'9', any::<u8>()], 0..20)) {
                let scalar = ascii_uint(&v, 16).filter(|_| v.len() <= 16);
                prop_assert_eq!(digits16(head16(&v, &v), v.len()), scalar);
                let mut padded = v.clone();
                padded.extend_from_slice(b"|9999999999999999");
                prop_assert_eq!(digits16(head16(&padded[..v.len()], &padded), v.len()), scalar);
            }

            #[test]
            fn ascii_matches(v in proptest::collection::vec(
                prop_oneof![b' '..=b'~', any::<u8>()], 0..50)) {
                let scalar = v.iter().all(|&b| (1..=0x7f).contains(&b));
                prop_assert_eq!(plain_ascii(&v, head16(&v, &v)), scalar);
            }

            #[test]
            fn dates_match(y in 0u32..10000, m in 0u32..14, d in 0u32..33, sep in prop_oneof![Just(b'-'), any::<u8>()]) {
                let s = format!("{y:04}-{m:02}-{d:02}").into_bytes();
                let mut s2 = s.clone();
                s2[7] = sep;
                for v in [s, s2] {
                    let fast = iso_date_digits(head16(&v, &[]))
                        .filter(|&(y, m, d)| crate::primitives::is_calendar_date(y, m, d));
                    prop_assert_eq!(fast, iso_date(&v));
                }
            }
        }
    }
}
