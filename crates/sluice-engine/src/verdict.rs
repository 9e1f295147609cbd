//! The bottleneck verdict: one line that says what bound a load, the figures behind it, and
//! what to try next.
//!
//! The record's team found its bottlenecks with tools (a network preflight, TCP flow
//! analysis, a hunt for "long tail" streams); ESnet's GridFTP says whether a transfer is bound
//! by the disk, the network or the other side. sluice has both sides' view of every load: each
//! stream times its stages (reading, converting, waiting to send, waiting on the server), and
//! the destination samples what the load's server sessions were doing (waiting for sluice, on
//! CPU, writing its log, on disk, on a lock). The rules below turn the two into a verdict;
//! they are written down in the README, and each is forced by a test with conditions ten
//! times apart.
//!
//! The engine's words are database-neutral. What a class is called on one database (its log
//! has its own name on some), and what to do about it there (its settings, its wait events),
//! the destination says through an [`Advisor`]; the advice names an index, a trigger or a
//! check only when a loaded table has one ([`TableCosts`]).
//!
//! A pure function of the plan, the outcome and the advisor, so that it can be tested on
//! made-up figures.

use crate::plan::{Compression, InputSource, Plan};
use crate::run::{RunOutcome, StreamStats};
use serde::Serialize;
use sluice_core::destination::{Activity, Destination, ServerWaits, TableCosts, Transport};
use std::collections::BTreeMap;

/// Loads shorter than this are not judged: a handful of samples says nothing.
const MIN_SECONDS: f64 = 0.5;
/// Fewer server samples than this, and the verdict rests on the streams' timings alone.
const MIN_SAMPLES: u64 = 5;
/// A stream that ends this much after the median stream (ratio of end times) and at least
/// [`TAIL_SECONDS`] later is a long tail.
const TAIL_RATIO: f64 = 1.5;
const TAIL_SECONDS: f64 = 1.0;
/// ...and its longest chunk took at least this share of its lag behind the median.
const TAIL_CHUNK_SHARE: f64 = 0.5;
/// The share of server samples that decides between the client's side and the server's.
const CLIENT_SIDE: f64 = 0.5;

/// What bound a load.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `client-bound`, `disk-read-bound`, `link-bound`, `window-bound`, `round-trip-bound`,
    /// `server-bound`,
    /// `log-bound` (named as the destination names its log), `disk-write-bound`, `lock-bound`
    /// or `long-tail`.
    pub kind: String,
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

/// What the verdict asks of the destination: its names for the activity classes, its
/// advice, and what the loaded tables carry. Every [`Destination`] is one.
pub trait Advisor {
    /// The destination's own name for a class, if its users know one.
    fn label(&self, _class: Activity) -> Option<&'static str> {
        None
    }

    /// How the verdict says the server was busy in a class, where the engine's words would
    /// claim more than the database shows.
    fn words(&self, _class: Activity) -> Option<&'static str> {
        None
    }

    /// The next step for a server busiest in `class`, in the database's terms.
    fn advice(
        &self,
        _class: Activity,
        _waits: &ServerWaits,
        _costs: &TableCosts,
    ) -> Option<String> {
        None
    }

    /// The indexes, triggers and checks of the loaded tables.
    fn costs(&self) -> TableCosts {
        TableCosts::default()
    }
}

impl<D: Destination> Advisor for D {
    fn label(&self, class: Activity) -> Option<&'static str> {
        self.activity_label(class)
    }

    fn words(&self, class: Activity) -> Option<&'static str> {
        self.activity_words(class)
    }

    fn advice(&self, class: Activity, waits: &ServerWaits, costs: &TableCosts) -> Option<String> {
        Destination::advice(self, class, waits, costs)
    }

    fn costs(&self) -> TableCosts {
        self.table_costs()
    }
}

/// An advisor with nothing to add: the engine's own words.
pub struct Plain;

impl Advisor for Plain {}

/// The figures both sides give, as shares from 0 to 1.
struct Shares {
    read: f64,
    convert: f64,
    send: f64,
    server: f64,
    /// Whether the server was sampled often enough to count.
    sampled: bool,
    waiting: f64,
}

impl Shares {
    /// The streams' time waiting on their sockets or on the server's answer. With the server
    /// waiting for sluice meanwhile, both are the path: a stream whose send fits its socket
    /// buffer waits for the answer while its bytes still cross the link.
    fn in_flight(&self) -> f64 {
        self.send + self.server
    }
}

/// Judges a load, or `None` when it was too short (or sent nothing) to judge.
pub fn judge(
    plan: &Plan,
    outcome: &RunOutcome,
    jobs: usize,
    cores: usize,
    advisor: &dyn Advisor,
) -> Option<Verdict> {
    let elapsed = outcome.elapsed.as_secs_f64();
    let streams: Vec<&StreamStats> = outcome
        .streams
        .iter()
        .filter(|s| !s.chunks.is_empty())
        .collect();
    if elapsed < MIN_SECONDS || streams.is_empty() {
        return None;
    }
    let mut figures: BTreeMap<&'static str, f64> = BTreeMap::new();
    let shares = measure(&streams, &outcome.server_waits, &mut figures);
    if let Some(v) = long_tail(plan, &streams, jobs, &mut figures) {
        return Some(v);
    }
    let seen = both_sides(&shares);
    if let Some(v) = round_trip_bound(&streams, &shares, &seen, &mut figures) {
        return Some(v);
    }
    // A server busy for most of its samples is its own limit, whatever the path.
    let server_busy = shares.sampled && shares.waiting < CLIENT_SIDE;
    let waited = Tcp::of(&streams, elapsed)
        .filter(|_| !server_busy)
        .and_then(|t| answers_in_turn(&streams, &t, &seen, &mut figures));
    if let Some(v) = waited {
        return Some(v);
    }
    let client_side = match shares.sampled {
        true => shares.waiting >= CLIENT_SIDE,
        false => shares.read + shares.convert >= shares.send + shares.server,
    };
    let sent = Sent::of(&streams);
    Some(match client_side {
        true if shares.sampled && shares.in_flight() > shares.read.max(shares.convert) => {
            let tcp = Tcp::of(&streams, elapsed);
            match tcp {
                Some(t) if t.window_held() => window_bound(&t, &shares, &seen, figures),
                _ => link_bound(&shares, &seen, sent, tcp.as_ref(), figures),
            }
        }
        true => client_bound(plan, &shares, &seen, jobs, cores, figures),
        false => server_bound(
            &outcome.server_waits,
            &shares,
            seen,
            cores,
            advisor,
            figures,
        ),
    })
}

/// The streams' shares of time, and the server's shares of samples, into `figures`.
fn measure(
    streams: &[&StreamStats],
    w: &ServerWaits,
    figures: &mut BTreeMap<&'static str, f64>,
) -> Shares {
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
    let sampled = w.samples >= MIN_SAMPLES;
    let share = |a: Activity| if sampled { w.share(a) } else { 0.0 };
    if sampled {
        figures.insert("server_samples", w.samples as f64);
        figures.insert(
            "server_waiting_for_client",
            share(Activity::WaitingForClient),
        );
        figures.insert("server_cpu", share(Activity::Cpu));
        figures.insert("server_log", share(Activity::Log));
        figures.insert("server_disk_io", share(Activity::DiskIo));
        figures.insert("server_lock", share(Activity::Lock));
        figures.insert("server_other", share(Activity::Other));
    }
    Shares {
        read,
        convert,
        send,
        server,
        sampled,
        waiting: share(Activity::WaitingForClient),
    }
}

/// A long tail: one stream still loading long after the others finished.
fn long_tail(
    plan: &Plan,
    streams: &[&StreamStats],
    jobs: usize,
    figures: &mut BTreeMap<&'static str, f64>,
) -> Option<Verdict> {
    if streams.len() < 2 {
        return None;
    }
    let mut ends: Vec<(f64, usize)> = streams
        .iter()
        .map(|s| (s.chunks.iter().map(|c| c.end).fold(0.0, f64::max), s.stream))
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = ends[(ends.len() - 1) / 2].0;
    let (last, who) = ends[ends.len() - 1];
    if last - median < TAIL_SECONDS || last < TAIL_RATIO * median {
        return None;
    }
    figures.insert("tail_stream_end_seconds", last);
    figures.insert("median_stream_end_seconds", median);
    let tail = streams.iter().find(|s| s.stream == who)?;
    let chunk = tail
        .chunks
        .iter()
        .max_by(|a, b| (a.end - a.start).total_cmp(&(b.end - b.start)))?;
    // A tail of small chunks is a stream held up (a stall, a starved core), not work cut too
    // coarsely: the other rules say what held it.
    if chunk.end - chunk.start < TAIL_CHUNK_SHARE * (last - median) {
        return None;
    }
    let c = &plan.chunks[chunk.chunk];
    let input = &plan.inputs[c.input];
    let whole = c.start == 0 && c.end.is_none();
    let uncut = whole && plan.chunks.iter().filter(|k| k.input == c.input).count() == 1;
    let next_step = match (input.compression, &input.source, uncut) {
        (Compression::None, InputSource::File(_), _) => format!(
            "its chunks were too big for {jobs} streams: a smaller --chunk-size (this load's \
             was {}) spreads the work evenly",
            crate::units::human_bytes(plan.chunk_size)
        ),
        (_, InputSource::File(_), true) => "a compressed file cannot be cut into chunks: split \
             it into several files, or give it uncompressed"
            .to_string(),
        _ => "standard input is read by one stream: give files instead".to_string(),
    };
    Some(Verdict {
        kind: "long-tail".into(),
        because: format!(
            "stream {} ended {:.1} s after the start, {} the median stream ({:.2} s); its \
             longest chunk, {} ({}), took {:.1} s",
            who + 1,
            last,
            match last / median.max(1e-9) {
                r if r >= 3.0 => format!("{r:.0} times as late as"),
                r => format!("{} after", pct(r - 1.0)),
            },
            median,
            input.display,
            crate::units::human_bytes(chunk.bytes),
            chunk.end - chunk.start
        ),
        next_step,
        figures: std::mem::take(figures),
    })
}

/// Round trips fewer than this are never the verdict: a load of a few big chunks waits on the
/// server a few times, whatever each wait costs.
const MIN_ROUND_TRIPS: u64 = 200;

/// Many small loads, each waiting on the server in turn: the streams waited on the server
/// most of their time, while the server (when sampled) waited on them. Neither side was busy;
/// the round trips between them were the limit.
fn round_trip_bound(
    streams: &[&StreamStats],
    s: &Shares,
    seen: &str,
    figures: &mut BTreeMap<&'static str, f64>,
) -> Option<Verdict> {
    let trips: u64 = streams.iter().map(|x| x.timing.round_trips).sum();
    let chunks: usize = streams.iter().map(|x| x.chunks.len()).sum();
    let waited: f64 = streams.iter().map(|x| x.timing.server_seconds).sum();
    let server_busy = s.sampled && s.waiting < CLIENT_SIDE;
    // A wait per chunk at least: chunks that share a load wait once for all of them, and a
    // wait that long is the server working, not a round trip.
    let each_chunk_waits = trips >= chunks as u64;
    if trips < MIN_ROUND_TRIPS || !each_chunk_waits || s.server < CLIENT_SIDE || server_busy {
        return None;
    }
    let per_trip = waited / trips as f64;
    figures.insert("chunks", chunks as f64);
    figures.insert("round_trips", trips as f64);
    figures.insert("round_trips_per_chunk", trips as f64 / chunks.max(1) as f64);
    figures.insert("seconds_per_round_trip", per_trip);
    Some(Verdict {
        kind: "round-trip-bound".into(),
        because: format!(
            "streams spent {} waiting on the server, over {trips} round trips for {chunks} \
             chunks ({:.1} a chunk, {:.2} ms each); {seen}",
            pct(s.server),
            trips as f64 / chunks.max(1) as f64,
            per_trip * 1e3
        ),
        next_step: "each chunk's load waited on the server in turn: fewer, larger files (small \
                    files share a load, except under --max-errors, which loads each file on \
                    its own to isolate bad rows); on a distant server, more --jobs overlap the \
                    waits"
            .into(),
        figures: std::mem::take(figures),
    })
}

/// The share of the streams' time that their answers' round trips across the path alone
/// account for, from which a load is round-trip-bound rather than link-bound.
const ROUND_TRIP_SHARE: f64 = 0.5;

/// Round trips in series across a long path: the streams waited for answers one after
/// another (each load's start and end, each commit), and those waits, at the path's round
/// trip, take at least half their time: whatever the link's rate, the path's length was the
/// limit. Counted from the round trips the streams themselves timed, a lower bound: the
/// destination's own statements add more.
fn answers_in_turn(
    streams: &[&StreamStats],
    t: &Tcp,
    seen: &str,
    figures: &mut BTreeMap<&'static str, f64>,
) -> Option<Verdict> {
    let trips: u64 = streams.iter().map(|x| x.timing.round_trips).sum();
    let seconds: f64 = streams.iter().map(|x| x.seconds).sum();
    let waited = trips as f64 * t.rtt;
    if seconds <= 0.0 || waited < ROUND_TRIP_SHARE * seconds {
        return None;
    }
    let chunks: usize = streams.iter().map(|x| x.chunks.len()).sum();
    t.record(figures);
    figures.insert("chunks", chunks as f64);
    figures.insert("round_trips", trips as f64);
    figures.insert("round_trip_share", waited / seconds);
    Some(Verdict {
        kind: "round-trip-bound".into(),
        because: format!(
            "the streams waited for {trips} answers in turn across a {:.0} ms round trip, at \
             least {:.1} s of their {:.1} s ({}); their connections moved {:.1} MB/s in all, \
             each keeping {} of its window in flight: the link was not full; {seen}",
            t.rtt * 1e3,
            waited,
            seconds,
            pct(waited / seconds),
            t.acked as f64 / t.elapsed / 1e6,
            pct(t.window_fill())
        ),
        next_step: format!(
            "each answer costs a {:.0} ms round trip, whatever the link's rate: a client nearer \
             the server; more data a load (its round trips are per table, per chunk and at \
             the commit, not per byte); more --jobs overlap them where there are more chunks \
             than streams (this load: {chunks} on {})",
            t.rtt * 1e3,
            streams.len()
        ),
        figures: std::mem::take(figures),
    })
}

/// What each side saw of the other, in words.
fn both_sides(s: &Shares) -> String {
    match s.sampled {
        true => format!(
            "the server waited for sluice {} of the time and was busy {}",
            pct(s.waiting),
            pct(1.0 - s.waiting)
        ),
        false => format!(
            "streams spent {} waiting on the server or its socket (too few server samples to \
             say more)",
            pct(s.send + s.server)
        ),
    }
}

/// The input's bytes and the bytes sent for them, over every chunk.
#[derive(Clone, Copy)]
struct Sent {
    input: u64,
    wire: u64,
}

impl Sent {
    fn of(streams: &[&StreamStats]) -> Sent {
        let chunks = streams.iter().flat_map(|s| &s.chunks);
        let (input, wire) = chunks.fold((0, 0), |(i, w), c| (i + c.bytes, w + c.wire_bytes));
        Sent { input, wire }
    }

    /// Bytes sent per byte of input.
    fn ratio(self) -> f64 {
        self.wire as f64 / self.input.max(1) as f64
    }
}

/// The share of their busy time the streams' connections must have spent held by a window (the
/// server's advertised one, or their own send buffer) for the load to be window-bound...
const WINDOW_SHARE: f64 = 0.5;
/// ...or the share of the smaller window they kept in flight each round trip. A stream that
/// delivers most of its window every round trip is held by it, whatever the kernel's timers
/// say: under a pacing congestion control (BBR) the time the window held it is counted as
/// pacing, not as the window.
const WINDOW_FILL: f64 = 0.6;

/// The streams' TCP figures, from the kernel ([`Transport`]), summed.
struct Tcp {
    streams: usize,
    busy: f64,
    rwnd_limited: f64,
    sndbuf_limited: f64,
    acked: u64,
    retransmitted: u64,
    /// Averages over the streams: round trip (s), send buffer and receive window (bytes).
    rtt: f64,
    send_buffer: f64,
    receive_window: f64,
    elapsed: f64,
}

impl Tcp {
    /// None when no stream had a TCP connection that carried anything.
    fn of(streams: &[&StreamStats], elapsed: f64) -> Option<Tcp> {
        let seen: Vec<&Transport> = streams
            .iter()
            .filter_map(|s| s.transport.as_ref())
            .collect();
        let busy: u64 = seen.iter().map(|t| t.busy_us).sum();
        if busy == 0 {
            return None;
        }
        // A figure the kernel left at zero (an older kernel, or a window shut when it was
        // read) is unknown, and averages over the streams that have it.
        let mean = |f: fn(&Transport) -> u64| {
            let known: Vec<f64> = seen
                .iter()
                .map(|t| f(t) as f64)
                .filter(|&v| v > 0.0)
                .collect();
            known.iter().sum::<f64>() / (known.len().max(1) as f64)
        };
        Some(Tcp {
            streams: seen.len(),
            busy: busy as f64 / 1e6,
            rwnd_limited: seen.iter().map(|t| t.rwnd_limited_us).sum::<u64>() as f64 / 1e6,
            sndbuf_limited: seen.iter().map(|t| t.sndbuf_limited_us).sum::<u64>() as f64 / 1e6,
            acked: seen.iter().map(|t| t.bytes_acked).sum(),
            retransmitted: seen.iter().map(|t| t.bytes_retransmitted).sum(),
            rtt: mean(|t| t.rtt_us) / 1e6,
            send_buffer: mean(|t| t.send_buffer),
            receive_window: mean(|t| t.receive_window),
            elapsed,
        })
    }

    /// The share of the busy time a window held the connections back.
    fn window_share(&self) -> f64 {
        (self.rwnd_limited + self.sndbuf_limited) / self.busy
    }

    /// The smaller of a stream's send buffer and the server's receive window (the one known,
    /// when the other is not), and whether it is the server's.
    fn smaller_window(&self) -> (f64, bool) {
        match (self.send_buffer, self.receive_window) {
            (s, r) if r > 0.0 && (s <= 0.0 || r < s) => (r, true),
            (s, _) => (s, false),
        }
    }

    /// The bytes a stream delivered each round trip, as a share of its smaller window; zero
    /// when neither is known.
    fn window_fill(&self) -> f64 {
        match self.smaller_window().0 {
            w if w > 0.0 => self.per_stream_rate() * self.rtt / w,
            _ => 0.0,
        }
    }

    /// The window that held the streams: what the kernel's timers name, else the smaller.
    fn holding_window(&self) -> (f64, bool) {
        let (rwnd, sndbuf) = (
            self.rwnd_limited / self.busy,
            self.sndbuf_limited / self.busy,
        );
        match () {
            _ if sndbuf >= WINDOW_SHARE && sndbuf >= rwnd => (self.send_buffer, false),
            _ if rwnd >= WINDOW_SHARE => (self.receive_window, true),
            _ => self.smaller_window(),
        }
    }

    /// Whether a window held the streams back (rather than congestion).
    fn window_held(&self) -> bool {
        self.window_share() >= WINDOW_SHARE || self.window_fill() >= WINDOW_FILL
    }

    /// One stream's rate while it had data to deliver, bytes a second.
    fn per_stream_rate(&self) -> f64 {
        self.acked as f64 / self.busy.max(1e-9)
    }

    fn record(&self, figures: &mut BTreeMap<&'static str, f64>) {
        figures.insert("tcp_busy_seconds", self.busy);
        figures.insert("tcp_rwnd_limited", self.rwnd_limited / self.busy);
        figures.insert("tcp_sndbuf_limited", self.sndbuf_limited / self.busy);
        figures.insert("tcp_round_trip_ms", self.rtt * 1e3);
        figures.insert("tcp_stream_mb_per_s", self.per_stream_rate() / 1e6);
        figures.insert("tcp_total_mb_per_s", self.acked as f64 / self.elapsed / 1e6);
        figures.insert(
            "tcp_retransmitted",
            self.retransmitted as f64 / self.acked.max(1) as f64,
        );
        figures.insert("tcp_window_fill", self.window_fill());
        figures.insert("tcp_send_buffer_bytes", self.send_buffer);
        figures.insert("tcp_receive_window_bytes", self.receive_window);
    }
}

/// A window's size in MiB, or KiB below one.
fn window_size(bytes: f64) -> String {
    match bytes / f64::from(1 << 20) {
        m if m >= 1.0 => format!("{m:.1} MiB"),
        _ => format!("{:.0} KiB", bytes / 1024.0),
    }
}

/// The streams waited on their sockets, and the kernel says a window held their connections
/// back, not congestion: each moved about its window a round trip, below what the path
/// carries. ESnet's first lesson: a stream needs buffers of twice the bandwidth-delay product.
fn window_bound(
    t: &Tcp,
    s: &Shares,
    seen: &str,
    mut figures: BTreeMap<&'static str, f64>,
) -> Verdict {
    t.record(&mut figures);
    let (window, servers) = t.holding_window();
    let (held, next_step) = match servers {
        true => (
            "the server's receive window",
            "more streams (--jobs), each with its own window, or a larger net.ipv4.tcp_rmem \
             on the server's host; `sluice probe` measures the path and recommends the streams",
        ),
        false => (
            "its own send buffer",
            "a bigger send buffer (--socket-buffer; the kernel grants up to twice \
             net.core.wmem_max) or more streams (--jobs), each with its own window; `sluice \
             probe` measures the path and recommends both",
        ),
    };
    Verdict {
        kind: "window-bound".into(),
        because: format!(
            "streams spent {} sending or waiting on answers; each of {} stream(s) moved {:.1} MB/s at a round trip \
             of {:.0} ms, {} of {held} ({}) a round trip, and the kernel counted it held by a \
             window {} of the time it had data in flight; {seen}",
            pct(s.in_flight()),
            t.streams,
            t.per_stream_rate() / 1e6,
            t.rtt * 1e3,
            pct(t.window_fill()),
            window_size(window),
            pct(t.window_share()),
        ),
        next_step: next_step.into(),
        figures,
    }
}

/// The server waited for sluice while the streams waited on their sockets, not on reading or
/// converting, and (where the kernel says) no window held their connections back: the network
/// between them is the limit.
fn link_bound(
    s: &Shares,
    seen: &str,
    sent: Sent,
    tcp: Option<&Tcp>,
    mut figures: BTreeMap<&'static str, f64>,
) -> Verdict {
    figures.insert("wire_per_input_byte", sent.ratio());
    let unheld = match tcp {
        Some(t) => {
            t.record(&mut figures);
            format!(
                "; their connections moved {:.1} MB/s in all, not held by a window {} of the \
                 time they had data in flight (congestion, pacing or little to send), each \
                 keeping {} of its window in flight",
                t.acked as f64 / t.elapsed / 1e6,
                pct(1.0 - t.window_share()),
                pct(t.window_fill())
            )
        }
        None => String::new(),
    };
    let next_step = if sent.ratio() > 1.2 {
        format!(
            "this load sent {:.2} bytes per byte of input in its encoding: --wire text sends \
             about the input's size for most tables; more streams help only while the link \
             is not full",
            sent.ratio()
        )
    } else {
        "the link is full: a faster link, or the client nearer the server; more streams help \
         only while it is not"
            .to_string()
    };
    Verdict {
        kind: "link-bound".into(),
        because: format!(
            "streams spent {} sending (waiting on their sockets, or on answers while their \
             bytes crossed the path) and {} converting{unheld}; {seen}",
            pct(s.in_flight()),
            pct(s.convert)
        ),
        next_step,
        figures,
    }
}

/// The client was the limit: reading its inputs, or converting them.
fn client_bound(
    plan: &Plan,
    s: &Shares,
    seen: &str,
    jobs: usize,
    cores: usize,
    figures: BTreeMap<&'static str, f64>,
) -> Verdict {
    if s.read >= s.convert {
        let stdin = plan
            .inputs
            .iter()
            .any(|i| matches!(i.source, InputSource::Stdin));
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
                "decompression runs one thread per compressed file: several smaller files, or \
                 uncompressed ones, read in parallel",
            ),
            (false, false) => (
                "disk-read-bound",
                "reading the inputs",
                "the input's disk is the limit: inputs on a faster disk, or in the page cache",
            ),
        };
        return Verdict {
            kind: kind.into(),
            because: format!("streams spent {} {what}; {seen}", pct(s.read)),
            next_step: next.to_string(),
            figures,
        };
    }
    let next_step = if jobs < cores {
        format!("add --jobs ({jobs} now, {cores} cores here)")
    } else {
        format!(
            "every core converts already ({jobs} streams, {cores} cores): a client with more \
             cores, or the server on another machine"
        )
    };
    Verdict {
        kind: "client-bound".into(),
        because: format!("streams spent {} converting; {seen}", pct(s.convert)),
        next_step,
        figures,
    }
}

/// What the server's busy classes are called in the verdict.
const BUSY: [(Activity, &str); 5] = [
    (Activity::Cpu, "on CPU"),
    (Activity::Log, "writing its log"),
    (Activity::DiskIo, "on its data files"),
    (Activity::Lock, "waiting on locks"),
    (Activity::Other, "on other waits"),
];

/// The server was the limit: by what it did most while busy.
fn server_bound(
    w: &ServerWaits,
    s: &Shares,
    seen: String,
    cores: usize,
    advisor: &dyn Advisor,
    figures: BTreeMap<&'static str, f64>,
) -> Verdict {
    let share = |a: Activity| if s.sampled { w.share(a) } else { 0.0 };
    let top = |a: Activity| {
        w.activities
            .iter()
            .find(|(c, _, _)| *c == a && a != Activity::Cpu)
            .map_or(String::new(), |(_, e, _)| format!(" (mostly {e})"))
    };
    let busy: Vec<(Activity, &str)> = BUSY
        .iter()
        .map(|&(a, what)| (a, advisor.words(a).unwrap_or(what)))
        .collect();
    let main = busy
        .iter()
        .copied()
        .max_by(|a, b| share(a.0).total_cmp(&share(b.0)))
        .filter(|_| s.sampled);
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
        None => seen,
    };
    let class = main.map_or(Activity::Cpu, |m| m.0);
    let costs = advisor.costs();
    let kind = match class {
        Activity::Lock => "lock-bound".to_string(),
        Activity::Log => format!("{}-bound", advisor.label(Activity::Log).unwrap_or("log")),
        Activity::DiskIo => "disk-write-bound".to_string(),
        _ => "server-bound".to_string(),
    };
    if kind == "server-bound" {
        because.push_str(", so more client speed would not help");
    }
    let next_step = advisor
        .advice(class, w, &costs)
        .unwrap_or_else(|| plain_advice(class, cores, &costs));
    Verdict {
        kind,
        because,
        next_step,
        figures,
    }
}

/// The engine's own advice for a server busiest in `class`, naming only what the tables
/// carry.
fn plain_advice(class: Activity, cores: usize, costs: &TableCosts) -> String {
    match class {
        Activity::Lock => "another session holds the tables' locks, or the streams contend on \
             one table: fewer --jobs, or load when it is quiet"
            .into(),
        Activity::Log => "a faster disk for the server's log; the stage strategy writes little \
             log where the server can skip it for new staging tables"
            .into(),
        Activity::DiskIo => match costs.indexes.is_empty() {
            true => "the server's disk is the limit: faster storage".into(),
            false => format!(
                "the server's disk is the limit: faster storage, or {} built after the load",
                listed("the indexes", &costs.indexes)
            ),
        },
        _ => {
            let share = match cores <= 2 {
                true => {
                    "with the cores shared by client and server, fewer client cycles leave \
                         more to the server"
                }
                false => "more --jobs help only while the server has idle cores",
            };
            format!("{share}; {}", per_row_work(costs))
        }
    }
}

/// What the server does per row beyond storing it, from what the tables carry.
fn per_row_work(costs: &TableCosts) -> String {
    if costs.is_empty() {
        return "no index, trigger or check of the tables is kept up row by row (a staged \
                table's indexes are built after its rows), so its work is storing the rows \
                themselves"
            .into();
    }
    // Each kind the tables carry, with what lightens it; nothing is said of kinds they lack.
    let mut parts = Vec::new();
    let mut remedies = Vec::new();
    if !costs.indexes.is_empty() {
        parts.push(listed("indexes", &costs.indexes));
        remedies.push("build the indexes after the load");
    }
    if !costs.triggers.is_empty() {
        parts.push(listed("triggers", &costs.triggers));
        remedies.push("turn off the triggers that need not fire for a bulk load");
    }
    if !costs.checks.is_empty() {
        parts.push(listed("checks", &costs.checks));
        remedies.push("add the checks after the load");
    }
    format!(
        "its work per row includes {}: {}",
        parts.join(", "),
        remedies.join(", or ")
    )
}

/// `indexes on t (a, b) and u (c)`.
fn listed(what: &str, by_table: &[(String, Vec<String>)]) -> String {
    let each: Vec<String> = by_table
        .iter()
        .map(|(t, names)| format!("{t} ({})", names.join(", ")))
        .collect();
    format!("{what} on {}", each.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{ChunkStat, StreamTiming};
    use crate::spec::LoadSpec;
    use sluice_core::destination::ServerWaits;
    use std::time::Duration;

    /// A plan of one plain file cut into chunks of 16 MB or so, and an outcome of `streams`
    /// streams that each ran one chunk, ending at the given times, with `timing` each.
    fn load(ends: &[f64], timing: StreamTiming, waits: ServerWaits) -> (Plan, RunOutcome) {
        let dir = std::env::temp_dir().join(format!("sluice-verdict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.csv");
        std::fs::write(&f, "x,y\n".repeat(1000)).unwrap();
        let spec = LoadSpec::new(vec![f.to_str().unwrap().to_string()]);
        let described = vec![crate::plan::tests::table("t")];
        let plan = crate::plan::build(&spec, &["t".to_string()], &described, None).unwrap();
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
            prepared: Vec::new(),
            elsewhere: 0,
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
        round_trips: 4,
    };

    /// A destination with names and advice of its own.
    struct Labeled;

    impl Advisor for Labeled {
        fn label(&self, class: Activity) -> Option<&'static str> {
            (class == Activity::Log).then_some("journal")
        }

        fn advice(&self, class: Activity, w: &ServerWaits, _: &TableCosts) -> Option<String> {
            let segments = w
                .activities
                .iter()
                .any(|(_, e, _)| e.starts_with("JournalInit"));
            (class == Activity::Log && segments).then(|| "recycle journal segments".into())
        }
    }

    #[test]
    fn the_servers_largest_activity_names_the_verdict() {
        let w = waits(&[
            (Activity::Log, "JournalInitWrite", 40),
            (Activity::Cpu, "CPU", 30),
            (Activity::WaitingForClient, "ClientRead", 5),
        ]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 2, &Labeled).unwrap();
        assert_eq!(v.kind, "journal-bound", "{v:?}");
        assert!(
            v.because.contains("mostly JournalInitWrite"),
            "{}",
            v.because
        );
        assert!(v.because.contains("also on CPU 40%"), "{}", v.because);
        assert_eq!(v.next_step, "recycle journal segments");
        // Without the destination's words, the engine's own.
        let v = judge(&plan, &out, 2, 2, &Plain).unwrap();
        assert_eq!(v.kind, "log-bound", "{v:?}");
        assert!(v.next_step.contains("log"), "{}", v.next_step);
        let w = waits(&[(Activity::Lock, "extend", 40), (Activity::Cpu, "CPU", 30)]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        assert_eq!(judge(&plan, &out, 2, 2, &Plain).unwrap().kind, "lock-bound");
        let w = waits(&[
            (Activity::Cpu, "CPU", 40),
            (Activity::Log, "JournalWrite", 30),
        ]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 8, &Plain).unwrap();
        assert_eq!(v.kind, "server-bound");
        assert!(v.next_step.contains("idle cores"), "{}", v.next_step);
    }

    /// Tables with the given indexes, triggers and checks.
    struct Carrying(TableCosts);

    impl Advisor for Carrying {
        fn costs(&self) -> TableCosts {
            self.0.clone()
        }
    }

    #[test]
    fn advice_names_only_what_the_tables_carry() {
        let w = waits(&[
            (Activity::Cpu, "CPU", 40),
            (Activity::WaitingForClient, "x", 2),
        ]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let plain = judge(&plan, &out, 2, 2, &Carrying(TableCosts::default())).unwrap();
        assert_eq!(plain.kind, "server-bound");
        assert!(
            plain.next_step.contains("no index, trigger or check"),
            "{}",
            plain.next_step
        );
        for word in ["triggers on", "checks on", "indexes on"] {
            assert!(!plain.next_step.contains(word), "{}", plain.next_step);
        }
        let indexed = TableCosts {
            indexes: vec![("lineitem".into(), vec!["lineitem_pkey".into()])],
            ..TableCosts::default()
        };
        let v = judge(&plan, &out, 2, 2, &Carrying(indexed.clone())).unwrap();
        assert!(
            v.next_step.contains("indexes on lineitem (lineitem_pkey)"),
            "{}",
            v.next_step
        );
        assert!(!v.next_step.contains("trigger"), "{}", v.next_step);
        let all = TableCosts {
            triggers: vec![("t".into(), vec!["audit".into()])],
            checks: vec![("t".into(), vec!["t_qty_check".into()])],
            ..indexed
        };
        let v = judge(&plan, &out, 2, 2, &Carrying(all)).unwrap();
        for word in [
            "indexes on lineitem",
            "triggers on t (audit)",
            "checks on t (t_qty_check)",
        ] {
            assert!(v.next_step.contains(word), "{word}: {}", v.next_step);
        }
        // A disk-bound server is told about indexes only when there are some.
        let w = waits(&[(Activity::DiskIo, "DataFileExtend", 40)]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 2, &Carrying(TableCosts::default())).unwrap();
        assert_eq!(v.kind, "disk-write-bound");
        assert!(!v.next_step.contains("index"), "{}", v.next_step);
    }

    #[test]
    fn a_server_waiting_for_streams_that_wait_on_their_sockets_is_link_bound() {
        let w = waits(&[
            (Activity::WaitingForClient, "ClientRead", 40),
            (Activity::Cpu, "CPU", 5),
        ]);
        let (plan, out) = load(&[10.0, 10.2], SENDING, w);
        let v = judge(&plan, &out, 2, 2, &Plain).unwrap();
        assert_eq!(v.kind, "link-bound", "{v:?}");
        assert!(
            v.because.contains("sending (waiting on their sockets"),
            "{}",
            v.because
        );
        // Streams whose sends fit their socket buffers wait for the server's answer while
        // their bytes cross the link: with the server waiting for them, the link still.
        let buffered = StreamTiming {
            convert_seconds: 0.4,
            send_seconds: 0.3,
            server_seconds: 9.3,
            ..SENDING
        };
        let w = waits(&[(Activity::WaitingForClient, "ClientRead", 65)]);
        let (plan, out) = load(&[10.0, 10.2], buffered, w);
        assert_eq!(judge(&plan, &out, 3, 2, &Plain).unwrap().kind, "link-bound");
        // The same server waiting on streams that convert is the client's limit.
        let converting = StreamTiming {
            convert_seconds: 9.0,
            send_seconds: 0.5,
            ..SENDING
        };
        let w = waits(&[(Activity::WaitingForClient, "ClientRead", 40)]);
        let (plan, out) = load(&[10.0, 10.2], converting, w);
        assert_eq!(
            judge(&plan, &out, 2, 2, &Plain).unwrap().kind,
            "client-bound"
        );
    }

    /// Ten seconds of one connection's TCP, `held` of them by the window `rwnd` or `sndbuf`.
    fn tcp(rwnd: u64, sndbuf: u64) -> Transport {
        Transport {
            connections: 1,
            rtt_us: 200_000,
            send_buffer: 4 << 20,
            receive_window: 6 << 20,
            bytes_acked: 90_000_000,
            busy_us: 10_000_000,
            rwnd_limited_us: rwnd,
            sndbuf_limited_us: sndbuf,
            ..Default::default()
        }
    }

    #[test]
    fn connections_held_by_a_window_are_window_bound_and_by_congestion_link_bound() {
        let w = || {
            waits(&[
                (Activity::WaitingForClient, "ClientRead", 40),
                (Activity::Cpu, "CPU", 5),
            ])
        };
        let with = |t: Transport| {
            let (plan, mut out) = load(&[10.0, 10.2], SENDING, w());
            out.streams.iter_mut().for_each(|s| s.transport = Some(t));
            judge(&plan, &out, 2, 2, &Plain).unwrap()
        };
        // Their own buffers: the advice is the buffer, with the figures.
        let v = with(tcp(0, 9_000_000));
        assert_eq!(v.kind, "window-bound", "{v:?}");
        assert!(
            v.because.contains("its own send buffer (4.0 MiB)"),
            "{}",
            v.because
        );
        assert!(v.because.contains("9.0 MB/s"), "{}", v.because);
        assert!(v.because.contains("200 ms"), "{}", v.because);
        assert!(v.next_step.contains("--socket-buffer"), "{}", v.next_step);
        assert_eq!(v.figures["tcp_sndbuf_limited"], 0.9);
        // The server's window: more streams, or the server's host's receive buffers.
        let v = with(tcp(8_000_000, 0));
        assert_eq!(v.kind, "window-bound", "{v:?}");
        assert!(
            v.because.contains("the server's receive window (6.0 MiB)"),
            "{}",
            v.because
        );
        assert!(v.next_step.contains("tcp_rmem"), "{}", v.next_step);
        // Held by congestion: the link is full, and the kernel's figures say so.
        let v = with(tcp(500_000, 500_000));
        assert_eq!(v.kind, "link-bound", "{v:?}");
        assert!(
            v.because.contains("not held by a window 90%"),
            "{}",
            v.because
        );
        assert_eq!(v.figures["tcp_round_trip_ms"], 200.0);
        // A window kept nearly full every round trip holds the stream, though the kernel's
        // timers (under a pacing congestion control) put the time elsewhere.
        let v = with(Transport {
            bytes_acked: 150_000_000,
            ..tcp(0, 0)
        });
        assert_eq!(v.kind, "window-bound", "{v:?}");
        assert!(
            v.because.contains("72% of its own send buffer"),
            "{}",
            v.because
        );
        // A receive window the kernel left at zero is unknown, not a window of nothing.
        let v = with(Transport {
            receive_window: 0,
            ..tcp(500_000, 500_000)
        });
        assert_eq!(v.kind, "link-bound", "{v:?}");
        // A full window that is the server's, with no timer to say so, is named as the server's.
        let v = with(Transport {
            receive_window: 1 << 20,
            ..tcp(0, 0)
        });
        assert_eq!(v.kind, "window-bound", "{v:?}");
        assert!(
            v.because
                .contains("of the server's receive window (1.0 MiB)"),
            "{}",
            v.because
        );
        assert!(v.next_step.contains("tcp_rmem"), "{}", v.next_step);
        // The same figures on a server that was busy say nothing of the network.
        let (plan, mut out) = load(&[10.0, 10.2], SENDING, waits(&[(Activity::Cpu, "CPU", 40)]));
        out.streams
            .iter_mut()
            .for_each(|s| s.transport = Some(tcp(0, 9_000_000)));
        assert_eq!(
            judge(&plan, &out, 2, 2, &Plain).unwrap().kind,
            "server-bound"
        );
    }

    #[test]
    fn answers_in_turn_across_a_long_path_are_round_trip_bound_not_link_bound() {
        // 10 MB across 200 ms on two streams (bench/wan/tables.sh): each stream waited for 14
        // answers, 2.8 s of its 4.85 s, its connection keeping 6% of its window in flight.
        let across = |round_trips: u64| {
            let timing = StreamTiming {
                read_seconds: 0.004,
                convert_seconds: 0.04,
                send_seconds: 0.003,
                server_seconds: 4.6,
                round_trips,
            };
            let w = waits(&[(Activity::WaitingForClient, "ClientRead", 14)]);
            let (plan, mut out) = load(&[4.85, 4.85], timing, w);
            let t = Transport {
                connections: 1,
                rtt_us: 201_000,
                send_buffer: 8 << 20,
                receive_window: 13 << 20,
                bytes_acked: 8_300_000,
                busy_us: 3_100_000,
                ..Default::default()
            };
            out.streams.iter_mut().for_each(|s| s.transport = Some(t));
            judge(&plan, &out, 2, 2, &Plain).unwrap()
        };
        let v = across(14);
        assert_eq!(v.kind, "round-trip-bound", "{v:?}");
        assert!(
            v.because.contains(
                "28 answers in turn across a 201 ms round trip, at least 5.6 s of their 9.7 s"
            ),
            "{}",
            v.because
        );
        assert!(v.because.contains("the link was not full"), "{}", v.because);
        assert!(!v.next_step.contains("--wire"), "{}", v.next_step);
        assert!(v.next_step.contains("2 on 2"), "{}", v.next_step);
        assert_eq!(v.figures["round_trips"], 28.0);
        // A tenth of the answers (the same load's bytes in one chunk a stream) is the link.
        let v = across(1);
        assert_eq!(v.kind, "link-bound", "{v:?}");
    }

    #[test]
    fn a_late_stream_of_small_chunks_is_not_a_long_tail() {
        let (plan, mut out) = load(&[1.6, 3.0], SENDING, ServerWaits::default());
        // The late stream's chunks each took a few milliseconds.
        out.streams[1].chunks = (0..300)
            .map(|k| ChunkStat {
                chunk: 0,
                start: k as f64 * 0.01,
                end: k as f64 * 0.01 + 0.005,
                bytes: 12,
                ..Default::default()
            })
            .collect();
        out.streams[1].chunks.last_mut().unwrap().end = 3.0;
        out.streams[1].chunks.last_mut().unwrap().start = 2.99;
        let v = judge(&plan, &out, 2, 2, &Plain).unwrap();
        assert_ne!(v.kind, "long-tail", "{v:?}");
    }

    #[test]
    fn many_loads_each_waiting_on_a_waiting_server_are_round_trip_bound() {
        // 2,500 small loads a stream, each two round trips, the streams waiting on the server
        // and the server waiting on them.
        let trips = StreamTiming {
            convert_seconds: 0.5,
            send_seconds: 0.1,
            server_seconds: 9.0,
            round_trips: 5000,
            ..SENDING
        };
        let idle = waits(&[(Activity::WaitingForClient, "ClientRead", 40)]);
        let (plan, out) = load(&[10.0, 10.2], trips, idle.clone());
        let v = judge(&plan, &out, 2, 2, &Plain).unwrap();
        assert_eq!(v.kind, "round-trip-bound", "{v:?}");
        assert_eq!(v.figures["round_trips"], 10000.0);
        assert_eq!(v.figures["round_trips_per_chunk"], 5000.0);
        assert!((v.figures["seconds_per_round_trip"] - 0.0018).abs() < 1e-9);
        assert!(v.because.contains("10000 round trips"), "{}", v.because);
        assert!(
            v.next_step.contains("fewer, larger files"),
            "{}",
            v.next_step
        );
        // The same waits over a few big loads are not round trips; nor are many loads on a
        // server that was busy all along.
        let few = StreamTiming {
            round_trips: 4,
            ..trips
        };
        let (plan, out) = load(&[10.0, 10.2], few, idle);
        assert_ne!(
            judge(&plan, &out, 2, 2, &Plain).unwrap().kind,
            "round-trip-bound"
        );
        // Many chunks sharing a few loads wait once for many: not round trips.
        let (plan, mut out) = load(
            &[10.0, 10.2],
            trips,
            waits(&[(Activity::WaitingForClient, "ClientRead", 40)]),
        );
        for s in &mut out.streams {
            s.chunks = vec![s.chunks[0].clone(); 6000];
        }
        assert_ne!(
            judge(&plan, &out, 2, 2, &Plain).unwrap().kind,
            "round-trip-bound"
        );
        let busy = waits(&[(Activity::Cpu, "CPU", 40)]);
        let (plan, out) = load(&[10.0, 10.2], trips, busy);
        assert_eq!(
            judge(&plan, &out, 2, 2, &Plain).unwrap().kind,
            "server-bound"
        );
    }

    #[test]
    fn without_server_samples_the_streams_timings_decide() {
        let (plan, out) = load(&[10.0, 10.1], SENDING, waits(&[(Activity::Cpu, "CPU", 2)]));
        let v = judge(&plan, &out, 2, 2, &Plain).unwrap();
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
        let v = judge(&plan, &out, 2, 4, &Plain).unwrap();
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
        let v = judge(&plan, &out, 3, 4, &Plain).unwrap();
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
        assert_ne!(judge(&plan, &out, 2, 2, &Plain).unwrap().kind, "long-tail");
        let (plan, out) = load(&[0.2, 0.3], SENDING, ServerWaits::default());
        assert_eq!(judge(&plan, &out, 2, 2, &Plain), None);
    }
}
