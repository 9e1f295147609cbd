//! A delayed path: a network namespace for the client side, joined to the current namespace
//! (the server's side) by two TUN devices and a [`Line`] between them. The client is
//! `10.97.N.2`, the server `10.97.N.1`, with N chosen free at setup. Dropping the path stops
//! the line (its devices vanish with it) and deletes the namespace.

use crate::line::{Config, Line};
use crate::tun;
use std::io;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a path cannot be made here, in words a skipped test can print.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces and TUN devices need root".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        _ => return Some("no `ip` command (iproute2)".into()),
    }
    let probe = format!(
        "dl-check-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    );
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &probe]).output();
            None
        }
        Ok(o) => Some(format!(
            "cannot create a network namespace: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run ip: {e}")),
    }
}

/// Runs `ip` with these arguments; its error output becomes the error.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// A running delayed path.
pub struct Path {
    /// The client side's namespace (`ip netns exec NAME ...`).
    pub namespace: String,
    pub client: Ipv4Addr,
    pub server: Ipv4Addr,
    /// The server side's TUN device, in the current namespace.
    pub server_device: String,
    line: Option<Line>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Packets each TUN device queues for the line before it drops (its txqueuelen).
const TUN_QUEUE: u32 = 10_000;

/// A third octet no address of this namespace uses yet.
fn free_subnet() -> io::Result<u8> {
    let seq = SEQ.fetch_add(1, Ordering::SeqCst);
    let used = Command::new("ip")
        .args(["-4", "-o", "addr"])
        .output()?
        .stdout;
    let used = String::from_utf8_lossy(&used);
    let start = (std::process::id().wrapping_mul(7).wrapping_add(seq)) % 250;
    (0..250)
        .map(|i| ((start + i) % 250 + 1) as u8)
        .find(|n| !used.contains(&format!(" 10.97.{n}.")))
        .ok_or_else(|| io::Error::other("no free 10.97.N.0/24 subnet"))
}

impl Path {
    /// Sets up the namespace, the devices (this MTU) and the line.
    pub fn up(config: Config, mtu: u32) -> io::Result<Path> {
        let n = free_subnet()?;
        let namespace = format!("dl-{}-{n}", std::process::id());
        let server_device = format!("dl{}s{n}", std::process::id() % 100_000);
        ip(&["netns", "add", &namespace])?;
        let mut path = Path {
            namespace,
            client: Ipv4Addr::new(10, 97, n, 2),
            server: Ipv4Addr::new(10, 97, n, 1),
            server_device,
            line: None,
        };
        // From here on, dropping `path` undoes what was made.
        let ns = path.namespace.clone();
        let client_tun = tun::create_in(&ns, "dlc")?;
        let server_tun = tun::create(&path.server_device)?;
        let mtu = mtu.to_string();
        let (client, server) = (format!("{}/24", path.client), format!("{}/24", path.server));
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "add", &client, "dev", "dlc"])?;
        // A TUN device's queue to the line is txqueuelen packets long and drops past it,
        // unseen by the line's counters: 500 (the default) is 30 ms at 200 Mbit/s, which the
        // line's reader overran while a build shared the machine's two cores. 10,000 rides
        // out a scheduling hiccup; the bottleneck queue stays the line's own.
        let ring = TUN_QUEUE.to_string();
        ip(&[
            "-n",
            &ns,
            "link",
            "set",
            "dlc",
            "mtu",
            &mtu,
            "txqueuelen",
            &ring,
            "up",
        ])?;
        ip(&["addr", "add", &server, "dev", &path.server_device])?;
        ip(&[
            "link",
            "set",
            &path.server_device,
            "mtu",
            &mtu,
            "txqueuelen",
            &ring,
            "up",
        ])?;
        path.line = Some(Line::start(client_tun, server_tun, config)?);
        Ok(path)
    }

    /// What each direction carried: client to server, then server to client.
    pub fn counters(&self) -> [String; 2] {
        match &self.line {
            Some(l) => [l.counters[0].summary(), l.counters[1].summary()],
            None => Default::default(),
        }
    }

    /// A command to run on the client's side.
    pub fn client_command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespace, program]);
        c
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        drop(self.line.take());
        let _ = ip(&["link", "del", &self.server_device]);
        let _ = ip(&["netns", "del", &self.namespace]);
    }
}
