//! `--wire auto`: which encoding each table's rows travel in.
//!
//! The client validates and converts every row either way; what differs is who pays where.
//! The destination's binary form is the least work for the server, and the biggest on the wire
//! for most tables (a length before every field, fixed-width numbers). Text lines are about
//! the input's size, and the server parses them: the first destination's server stores about
//! 0.8 as many rows a second from text as from binary (the probe's rows on the test machine). So binary is right
//! wherever the server or the client is the limit, and the smaller encoding where the link is:
//! on a thin or long path, the binary form of TPC-H `lineitem` is 1.6 times the text's bytes.
//!
//! The choice is made once, before the load, in steps that each cost more than the last and
//! stop as soon as the answer is clear:
//! 1. **Sizes.** The first thousand records of each table's first file, encoded both ways. A
//!    table whose binary is not clearly bigger stays binary.
//! 2. **Here or there.** A server on this machine has no link in front of it: binary.
//! 3. **The link.** What the path carries on the load's number of connections, for thirty round
//!    trips (within [`MIN_MEASURE`]..[`MAX_MEASURE`]), or until it has carried the bytes text
//!    would save (binary's extra bytes for the input left): a path that sends those sooner
//!    than the measurement ends would take longer to measure than to send them, so binary,
//!    and a small load across a long path does not wait out the whole measurement. A short
//!    round trip says nothing of a link's rate (a capped cloud link answers in a tenth of a
//!    millisecond), so any server on another machine is measured. If text would save less
//!    than measuring the server costs, even with the link the limit, binary.
//! 4. **The server.** What it stores of rows that do not cross the link (made on its side,
//!    counted as binary rows). Each encoding's rate is the slower of the link's (its bytes)
//!    and the server's (slower from text); text only when it is clearly the faster.

use crate::plan::{Chunk, InputSource, Plan};
use sluice_core::destination::{Destination, Wire};
use std::time::Duration;

/// Records sampled per table for the sizes.
const SAMPLED_RECORDS: u64 = 1000;
/// Text must be this much smaller than binary for the choice to matter.
const CLEARLY_SMALLER: f64 = 0.9;
/// Input below this goes binary without measuring the path.
const WORTH_MEASURING: u64 = 8 << 20;
/// Each of the path's measurements lasts thirty round trips, within these bounds (s).
pub const MIN_MEASURE: f64 = 0.45;
pub const MAX_MEASURE: f64 = 3.0;
/// The rows a second the server stores from text, as a share of what it stores from binary.
const TEXT_SERVER_SHARE: f64 = 0.75;
/// Text must be this much faster than binary to be chosen.
const TEXT_MARGIN: f64 = 1.1;

/// What `--wire auto` chose, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct WireChoice {
    /// Tables switched to text.
    pub text: Vec<usize>,
    /// Why, in a sentence with the figures.
    pub why: String,
}

/// One table's encodings' sizes, bytes per input byte, and the input left to load.
struct Sizes {
    table: usize,
    binary: f64,
    text: f64,
    input: u64,
}

/// What a dry run says of `--wire auto`, when some table could go either way: it measures
/// nothing, so it encodes binary, and a real load may send text.
pub fn dry_run_note<D: Destination>(plan: &Plan, dest: &D) -> Option<WireChoice> {
    (0..plan.tables.len())
        .any(|t| dest.wire_choice(t))
        .then(|| WireChoice {
            text: vec![],
            why: "binary in a dry run, which measures no path: a load may send text where the \
                  link is the limit"
                .into(),
        })
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
    let input: u64 = smaller.iter().map(|s| s.input).sum();
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
    let figures = match by_the_path(dest, jobs, rtt, &smaller, input) {
        Ok(figures) => figures,
        Err(why) => return binary(why),
    };
    for s in &smaller {
        dest.set_wire(s.table, Wire::Text);
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
        text: smaller.iter().map(|s| s.table).collect(),
        why: format!(
            "text: {figures}: the link is the limit, and text is the smaller encoding ({} the \
             bytes of binary)",
            ratios.join(", ")
        ),
    })
}

/// Measures the link, and the server where text could save more than that costs, and
/// compares each encoding's rate for the tables whose text is the smaller (`input` bytes of
/// them): the figures when text is clearly the faster, else why binary.
fn by_the_path<D: Destination>(
    dest: &D,
    jobs: usize,
    rtt: Duration,
    smaller: &[Sizes],
    input: u64,
) -> Result<String, String> {
    let seconds = (rtt.as_secs_f64() * 30.0).clamp(MIN_MEASURE, MAX_MEASURE);
    // The sizes, weighted by each table's input: bytes sent per input byte.
    let per_input = |f: fn(&Sizes) -> f64| {
        smaller.iter().map(|s| f(s) * s.input as f64).sum::<f64>() / input as f64
    };
    let (g_bin, g_txt) = (per_input(|s| s.binary), per_input(|s| s.text));
    // The most text could save is the bytes binary adds: once the measurement has sent that
    // much, the path has shown it sends them in less time than measuring it takes.
    let saved = (input as f64 * (g_bin - g_txt)) as u64;
    let link = dest
        .measure_link(jobs, seconds, saved)
        .map_err(|e| format!("binary: the path could not be measured ({e})"))?
        .ok_or_else(|| {
            format!(
                "binary: on {jobs} connection(s) the path carried the {} that text would save \
                 in less than the measurement's {seconds:.1} s (round trip {:.0} ms): sending \
                 them costs less than measuring on",
                crate::units::human_bytes(saved),
                rtt.as_secs_f64() * 1e3
            )
        })?
        .max(1.0);
    let at_most = input as f64 * (g_bin - g_txt) / link;
    let costs = seconds + 10.0 * rtt.as_secs_f64();
    let on_link = format!(
        "on {jobs} connection(s) the path carried {:.1} MB/s (round trip {:.0} ms)",
        link / 1e6,
        rtt.as_secs_f64() * 1e3
    );
    if at_most < 2.0 * costs {
        return Err(format!(
            "binary: {on_link}: text would save at most {at_most:.1} s, less than measuring \
             the server costs"
        ));
    }
    let server = dest
        .measure_server(jobs, seconds)
        .map_err(|e| format!("binary: the server could not be measured ({e})"))?
        .max(1.0);
    // Input bytes a second each way: the slower of the link (its bytes) and the server.
    let by_binary = link.min(server) / g_bin;
    let by_text = (link / g_txt).min(TEXT_SERVER_SHARE * server / g_bin);
    let figures = format!(
        "{on_link}, the server stores {:.1} MB/s of binary rows: binary would move {:.1} MB/s \
         of input, text {:.1} MB/s",
        server / 1e6,
        by_binary / 1e6,
        by_text / 1e6
    );
    match by_text >= TEXT_MARGIN * by_binary {
        true => Ok(figures),
        false => Err(format!("binary: {figures}")),
    }
}

/// The table's encodings' sizes from the first records of its first file (read again from
/// its start, whatever an earlier run of the job loaded), and the input it has left to load;
/// none when it has no file to sample (standard input is read once).
fn sizes<D: Destination>(plan: &Plan, dest: &D, t: usize) -> Option<Sizes> {
    let first = plan
        .inputs
        .iter()
        .position(|i| i.table == t && matches!(i.source, InputSource::File(_)))?;
    let head = Chunk {
        id: 0,
        input: first,
        start: 0,
        end: None,
    };
    let grow = |wire| {
        let mut encoder = dest.encoder_in(t, wire);
        crate::chunk::encoded_growth(plan, &head, &mut encoder, SAMPLED_RECORDS)
    };
    let input = plan
        .chunks
        .iter()
        .filter(|c| plan.inputs[c.input].table == t)
        .map(|c| c.weight(&plan.inputs))
        .sum();
    Some(Sizes {
        table: t,
        binary: grow(Wire::Binary)?,
        text: grow(Wire::Text)?,
        input,
    })
}
