//! Finding delimiter, escape, newline and carriage-return bytes 64 at a time.
//!
//! A text-format line has a delimiter every few bytes. Calling `memchr` per field pays its
//! setup cost on spans of eight bytes; instead [`Tokens`] compares a 64-byte window against the
//! three bytes at once (SSE2, present on every x86-64), keeps the matches as a bit mask and
//! yields positions with `trailing_zeros`, the technique of simdjson and simdcsv. Other
//! architectures get the same iterator over a scalar mask.

/// Positions of any of four bytes in a slice, in order.
pub struct Tokens<'a> {
    bytes: &'a [u8],
    /// Offset of the current window in `bytes`.
    base: usize,
    mask: u64,
    needles: [u8; 4],
}

impl<'a> Tokens<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8], needles: [u8; 4]) -> Tokens<'a> {
        let mut t = Tokens {
            bytes,
            base: 0,
            mask: 0,
            needles,
        };
        t.mask = t.window_mask(0);
        t
    }

    #[inline]
    fn window_mask(&self, at: usize) -> u64 {
        let rest = &self.bytes[at.min(self.bytes.len())..];
        if rest.len() >= 64 {
            mask64(&rest[..64], self.needles)
        } else {
            let mut m = 0u64;
            for (i, &b) in rest.iter().enumerate() {
                if self.needles.contains(&b) {
                    m |= 1 << i;
                }
            }
            m
        }
    }

    /// Drops matches before `pos` (to skip an escaped byte).
    #[inline]
    pub fn skip_to(&mut self, pos: usize) {
        while pos >= self.base + 64 {
            self.base += 64;
            if self.base >= self.bytes.len() {
                self.mask = 0;
                return;
            }
            self.mask = self.window_mask(self.base);
        }
        if pos > self.base {
            let shift = pos - self.base;
            self.mask &= !((1u64 << shift) - 1);
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        loop {
            if self.mask != 0 {
                let bit = self.mask.trailing_zeros() as usize;
                self.mask &= self.mask - 1;
                return Some(self.base + bit);
            }
            self.base += 64;
            if self.base >= self.bytes.len() {
                return None;
            }
            self.mask = self.window_mask(self.base);
        }
    }
}

/// Two bit masks over the window at the start of `bytes` (64 bytes, or what is left): bit
/// `i` of the first is set where byte `i` is `delimiter`, of the second where it is one of
/// `specials`. The text scanner walks the delimiters of a record in a tight loop and stops
/// only at a special byte (an escape, the line end, a stray line-end byte).
#[inline(always)]
pub fn window_masks(bytes: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    if bytes.len() >= 64 {
        return masks64(&bytes[..64], delimiter, specials);
    }
    let (mut d, mut s) = (0u64, 0u64);
    for (i, &b) in bytes.iter().enumerate() {
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

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn masks64(w: &[u8], delimiter: u8, specials: [u8; 3]) -> (u64, u64) {
    let (mut d, mut s) = (0u64, 0u64);
    for (i, &b) in w[..64].iter().enumerate() {
        d |= u64::from(b == delimiter) << i;
        s |= u64::from(specials.contains(&b)) << i;
    }
    (d, s)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn mask64(w: &[u8], needles: [u8; 4]) -> u64 {
    use std::arch::x86_64::*;
    debug_assert!(w.len() >= 64);
    // SAFETY: SSE2 is part of the x86-64 baseline; the four unaligned 16-byte loads stay
    // within `w`, which holds at least 64 bytes.
    unsafe {
        let a = _mm_set1_epi8(needles[0] as i8);
        let b = _mm_set1_epi8(needles[1] as i8);
        let c = _mm_set1_epi8(needles[2] as i8);
        let d = _mm_set1_epi8(needles[3] as i8);
        let mut m = 0u64;
        for i in 0..4 {
            let v = _mm_loadu_si128(w.as_ptr().add(16 * i) as *const __m128i);
            let hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, a), _mm_cmpeq_epi8(v, b)),
                _mm_or_si128(_mm_cmpeq_epi8(v, c), _mm_cmpeq_epi8(v, d)),
            );
            m |= u64::from(_mm_movemask_epi8(hit) as u16) << (16 * i);
        }
        m
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn mask64(w: &[u8], needles: [u8; 4]) -> u64 {
    let mut m = 0u64;
    for (i, &b) in w[..64].iter().enumerate() {
        if needles.contains(&b) {
            m |= 1 << i;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(b: &[u8], n: [u8; 4]) -> Vec<usize> {
        b.iter()
            .enumerate()
            .filter(|(_, &x)| n.contains(&x))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn agrees_with_a_naive_scan() {
        let mut data = Vec::new();
        for i in 0..1000u32 {
            data.push(b"ab|c\\\nxyz"[(i as usize * 7 + i as usize / 3) % 9]);
        }
        for len in [0, 1, 63, 64, 65, 127, 128, 129, 1000] {
            let n = [b'|', b'\\', b'\n', b'z'];
            let got: Vec<usize> = Tokens::new(&data[..len], n).collect();
            assert_eq!(got, naive(&data[..len], n), "len {len}");
        }
    }

    #[test]
    fn window_masks_agree_with_a_naive_scan() {
        let mut data = Vec::new();
        for i in 0..200u32 {
            data.push(b"ab|c\\\nxyz\r"[(i as usize * 7 + i as usize / 3) % 10]);
        }
        for start in [0, 1, 5, 100, 137, 150, 199, 200] {
            let w = &data[start..];
            let (d, s) = window_masks(w, b'|', [b'\\', b'\n', b'\r']);
            let n = w.len().min(64);
            let bits =
                |set: &[u8]| (0..n).fold(0u64, |m, i| m | (u64::from(set.contains(&w[i])) << i));
            assert_eq!(d, bits(b"|"), "start {start}");
            assert_eq!(s, bits(b"\\\n\r"), "start {start}");
        }
    }

    #[test]
    fn skip_to_drops_earlier_matches() {
        let data = b"|a|b|c|".repeat(30);
        let mut t = Tokens::new(&data, [b'|', 0xfd, 0xfe, 0xff]);
        t.skip_to(100);
        let rest: Vec<usize> = t.collect();
        assert_eq!(
            rest,
            naive(&data, [b'|', 0xfd, 0xfe, 0xff])
                .into_iter()
                .filter(|&p| p >= 100)
                .collect::<Vec<_>>()
        );
    }
}
