//! Field conversion: one record's text fields to one binary COPY tuple, with PostgreSQL's rules.
//!
//! Each supported type has a parser that accepts what the type's input function (`int4in`,
//! `numeric_in`, `boolin`, `bpchar_input`...) accepts, rejects what it rejects with a reason a
//! person can act on, and writes the type's binary `send` form. Errors come in two kinds:
//! *invalid* (PostgreSQL would reject the value too) and *unsupported* (a spelling sluice does
//! not parse but PostgreSQL might, such as `Feb 3 2024`). Unsupported values are handed to a
//! [`ServerConvert`] when the caller has one, so the server itself converts them; the result
//! is then exactly PostgreSQL's.
//!
//! A table with a column of a type sluice does not convert is loaded through text COPY
//! instead: [`Converter::encode_text_record`] validates the columns it understands and passes
//! the rest as text for the server to convert.

use super::binary::FieldWriter;
use super::column::{Column, PgType};
use super::datetime::{encode_date, encode_time, encode_timestamp, SessionZone};
use super::numeric::{encode_numeric, FastNumeric};
pub use sluice_core::error::{RecordError, RecordErrorKind};
use sluice_core::primitives::{ascii_uint, is_c_space, parse_i64, trim_c_space, IntError};
use sluice_core::records::{
    FieldVisitor, Fields, IndexWork, PlainIndex, PlainRecord, PlainRun, PlainSpan, PlainValue,
    RecordParser,
};
use sluice_core::swar;
use std::fmt;

/// Why one value cannot be converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConvertError {
    /// PostgreSQL would reject the value too.
    Invalid(String),
    /// sluice does not parse this spelling; the server may.
    Unsupported(String),
}

impl ConvertError {
    pub fn invalid(reason: impl Into<String>) -> ConvertError {
        ConvertError::Invalid(reason.into())
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::Invalid(r) | ConvertError::Unsupported(r) => f.write_str(r),
        }
    }
}

/// Converts values sluice cannot parse by asking the server (`SELECT $1::type`).
pub trait ServerConvert {
    /// Returns the value's binary form, or the server's error message.
    fn convert(&mut self, column: &Column, value: &str) -> Result<Vec<u8>, String>;
}

/// Converts the records of one table: columns in input field order.
pub struct Converter {
    columns: Vec<Column>,
    /// Each column's fast path, chosen once.
    hot: Vec<Hot>,
    /// The most bytes a record's encoding takes beyond its values' own bytes on the fast
    /// path: the tuple header, each column's [`Hot::bound`] and [`SLACK`].
    bound: usize,
    zone: SessionZone,
    scratch: Vec<u8>,
    /// A CSV value with doubled quotes, made single for its converter.
    unescaped: Vec<u8>,
    /// The fast path's structural index, kept between runs.
    index: PlainIndex,
    /// Values of plain runs that their column's converter took in place, off the fast path.
    general_values: u64,
    /// The CPU has POPCNT, BMI, LZCNT and AVX2: [`Converter::encode_plain_bits`] runs.
    #[cfg(target_arch = "x86_64")]
    bit_instructions: bool,
}

impl Converter {
    pub fn new(columns: Vec<Column>, zone: SessionZone) -> Converter {
        let hot: Vec<Hot> = columns.iter().map(|c| Hot::of(&c.ty)).collect();
        let bound = 2 + SLACK + hot.iter().map(|h| h.bound()).sum::<usize>();
        Converter {
            columns,
            hot,
            bound,
            zone,
            scratch: Vec::new(),
            unescaped: Vec::new(),
            index: PlainIndex::new(),
            general_values: 0,
            #[cfg(target_arch = "x86_64")]
            bit_instructions: std::is_x86_feature_detected!("popcnt")
                && std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2")
                && std::is_x86_feature_detected!("lzcnt")
                && std::is_x86_feature_detected!("avx2"),
        }
    }

    /// The binary form of one value of column `i`, or `None` when sluice cannot convert it
    /// (an invalid value, a spelling left to the server, a type the server converts). Used to
    /// compare a key the server names with the input's values, whatever their spelling.
    pub fn encode_field(&mut self, i: usize, raw: &[u8]) -> Option<Vec<u8>> {
        let col = self.columns.get(i)?;
        if !col.ty.client_converted() {
            return None;
        }
        let mut out = Vec::new();
        encode_value(&col.ty, &self.zone, raw, &mut self.scratch, &mut out).ok()?;
        Some(out)
    }

    /// Whether every column is converted on the client, so the table can use binary COPY.
    pub fn binary_capable(&self) -> bool {
        self.columns.iter().all(|c| c.ty.client_converted())
    }

    fn check_count(&self, fields: &Fields) -> Result<(), RecordError> {
        RecordError::check_field_count(fields.len(), self.columns.len())
    }

    /// Appends one binary COPY tuple for the record to `out`. On error `out` is left as it was.
    ///
    /// Room for the whole record is reserved once; the fast path ([`encode_hot`]) then
    /// writes each value through a raw pointer with no capacity check. A value it does not
    /// take goes through [`encode_value`] on the vector itself, after which room is reserved
    /// again.
    pub fn encode_record(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
        mut server: Option<&mut dyn ServerConvert>,
    ) -> Result<(), RecordError> {
        self.check_count(fields)?;
        let rollback = out.len();
        let bound = self.bound + fields.value_bytes();
        out.reserve(bound);
        let mut base = out.as_mut_ptr();
        let mut len = out.len();
        // SAFETY (every write through `base` below): `bound` bytes were reserved past `len`:
        // the tuple header, each column's `Hot::bound` plus its value's bytes, and `SLACK`
        // for the words a write stores past what it keeps. After a general-path value, room
        // for all of it is reserved again.
        unsafe { store(base.add(len), (self.columns.len() as i16).to_be_bytes()) };
        len += 2;
        let columns = self.columns.iter().zip(&self.hot);
        for (i, ((col, &hot), value)) in columns.zip(fields.values(input)).enumerate() {
            let Some((v, x)) = value else {
                if col.not_null {
                    out.truncate(rollback);
                    return Err(RecordError {
                        column: Some(i),
                        kind: RecordErrorKind::NotNull,
                        value: None,
                    });
                }
                unsafe { store(base.add(len), (-1i32).to_be_bytes()) };
                len += 4;
                continue;
            };
            let kept = unsafe { encode_hot(hot, (v, x), &self.zone, base.add(len)) };
            if kept > 0 {
                len += kept;
                continue;
            }
            // SAFETY: everything up to `len` was written.
            unsafe { out.set_len(len) };
            let general = encode_general(col, &self.zone, v, &mut self.scratch, out, &mut server);
            if let Err(reason) = general {
                out.truncate(rollback);
                return Err(RecordError {
                    column: Some(i),
                    kind: RecordErrorKind::Value(reason),
                    value: Some(v.to_vec()),
                });
            }
            out.reserve(bound);
            base = out.as_mut_ptr();
            len = out.len();
        }
        // SAFETY: everything up to `len` was written, within the reserved capacity.
        unsafe { out.set_len(len) };
        Ok(())
    }

    /// The fast path for a run of records: the plain records from `start` of `input` on
    /// ([`RecordParser::index_plain`]) go straight to [`encode_hot`], with no [`Fields`] in
    /// between and one capacity check per record. A value the fast path does not take is
    /// converted in place by its column's general converter (with `server` for spellings
    /// sluice leaves to the server), and the run goes on. It stops at a record that needs
    /// [`Converter::encode_record`] (another field count, an escape, an invalid value, a NULL
    /// in a NOT NULL column), where the input runs out, or once `out` holds `limit` bytes.
    /// Returns how many records were encoded and where the next one starts; `out` gains
    /// exactly those records.
    ///
    /// `same_input` says that `input` is the very input of the previous call, unchanged,
    /// and that the caller took the records between there and `start` itself: the run then
    /// goes on over the index it made, so that no byte is indexed twice.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn encode_plain(
        &mut self,
        parser: &RecordParser,
        input: &[u8],
        start: usize,
        out: &mut Vec<u8>,
        limit: usize,
        same_input: bool,
        server: Option<&mut dyn ServerConvert>,
    ) -> (usize, usize) {
        let span = PlainCall {
            parser,
            input,
            start,
            limit,
            same_input,
        };
        #[cfg(target_arch = "x86_64")]
        if self.bit_instructions {
            // SAFETY: the CPU has the features `encode_plain_bits` is compiled for (checked
            // at construction).
            return unsafe { self.encode_plain_bits(span, out, server) };
        }
        self.encode_plain_with::<false>(span, out, server)
    }

    /// The indexing the fast path has done, and the values it converted in place off it.
    pub fn plain_work(&self) -> (IndexWork, u64) {
        (self.index.work(), self.general_values)
    }

    /// [`Converter::encode_plain`] compiled for CPUs with POPCNT, BMI, LZCNT and AVX2 (most
    /// x86-64 CPUs of the last ten years): the index's bit counts and scans are then one
    /// instruction each, where the x86-64 baseline spends a dozen (9% fewer instructions on
    /// the fast path), and its masks are made 32 bytes per compare. Other CPUs run the
    /// baseline build (SSE2), which the tests run too.
    ///
    /// # Safety
    /// The CPU has `popcnt`, `bmi1`, `bmi2`, `lzcnt` and `avx2`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,bmi1,bmi2,lzcnt,avx2")]
    unsafe fn encode_plain_bits(
        &mut self,
        call: PlainCall<'_>,
        out: &mut Vec<u8>,
        server: Option<&mut dyn ServerConvert>,
    ) -> (usize, usize) {
        self.encode_plain_with::<true>(call, out, server)
    }

    /// `AVX2` only where the CPU has it.
    #[inline(always)]
    fn encode_plain_with<const AVX2: bool>(
        &mut self,
        call: PlainCall<'_>,
        out: &mut Vec<u8>,
        server: Option<&mut dyn ServerConvert>,
    ) -> (usize, usize) {
        let PlainCall {
            parser,
            input,
            start,
            limit,
            same_input,
        } = call;
        let Converter {
            columns,
            hot,
            bound,
            zone,
            scratch,
            unescaped,
            index,
            general_values,
            ..
        } = self;
        let mut general = General {
            columns,
            zone,
            scratch,
            unescaped,
            server,
            values: 0,
        };
        let (mut done, mut at) = (0, start);
        let mut resume = same_input;
        loop {
            let resumed = if resume {
                parser.resume_plain(at, index)
            } else {
                None
            };
            resume = false;
            let (run, first) = match resumed {
                Some(first) => (parser.indexed_run(input, index), first),
                None => {
                    #[cfg(target_arch = "x86_64")]
                    let run = if AVX2 {
                        // SAFETY: `AVX2` is set only by `encode_plain_bits`, which runs only
                        // where the CPU has it.
                        unsafe { parser.index_plain_avx2(input, at, index) }
                    } else {
                        parser.index_plain(input, at, index)
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let run = parser.index_plain(input, at, index);
                    (run, (0, PlainRun::FIRST))
                }
            };
            if run.is_empty() {
                break;
            }
            let (records, next, more) = if run.checks_values() {
                encode_run::<true>(hot, *bound, &run, first, out, limit, &mut general)
            } else {
                encode_run::<false>(hot, *bound, &run, first, out, limit, &mut general)
            };
            done += records;
            at = next;
            if !more {
                break;
            }
        }
        *general_values += general.values;
        (done, at)
    }

    /// Appends one COPY text-format line for the record to `out`, after validating the columns
    /// sluice understands. Used for tables with columns the server must convert.
    pub fn encode_text_record(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        self.check_count(fields)?;
        let rollback = out.len();
        for (i, col) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            let Some(v) = fields.get(i, input) else {
                if col.not_null {
                    out.truncate(rollback);
                    return Err(RecordError {
                        column: Some(i),
                        kind: RecordErrorKind::NotNull,
                        value: None,
                    });
                }
                out.extend_from_slice(b"\\N");
                continue;
            };
            let check = if col.ty.client_converted() {
                self.scratch.clear();
                let mut sink = Vec::new();
                encode_value(&col.ty, &self.zone, v, &mut self.scratch, &mut sink)
            } else {
                std::str::from_utf8(v)
                    .map(drop)
                    .map_err(|e| ConvertError::invalid(utf8_reason(e)))
            };
            if let Err(ConvertError::Invalid(reason)) = check {
                out.truncate(rollback);
                return Err(RecordError {
                    column: Some(i),
                    kind: RecordErrorKind::Value(reason),
                    value: Some(v.to_vec()),
                });
            }
            escape_text(v, out);
        }
        out.push(b'\n');
        Ok(())
    }
}

/// Writes a value in COPY text format, escaping backslash, tab, newline and carriage return.
pub fn escape_text(v: &[u8], out: &mut Vec<u8>) {
    sluice_core::records::escape_text(v, out, false)
}

fn utf8_reason(e: std::str::Utf8Error) -> String {
    format!(
        "invalid UTF-8: byte {} of the value starts a malformed sequence",
        e.valid_up_to() + 1
    )
}

/// Whether `v` is ASCII without NUL: then it is valid text and its length is its character
/// count. One branch-free pass that the compiler vectorises.
#[inline]
fn plain_ascii(v: &[u8]) -> bool {
    v.iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(1) < 0x7f))
}

/// Checks that a string value is UTF-8 without NUL bytes, as PostgreSQL's text types require.
#[inline]
fn check_text(v: &[u8]) -> Result<&str, ConvertError> {
    if plain_ascii(v) {
        // SAFETY: every byte is in 1..=0x7f, so the slice is ASCII and therefore UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(v) });
    }
    check_text_slow(v)
}

/// Text that is not plain ASCII: UTF-8 validated at SIMD speed (`simdutf8`), the position
/// of a malformed sequence found again only on error.
fn check_text_slow(v: &[u8]) -> Result<&str, ConvertError> {
    let s = match simdutf8::basic::from_utf8(v) {
        Ok(s) => s,
        Err(_) => {
            let e = std::str::from_utf8(v).expect_err("simdutf8 found it malformed");
            return Err(ConvertError::invalid(utf8_reason(e)));
        }
    };
    if let Some(p) = memchr::memchr(0, v) {
        return Err(ConvertError::invalid(format!(
            "invalid byte sequence for UTF8: 0x00 at byte {} (text cannot hold NUL)",
            p + 1
        )));
    }
    Ok(s)
}

/// One value through the general path, with the server converting what sluice does not
/// parse: the field (length prefix included) is appended to `out`, or the reason is returned.
fn encode_general(
    col: &Column,
    zone: &SessionZone,
    v: &[u8],
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
    server: &mut Option<&mut dyn ServerConvert>,
) -> Result<(), String> {
    let w = FieldWriter::begin(out);
    match encode_value(&col.ty, zone, v, scratch, out) {
        Ok(()) => w.finish(out),
        Err(ConvertError::Unsupported(reason)) => {
            let bytes = match (server.as_deref_mut(), std::str::from_utf8(v)) {
                (Some(s), Ok(text)) => s.convert(col, text)?,
                _ => return Err(reason),
            };
            out.truncate(w.start());
            let w = FieldWriter::begin(out);
            out.extend_from_slice(&bytes);
            w.finish(out);
        }
        Err(ConvertError::Invalid(reason)) => return Err(reason),
    }
    Ok(())
}

/// Bytes a fast-path write may store past what it keeps (three 16-byte words holding a
/// shorter value, a run of padding spaces): room that is reserved but not kept.
const SLACK: usize = 48;

/// A column's fast path: the spellings flat files are made of, for the types they hold.
///
/// Eight bytes, so that the per-field loop loads a column's whole case in one word.
#[derive(Clone, Copy, Debug)]
enum Hot {
    Timestamp,
    Timestamptz,
    Time,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Bool,
    Uuid,
    Date,
    Numeric(FastNumeric),
    Text,
    Varchar(u32),
    /// `char(n)` for n up to [`MAX_HOT_CHAR`]: padded on the fast path.
    Char(u32),
    None,
}

/// The widest `char(n)` padded on the fast path; wider ones take the general path, so that
/// a record's reserved room stays small.
const MAX_HOT_CHAR: usize = 48;

impl Hot {
    fn of(ty: &PgType) -> Hot {
        match ty {
            PgType::Int2 => Hot::Int2,
            PgType::Int4 => Hot::Int4,
            PgType::Int8 => Hot::Int8,
            PgType::Float4 => Hot::Float4,
            PgType::Float8 => Hot::Float8,
            PgType::Bool => Hot::Bool,
            PgType::Uuid => Hot::Uuid,
            PgType::Timestamp(None) => Hot::Timestamp,
            PgType::Timestamptz(None) => Hot::Timestamptz,
            PgType::Time(None) => Hot::Time,
            PgType::Date => Hot::Date,
            PgType::Numeric(t) => match FastNumeric::new(*t) {
                Some(column) => Hot::Numeric(column),
                None => Hot::None,
            },
            PgType::Text | PgType::Varchar(None) | PgType::Json => Hot::Text,
            PgType::Varchar(Some(n)) => match u32::try_from(*n) {
                Ok(n) => Hot::Varchar(n),
                Err(_) => Hot::None,
            },
            PgType::Char(Some(n)) if *n <= MAX_HOT_CHAR => Hot::Char(*n as u32),
            _ => Hot::None,
        }
    }

    /// The most bytes the fast path keeps for one value beyond the value's own bytes.
    fn bound(self) -> usize {
        4 + match self {
            Hot::Int2 | Hot::Int4 | Hot::Int8 | Hot::Date | Hot::Float4 | Hot::Float8 => 8,
            Hot::Timestamp | Hot::Timestamptz | Hot::Time => 8,
            Hot::Bool => 1,
            Hot::Uuid => 16,
            Hot::Numeric(_) => 32,
            Hot::Char(n) => n as usize,
            Hot::Text | Hot::Varchar(_) | Hot::None => 0,
        }
    }
}

/// What one call of [`Converter::encode_plain`] works on.
#[derive(Clone, Copy)]
struct PlainCall<'p> {
    parser: &'p RecordParser,
    input: &'p [u8],
    start: usize,
    limit: usize,
    same_input: bool,
}

/// What a plain run needs to convert a value off the fast path in place: the column's
/// general converter and what it works with.
struct General<'g, 's> {
    columns: &'g [Column],
    zone: &'g SessionZone,
    scratch: &'g mut Vec<u8>,
    unescaped: &'g mut Vec<u8>,
    server: Option<&'s mut dyn ServerConvert>,
    /// Values converted so far.
    values: u64,
}

/// The records of one index from record `first.0` (whose fields start at structural
/// `first.1`), encoded onto `out` until one needs the general path or `out` holds `limit`
/// bytes: how many, where the next one starts (the first one's start when none), and
/// whether every record of the index was taken, so that the caller may index on.
#[inline(always)]
fn encode_run<const CHECKED: bool>(
    hot: &[Hot],
    bound: usize,
    run: &PlainRun<'_>,
    first: (usize, usize),
    out: &mut Vec<u8>,
    limit: usize,
    general: &mut General<'_, '_>,
) -> (usize, usize, bool) {
    let (from, mut k) = first;
    let mut at = None;
    for r in from..run.len() {
        let Some(record) = run.record(r, k, hot.len()) else {
            return (r - from, at.unwrap_or_else(|| run.record_start(r)), false);
        };
        if !encode_plain_record::<CHECKED>(hot, bound, run, &record, out, general) {
            return (r - from, record.start, false);
        }
        at = Some(record.next);
        k = record.following;
        if out.len() >= limit {
            return (r + 1 - from, record.next, false);
        }
    }
    let end = at.unwrap_or_else(|| run.record_start(run.len()));
    (run.len() - from, end, true)
}

/// One plain record's tuple, appended to `out`, or false (and `out` as it was) when it
/// needs the general path. `bound` is [`Converter::bound`]: with the record's own bytes, the
/// most the fast path writes for it.
#[inline(always)]
fn encode_plain_record<const CHECKED: bool>(
    hot: &[Hot],
    bound: usize,
    run: &PlainRun<'_>,
    record: &PlainRecord<'_>,
    out: &mut Vec<u8>,
    general: &mut General<'_, '_>,
) -> bool {
    let rollback = out.len();
    let room = bound + (record.next - record.start);
    out.reserve(room);
    // SAFETY (every write through `dst`): `room`, `bound` plus the record's bytes, is
    // reserved past the vector's length, and each value keeps at most its column's
    // `Hot::bound` plus its own bytes, and writes at most `SLACK` bytes past what it keeps.
    // After a value converted in place, `room` is reserved again.
    let mut dst = unsafe { out.as_mut_ptr().add(out.len()) };
    unsafe { store(dst, (hot.len() as i16).to_be_bytes()) };
    dst = unsafe { dst.add(2) };
    let zone = general.zone;
    let mut writer = HotWriter::<CHECKED> {
        run,
        hot,
        zone,
        dst,
        cold: Cold { out, room, general },
    };
    if !record.visit_fields(hot, &mut writer) {
        writer.cold.out.truncate(rollback);
        return false;
    }
    let HotWriter { dst, cold, .. } = writer;
    // SAFETY: everything up to `dst` was written, within the reserved capacity.
    unsafe {
        cold.out
            .set_len(dst.offset_from(cold.out.as_ptr()) as usize)
    };
    true
}

/// Writes a plain record's values at `dst`, each through [`encode_hot`], as
/// [`encode_plain_record`] reserved room for, or else through its column's general converter
/// ([`Cold`]). The fields the per-field loop reads are a few words, passed by value to the
/// cold path, so that they stay in registers.
struct HotWriter<'r, 'a, 'g, 's, const CHECKED: bool> {
    run: &'r PlainRun<'a>,
    hot: &'r [Hot],
    zone: &'g SessionZone,
    dst: *mut u8,
    cold: Cold<'r, 'g, 's>,
}

/// What a value off the fast path needs: the message, the room each record reserves, and the
/// general converters.
struct Cold<'r, 'g, 's> {
    out: &'r mut Vec<u8>,
    room: usize,
    general: &'r mut General<'g, 's>,
}

impl<const CHECKED: bool> FieldVisitor<Hot> for HotWriter<'_, '_, '_, '_, CHECKED> {
    #[inline(always)]
    fn field(&mut self, h: &Hot, span: PlainSpan) -> bool {
        let next = match self.run.value::<CHECKED>(span) {
            Some(value) if !value.escaped => {
                // SAFETY: room for the column's `Hot::bound`, the value and `SLACK` at `dst`,
                // as reserved by `encode_plain_record`.
                let kept = unsafe { encode_hot(*h, value, self.zone, self.dst) };
                if kept > 0 {
                    self.dst = unsafe { self.dst.add(kept) };
                    return true;
                }
                self.cold
                    .convert(self.dst, column(self.hot, h), value.bytes)
            }
            Some(value) => {
                let quote = self.run.quote();
                self.cold
                    .convert_escaped(self.dst, column(self.hot, h), value, quote)
            }
            None => self.cold.null(self.dst, column(self.hot, h)),
        };
        match next {
            Some(dst) => {
                self.dst = dst;
                true
            }
            None => false,
        }
    }
}

/// Which column `h` is: its place in `hot`, which it points into.
#[inline(always)]
fn column(hot: &[Hot], h: &Hot) -> usize {
    (h as *const Hot as usize - hot.as_ptr() as usize) / std::mem::size_of::<Hot>()
}

impl Cold<'_, '_, '_> {
    /// A value the fast path did not take, written at `dst` through column `i`'s general
    /// converter: where the record goes on, or `None` when the value is not valid (the record
    /// then goes to the general path, which says why).
    #[inline(never)]
    fn convert(&mut self, dst: *mut u8, i: usize, v: &[u8]) -> Option<*mut u8> {
        let out = &mut *self.out;
        // SAFETY: everything up to `dst` was written, within the reserved capacity.
        unsafe { out.set_len(dst.offset_from(out.as_ptr()) as usize) };
        let g = &mut *self.general;
        g.values += 1;
        let col = &g.columns[i];
        encode_general(col, g.zone, v, g.scratch, out, &mut g.server).ok()?;
        out.reserve(self.room);
        // SAFETY: within the vector's capacity.
        Some(unsafe { out.as_mut_ptr().add(out.len()) })
    }

    /// A CSV value with doubled quotes: made single, then converted in place.
    #[inline(never)]
    fn convert_escaped(
        &mut self,
        dst: *mut u8,
        i: usize,
        value: PlainValue<'_>,
        quote: u8,
    ) -> Option<*mut u8> {
        let mut unescaped = std::mem::take(self.general.unescaped);
        unescaped.clear();
        value.unescape(quote, &mut unescaped);
        let next = self.convert(dst, i, &unescaped);
        *self.general.unescaped = unescaped;
        next
    }

    /// A NULL: a length of -1, unless the column is NOT NULL (then the general path says so).
    #[inline(never)]
    fn null(&mut self, dst: *mut u8, i: usize) -> Option<*mut u8> {
        if self.general.columns[i].not_null {
            return None;
        }
        // SAFETY: each column's `Hot::bound` holds at least a length word.
        unsafe {
            store(dst, (-1i32).to_be_bytes());
            Some(dst.add(4))
        }
    }
}

/// A value for [`encode_hot`]: its bytes, its first 16 bytes as one word, and where the
/// input after it is at hand (a plain run's values), its first 48 bytes as three words.
trait HotValue: Copy {
    fn bytes(&self) -> &[u8];
    fn head(&self) -> u128;
    fn blocks48(&self) -> Option<[u128; 3]>;
}

impl HotValue for PlainValue<'_> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.bytes
    }
    #[inline(always)]
    fn head(&self) -> u128 {
        PlainValue::head(self)
    }
    #[inline(always)]
    fn blocks48(&self) -> Option<[u128; 3]> {
        Some(PlainValue::blocks48(self))
    }
}

/// A value of the general path's fields, with its head word ([`swar::head16`]).
impl HotValue for (&[u8], u128) {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.0
    }
    #[inline(always)]
    fn head(&self) -> u128 {
        self.1
    }
    #[inline(always)]
    fn blocks48(&self) -> Option<[u128; 3]> {
        None
    }
}

/// Stores `N` bytes at `dst`.
///
/// # Safety
/// `dst` is valid for `N` bytes of writes.
#[inline(always)]
unsafe fn store<const N: usize>(dst: *mut u8, bytes: [u8; N]) {
    dst.cast::<[u8; N]>().write_unaligned(bytes);
}

/// The inlined fast path for the values flat files are made of: plain digits, ISO dates,
/// short decimals and ASCII strings that fit, read with word operations from the words of
/// `value` ([`HotValue`]) and written at `dst` with the length prefix, with no capacity
/// check. Returns the bytes kept, or 0 when the value needs the general path (which also
/// words every error); a write may store up to [`SLACK`] bytes past what it keeps.
///
/// # Safety
/// `dst` is valid for [`Hot::bound`] + the value's length + [`SLACK`] bytes of writes.
#[inline(always)]
unsafe fn encode_hot(hot: Hot, value: impl HotValue, zone: &SessionZone, dst: *mut u8) -> usize {
    let (v, x) = (value.bytes(), value.head());
    let n = v.len();
    match hot {
        Hot::Int4 => match signed16(x, n) {
            Some(value) if i32::try_from(value).is_ok() => {
                store(
                    dst,
                    ((4u64 << 32) | u64::from(value as i32 as u32)).to_be_bytes(),
                );
                8
            }
            _ => 0,
        },
        Hot::Int8 => match signed16(x, n) {
            Some(value) => {
                store(dst, 8u32.to_be_bytes());
                store(dst.add(4), value.to_be_bytes());
                12
            }
            None => 0,
        },
        Hot::Int2 => match signed16(x, n) {
            Some(value) if i16::try_from(value).is_ok() => {
                let word = u64::from(value as i16 as u16) << 16;
                store(dst, ((2u64 << 32) | word).to_be_bytes());
                6
            }
            _ => 0,
        },
        Hot::Time
        | Hot::Timestamp
        | Hot::Timestamptz
        | Hot::Float4
        | Hot::Float8
        | Hot::Bool
        | Hot::Uuid => encode_hot_outlined(hot, v, zone, dst),
        Hot::Date => {
            let Some(days) = super::datetime::iso_date_days(v, x) else {
                return 0;
            };
            store(dst, ((4u64 << 32) | u64::from(days as u32)).to_be_bytes());
            8
        }
        Hot::Numeric(column) => {
            let word = &mut *dst.add(4).cast::<[u8; 32]>();
            match super::numeric::encode_numeric_fast(v, x, column, word) {
                Some(len) => {
                    store(dst, (len as u32).to_be_bytes());
                    4 + len
                }
                None => 0,
            }
        }
        Hot::Text => put_ascii(value, dst, n, usize::MAX),
        Hot::Varchar(limit) if n <= limit as usize => put_ascii(value, dst, n, limit as usize),
        Hot::Char(width) if n <= width as usize => {
            put_ascii(value, dst, width as usize, width as usize)
        }
        _ => 0,
    }
}

/// The fast converters of the types TPC-H does not have, out of [`encode_hot`]'s inlined
/// loop, so that the loop stays as small as the types it inlines (a call costs a few
/// instructions against these converters' dozens).
///
/// # Safety
/// As for [`encode_hot`].
#[inline(never)]
unsafe fn encode_hot_outlined(hot: Hot, v: &[u8], zone: &SessionZone, dst: *mut u8) -> usize {
    match hot {
        Hot::Time => match super::datetime::plain_time(v) {
            Some(t) => {
                store(dst, 8u32.to_be_bytes());
                store(dst.add(4), t.to_be_bytes());
                12
            }
            None => 0,
        },
        Hot::Timestamp | Hot::Timestamptz => {
            let zone = matches!(hot, Hot::Timestamptz).then_some(zone);
            match super::datetime::plain_timestamp(v, zone) {
                Some(t) => {
                    store(dst, 8u32.to_be_bytes());
                    store(dst.add(4), t.to_be_bytes());
                    12
                }
                None => 0,
            }
        }
        Hot::Float8 => match plain_float::<f64>(v) {
            Some(f) => {
                store(dst, 8u32.to_be_bytes());
                store(dst.add(4), f.to_bits().to_be_bytes());
                12
            }
            None => 0,
        },
        Hot::Float4 => match plain_float::<f32>(v) {
            Some(f) => {
                store(dst, ((4u64 << 32) | u64::from(f.to_bits())).to_be_bytes());
                8
            }
            None => 0,
        },
        Hot::Bool => match parse_bool(v) {
            Ok(b) => {
                store(dst, [0, 0, 0, 1, u8::from(b)]);
                5
            }
            Err(_) => 0,
        },
        Hot::Uuid => match plain_uuid(v) {
            Some(bytes) => {
                store(dst, 16u32.to_be_bytes());
                store(dst.add(4), bytes);
                20
            }
            None => 0,
        },
        _ => 0,
    }
}

/// A text value that is plain ASCII, blank-padded to `width` (at least its length, at most
/// its length plus [`MAX_HOT_CHAR`]) behind its length prefix: the bytes kept, or 0. `most`
/// is the column's longest value (`usize::MAX` for `text`).
///
/// In a column whose values may pass 16 bytes, a value of up to 48 read from a plain run is
/// checked and stored as three words whatever its length, with no branch on it: on
/// `l_comment` (10 to 43 bytes) that branch mispredicted often enough to cost more than the
/// extra word operations (3% more instructions, 4% less CPU time). Otherwise a value of up
/// to 16 bytes is stored as the word already loaded, one of up to 32 as two overlapping
/// words (no call to `memcpy`, whose size classes mispredict on text of varied lengths), a
/// longer one copied. The padding is up to three 16-byte stores (a loop would become a call
/// to `memset`).
///
/// # Safety
/// As for [`encode_hot`].
#[inline(always)]
unsafe fn put_ascii(value: impl HotValue, dst: *mut u8, width: usize, most: usize) -> usize {
    let (v, x) = (value.bytes(), value.head());
    let n = v.len();
    debug_assert!(n <= width && width <= n + MAX_HOT_CHAR);
    // The choice by the column's longest value first, a branch each column takes the same
    // way every record, rather than by the value's length, which varies.
    let wide = if most > 16 && n <= 48 {
        value.blocks48()
    } else {
        None
    };
    if let Some(blocks) = wide {
        if swar::nonascii48(blocks, n) != 0 {
            return 0;
        }
        for (k, block) in blocks.into_iter().enumerate() {
            store(dst.add(4 + 16 * k), block.to_le_bytes());
        }
    } else if n <= 16 {
        if swar::nonascii(x, n) != 0 {
            return 0;
        }
        store(dst.add(4), x.to_le_bytes());
    } else if n <= 32 {
        // Two blocks that overlap in the middle, both inside the value.
        let last = u128::from_le_bytes(v[n - 16..].try_into().unwrap_or([0; 16]));
        if swar::nonascii(x, 16) | swar::nonascii(last, 16) != 0 {
            return 0;
        }
        store(dst.add(4), x.to_le_bytes());
        store(dst.add(4 + n - 16), last.to_le_bytes());
    } else {
        if !swar::plain_ascii(v, x) {
            return 0;
        }
        std::ptr::copy_nonoverlapping(v.as_ptr(), dst.add(4), n);
    }
    store(dst, (width as u32).to_be_bytes());
    let pad = dst.add(4 + n);
    if width > n {
        store(pad, [b' '; 16]);
        if width > n + 16 {
            store(pad.add(16), [b' '; 16]);
            if width > n + 32 {
                store(pad.add(32), [b' '; 16]);
            }
        }
    }
    4 + width
}

/// A value of up to 16 bytes (its first 16 as `x`) that is an optional sign and 1 to 15
/// digits, or 1 to 16 digits: its value, which fits an `i64`. Anything else (spaces, more
/// digits) is for `pg_strtoint`'s general path.
#[inline(always)]
fn signed16(x: u128, n: usize) -> Option<i64> {
    let first = x as u8;
    if n >= 2 && (first == b'-' || first == b'+') {
        let digits = swar::digits16(x >> 8, n - 1)? as i64;
        return Some(if first == b'-' { -digits } else { digits });
    }
    swar::digits16(x, n).map(|d| d as i64)
}

/// `float4in`/`float8in` on a plain decimal (`-1.5`, `2.5e-3`): correctly rounded by
/// `fast-float2`, as `strtod`/`strtof` round. A value that comes to infinity or zero (out of
/// range, an underflow, or a real zero), words (`NaN`, `Infinity`), spaces or hex are for the
/// general path, which words the errors.
#[inline(always)]
fn plain_float<F: fast_float2::FastFloat + Float>(v: &[u8]) -> Option<F> {
    let first = *v.first()?;
    if !(first.is_ascii_digit() || first == b'-' || first == b'.') {
        return None;
    }
    match fast_float2::parse_partial::<F, _>(v) {
        Ok((f, used)) if used == v.len() && f.is_normal_or_subnormal() => Some(f),
        _ => None,
    }
}

/// Hex digit values, 0xff for other bytes.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// `uuid_in` on its two common spellings: 8-4-4-4-12 hex digits, or 32 of them. The
/// others (braces, hyphens elsewhere) and every error are for [`parse_uuid`].
#[inline(always)]
fn plain_uuid(v: &[u8]) -> Option<[u8; 16]> {
    let hyphens = match v.len() {
        36 if v[8] == b'-' && v[13] == b'-' && v[18] == b'-' && v[23] == b'-' => true,
        32 => false,
        _ => return None,
    };
    let mut out = [0u8; 16];
    let mut bad = 0u8;
    let mut i = 0;
    for (k, byte) in out.iter_mut().enumerate() {
        if hyphens && matches!(k, 4 | 6 | 8 | 10) {
            i += 1;
        }
        let (hi, lo) = (HEX[v[i] as usize], HEX[v[i + 1] as usize]);
        bad |= hi | lo;
        *byte = hi << 4 | lo;
        i += 2;
    }
    (bad & 0xf0 == 0).then_some(out)
}

/// Encodes one non-NULL value of type `ty` (the binary `send` form) onto `out`.
#[inline(never)]
pub fn encode_value(
    ty: &PgType,
    zone: &SessionZone,
    v: &[u8],
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(), ConvertError> {
    match ty {
        PgType::Int2 => {
            let n = parse_int(v, i16::MIN as i64, i16::MAX as i64, "smallint")?;
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        PgType::Int4 => {
            let n = parse_int(v, i32::MIN as i64, i32::MAX as i64, "integer")?;
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        PgType::Int8 => {
            let n = parse_int(v, i64::MIN, i64::MAX, "bigint")?;
            out.extend_from_slice(&n.to_be_bytes());
        }
        PgType::Float4 => {
            let f = parse_float::<f32>(v, "real")?;
            out.extend_from_slice(&f.to_be_bytes());
        }
        PgType::Float8 => {
            let f = parse_float::<f64>(v, "double precision")?;
            out.extend_from_slice(&f.to_be_bytes());
        }
        PgType::Numeric(typmod) => encode_numeric(v, *typmod, scratch, out)?,
        PgType::Bool => out.push(u8::from(parse_bool(v)?)),
        PgType::Date => encode_date(v, out)?,
        PgType::Time(p) => encode_time(v, *p, out)?,
        PgType::Timestamp(p) => encode_timestamp(v, *p, None, out)?,
        PgType::Timestamptz(p) => encode_timestamp(v, *p, Some(zone), out)?,
        PgType::Text => {
            check_text(v)?;
            out.extend_from_slice(v);
        }
        PgType::Varchar(limit) => {
            let s = check_text(v)?;
            out.extend_from_slice(fit_length(s, *limit, "character varying")?.as_bytes());
        }
        PgType::Char(limit) => {
            let s = check_text(v)?;
            let s = fit_length(s, *limit, "character")?;
            out.extend_from_slice(s.as_bytes());
            if let Some(n) = limit {
                let chars = char_count(s);
                out.resize(out.len() + n.saturating_sub(chars), b' ');
            }
        }
        PgType::Bytea => decode_bytea(v, out)?,
        PgType::Uuid => out.extend_from_slice(&parse_uuid(v)?),
        PgType::Json => {
            check_text(v)?;
            out.extend_from_slice(v);
        }
        PgType::Jsonb => {
            check_text(v)?;
            out.push(1);
            out.extend_from_slice(v);
        }
        PgType::Other => {
            return Err(ConvertError::Unsupported(
                "a type sluice leaves to the server".into(),
            ))
        }
    }
    Ok(())
}

/// `pg_strtoint16/32/64`: optional whitespace, sign, decimal digits, optional whitespace.
#[inline]
fn parse_int(v: &[u8], min: i64, max: i64, name: &str) -> Result<i64, ConvertError> {
    // Fast path: plain digits, as in nearly every file.
    if let Some(n) = ascii_uint(v, 18) {
        return in_range(n as i64, min, max, name);
    }
    match parse_i64(trim_c_space(v)) {
        Ok(n) => in_range(n, min, max, name),
        Err(IntError::Overflow) => Err(out_of_range(min, max, name)),
        Err(IntError::Syntax) => Err(ConvertError::invalid(format!("not a valid {name}"))),
    }
}

fn in_range(n: i64, min: i64, max: i64, name: &str) -> Result<i64, ConvertError> {
    if n < min || n > max {
        return Err(out_of_range(min, max, name));
    }
    Ok(n)
}

fn out_of_range(min: i64, max: i64, name: &str) -> ConvertError {
    ConvertError::invalid(format!("out of range for {name} ({min} to {max})"))
}

trait Float: std::str::FromStr + Copy {
    fn is_infinite(self) -> bool;
    fn is_zero(self) -> bool;
    /// Neither zero, infinite nor NaN.
    fn is_normal_or_subnormal(self) -> bool;
}

impl Float for f32 {
    fn is_infinite(self) -> bool {
        f32::is_infinite(self)
    }
    fn is_zero(self) -> bool {
        self == 0.0
    }
    #[inline(always)]
    fn is_normal_or_subnormal(self) -> bool {
        self.is_finite() && self != 0.0
    }
}

impl Float for f64 {
    fn is_infinite(self) -> bool {
        f64::is_infinite(self)
    }
    fn is_zero(self) -> bool {
        self == 0.0
    }
    #[inline(always)]
    fn is_normal_or_subnormal(self) -> bool {
        self.is_finite() && self != 0.0
    }
}

/// `float4in`/`float8in`: decimal or exponent notation, `NaN`, `Infinity`, `inf`, any case,
/// with overflow and underflow to zero both out of range.
fn parse_float<F: Float>(v: &[u8], name: &str) -> Result<F, ConvertError> {
    let s = std::str::from_utf8(trim_c_space(v))
        .map_err(|_| ConvertError::invalid(format!("not a valid {name}")))?;
    if s.bytes().any(|b| b == b'x' || b == b'X') {
        // `strtod` reads C99 hexadecimal floats (`0x1p4`); the server converts them.
        return Err(ConvertError::Unsupported(format!(
            "a hexadecimal {name}, which the server reads"
        )));
    }
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    let explicit_inf = body == "inf" || body == "infinity";
    if body == "nan" && lower != "nan" {
        return Err(ConvertError::invalid(format!("not a valid {name}")));
    }
    let plausible = !s.is_empty()
        && (explicit_inf
            || body == "nan"
            || s.bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')));
    let f: F = match s.parse() {
        Ok(f) if plausible => f,
        _ => return Err(ConvertError::invalid(format!("not a valid {name}"))),
    };
    if f.is_infinite() && !explicit_inf {
        return Err(ConvertError::invalid(format!(
            "\"{s}\" is out of range for type {name}"
        )));
    }
    if f.is_zero() {
        let mantissa = body.split(['e', 'E']).next().unwrap_or("");
        if mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
            return Err(ConvertError::invalid(format!(
                "\"{s}\" is out of range for type {name} (it underflows to zero)"
            )));
        }
    }
    Ok(f)
}

/// `boolin`: `t`/`true`/`y`/`yes`/`on`/`1` and their opposites, any case, any unique prefix.
fn parse_bool(v: &[u8]) -> Result<bool, ConvertError> {
    let s = trim_c_space(v);
    let prefix_of = |word: &[u8], min: usize| {
        s.len() >= min && s.len() <= word.len() && word[..s.len()].eq_ignore_ascii_case(s)
    };
    if prefix_of(b"true", 1) || prefix_of(b"yes", 1) || prefix_of(b"on", 2) || s == b"1" {
        return Ok(true);
    }
    if prefix_of(b"false", 1) || prefix_of(b"no", 1) || prefix_of(b"off", 2) || s == b"0" {
        return Ok(false);
    }
    Err(ConvertError::invalid(
        "not a boolean (true/false, yes/no, on/off, 1/0, t/f...)",
    ))
}

/// Characters in valid UTF-8: the bytes that do not continue a sequence, counted in one
/// pass the compiler vectorises.
fn char_count(s: &str) -> usize {
    s.bytes().filter(|&b| (b as i8) >= -0x40).count()
}

/// Applies a `varchar(n)`/`char(n)` limit: longer values fail unless the excess is spaces,
/// which are cut, as PostgreSQL does.
#[inline]
fn fit_length<'a>(s: &'a str, limit: Option<usize>, name: &str) -> Result<&'a str, ConvertError> {
    let Some(n) = limit else { return Ok(s) };
    if s.len() <= n {
        return Ok(s);
    }
    fit_length_slow(s, n, name)
}

#[cold]
fn fit_length_slow<'a>(s: &'a str, n: usize, name: &str) -> Result<&'a str, ConvertError> {
    let cut = match s.char_indices().nth(n) {
        None => return Ok(s),
        Some((i, _)) => i,
    };
    if s.as_bytes()[cut..].iter().all(|&b| b == b' ') {
        return Ok(&s[..cut]);
    }
    Err(ConvertError::invalid(format!(
        "value too long for type {name}({n}): {} characters",
        char_count(s)
    )))
}

/// `byteain`: `\x` hex (whitespace between pairs allowed) or the escape format.
fn decode_bytea(v: &[u8], out: &mut Vec<u8>) -> Result<(), ConvertError> {
    if let Some(hex) = v.strip_prefix(b"\\x") {
        let mut i = 0;
        while i < hex.len() {
            if is_c_space(hex[i]) {
                i += 1;
                continue;
            }
            let hi = hex_val(hex[i])?;
            let lo = hex.get(i + 1).ok_or_else(|| {
                ConvertError::invalid("invalid hexadecimal data: odd number of digits")
            })?;
            let lo = hex_val(*lo)?;
            out.push(hi << 4 | lo);
            i += 2;
        }
        return Ok(());
    }
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' {
            out.push(v[i]);
            i += 1;
        } else if v.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if i + 3 < v.len()
            && (b'0'..=b'3').contains(&v[i + 1])
            && (b'0'..=b'7').contains(&v[i + 2])
            && (b'0'..=b'7').contains(&v[i + 3])
        {
            out.push((v[i + 1] - b'0') << 6 | (v[i + 2] - b'0') << 3 | (v[i + 3] - b'0'));
            i += 4;
        } else {
            return Err(ConvertError::invalid(
                "invalid bytea escape: use \\\\ for a backslash or \\ooo octal, or \\x hex",
            ));
        }
    }
    Ok(())
}

#[inline]
fn hex_val(b: u8) -> Result<u8, ConvertError> {
    match HEX[b as usize] {
        0xff => Err(bad_hex(b)),
        v => Ok(v),
    }
}

#[cold]
fn bad_hex(b: u8) -> ConvertError {
    ConvertError::invalid(format!(
        "invalid hexadecimal digit: \"{}\"",
        String::from_utf8_lossy(&[b])
    ))
}

/// `uuid_in`: 32 hex digits, optional braces, optional hyphen after any group of four.
fn parse_uuid(v: &[u8]) -> Result<[u8; 16], ConvertError> {
    let bad = || ConvertError::invalid("not a valid UUID (32 hex digits, hyphens optional)");
    let mut s = v;
    let braces = s.first() == Some(&b'{');
    if braces {
        s = &s[1..];
    }
    let mut out = [0u8; 16];
    let mut i = 0;
    for (k, byte) in out.iter_mut().enumerate() {
        let hi = s.get(i).copied().ok_or_else(bad)?;
        let lo = s.get(i + 1).copied().ok_or_else(bad)?;
        *byte = hex_val(hi).map_err(|_| bad())? << 4 | hex_val(lo).map_err(|_| bad())?;
        i += 2;
        if k % 2 == 1 && k < 15 && s.get(i) == Some(&b'-') {
            i += 1;
        }
    }
    if braces {
        if s.get(i) != Some(&b'}') {
            return Err(bad());
        }
        i += 1;
    }
    if i != s.len() {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::dialect::Dialect;
    use sluice_core::records::Step;

    fn enc(ty: PgType, v: &str) -> Result<Vec<u8>, ConvertError> {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        encode_value(
            &ty,
            &SessionZone::from_setting("UTC"),
            v.as_bytes(),
            &mut scratch,
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn integers() {
        assert_eq!(enc(PgType::Int4, "42").unwrap(), 42i32.to_be_bytes());
        assert_eq!(
            enc(PgType::Int4, " -2147483648 ").unwrap(),
            i32::MIN.to_be_bytes()
        );
        assert!(enc(PgType::Int4, "2147483648").is_err());
        assert_eq!(
            enc(PgType::Int8, "-9223372036854775808").unwrap(),
            i64::MIN.to_be_bytes()
        );
        assert!(enc(PgType::Int8, "9223372036854775808").is_err());
        assert!(enc(PgType::Int2, "32768").is_err());
        assert!(enc(PgType::Int4, "1.0").is_err());
        assert!(enc(PgType::Int4, "").is_err());
        let e = enc(PgType::Int4, "99999999999").unwrap_err();
        assert_eq!(
            e.to_string(),
            "out of range for integer (-2147483648 to 2147483647)"
        );
    }

    #[test]
    fn floats() {
        assert_eq!(enc(PgType::Float8, "1.5").unwrap(), 1.5f64.to_be_bytes());
        assert_eq!(
            enc(PgType::Float8, "-Infinity").unwrap(),
            f64::NEG_INFINITY.to_be_bytes()
        );
        assert_eq!(
            enc(PgType::Float8, "inf").unwrap(),
            f64::INFINITY.to_be_bytes()
        );
        assert!(
            f64::from_be_bytes(enc(PgType::Float8, "NaN").unwrap().try_into().unwrap()).is_nan()
        );
        assert!(enc(PgType::Float8, "1e400").is_err());
        assert!(enc(PgType::Float8, "1e-400").is_err());
        assert!(
            enc(PgType::Float8, "4e-320").is_ok(),
            "denormals are accepted"
        );
        assert!(enc(PgType::Float4, "1e39").is_err());
        assert!(enc(PgType::Float8, "0e5").is_ok());
        assert!(enc(PgType::Float8, "1,5").is_err());
    }

    #[test]
    fn booleans() {
        for t in ["t", "TRUE", "tr", "y", "yes", "on", "1", " true "] {
            assert_eq!(enc(PgType::Bool, t).unwrap(), [1], "{t}");
        }
        for f in ["f", "False", "n", "no", "off", "of", "0"] {
            assert_eq!(enc(PgType::Bool, f).unwrap(), [0], "{f}");
        }
        for bad in ["o", "2", "yess", ""] {
            assert!(enc(PgType::Bool, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lengths() {
        assert_eq!(enc(PgType::Varchar(Some(3)), "abc  ").unwrap(), b"abc");
        assert!(enc(PgType::Varchar(Some(3)), "abcd").is_err());
        assert_eq!(
            enc(PgType::Varchar(Some(2)), "é€").unwrap(),
            "é€".as_bytes()
        );
        assert_eq!(enc(PgType::Char(Some(4)), "ab").unwrap(), b"ab  ");
        assert_eq!(enc(PgType::Char(Some(2)), "ab   ").unwrap(), b"ab");
        assert_eq!(enc(PgType::Char(Some(3)), "é").unwrap(), "é  ".as_bytes());
        let e = enc(PgType::Char(Some(1)), "ab").unwrap_err();
        assert_eq!(
            e.to_string(),
            "value too long for type character(1): 2 characters"
        );
    }

    #[test]
    fn text_rejects_bad_utf8_and_nul() {
        let mut out = Vec::new();
        let zone = SessionZone::from_setting("UTC");
        let e = encode_value(&PgType::Text, &zone, b"ab\xff", &mut Vec::new(), &mut out);
        assert!(e.unwrap_err().to_string().contains("invalid UTF-8"));
        assert!(enc(PgType::Text, "a\0b").is_err());
    }

    #[test]
    fn bytea_forms() {
        assert_eq!(
            enc(PgType::Bytea, "\\xDEADbeef").unwrap(),
            [0xde, 0xad, 0xbe, 0xef]
        );
        assert!(enc(PgType::Bytea, "\\xabc").is_err());
        assert_eq!(enc(PgType::Bytea, "a\\\\b\\001").unwrap(), b"a\\b\x01");
        assert!(enc(PgType::Bytea, "a\\b").is_err());
    }

    #[test]
    fn uuids() {
        let want = enc(PgType::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        assert_eq!(
            enc(PgType::Uuid, "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}").unwrap(),
            want
        );
        assert_eq!(
            enc(PgType::Uuid, "a0eebc999c0b4ef8bb6d6bb9bd380a11").unwrap(),
            want
        );
        assert_eq!(
            enc(PgType::Uuid, "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11").unwrap(),
            want
        );
        assert!(enc(PgType::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1").is_err());
        assert!(enc(PgType::Uuid, "{a0eebc999c0b4ef8bb6d6bb9bd380a11").is_err());
    }

    #[test]
    fn jsonb_has_version_byte() {
        assert_eq!(enc(PgType::Jsonb, "{}").unwrap(), b"\x01{}");
        assert_eq!(enc(PgType::Json, "[1]").unwrap(), b"[1]");
    }

    #[test]
    fn text_escaping_round_trips() {
        let mut out = Vec::new();
        escape_text(b"a\tb\\c\nd\re", &mut out);
        assert_eq!(out, b"a\\tb\\\\c\\nd\\re");
        let mut back = Vec::new();
        sluice_core::records::unescape_text(&out, &mut back);
        assert_eq!(back, b"a\tb\\c\nd\re");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Every converter answers arbitrary bytes with a value or an error, never a panic
        /// (issue 11), and a value it accepts is accepted again the same way.
        #[test]
        fn converters_never_panic_on_arbitrary_bytes(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            digits in "[-+ ]?[0-9]{0,30}([.][0-9]{0,20})?([eE][-+]?[0-9]{1,4})?",
        ) {
            let types = [
                PgType::Bool, PgType::Int2, PgType::Int4, PgType::Int8, PgType::Float4,
                PgType::Float8, PgType::Numeric(None), PgType::Numeric(Some((15, 2))),
                PgType::Numeric(Some((3, 5))), PgType::Date, PgType::Time(None),
                PgType::Time(Some(2)), PgType::Timestamp(None), PgType::Timestamptz(Some(0)),
                PgType::Char(Some(3)), PgType::Varchar(Some(4)), PgType::Text, PgType::Bytea,
                PgType::Uuid, PgType::Json, PgType::Jsonb,
            ];
            let zone = SessionZone::from_setting("America/New_York");
            for ty in &types {
                for value in [raw.as_slice(), digits.as_bytes()] {
                    let (mut a, mut b, mut s) = (Vec::new(), Vec::new(), Vec::new());
                    let first = encode_value(ty, &zone, value, &mut s, &mut a).is_ok();
                    let again = encode_value(ty, &zone, value, &mut s, &mut b).is_ok();
                    proptest::prop_assert_eq!(first, again);
                    proptest::prop_assert_eq!(&a, &b);
                }
            }
        }
    }

    /// A lineitem-like table with one column of each fast type, and a few not-null ones.
    fn mixed_columns() -> Vec<Column> {
        let column = |name: &str, ty: PgType, not_null: bool| Column {
            name: name.into(),
            type_name: format!("{ty:?}"),
            ty,
            not_null,
        };
        vec![
            column("key", PgType::Int8, true),
            column("part", PgType::Int4, false),
            column("line", PgType::Int2, false),
            column("quantity", PgType::Numeric(Some((15, 2))), false),
            column("ratio", PgType::Numeric(None), false),
            column("shipped", PgType::Date, false),
            column("flag", PgType::Char(Some(1)), false),
            column("mode", PgType::Char(Some(10)), false),
            column("comment", PgType::Varchar(Some(44)), false),
            column("note", PgType::Text, false),
            column("instruct", PgType::Char(Some(30)), false),
        ]
    }

    /// Generated records for [`mixed_columns`], in `dialect`: mostly plain values, and one
    /// in every few with something the general path must see (a NULL, a quote, an escape,
    /// a value out of range, multibyte text, a wrong field count) somewhere in the run.
    fn mixed_input(dialect: &Dialect, records: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut next = move |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let csv = dialect.format == sluice_core::dialect::Format::Csv;
        let null = if csv { "" } else { "\\N" };
        let d = dialect.delimiter as char;
        let mut out = String::new();
        for i in 0..records {
            let comment: String = (0..next(47))
                .map(|k| (b'a' + ((k * 7 + i as u64) % 26) as u8) as char)
                .collect();
            let mut fields = vec![
                format!("{}", next(1 << 40)),
                format!("{}", next(200_000)),
                format!("{}", next(8)),
                match next(3) {
                    0 => format!("{}", next(100_000)),
                    1 => format!("{}.{}", next(100_000), next(10)),
                    _ => format!("{}.{:02}", next(100_000), next(100)),
                },
                format!("-0.{:02}", next(10)),
                format!("199{}-{:02}-{:02}", next(9), 1 + next(12), 1 + next(28)),
                ["A", "N", "R"][next(3) as usize].to_string(),
                ["TRUCK", "MAIL", "REG AIR", "SHIP"][next(4) as usize].to_string(),
                comment.clone(),
                comment[..comment.len().min(20)].to_string(),
                "y".repeat(next(31) as usize),
            ];
            match next(40) {
                0 => fields[1] = null.into(),
                1 => fields[3] = "12345678901234.5".into(),
                2 => fields[5] = "1997-02-29".into(),
                3 => fields[2] = "40000".into(),
                4 => fields[8] = "caf\u{e9} au lait".into(),
                5 => fields[9] = "x".repeat(70),
                6 if csv => fields[9] = "\"quoted, with a comma\"".into(),
                7 if csv => fields[8] = "\"say \"\"hi\"\"\"".into(),
                8 if !csv => fields[9] = "back\\\\slash".into(),
                9 => fields[0] = null.into(),
                10 => fields[4] = "1e3".into(),
                11 => {
                    fields.pop();
                }
                12 => fields[6] = "AB".into(),
                13 => fields[3] = "99999999.999".into(),
                14 => fields[10] = format!("{}\u{e9}", "y".repeat(next(29) as usize)),
                _ => {}
            }
            out.push_str(&fields.join(&d.to_string()));
            if dialect.format == sluice_core::dialect::Format::Tbl {
                out.push(d);
            }
            out.push('\n');
        }
        out.into_bytes()
    }

    /// Encodes every record of `input`, each through the general path alone, or (`fast`)
    /// through [`Converter::encode_plain`] wherever it takes the records, as the loader
    /// does: the tuples, the indexes of the records refused, and how many the fast path
    /// took.
    fn encode_all(
        conv: &mut Converter,
        parser: &RecordParser,
        input: &[u8],
        fast: bool,
    ) -> (Vec<u8>, Vec<usize>, usize) {
        let inp = parser.input(input, true);
        let mut fields = Fields::new();
        let (mut out, mut refused, mut taken) = (Vec::new(), Vec::new(), 0);
        let (mut at, mut record) = (0, 0);
        // One slice, as the loader's mapped walk hands a window: every call after the first
        // is on the same input.
        let mut same_input = false;
        loop {
            if fast {
                let limit = out.len() + 4096;
                let (n, end) =
                    conv.encode_plain(parser, input, at, &mut out, limit, same_input, None);
                same_input = true;
                if n > 0 {
                    (record, taken, at) = (record + n, taken + n, end);
                    continue;
                }
            }
            match parser.parse_input(&inp, at, &mut fields).unwrap() {
                Step::Record { end, .. } => {
                    if conv.encode_record(&fields, input, &mut out, None).is_err() {
                        refused.push(record);
                    }
                    (record, at) = (record + 1, end);
                }
                Step::End => return (out, refused, taken),
                Step::NeedMore => panic!("the whole input was given"),
            }
        }
    }

    /// The fast path, a run at a time, writes exactly the tuples the general path writes,
    /// record by record, in tbl, text and CSV, with records it must decline scattered
    /// through its runs; and it takes most of them, so that the comparison is not vacuous.
    #[test]
    fn plain_runs_encode_what_the_general_path_encodes() {
        use sluice_core::dialect::Format;
        for format in [Format::Tbl, Format::Text, Format::Csv] {
            let dialect = Dialect::new(format);
            let parser = RecordParser::new(&dialect);
            for seed in 1..=4 {
                let input = mixed_input(&dialect, 3000, seed);
                let zone = || SessionZone::from_setting("UTC");
                let mut general = Converter::new(mixed_columns(), zone());
                let (g, g_refused, _) = encode_all(&mut general, &parser, &input, false);
                assert!(
                    !g_refused.is_empty(),
                    "{format:?} {seed}: some records are refused"
                );
                // The build chosen for this CPU, and the x86-64 baseline's (SSE2 only).
                for dispatched in [true, false] {
                    let mut fast = Converter::new(mixed_columns(), zone());
                    #[cfg(target_arch = "x86_64")]
                    {
                        fast.bit_instructions &= dispatched;
                    }
                    let (f, f_refused, taken) = encode_all(&mut fast, &parser, &input, true);
                    let what = format!("{format:?} {seed} (dispatched: {dispatched})");
                    assert_eq!(f_refused, g_refused, "{what}: the same records refused");
                    assert!(f == g, "{what}: the same tuples");
                    assert!(taken > 1800, "{what}: the fast path took {taken}");
                }
            }
        }
    }

    /// The columns of an events table, as real tables have them.
    fn event_columns() -> Vec<Column> {
        let column = |name: &str, ty: PgType| Column {
            name: name.into(),
            type_name: format!("{ty:?}"),
            ty,
            not_null: false,
        };
        vec![
            column("id", PgType::Int8),
            column("at", PgType::Timestamptz(None)),
            column("n", PgType::Int4),
            column("name", PgType::Text),
            column("amount", PgType::Numeric(Some((12, 2)))),
            column("ok", PgType::Bool),
            column("score", PgType::Float8),
            column("key", PgType::Uuid),
        ]
    }

    /// Events in CSV; `odd` says which records carry values off every fast path (leading
    /// spaces, `infinity`, `NaN`, a 9-digit fraction, a NULL, a quoted field with a doubled
    /// quote, non-ASCII text).
    fn event_input(records: usize, odd: impl Fn(usize) -> bool) -> Vec<u8> {
        let mut out = String::new();
        for i in 0..records {
            let line = if odd(i) {
                match i % 6 {
                    0 => format!("{i},infinity, -{i},Z\u{fc}rich,{i}.5,yes,NaN,{{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}}"),
                    1 => format!("{i},2024-03-01 10:00:00.123456789+02,,\"say \"\"hi\"\"\",,on,-1e-300,a0eebc999c0b4ef8bb6d6bb9bd380a11"),
                    2 => format!("{i},2024-03-01T10:00:00Z,+7,\u{6771}\u{4eac},-0.5,  t,1.5E10,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                    3 => format!("{i},,{i},,,,,"),
                    4 => format!("{i},2024-03-01 10:00:00-0330,-2147483648,S\u{e3}o Paulo,1e2,FALSE,-Infinity,A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
                    _ => format!("{i},2024-03-01 10:00:00.5, 5 ,x,  7.25 ,0,4.9e-324,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                }
            } else {
                format!(
                    "{i},2024-03-{:02} 10:{:02}:00+00,{},name{i},{}.{:02},{},{}.25,a0eebc99-9c0b-4ef8-bb6d-{:012x}",
                    1 + i % 28,
                    i % 60,
                    i % 1000,
                    i % 10_000,
                    i % 100,
                    ["t", "f"][i % 2],
                    i % 977,
                    i
                )
            };
            out.push_str(&line);
            out.push('\n');
        }
        out.into_bytes()
    }

    /// No cliff: a file whose every record has a value off the fast path is indexed once,
    /// as the all-plain file is: each such value is converted in place by its column's
    /// general converter, and the run goes on over the same index. Measured as work (bytes
    /// indexed per byte of input, runs indexed, records left to the general path), not time;
    /// the tuples are the general path's.
    #[test]
    fn values_off_the_fast_path_do_not_make_the_input_indexed_again() {
        let dialect = Dialect::new(sluice_core::dialect::Format::Csv);
        let parser = RecordParser::new(&dialect);
        let zone = || SessionZone::from_setting("Europe/Zurich");
        let records = 20_000;
        let mut work = Vec::new();
        let files: [(&str, &dyn Fn(usize) -> bool); 3] = [
            ("plain", &|_| false),
            ("1% odd", &|i| i % 100 == 7),
            ("every record odd", &|_| true),
        ];
        for (what, odd) in files {
            let input = event_input(records, odd);
            let mut general = Converter::new(event_columns(), zone());
            let (g, g_refused, _) = encode_all(&mut general, &parser, &input, false);
            let mut fast = Converter::new(event_columns(), zone());
            let (f, f_refused, taken) = encode_all(&mut fast, &parser, &input, true);
            assert!(g_refused.is_empty(), "{what}: {g_refused:?}");
            assert_eq!(f_refused, g_refused, "{what}");
            assert!(f == g, "{what}: the same tuples");
            // All but the last, which lacks the tail the index reads past a line end.
            assert_eq!(taken, records - 1, "{what}: every record on the fast path");
            let (index, in_place) = fast.plain_work();
            let per_byte = index.bytes as f64 / input.len() as f64;
            // A run ends at the last line end of about 16 KB; the next starts there.
            let blocks = input.len() as u64 / 16_000 + 2;
            assert!(per_byte < 1.01, "{what}: {per_byte} bytes indexed per byte");
            assert!(index.runs <= blocks, "{what}: {} runs", index.runs);
            work.push((what, per_byte, index.runs, in_place));
        }
        let (plain, odd) = (work[0], work[2]);
        assert!(
            odd.3 >= records as u64,
            "every odd record converted a value in place"
        );
        assert!(
            odd.1 <= plain.1 * 1.01 && odd.2 <= plain.2 + 1,
            "as much indexing with every record odd as with none: {work:?}"
        );
    }

    /// A record that must go to the general path (an invalid value) does not make the
    /// input indexed again either: the run goes on after it over the same index.
    #[test]
    fn records_left_to_the_general_path_do_not_make_the_input_indexed_again() {
        let dialect = Dialect::new(sluice_core::dialect::Format::Csv);
        let parser = RecordParser::new(&dialect);
        let text = String::from_utf8(event_input(5000, |_| false)).unwrap();
        // Every tenth record has an int out of range: refused, and the run goes on.
        let input: Vec<u8> = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                let mut f: Vec<&str> = l.split(',').collect();
                if i % 10 == 3 {
                    f[2] = "99999999999";
                }
                f.join(",") + "\n"
            })
            .collect::<String>()
            .into_bytes();
        let mut fast = Converter::new(event_columns(), SessionZone::from_setting("UTC"));
        let (_, refused, taken) = encode_all(&mut fast, &parser, &input, true);
        // All but the refused and the last (which lacks the tail the index reads past it).
        assert_eq!((refused.len(), taken), (500, 4499));
        let (index, _) = fast.plain_work();
        assert!(index.resumed >= 490, "{index:?}");
        assert!(
            (index.bytes as f64) < input.len() as f64 * 1.01,
            "{index:?} for {} bytes",
            input.len()
        );
    }

    /// The fast path's whole field for `v` (read inside `window`), or `None` when it declines.
    #[test]
    fn a_columns_fast_path_is_one_word() {
        assert_eq!(std::mem::size_of::<Hot>(), 8);
    }

    fn hot(ty: &PgType, v: &[u8], window: &[u8]) -> Option<Vec<u8>> {
        let room = Hot::of(ty).bound() + v.len() + SLACK;
        let mut out = vec![0xaa; 3 + room + 3];
        // SAFETY: `room` bytes follow the three guard bytes.
        let kept = unsafe {
            encode_hot(
                Hot::of(ty),
                (v, swar::head16(v, window)),
                &test_zone(),
                out.as_mut_ptr().add(3),
            )
        };
        assert_eq!(&out[..3], &[0xaa; 3], "the fast path wrote before its room");
        assert_eq!(
            &out[3 + room..],
            &[0xaa; 3],
            "the fast path wrote past its room"
        );
        (kept > 0).then(|| out[3..3 + kept].to_vec())
    }

    /// A session zone with transitions.
    fn test_zone() -> SessionZone {
        SessionZone::from_setting("America/New_York")
    }

    /// The general path's whole field for `v`, length prefix included.
    fn general(ty: &PgType, v: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let w = FieldWriter::begin(&mut out);
        encode_value(ty, &test_zone(), v, &mut Vec::new(), &mut out).ok()?;
        w.finish(&mut out);
        Some(out)
    }

    const HOT_TYPES: [PgType; 19] = [
        PgType::Time(None),
        PgType::Timestamp(None),
        PgType::Timestamptz(None),
        PgType::Int2,
        PgType::Int4,
        PgType::Int8,
        PgType::Float4,
        PgType::Float8,
        PgType::Bool,
        PgType::Uuid,
        PgType::Date,
        PgType::Numeric(None),
        PgType::Numeric(Some((15, 2))),
        PgType::Numeric(Some((4, 4))),
        PgType::Numeric(Some((20, 0))),
        PgType::Text,
        PgType::Varchar(Some(4)),
        PgType::Char(Some(25)),
        PgType::Char(Some(1)),
    ];

    /// Asserts that the fast path, when it takes `v`, writes what the general path writes,
    /// both where it may read past the value and where it must not.
    fn fast_equals_general(v: &[u8]) {
        let mut window = v.to_vec();
        window.extend_from_slice(b"|9.|1996-01-02|\xff\x00 1234567890123456");
        for ty in &HOT_TYPES {
            for (value, w) in [(&window[..v.len()], &window[..]), (v, v)] {
                if let Some(fast) = hot(ty, value, w) {
                    assert_eq!(
                        Some(fast),
                        general(ty, v),
                        "{ty:?} {:?}",
                        String::from_utf8_lossy(v)
                    );
                }
            }
        }
    }

    #[test]
    fn fast_path_agrees_with_general_path_on_edge_values() {
        for v in [
            "0",
            "7",
            "32767",
            "32768",
            "99999",
            "123456789",
            "2147483647",
            "9999999999999999",
            "00000000000000001",
            "-1",
            "+1",
            " 1",
            "1 ",
            "",
            "1996-03-13",
            "2000-02-29",
            "1900-02-29",
            "0000-01-01",
            "9999-12-31",
            "1996-13-01",
            "1996-00-10",
            "1996-1-1",
            "21168.23",
            "0.04",
            "-0.005",
            ".5",
            "5.",
            ".",
            "1.2.3",
            "99.995",
            "99.9949",
            "0.00005",
            "1234567890.12345",
            "12345678901234567",
            "DELIVER IN PERSON",
            "abcde",
            "N",
            "\u{e9}t\u{e9}",
            "a\u{0}b",
            "12345678901234567890123456",
            "-32768",
            "-32769",
            "-2147483648",
            "-2147483649",
            "2147483648",
            "-999999999999999",
            "+999999999999999",
            "-",
            "+",
            "--1",
            "-+1",
            "1e5",
            "-1.5e-3",
            "0.1",
            "1.7976931348623157e308",
            "1.7976931348623159e308",
            "1e309",
            "4.9e-324",
            "2.4703282292062328e-324",
            "2.4703282292062327e-324",
            "1e-400",
            "2.2250738585072011e-308",
            "3.4028235e38",
            "3.4028236e38",
            "1.4e-45",
            "7e-46",
            "1e-46",
            "0.0",
            "-0",
            "-0.0e10",
            "NaN",
            "nan",
            "-NaN",
            "Infinity",
            "-inf",
            "1e",
            "1e+",
            "0x10",
            "1_0",
            "123456789012345678901234567890.123456789e-10",
            "t",
            "f",
            "true",
            "FALSE",
            "yes",
            "Y",
            "no",
            "on",
            "of",
            "off",
            "o",
            "1",
            "0",
            "2",
            " t ",
            "tr",
            "truee",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
            "a0eebc99-9c0b-4ef8-bb6d_6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "2024-03-01 10:00:00",
            "2024-03-01T10:00:00.5",
            "2024-03-01 10:00:00.123456",
            "2024-03-01 10:00:00.1234567",
            "2024-03-01 10:00:00.",
            "2024-03-01 10:00:00Z",
            "2024-03-01 10:00:00z",
            "2024-03-01 10:00:00+02",
            "2024-03-01 10:00:00-05:30",
            "2024-03-01 10:00:00+0530",
            "2024-03-01 10:00:00+15:59",
            "2024-03-01 10:00:00+16",
            "2024-03-01 10:00:00+2",
            "2024-03-01 10:00:00 +02",
            "2024-03-10 02:30:00",
            "2024-11-03 01:30:00",
            "2024-02-29 23:59:59",
            "2023-02-29 00:00:00",
            "2024-03-01 24:00:00",
            "2024-03-01 23:59:60",
            "0000-03-01 10:00:00",
            "0001-01-01 00:00:00",
            "9999-12-31 23:59:59.999999",
            "2024-3-01 10:00:00",
            "2024-03-01  10:00:00",
            "00:00:00",
            "23:59:59.999999",
            "12:34:56.5",
            "12:34:56.1234567",
            "12:34:56.",
            "24:00:00",
            "23:59:60",
            "12:34",
            "12:34:56+02",
            "1:02:03",
        ] {
            fast_equals_general(v.as_bytes());
        }
        // Values the fast path must take, so that the comparison above is not vacuous.
        for (ty, v) in [
            (PgType::Int2, "32767"),
            (PgType::Int8, "9999999999999999"),
            (PgType::Int4, "-2147483648"),
            (PgType::Int2, "-32768"),
            (PgType::Int8, "+999999999999999"),
            (PgType::Float8, "-1.5e-3"),
            (PgType::Float8, "4.9e-324"),
            (PgType::Float4, "3.4028235e38"),
            (PgType::Float4, "1.4e-45"),
            (PgType::Bool, "FALSE"),
            (PgType::Bool, "on"),
            (PgType::Uuid, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
            (PgType::Uuid, "a0eebc999c0b4ef8bb6d6bb9bd380a11"),
            (PgType::Date, "2000-02-29"),
            (PgType::Timestamptz(None), "2024-03-10 02:30:00"),
            (PgType::Timestamptz(None), "2024-03-01 10:00:00.5-05:30"),
            (PgType::Timestamp(None), "2024-03-01T10:00:00.123456Z"),
            (PgType::Time(None), "23:59:59.999999"),
            (PgType::Numeric(Some((15, 2))), "21168.23"),
            (PgType::Char(Some(25)), "DELIVER IN PERSON"),
        ] {
            assert!(hot(&ty, v.as_bytes(), &[]).is_some(), "{ty:?} {v}");
        }
    }

    #[test]
    fn char_padding_agrees_with_the_general_path_at_every_width() {
        let text = b"DELIVER IN PERSON, then the rest of a long comment";
        for width in 1..=MAX_HOT_CHAR + 2 {
            let ty = PgType::Char(Some(width));
            for n in 0..=width.min(text.len()) {
                let v = &text[..n];
                let fast = hot(&ty, v, v);
                if width <= MAX_HOT_CHAR {
                    assert_eq!(fast, general(&ty, v), "char({width}) {n}");
                } else {
                    assert_eq!(fast, None, "char({width}) is left to the general path");
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// The fast path's word-at-a-time reading agrees with the general path on generated
        /// numbers, dates and strings, and on arbitrary bytes.
        #[test]
        fn fast_path_agrees_with_general_path(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30),
            number in "-?[0-9]{0,18}([.][0-9]{0,8})?",
            date in "[0-9]{4}-[0-9]{2}-[0-9]{2}",
            text in "[ -~]{0,40}",
            float in "[-+]?[0-9]{0,20}([.][0-9]{0,20})?([eE][-+]?[0-9]{1,3})?",
            uuid in "[0-9a-fA-F-]{30,37}",
            time in "[0-2][0-9]:[0-6][0-9]:[0-6][0-9]([.][0-9]{0,8})?",
            timestamp in "[0-9]{4}-[01][0-9]-[0-3][0-9][ T][0-2][0-9]:[0-6][0-9]:[0-6][0-9]([.][0-9]{0,8})?(Z|[-+][0-9]{1,2}(:?[0-9]{2})?)?",
        ) {
            for v in [
                raw.as_slice(),
                number.as_bytes(),
                date.as_bytes(),
                text.as_bytes(),
                float.as_bytes(),
                uuid.as_bytes(),
                timestamp.as_bytes(),
                time.as_bytes(),
            ] {
                fast_equals_general(v);
            }
        }
    }
}
