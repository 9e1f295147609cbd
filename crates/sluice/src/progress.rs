//! Showing a long load as it runs: bars on a terminal, plain lines otherwise, nothing with
//! `--quiet`. The display only reads the atomic counters the streams update, on its own
//! thread, so it costs the hot path one relaxed atomic add per COPY message.

use crate::load::chunk::Counters;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Bars,
    Lines,
    Quiet,
}

impl Mode {
    pub fn choose(quiet: bool) -> Mode {
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bars
        } else {
            Mode::Lines
        }
    }
}

/// A running display; stops when dropped.
pub struct Display {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Formats a byte count with binary-free SI units, as throughput figures are quoted.
pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

/// Starts showing progress for tables named `names` with `totals` bytes each.
pub fn start(
    mode: Mode,
    names: Vec<String>,
    totals: Vec<u64>,
    counters: Arc<Vec<Counters>>,
    verb: &'static str,
) -> Display {
    let stop = Arc::new(AtomicBool::new(false));
    if mode == Mode::Quiet {
        return Display { stop, thread: None };
    }
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("sluice-progress".into())
        .spawn(move || match mode {
            Mode::Bars => bars(names, totals, counters, flag, verb),
            _ => lines(totals, counters, flag, verb),
        })
        .ok();
    Display { stop, thread }
}

fn totals_of(counters: &[Counters]) -> (u64, u64) {
    counters.iter().fold((0, 0), |(b, r), c| {
        (
            b + c.bytes.load(Ordering::Relaxed),
            r + c.rows.load(Ordering::Relaxed),
        )
    })
}

fn bars(
    names: Vec<String>,
    totals: Vec<u64>,
    counters: Arc<Vec<Counters>>,
    stop: Arc<AtomicBool>,
    verb: &str,
) {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5));
    let total: u64 = totals.iter().sum();
    let style = ProgressStyle::with_template(
        "{prefix:>12.bold} [{bar:32.cyan/blue}] {bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12} ETA {eta:>4} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    let overall = multi.add(ProgressBar::new(total).with_style(style.clone()));
    overall.set_prefix(verb.to_string());
    let per_table: Vec<ProgressBar> = if names.len() > 1 {
        names
            .iter()
            .zip(&totals)
            .map(|(n, &t)| {
                let b = multi.add(ProgressBar::new(t).with_style(style.clone()));
                b.set_prefix(n.clone());
                b
            })
            .collect()
    } else {
        Vec::new()
    };
    while !stop.load(Ordering::SeqCst) {
        let (bytes, rows) = totals_of(&counters);
        overall.set_position(bytes.min(total));
        overall.set_message(format!("{rows} rows"));
        for (bar, c) in per_table.iter().zip(counters.iter()) {
            bar.set_position(c.bytes.load(Ordering::Relaxed));
            bar.set_message(format!("{} rows", c.rows.load(Ordering::Relaxed)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for b in per_table {
        b.finish_and_clear();
    }
    overall.finish_and_clear();
}

/// How often plain progress lines are printed: `SLUICE_PROGRESS_SECONDS`, default 5.
fn line_interval() -> Duration {
    std::env::var("SLUICE_PROGRESS_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map_or(Duration::from_secs(5), Duration::from_secs_f64)
}

fn lines(totals: Vec<u64>, counters: Arc<Vec<Counters>>, stop: Arc<AtomicBool>, verb: &str) {
    let total: u64 = totals.iter().sum();
    let interval = line_interval();
    let t0 = Instant::now();
    let mut last = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if last.elapsed() < interval {
            continue;
        }
        last = Instant::now();
        let (bytes, rows) = totals_of(&counters);
        let secs = t0.elapsed().as_secs_f64();
        let rate = bytes as f64 / secs.max(1e-9);
        let eta = if bytes > 0 && total > bytes {
            format!(", ETA {:.0}s", (total - bytes) as f64 / rate)
        } else {
            String::new()
        };
        eprintln!(
            "sluice: {verb} {} of {} ({:.0}%), {rows} rows, {:.1} MB/s{eta}",
            human_bytes(bytes),
            human_bytes(total),
            100.0 * bytes as f64 / total.max(1) as f64,
            rate / 1e6
        );
    }
}
