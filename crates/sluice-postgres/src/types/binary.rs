//! PostgreSQL's binary COPY framing: header, tuples of length-prefixed fields, trailer.
//!
//! A field is an int32 byte length (-1 for NULL) followed by the type's `send` form. The
//! length is not known until the value is encoded, so [`FieldWriter`] reserves four bytes and
//! patches them afterwards: one pass, no intermediate buffer per field.

use sluice_core::primitives::{parse_i64, trim_c_space};

/// `PGCOPY\n\377\r\n\0`, flags (no OIDs), header extension length 0.
pub const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The file trailer: a tuple with field count -1.
pub const TRAILER: &[u8] = &[0xff, 0xff];

/// Starts a tuple of `n` fields.
#[inline]
pub fn begin_tuple(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as i16).to_be_bytes());
}

/// A field whose length is patched in when it is finished.
#[must_use = "a field must be finished to patch its length"]
pub struct FieldWriter {
    start: usize,
}

impl FieldWriter {
    #[inline]
    pub fn begin(out: &mut Vec<u8>) -> FieldWriter {
        let start = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        FieldWriter { start }
    }

    /// Where the field's length prefix starts, for truncating a failed field away.
    pub fn start(&self) -> usize {
        self.start
    }

    #[inline]
    pub fn finish(self, out: &mut [u8]) {
        let len = (out.len() - self.start - 4) as i32;
        out[self.start..self.start + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// Walks whole tuples in `tuples`, calling `each` with each one's end and the integer in its
/// field `column` (an `int2`, `int4` or `int8` send form; `None` for NULL or another width).
/// Stops at a tuple that does not fit (never the case for an encoder's own output).
pub fn split_tuples(tuples: &[u8], column: usize, each: &mut dyn FnMut(usize, Option<i64>)) {
    let mut at = 0;
    while let Some(count) = tuples.get(at..at + 2) {
        let fields = i16::from_be_bytes([count[0], count[1]]);
        at += 2;
        let mut key = None;
        for f in 0..fields.max(0) as usize {
            let Some(len) = tuples.get(at..at + 4) else {
                return;
            };
            let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            at += 4;
            let len = len.max(0) as usize;
            if f == column {
                key = tuples.get(at..at + len).and_then(integer);
            }
            at += len;
        }
        if at > tuples.len() {
            return;
        }
        each(at, key);
    }
}

/// An integer's send form, by its width.
fn integer(b: &[u8]) -> Option<i64> {
    Some(match b.len() {
        2 => i16::from_be_bytes(b.try_into().ok()?) as i64,
        4 => i32::from_be_bytes(b.try_into().ok()?) as i64,
        8 => i64::from_be_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// Walks whole text COPY lines in `lines` (tab-separated, each ending in a newline; a newline
/// in a value is escaped), as [`split_tuples`] does tuples. `\N`, NULL, is `None`.
pub fn split_lines(lines: &[u8], column: usize, each: &mut dyn FnMut(usize, Option<i64>)) {
    let mut at = 0;
    for end in memchr::memchr_iter(b'\n', lines) {
        let line = &lines[at..end];
        // As the encoder read it: spaces around an integer are allowed.
        let key = line
            .split(|&b| b == b'\t')
            .nth(column)
            .and_then(|v| parse_i64(trim_c_space(v)).ok());
        at = end + 1;
        each(at, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_split_with_their_keys() {
        let mut out = Vec::new();
        for (key, text) in [(Some(-7i64), "x"), (None, "yy"), (Some(1 << 40), "")] {
            begin_tuple(&mut out, 2);
            let w = FieldWriter::begin(&mut out);
            out.extend_from_slice(text.as_bytes());
            w.finish(&mut out);
            match key {
                Some(k) if k > i32::MAX as i64 => {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&k.to_be_bytes());
                }
                Some(k) => {
                    out.extend_from_slice(&4i32.to_be_bytes());
                    out.extend_from_slice(&(k as i32).to_be_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        let mut seen = Vec::new();
        split_tuples(&out, 1, &mut |end, key| seen.push((end, key)));
        let ends: Vec<usize> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ends, vec![15, 27, 45]);
        assert_eq!(ends[2], out.len());
        let keys: Vec<Option<i64>> = seen.iter().map(|s| s.1).collect();
        assert_eq!(keys, vec![Some(-7), None, Some(1 << 40)]);
    }

    #[test]
    fn lines_split_with_their_keys() {
        let lines = b"a\\tb\t-3\n\\N\t\\N\nc\t12\nd\t 7 \n";
        let mut seen = Vec::new();
        split_lines(lines, 1, &mut |end, key| seen.push((end, key)));
        assert_eq!(
            seen,
            vec![(8, Some(-3)), (14, None), (19, Some(12)), (25, Some(7))]
        );
    }

    #[test]
    fn header_layout() {
        assert_eq!(HEADER.len(), 19);
        assert_eq!(&HEADER[..11], b"PGCOPY\n\xff\r\n\0");
    }

    #[test]
    fn field_length_is_patched() {
        let mut out = Vec::new();
        begin_tuple(&mut out, 2);
        let w = FieldWriter::begin(&mut out);
        out.extend_from_slice(b"abc");
        w.finish(&mut out);
        out.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(out, b"\x00\x02\x00\x00\x00\x03abc\xff\xff\xff\xff");
    }
}
