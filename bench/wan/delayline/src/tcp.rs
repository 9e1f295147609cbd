//! One TCP stream across a path, from the client's namespace to a receiver on the server's
//! side: what it moved per second once past its start, and what the sender's kernel said of
//! the path meanwhile (`TCP_INFO`: the window the receiver advertised, the smoothed RTT).
//! With a small socket buffer at either end the stream is window-bound and should move
//! window / RTT, which is how the delay line proves itself.

use socket2::{Domain, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Socket buffer sizes to ask for (`SO_SNDBUF` on the sender, `SO_RCVBUF` on the receiver);
/// None leaves the kernel's autotuning.
#[derive(Clone, Copy, Debug, Default)]
pub struct Buffers {
    pub send: Option<usize>,
    pub receive: Option<usize>,
}

/// What one stream did after its warm-up.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub bytes_per_s: f64,
    /// The median window the receiver advertised (`tcpi_snd_wnd`), bytes.
    pub peer_window: u32,
    /// The median smoothed RTT the sender saw (`tcpi_rtt`).
    pub rtt: Duration,
    /// The median congestion window, bytes (`tcpi_snd_cwnd` times the MSS).
    pub cwnd_bytes: u64,
}

/// The sender's kernel's view of a TCP socket.
pub fn tcp_info(fd: i32) -> io::Result<libc::tcp_info> {
    // SAFETY: TCP_INFO fills at most `len` bytes of the struct it is given.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

const BOUND: Duration = Duration::from_secs(10);

fn median<T: Ord + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Sends for `seconds` from namespace `ns` to `server`; the rate counts from `warmup` on.
pub fn one_stream(
    ns: &str,
    server: Ipv4Addr,
    buffers: Buffers,
    seconds: f64,
    warmup: f64,
) -> io::Result<Measured> {
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(size) = buffers.receive {
        // Before listen, so that the window scale offered fits the buffer.
        listener.set_recv_buffer_size(size)?;
    }
    listener.bind(&SocketAddr::from((server, 0)).into())?;
    listener.listen(1)?;
    let to = listener
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("no address"))?;
    let receiver = std::thread::spawn(move || receive(listener, warmup));
    let sent = crate::tun::in_namespace(ns, move || send(to, buffers.send, seconds, warmup));
    let rate = receiver
        .join()
        .map_err(|_| io::Error::other("the receiver panicked"))??;
    let samples = sent?;
    Ok(Measured {
        bytes_per_s: rate,
        peer_window: median(samples.iter().map(|s| s.0).collect()),
        rtt: Duration::from_micros(median(samples.iter().map(|s| s.1).collect()) as u64),
        cwnd_bytes: median(samples.iter().map(|s| s.2).collect()),
    })
}

/// Accepts one connection and reads it to the end; the rate from `warmup` after its first
/// byte to its last.
fn receive(listener: Socket, warmup: f64) -> io::Result<f64> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + BOUND;
    let (conn, _) = loop {
        match listener.accept() {
            Ok(c) => break c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e),
        }
    };
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(BOUND))?;
    let mut conn: std::net::TcpStream = conn.into();
    let mut buf = vec![0u8; 1 << 20];
    let (mut total, mut first, mut mark, mut last) = (0u64, None, None, Instant::now());
    loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        last = Instant::now();
        let start = *first.get_or_insert(last);
        if mark.is_none() && (last - start).as_secs_f64() >= warmup {
            mark = Some((last, total));
        }
        total += n as u64;
    }
    let (at, before) = mark.ok_or_else(|| io::Error::other("the stream ended in its warm-up"))?;
    Ok((total - before) as f64 / (last - at).as_secs_f64().max(1e-9))
}

/// Connects and writes for `seconds`, sampling `TCP_INFO` every 20 ms after the warm-up:
/// (advertised window, RTT in µs, congestion window in bytes).
fn send(
    to: SocketAddr,
    send_buffer: Option<usize>,
    seconds: f64,
    warmup: f64,
) -> io::Result<Vec<(u32, u32, u64)>> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(size) = send_buffer {
        socket.set_send_buffer_size(size)?;
    }
    socket.connect_timeout(&to.into(), BOUND)?;
    socket.set_write_timeout(Some(BOUND))?;
    let mut stream: std::net::TcpStream = socket.into();
    let chunk = vec![0x5au8; 64 << 10];
    let start = Instant::now();
    let (mut samples, mut sampled) = (Vec::new(), start);
    while start.elapsed().as_secs_f64() < seconds {
        stream.write_all(&chunk)?;
        let now = Instant::now();
        if (now - start).as_secs_f64() >= warmup && now - sampled >= Duration::from_millis(20) {
            let i = tcp_info(stream.as_raw_fd())?;
            samples.push((
                i.tcpi_snd_wnd,
                i.tcpi_rtt,
                i.tcpi_snd_cwnd as u64 * i.tcpi_snd_mss as u64,
            ));
            sampled = now;
        }
    }
    Ok(samples)
}
