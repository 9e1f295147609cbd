//! A delay line for testing sluice across a wide-area network on one machine.
//!
//! This kernel has `tbf` but no `netem`, so nothing in the kernel can hold a packet for a
//! round trip. A TCP proxy would not do either: it ends the connection in the middle, and the
//! sender's window would no longer see the round trip. So the delay is done in user space, at
//! the packet level: a network namespace of its own (the client's side) and the current one
//! (the server's side) each get a TUN device, and [`line`] carries every IP packet from one
//! to the other after holding it for half the round trip, optionally at a limited rate, with
//! a bounded queue (a full queue drops, as a router's would).
//!
//! [`path::Path`] sets the whole thing up and tears it down on drop; [`tcp`] measures one TCP
//! stream across it (the delay line's own proof: window / RTT when the window is the limit).
//! This crate is a dev tool: sluice's shipped binary does not depend on it.

pub mod line;
pub mod path;
pub mod tcp;
pub mod tun;
