//! Showing a long load as it runs: bars on a terminal, plain lines otherwise, nothing with
//! `--quiet`. The display only reads the atomic counters the streams update, on its own
//! thread, so it costs the hot path one relaxed atomic add per COPY message.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_engine::chunk::Counters;
pub use sluice_engine::units::{human_bytes, thousands};
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

/// Seconds as `42s`, `3m05s` or `1h02m`.
fn human_secs(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// What one bar is showing: the whole load or one table. Its rate is measured from its own
/// first byte, so a table that starts late is not averaged over time it was waiting, and it
/// stops counting when the table is done.
struct Track {
    total: u64,
    /// Chunks that make up the whole; the track is done when that many have finished.
    chunks: u64,
    started: Option<Instant>,
    done: Option<f64>,
}

impl Track {
    fn new(total: u64, chunks: u64) -> Track {
        Track {
            total,
            chunks,
            started: None,
            done: None,
        }
    }

    /// Updates from the counters and describes the state: `waiting`, progress with rate and
    /// ETA, or `done`.
    fn describe(&mut self, bytes: u64, rows: u64, chunks_done: u64) -> String {
        if self.started.is_none() && (bytes > 0 || rows > 0 || chunks_done > 0) {
            self.started = Some(Instant::now());
        }
        let Some(started) = self.started else {
            return format!("{:>10} waiting", human_bytes(self.total));
        };
        if self.done.is_none() && chunks_done >= self.chunks {
            self.done = Some(started.elapsed().as_secs_f64());
        }
        let secs = self.done.unwrap_or_else(|| started.elapsed().as_secs_f64());
        let rate = bytes as f64 / secs.max(1e-3);
        if self.done.is_some() {
            return format!(
                "done: {} rows, {} in {}, {}/s",
                thousands(rows),
                human_bytes(bytes),
                human_secs(secs),
                human_bytes(rate as u64)
            );
        }
        let eta = if bytes > 0 && self.total > bytes && secs > 0.5 {
            format!("ETA {:>6}", human_secs((self.total - bytes) as f64 / rate))
        } else {
            format!("ETA {:>6}", "?")
        };
        format!(
            "{:>10}/{:<10} {:>10}/s {eta} {} rows",
            human_bytes(bytes),
            human_bytes(self.total),
            human_bytes(rate as u64),
            thousands(rows)
        )
    }
}

/// Starts showing progress for tables named `names`, with `totals` bytes and `chunks` chunks
/// each.
pub fn start(
    mode: Mode,
    names: Vec<String>,
    totals: Vec<u64>,
    chunks: Vec<u64>,
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
            Mode::Bars => bars(names, totals, chunks, counters, flag, verb),
            _ => lines(totals, counters, flag, verb),
        })
        .ok();
    Display { stop, thread }
}

fn totals_of(counters: &[Counters]) -> (u64, u64, u64) {
    counters.iter().fold((0, 0, 0), |(b, r, c), k| {
        (
            b + k.bytes.load(Ordering::Relaxed),
            r + k.rows.load(Ordering::Relaxed),
            c + k.chunks_done.load(Ordering::Relaxed),
        )
    })
}

fn bars(
    names: Vec<String>,
    totals: Vec<u64>,
    chunks: Vec<u64>,
    counters: Arc<Vec<Counters>>,
    stop: Arc<AtomicBool>,
    verb: &str,
) {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5));
    let total: u64 = totals.iter().sum();
    let style = ProgressStyle::with_template("{prefix:>12.bold} [{bar:24.cyan/blue}] {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let overall = multi.add(ProgressBar::new(total.max(1)).with_style(style.clone()));
    overall.set_prefix(verb.to_string());
    let mut overall_track = Track::new(total, chunks.iter().sum());
    let mut per_table: Vec<(ProgressBar, Track)> = if names.len() > 1 {
        names
            .iter()
            .zip(totals.iter().zip(&chunks))
            .map(|(n, (&t, &c))| {
                let b = multi.add(ProgressBar::new(t.max(1)).with_style(style.clone()));
                b.set_prefix(n.clone());
                (b, Track::new(t, c))
            })
            .collect()
    } else {
        Vec::new()
    };
    while !stop.load(Ordering::SeqCst) {
        let (bytes, rows, done) = totals_of(&counters);
        overall.set_position(bytes.min(total));
        overall.set_message(overall_track.describe(bytes, rows, done));
        for ((bar, track), c) in per_table.iter_mut().zip(counters.iter()) {
            if bar.is_finished() {
                continue;
            }
            let bytes = c.bytes.load(Ordering::Relaxed);
            bar.set_message(track.describe(
                bytes,
                c.rows.load(Ordering::Relaxed),
                c.chunks_done.load(Ordering::Relaxed),
            ));
            if track.done.is_some() {
                bar.set_position(track.total.max(1));
                bar.finish();
            } else {
                bar.set_position(bytes.min(track.total));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (b, _) in per_table {
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
        let (bytes, rows, _) = totals_of(&counters);
        let secs = t0.elapsed().as_secs_f64();
        let rate = bytes as f64 / secs.max(1e-9);
        let eta = if bytes > 0 && total > bytes {
            format!(", ETA {}", human_secs((total - bytes) as f64 / rate))
        } else {
            String::new()
        };
        eprintln!(
            "sluice: {verb} {} of {} ({:.0}%), {} rows, {:.1} MB/s{eta}",
            human_bytes(bytes),
            human_bytes(total),
            100.0 * bytes as f64 / total.max(1) as f64,
            thousands(rows),
            rate / 1e6
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_decimal_and_counts_grouped() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_500_000), "1.5 MB");
        assert_eq!(human_bytes(7_780_000_000), "7.78 GB");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(8_661_245), "8,661,245");
        assert_eq!(human_secs(65.0), "1m05s");
    }

    #[test]
    fn a_table_waits_runs_and_finishes_with_its_own_rate() {
        let mut t = Track::new(1000, 2);
        assert!(
            t.describe(0, 0, 0).ends_with("waiting"),
            "no ETA before it starts"
        );
        let running = t.describe(500, 10, 1);
        assert!(running.contains("500 B/1.0 kB"), "{running}");
        std::thread::sleep(Duration::from_millis(20));
        let done = t.describe(1000, 20, 2);
        assert!(done.starts_with("done: 20 rows"), "{done}");
        // A finished table's figures no longer change.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(t.describe(1000, 20, 2), done);
    }
}
