//! Named points where a test can kill sluice as `kill -9` would, to prove that every moment
//! of a load is one the next run completes exactly once.
//!
//! `SLUICE_KILL_AT=<point>` makes the process send itself SIGKILL when it first reaches that
//! point: no handler runs, no transaction is rolled back by sluice, no ledger row is updated;
//! what the server sees is a client that vanished. The points are the moments where a crash is
//! hardest to survive: after planning (the job is recorded, nothing loaded), after a chunk's
//! COPY and ledger row (open transactions hold rows), between two streams' COMMITs, inside the
//! publish transaction, after the publish and before the direct streams' COMMITs, and after
//! everything committed but before the job is marked finished. Without the variable, a point
//! is one environment lookup, made once.
//!
//! `SLUICE_PAUSE_AT=<point>:<milliseconds>` makes the process sleep there instead, so that a
//! test can look at the server in that moment (what a reader sees between two commits). At
//! `checking`, where the inputs' check begins, a pause makes the check as slow as a slow disk
//! would, while the load's connection goes on (describes the tables, opens the ledger).

use std::sync::OnceLock;

static KILL_AT: OnceLock<Option<String>> = OnceLock::new();
static PAUSE_AT: OnceLock<Option<(String, u64)>> = OnceLock::new();

/// Dies here, as `kill -9` would, or sleeps, if the test asked for this point.
pub fn point(name: &str) {
    if let Some((_, ms)) = pause().as_ref().filter(|(at, _)| at == name) {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
    if kill_at().as_deref() == Some(name) {
        // SAFETY: sending a signal to our own process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// Whether a test asked to kill or pause the process at the point `name`.
pub fn stops_at(name: &str) -> bool {
    kill_at().as_deref() == Some(name) || pause().as_ref().is_some_and(|(at, _)| at == name)
}

fn pause() -> &'static Option<(String, u64)> {
    PAUSE_AT.get_or_init(|| pause_at(&std::env::var("SLUICE_PAUSE_AT").ok()?))
}

fn kill_at() -> &'static Option<String> {
    KILL_AT.get_or_init(|| std::env::var("SLUICE_KILL_AT").ok())
}

/// `point:milliseconds`.
fn pause_at(spec: &str) -> Option<(String, u64)> {
    let (point, ms) = spec.rsplit_once(':')?;
    Some((point.to_string(), ms.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pause_names_its_point_and_milliseconds() {
        assert_eq!(
            super::pause_at("commit:3000"),
            Some(("commit".into(), 3000))
        );
        assert_eq!(super::pause_at("commit"), None);
        assert_eq!(super::pause_at("commit:soon"), None);
    }
}
