//! The path to the server as TCP sees it: the socket buffer limits this machine's kernel
//! grants, and the buffer (or the number of streams) a load needs for the bandwidth-delay
//! product (BDP).
//!
//! ESnet's rule: one TCP stream fills a path only if its buffers hold about twice the BDP
//! (the kernel counts its own bookkeeping against the buffer: about half of it is data in
//! flight). Linux grows a socket's send buffer by itself (autotuning) up to the third field of
//! `net.ipv4.tcp_wmem`; a program that sets `SO_SNDBUF` turns autotuning off for that socket
//! and gets twice what it asked for, at most twice `net.core.wmem_max` (raising either needs
//! root). Where neither covers twice the BDP, more streams are the lever: each brings its own
//! window.
//!
//! So a buffer is set only where it raises the ceiling: on a short path autotuning is left
//! alone (it sizes to the path and costs no memory up front).

use crate::conninfo::{HostSpec, Liveness};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};

/// The socket buffer limits of this machine's kernel (of this network namespace), bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLimits {
    /// `net.core.wmem_max`: the most `SO_SNDBUF` may ask for (the kernel doubles it).
    pub wmem_max: u64,
    /// `net.core.rmem_max`, likewise for `SO_RCVBUF`.
    pub rmem_max: u64,
    /// `net.ipv4.tcp_wmem`: min, default, and the most autotuning grows a send buffer to.
    pub tcp_wmem: [u64; 3],
    /// `net.ipv4.tcp_rmem`, likewise for receive buffers.
    pub tcp_rmem: [u64; 3],
}

impl KernelLimits {
    /// Linux's defaults, where /proc cannot be read.
    pub const LINUX_DEFAULTS: KernelLimits = KernelLimits {
        wmem_max: 212_992,
        rmem_max: 212_992,
        tcp_wmem: [4096, 16_384, 4_194_304],
        tcp_rmem: [4096, 131_072, 6_291_456],
    };

    /// Reads them from /proc/sys; a value that cannot be read keeps Linux's default.
    pub fn read() -> KernelLimits {
        let d = KernelLimits::LINUX_DEFAULTS;
        let one = |p: &str, dflt: u64| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(dflt)
        };
        let three = |p: &str, dflt: [u64; 3]| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let v: Vec<u64> = text
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            match v[..] {
                [a, b, c] => [a, b, c],
                _ => dflt,
            }
        };
        KernelLimits {
            wmem_max: one("/proc/sys/net/core/wmem_max", d.wmem_max),
            rmem_max: one("/proc/sys/net/core/rmem_max", d.rmem_max),
            tcp_wmem: three("/proc/sys/net/ipv4/tcp_wmem", d.tcp_wmem),
            tcp_rmem: three("/proc/sys/net/ipv4/tcp_rmem", d.tcp_rmem),
        }
    }

    /// The largest send buffer autotuning gives one stream.
    pub fn autotuned_max(&self) -> u64 {
        self.tcp_wmem[2]
    }

    /// The largest send buffer `SO_SNDBUF` gets one stream (twice `wmem_max`).
    pub fn explicit_max(&self) -> u64 {
        2 * self.wmem_max
    }

    /// The largest send buffer one stream can have, either way.
    pub fn stream_max(&self) -> u64 {
        self.autotuned_max().max(self.explicit_max())
    }
}

/// `--socket-buffer`: what each stream's socket buffers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketBuffer {
    /// Sized from the measured round trip where that raises the ceiling ([`auto_buffer`]).
    Auto,
    /// The kernel's autotuning, always.
    Off,
    /// This many bytes as the kernel counts them.
    Size(usize),
}

/// How to size a load's streams for a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// The streams needed for their buffers to cover twice the BDP (1 where one can).
    pub streams: usize,
    /// The kernel buffer to set on each stream, or None to leave autotuning.
    pub buffer: Option<u64>,
    /// Why, in a sentence with the figures.
    pub why: String,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The sizing for a path of this bandwidth-delay product (bytes), under these limits.
pub fn size_for(bdp: u64, limits: &KernelLimits) -> Sizing {
    let need = 2 * bdp;
    let (auto, explicit) = (limits.autotuned_max(), limits.explicit_max());
    if need <= auto {
        return Sizing {
            streams: 1,
            buffer: None,
            why: format!(
                "twice the BDP ({}) fits in what autotuning grows a buffer to \
                 (net.ipv4.tcp_wmem max {}): the kernel's autotuning is left alone",
                mib(need),
                mib(auto)
            ),
        };
    }
    if need <= explicit {
        return Sizing {
            streams: 1,
            buffer: Some(need),
            why: format!(
                "twice the BDP ({}) is more than autotuning reaches (net.ipv4.tcp_wmem max {}) \
                 but within what SO_SNDBUF gets (2 x net.core.wmem_max = {}): one stream, \
                 its buffer set to twice the BDP",
                mib(need),
                mib(auto),
                mib(explicit)
            ),
        };
    }
    let per = limits.stream_max();
    let streams = need.div_ceil(per.max(1)) as usize;
    let buffer = (explicit > auto).then_some(explicit);
    Sizing {
        streams,
        buffer,
        why: format!(
            "twice the BDP ({}) is more than one stream's buffer can be (at most {}: \
             net.ipv4.tcp_wmem max {}, 2 x net.core.wmem_max {}; raising them needs root, \
             `sysctl -w`): {streams} streams of {} each cover it",
            mib(need),
            mib(per),
            mib(auto),
            mib(explicit),
            mib(per)
        ),
    }
}

/// The rate `--socket-buffer auto` sizes for when nothing was measured: 1 Gbit/s per stream.
pub const AUTO_RATE_BYTES_PER_S: f64 = 125e6;

/// `--socket-buffer auto`: a buffer only where the round trip makes autotuning's ceiling
/// the window (at [`AUTO_RATE_BYTES_PER_S`]) and `SO_SNDBUF` can go higher; else autotuning.
pub fn auto_buffer(rtt: Duration, limits: &KernelLimits) -> Sizing {
    let bdp = (AUTO_RATE_BYTES_PER_S * rtt.as_secs_f64()) as u64;
    let sized = size_for(bdp, limits);
    match sized.buffer {
        None => sized,
        // More streams are the user's (or the probe's) call; the buffer is raised as far
        // as the kernel lets it, not past twice the BDP.
        Some(_) => Sizing {
            streams: 1,
            buffer: Some((2 * bdp).min(limits.explicit_max())),
            why: format!(
                "round trip {:.1} ms: autotuning's {} caps a stream at {:.0} MB/s, \
                 SO_SNDBUF can give {}",
                rtt.as_secs_f64() * 1e3,
                mib(limits.autotuned_max()),
                limits.autotuned_max() as f64 / 2.0 / rtt.as_secs_f64().max(1e-6) / 1e6,
                mib((2 * bdp).min(limits.explicit_max()))
            ),
        },
    }
}

/// Opens a TCP connection to `h` whose socket buffers are `buffer` bytes as the kernel counts
/// them (asking for half: the kernel doubles what it is asked), or autotuned when `None`, with
/// the keepalives and unacknowledged-data timeout a connection made by tokio-postgres would
/// have.
pub async fn connect_tcp(
    h: &HostSpec,
    buffer: Option<usize>,
    liveness: &Liveness,
) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match h.hostaddr.as_ref().and_then(|a| a.parse().ok()) {
        Some(ip) => vec![SocketAddr::new(ip, h.port)],
        None => tokio::net::lookup_host((h.host.as_str(), h.port))
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", h.host))?
            .collect(),
    };
    let mut last = format!("{} resolves to no address", h.host);
    for addr in addrs {
        match connect_one(addr, buffer, liveness).await {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("connecting to {addr}: {e}"),
        }
    }
    Err(last)
}

async fn connect_one(
    addr: SocketAddr,
    buffer: Option<usize>,
    liveness: &Liveness,
) -> std::io::Result<TcpStream> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(buffer) = buffer {
        let ask = u32::try_from(buffer / 2).unwrap_or(u32::MAX);
        socket.set_send_buffer_size(ask)?;
        socket.set_recv_buffer_size(ask)?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    let sock = socket2::SockRef::from(&stream);
    if liveness.keepalives {
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(liveness.idle_secs))
            .with_interval(Duration::from_secs(liveness.interval_secs))
            .with_retries(liveness.count);
        sock.set_tcp_keepalive(&keepalive)?;
    }
    if liveness.tcp_user_timeout_ms > 0 {
        sock.set_tcp_user_timeout(Some(Duration::from_millis(liveness.tcp_user_timeout_ms)))?;
    }
    Ok(stream)
}

/// The kernel's `TCP_INFO` on a connected TCP socket, or None where it gives none.
fn tcp_info(socket: &socket2::Socket) -> Option<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: TCP_INFO fills at most `len` bytes of the zeroed struct it is given; a kernel
    // older than a field leaves it zero.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

/// The round trip the kernel measured on a connection that has carried a few exchanges (its
/// handshake, the server's startup, a first question): the least it saw, which a late reply
/// from a busy core does not lengthen, else its smoothed estimate. Free, where asking the
/// server again costs round trips of its own.
pub fn kernel_round_trip(socket: &socket2::Socket) -> Option<Duration> {
    let info = tcp_info(socket)?;
    let us = match info.tcpi_min_rtt {
        0 => info.tcpi_rtt,
        least => least,
    };
    (us > 0).then(|| Duration::from_micros(u64::from(us)))
}

/// The kernel's figures on a connected TCP socket (`TCP_INFO`, and its send buffer), or None
/// where it gives none.
pub fn transport(socket: &socket2::Socket) -> Option<sluice_core::destination::Transport> {
    let info = tcp_info(socket)?;
    Some(sluice_core::destination::Transport {
        connections: 1,
        rtt_us: u64::from(info.tcpi_rtt),
        cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        receive_window: u64::from(info.tcpi_snd_wnd),
        send_buffer: socket.send_buffer_size().map_or(0, |b| b as u64),
        bytes_sent: info.tcpi_bytes_sent,
        bytes_acked: info.tcpi_bytes_acked,
        bytes_retransmitted: info.tcpi_bytes_retrans,
        busy_us: info.tcpi_busy_time,
        rwnd_limited_us: info.tcpi_rwnd_limited,
        sndbuf_limited_us: info.tcpi_sndbuf_limited,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// This machine's: wmem_max 4 MiB, tcp_wmem max 4 MiB.
    const HERE: KernelLimits = KernelLimits {
        wmem_max: 4 * MIB,
        rmem_max: 4 * MIB,
        tcp_wmem: [4096, 16_384, 4 * MIB],
        tcp_rmem: [4096, 131_072, 32 * MIB],
    };

    #[tokio::test]
    async fn a_sized_connection_has_the_buffer_asked_for() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let info = crate::conninfo::ConnInfo::resolve(
            &format!("postgresql://sluice@127.0.0.1:{port}/postgres"),
            &crate::conninfo::ProcessEnv,
        )
        .unwrap();
        let h = &info.hosts[0];
        // 256 KiB: within a stock kernel's wmem_max (208 KiB, doubled).
        let stream = connect_tcp(h, Some(256 << 10), &Liveness::default())
            .await
            .unwrap();
        let sock = socket2::SockRef::from(&stream);
        assert_eq!(sock.send_buffer_size().unwrap(), 256 << 10);
        assert_eq!(sock.recv_buffer_size().unwrap(), 256 << 10);
        assert!(sock.keepalive().unwrap());
    }

    #[test]
    fn a_small_product_leaves_autotuning_alone() {
        let s = size_for(MIB, &HERE);
        assert_eq!((s.streams, s.buffer), (1, None), "{}", s.why);
    }

    #[test]
    fn a_product_past_autotuning_but_within_so_sndbuf_sets_the_buffer() {
        let s = size_for(3 * MIB, &HERE);
        assert_eq!((s.streams, s.buffer), (1, Some(6 * MIB)), "{}", s.why);
    }

    #[test]
    fn a_product_past_one_streams_buffer_asks_for_more_streams_and_says_why() {
        // 200 Mbit/s at 200 ms: a 5 MB product, 10 MB wanted, 8 MiB per stream at most.
        let s = size_for(5_000_000, &HERE);
        assert_eq!((s.streams, s.buffer), (2, Some(8 * MIB)), "{}", s.why);
        assert!(s.why.contains("net.core.wmem_max"), "{}", s.why);
        // Linux's stock limits: SO_SNDBUF cannot beat autotuning's 4 MiB, so none is set.
        let s = size_for(5_000_000, &KernelLimits::LINUX_DEFAULTS);
        assert_eq!((s.streams, s.buffer), (3, None), "{}", s.why);
    }

    /// A TCP connection that has carried an exchange has a round trip the kernel measured,
    /// here a loopback's (well under a millisecond, and never zero).
    #[test]
    fn the_kernel_measures_a_connections_round_trip() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4];
            for _ in 0..3 {
                peer.read_exact(&mut buf).unwrap();
                peer.write_all(&buf).unwrap();
            }
        });
        let stream = std::net::TcpStream::connect(addr).unwrap();
        let socket = socket2::Socket::from(stream);
        let mut buf = [0u8; 4];
        for _ in 0..3 {
            (&socket).write_all(b"ping").unwrap();
            (&socket).read_exact(&mut buf).unwrap();
        }
        echo.join().unwrap();
        let rtt = kernel_round_trip(&socket).expect("a TCP socket has TCP_INFO");
        assert!(
            rtt > Duration::ZERO && rtt < Duration::from_millis(100),
            "{rtt:?}"
        );
    }

    #[test]
    fn auto_sets_a_buffer_only_across_a_long_round_trip() {
        let loopback = auto_buffer(Duration::from_micros(50), &HERE);
        assert_eq!(loopback.buffer, None, "{}", loopback.why);
        let far = auto_buffer(Duration::from_millis(200), &HERE);
        assert_eq!(far.buffer, Some(8 * MIB), "{}", far.why);
        let stock = auto_buffer(Duration::from_millis(200), &KernelLimits::LINUX_DEFAULTS);
        assert_eq!(stock.buffer, None, "{}", stock.why);
    }
}
