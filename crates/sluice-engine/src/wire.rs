//! `--wire auto`: which encoding each table's rows travel in.
//!
//! The client validates and converts every row either way; what differs is who pays where.
//! The destination's binary form is the least work for the server, and the biggest on the wire
//! for most tables (a length before every field, fixed-width numbers). Text lines are about
//! the input's size, and the server parses them. So binary is right wherever the server or the
//! client is the limit, and the smaller encoding where the link is: on a thin or long path,
//! binary COPY of TPC-H `lineitem` sends 1.6 times the bytes text does.
//!
//! The choice is made once, before the load, from two measurements:
//! - **Sizes.** The first thousand records of each table's first file, encoded both ways. A
//!   table whose binary is not clearly bigger stays binary.
//! - **The path.** Unless the server is on this machine: what the path carries on the load's
//!   streams against what the server stores on as many of rows that do not cross it (made by
//!   the server itself, counted as binary rows), each for a few dozen round trips. The link
//!   is the limit when it carries less. A short round trip says nothing of the link's rate (a
//!   capped cloud link answers in a tenth of a millisecond), so it is measured whatever it is.
//!
//! Small inputs are not worth the measurement (a few seconds on a long path) and go binary.

use crate::plan::{InputSource, Plan};
use sluice_core::destination::{Destination, Wire};

/// Records sampled per table for the sizes.
const SAMPLED_RECORDS: u64 = 1000;
/// Text must be this much smaller than binary for the choice to matter.
const CLEARLY_SMALLER: f64 = 0.9;
/// A table's input below this goes binary without measuring the path.
const WORTH_MEASURING: u64 = 8 << 20;
/// Each of the path's two measurements lasts thirty round trips, within these bounds (s).
const MIN_MEASURE: f64 = 0.45;
const MAX_MEASURE: f64 = 3.0;
/// The link is the limit when it carries less than this share of what the server stores.
const LINK_SHARE: f64 = 0.9;

/// What `--wire auto` chose, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct WireChoice {
    /// Tables switched to text.
    pub text: Vec<usize>,
    /// Why, in a sentence with the figures.
    pub why: String,
}

/// One table's encodings' sizes, bytes per input byte.
struct Sizes {
    table: usize,
    binary: f64,
    text: f64,
}

/// Chooses each table's encoding under `--wire auto` and tells the destination; `None` when
/// no table could go either way.
pub fn choose<D: Destination>(plan: &Plan, dest: &mut D, jobs: usize) -> Option<WireChoice> {
    let choosable: Vec<usize> = (0..plan.tables.len())
        .filter(|&t| dest.wire_choice(t))
        .collect();
    if choosable.is_empty() {
        return None;
    }
    let smaller: Vec<Sizes> = choosable
        .iter()
        .filter_map(|&t| sizes(plan, &*dest, t))
        .filter(|s| s.text < CLEARLY_SMALLER * s.binary)
        .collect();
    let binary = |why: String| Some(WireChoice { text: vec![], why });
    if smaller.is_empty() {
        return binary("binary: text is not clearly smaller for any table".into());
    }
    let input: u64 = smaller.iter().map(|s| table_bytes(plan, s.table)).sum();
    if input < WORTH_MEASURING {
        return binary(format!(
            "binary: {} of input is too little to be worth measuring the path",
            crate::units::human_bytes(input)
        ));
    }
    if dest.server_is_local() {
        return binary("binary: the server is on this machine, no link is the limit".into());
    }
    let Some(rtt) = dest.server_round_trip() else {
        return binary("binary: the server's round trip could not be measured".into());
    };
    let seconds = (rtt.as_secs_f64() * 30.0).clamp(MIN_MEASURE, MAX_MEASURE);
    let (link, server) = match dest.measure_path(jobs, seconds) {
        Ok(rates) => rates,
        Err(e) => return binary(format!("binary: the path could not be measured ({e})")),
    };
    let figures = format!(
        "on {jobs} stream(s) the path carried {:.1} MB/s where the server stores {:.1} MB/s of \
         binary rows (round trip {:.0} ms)",
        link / 1e6,
        server / 1e6,
        rtt.as_secs_f64() * 1e3
    );
    if link >= LINK_SHARE * server {
        return binary(format!(
            "binary: {figures}: the server or the client is the limit"
        ));
    }
    let text: Vec<usize> = smaller.iter().map(|s| s.table).collect();
    for &t in &text {
        dest.set_wire(t, Wire::Text);
    }
    let ratios: Vec<String> = smaller
        .iter()
        .map(|s| {
            format!(
                "{} {:.2}x",
                plan.tables[s.table].table.name,
                s.text / s.binary
            )
        })
        .collect();
    Some(WireChoice {
        text,
        why: format!(
            "text: {figures}: the link is the limit, and text is the smaller encoding ({} the \
             bytes of binary)",
            ratios.join(", ")
        ),
    })
}

/// The table's encodings' sizes from the first records of its first file; none when it has
/// no file to sample (standard input is read once).
fn sizes<D: Destination>(plan: &Plan, dest: &D, t: usize) -> Option<Sizes> {
    let first = plan.chunks.iter().find(|c| {
        let input = &plan.inputs[c.input];
        c.is_first() && input.table == t && matches!(input.source, InputSource::File(_))
    })?;
    let grow = |wire| {
        let mut encoder = dest.encoder_in(t, wire);
        crate::chunk::encoded_growth(plan, first, &mut encoder, SAMPLED_RECORDS)
    };
    Some(Sizes {
        table: t,
        binary: grow(Wire::Binary)?,
        text: grow(Wire::Text)?,
    })
}

/// The bytes of a table's inputs (on disk; standard input counts nothing).
fn table_bytes(plan: &Plan, t: usize) -> u64 {
    plan.inputs
        .iter()
        .filter(|i| i.table == t)
        .map(|i| i.size)
        .sum()
}
