//! The fast path's splitter: a structural index over a run of plain records.
//!
//! Flat files are made of plain records: LF line ends, no escape, no NULL spelled with a
//! backslash, and in CSV no quote but around a whole field. For them, splitting is two
//! passes, as in simdjson and simdcsv. The first pass ([`RecordParser::index_plain`]) reads
//! 64-byte windows into bit masks (delimiters, line ends, quotes, bytes that need a
//! decision) and writes out the offsets of every delimiter and line end, a few KB of input at
//! a time, with no branch per field. The second pass, the destination's encoder, walks
//! records through [`PlainRun::record`]: a field's bounds are two loads from that array, so
//! the per-field loop carries no splitter state and leaves the registers to conversion.
//!
//! The index stops at the first byte that needs the general parser
//! ([`RecordParser::parse_input`]): an escape (but text's whole-field `\N`, which is NULL), a
//! stray CR, a quote that does not wrap a whole field (but CSV's doubled quote inside one,
//! which the value reports as [`PlainValue::escaped`]), a line end inside quotes. A record
//! whose field count is not the table's is not given either. The caller then takes that record
//! through the general path, which gives the same fields or the error, and goes on over the
//! same index after it ([`RecordParser::resume_plain`]): a record off the fast path never
//! makes the input be indexed twice. Where the index gives a record, its fields are the
//! general path's: that equivalence is tested on fixtures and generated input, for every
//! format.

use super::RecordParser;
use crate::dialect::Format;
use crate::tokens;

/// How much input one index covers, at least (unless a special byte or the input's end
/// comes first): big enough that indexing pays its setup once per many records, small
/// enough that the offsets stay in the first-level cache.
const BLOCK: usize = 16 << 10;

/// The index's arrays, kept between runs so that indexing allocates nothing.
#[derive(Default, Debug)]
pub struct PlainIndex {
    /// Offsets of every delimiter and line end, from the run's start, in order.
    ends: Vec<u32>,
    /// Offsets of the line ends alone: one per record.
    lines: Vec<u32>,
    /// Where the run indexed last starts in its input.
    origin: usize,
    /// The run holds a text `\N` field, so that its values must be compared with NULL.
    null_escapes: bool,
    /// The run holds a CSV doubled quote, so that its quoted values must be looked into.
    doubled_quotes: bool,
    /// The work done, for the tests that hold the fast path to one pass over its input.
    work: IndexWork,
}

/// How much indexing a [`PlainIndex`] has done since it was made.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IndexWork {
    /// Runs indexed.
    pub runs: u64,
    /// Input bytes read into masks.
    pub bytes: u64,
    /// Runs taken up again after a record left the fast path ([`RecordParser::resume_plain`]).
    pub resumed: u64,
}

impl PlainIndex {
    pub fn new() -> PlainIndex {
        PlainIndex::default()
    }

    /// The indexing done so far.
    pub fn work(&self) -> IndexWork {
        self.work
    }
}

/// The plain records of one index, read through [`PlainRun::record`]. Offsets are from the
/// run's start.
#[derive(Debug)]
pub struct PlainRun<'a> {
    /// The input from the run's start on.
    input: &'a [u8],
    /// [`PlainIndex::ends`]: after a first entry of `u32::MAX`, one before the run's start,
    /// so that every field starts one past the entry before its end.
    ends: &'a [u32],
    lines: &'a [u32],
    origin: usize,
    tbl: bool,
    csv: bool,
    quote: u8,
    /// The index let a doubled quote through somewhere in the run.
    doubled_quotes: bool,
    /// NULL's spelling, when a field without an escape can match it (CSV's empty field).
    null: Option<&'a [u8]>,
}

/// What [`PlainRecord::visit_fields`] calls for each field: a trait rather than a closure,
/// so that the implementation can demand inlining (`#[inline(always)]` on its method), which
/// a closure cannot; a call per field would cost more than the rest of the loop.
pub trait FieldVisitor<T> {
    /// One column and its field's span; false stops the walk.
    fn field(&mut self, column: &T, span: PlainSpan) -> bool;
}

/// One record of a [`PlainRun`]: where it starts, where the next one starts, and the end of
/// each of its fields.
#[derive(Clone, Copy, Debug)]
pub struct PlainRecord<'a> {
    /// The record's first byte.
    pub start: usize,
    /// The next record's first byte (past this one's line end).
    pub next: usize,
    /// The structural index of the next record's first field, for [`PlainRun::record`].
    pub following: usize,
    /// The entry before the first field's end (the previous line end), then each field's.
    ends: &'a [u32],
}

impl<'a> PlainRecord<'a> {
    /// Calls `visitor` with each of `columns` and its field's span, in order, until it
    /// returns false (then false). The loop carries each field's start from the end before
    /// it, one load per field.
    #[inline(always)]
    pub fn visit_fields<T>(&self, columns: &[T], visitor: &mut impl FieldVisitor<T>) -> bool {
        let Some((&first, ends)) = self.ends.split_first() else {
            return columns.is_empty();
        };
        let mut s = first.wrapping_add(1) as usize;
        for (column, &e) in columns.iter().zip(ends) {
            if !visitor.field(column, PlainSpan { s, e: e as usize }) {
                return false;
            }
            s = e as usize + 1;
        }
        true
    }
}

impl<'a> PlainRun<'a> {
    /// How many records the index holds (each may still prove not plain in
    /// [`PlainRun::record`] or in a value).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Where the run starts: the first record's first byte.
    #[inline(always)]
    pub fn start(&self) -> usize {
        self.origin
    }

    /// Where record `r` of the run starts (for `r` its length, where the run ends).
    #[inline]
    pub fn record_start(&self, r: usize) -> usize {
        match r.checked_sub(1) {
            None => self.origin,
            Some(before) => self.origin + self.lines[before] as usize + 1,
        }
    }

    /// Where the first record's field ends start in the index (after its `u32::MAX`).
    pub const FIRST: usize = 1;

    /// The input a record's line end must leave after it to be indexed, so that any value
    /// may be read as one 16-byte word ([`PlainRun::value`]) or three
    /// ([`PlainValue::blocks48`]) with no check at its end.
    pub const TAIL: usize = 64;

    /// Record `r` of the run, whose fields' ends start at structural `k` ([`Self::FIRST`]
    /// for the first record, then the previous record's [`PlainRecord::following`]), if it
    /// has exactly `columns` fields, as the general path would split it; `None` when it needs
    /// the general path (another field count, a `\.` line in CSV).
    #[inline(always)]
    pub fn record(&self, r: usize, k: usize, columns: usize) -> Option<PlainRecord<'a>> {
        let line = *self.lines.get(r)?;
        if columns == 0 || k == 0 {
            return None;
        }
        let last = k + columns - 1;
        let ends = self.ends.get(k - 1..=last)?;
        let following = if ends[columns] == line {
            // tbl without dbgen's trailing bar: an empty last field after a delimiter would
            // be that bar, and the record one field short.
            if self.tbl && columns > 1 && ends[columns - 1] + 1 == line {
                return None;
            }
            last + 1
        } else if self.tbl && ends[columns] + 1 == line && self.ends.get(last + 1) == Some(&line) {
            // dbgen's trailing bar ends the line, not a field.
            last + 2
        } else {
            return None;
        };
        let start = ends[0].wrapping_add(1) as usize;
        if self.csv && self.input[start] == b'\\' {
            // `\.` may end the data.
            return None;
        }
        Some(PlainRecord {
            start: self.origin + start,
            next: self.origin + line as usize + 1,
            following,
            ends,
        })
    }

    /// CSV's quote, doubled inside an escaped value ([`PlainValue::unescape`]).
    pub fn quote(&self) -> u8 {
        self.quote
    }

    /// Whether [`PlainRun::value`] must look at each value for CSV quotes or a NULL
    /// spelling; when not, `value::<false>` skips both checks.
    #[inline(always)]
    pub fn checks_values(&self) -> bool {
        self.csv || self.null.is_some()
    }

    /// The value of one field of a record, CSV quotes around the field taken off, readable
    /// a word at a time; `None` for a field that spells NULL, which the general path
    /// handles. `CHECKED` must be [`PlainRun::checks_values`].
    #[inline(always)]
    pub fn value<const CHECKED: bool>(&self, field: PlainSpan) -> Option<PlainValue<'a>> {
        debug_assert_eq!(CHECKED, self.checks_values());
        let PlainSpan { s, e } = field;
        let input = self.input;
        debug_assert!(s <= e && e + Self::TAIL <= input.len());
        // SAFETY: a span is made only by `PlainRecord::visit_fields`, from the index of this
        // run's input: it starts at or before its end, which is a delimiter or line end at
        // or before the record's line end, and the index takes no line end within `TAIL`
        // bytes of the input's end (`index_windows`). So `s..e` and `s..s + TAIL` are in
        // bounds, and so are they one byte on for a quoted field.
        let value = |s: usize, e: usize| unsafe {
            PlainValue {
                bytes: input.get_unchecked(s..e),
                at: input.as_ptr().add(s),
                escaped: false,
            }
        };
        if CHECKED {
            // SAFETY: as above.
            if self.csv && unsafe { *input.get_unchecked(s) } == self.quote {
                // The index let a quote through only around a whole field, so `e - 1` is
                // the closing quote, past `s`, or doubled inside it.
                debug_assert!(s < e - 1);
                let mut v = value(s + 1, e - 1);
                v.escaped = self.doubled_quotes && memchr::memchr(self.quote, v.bytes).is_some();
                return Some(v);
            }
            let v = value(s, e);
            // The length first: CSV's NULL is the empty field, and most values are not.
            if self
                .null
                .is_some_and(|n| v.bytes.len() == n.len() && (n.is_empty() || v.bytes == n))
            {
                return None;
            }
            return Some(v);
        }
        Some(value(s, e))
    }
}

/// One value of a [`PlainRun`], with the input after it at hand for word-at-a-time code.
#[derive(Clone, Copy, Debug)]
pub struct PlainValue<'a> {
    /// The value's bytes.
    pub bytes: &'a [u8],
    /// The bytes hold CSV's doubled quotes, which [`PlainValue::unescape`] makes single.
    pub escaped: bool,
    /// The value's first byte, taken from the run's whole input (not from `bytes`, whose
    /// pointer may read only the value), with [`PlainRun::TAIL`] bytes readable from it.
    at: *const u8,
}

impl PlainValue<'_> {
    /// The value with CSV's doubled quotes (`quote` twice) made single, onto `out`.
    pub fn unescape(&self, quote: u8, out: &mut Vec<u8>) {
        let mut rest = self.bytes;
        while let Some(p) = memchr::memchr(quote, rest) {
            out.extend_from_slice(&rest[..=p]);
            // The index let a quote inside a field through only doubled.
            rest = rest.get(p + 2..).unwrap_or_default();
        }
        out.extend_from_slice(rest);
    }

    /// The 16-byte word `k` from the value's start, little-endian (past the value's end,
    /// unspecified); `k` at most 2.
    #[inline(always)]
    fn block(&self, k: usize) -> u128 {
        debug_assert!(k < 3);
        // SAFETY: `at` has `TAIL` (64) readable bytes after it (`PlainRun::value`), and
        // points into the run's input, which outlives `self`.
        unsafe { u128::from_le_bytes(self.at.add(16 * k).cast::<[u8; 16]>().read_unaligned()) }
    }

    /// The value's first 16 bytes as one little-endian word (past its end, unspecified).
    #[inline(always)]
    pub fn head(&self) -> u128 {
        self.block(0)
    }

    /// The 48 bytes from the value's start as three little-endian words (past the value's
    /// end, unspecified): a value of up to 48 bytes read with no branch on its length.
    #[inline(always)]
    pub fn blocks48(&self) -> [u128; 3] {
        [self.block(0), self.block(1), self.block(2)]
    }
}

/// Where one field of a [`PlainRecord`] lies in the run's input, from its first byte to the
/// delimiter or line end after it (offsets from the run's start).
#[derive(Clone, Copy, Debug)]
pub struct PlainSpan {
    s: usize,
    e: usize,
}

/// Prefix XOR of a mask: bit `i` is the parity of bits `0..=i` (inside quotes, with the
/// opening quote inside and the closing one outside).
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Appends the offsets `base + i` of the set bits `i` of `bits` to `dst` at `len` and returns
/// the new length, with no branch per bit: the first `FIRST` are written whatever the count
/// (the entries past it are scratch), then eight at a time. With `FIRST` above what a window
/// of typical records holds, the loop rarely runs, so the one branch is predictable, where a
/// loop whose trip count follows the data mispredicts its exit about once a window.
///
/// # Safety
/// `dst` has room for `len + max(FIRST, bits.count_ones() + 7)` entries.
#[inline(always)]
unsafe fn flatten<const FIRST: usize>(
    dst: *mut u32,
    len: usize,
    base: u32,
    mut bits: u64,
) -> usize {
    let count = bits.count_ones() as usize;
    let mut at = dst.add(len);
    for i in 0..FIRST {
        *at.add(i) = base.wrapping_add(bits.trailing_zeros());
        bits &= bits.wrapping_sub(1);
    }
    if count > FIRST {
        let end = at.add(count);
        at = at.add(FIRST);
        while at < end {
            for i in 0..8 {
                *at.add(i) = base.wrapping_add(bits.trailing_zeros());
                bits &= bits.wrapping_sub(1);
            }
            at = at.add(8);
        }
    }
    len + count
}

impl RecordParser {
    /// Indexes the plain records from `start` of `input` into `index`: about [`BLOCK`]
    /// bytes of them, up to the first that needs the general path. A record counts only
    /// with its line end, and only where [`PlainRun::TAIL`] bytes of `input` follow that
    /// line end (the values are read a word at a time). Empty when the dialect or the
    /// record at `start` always needs the general path.
    #[inline(always)]
    pub fn index_plain<'a>(
        &'a self,
        input: &'a [u8],
        start: usize,
        index: &'a mut PlainIndex,
    ) -> PlainRun<'a> {
        self.index_plain_with::<false>(input, start, index)
    }

    /// [`RecordParser::index_plain`] with AVX2 compares ([`tokens::plain_masks_avx2`]), for
    /// code compiled for AVX2 and chosen at run time.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn index_plain_avx2<'a>(
        &'a self,
        input: &'a [u8],
        start: usize,
        index: &'a mut PlainIndex,
    ) -> PlainRun<'a> {
        self.index_plain_with::<true>(input, start, index)
    }

    /// `AVX2` only where the CPU has it.
    #[inline(always)]
    fn index_plain_with<'a, const AVX2: bool>(
        &'a self,
        input: &'a [u8],
        start: usize,
        index: &'a mut PlainIndex,
    ) -> PlainRun<'a> {
        let csv = self.format == Format::Csv;
        index.ends.clear();
        index.ends.push(u32::MAX);
        index.lines.clear();
        index.origin = start;
        index.null_escapes = false;
        index.doubled_quotes = false;
        if !self.crlf && start + PlainRun::TAIL < input.len() {
            let scanned = if csv {
                self.index_windows::<true, AVX2>(input, start, index)
            } else {
                self.index_windows::<false, AVX2>(input, start, index)
            };
            index.work.runs += 1;
            index.work.bytes += scanned as u64;
        }
        self.run_over(input, start, index)
    }

    /// Where the run of `index` goes on at `start`, the first byte of one of its records (in
    /// practice the one after a record that left the fast path, which the caller took
    /// through the general one): the
    /// record there and its first field's structural index, for [`PlainRun::record`] on
    /// [`RecordParser::indexed_run`]. `None` when `start` is not such a place (then index
    /// again).
    pub fn resume_plain(&self, start: usize, index: &mut PlainIndex) -> Option<(usize, usize)> {
        if start == index.origin && !index.lines.is_empty() {
            // The run's first record, refused and asked again.
            index.work.resumed += 1;
            return Some((0, PlainRun::FIRST));
        }
        let line = start.checked_sub(index.origin + 1)?;
        let line = u32::try_from(line).ok()?;
        let r = index.lines.binary_search(&line).ok()?;
        if r + 1 >= index.lines.len() {
            // The run has no record after this one: a fresh index costs no more.
            return None;
        }
        let k = index.ends.binary_search(&line).ok()? + 1;
        index.work.resumed += 1;
        Some((r + 1, k))
    }

    /// The run [`RecordParser::index_plain`] made into `index` last, over `input`.
    ///
    /// The caller vouches that `input` is the very input of that call, unchanged: the index
    /// holds offsets into it, and nothing here can tell another input from it.
    pub fn indexed_run<'a>(&'a self, input: &'a [u8], index: &'a PlainIndex) -> PlainRun<'a> {
        self.run_over(input, index.origin, index)
    }

    /// The run of `index`, which was made over `input` from `start`.
    fn run_over<'a>(
        &'a self,
        input: &'a [u8],
        start: usize,
        index: &'a PlainIndex,
    ) -> PlainRun<'a> {
        let csv = self.format == Format::Csv;
        // Text's `\N` is let through the index as a whole field (then the run's values are
        // compared with it); another NULL spelling with a backslash never reaches a value.
        let null = csv || !self.null_escaped || index.null_escapes;
        PlainRun {
            input: &input[start.min(input.len())..],
            ends: &index.ends,
            lines: &index.lines,
            origin: start,
            tbl: self.format == Format::Tbl,
            csv,
            quote: self.quote,
            doubled_quotes: index.doubled_quotes,
            null: null.then_some(self.null.as_slice()),
        }
    }

    /// Clears, in `bad` (the bytes of the 64-byte window at `at` of `input` that need the
    /// general path), the backslashes that begin a whole field `\N`: text's NULL, which the
    /// run's values then report.
    #[cold]
    fn null_escapes(&self, input: &[u8], start: usize, at: usize, mut bad: u64) -> u64 {
        let structural =
            |b: Option<&u8>| b.is_some_and(|&b| b == self.delimiter || b == self.newline);
        let mut each = bad;
        while each != 0 {
            let i = each.trailing_zeros() as usize;
            each &= each - 1;
            let p = at + i;
            let whole = input[p] == b'\\'
                && input.get(p + 1) == Some(&b'N')
                && structural(input.get(p + 2))
                && (p == start || structural(input.get(p - 1)));
            if !whole {
                break;
            }
            bad &= !(1u64 << i);
        }
        bad
    }

    /// Indexes windows of `input` from `start` into `index`; returns how many bytes it read.
    #[inline(always)]
    fn index_windows<const CSV: bool, const AVX2: bool>(
        &self,
        input: &[u8],
        start: usize,
        index: &mut PlainIndex,
    ) -> usize {
        // A line end must leave `TAIL` bytes of input after it.
        let limit = input.len() - PlainRun::TAIL;
        let most = (limit - start).min(u32::MAX as usize - 64);
        // Outside CSV a quote is data; the backslash escapes. In CSV, an escape other than
        // the quote is left to the general path wherever it is.
        let (decide, quote) = if CSV {
            let escape = if self.escape == self.quote {
                self.stray
            } else {
                self.escape
            };
            ([escape, self.stray], self.quote)
        } else {
            ([b'\\', self.stray], self.delimiter)
        };
        let find = tokens::PlainBytes {
            delimiter: self.delimiter,
            newline: self.newline,
            quote,
            decide,
        };
        let mut at = 0usize;
        // CSV: all ones while inside quotes at the end of the last window; whether the last
        // window's last byte was a delimiter or line end (the run's start counts as one);
        // whether it was a closing quote.
        let mut inside: u64 = 0;
        let mut after_structural: u64 = 1;
        let mut after_close: u64 = 0;
        // A doubled quote inside quotes is a quote only where the escape is the quote.
        let doubled_quotes = self.escape == self.quote;
        let null_escapes = !CSV && self.null == b"\\N";
        while at < most {
            let window = &input[start + at..];
            #[cfg(target_arch = "x86_64")]
            let masks = if AVX2 {
                // SAFETY: `AVX2` is set only by `index_plain_avx2`, whose caller vouches
                // that the CPU has it.
                unsafe { tokens::plain_masks_avx2(window, find) }
            } else {
                tokens::plain_masks(window, find)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let masks = tokens::plain_masks(window, find);
            let (mut delims, mut lines, quotes, mut bad) = masks;
            if CSV {
                if quotes != 0 || inside != 0 || after_close != 0 {
                    let within = prefix_xor(quotes) ^ inside;
                    inside = ((within as i64) >> 63) as u64;
                    delims &= !within;
                    bad |= lines & within;
                    lines &= !within;
                    let structural = delims | lines;
                    let open = quotes & within;
                    let close = quotes & !within;
                    // A quote right after a closing one is the second of a doubled quote,
                    // which stays inside the field.
                    let follows_close = (close << 1) | after_close;
                    let doubled = if doubled_quotes {
                        open & follows_close
                    } else {
                        0
                    };
                    // A quote opens a field right after a delimiter or line end, and closes
                    // it right before one (or before a doubled quote); anything else is for
                    // the general path.
                    index.doubled_quotes |= doubled != 0;
                    bad |= open & !doubled & !((structural << 1) | after_structural);
                    bad |= follows_close & !structural & !doubled;
                    after_close = close >> 63;
                }
                after_structural = (delims | lines) >> 63;
            }
            if null_escapes && bad != 0 {
                let before = bad;
                bad = self.null_escapes(input, start, start + at, bad);
                index.null_escapes |= bad != before;
            }
            let window = (64.min(most - at)) as u32;
            let mut keep = if window == 64 {
                u64::MAX
            } else {
                (1u64 << window) - 1
            };
            if bad != 0 {
                keep &= (bad & bad.wrapping_neg()) - 1;
            }
            index.ends.reserve(64 + 16);
            index.lines.reserve(64 + 8);
            // SAFETY: room for 64 offsets and what `flatten` may write past them was
            // reserved just above for each array; the lengths set are what was written.
            unsafe {
                let n = flatten::<16>(
                    index.ends.as_mut_ptr(),
                    index.ends.len(),
                    at as u32,
                    (delims | lines) & keep,
                );
                index.ends.set_len(n);
                // No line end or one in most windows.
                let n = flatten::<1>(
                    index.lines.as_mut_ptr(),
                    index.lines.len(),
                    at as u32,
                    lines & keep,
                );
                index.lines.set_len(n);
            }
            at += 64;
            if keep != u64::MAX || (at >= BLOCK && !index.lines.is_empty()) {
                return at;
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{Dialect, Format};
    use crate::records::{Fields, Step};
    use crate::swar;

    /// Every record the index gives from `start` on, split for `columns` fields, up to the
    /// first it refuses: each one's values (`None` for a value it refuses) and its end.
    #[allow(clippy::type_complexity)]
    /// Collects a record's field spans.
    struct Spans(Vec<PlainSpan>);

    impl FieldVisitor<()> for Spans {
        fn field(&mut self, _: &(), span: PlainSpan) -> bool {
            self.0.push(span);
            true
        }
    }

    fn fast(
        p: &RecordParser,
        input: &[u8],
        start: usize,
        columns: usize,
    ) -> Vec<(Vec<Option<Vec<u8>>>, usize)> {
        let mut index = PlainIndex::new();
        // The AVX2 index, where the CPU has it, is the same index.
        #[cfg(target_arch = "x86_64")]
        let wide = std::is_x86_feature_detected!("avx2").then(|| {
            let mut wide = PlainIndex::new();
            // SAFETY: checked just above.
            unsafe { p.index_plain_avx2(input, start, &mut wide) };
            wide
        });
        let run = p.index_plain(input, start, &mut index);
        let mut got = Vec::new();
        let mut k = PlainRun::FIRST;
        for r in 0..run.len() {
            let Some(rec) = run.record(r, k, columns) else {
                break;
            };
            // The fields as the encoder walks them.
            let mut spans = Spans(Vec::new());
            assert!(rec.visit_fields(&vec![(); columns], &mut spans));
            let mut values = Vec::new();
            for field in spans.0 {
                let e = start + field.e;
                assert!(
                    input[e] == b'\n' || input[e] == p.delimiter,
                    "a field ends at a delimiter or the line end"
                );
                let value = match run.checks_values() {
                    true => run.value::<true>(field),
                    false => run.value::<false>(field),
                };
                values.push(value.map(|value| {
                    let (v, x) = (value.bytes, value.head());
                    let blocks = value.blocks48().map(u128::to_le_bytes).concat();
                    let n = v.len().min(48);
                    assert_eq!(&blocks[..n], &v[..n], "blocks of {v:?}");
                    let n = v.len().min(16);
                    assert_eq!(
                        x.to_le_bytes()[..n],
                        swar::head16(v, &[]).to_le_bytes()[..n],
                        "head of {v:?}"
                    );
                    if !value.escaped {
                        return v.to_vec();
                    }
                    assert!(p.format == Format::Csv && v.contains(&p.quote), "{v:?}");
                    let mut unescaped = Vec::new();
                    value.unescape(p.quote, &mut unescaped);
                    unescaped
                }));
            }
            got.push((values, rec.next));
            k = rec.following;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(wide) = wide {
            assert_eq!((&wide.ends, &wide.lines), (&index.ends, &index.lines));
        }
        got
    }

    /// Wherever the index takes a record, the general path gives the same fields and end,
    /// and refuses a field count the general path would not give; on every input of the
    /// general path's own tests, and more. Returns how many records the index took.
    fn fast_equals_general(d: &Dialect, input: &[u8]) -> usize {
        let p = RecordParser::new(d);
        let mut f = Fields::new();
        let mut taken = 0;
        let mut start = 0;
        while start < input.len() {
            // The records the general path gives from `start`, up to its first refusal.
            let mut general = Vec::new();
            let mut pos = start;
            while let Ok(Step::Record { end, .. }) = p.parse(input, pos, true, &mut f) {
                let values: Vec<Option<Vec<u8>>> = (0..f.len())
                    .map(|i| f.get(i, input).map(<[u8]>::to_vec))
                    .collect();
                general.push((values, end));
                pos = end;
                if pos >= input.len() {
                    break;
                }
            }
            let Some((first, first_end)) = general.first().cloned() else {
                assert!(
                    fast(&p, input, start, 1).is_empty(),
                    "fast took a refused record"
                );
                return taken;
            };
            let columns = first.len();
            for wrong in [columns.saturating_sub(1), columns + 1] {
                assert!(
                    fast(&p, input, start, wrong).is_empty(),
                    "fast split a {columns}-field record into {wrong}"
                );
            }
            let got = fast(&p, input, start, columns);
            assert!(got.len() <= general.len(), "fast took more records");
            for (i, (values, end)) in got.iter().enumerate() {
                let (want, want_end) = &general[i];
                if want.len() != columns {
                    panic!("fast took a record of {} fields as {columns}", want.len());
                }
                assert_eq!(end, want_end, "record {i} from {start}");
                // A value the index gives as NULL is NULL there too.
                assert_eq!(values, want, "record {i} from {start}");
            }
            taken += got.len();
            start = match got.len() {
                0 => first_end,
                n => got[n - 1].1,
            };
        }
        taken
    }

    #[test]
    fn index_agrees_with_the_general_path() {
        let cases: &[&[u8]] = &[
            b"1|a b|2.5|\n2||x|\n",
            b"a\\tb\t\\N\t\\\\N\t\\101\n",
            b"a\tb\nc\td\n\n\t\n",
            b"a\rb\tc\n",
            b"1,\"a,b\",,x\n2,ab,,\n,\n",
            b"1,\"abc\"\n\"x\",\"\",2\n\"a\"\"b\",c\n\"a\nb\",c\n\"q\"x,y\n",
            b"\\.\n1,2\n",
            b"x|y\r\n",
            b"1|\n1||\n1|2|\n1|2||\n|\n||\n",
        ];
        let (lines, letters) = (b"\n".repeat(70), b"z".repeat(70));
        let pad = [lines.as_slice(), letters.as_slice()];
        for format in [Format::Tbl, Format::Text, Format::Csv] {
            let d = Dialect::new(format);
            for &c in cases {
                for tail in pad {
                    fast_equals_general(&d, &[c, tail].concat());
                }
            }
            let mut long = Vec::new();
            for i in 0..3000 {
                long.extend_from_slice(format!("{i}|{}|{i}.5|\n", "w".repeat(i % 70)).as_bytes());
            }
            long.extend_from_slice(&[b'z'; PlainRun::TAIL]);
            let taken = fast_equals_general(&d, &long);
            if format == Format::Tbl {
                assert_eq!(taken, 3000, "every record, across many blocks");
            }
        }
        let d = Dialect::new(Format::Tbl);
        let p = RecordParser::new(&d);
        let input = [b"1|ab|2.5|\nnext".as_slice(), &[b'z'; PlainRun::TAIL]].concat();
        assert_eq!(
            fast(&p, &input, 0, 3),
            vec![(
                vec![
                    Some(b"1".to_vec()),
                    Some(b"ab".to_vec()),
                    Some(b"2.5".to_vec())
                ],
                10
            )],
            "so the comparison above is not vacuous"
        );
        let d = Dialect::new(Format::Csv);
        let p = RecordParser::new(&d);
        let input = [b"1,\"a,b\",x,\n".as_slice(), &[b'z'; PlainRun::TAIL]].concat();
        assert_eq!(
            fast(&p, &input, 0, 4),
            vec![(
                vec![
                    Some(b"1".to_vec()),
                    Some(b"a,b".to_vec()),
                    Some(b"x".to_vec()),
                    None
                ],
                11
            )],
            "a quoted field, and an empty one that is NULL"
        );
    }

    /// Text's `\\N` and CSV's doubled quotes stay on the index: the records are taken whole,
    /// with the general path's values (NULL and a single quote).
    #[test]
    fn null_escapes_and_doubled_quotes_stay_on_the_index() {
        let tail = [b'z'; PlainRun::TAIL];
        type Case<'a> = (Format, &'a [u8], Vec<Option<&'a [u8]>>);
        let cases: [Case; 3] = [
            (
                Format::Text,
                b"\\N\t1\n2\t\\N\n",
                vec![None, Some(b"1"), Some(b"2"), None],
            ),
            (
                Format::Csv,
                b"\"a\"\"b\",\"\"\"\"\n\"\",\"x\"\"\"\n",
                vec![Some(b"a\"b"), Some(b"\""), Some(b""), Some(b"x\"")],
            ),
            (
                Format::Tbl,
                b"\\N|1|\n2|\\N|\n",
                vec![None, Some(b"1"), Some(b"2"), None],
            ),
        ];
        for (format, records, want) in cases {
            let d = Dialect::new(format);
            let input = [records, &tail].concat();
            assert_eq!(fast_equals_general(&d, &input), 2, "{format:?}");
            let got: Vec<Option<Vec<u8>>> = fast(&RecordParser::new(&d), &input, 0, 2)
                .into_iter()
                .flat_map(|(values, _)| values)
                .collect();
            let want: Vec<Option<Vec<u8>>> =
                want.into_iter().map(|v| v.map(<[u8]>::to_vec)).collect();
            assert_eq!(got, want, "{format:?}");
        }
        // A backslash that is not a whole `\\N` still stops the index.
        let d = Dialect::new(Format::Text);
        for odd in [&b"\\Nx\t1\n"[..], b"x\\N\t1\n", b"\\\\N\t1\n"] {
            let input = [odd, &tail].concat();
            assert!(
                fast(&RecordParser::new(&d), &input, 0, 2).is_empty(),
                "{odd:?}"
            );
        }
    }

    /// After a record the caller took through the general path, the run goes on over the
    /// same index: no input is indexed twice.
    #[test]
    fn a_run_resumes_after_a_record_off_the_fast_path() {
        let d = Dialect::new(Format::Csv);
        let p = RecordParser::new(&d);
        let mut input = Vec::new();
        for i in 0..2000 {
            input.extend_from_slice(format!("{i},v{i}\n").as_bytes());
        }
        input.extend_from_slice(&[b'z'; PlainRun::TAIL]);
        let mut index = PlainIndex::new();
        let run = p.index_plain(&input, 0, &mut index);
        let (lines, first_next) = (run.len(), run.record(0, PlainRun::FIRST, 2).unwrap().next);
        assert!(lines > 100);
        // The caller took record 0 itself; the run goes on at record 1.
        let (r, k) = p.resume_plain(first_next, &mut index).unwrap();
        let run = p.indexed_run(&input, &index);
        assert_eq!((run.len(), r), (lines, 1));
        let third = run.record(r, k, 2).unwrap();
        assert_eq!(&input[third.start..third.next], b"1,v1\n");
        // Not at a record's end: index again.
        assert!(p.resume_plain(first_next + 1, &mut index).is_none());
        // At the run's start.
        assert_eq!(p.resume_plain(0, &mut index), Some((0, PlainRun::FIRST)));
        let work = index.work();
        assert_eq!((work.runs, work.resumed), (1, 2));
        assert!(
            work.bytes >= 16 << 10 && work.bytes < (16 << 10) + 128,
            "{work:?}"
        );
    }

    #[test]
    fn a_record_needs_a_tail_after_it() {
        let d = Dialect::new(Format::Tbl);
        let p = RecordParser::new(&d);
        let mut index = PlainIndex::new();
        let input = b"1|2|\n3|4|\n".repeat(8);
        // 80 bytes: the first record's line end (4) has 75 after it, the second's 70, the
        // third's 65, the fourth's 60.
        assert_eq!(PlainRun::TAIL, 64);
        assert_eq!(p.index_plain(&input, 0, &mut index).len(), 3);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        #[test]
        fn index_agrees_on_generated_input(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::prelude::Just(b'a'),
                    3 => proptest::prelude::Just(b'|'),
                    3 => proptest::prelude::Just(b','),
                    3 => proptest::prelude::Just(b'\t'),
                    2 => proptest::prelude::Just(b'\n'),
                    1 => proptest::prelude::Just(b'\\'),
                    1 => proptest::prelude::Just(b'"'),
                    1 => proptest::prelude::Just(b'\r'),
                    1 => proptest::prelude::Just(b'N'),
                ],
                0..300,
            ),
        ) {
            for format in [Format::Tbl, Format::Text, Format::Csv] {
                fast_equals_general(&Dialect::new(format), &bytes);
            }
        }
    }
}
