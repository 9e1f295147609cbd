//! Safe places to cut one big file into byte-range chunks that load on separate connections.
//!
//! A chunk must start exactly where a record starts, or rows would be torn in two. For text and
//! tbl that is just after a newline that is not escaped by an odd run of backslashes. CSV is
//! harder: a newline inside quotes is data, and from the middle of a file nothing says whether
//! we are inside quotes. PostgreSQL's own line reader toggles "in quotes" at every quote
//! character, and when the escape character is the quote itself a doubled quote toggles twice,
//! so the parity of the number of quotes from the start of the file says exactly whether a
//! position is quoted. sluice therefore counts quotes per stretch (cheap, parallel, `memchr`
//! speed), turns the counts into a parity at each cut, and cuts only at a newline where the
//! parity is even. With a distinct escape character (`\"` style) parity says nothing, and such
//! a file is loaded on one stream: correctness first.

use crate::dialect::Dialect;
use memchr::{memchr, memchr_iter};

/// Whether a file of this dialect can be cut into chunks at all.
pub fn splittable(dialect: &Dialect) -> bool {
    !dialect.is_csv() || dialect.escape == dialect.quote
}

/// The number of quote bytes in `bytes`, for the parity of CSV cuts.
pub fn count_quotes(bytes: &[u8], quote: u8) -> u64 {
    memchr_iter(quote, bytes).count() as u64
}

/// Finds the first record start at or after `from` in `window`, which is a stretch of a file
/// (not its start). `in_quotes_at_start` is the CSV quote parity at `window[0]` (ignored for
/// text and tbl). Returns the offset in `window` just after the chosen newline.
pub fn next_record_start(
    dialect: &Dialect,
    window: &[u8],
    from: usize,
    in_quotes_at_start: bool,
) -> Option<usize> {
    let newline = dialect.line_ending.terminator();
    if dialect.is_csv() {
        let mut in_quotes = in_quotes_at_start;
        for &b in &window[..from] {
            if b == dialect.quote {
                in_quotes = !in_quotes;
            }
        }
        for (i, &b) in window.iter().enumerate().skip(from) {
            if b == dialect.quote {
                in_quotes = !in_quotes;
            } else if b == newline && !in_quotes {
                return Some(i + 1);
            }
        }
        return None;
    }
    let mut pos = from;
    loop {
        let nl = pos + memchr(newline, &window[pos..])?;
        let mut k = nl;
        while k > 0 && window[k - 1] == b'\\' {
            k -= 1;
        }
        // A run of backslashes reaching the window start is ambiguous: try the next newline.
        if k > 0 && (nl - k).is_multiple_of(2) {
            return Some(nl + 1);
        }
        pos = nl + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Format;

    #[test]
    fn text_skips_escaped_newlines() {
        let d = Dialect::new(Format::Text);
        let w = b"xa\\\nb\nc\n";
        assert_eq!(next_record_start(&d, w, 1, false), Some(6));
        let w2 = b"xa\\\\\nb";
        assert_eq!(next_record_start(&d, w2, 1, false), Some(5));
    }

    #[test]
    fn csv_respects_parity() {
        let d = Dialect::new(Format::Csv);
        // Window starts inside a quoted field that spans a newline.
        let w = b"ab\ncd\",e\nf,g\n";
        assert_eq!(next_record_start(&d, w, 0, true), Some(9));
        assert_eq!(next_record_start(&d, w, 0, false), Some(3));
        // Doubled quotes toggle twice.
        let w2 = b"x,\"a\"\"\nb\",c\nd\n";
        assert_eq!(next_record_start(&d, w2, 0, false), Some(12));
    }

    #[test]
    fn backslash_escaped_csv_is_not_split() {
        let mut d = Dialect::new(Format::Csv);
        d.escape = b'\\';
        assert!(!splittable(&d));
        assert!(splittable(&Dialect::new(Format::Csv)));
    }
}
