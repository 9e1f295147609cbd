//! Ctrl-C and SIGTERM during a load: never in the middle of the commit.
//!
//! Before the commit barrier, stopping is safe: each stream's transaction rolls back when its
//! connection closes, so the handler says that nothing was committed and lets the signal end
//! the process as it would have. During the back-to-back COMMITs, dying would leave some
//! streams committed and others not; the handler then only records the signal, and the load
//! finishes its COMMITs (milliseconds) and reports. A second signal ends the process at once.
//! The handler touches atomics and calls `write`, `signal` and `raise`, which are
//! async-signal-safe. A SIGBUS (a memory-mapped input truncated under sluice) is reported and
//! ends the process with exit 1.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// How many commit phases are open (they nest: the stage strategy's publish holds one around
/// the direct streams' commits).
static COMMITTING: AtomicUsize = AtomicUsize::new(0);
static DEFERRED: AtomicI32 = AtomicI32::new(0);

fn say(msg: &[u8]) {
    // SAFETY: write(2) on stderr with a valid buffer is async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    if COMMITTING.load(Ordering::SeqCst) > 0
        && DEFERRED
            .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        say(b"\nsluice: interrupted during the commit: finishing it first, so that the load is not half committed (signal again to stop at once)\n");
        return;
    }
    if COMMITTING.load(Ordering::SeqCst) == 0 {
        say(b"\nsluice: interrupted: nothing was committed by this run (every open transaction rolls back; staging tables it finished, if any, wait for the run that resumes it)");
        match RESUME_HINT.get() {
            Some(hint) => {
                say(b"; ");
                say(hint);
                say(b"\n");
            }
            None => say(b"\n"),
        }
    }
    // SAFETY: restoring the default action and raising the signal again ends the process as
    // the signal would have; both calls are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// A SIGBUS is a memory-mapped input that shrank between the size check of its window and the
/// read: say so and end with exit 1 (a local failure), as a failed read would, rather than
/// crash. Open transactions roll back as the connections close.
extern "C" fn on_bus_error(_sig: libc::c_int) {
    say(b"\nerror: an input file was truncated while sluice read it (SIGBUS on its memory map): an input must not shrink during a load; nothing was committed to the tables\n");
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(1) }
}

/// What to tell the user to do after an interruption (resume the job), set once the job is
/// known; read by the handler (a `OnceLock` read is an atomic load).
static RESUME_HINT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Sets what an interrupted load tells the user to do next.
pub fn set_resume_hint(hint: &str) {
    let _ = RESUME_HINT.set(hint.as_bytes().to_vec());
}

/// Installs the handler for SIGINT and SIGTERM (once per process is enough; again is harmless).
pub fn install() {
    // SAFETY: `on_bus_error` only writes to stderr and calls `_exit`.
    unsafe {
        libc::signal(
            libc::SIGBUS,
            on_bus_error as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an extern "C" fn that only does async-signal-safe work.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// The commit phase begins: a signal received from now on is deferred until it ends.
pub fn enter_commit() {
    COMMITTING.fetch_add(1, Ordering::SeqCst);
}

/// The commit phase ends; whether a signal was deferred during it.
pub fn leave_commit() -> bool {
    COMMITTING.fetch_sub(1, Ordering::SeqCst);
    DEFERRED.load(Ordering::SeqCst) != 0
}
