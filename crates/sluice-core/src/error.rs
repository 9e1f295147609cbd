//! Input errors that say where and why: file, line, byte offset, column, raw value, reason.
//!
//! Every rejected row is reported through [`InputError`], whether the client found the problem
//! (a bad integer) or the server did (a unique violation, mapped back to its input line). The
//! value is shortened and shown with invalid bytes escaped, so a message stays one screen long
//! and never dumps binary to the terminal.

use std::fmt;

/// How many characters of a bad value a message shows.
const SHOWN_CHARS: usize = 60;

/// One bad input row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The input's name as the user gave it (`-` for standard input).
    pub file: String,
    /// 1-based line where the record starts, when known.
    pub line: Option<u64>,
    /// Byte offset of the record (or of the bad byte) in the decompressed input.
    pub offset: Option<u64>,
    /// The column and its type, as `name (type)`.
    pub column: Option<String>,
    /// The raw value, before conversion.
    pub value: Option<Vec<u8>>,
    pub reason: String,
}

impl InputError {
    pub fn new(file: impl Into<String>, reason: impl Into<String>) -> InputError {
        InputError {
            file: file.into(),
            line: None,
            offset: None,
            column: None,
            value: None,
            reason: reason.into(),
        }
    }
}

/// Shows a raw value for a message: at most [`SHOWN_CHARS`] characters, invalid UTF-8 and
/// control characters escaped, with its full length when shortened.
pub fn show_value(raw: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut shown = 0;
    let mut chunks = raw.utf8_chunks();
    'outer: for chunk in chunks.by_ref() {
        for c in chunk.valid().chars() {
            if shown == SHOWN_CHARS {
                break 'outer;
            }
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
            shown += 1;
        }
        for b in chunk.invalid() {
            if shown == SHOWN_CHARS {
                break 'outer;
            }
            out.push_str(&format!("\\x{b:02x}"));
            shown += 1;
        }
    }
    out.push('"');
    let total = String::from_utf8_lossy(raw).chars().count();
    if total > shown {
        out.push_str(&format!("... ({} bytes in all)", raw.len()));
    }
    out
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(offset) = self.offset {
            write!(f, " (byte offset {offset})")?;
        }
        if let Some(col) = &self.column {
            write!(f, ", column {col}")?;
        }
        if let Some(v) = &self.value {
            write!(f, ", value {}", show_value(v))?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for InputError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_everything() {
        let e = InputError {
            file: "data/orders.csv".into(),
            line: Some(3),
            offset: Some(57),
            column: Some("o_totalprice (numeric(15,2))".into()),
            value: Some(b"12x".to_vec()),
            reason: "not a valid number".into(),
        };
        assert_eq!(
            e.to_string(),
            "data/orders.csv, line 3 (byte offset 57), column o_totalprice (numeric(15,2)), \
             value \"12x\": not a valid number"
        );
    }

    #[test]
    fn values_are_shortened_and_escaped() {
        assert_eq!(show_value(b"a\xffb\n"), "\"a\\xffb\\n\"");
        let long = "x".repeat(100);
        assert_eq!(
            show_value(long.as_bytes()),
            format!("\"{}\"... (100 bytes in all)", "x".repeat(60))
        );
    }
}
