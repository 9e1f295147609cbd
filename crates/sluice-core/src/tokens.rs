//! Finding delimiter, escape, quote, newline and carriage-return bytes 64 at a time.
//!
//! A text-format line has a delimiter every few bytes. Calling `memchr` per field pays its
//! setup cost on spans of eight bytes; instead [`window_masks`] compares a 64-byte window
//! against the delimiter and the special bytes at once (SSE2, present on every x86-64) and
//! returns the matches as two bit masks, which the record splitter walks with
//! `trailing_zeros`: the structural index of simdjson and simdcsv. Other architectures get
//! the same masks from a scalar loop.

/// Two bit masks over the window at the start of `bytes` (64 bytes, or what is left): bit
/// `i` of the first is set where byte `i` is `delimiter`, of the second where it is one of
/// `specials`. The text scanner walks the delimiters of a record in a tight loop and stops
/// only at a special byte (an escape, the line end, a stray line-end byte).
#[inline(always)]
pub fn window_masks(bytes: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    if bytes.len() >= 64 {
        return masks64(&bytes[..64], delimiter, specials);
    }
    scalar_masks(bytes, delimiter, specials)
}

/// The masks a byte at a time, for a window's last few bytes and for other architectures.
#[inline]
fn scalar_masks(bytes: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    let (mut d, mut s) = (0u64, 0u64);
    for (i, &b) in bytes.iter().take(64).enumerate() {
        d |= u64::from(b == delimiter) << i;
        s |= u64::from(specials.contains(&b)) << i;
    }
    (d, s)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn masks64(w: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    use std::arch::x86_64::*;
    debug_assert!(w.len() >= 64);
    // SAFETY: SSE2 is part of the x86-64 baseline; the four unaligned 16-byte loads stay
    // within `w`, which holds at least 64 bytes.
    unsafe {
        let d = _mm_set1_epi8(delimiter as i8);
        let a = _mm_set1_epi8(specials[0] as i8);
        let b = _mm_set1_epi8(specials[1] as i8);
        let c = _mm_set1_epi8(specials[2] as i8);
        let (mut dm, mut sm) = (0u64, 0u64);
        for i in 0..4 {
            let v = _mm_loadu_si128(w.as_ptr().add(16 * i) as *const __m128i);
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, a), _mm_cmpeq_epi8(v, b)),
                _mm_cmpeq_epi8(v, c),
            );
            dm |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, d)) as u16) << (16 * i);
            sm |= u64::from(_mm_movemask_epi8(hit) as u16) << (16 * i);
        }
        (dm, sm)
    }
}

/// The bytes [`plain_masks`] finds: one mask each for the delimiter, the line end and the
/// quote, and one for either byte of `decide` (those that send a record to the general
/// path).
#[derive(Clone, Copy, Debug)]
pub struct PlainBytes {
    pub delimiter: u8,
    pub newline: u8,
    pub quote: u8,
    pub decide: [u8; 2],
}

/// The masks of the plain-record index ([`crate::records::PlainIndex`]) over the window at
/// the start of `bytes` (64 bytes, or what is left), one per field of `find`.
#[inline(always)]
pub fn plain_masks(bytes: &[u8], find: PlainBytes) -> (u64, u64, u64, u64) {
    if bytes.len() >= 64 {
        return plain_masks64(&bytes[..64], find);
    }
    scalar_plain_masks(bytes, find)
}

/// [`plain_masks`] with 32-byte AVX2 compares: two loads per window instead of four, and no
/// shuffling of 16-bit masks together.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn plain_masks_avx2(bytes: &[u8], find: PlainBytes) -> (u64, u64, u64, u64) {
    use std::arch::x86_64::*;
    if bytes.len() < 64 {
        return scalar_plain_masks(bytes, find);
    }
    let d = _mm256_set1_epi8(find.delimiter as i8);
    let n = _mm256_set1_epi8(find.newline as i8);
    let q = _mm256_set1_epi8(find.quote as i8);
    let a = _mm256_set1_epi8(find.decide[0] as i8);
    let b = _mm256_set1_epi8(find.decide[1] as i8);
    let mask = |v: __m256i| _mm256_movemask_epi8(v) as u32 as u64;
    // SAFETY: the two unaligned 32-byte loads stay within `bytes`, which holds 64 or more.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(bytes.as_ptr() as *const __m256i),
            _mm256_loadu_si256(bytes.as_ptr().add(32) as *const __m256i),
        )
    };
    let equal =
        |c: __m256i| mask(_mm256_cmpeq_epi8(lo, c)) | (mask(_mm256_cmpeq_epi8(hi, c)) << 32);
    let either = |v: __m256i| _mm256_or_si256(_mm256_cmpeq_epi8(v, a), _mm256_cmpeq_epi8(v, b));
    (
        equal(d),
        equal(n),
        equal(q),
        mask(either(lo)) | (mask(either(hi)) << 32),
    )
}

#[inline]
fn scalar_plain_masks(bytes: &[u8], find: PlainBytes) -> (u64, u64, u64, u64) {
    let mut m = (0u64, 0u64, 0u64, 0u64);
    for (i, &b) in bytes.iter().take(64).enumerate() {
        m.0 |= u64::from(b == find.delimiter) << i;
        m.1 |= u64::from(b == find.newline) << i;
        m.2 |= u64::from(b == find.quote) << i;
        m.3 |= u64::from(find.decide.contains(&b)) << i;
    }
    m
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn plain_masks64(w: &[u8], find: PlainBytes) -> (u64, u64, u64, u64) {
    use std::arch::x86_64::*;
    debug_assert!(w.len() >= 64);
    // SAFETY: SSE2 is part of the x86-64 baseline; the four unaligned 16-byte loads stay
    // within `w`, which holds at least 64 bytes.
    unsafe {
        let d = _mm_set1_epi8(find.delimiter as i8);
        let n = _mm_set1_epi8(find.newline as i8);
        let q = _mm_set1_epi8(find.quote as i8);
        let a = _mm_set1_epi8(find.decide[0] as i8);
        let b = _mm_set1_epi8(find.decide[1] as i8);
        let mask = |v: __m128i| _mm_movemask_epi8(v) as u16 as u64;
        let mut m = (0u64, 0u64, 0u64, 0u64);
        for i in 0..4 {
            let v = _mm_loadu_si128(w.as_ptr().add(16 * i) as *const __m128i);
            m.0 |= mask(_mm_cmpeq_epi8(v, d)) << (16 * i);
            m.1 |= mask(_mm_cmpeq_epi8(v, n)) << (16 * i);
            m.2 |= mask(_mm_cmpeq_epi8(v, q)) << (16 * i);
            m.3 |= mask(_mm_or_si128(_mm_cmpeq_epi8(v, a), _mm_cmpeq_epi8(v, b))) << (16 * i);
        }
        m
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn plain_masks64(w: &[u8], find: PlainBytes) -> (u64, u64, u64, u64) {
    scalar_plain_masks(w, find)
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn masks64(w: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    scalar_masks(w, delimiter, specials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_masks_agree_with_a_naive_scan() {
        let mut data = Vec::new();
        for i in 0..200u32 {
            data.push(b"ab|c\\\nx\"z\r"[(i as usize * 7 + i as usize / 3) % 10]);
        }
        for start in [0, 1, 5, 100, 137, 150, 199, 200] {
            let w = &data[start..];
            let (d, s) = window_masks(w, b'|', [b'\\', b'\n', b'\r']);
            let n = w.len().min(64);
            let bits =
                |set: &[u8]| (0..n).fold(0u64, |m, i| m | (u64::from(set.contains(&w[i])) << i));
            assert_eq!(d, bits(b"|"), "start {start}");
            assert_eq!(s, bits(b"\\\n\r"), "start {start}");
            let find = PlainBytes {
                delimiter: b'|',
                newline: b'\n',
                quote: b'"',
                decide: [b'\\', b'\r'],
            };
            let masks = plain_masks(w, find);
            let (d, n, q, s) = masks;
            assert_eq!(d, bits(b"|"), "start {start}");
            assert_eq!(n, bits(b"\n"), "start {start}");
            assert_eq!(q, bits(b"\""), "start {start}");
            assert_eq!(s, bits(b"\\\r"), "start {start}");
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: checked just above.
                let wide = unsafe { plain_masks_avx2(w, find) };
                assert_eq!(wide, masks, "start {start}");
            }
        }
    }
}
