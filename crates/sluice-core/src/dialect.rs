//! Input dialects: how a flat file spells records, fields and NULL.
//!
//! sluice's definitions follow PostgreSQL's `COPY FROM` exactly, because the promise is that
//! sluice loads what `psql \copy` loads. `tbl` (TPC-H dbgen output) is defined as COPY's text
//! format with `|` as delimiter after dropping the one trailing `|` that dbgen writes on every
//! line, so that a `.tbl` file loads exactly as `psql \copy ... (delimiter '|')` loads the same
//! file with its trailing bars stripped.

use std::fmt;

/// The three input formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// TPC-H dbgen `.tbl`: COPY text format, `|` delimiter, one trailing `|` per line.
    Tbl,
    /// RFC 4180 CSV as PostgreSQL's COPY CSV reads it.
    Csv,
    /// PostgreSQL's COPY text format (tab-separated, backslash escapes, `\N`).
    Text,
}

impl Format {
    /// Guesses the format from a file name, looking through compression suffixes:
    /// `orders.tbl.gz` is `tbl`, `trips.csv.zst` is `csv`, `x.tsv` and `x.txt` are `text`.
    pub fn from_file_name(name: &str) -> Option<Format> {
        let mut name = name.to_ascii_lowercase();
        for suffix in [".gz", ".zst", ".zstd"] {
            if let Some(stripped) = name.strip_suffix(suffix) {
                name = stripped.to_string();
            }
        }
        let ext = name.rsplit_once('.')?.1;
        // dbgen -C writes `lineitem.tbl.1`; accept a numeric part suffix after `.tbl`.
        if ext.bytes().all(|b| b.is_ascii_digit()) {
            let rest = name.rsplit_once('.')?.0;
            return Format::from_file_name(rest);
        }
        match ext {
            "tbl" => Some(Format::Tbl),
            "csv" => Some(Format::Csv),
            "tsv" | "txt" | "text" | "tab" => Some(Format::Text),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Tbl => "tbl",
            Format::Csv => "csv",
            Format::Text => "text",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tbl" => Ok(Format::Tbl),
            "csv" => Ok(Format::Csv),
            "text" | "tsv" => Ok(Format::Text),
            other => Err(format!(
                "unknown format `{other}`: expected tbl, csv or text"
            )),
        }
    }
}

/// How lines end. PostgreSQL fixes this from the first line of the input and rejects a file
/// that mixes styles; so does sluice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineEnding {
    Lf,
    CrLf,
    Cr,
}

impl LineEnding {
    /// The byte that ends a line (`\r` only for old-Mac files).
    pub fn terminator(self) -> u8 {
        match self {
            LineEnding::Lf | LineEnding::CrLf => b'\n',
            LineEnding::Cr => b'\r',
        }
    }

    /// Detects the style from the first line terminator in `sample`, outside CSV quotes when
    /// `quote` is given. Defaults to LF when the sample holds no terminator.
    pub fn detect(sample: &[u8], quote: Option<u8>) -> LineEnding {
        let mut in_quote = false;
        for (i, &b) in sample.iter().enumerate() {
            if Some(b) == quote {
                in_quote = !in_quote;
                continue;
            }
            if in_quote {
                continue;
            }
            match b {
                b'\n' => return LineEnding::Lf,
                b'\r' => {
                    return if sample.get(i + 1) == Some(&b'\n') {
                        LineEnding::CrLf
                    } else {
                        LineEnding::Cr
                    }
                }
                _ => {}
            }
        }
        LineEnding::Lf
    }
}

/// Everything needed to split an input into records and fields.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dialect {
    pub format: Format,
    pub delimiter: u8,
    /// CSV only.
    pub quote: u8,
    /// CSV only; equals `quote` unless set.
    pub escape: u8,
    /// The spelling of NULL, compared with the raw (unquoted, unescaped) field.
    pub null: Vec<u8>,
    /// The first line of the input is a header and is skipped.
    pub header: bool,
    pub line_ending: LineEnding,
}

impl Dialect {
    /// PostgreSQL's defaults for `format`: text uses tab and `\N`, CSV uses comma, `"` and the
    /// empty unquoted string, tbl uses `|` and `\N`.
    pub fn new(format: Format) -> Dialect {
        let (delimiter, null): (u8, &[u8]) = match format {
            Format::Tbl => (b'|', b"\\N"),
            Format::Csv => (b',', b""),
            Format::Text => (b'\t', b"\\N"),
        };
        Dialect {
            format,
            delimiter,
            quote: b'"',
            escape: b'"',
            null: null.to_vec(),
            header: false,
            line_ending: LineEnding::Lf,
        }
    }

    pub fn is_csv(&self) -> bool {
        self.format == Format::Csv
    }

    /// Checks the combination the way COPY does, so a bad option fails before any row is read.
    pub fn validate(&self) -> Result<(), String> {
        let special = |b: u8| b == b'\n' || b == b'\r';
        if special(self.delimiter) {
            return Err("the delimiter cannot be newline or carriage return".into());
        }
        if self.null.iter().any(|&b| special(b)) {
            return Err("the NULL spelling cannot contain newline or carriage return".into());
        }
        if self.is_csv() {
            if self.quote == self.delimiter {
                return Err("the CSV delimiter and quote must differ".into());
            }
            if special(self.quote) || special(self.escape) {
                return Err("the CSV quote and escape cannot be newline or carriage return".into());
            }
            if self.null.contains(&self.delimiter) || self.null.contains(&self.quote) {
                return Err("the CSV NULL spelling cannot contain the delimiter or quote".into());
            }
        } else {
            if self.delimiter == b'\\' {
                return Err("the delimiter cannot be a backslash in text format".into());
            }
            if self.delimiter.is_ascii_alphanumeric() || self.delimiter == b'.' {
                return Err(format!(
                    "the delimiter `{}` cannot be used in text format: it collides with escapes",
                    self.delimiter as char
                ));
            }
        }
        if !self.delimiter.is_ascii() {
            return Err("the delimiter must be a single one-byte character".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_names() {
        assert_eq!(Format::from_file_name("lineitem.tbl"), Some(Format::Tbl));
        assert_eq!(Format::from_file_name("lineitem.tbl.3"), Some(Format::Tbl));
        assert_eq!(Format::from_file_name("orders.tbl.gz"), Some(Format::Tbl));
        assert_eq!(
            Format::from_file_name("trips-2024.CSV.zst"),
            Some(Format::Csv)
        );
        assert_eq!(Format::from_file_name("x.tsv"), Some(Format::Text));
        assert_eq!(Format::from_file_name("x.parquet"), None);
        assert_eq!(Format::from_file_name("noext"), None);
    }

    #[test]
    fn line_endings() {
        assert_eq!(LineEnding::detect(b"a,b\r\nc", None), LineEnding::CrLf);
        assert_eq!(LineEnding::detect(b"a,b\rc", None), LineEnding::Cr);
        assert_eq!(
            LineEnding::detect(b"\"a\r\nb\",c\nd", Some(b'"')),
            LineEnding::Lf
        );
        assert_eq!(LineEnding::detect(b"abc", None), LineEnding::Lf);
    }

    #[test]
    fn validate_rejects_what_copy_rejects() {
        let mut d = Dialect::new(Format::Csv);
        d.quote = b',';
        assert!(d.validate().is_err());
        let mut t = Dialect::new(Format::Text);
        t.delimiter = b'\\';
        assert!(t.validate().is_err());
        assert!(Dialect::new(Format::Tbl).validate().is_ok());
    }
}
