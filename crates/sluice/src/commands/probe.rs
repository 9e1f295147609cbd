//! `sluice probe`: the preflight. Before a load, measure what the path to the server can carry
//! and what the server can store, on 1..N streams, and what this machine can parse, then say
//! which will bound the load and which `--jobs` and `--copy-buffer` to give it.
//!
//! The record's team ran NTttcp before any load; ESnet sizes buffers to twice the
//! bandwidth-delay product; the sqlskills series showed that more connections can make a
//! load slower, so the right number must be measured. Nothing the probe writes stays: its
//! tables live inside transactions that are rolled back (`sluice_postgres::probe`).

use super::load::LoadArgs;
use crate::failure::Failure;
use crate::target;
use clap::Args;
use sluice_postgres::network::{size_for, KernelLimits, Sizing};
use sluice_postgres::probe::{Probe, Rate, Sink};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  sluice probe                          # the private cluster
  sluice probe -t \"$URL\" --jobs 1,2,4,8
  sluice probe -t \"$URL\" lineitem.1.tbl   # and this machine's parse rate
  sluice probe -t mariadb://user@host/db  # MariaDB too

It measures the round trip and, for each stream count: upload (COPY into a
sink that stores nothing: the network and the server's COPY input), and
storing rows in text and in binary (into tables created inside transactions
that are rolled back: nothing stays). From the best upload and the round
trip it computes the bandwidth-delay product and, with this kernel's socket
buffer limits, the --socket-buffer and the streams that cover it. Across a
long round trip each measurement lasts at least 30 round trips. With files,
it also dry-runs the first 32 MB of each plain one to measure this machine's
parsing per CPU-second.

Against MariaDB (--target mariadb://...): upload is LOAD DATA LOCAL into a
temporary table that keeps a byte per row, store is into a temporary InnoDB
table (no redo log: an upper bound), rolled back; the recommendation is
--jobs (sluice leaves socket buffers to the kernel there).

Exit codes: 0 measured, 2 usage, 4 cannot connect, 5 server failure.")]
pub struct ProbeArgs {
    /// Files whose parsing to measure (the first 32 MB of each plain file, dry run).
    #[arg(value_name = "FILE")]
    pub files: Vec<String>,

    /// Connection, as for `sluice load` (without it, the private cluster).
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,

    /// The stream counts to measure.
    #[arg(
        long,
        short = 'j',
        value_name = "N,N,...",
        default_value = "1,2,4",
        value_delimiter = ','
    )]
    pub jobs: Vec<usize>,

    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 2.0, value_name = "S")]
    pub seconds: f64,

    /// The table the files load into (else named by each file, as for `sluice load`).
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,

    /// Measure the path only (round trip and upload), not the server's storing: quicker
    /// across a long round trip, when the question is the network.
    #[arg(long)]
    pub upload_only: bool,

    /// Print the measurements as JSON.
    #[arg(long)]
    pub json: bool,

    /// The private cluster's directory, when no target is given.
    #[arg(long, value_name = "DIR")]
    pub pg_dir: Option<PathBuf>,
}

/// One stream count's measurements.
#[derive(serde::Serialize, Debug, Clone)]
struct Row {
    streams: usize,
    upload_mb_per_s: f64,
    /// None with --upload-only.
    store_text_mb_per_s: Option<f64>,
    store_binary_mb_per_s: Option<f64>,
    store_binary_rows_per_s: Option<f64>,
}

/// The share of the probe's expected rate that the load right after it reached, measured
/// (min, median, max) by `bench/probe-vs-load` on BENCHMARKS.md's 2-core machine with TPC-H
/// SF1 lineitem and `--jobs 2` (issue 32): the probe's error, printed beside its figure.
const MEASURED_LOAD_SHARE: (f64, f64, f64) = (0.44, 0.47, 0.48);
/// The same for MariaDB 10.11 (`bench/probe-vs-load --target mariadb://...`, 2026-11-28): the
/// probe's store into a temporary table writes no redo log, the load's rows do.
const MEASURED_LOAD_SHARE_MARIADB: (f64, f64, f64) = (0.75, 0.81, 0.89);

/// The probe's measured error as its JSON says it.
fn expected_error((low, median, high): (f64, f64, f64)) -> serde_json::Value {
    serde_json::json!({
        "load_share_median": median,
        "load_share_min": low,
        "load_share_max": high,
        "measured_by": "bench/probe-vs-load (BENCHMARKS.md, issue 32)",
    })
}

/// The probe's measured error in words, printed beside its figure.
fn how_close((low, median, high): (f64, f64, f64), left_out: &str) -> String {
    format!(
        "how close: an upper bound; on BENCHMARKS.md's 2-core machine the load right after it \
         reached {low:.2} to {high:.2} of it\n  (median {median:.2}, bench/probe-vs-load): a \
         load also pays for {left_out} that seconds of probing do not"
    )
}

/// The smallest stream count whose rate is within 10% of the best: more add little.
fn knee(rows: &[Row], rate: impl Fn(&Row) -> f64) -> Option<&Row> {
    let best = rows.iter().map(&rate).fold(0.0, f64::max);
    rows.iter().find(|r| rate(r) >= 0.9 * best)
}

/// ESnet's rule for buffers, applied to one COPY message: twice the bandwidth-delay product,
/// never below the 256 KiB sluice measured as its floor (BENCHMARKS.md), at most 16 MiB.
fn copy_buffer(mb_per_s: f64, rtt: Duration) -> (usize, usize) {
    let bdp = (mb_per_s * 1e6 * rtt.as_secs_f64()) as usize;
    let size = (2 * bdp).clamp(256 << 10, 16 << 20).next_power_of_two();
    (bdp, size.min(16 << 20))
}

pub fn run(mut args: ProbeArgs) -> Result<(), Failure> {
    args.files = crate::patterns::expand(&args.files)?;
    // Fewest streams first: the knees and the uploads' growth read the counts in order.
    args.jobs.sort_unstable();
    args.jobs.dedup();
    if args.jobs.is_empty() || args.jobs.contains(&0) {
        return Err(Failure::Usage(
            "--jobs takes stream counts of 1 or more".into(),
        ));
    }
    if !(0.1..=600.0).contains(&args.seconds) {
        return Err(Failure::Usage("--seconds is between 0.1 and 600".into()));
    }
    for f in &args.files {
        sluice_engine::plan::check_input(f)?;
    }
    if let Some(url) = target::mariadb_target(args.target.as_deref()) {
        return run_mariadb(&args, &url);
    }
    let resolved = target::resolve(args.target.as_deref(), args.pg_dir.clone(), args.json)
        .map_err(|e| match e.downcast_ref::<target::BadTarget>() {
            Some(_) => Failure::Usage(format!("{e:#}")),
            None => Failure::Connect(format!("{e:#}")),
        })?;
    let server = |e: sluice_postgres::admin::AdminError| match e {
        sluice_postgres::admin::AdminError::Server(m) => Failure::server(m),
        other => Failure::Connect(other.to_string()),
    };
    let probe = Probe::connect(&resolved.info).map_err(server)?;
    let say = |m: String| {
        if !args.json {
            eprintln!("sluice: {m}");
        }
    };
    let rtt = probe.round_trip(21).map_err(server)?;
    let seconds = measurement_seconds(args.seconds, rtt);
    if seconds > args.seconds {
        say(format!(
            "the round trip is {:.0} ms: each measurement runs {seconds:.1} s ({ROUND_TRIPS} \
             round trips; its first third, TCP's slow start, is left out of the rate)",
            rtt.as_secs_f64() * 1e3
        ));
    }
    let mut rows = Vec::new();
    for &n in &args.jobs {
        say(format!(
            "measuring {n} stream(s), {seconds:.1} s per measurement"
        ));
        let m = |sink| probe.measure(sink, n, seconds, None).map_err(server);
        let up: Rate = m(Sink::Nothing)?;
        let (text, bin) = match args.upload_only {
            true => (None, None),
            false => (Some(m(Sink::Text)?), Some(m(Sink::Binary)?)),
        };
        rows.push(Row {
            streams: n,
            upload_mb_per_s: up.mb_per_s(),
            store_text_mb_per_s: text.map(|r| r.mb_per_s()),
            store_binary_mb_per_s: bin.map(|r| r.mb_per_s()),
            store_binary_rows_per_s: bin.map(|r| r.rows as f64 / r.seconds.max(1e-9)),
        });
    }
    let parse = match args.files.is_empty() {
        true => None,
        false => Some(parse_rate(&args, |spec| {
            let mut dest = crate::destination::open_postgres(&resolved.info)?;
            dry_run(spec, &mut dest)
        })?),
    };
    let cores = cores();
    let store = match args.upload_only {
        true => None,
        false => knee(&rows, |r| r.store_binary_mb_per_s.unwrap_or(0.0)).cloned(),
    };
    let upload_best = rows.iter().map(|r| r.upload_mb_per_s).fold(0.0, f64::max);
    let per_stream_upload = rows.first().map_or(0.0, |r| r.upload_mb_per_s);
    let (bdp, buffer) = copy_buffer(per_stream_upload, rtt);
    let mut limits: Vec<(&str, f64, String)> = Vec::new();
    if let Some(s) = &store {
        limits.push((
            "the server's storing",
            s.store_binary_mb_per_s.unwrap_or(0.0),
            format!("binary rows at {} stream(s)", s.streams),
        ));
    }
    limits.push(("the upload path", upload_best, "COPY into a sink".into()));
    if let Some((rate, _)) = &parse {
        let (mb_per_s, jobs) = parsing_bound(*rate, store.as_ref().map_or(1, |s| s.streams));
        limits.push((
            "this machine's parsing",
            mb_per_s,
            format!("{rate:.0} MB per CPU-second on {jobs} core(s)"),
        ));
    }
    let bound = limits
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .cloned()
        .unwrap_or(("nothing measured", 0.0, String::new()));
    let plan = path_plan(&rows, upload_best, rtt, store.as_ref());
    let (limits, path_bdp, sizing, jobs) = (&plan.limits, plan.path_bdp, &plan.sizing, plan.jobs);
    if args.json {
        let json = serde_json::json!({
            "target": resolved.info.to_string(),
            "seconds_per_measurement": seconds,
            "round_trip_ms": rtt.as_secs_f64() * 1e3,
            "streams": rows,
            "parse_mb_per_cpu_second": parse.as_ref().map(|p| p.0),
            "parse_sample_bytes": parse.as_ref().map(|p| p.1),
            "expected_bottleneck": bound.0,
            "expected_mb_per_s": bound.1,
            "expected_error": expected_error(MEASURED_LOAD_SHARE),
            "recommended_jobs": jobs,
            "recommended_copy_buffer": buffer,
            "bandwidth_delay_product_bytes": bdp,
            "bottleneck_mb_per_s": upload_best,
            "path_bdp_bytes": path_bdp,
            "kernel_limits": {
                "wmem_max": limits.wmem_max,
                "rmem_max": limits.rmem_max,
                "tcp_wmem": limits.tcp_wmem,
                "tcp_rmem": limits.tcp_rmem,
            },
            "streams_for_bdp": sizing.streams,
            "recommended_socket_buffer": sizing.buffer,
            "socket_buffer_reason": sizing.why,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("probe JSON")
        );
        return Ok(());
    }
    println!("probe of {}", resolved.info);
    println!(
        "round trip: {:.3} ms (median of 21)",
        rtt.as_secs_f64() * 1e3
    );
    println!("streams  upload MB/s  store text MB/s  store binary MB/s  binary rows/s");
    for r in &rows {
        println!(
            "{:>7}  {:>11.1}  {:>15}  {:>17}  {:>13}",
            r.streams,
            r.upload_mb_per_s,
            cell(r.store_text_mb_per_s),
            cell(r.store_binary_mb_per_s),
            r.store_binary_rows_per_s
                .map_or("-".into(), |v| crate::progress::thousands(v as u64))
        );
    }
    if let Some((rate, bytes)) = &parse {
        println!(
            "client: parses {rate:.0} MB per CPU-second (dry run of {}), {cores} core(s) here",
            crate::progress::human_bytes(*bytes)
        );
    }
    println!(
        "expected bottleneck: {} at about {:.0} MB/s ({})",
        bound.0, bound.1, bound.2
    );
    println!(
        "{}",
        how_close(MEASURED_LOAD_SHARE, "commits, checkpoints and writeback")
    );
    let why_jobs = why_store_jobs(
        store
            .as_ref()
            .map(|s| s.store_binary_mb_per_s.unwrap_or(0.0)),
        rows.len(),
        args.upload_only,
    );
    println!(
        "kernel: net.core.wmem_max {}, net.ipv4.tcp_wmem {:?}, net.core.rmem_max {}, \
         net.ipv4.tcp_rmem {:?} (the server's own receive buffers cannot be seen from here)",
        limits.wmem_max, limits.tcp_wmem, limits.rmem_max, limits.tcp_rmem
    );
    println!(
        "path: bottleneck {upload_best:.1} MB/s (the best upload measured) x round trip \
         {:.1} ms = bandwidth-delay product {}",
        rtt.as_secs_f64() * 1e3,
        crate::progress::human_bytes(path_bdp)
    );
    println!(
        "recommended: --jobs {jobs} ({})",
        why_jobs_for(&why_jobs, &plan)
    );
    println!(
        "recommended: --socket-buffer {} ({})",
        sizing.buffer.map_or("off".into(), size_flag),
        sizing.why
    );
    println!(
        "recommended: --copy-buffer {} (twice one stream's bandwidth-delay product of {}, at \
         least sluice's measured 256k)",
        size_flag(buffer as u64),
        crate::progress::human_bytes(bdp as u64)
    );
    Ok(())
}

/// `sluice probe` against MariaDB (`sluice_mariadb::probe`): the round trip, and for each
/// stream count the upload (`LOAD DATA LOCAL` into a table that keeps a byte per row) and the
/// store rate (into a temporary InnoDB table, rolled back); from them the expected bottleneck
/// and `--jobs`. MariaDB's streams are text, so there is no binary column; sluice leaves the
/// kernel's socket buffers to autotuning there, so the path's need shows in `--jobs`.
fn run_mariadb(args: &ProbeArgs, url: &str) -> Result<(), Failure> {
    use sluice_mariadb::probe::{Probe, Sink};
    let info = target::resolve_mariadb(url).map_err(|e| Failure::Usage(format!("{e:#}")))?;
    let probe = Probe::connect(&info).map_err(Failure::Connect)?;
    let rtt = probe.round_trip(21).map_err(Failure::server)?;
    let seconds = measurement_seconds(args.seconds, rtt);
    let mut rows = Vec::new();
    for &n in &args.jobs {
        if !args.json {
            eprintln!("sluice: measuring {n} stream(s), {seconds:.1} s per measurement");
        }
        let m = |sink| probe.measure(sink, n, seconds).map_err(Failure::server);
        let up = m(Sink::Upload)?;
        let store = match args.upload_only {
            true => None,
            false => Some(m(Sink::Store)?),
        };
        rows.push(Row {
            streams: n,
            upload_mb_per_s: up.mb_per_s(),
            store_text_mb_per_s: store.map(|r| r.mb_per_s()),
            store_binary_mb_per_s: None,
            store_binary_rows_per_s: store.map(|r| r.rows as f64 / r.seconds.max(1e-9)),
        });
    }
    let parse = match args.files.is_empty() {
        true => None,
        false => Some(parse_rate(args, |spec| {
            let mut dest = crate::destination::open_mariadb(&info)?;
            dry_run(spec, &mut dest)
        })?),
    };
    let store_rate = |r: &Row| r.store_text_mb_per_s.unwrap_or(0.0);
    let store = knee(&rows, store_rate)
        .filter(|_| !args.upload_only)
        .cloned();
    let upload_best = rows.iter().map(|r| r.upload_mb_per_s).fold(0.0, f64::max);
    let plan = path_plan(&rows, upload_best, rtt, store.as_ref());
    let (path_bdp, sizing, store_jobs, jobs) =
        (plan.path_bdp, &plan.sizing, plan.store_jobs, plan.jobs);
    let mut bounds = vec![("the upload path", upload_best)];
    if let Some(s) = &store {
        bounds.push(("the server's storing", store_rate(s)));
    }
    if let Some((rate, _)) = &parse {
        bounds.push(("this machine's parsing", parsing_bound(*rate, store_jobs).0));
    }
    let bound = bounds
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .copied()
        .unwrap_or(("nothing measured", 0.0));
    let why_jobs = why_store_jobs(store.as_ref().map(store_rate), rows.len(), args.upload_only);
    if args.json {
        let json = serde_json::json!({
            "target": info.to_string(),
            "seconds_per_measurement": seconds,
            "round_trip_ms": rtt.as_secs_f64() * 1e3,
            "streams": rows,
            "parse_mb_per_cpu_second": parse.as_ref().map(|p| p.0),
            "expected_bottleneck": bound.0,
            "expected_mb_per_s": bound.1,
            "expected_error": expected_error(MEASURED_LOAD_SHARE_MARIADB),
            "recommended_jobs": jobs,
            "bottleneck_mb_per_s": upload_best,
            "path_bdp_bytes": path_bdp,
            "streams_for_bdp": sizing.streams,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("probe JSON")
        );
        return Ok(());
    }
    println!("probe of {info}");
    println!(
        "round trip: {:.3} ms (median of 21)",
        rtt.as_secs_f64() * 1e3
    );
    println!("streams  upload MB/s  store MB/s      rows/s");
    for r in &rows {
        println!(
            "{:>7}  {:>11.1}  {:>10}  {:>10}",
            r.streams,
            r.upload_mb_per_s,
            cell(r.store_text_mb_per_s),
            r.store_binary_rows_per_s
                .map_or("-".into(), |v| crate::progress::thousands(v as u64))
        );
    }
    println!(
        "(upload: LOAD DATA LOCAL into a table keeping a byte per row; store: into a temporary \
         InnoDB table, which writes no redo log, so an upper bound)"
    );
    if let Some((rate, bytes)) = &parse {
        println!(
            "client: parses {rate:.0} MB per CPU-second (dry run of {}), {} core(s) here",
            crate::progress::human_bytes(*bytes),
            cores()
        );
    }
    println!(
        "expected bottleneck: {} at about {:.0} MB/s",
        bound.0, bound.1
    );
    println!(
        "{}",
        how_close(
            MEASURED_LOAD_SHARE_MARIADB,
            "the redo log, commits and writeback"
        )
    );
    println!(
        "path: bottleneck {upload_best:.1} MB/s x round trip {:.1} ms = bandwidth-delay \
         product {}",
        rtt.as_secs_f64() * 1e3,
        crate::progress::human_bytes(path_bdp)
    );
    println!(
        "recommended: --jobs {jobs} ({}; on MariaDB sluice leaves socket buffers to the \
         kernel's autotuning)",
        why_jobs_for(&why_jobs, &plan)
    );
    Ok(())
}

/// What the path asks of a load, beside the server's knee.
struct PathPlan {
    limits: KernelLimits,
    /// The best upload times the round trip.
    path_bdp: u64,
    sizing: Sizing,
    /// The server's knee (1 when its storing was not measured).
    store_jobs: usize,
    /// The recommended `--jobs`: the knee, or more where the path needs them.
    jobs: usize,
    /// Why the path needs `sizing.streams` (what `--jobs` says where they are more than the
    /// knee).
    path_why: String,
}

/// The path's bandwidth-delay product from the best upload and the round trip, the socket
/// sizing this kernel allows for it, and the `--jobs` that both the server's knee (`store`)
/// and the path ask for. Where the uploads (each stream left to the kernel's autotuning) show
/// that the path itself held them ([`upload_knee`]), the streams that reached its rate are
/// the path's need, with no buffer set: across 200 ms at 400 Mbit/s, four autotuned streams
/// loaded SF1 `lineitem` in 0.94 of the time of four with the buffer the window rule sets, and
/// in 0.92 of three such (BENCHMARKS.md).
fn path_plan(rows: &[Row], upload_best: f64, rtt: Duration, store: Option<&Row>) -> PathPlan {
    let limits = KernelLimits::read();
    let path_bdp = (upload_best * 1e6 * rtt.as_secs_f64()) as u64;
    let (sizing, path_why) = path_need(rows, upload_best, size_for(path_bdp, &limits));
    let store_jobs = store.map_or(1, |s| s.streams);
    PathPlan {
        jobs: store_jobs.max(sizing.streams),
        limits,
        path_bdp,
        sizing,
        path_why,
        store_jobs,
    }
}

/// The streams and buffer the path needs, and why: what the window rule (`windows`) says,
/// unless the uploads (`rows`, the best of them `upload_best`) show the path itself held the
/// streams ([`upload_knee`]).
fn path_need(rows: &[Row], upload_best: f64, windows: Sizing) -> (Sizing, String) {
    if windows.buffer.is_none() && windows.streams == 1 {
        // One autotuned stream covers the path: more streams are the server's question.
        let why = windows.why.clone();
        return (windows, why);
    }
    let knee = upload_knee(rows);
    match knee.saturated {
        true => (
            Sizing {
                streams: knee.streams,
                buffer: None,
                why: format!(
                    "{} autotuned stream(s) reached the path's rate ({upload_best:.1} MB/s) in \
                     the measurement, and the upload grew less than the streams did: a bottleneck \
                     they shared held them, not each stream's window, so autotuning is left \
                     alone (a set buffer turns it off; {})",
                    knee.streams, windows.why
                ),
            },
            format!(
                "{} streams reached the path's rate in the measurement, where fewer did not",
                knee.streams
            ),
        ),
        false if knee.streams > windows.streams => (
            Sizing {
                streams: knee.streams,
                ..windows
            },
            format!(
                "the upload came within a tenth of its best at {} streams, not before",
                knee.streams
            ),
        ),
        false => {
            let why = format!(
                "one stream's window cannot cover the path: {} streams are needed for their \
                 buffers to hold twice the bandwidth-delay product",
                windows.streams
            );
            (windows, why)
        }
    }
}

/// How far the measured uploads went, each stream left to the kernel's autotuning.
struct UploadKnee {
    /// The fewest streams whose upload came within 10% of the best.
    streams: usize,
    /// Whether the upload grew less than the streams did (by a tenth or more): a bottleneck
    /// the streams shared held them, not each one's window. Unknown (false) from one count.
    saturated: bool,
}

fn upload_knee(rows: &[Row]) -> UploadKnee {
    let up = |r: &Row| r.upload_mb_per_s;
    let (Some(first), Some(knee)) = (rows.first(), knee(rows, up)) else {
        return UploadKnee {
            streams: 1,
            saturated: false,
        };
    };
    let per_stream = up(first) / first.streams as f64;
    let saturated = rows
        .iter()
        .filter(|r| r.streams > first.streams)
        .any(|r| up(r) < 0.9 * per_stream * r.streams as f64);
    UploadKnee {
        streams: knee.streams,
        saturated,
    }
}

/// Why the server's knee is the stream count it is: `knee_rate` is its store rate, where
/// storing was measured; `measured` the stream counts measured.
fn why_store_jobs(knee_rate: Option<f64>, measured: usize, upload_only: bool) -> String {
    match knee_rate {
        Some(rate) if measured > 1 => {
            format!("the fewest streams storing within 10% of the best measured ({rate:.0} MB/s)")
        }
        _ if upload_only => "--upload-only: the server's storing was not measured".into(),
        _ => "one stream count measured; give --jobs 1,2,4,8 to find the knee".into(),
    }
}

/// A measurement's cell in the table: `-` where it was not measured.
fn cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// How many round trips a measurement lasts at least: TCP's slow start takes about ten to
/// open the window on a long fat path, and the first third is left out of the rate.
const ROUND_TRIPS: f64 = 30.0;

/// The seconds each measurement runs: as asked, but at least [`ROUND_TRIPS`] round trips.
fn measurement_seconds(asked: f64, rtt: Duration) -> f64 {
    asked.max(ROUND_TRIPS * rtt.as_secs_f64())
}

/// A size as `--copy-buffer` and `--socket-buffer` take it.
fn size_flag(b: u64) -> String {
    match b {
        b if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b => format!("{}k", b.div_ceil(1 << 10)),
    }
}

/// Why the recommended stream count: the server's knee, or the path's need where that asks for
/// more.
fn why_jobs_for(store_why: &str, plan: &PathPlan) -> String {
    match plan.sizing.streams > plan.store_jobs {
        true => format!(
            "{}; the server stored best at {}",
            plan.path_why, plan.store_jobs
        ),
        false => store_why.to_string(),
    }
}

/// A dry run of `spec` into `dest`: converted, sent nowhere.
fn dry_run<D>(spec: &sluice_engine::spec::LoadSpec, dest: &mut D) -> Result<(), Failure>
where
    D: sluice_core::destination::Destination
        + sluice_core::destination::Ledger
        + sluice_core::destination::Staging,
{
    sluice_engine::load::load_staging(spec, dest, &sluice_engine::events::Silent)?;
    Ok(())
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What this machine parses at `rate` MB per CPU-second on `streams` streams, each converting
/// on a core of its own as far as there are cores: MB/s, and the cores that takes.
fn parsing_bound(rate: f64, streams: usize) -> (f64, usize) {
    let jobs = streams.clamp(1, cores());
    (rate * jobs as f64, jobs)
}

/// This machine's parse rate, MB per CPU-second, from a dry run (`run`, into the target's
/// destination) of the first 32 MB of each plain input (cut at a line end), and the bytes it
/// parsed.
fn parse_rate(
    args: &ProbeArgs,
    run: impl FnOnce(&sluice_engine::spec::LoadSpec) -> Result<(), Failure>,
) -> Result<(f64, u64), Failure> {
    const SAMPLE: usize = 32 << 20;
    let dir = std::env::temp_dir().join(format!("sluice-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::Local(format!("cannot create {}: {e}", dir.display())))?;
    let mut samples = Vec::new();
    let mut tables = Vec::new();
    let mut bytes = 0u64;
    for f in &args.files {
        let path = std::path::Path::new(f);
        let head = sluice_engine::plan::read_head(&path.to_path_buf(), SAMPLE)
            .map_err(|e| Failure::Local(format!("cannot read {f}: {e}")))?;
        if head.starts_with(&[0x1f, 0x8b]) || head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            eprintln!("sluice: {f} is compressed: left out of the parse measurement");
            continue;
        }
        let cut = match head.len() {
            n if n < SAMPLE => n,
            _ => memchr::memrchr(b'\n', &head).map_or(0, |i| i + 1),
        };
        let name = path.file_name().map_or("sample".into(), |n| n.to_owned());
        let sample = dir.join(name);
        std::fs::write(&sample, &head[..cut])
            .map_err(|e| Failure::Local(format!("cannot write {}: {e}", sample.display())))?;
        bytes += cut as u64;
        tables.push(args.table.clone());
        samples.push(sample.to_string_lossy().into_owned());
    }
    if samples.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(Failure::Usage(
            "no plain file to measure parsing on (compressed files are left out)".into(),
        ));
    }
    let load = LoadArgs {
        files: samples,
        table: args.table.clone(),
        dry_run: true,
        jobs: Some(sluice_engine::spec::Jobs::Fixed(1)),
        quiet: true,
        ..LoadArgs::defaults()
    };
    let before = cpu_seconds();
    let result = run(&load.spec());
    let cpu = cpu_seconds() - before;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    Ok((bytes as f64 / 1e6 / cpu.max(1e-9), bytes))
}

/// CPU time this process has used, user and system.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given, nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uploads(rates: &[(usize, f64)]) -> Vec<Row> {
        rates
            .iter()
            .map(|&(streams, up)| Row {
                streams,
                upload_mb_per_s: up,
                store_text_mb_per_s: None,
                store_binary_mb_per_s: None,
                store_binary_rows_per_s: None,
            })
            .collect()
    }

    fn best(rows: &[Row]) -> f64 {
        rows.iter().map(|r| r.upload_mb_per_s).fold(0.0, f64::max)
    }

    /// The window rule's answer on the bench's path (200 ms, 400 Mbit/s, 4 MiB autotuning).
    fn three_of_8m() -> Sizing {
        Sizing {
            streams: 3,
            buffer: Some(8 << 20),
            why: "twice the BDP (17.2 MiB) is more than one stream's buffer can be".into(),
        }
    }

    #[test]
    fn where_the_uploads_stop_growing_with_the_streams_the_path_needs_that_many_autotuned() {
        // bench/wan/bdp.sh's probe: 4 streams reached 45 MB/s, less than 4 x 13.4.
        let rows = uploads(&[(1, 13.4), (2, 26.6), (4, 45.0)]);
        let (sizing, why) = path_need(&rows, best(&rows), three_of_8m());
        assert_eq!((sizing.streams, sizing.buffer), (4, None), "{}", sizing.why);
        assert!(
            sizing.why.contains("reached the path's rate"),
            "{}",
            sizing.why
        );
        assert!(why.starts_with("4 streams reached"), "{why}");
        // Uploads that grow with the streams: each stream's window held them; the window
        // rule's buffer stands, with as many streams as the uploads reached.
        let rows = uploads(&[(1, 10.0), (4, 40.0)]);
        let (sizing, why) = path_need(&rows, best(&rows), three_of_8m());
        assert_eq!((sizing.streams, sizing.buffer), (4, Some(8 << 20)));
        assert!(why.contains("its best at 4 streams"), "{why}");
        // One stream count tells nothing about growth: the window rule.
        let (sizing, why) = path_need(&uploads(&[(4, 40.0)]), 40.0, three_of_8m());
        assert_eq!((sizing.streams, sizing.buffer), (4, Some(8 << 20)));
        assert!(why.contains("its best at 4 streams"), "{why}");
        let (sizing, why) = path_need(&uploads(&[(1, 40.0)]), 40.0, three_of_8m());
        assert_eq!((sizing.streams, sizing.buffer), (3, Some(8 << 20)));
        assert!(why.contains("window cannot cover"), "{why}");
        // A path one autotuned stream covers (loopback): the uploads' knee is the client's
        // and the server's CPU, not the path's; the server's knee decides.
        let one = Sizing {
            streams: 1,
            buffer: None,
            why: "twice the BDP fits".into(),
        };
        let (sizing, _) = path_need(&uploads(&[(1, 300.0), (2, 390.0), (4, 400.0)]), 400.0, one);
        assert_eq!((sizing.streams, sizing.buffer), (1, None));
    }

    #[test]
    fn the_copy_buffer_is_twice_the_bandwidth_delay_product_within_bounds() {
        // A local server: the floor.
        assert_eq!(copy_buffer(1000.0, Duration::from_micros(50)).1, 256 << 10);
        // 100 MB/s at 40 ms: a 4 MB product, an 8 MiB buffer.
        let (bdp, size) = copy_buffer(100.0, Duration::from_millis(40));
        assert_eq!(bdp, 4_000_000);
        assert_eq!(size, 8 << 20);
        // Never past 16 MiB.
        assert_eq!(copy_buffer(1000.0, Duration::from_secs(1)).1, 16 << 20);
    }

    #[test]
    fn parsing_is_bounded_by_the_cores_as_well_as_the_streams() {
        let n = cores();
        assert_eq!(parsing_bound(100.0, n + 7), (100.0 * n as f64, n));
        assert_eq!(parsing_bound(100.0, 1), (100.0, 1));
        assert_eq!(parsing_bound(100.0, 0), (100.0, 1));
    }

    #[test]
    fn the_knee_is_the_fewest_streams_near_the_best() {
        let row = |streams, mb| Row {
            streams,
            upload_mb_per_s: 0.0,
            store_text_mb_per_s: None,
            store_binary_mb_per_s: Some(mb),
            store_binary_rows_per_s: None,
        };
        let rows = [row(1, 100.0), row(2, 190.0), row(4, 200.0), row(8, 170.0)];
        assert_eq!(
            knee(&rows, |r| r.store_binary_mb_per_s.unwrap_or(0.0))
                .unwrap()
                .streams,
            2
        );
    }
}
