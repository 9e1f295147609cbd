//! The line itself: for each direction, a reader thread stamps every packet with the time it
//! may leave and queues it; a writer thread sleeps until the head of its queue is due and
//! writes every packet due by then. The delay is constant per direction, so the queue stays in
//! order and a writer only ever waits for its head; each direction has its own threads, so a
//! wait in one never holds up the other.
//!
//! With a rate, a packet also waits its turn at the bottleneck (the previous packet's departure
//! plus its own serialization time) before the delay; a bottleneck backlog longer than
//! `backlog` drops the packet (tail drop, as a router does). The memory the queue may hold is
//! bounded too (`queue_bytes`), whatever the rate.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the line behaves, the same in both directions.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Held in each direction: half the round trip.
    pub one_way: Duration,
    /// Bytes per second at the bottleneck, if any.
    pub rate: Option<u64>,
    /// The longest bottleneck backlog kept (with a rate); past it packets drop.
    pub backlog: Duration,
    /// The most packet bytes one direction holds at once; past it packets drop.
    pub queue_bytes: usize,
}

impl Config {
    /// A line of this round trip, no rate limit, 256 MiB of queue per direction.
    pub fn rtt(rtt: Duration) -> Config {
        Config {
            one_way: rtt / 2,
            rate: None,
            backlog: Duration::from_millis(50),
            queue_bytes: 256 << 20,
        }
    }
}

/// What one direction carried.
#[derive(Debug, Default)]
pub struct Counters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub dropped: AtomicU64,
    pub peak_queue_bytes: AtomicU64,
}

impl Counters {
    pub fn summary(&self) -> String {
        format!(
            "{} packets, {:.1} MB, {} dropped, queue peak {:.1} MB",
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed) as f64 / 1e6,
            self.dropped.load(Ordering::Relaxed),
            self.peak_queue_bytes.load(Ordering::Relaxed) as f64 / 1e6
        )
    }
}

struct Held {
    due: Instant,
    packet: Vec<u8>,
}

#[derive(Default)]
struct State {
    packets: VecDeque<Held>,
    bytes: usize,
    last_departure: Option<Instant>,
}

struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

/// A running line; dropping it stops its threads (within 100 ms) and closes the devices.
pub struct Line {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// `a` to `b`, then `b` to `a`.
    pub counters: [Arc<Counters>; 2],
}

/// A writer takes every packet due within this of now, so that a burst costs one wake-up.
const SLACK: Duration = Duration::from_micros(100);
/// How often a blocked thread looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

impl Line {
    /// Starts carrying packets between the two devices.
    pub fn start(a: File, b: File, config: Config) -> io::Result<Line> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = [Arc::new(Counters::default()), Arc::new(Counters::default())];
        let mut threads = Vec::new();
        for (from, to, counters) in [
            (a.try_clone()?, b.try_clone()?, counters[0].clone()),
            (b, a, counters[1].clone()),
        ] {
            let queue = Arc::new(Queue {
                state: Mutex::new(State::default()),
                ready: Condvar::new(),
            });
            let (q, s, c) = (queue.clone(), stop.clone(), counters.clone());
            threads.push(std::thread::spawn(move || {
                read_side(from, &q, &s, &c, config)
            }));
            let s = stop.clone();
            threads.push(std::thread::spawn(move || write_side(to, &queue, &s)));
        }
        Ok(Line {
            stop,
            threads,
            counters,
        })
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Waits up to `TICK` for the device to have a packet.
fn readable(file: &File) -> bool {
    let mut fd = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, for the duration of the call.
    unsafe { libc::poll(&mut fd, 1, TICK.as_millis() as i32) > 0 }
}

/// When a packet of `len` bytes arriving `now` may leave, or None if the line drops it.
fn schedule(state: &mut State, config: &Config, now: Instant, len: usize) -> Option<Instant> {
    if state.bytes + len > config.queue_bytes {
        return None;
    }
    let Some(rate) = config.rate else {
        return Some(now + config.one_way);
    };
    let start = state.last_departure.map_or(now, |d| d.max(now));
    if start - now > config.backlog {
        return None;
    }
    let departure = start + Duration::from_secs_f64(len as f64 / rate as f64);
    state.last_departure = Some(departure);
    Some(departure + config.one_way)
}

fn read_side(mut from: File, queue: &Queue, stop: &AtomicBool, c: &Counters, config: Config) {
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        if !readable(&from) {
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let now = Instant::now();
        let mut state = queue.state.lock().expect("queue lock");
        match schedule(&mut state, &config, now, n) {
            None => {
                c.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Some(due) => {
                state.packets.push_back(Held {
                    due,
                    packet: buf[..n].to_vec(),
                });
                state.bytes += n;
                c.packets.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(n as u64, Ordering::Relaxed);
                c.peak_queue_bytes
                    .fetch_max(state.bytes as u64, Ordering::Relaxed);
                queue.ready.notify_one();
            }
        }
    }
}

fn write_side(mut to: File, queue: &Queue, stop: &AtomicBool) {
    let mut batch = Vec::new();
    loop {
        {
            let mut state = queue.state.lock().expect("queue lock");
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let now = Instant::now();
                let wait = match state.packets.front() {
                    None => TICK,
                    Some(h) if h.due <= now + SLACK => break,
                    Some(h) => (h.due - now).min(TICK),
                };
                state = queue.ready.wait_timeout(state, wait).expect("queue lock").0;
            }
            let now = Instant::now() + SLACK;
            while state.packets.front().is_some_and(|h| h.due <= now) {
                let h = state.packets.pop_front().expect("front");
                state.bytes -= h.packet.len();
                batch.push(h.packet);
            }
        }
        for packet in batch.drain(..) {
            // A packet the kernel refuses (the device going down) is lost, as on a wire.
            let _ = to.write(&packet);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_rate_every_packet_waits_the_one_way_delay() {
        let config = Config::rtt(Duration::from_millis(100));
        let mut state = State::default();
        let now = Instant::now();
        assert_eq!(
            schedule(&mut state, &config, now, 1500),
            Some(now + Duration::from_millis(50))
        );
    }

    #[test]
    fn with_a_rate_packets_queue_at_the_bottleneck_and_drop_past_the_backlog() {
        let config = Config {
            rate: Some(1_000_000),
            backlog: Duration::from_millis(2),
            ..Config::rtt(Duration::from_millis(20))
        };
        let mut state = State::default();
        let now = Instant::now();
        // 1000 bytes at 1 MB/s: 1 ms each, one after the other.
        let first = schedule(&mut state, &config, now, 1000).unwrap();
        let second = schedule(&mut state, &config, now, 1000).unwrap();
        assert_eq!(first, now + Duration::from_millis(11));
        assert_eq!(second, now + Duration::from_millis(12));
        schedule(&mut state, &config, now, 1000).unwrap();
        // The backlog is now 3 ms, past the 2 ms kept.
        assert_eq!(schedule(&mut state, &config, now, 1000), None);
    }

    #[test]
    fn a_full_queue_drops() {
        let config = Config {
            queue_bytes: 2000,
            ..Config::rtt(Duration::from_millis(20))
        };
        let mut state = State {
            bytes: 1500,
            ..State::default()
        };
        assert_eq!(schedule(&mut state, &config, Instant::now(), 1000), None);
    }
}
