//! Where a record is in its whole input, for messages: chunks count lines from their own
//! start, so on the error path (never on the hot path) the lines before a chunk are counted
//! by reading the input again.

use crate::plan::{Chunk, Plan};
use crate::source;
use sluice_core::error::InputError;
use std::io::Read;

/// Turns a chunk-relative line into a line of the whole file by counting line ends before the
/// chunk (only on the error path).
pub(crate) fn absolute_line(plan: &Plan, chunk: &Chunk, err: &mut InputError) {
    let (Some(line), true) = (err.line, chunk.start > 0) else {
        return;
    };
    if let Some(Some(at)) = lines_at(plan, chunk.input, &[chunk.start]).first() {
        err.line = Some(line + at - 1);
    }
}

/// The 1-based line on which each of `offsets` (ascending) of input `input` falls, counting
/// line ends in one read of the input up to the last offset (only on the error path). `None`
/// where the input cannot be read again (standard input).
pub(crate) fn lines_at(plan: &Plan, input: usize, offsets: &[u64]) -> Vec<Option<u64>> {
    let source = &plan.inputs[input];
    let head = Chunk {
        id: 0,
        input,
        start: 0,
        end: Some(offsets.last().copied().unwrap_or(0)),
    };
    let Ok(mut reader) = source::open_chunk(source, &head) else {
        return vec![None; offsets.len()];
    };
    let nl = source.dialect.line_ending.terminator();
    let mut out = Vec::with_capacity(offsets.len());
    let mut buf = vec![0u8; 1 << 20];
    let (mut pos, mut lines) = (0u64, 1u64);
    while out.len() < offsets.len() {
        let k = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        let block = &buf[..k];
        let mut from = 0usize;
        while let Some(&want) = offsets.get(out.len()).filter(|&&o| o < pos + k as u64) {
            let upto = (want - pos) as usize;
            lines += memchr::memchr_iter(nl, &block[from..upto]).count() as u64;
            from = upto;
            out.push(Some(lines));
        }
        lines += memchr::memchr_iter(nl, &block[from..]).count() as u64;
        pos += k as u64;
    }
    // Offsets at the very end of what was read (or past it): the line so far.
    out.resize(offsets.len(), Some(lines));
    out
}
