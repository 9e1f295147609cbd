//! `--jobs auto`: how many streams to run, measured at the start of the load itself.
//!
//! More connections can make a database slower (the sqlskills series), so the right number is
//! measured, not guessed. The load starts with one stream; every window ([`WINDOW`], or ten
//! round trips to a distant server, [`Windows`]) the calibrator
//! reads the load's throughput (input bytes converted and sent, across tables) and admits one
//! more stream while the last one raised it by more than [`GAIN`]. A stream that seems not to
//! is measured for a second window before it counts as the knee (one window on a shared
//! machine can mislead). At the knee no stream is added; the last one stays unless it made
//! the load slower by more than [`LOSS`], in which case it is retired (it finishes its chunk
//! and takes no other). Stopping one stream short costs far more than one stream too many on
//! a flat curve, so the rule leans that way. The curve and the choice go in the report.

use crate::chunk::Counters;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long each stream count is measured for, at least.
pub const WINDOW: Duration = Duration::from_millis(1000);
/// How long a new stream is given to connect and start before it is measured, at least.
pub const SETTLE: Duration = Duration::from_millis(400);
/// Round trips in a window: across a long path a new connection's TCP needs several round
/// trips of slow start to reach its pace, and one window must not judge it before.
pub const WINDOW_ROUND_TRIPS: u32 = 10;
/// Round trips a new stream is given to connect (its startup takes a few) and ramp up.
pub const SETTLE_ROUND_TRIPS: u32 = 8;

/// The calibration's clock: how long a new stream settles, and how long a window lasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Windows {
    pub settle: Duration,
    pub window: Duration,
}

impl Windows {
    /// [`SETTLE`] and [`WINDOW`], longer where the round trip makes them too short.
    pub fn for_round_trip(rtt: Option<Duration>) -> Windows {
        let rtt = rtt.unwrap_or_default();
        Windows {
            settle: SETTLE.max(rtt * SETTLE_ROUND_TRIPS),
            window: WINDOW.max(rtt * WINDOW_ROUND_TRIPS),
        }
    }
}
/// The rise in throughput a stream must bring to be kept.
pub const GAIN: f64 = 0.05;
/// A stream that lowered the throughput by more than this is retired at the knee; one that
/// merely did not raise it stays (on a flat curve it costs nothing, and one window's noise
/// must not leave the load a stream short).
pub const LOSS: f64 = 0.05;

/// One point of the curve.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Point {
    pub jobs: usize,
    pub mb_per_s: f64,
}

/// What the calibration measured and chose.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Calibration {
    pub curve: Vec<Point>,
    /// The last stream count that raised the throughput by [`GAIN`] (`None` if the
    /// calibration ended before finding one).
    pub knee: Option<usize>,
    /// The streams that loaded the rest: the knee, or one more when that one did not slow
    /// the load.
    pub chosen: usize,
    /// Why it stopped there.
    pub why: String,
}

/// Shared between the calibrator and the streams.
pub struct Gate {
    /// Streams `0..admitted` may take work.
    admitted: AtomicUsize,
    /// Streams at and above this take no new work (the knee's extra stream).
    retired_from: AtomicUsize,
    /// The calibration has ended: streams not admitted by now never run.
    settled: AtomicBool,
    result: Mutex<Calibration>,
}

impl Gate {
    /// A gate for `max` streams; without calibration every stream is admitted at once.
    pub fn new(max: usize, calibrate: bool) -> Gate {
        Gate {
            admitted: AtomicUsize::new(if calibrate { 1 } else { max }),
            retired_from: AtomicUsize::new(max),
            settled: AtomicBool::new(!calibrate),
            result: Mutex::new(Calibration {
                chosen: max,
                ..Calibration::default()
            }),
        }
    }

    /// Blocks stream `n` until it is admitted (true) or the calibration ends without it
    /// (false), or the load stops.
    pub fn wait_admitted(&self, n: usize, abort: &AtomicBool) -> bool {
        loop {
            if n < self.admitted.load(Ordering::SeqCst) {
                return true;
            }
            if self.settled.load(Ordering::SeqCst) || abort.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether stream `n` may take another unit.
    pub fn may_continue(&self, n: usize) -> bool {
        n < self.retired_from.load(Ordering::SeqCst)
    }

    /// The calibration's outcome, once the load is done.
    pub fn result(&self) -> Calibration {
        crate::run::lock(&self.result).clone()
    }

    /// Runs the calibration for up to `max` streams, reading `counters`, until it settles,
    /// the queue runs dry (`work_left` false), or the load ends (`done`).
    pub fn calibrate(
        &self,
        max: usize,
        counters: &[Counters],
        clock: Windows,
        work_left: impl Fn() -> bool,
        done: &AtomicBool,
    ) {
        let bytes = || -> u64 {
            counters
                .iter()
                .map(|c| c.bytes.load(Ordering::Relaxed))
                .sum()
        };
        let mut curve: Vec<Point> = Vec::new();
        let mut knee = None;
        let why;
        loop {
            let jobs = self.admitted.load(Ordering::SeqCst);
            // Let the new stream connect and start before measuring it.
            if !sleep_unless(clock.settle, done) {
                why = "the load ended during calibration".to_string();
                break;
            }
            let (b0, t0) = (bytes(), Instant::now());
            if !sleep_unless(clock.window, done) {
                why = "the load ended during calibration".to_string();
                break;
            }
            let mut rate = (bytes() - b0) as f64 / 1e6 / t0.elapsed().as_secs_f64();
            let best_before = curve.iter().map(|p| p.mb_per_s).fold(0.0, f64::max);
            if jobs > 1 && rate < best_before * (1.0 + GAIN) {
                // A knee, or noise: a second window decides, over both.
                if !sleep_unless(clock.window, done) {
                    why = "the load ended during calibration".to_string();
                    break;
                }
                rate = (bytes() - b0) as f64 / 1e6 / t0.elapsed().as_secs_f64();
            }
            curve.push(Point {
                jobs,
                mb_per_s: rate,
            });
            if jobs > 1 && rate < best_before * (1.0 + GAIN) {
                // The knee: the last stream brought less than GAIN. Retire it only if it made
                // things worse.
                knee = Some(jobs - 1);
                if rate < best_before * (1.0 - LOSS) {
                    self.retired_from.store(jobs - 1, Ordering::SeqCst);
                }
                why = format!(
                    "stream {jobs} changed the throughput by {:+.0}%, where a stream must add \
                     {:.0}%",
                    (rate / best_before.max(1e-9) - 1.0) * 100.0,
                    GAIN * 100.0
                );
                break;
            }
            if jobs >= max {
                why = format!("every stream allowed was admitted ({max})");
                break;
            }
            if !work_left() {
                why = "no chunk left to give another stream".to_string();
                break;
            }
            self.admitted.store(jobs + 1, Ordering::SeqCst);
        }
        self.settled.store(true, Ordering::SeqCst);
        let admitted = self.admitted.load(Ordering::SeqCst);
        let chosen = self.retired_from.load(Ordering::SeqCst).min(admitted);
        *crate::run::lock(&self.result) = Calibration {
            curve,
            knee,
            chosen,
            why,
        };
    }
}

/// Sleeps `d` in short steps; false when `done` was raised meanwhile.
fn sleep_unless(d: Duration, done: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if done.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_wait_for_admission_and_the_unadmitted_never_run() {
        let gate = Gate::new(4, true);
        let abort = AtomicBool::new(false);
        assert!(gate.wait_admitted(0, &abort));
        gate.admitted.store(2, Ordering::SeqCst);
        assert!(gate.wait_admitted(1, &abort));
        gate.settled.store(true, Ordering::SeqCst);
        assert!(!gate.wait_admitted(3, &abort));
        let open = Gate::new(3, false);
        assert!(open.wait_admitted(2, &abort));
        assert!(open.may_continue(2));
    }

    #[test]
    fn windows_last_ten_round_trips_across_a_long_path() {
        let near = Windows::for_round_trip(Some(Duration::from_micros(80)));
        assert_eq!((near.settle, near.window), (SETTLE, WINDOW));
        assert_eq!(Windows::for_round_trip(None), near);
        let far = Windows::for_round_trip(Some(Duration::from_millis(200)));
        assert_eq!(far.window, Duration::from_secs(2));
        assert_eq!(far.settle, Duration::from_millis(1600));
    }
}
