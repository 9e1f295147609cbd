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
    /// The table the input loads into, when its file name chose it (shown as `file -> table
    /// t`).
    pub table: Option<String>,
    /// 1-based line where the record starts, when known.
    pub line: Option<u64>,
    /// Byte offset in the decompressed input of what [`InputError::offset_of`] says: the bad
    /// value, the record, or the byte where the input's framing broke.
    pub offset: Option<u64>,
    /// What `offset` points at.
    pub offset_of: OffsetOf,
    /// The column and its type, as `name (type)`.
    pub column: Option<String>,
    /// The raw value, before conversion.
    pub value: Option<Vec<u8>>,
    /// The whole record as it stands in the input, when the fault is the record's (a wrong
    /// number of fields), as psql shows the line.
    pub row: Option<Vec<u8>>,
    pub reason: String,
}

/// What an error's byte offset points at: a value's offset and its record's differ, and a
/// message (or a JSON field) that says only "byte offset" would mean either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffsetOf {
    /// The start of the record (its line).
    #[default]
    Record,
    /// The start of the bad value within its record.
    Value,
    /// The byte where the input stopped parsing (an unterminated quote, a stray line end).
    Error,
}

impl OffsetOf {
    /// How messages and reports name it: `record`, `value`, `error`.
    pub fn name(self) -> &'static str {
        match self {
            OffsetOf::Record => "record",
            OffsetOf::Value => "value",
            OffsetOf::Error => "error",
        }
    }
}

impl InputError {
    pub fn new(file: impl Into<String>, reason: impl Into<String>) -> InputError {
        InputError {
            file: file.into(),
            table: None,
            line: None,
            offset: None,
            offset_of: OffsetOf::Record,
            column: None,
            value: None,
            row: None,
            reason: reason.into(),
        }
    }
}

/// Whether a character prints as nothing or as blank space that is not a plain space: a
/// byte-order mark, zero-width and direction marks, line and paragraph separators, no-break
/// and other Unicode spaces. In a message they would be invisible.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00A0}' | '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}'
        | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}' | '\u{2000}'..='\u{200F}'
        | '\u{2028}'..='\u{202F}' | '\u{205F}'..='\u{206F}' | '\u{3000}' | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Shows a raw value for a message: at most [`SHOWN_CHARS`] characters, with its full length
/// when shortened. Nothing in it is invisible: invalid UTF-8 and control bytes show as `\xNN`
/// (`\n`, `\r`, `\t` as such), invisible characters as `<U+FEFF>`.
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
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if c.is_control() || invisible(c) => {
                    out.push_str(&format!("<U+{:04X}>", c as u32))
                }
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
        if let Some(t) = &self.table {
            write!(f, " -> table {t}")?;
        }
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(offset) = self.offset {
            write!(f, " ({} at byte offset {offset})", self.offset_of.name())?;
        }
        if let Some(col) = &self.column {
            write!(f, ", column {col}")?;
        }
        if let Some(v) = &self.value {
            write!(f, ", value {}", show_value(v))?;
        }
        if let Some(r) = &self.row {
            write!(f, ", row {}", show_value(r))?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for InputError {}

/// Why one record cannot be converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// The record has `found` fields where the target takes `expected`.
    FieldCount { expected: usize, found: usize },
    /// NULL in a NOT NULL column.
    NotNull,
    /// A value the column's type rejects.
    Value(String),
}

/// A conversion failure in one record: which column, and the raw value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError {
    /// Index into the table's columns (in field order), when one column is at fault.
    pub column: Option<usize>,
    pub kind: RecordErrorKind,
    /// The raw value, as read from the input (after unquoting and unescaping).
    pub value: Option<Vec<u8>>,
}

impl RecordError {
    /// A record of `found` fields where the target takes `expected`: the error every
    /// destination gives, naming the first missing column when there are too few.
    pub fn check_field_count(found: usize, expected: usize) -> Result<(), RecordError> {
        if found == expected {
            return Ok(());
        }
        Err(RecordError {
            column: (found < expected).then_some(found),
            kind: RecordErrorKind::FieldCount { expected, found },
            value: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_everything() {
        let e = InputError {
            file: "data/orders.csv".into(),
            table: None,
            line: Some(3),
            offset: Some(57),
            offset_of: OffsetOf::Value,
            column: Some("o_totalprice (numeric(15,2))".into()),
            value: Some(b"12x".to_vec()),
            row: None,
            reason: "not a valid number".into(),
        };
        assert_eq!(
            e.to_string(),
            "data/orders.csv, line 3 (value at byte offset 57), column o_totalprice (numeric(15,2)), \
             value \"12x\": not a valid number"
        );
    }

    #[test]
    fn values_are_shortened_and_escaped() {
        assert_eq!(show_value(b"a\xffb\n"), "\"a\\xffb\\n\"");
        assert_eq!(show_value(b"\x01\x1b[0m\t"), "\"\\x01\\x1b[0m\\t\"");
        assert_eq!(
            show_value("\u{feff}1\u{200b}\u{a0}é\u{85}".as_bytes()),
            "\"<U+FEFF>1<U+200B><U+00A0>é<U+0085>\""
        );
        let long = "x".repeat(100);
        assert_eq!(
            show_value(long.as_bytes()),
            format!("\"{}\"... (100 bytes in all)", "x".repeat(60))
        );
    }
}
