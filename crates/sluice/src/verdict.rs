//! The bottleneck verdict: one line that says what bound a load, the figures behind it, and
//! what to try next.
//!
//! The record's team found its bottlenecks with tools (a network preflight, TCP flow
//! analysis, a hunt for "long tail" streams); ESnet's GridFTP says whether a transfer is bound
//! by the disk, the network or the other side. sluice has both sides' view of every load: each
//! stream times its stages (reading, converting, waiting to send, waiting on the server), and
//! the destination samples what the load's server sessions were doing (waiting for sluice, on
//! CPU, writing WAL, on disk, on a lock). The rules below turn the two into a verdict; they
//! are written down in the README, and each is forced by a test with conditions ten times
//! apart.
//!
//! A pure function of the plan and the outcome, so that it can be tested on made-up figures.

use crate::load::plan::{Compression, InputSource, Plan};
use crate::load::RunOutcome;
use serde::Serialize;
use sluice_core::destination::Activity;
use std::collections::BTreeMap;

/// Loads shorter than this are not judged: a handful of samples says nothing.
const MIN_SECONDS: f64 = 0.5;
/// Fewer server samples than this, and the verdict rests on the streams' timings alone.
const MIN_SAMPLES: u64 = 5;
/// A stream that ends this much after the median stream (ratio of end times) and at least
/// [`TAIL_SECONDS`] later is a long tail.
const TAIL_RATIO: f64 = 1.5;
const TAIL_SECONDS: f64 = 1.0;
/// The share of server samples that decides between the client's side and the server's.
const CLIENT_SIDE: f64 = 0.5;

/// What bound a load.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `client-bound`, `disk-read-bound`, `server-bound`, `WAL-bound`, `disk-write-bound`,
    /// `lock-bound` or `long-tail`.
    pub kind: &'static str,
    /// What the figures say, in a sentence.
    pub because: String,
    /// What to try.
    pub next_step: String,
    /// The figures: shares of the server's samples (`server_*`) and of the streams' time
    /// (`stream_*`), from 0 to 1, and for a long tail the end times in seconds.
    pub figures: BTreeMap<&'static str, f64>,
}

impl Verdict {
    /// The summary's line.
    pub fn line(&self) -> String {
        format!("{}: {}; {}", self.kind, self.because, self.next_step)
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Judges a load, or `None` when it was too short (or sent nothing) to judge.
pub fn judge(plan: &Plan, outcome: &RunOutcome, jobs: usize, cores: usize) -> Option<Verdict> {
    let elapsed = outcome.elapsed.as_secs_f64();
    let streams: Vec<_> = outcome
        .streams
        .iter()
        .filter(|s| !s.chunks.is_empty())
        .collect();
    if elapsed < MIN_SECONDS || streams.is_empty() {
        return None;
    }
    let mut figures: BTreeMap<&'static str, f64> = BTreeMap::new();
    // The streams' side.
    let t = streams.iter().fold([0.0; 4], |a, s| {
        let x = &s.timing;
        [
            a[0] + x.read_seconds,
            a[1] + x.convert_seconds,
            a[2] + x.send_seconds,
            a[3] + x.server_seconds,
        ]
    });
    let total: f64 = t.iter().sum::<f64>().max(1e-9);
    let (read, convert, send, server) = (t[0] / total, t[1] / total, t[2] / total, t[3] / total);
    figures.insert("stream_read", read);
    figures.insert("stream_convert", convert);
    figures.insert("stream_send", send);
    figures.insert("stream_server", server);
    // The server's side.
    let w = &outcome.server_waits;
    let sampled = w.samples >= MIN_SAMPLES;
    let share = |a: Activity| if sampled { w.share(a) } else { 0.0 };
    let waiting = share(Activity::WaitingForClient);
    if sampled {
        figures.insert("server_samples", w.samples as f64);
        figures.insert("server_waiting_for_client", waiting);
        figures.insert("server_cpu", share(Activity::Cpu));
        figures.insert("server_wal", share(Activity::Wal));
        figures.insert("server_disk_io", share(Activity::DiskIo));
        figures.insert("server_lock", share(Activity::Lock));
        figures.insert("server_other", share(Activity::Other));
    }

    // 1. A long tail: one stream still loading long after the others finished.
    if streams.len() >= 2 {
        let mut ends: Vec<(f64, usize)> = streams
            .iter()
            .map(|s| (s.chunks.iter().map(|c| c.end).fold(0.0, f64::max), s.stream))
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let median = ends[(ends.len() - 1) / 2].0;
        let (last, who) = ends[ends.len() - 1];
        if last - median >= TAIL_SECONDS && last >= TAIL_RATIO * median {
            figures.insert("tail_stream_end_seconds", last);
            figures.insert("median_stream_end_seconds", median);
            let tail = streams.iter().find(|s| s.stream == who)?;
            let chunk = tail
                .chunks
                .iter()
                .max_by(|a, b| (a.end - a.start).total_cmp(&(b.end - b.start)))?;
            let c = &plan.chunks[chunk.chunk];
            let input = &plan.inputs[c.input];
            let whole = c.start == 0 && c.end.is_none();
            let uncut = whole && plan.chunks.iter().filter(|k| k.input == c.input).count() == 1;
            let next_step = match (input.compression, &input.source, uncut) {
                (Compression::None, InputSource::File(_), _) => format!(
                    "its chunks were too big for {jobs} streams: a smaller --chunk-size (this \
                     load's was {}) spreads the work evenly",
                    crate::progress::human_bytes(plan.chunk_size)
                ),
                (_, InputSource::File(_), true) => "a compressed file cannot be cut into \
                     chunks: split it into several files, or give it uncompressed"
                    .to_string(),
                _ => "standard input is read by one stream: give files instead".to_string(),
            };
            return Some(Verdict {
                kind: "long-tail",
                because: format!(
                    "stream {} ended {:.1} s after the start, {} the median stream \
                     ({:.2} s); its longest chunk, {} ({}), took {:.1} s",
                    who + 1,
                    last,
                    match last / median.max(1e-9) {
                        r if r >= 3.0 => format!("{r:.0} times as late as"),
                        r => format!("{} after", pct(r - 1.0)),
                    },
                    median,
                    input.display,
                    crate::progress::human_bytes(chunk.bytes),
                    chunk.end - chunk.start
                ),
                next_step,
                figures,
            });
        }
    }

    // 2. Which side waited on which.
    let client_side = if sampled {
        waiting >= CLIENT_SIDE
    } else {
        read + convert >= send + server
    };
    let seen = if sampled {
        format!(
            "the server waited for sluice {} of the time and was busy {}",
            pct(waiting),
            pct(1.0 - waiting)
        )
    } else {
        format!(
            "streams spent {} waiting on the server or its socket (too few server samples \
             to say more)",
            pct(send + server)
        )
    };
    if client_side {
        let stdin = plan
            .inputs
            .iter()
            .any(|i| matches!(i.source, InputSource::Stdin));
        if read >= convert {
            let compressed = plan
                .inputs
                .iter()
                .any(|i| i.compression != Compression::None);
            let (kind, what, next) = match (stdin, compressed) {
                (true, _) => (
                    "client-bound",
                    "waiting for standard input",
                    "whatever feeds it is the limit; files let sluice read in parallel",
                ),
                (false, true) => (
                    "disk-read-bound",
                    "reading and decompressing the inputs",
                    "decompression runs one thread per compressed file: several smaller \
                     files, or uncompressed ones, read in parallel",
                ),
                (false, false) => (
                    "disk-read-bound",
                    "reading the inputs",
                    "the input's disk is the limit: inputs on a faster disk, or in the page \
                     cache",
                ),
            };
            return Some(Verdict {
                kind,
                because: format!("streams spent {} {what}; {seen}", pct(read)),
                next_step: next.to_string(),
                figures,
            });
        }
        let next_step = if jobs < cores {
            format!("add --jobs ({jobs} now, {cores} cores here)")
        } else {
            format!(
                "every core converts already ({jobs} streams, {cores} cores): a client with \
                 more cores, or the server on another machine"
            )
        };
        return Some(Verdict {
            kind: "client-bound",
            because: format!("streams spent {} converting; {seen}", pct(convert)),
            next_step,
            figures,
        });
    }
    // The server was the limit: by what it did most while busy.
    let top = |a: Activity| {
        w.activities
            .iter()
            .find(|(c, _, _)| *c == a && a != Activity::Cpu)
            .map_or(String::new(), |(_, e, _)| format!(" (mostly {e})"))
    };
    let busy = [
        (Activity::Cpu, "on CPU"),
        (Activity::Wal, "writing the write-ahead log"),
        (Activity::DiskIo, "on its data files"),
        (Activity::Lock, "waiting on locks"),
        (Activity::Other, "on other waits"),
    ];
    let main = busy
        .iter()
        .copied()
        .max_by(|a, b| share(a.0).total_cmp(&share(b.0)))
        .filter(|_| sampled);
    let detail = |skip: Activity| -> String {
        let parts: Vec<String> = busy
            .iter()
            .filter(|(a, _)| *a != skip && share(*a) >= 0.1)
            .map(|(a, what)| format!("{what} {}{}", pct(share(*a)), top(*a)))
            .collect();
        match parts.is_empty() {
            true => String::new(),
            false => format!("; also {}", parts.join(", ")),
        }
    };
    let mut because = match main {
        Some((a, what)) => format!("{seen}: {what} {}{}{}", pct(share(a)), top(a), detail(a)),
        None => seen.clone(),
    };
    let wal_segments = w
        .activities
        .iter()
        .find(|(c, _, _)| *c == Activity::Wal)
        .is_some_and(|(_, e, _)| e.starts_with("WALInit"));
    let (kind, next_step) = match main.map(|m| m.0) {
        Some(Activity::Lock) => (
            "lock-bound",
            "another session holds the tables' locks, or the streams contend on one table \
             (`extend` is the lock for growing a table): fewer --jobs, or load when it is quiet",
        ),
        Some(Activity::Wal) if wal_segments => (
            "WAL-bound",
            "the server is creating new WAL segments: a larger min_wal_size lets it recycle \
             them (and wal_init_zero = off on copy-on-write filesystems); the stage strategy \
             writes almost no WAL under wal_level = minimal",
        ),
        Some(Activity::Wal) => (
            "WAL-bound",
            "the stage strategy writes almost no WAL into new staging tables under wal_level = \
             minimal; else a faster WAL disk, or wal_compression",
        ),
        Some(Activity::DiskIo) => (
            "disk-write-bound",
            "the server's disk is the limit: faster storage, or fewer indexes during the load \
             (build them after)",
        ),
        _ if cores <= 2 => (
            "server-bound",
            "with the cores shared by client and server, fewer client cycles leave more to the \
             server; triggers, checks and indexes cost it most",
        ),
        _ => (
            "server-bound",
            "more --jobs help only while the server has idle cores; triggers, checks and \
             indexes cost it most",
        ),
    };
    if kind == "server-bound" {
        because.push_str(", so more client speed would not help");
    }
    let next_step = next_step.to_string();
    Some(Verdict {
        kind,
        because,
        next_step,
        figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::load::LoadArgs;
    use crate::load::{ChunkStat, StreamStats, StreamTiming};
    use sluice_core::destination::ServerWaits;
    use std::time::Duration;

    /// A plan of one plain file cut into chunks of 16 MB or so, and an outcome of `streams`
    /// streams that each ran one chunk, ending at the given times, with `timing` each.
    fn load(ends: &[f64], timing: StreamTiming, waits: ServerWaits) -> (Plan, RunOutcome) {
        let dir = std::env::temp_dir().join(format!("sluice-verdict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.csv");
        std::fs::write(&f, "x,y\n".repeat(1000)).unwrap();
        let args = LoadArgs {
            files: vec![f.to_str().unwrap().to_string()],
            ..LoadArgs::defaults()
        };
        let described = vec![crate::load::plan::tests::table("t")];
        let plan = crate::load::plan::build(&args, &["t".to_string()], &described, None).unwrap();
        let streams = ends
            .iter()
            .enumerate()
            .map(|(n, &end)| StreamStats {
                stream: n,
                chunks: vec![ChunkStat {
                    chunk: 0,
                    end,
                    bytes: 4000,
                    ..Default::default()
                }],
                seconds: end,
                timing,
                ..Default::default()
            })
            .collect();
        let outcome = RunOutcome {
            streams,
            elapsed: Duration::from_secs_f64(ends.iter().copied().fold(0.0, f64::max)),
            server_conversions: 0,
            strategy: "direct",
            server_waits: waits,
            calibration: None,
        };
        (plan, outcome)
    }

    fn waits(of: &[(Activity, &str, u64)]) -> ServerWaits {
        ServerWaits {
            samples: of.iter().map(|x| x.2).sum(),
            activities: of.iter().map(|(a, e, n)| (*a, e.to_string(), *n)).collect(),
            series: Vec::new(),
        }
    }

    const SENDING: StreamTiming = StreamTiming {
        read_seconds: 0.1,
        convert_seconds: 1.0,
        send_seconds: 8.0,
        server_seconds: 0.5,
    };

    #[test]
    fn the_servers_largest_activity_names_the_verdict() {
        let w = waits(&[
            (Activity::Wal, "WALInitWrite", 40),
            (Activity::Cpu, "CPU", 30),
            (Activity::WaitingForClient, "ClientRead", 5),
        ]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 2).unwrap();
        assert_eq!(v.kind, "WAL-bound", "{v:?}");
        assert!(v.because.contains("mostly WALInitWrite"), "{}", v.because);
        assert!(v.because.contains("also on CPU 40%"), "{}", v.because);
        assert!(v.next_step.contains("min_wal_size"), "{}", v.next_step);
        let w = waits(&[(Activity::Lock, "extend", 40), (Activity::Cpu, "CPU", 30)]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        assert_eq!(judge(&plan, &out, 2, 2).unwrap().kind, "lock-bound");
        let w = waits(&[(Activity::Cpu, "CPU", 40), (Activity::Wal, "WALWrite", 30)]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 8).unwrap();
        assert_eq!(v.kind, "server-bound");
        assert!(v.next_step.contains("idle cores"), "{}", v.next_step);
    }

    #[test]
    fn without_server_samples_the_streams_timings_decide() {
        let (plan, out) = load(&[10.0, 10.1], SENDING, waits(&[(Activity::Cpu, "CPU", 2)]));
        let v = judge(&plan, &out, 2, 2).unwrap();
        assert_eq!(v.kind, "server-bound");
        assert!(
            v.because.contains("too few server samples"),
            "{}",
            v.because
        );
        let converting = StreamTiming {
            convert_seconds: 9.0,
            send_seconds: 0.5,
            ..SENDING
        };
        let (plan, out) = load(&[10.0, 10.1], converting, ServerWaits::default());
        let v = judge(&plan, &out, 2, 4).unwrap();
        assert_eq!(v.kind, "client-bound");
        assert!(
            v.next_step.contains("add --jobs (2 now, 4 cores here)"),
            "{}",
            v.next_step
        );
    }

    #[test]
    fn a_late_stream_is_a_long_tail_and_short_loads_are_not_judged() {
        let (plan, out) = load(&[2.0, 2.1, 9.0], SENDING, ServerWaits::default());
        let v = judge(&plan, &out, 3, 4).unwrap();
        assert_eq!(v.kind, "long-tail");
        assert!(
            v.because.starts_with("stream 3 ended 9.0 s"),
            "{}",
            v.because
        );
        assert!(
            v.next_step.contains("smaller --chunk-size"),
            "{}",
            v.next_step
        );
        // Within a second of the median: not a tail, however the ratio.
        let (plan, out) = load(&[0.6, 1.5], SENDING, ServerWaits::default());
        assert_ne!(judge(&plan, &out, 2, 2).unwrap().kind, "long-tail");
        let (plan, out) = load(&[0.2, 0.3], SENDING, ServerWaits::default());
        assert_eq!(judge(&plan, &out, 2, 2), None);
    }
}
