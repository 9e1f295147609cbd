//! The delay line's proof, before anything is measured through it: `ping` across it shows the
//! configured round trip, and one TCP stream whose receive window is the limit moves
//! window / RTT, for two round trips and two buffer sizes. It needs root, TUN devices and
//! network namespaces; where they are missing each test says so and skips.

use delayline::line::Config;
use delayline::path::{self, Path};
use delayline::tcp::{self, Buffers};
use std::io::Write;
use std::process::Command;
use std::time::Duration;

/// Says that a test skips, and why, on the real stderr: the test harness captures eprintln!
/// of a passing test, and a skip must never be silent.
fn say_skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether the path cannot run here (and the skip said so).
fn skip(test: &str) -> bool {
    match path::unavailable() {
        Some(why) => {
            say_skipped(test, &why);
            true
        }
        None => false,
    }
}

/// Each of `count` pings' round trip from the path's client side to its server, in ms,
/// sorted.
fn ping_times(path: &Path, count: u32) -> Vec<f64> {
    let out = path
        .client_command("ping")
        .args(["-n", "-c", &count.to_string(), "-i", "0.2", "-W", "2"])
        .arg(path.server.to_string())
        .output()
        .expect("run ping");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping failed: {text}");
    // 64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=80.4 ms
    let mut times: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(times.len(), count as usize, "ping's output: {text}");
    times.sort_by(f64::total_cmp);
    times
}

#[test]
fn ping_shows_the_configured_round_trip() {
    if skip("ping_shows_the_configured_round_trip") {
        return;
    }
    if Command::new("ping").arg("-V").output().is_err() {
        say_skipped(
            "ping_shows_the_configured_round_trip",
            "no ping (scripts/ensure-ping.sh installs iputils-ping)",
        );
        return;
    }
    for rtt_ms in [40.0, 100.0] {
        let path = Path::up(Config::rtt(Duration::from_secs_f64(rtt_ms / 1e3)), 1500).unwrap();
        let times = ping_times(&path, 9);
        let median = times[times.len() / 2];
        eprintln!("configured {rtt_ms} ms: ping's round trips {times:?} ms");
        // No packet ever comes back early; the median is at most 2 ms more than configured (a
        // thread's wake-up and the kernel's own path). The median, not the mean: on a shared
        // 2-core machine one ping in nine may wait for a core, and says nothing of the line.
        assert!(
            times[0] >= rtt_ms,
            "configured {rtt_ms} ms, a ping took {}",
            times[0]
        );
        assert!(
            median < rtt_ms + 2.0,
            "configured {rtt_ms} ms, ping's median {median} ms"
        );
    }
}

#[test]
fn a_window_bound_stream_moves_window_over_round_trip() {
    if skip("a_window_bound_stream_moves_window_over_round_trip") {
        return;
    }
    for rtt_ms in [50.0, 100.0] {
        let rtt = Duration::from_secs_f64(rtt_ms / 1e3);
        let path = Path::up(Config::rtt(rtt), 1500).unwrap();
        let mut windows = Vec::new();
        for receive in [128usize << 10, 512 << 10] {
            let buffers = Buffers {
                send: None,
                receive: Some(receive),
            };
            let m = tcp::one_stream(&path.namespace, path.server, buffers, 2.5, 1.0).unwrap();
            let expected = m.peer_window as f64 / rtt.as_secs_f64();
            let ratio = m.bytes_per_s / expected;
            eprintln!(
                "rtt {rtt_ms} ms, SO_RCVBUF {receive}: window {} B, {:.2} MB/s, window/RTT \
                 {:.2} MB/s, ratio {ratio:.3}; sender's rtt {:.1} ms",
                m.peer_window,
                m.bytes_per_s / 1e6,
                expected / 1e6,
                m.rtt.as_secs_f64() * 1e3
            );
            // Tolerance: within 15% of window / configured RTT.
            assert!(
                (0.85..1.15).contains(&ratio),
                "rtt {rtt_ms} ms, buffer {receive}: {} B/s against window/RTT {expected} B/s",
                m.bytes_per_s
            );
            windows.push(m.peer_window);
        }
        // The buffer is the limit: four times the buffer, about four times the window.
        assert!(
            windows[1] > 3 * windows[0],
            "the windows did not follow the buffers: {windows:?}"
        );
    }
}
