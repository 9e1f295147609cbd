//! TUN devices (`/dev/net/tun`, layer 3, no packet information header), created in the
//! network namespace the caller names, by a short-lived thread that enters it: a thread's
//! namespace is its own, so the rest of the process stays where it was.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates the TUN device `name` in the current thread's namespace; it lives as long as the
/// returned file is open.
pub fn create(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("device name {name:?}: 1 to 15 bytes"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which IfReq lays out.
    if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Runs `f` on a thread that has entered the named network namespace (`ip netns` names it
/// under /var/run/netns); the caller's own threads stay where they are.
pub fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let target = File::open(&path)?;
        // SAFETY: setns on an open namespace file; it changes this thread only.
        if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// Creates a TUN device inside the named namespace.
pub fn create_in(ns: &str, name: &str) -> io::Result<File> {
    let name = name.to_string();
    in_namespace(ns, move || create(&name))
}
