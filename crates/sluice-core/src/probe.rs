//! What `sluice probe` measures with, whatever the database: the rows it sends (a TPC-H
//! lineitem's mix of keys, money, dates and text, as text lines), the clock that leaves out a
//! warm-up, and the rate it reports. Each destination's probe sends these rows with its own
//! protocol; the command compares what they measured.

use std::time::{Duration, Instant};

/// How much went through, and in how long.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    pub bytes: u64,
    pub rows: u64,
    pub seconds: f64,
    /// Whether the measurement ended on its byte budget, before its time.
    pub spent: bool,
}

impl Rate {
    /// Adds one stream's rate to a measurement of streams started together: their bytes and
    /// rows, over the slowest one's time.
    pub fn add(&mut self, stream: Rate) {
        self.bytes += stream.bytes;
        self.rows += stream.rows;
        self.seconds = self.seconds.max(stream.seconds);
        self.spent |= stream.spent;
    }

    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// The probe table's columns: a TPC-H lineitem's mix of keys, money, dates and text.
pub const COLUMNS: &str = "k bigint, p bigint, q numeric(15,2), price numeric(15,2), d date, \
                       flag char(1), comment varchar(44)";

/// One row of the probe's data in text form, `i` making it differ from its neighbours.
pub fn text_row(i: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = writeln!(
        out,
        "{}\t{}\t{}.00\t{}.{:02}\t199{}-0{}-1{}\t{}\tcarefully final deposits detect slyly agai",
        i,
        i * 7 % 200_000,
        i % 50 + 1,
        900 + i % 100_000,
        i % 100,
        2 + i % 7,
        1 + i % 9,
        i % 10,
        ["N", "A", "R"][(i % 3) as usize],
    );
}

/// A measurement's clock, from the barrier: it runs for its time, and its rate counts from the
/// end of the first third, the warm-up (TCP's slow start, the socket buffer filling, the
/// server's caches).
pub struct Meter {
    start: Instant,
    warm: Instant,
    deadline: Instant,
    /// When the warm-up ended, and the bytes and rows by then.
    mark: Option<(Instant, u64, u64)>,
}

impl Meter {
    pub fn start(seconds: f64) -> Meter {
        let start = Instant::now();
        Meter {
            start,
            warm: start + Duration::from_secs_f64(seconds / 3.0),
            deadline: start + Duration::from_secs_f64(seconds),
            mark: None,
        }
    }

    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Notes the totals so far, the first time the warm-up is over.
    pub fn tick(&mut self, bytes: u64, rows: u64) {
        if self.mark.is_none() && Instant::now() >= self.warm {
            self.mark = Some((Instant::now(), bytes, rows));
        }
    }

    /// What went through since the warm-up, given the totals at the end.
    pub fn rate(&self, bytes: u64, rows: u64) -> Rate {
        let (from, bytes_before, rows_before) = self.mark.unwrap_or((self.start, 0, 0));
        Rate {
            bytes: bytes - bytes_before,
            rows: rows - rows_before,
            seconds: from.elapsed().as_secs_f64(),
            spent: false,
        }
    }
}
