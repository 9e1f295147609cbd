//! `delayline`: the dev tool's command line (bench/wan/delay.sh drives it).
//!
//!   delayline up  --rtt-ms MS [--rate-mbit R] [--mtu M] [--backlog-ms B] [--queue-mb Q]
//!       sets up a delayed path, prints `namespace NAME client IP server IP device DEV`, and
//!       holds it until SIGINT, SIGTERM or SIGHUP, then tears it down.
//!   delayline tcp --rtt-ms MS [...] [--seconds S] [--sndbuf BYTES] [--rcvbuf BYTES]
//!       sets up a path, sends one TCP stream across it, prints what it moved, tears down.

use delayline::line::Config;
use delayline::path::{self, Path};
use delayline::tcp::{self, Buffers};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("delayline: {e}");
        std::process::exit(2);
    }
}

/// The value after `--name`, if given.
fn flag(args: &[String], name: &str) -> Result<Option<f64>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("{name} wants a number")),
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let command = args.first().map(String::as_str).unwrap_or("");
    if let Some(why) = path::unavailable() {
        return Err(why);
    }
    let rtt = flag(args, "--rtt-ms")?.ok_or("--rtt-ms is required")?;
    let mut config = Config::rtt(Duration::from_secs_f64(rtt / 1e3));
    config.rate = flag(args, "--rate-mbit")?.map(|r| (r * 1e6 / 8.0) as u64);
    if let Some(b) = flag(args, "--backlog-ms")? {
        config.backlog = Duration::from_secs_f64(b / 1e3);
    }
    if let Some(q) = flag(args, "--queue-mb")? {
        config.queue_bytes = (q * 1e6) as usize;
    }
    let mtu = flag(args, "--mtu")?.unwrap_or(1500.0) as u32;
    match command {
        "up" => hold(config, mtu),
        "tcp" => {
            let path = Path::up(config, mtu).map_err(|e| e.to_string())?;
            let buffers = Buffers {
                send: flag(args, "--sndbuf")?.map(|v| v as usize),
                receive: flag(args, "--rcvbuf")?.map(|v| v as usize),
            };
            let seconds = flag(args, "--seconds")?.unwrap_or(3.0);
            let m = tcp::one_stream(&path.namespace, path.server, buffers, seconds, 1.0)
                .map_err(|e| e.to_string())?;
            println!(
                "one stream: {:.2} MB/s, peer window {} B, rtt {:.1} ms, cwnd {} B; window/rtt {:.2} MB/s",
                m.bytes_per_s / 1e6,
                m.peer_window,
                m.rtt.as_secs_f64() * 1e3,
                m.cwnd_bytes,
                m.peer_window as f64 / m.rtt.as_secs_f64().max(1e-9) / 1e6
            );
            let [up, down] = path.counters();
            println!("line: client to server {up}; server to client {down}");
            Ok(())
        }
        _ => Err("usage: delayline up|tcp --rtt-ms MS [--rate-mbit R] [--mtu M] ...".into()),
    }
}

/// Holds a path until a terminating signal, then tears it down.
fn hold(config: Config, mtu: u32) -> Result<(), String> {
    // Blocked before any thread starts, so that only sigwait below ever receives them.
    // SAFETY: a signal set on the stack, filled and used by the libc calls only.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let path = Path::up(config, mtu).map_err(|e| e.to_string())?;
    println!(
        "namespace {} client {} server {} device {}",
        path.namespace, path.client, path.server, path.server_device
    );
    let mut signal = 0;
    // SAFETY: waits for one of the blocked signals.
    unsafe { libc::sigwait(&set, &mut signal) };
    let [up, down] = path.counters();
    eprintln!("delayline: client to server {up}; server to client {down}");
    Ok(())
}
