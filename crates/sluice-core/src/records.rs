//! Splitting bytes into records and fields, exactly as PostgreSQL's `COPY FROM` does.
//!
//! The parser is shaped like `csv-core`: it owns no buffer and does no I/O. The caller hands
//! it a byte slice, a start position and whether the slice ends the input; it answers with one
//! record (its fields and where it ends), or "need more bytes", or a syntax error at an offset.
//! Fields that need no unescaping are returned as ranges of the caller's slice, so the common
//! case copies nothing; escaped or quoted fields are unescaped into a scratch buffer that is
//! reused from record to record.
//!
//! The rules are PostgreSQL 15's (`copyfromparse.c`):
//! - text: backslash escapes (`\n`, `\t`, `\123`, `\x41`, `\\`, any other char is itself),
//!   NULL compared with the raw field before unescaping, a backslash-newline is a data newline,
//!   `\.` followed by a line end ends the data, and a carriage return that is not part of the
//!   line ending is an error.
//! - CSV: quotes may open anywhere in a field, a doubled quote (or escape + quote) is a quote,
//!   newlines inside quotes are data, NULL matches only a field with no quotes at all, and an
//!   unterminated quote at the end of the input is an error.
//! - tbl: text format with one trailing delimiter removed from each line.

use crate::dialect::{Dialect, Format, LineEnding};
use crate::swar;
use crate::tokens::window_masks;
use memchr::{memchr, memchr2, memchr3};

mod plain;
pub use plain::{
    FieldVisitor, IndexWork, PlainIndex, PlainRecord, PlainRun, PlainSpan, PlainValue,
};

/// Where one field's bytes are: `start..end` of the parser's input, or of the scratch
/// buffer when `start` carries [`Span::SCRATCH`], or NULL when `end` is [`Span::NULL`]. Two
/// words rather than an enum's three, since a record's spans are written once per field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    const SCRATCH: usize = 1 << (usize::BITS - 1);
    const NULL: usize = usize::MAX;

    const fn null() -> Span {
        Span {
            start: 0,
            end: Span::NULL,
        }
    }

    const fn input(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    const fn scratch(start: usize, end: usize) -> Span {
        Span {
            start: start | Span::SCRATCH,
            end,
        }
    }

    /// The value's length (0 for NULL).
    fn len(self) -> usize {
        if self.end == Span::NULL {
            0
        } else {
            self.end - (self.start & !Span::SCRATCH)
        }
    }
}

/// The fields of one record. Reused across records to avoid allocation.
#[derive(Default, Debug)]
pub struct Fields {
    spans: Vec<Span>,
    scratch: Vec<u8>,
    /// The bytes of all field values together: what a writer reserves for a record.
    bytes: usize,
    /// The end of the last field taken from the input: every input span ends there or before.
    input_end: usize,
}

impl Fields {
    pub fn new() -> Fields {
        Fields::default()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The value of field `i` (`None` for NULL). `input` is the slice given to the parser.
    #[inline]
    pub fn get<'a>(&'a self, i: usize, input: &'a [u8]) -> Option<&'a [u8]> {
        let Span { start, end } = self.spans[i];
        if end == Span::NULL {
            None
        } else if start & Span::SCRATCH == 0 {
            Some(&input[start..end])
        } else {
            Some(&self.scratch[start & !Span::SCRATCH..end])
        }
    }

    /// Each field's value (`None` for NULL) with its first 16 bytes as one little-endian
    /// word ([`swar::head16`]; past the value's end they are unspecified), for converters
    /// that read fields a word at a time. When the input has 16 bytes past the record's last
    /// field, as it has for every record but one per window, the words are read from the
    /// input directly, with no check per field.
    #[inline]
    pub fn values<'a>(
        &'a self,
        input: &'a [u8],
    ) -> impl Iterator<Item = Option<(&'a [u8], u128)>> + 'a {
        let padded = self.input_end + 16 <= input.len();
        self.spans.iter().map(move |&Span { start, end }| {
            if end == Span::NULL {
                return None;
            }
            if start & Span::SCRATCH != 0 {
                let v = &self.scratch[start & !Span::SCRATCH..end];
                return Some((v, swar::head16(v, &[])));
            }
            let v = &input[start..end];
            if !padded {
                return Some((v, swar::head16(v, input)));
            }
            // SAFETY: an input span ends at `input_end` or before, so `start + 16` is at most
            // `input_end + 16`, which `padded` found within `input`.
            let word = unsafe { input.as_ptr().add(start).cast::<[u8; 16]>().read() };
            Some((v, u128::from_le_bytes(word)))
        })
    }

    /// The byte offset of field `i` within the parser's input, when it is a plain slice of it.
    pub fn input_offset(&self, i: usize) -> Option<usize> {
        let Span { start, end } = self.spans[i];
        (end != Span::NULL && start & Span::SCRATCH == 0).then_some(start)
    }

    /// The bytes of all the record's values together (unescaped), so that an encoder can
    /// reserve room for a whole record at once.
    #[inline]
    pub fn value_bytes(&self) -> usize {
        self.bytes
    }

    #[inline(always)]
    fn push(&mut self, span: Span) {
        self.note(span);
        self.spans.push(span);
    }

    /// Counts a span's bytes and where the input spans end.
    #[inline(always)]
    fn note(&mut self, span: Span) {
        self.bytes += span.len();
        if span.end != Span::NULL && span.start & Span::SCRATCH == 0 {
            self.input_end = span.end;
        }
    }

    /// [`Fields::push`] without the capacity check, for the text scanner, which reserves
    /// room for a whole window's fields at once.
    ///
    /// # Safety
    /// The spans have spare capacity for one more.
    #[inline(always)]
    unsafe fn push_reserved(&mut self, span: Span) {
        debug_assert!(self.spans.len() < self.spans.capacity());
        self.note(span);
        let len = self.spans.len();
        self.spans.as_mut_ptr().add(len).write(span);
        self.spans.set_len(len + 1);
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.scratch.clear();
        self.bytes = 0;
        self.input_end = 0;
    }
}

/// What the parser found at the start position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// One record; the next one starts at `end`. `lines` is the number of line terminators it
    /// spans (1 for a normal line, more with quoted newlines, 0 for a last line without one).
    Record { end: usize, lines: u32 },
    /// The slice ends inside a record: call again with more bytes.
    NeedMore,
    /// No more records: the input ended, or an end-of-data marker (`\.`) was found.
    End,
}

/// Why a record cannot be split into fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntaxErrorKind {
    UnterminatedQuote,
    CarriageReturnInData,
    NewlineInData,
    EndMarkerCorrupt,
}

impl SyntaxErrorKind {
    pub fn message(self, csv: bool) -> &'static str {
        match (self, csv) {
            (SyntaxErrorKind::UnterminatedQuote, _) => {
                "unterminated CSV quoted field: the input ends inside quotes"
            }
            (SyntaxErrorKind::CarriageReturnInData, true) => {
                "unquoted carriage return found in data (quote the field, or fix the line endings)"
            }
            (SyntaxErrorKind::CarriageReturnInData, false) => {
                "literal carriage return found in data (write it as \\r, or fix the line endings)"
            }
            (SyntaxErrorKind::NewlineInData, true) => {
                "unquoted newline found in data (quote the field, or fix the line endings)"
            }
            (SyntaxErrorKind::NewlineInData, false) => {
                "literal newline found in data (write it as \\n, or fix the line endings)"
            }
            (SyntaxErrorKind::EndMarkerCorrupt, _) => {
                "end-of-copy marker corrupt: `\\.` must be followed by the end of the line"
            }
        }
    }
}

/// A syntax error at `offset` in the parser's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub kind: SyntaxErrorKind,
    pub offset: usize,
}

/// A slice handed to the parser, and whether it ends the input.
pub struct Input<'a> {
    pub bytes: &'a [u8],
    /// The slice ends the whole input.
    pub eof: bool,
}

/// Splits records of one dialect.
#[derive(Clone, Debug)]
pub struct RecordParser {
    format: Format,
    delimiter: u8,
    quote: u8,
    escape: u8,
    null: Vec<u8>,
    newline: u8,
    crlf: bool,
    /// The line-ending byte that may not appear raw in data (`\r` for LF/CRLF files).
    stray: u8,
    /// NULL's spelling holds a backslash (text's `\N`): then only a field with an escape can
    /// be NULL, and the others skip the comparison.
    null_escaped: bool,
}

impl RecordParser {
    pub fn new(dialect: &Dialect) -> RecordParser {
        let crlf = dialect.line_ending == LineEnding::CrLf;
        let newline = dialect.line_ending.terminator();
        RecordParser {
            format: dialect.format,
            delimiter: dialect.delimiter,
            quote: dialect.quote,
            escape: dialect.escape,
            null: dialect.null.clone(),
            newline,
            crlf,
            stray: if newline == b'\n' { b'\r' } else { b'\n' },
            null_escaped: dialect.null.contains(&b'\\'),
        }
    }

    /// Prepares a slice for parsing. `eof` says that it ends the whole input, so that a last
    /// line without a terminator is a record, and an open quote is an error rather than a
    /// reason to wait for more bytes.
    pub fn input<'a>(&self, bytes: &'a [u8], eof: bool) -> Input<'a> {
        Input { bytes, eof }
    }

    /// Parses the record that starts at `start`.
    #[inline]
    pub fn parse_input(
        &self,
        input: &Input<'_>,
        start: usize,
        fields: &mut Fields,
    ) -> Result<Step, SyntaxError> {
        fields.clear();
        if start >= input.bytes.len() {
            return Ok(if input.eof { Step::End } else { Step::NeedMore });
        }
        match self.format {
            Format::Csv => self.parse_csv(input.bytes, start, input.eof, fields),
            Format::Text | Format::Tbl => self.parse_text(input, start, fields),
        }
    }

    /// [`RecordParser::input`] and [`RecordParser::parse_input`] in one call.
    pub fn parse(
        &self,
        bytes: &[u8],
        start: usize,
        eof: bool,
        fields: &mut Fields,
    ) -> Result<Step, SyntaxError> {
        self.parse_input(&self.input(bytes, eof), start, fields)
    }

    /// Splits one text-format line in a single pass. Each 64-byte window gives two bit
    /// masks ([`window_masks`]): delimiters, and the bytes that need a decision (a backslash,
    /// the line end, a stray line-end byte). The delimiters before the next such byte are
    /// fields, pushed in a tight loop with no byte loaded or compared; the scan stops only at
    /// the special bytes, which clean data has one of per line.
    fn parse_text(
        &self,
        inp: &Input<'_>,
        start: usize,
        fields: &mut Fields,
    ) -> Result<Step, SyntaxError> {
        let input = inp.bytes;
        let mut field_start = start;
        let mut escaped = false;
        let mut line_end = None;
        let specials = [b'\\', self.newline, self.stray];
        let mut base = start;
        // A backslash at a window's last byte escapes the next window's first.
        let mut skip_first = false;
        'scan: while base < input.len() {
            let (mut delims, mut special) = window_masks(&input[base..], self.delimiter, specials);
            if skip_first {
                delims &= !1;
                special &= !1;
                skip_first = false;
            }
            // A window holds at most 64 delimiters, and the line one field more.
            fields.spans.reserve(65);
            loop {
                let lowest = special & special.wrapping_neg();
                let mut before = delims & lowest.wrapping_sub(1);
                delims &= !before;
                while before != 0 {
                    let p = base + before.trailing_zeros() as usize;
                    // SAFETY: room for 65 spans was reserved for this window.
                    unsafe { self.push_text_field(input, field_start, p, escaped, fields) };
                    field_start = p + 1;
                    escaped = false;
                    before &= before - 1;
                }
                if special == 0 {
                    break;
                }
                special &= special - 1;
                let bit = lowest.trailing_zeros() as usize;
                let p = base + bit;
                let b = input[p];
                if b == b'\\' {
                    match input.get(p + 1) {
                        None if !inp.eof => return Ok(Step::NeedMore),
                        Some(b'.') => {
                            let line_end = match memchr(self.newline, &input[p..]) {
                                Some(i) => p + i,
                                None if inp.eof => input.len(),
                                None => return Ok(Step::NeedMore),
                            };
                            let mut le = line_end;
                            if self.crlf && le > p && input[le - 1] == b'\r' {
                                le -= 1;
                            }
                            return self.end_marker(input, fields, p, le);
                        }
                        _ => {}
                    }
                    escaped = true;
                    // The escaped byte is data, whatever it is.
                    if bit == 63 {
                        skip_first = true;
                    } else {
                        delims &= !(lowest << 1);
                        special &= !(lowest << 1);
                    }
                } else if b == self.stray {
                    // Part of a CRLF line end, or data that should have been escaped.
                    let crlf_end = self.crlf && input.get(p + 1) == Some(&b'\n');
                    if !crlf_end {
                        if p + 1 == input.len() && self.crlf && !inp.eof {
                            return Ok(Step::NeedMore);
                        }
                        return Err(self.stray_error(p));
                    }
                } else {
                    line_end = Some(p);
                    break 'scan;
                }
            }
            base += 64;
        }
        let (mut end, next, lines) = match line_end {
            Some(nl) => (nl, nl + 1, 1),
            None if inp.eof => (input.len(), input.len(), 0),
            None => return Ok(Step::NeedMore),
        };
        if self.crlf && lines == 1 {
            if end > field_start && input[end - 1] == b'\r' {
                end -= 1;
            } else {
                return Err(SyntaxError {
                    kind: SyntaxErrorKind::NewlineInData,
                    offset: end,
                });
            }
        }
        let trailing = trailing_bar(input, start, field_start, end, self.delimiter);
        if !(self.format == Format::Tbl && trailing) {
            fields.spans.reserve(1);
            // SAFETY: room for one more span was just reserved.
            unsafe { self.push_text_field(input, field_start, end, escaped, fields) };
        }
        Ok(Step::Record { end: next, lines })
    }

    /// # Safety
    /// The spans have spare capacity for one more.
    #[inline(always)]
    unsafe fn push_text_field(
        &self,
        input: &[u8],
        s: usize,
        e: usize,
        escaped: bool,
        fields: &mut Fields,
    ) {
        if !escaped && self.null_escaped {
            fields.push_reserved(Span::input(s, e));
            return;
        }
        let raw = &input[s..e];
        if raw == self.null.as_slice() {
            fields.push_reserved(Span::null());
        } else if escaped {
            let at = fields.scratch.len();
            unescape_text(raw, &mut fields.scratch);
            fields.push_reserved(Span::scratch(at, fields.scratch.len()));
        } else {
            fields.push_reserved(Span::input(s, e));
        }
    }

    /// `\.` in text format: the end of the data when followed by the line end, else an error.
    /// Data before it on the same line still forms a last record, as in PostgreSQL 15.
    fn end_marker(
        &self,
        input: &[u8],
        fields: &mut Fields,
        bs: usize,
        line_end: usize,
    ) -> Result<Step, SyntaxError> {
        if bs + 2 != line_end {
            return Err(SyntaxError {
                kind: SyntaxErrorKind::EndMarkerCorrupt,
                offset: bs,
            });
        }
        let line_start = input[..bs]
            .iter()
            .rposition(|&b| b == self.newline)
            .map_or(0, |p| p + 1);
        fields.clear();
        if line_start == bs {
            return Ok(Step::End);
        }
        // Data before the marker: parse it as a final line of its own.
        let head = self.input(&input[..bs], true);
        match self.parse_text(&head, line_start, fields)? {
            Step::Record { .. } => Ok(Step::Record {
                end: input.len(),
                lines: 1,
            }),
            other => Ok(other),
        }
    }

    fn parse_csv(
        &self,
        input: &[u8],
        start: usize,
        eof: bool,
        fields: &mut Fields,
    ) -> Result<Step, SyntaxError> {
        // `\.` alone at the start of a line ends the data, as in PostgreSQL.
        if input[start] == b'\\' {
            let rest = &input[start..];
            let marker_len = if rest.starts_with(b"\\.\r\n") && self.crlf {
                Some(4)
            } else if rest.starts_with(&[b'\\', b'.', self.newline]) {
                Some(3)
            } else if rest == b"\\." && eof {
                Some(2)
            } else {
                None
            };
            if marker_len.is_some() {
                return Ok(Step::End);
            }
            if rest.len() < 4 && !eof {
                return Ok(Step::NeedMore);
            }
        }
        let mut pos = start;
        let mut lines = 0u32;
        loop {
            let field_start = pos;
            // Fast path: an unquoted field.
            let found = memchr3(self.delimiter, self.quote, self.newline, &input[pos..]);
            let Some(i) = found else {
                if !eof {
                    return Ok(Step::NeedMore);
                }
                let end = input.len();
                self.push_unquoted(input, field_start, end, fields)?;
                return Ok(Step::Record { end, lines });
            };
            let at = pos + i;
            let b = input[at];
            if b == self.delimiter {
                self.push_unquoted(input, field_start, at, fields)?;
                pos = at + 1;
                continue;
            }
            if b == self.newline {
                let mut end = at;
                if self.crlf {
                    if end > field_start && input[end - 1] == b'\r' {
                        end -= 1;
                    } else {
                        return Err(SyntaxError {
                            kind: SyntaxErrorKind::NewlineInData,
                            offset: at,
                        });
                    }
                }
                self.push_unquoted(input, field_start, end, fields)?;
                return Ok(Step::Record {
                    end: at + 1,
                    lines: lines + 1,
                });
            }
            // A quote: the slow path builds the field in scratch.
            match self.csv_quoted_field(input, field_start, at, eof, fields, &mut lines)? {
                QuotedEnd::NeedMore => return Ok(Step::NeedMore),
                QuotedEnd::Delimiter(next) => pos = next,
                QuotedEnd::Record(end, had_terminator) => {
                    return Ok(Step::Record {
                        end,
                        lines: lines + u32::from(had_terminator),
                    })
                }
            }
        }
    }

    #[inline]
    fn push_unquoted(
        &self,
        input: &[u8],
        s: usize,
        e: usize,
        fields: &mut Fields,
    ) -> Result<(), SyntaxError> {
        let raw = &input[s..e];
        if let Some(i) = memchr(self.stray, raw) {
            return Err(self.stray_error(s + i));
        }
        if raw == self.null.as_slice() {
            fields.push(Span::null());
        } else {
            fields.push(Span::input(s, e));
        }
        Ok(())
    }

    fn stray_error(&self, offset: usize) -> SyntaxError {
        let kind = if self.stray == b'\r' {
            SyntaxErrorKind::CarriageReturnInData
        } else {
            SyntaxErrorKind::NewlineInData
        };
        SyntaxError { kind, offset }
    }

    /// Parses a CSV field that contains a quote at `first_quote`, from `field_start` to its
    /// delimiter or line end, unescaping into scratch.
    fn csv_quoted_field(
        &self,
        input: &[u8],
        field_start: usize,
        first_quote: usize,
        eof: bool,
        fields: &mut Fields,
        lines: &mut u32,
    ) -> Result<QuotedEnd, SyntaxError> {
        let s = fields.scratch.len();
        let mut pos = field_start;
        let mut quote_at = first_quote;
        loop {
            // Unquoted bytes before the quote.
            let seg = &input[pos..quote_at];
            if let Some(i) = memchr(self.stray, seg) {
                return Err(self.stray_error(pos + i));
            }
            fields.scratch.extend_from_slice(seg);
            // Inside quotes.
            pos = quote_at + 1;
            loop {
                let hit = if self.escape == self.quote {
                    memchr(self.quote, &input[pos..])
                } else {
                    memchr2(self.quote, self.escape, &input[pos..])
                };
                let Some(i) = hit else {
                    if eof {
                        return Err(SyntaxError {
                            kind: SyntaxErrorKind::UnterminatedQuote,
                            offset: quote_at,
                        });
                    }
                    fields.scratch.truncate(s);
                    return Ok(QuotedEnd::NeedMore);
                };
                let at = pos + i;
                let quoted = &input[pos..at];
                *lines += memchr::memchr_iter(self.newline, quoted).count() as u32;
                fields.scratch.extend_from_slice(quoted);
                let Some(&next) = input.get(at + 1) else {
                    if !eof {
                        fields.scratch.truncate(s);
                        return Ok(QuotedEnd::NeedMore);
                    }
                    if input[at] == self.quote {
                        pos = at + 1;
                        break;
                    }
                    return Err(SyntaxError {
                        kind: SyntaxErrorKind::UnterminatedQuote,
                        offset: quote_at,
                    });
                };
                if input[at] == self.escape && (next == self.quote || next == self.escape) {
                    fields.scratch.push(next);
                    pos = at + 2;
                    continue;
                }
                if input[at] == self.quote {
                    pos = at + 1;
                    break;
                }
                // A lone escape character inside quotes is data.
                fields.scratch.push(input[at]);
                pos = at + 1;
            }
            // After a closing quote: more unquoted bytes, another quote, or the field's end.
            match memchr3(self.delimiter, self.quote, self.newline, &input[pos..]) {
                None if !eof => {
                    fields.scratch.truncate(s);
                    return Ok(QuotedEnd::NeedMore);
                }
                None => {
                    let seg = &input[pos..];
                    if let Some(i) = memchr(self.stray, seg) {
                        return Err(self.stray_error(pos + i));
                    }
                    fields.scratch.extend_from_slice(seg);
                    fields.push(Span::scratch(s, fields.scratch.len()));
                    return Ok(QuotedEnd::Record(input.len(), false));
                }
                Some(i) => {
                    let at = pos + i;
                    if input[at] == self.quote {
                        quote_at = at;
                        continue;
                    }
                    let mut seg_end = at;
                    if input[at] == self.newline && self.crlf {
                        if seg_end > pos && input[seg_end - 1] == b'\r' {
                            seg_end -= 1;
                        } else {
                            return Err(SyntaxError {
                                kind: SyntaxErrorKind::NewlineInData,
                                offset: at,
                            });
                        }
                    }
                    let seg = &input[pos..seg_end];
                    if let Some(i) = memchr(self.stray, seg) {
                        return Err(self.stray_error(pos + i));
                    }
                    fields.scratch.extend_from_slice(seg);
                    fields.push(Span::scratch(s, fields.scratch.len()));
                    return Ok(if input[at] == self.delimiter {
                        QuotedEnd::Delimiter(at + 1)
                    } else {
                        QuotedEnd::Record(at + 1, true)
                    });
                }
            }
        }
    }
}

/// tbl: whether the line `start..end`, whose last field would start at `field_start`,
/// ends with the one trailing `delimiter` dbgen writes, which ends the line, not a field.
#[inline(always)]
fn trailing_bar(input: &[u8], start: usize, field_start: usize, end: usize, delimiter: u8) -> bool {
    end == field_start && end > start && input[end - 1] == delimiter
}

enum QuotedEnd {
    NeedMore,
    Delimiter(usize),
    Record(usize, bool),
}

/// Writes a value with backslash escapes for a tab- and newline-separated stream: backslash,
/// tab, newline and carriage return, and NUL as `\0` when `nul` (MariaDB's `LOAD DATA` reads
/// it back; PostgreSQL's COPY text has no NUL to carry). The inverse of [`unescape_text`].
pub fn escape_text(v: &[u8], out: &mut Vec<u8>, nul: bool) {
    let mut start = 0;
    for (i, &b) in v.iter().enumerate() {
        let esc = match b {
            b'\\' => b'\\',
            b'\t' => b't',
            b'\n' => b'n',
            b'\r' => b'r',
            0 if nul => b'0',
            _ => continue,
        };
        out.extend_from_slice(&v[start..i]);
        out.push(b'\\');
        out.push(esc);
        start = i + 1;
    }
    out.extend_from_slice(&v[start..]);
}

/// Decodes COPY text-format backslash escapes (PostgreSQL's `CopyReadAttributesText`).
pub fn unescape_text(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 >= raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                let mut n = 1;
                while n < 3 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                    v = v * 8 + u32::from(raw[i] - b'0');
                    i += 1;
                    n += 1;
                }
                out.push((v & 0xff) as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                    v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.push(b'x');
                } else {
                    out.push(v as u8);
                }
            }
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(d: &Dialect, input: &[u8]) -> Result<Vec<Vec<Option<String>>>, SyntaxError> {
        let p = RecordParser::new(d);
        let mut f = Fields::new();
        let mut pos = 0;
        let mut out = Vec::new();
        loop {
            match p.parse(input, pos, true, &mut f)? {
                Step::Record { end, .. } => {
                    out.push(
                        (0..f.len())
                            .map(|i| {
                                f.get(i, input)
                                    .map(|v| String::from_utf8_lossy(v).into_owned())
                            })
                            .collect(),
                    );
                    pos = end;
                }
                Step::End => return Ok(out),
                Step::NeedMore => panic!("NeedMore at eof"),
            }
        }
    }

    fn row(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|x| x.map(String::from)).collect()
    }

    #[test]
    fn tbl_drops_trailing_bar() {
        let d = Dialect::new(Format::Tbl);
        let rows = parse_all(&d, b"1|a b|2.5|\n2||x|\n").unwrap();
        assert_eq!(rows[0], row(&[Some("1"), Some("a b"), Some("2.5")]));
        assert_eq!(rows[1], row(&[Some("2"), Some(""), Some("x")]));
    }

    #[test]
    fn text_escapes_and_null() {
        let d = Dialect::new(Format::Text);
        let rows = parse_all(&d, b"a\\tb\t\\N\t\\\\N\t\\101\\x42\\q\n").unwrap();
        assert_eq!(
            rows[0],
            row(&[Some("a\tb"), None, Some("\\N"), Some("ABq")])
        );
    }

    #[test]
    fn text_escaped_newline_is_data() {
        let d = Dialect::new(Format::Text);
        let rows = parse_all(&d, b"a\\\nb\tc\nd\te").unwrap();
        assert_eq!(rows[0], row(&[Some("a\nb"), Some("c")]));
        assert_eq!(rows[1], row(&[Some("d"), Some("e")]));
    }

    #[test]
    fn text_carriage_return_is_rejected() {
        let d = Dialect::new(Format::Text);
        let e = parse_all(&d, b"a\rb\tc\n").unwrap_err();
        assert_eq!(e.kind, SyntaxErrorKind::CarriageReturnInData);
        assert_eq!(e.offset, 1);
    }

    #[test]
    fn text_crlf_lines() {
        let mut d = Dialect::new(Format::Text);
        d.line_ending = LineEnding::CrLf;
        let rows = parse_all(&d, b"a\tb\r\nc\td\r\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1], row(&[Some("c"), Some("d")]));
        assert!(parse_all(&d, b"a\tb\nc\n").is_err());
    }

    #[test]
    fn text_end_marker() {
        let d = Dialect::new(Format::Text);
        let rows = parse_all(&d, b"a\n\\.\nignored\n").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            parse_all(&d, b"a\\.b\n").unwrap_err().kind,
            SyntaxErrorKind::EndMarkerCorrupt
        );
    }

    #[test]
    fn csv_quotes_everywhere() {
        let d = Dialect::new(Format::Csv);
        let rows = parse_all(
            &d,
            b"1,\"a,b\",\"say \"\"hi\"\"\",,\"\"\n2,ab\"c,d\"e,\"x\ny\",z\n",
        )
        .unwrap();
        assert_eq!(
            rows[0],
            row(&[Some("1"), Some("a,b"), Some("say \"hi\""), None, Some("")])
        );
        assert_eq!(
            rows[1],
            row(&[Some("2"), Some("abc,de"), Some("x\ny"), Some("z")])
        );
    }

    #[test]
    fn csv_crlf_and_quoted_crlf() {
        let mut d = Dialect::new(Format::Csv);
        d.line_ending = LineEnding::CrLf;
        let rows = parse_all(&d, b"a,\"x\r\ny\"\r\nb,c\r\n").unwrap();
        assert_eq!(rows[0], row(&[Some("a"), Some("x\r\ny")]));
        assert_eq!(rows[1], row(&[Some("b"), Some("c")]));
    }

    #[test]
    fn csv_unterminated_quote() {
        let d = Dialect::new(Format::Csv);
        let e = parse_all(&d, b"1,\"abc\n2,3\n").unwrap_err();
        assert_eq!(e.kind, SyntaxErrorKind::UnterminatedQuote);
        assert_eq!(e.offset, 2);
    }

    #[test]
    fn csv_backslash_escape() {
        let mut d = Dialect::new(Format::Csv);
        d.escape = b'\\';
        let rows = parse_all(&d, b"\"a\\\"b\\\\c\\d\"\n").unwrap();
        assert_eq!(rows[0], row(&[Some("a\"b\\c\\d")]));
    }

    #[test]
    fn csv_custom_null() {
        let mut d = Dialect::new(Format::Csv);
        d.null = b"NULL".to_vec();
        let rows = parse_all(&d, b"NULL,\"NULL\",\n").unwrap();
        assert_eq!(rows[0], row(&[None, Some("NULL"), Some("")]));
    }

    #[test]
    fn need_more_until_eof() {
        let d = Dialect::new(Format::Csv);
        let p = RecordParser::new(&d);
        let mut f = Fields::new();
        assert_eq!(
            p.parse(b"1,\"ab", 0, false, &mut f).unwrap(),
            Step::NeedMore
        );
        assert_eq!(p.parse(b"1,2", 0, false, &mut f).unwrap(), Step::NeedMore);
        assert_eq!(
            p.parse(b"1,2", 0, true, &mut f).unwrap(),
            Step::Record { end: 3, lines: 0 }
        );
        assert_eq!(p.parse(b"\"a\"", 0, false, &mut f).unwrap(), Step::NeedMore);
    }

    #[test]
    fn line_counts_include_quoted_newlines() {
        let d = Dialect::new(Format::Csv);
        let p = RecordParser::new(&d);
        let mut f = Fields::new();
        assert_eq!(
            p.parse(b"\"a\nb\nc\",d\nx", 0, true, &mut f).unwrap(),
            Step::Record { end: 10, lines: 3 }
        );
    }
}
