//! PostgreSQL's binary COPY framing: header, tuples of length-prefixed fields, trailer.
//!
//! A field is an int32 byte length (-1 for NULL) followed by the type's `send` form. The
//! length is not known until the value is encoded, so [`FieldWriter`] reserves four bytes and
//! patches them afterwards: one pass, no intermediate buffer per field.

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

#[cfg(test)]
mod tests {
    use super::*;

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
