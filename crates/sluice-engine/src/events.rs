//! What a load tells its caller while it runs, and what it asks of it.
//!
//! The engine never prints: it reports through [`Host::event`], and the command line decides
//! how each event looks (a progress bar, a line on stderr, nothing under `-q` for narration).
//! Some moments need the host's cooperation rather than its attention: the commit phase, during
//! which an interruption must wait (a Ctrl-C between two COMMITs would leave a load half
//! committed), and named points where a test may end the process as `kill -9` would. Both go
//! through the same trait, so that a library caller (or an engine test) decides what they do.

use crate::chunk::Counters;
use std::sync::Arc;

/// Something the load says.
#[derive(Debug)]
pub enum Event<'a> {
    /// Narration of what the load is doing (what `-q` silences).
    Info(String),
    /// An outcome or a decision the user must see whatever `-q` says: files skipped, nothing
    /// to load, a fallback, an interrupted commit that finished.
    Notice(String),
    /// Something went wrong but the load goes on, or a degraded mode (no ledger, a retry).
    Warning(String),
    /// The load runs as job `id` of the ledger: an interruption from now on is resumed by the
    /// same command.
    Job { id: i64 },
    /// The streams start; the counters move as they load.
    Progress(&'a Progress),
    /// The streams have stopped (progress displays end here).
    ProgressDone,
    /// A named moment of the load (after planning, between two COMMITs, inside the publish...),
    /// where a test may stop the process to prove that every moment is one the next run
    /// completes exactly once.
    Point(&'static str),
}

/// What a progress display needs: each table's name, its input bytes and chunks, and the
/// counters the streams update.
#[derive(Debug)]
pub struct Progress {
    pub tables: Vec<String>,
    pub bytes: Vec<u64>,
    pub chunks: Vec<u64>,
    pub counters: Arc<Vec<Counters>>,
    /// `loading`, or `checking` for a dry run.
    pub verb: &'static str,
}

/// The caller of a load: it hears the events and guards the commit phase.
pub trait Host: Sync {
    /// One event.
    fn event(&self, event: Event<'_>);

    /// The commit phase begins (phases nest: the stage publish holds one around the direct
    /// streams' commits): an interruption from now on must wait for [`Host::commit_ends`].
    fn commit_begins(&self) {}

    /// The commit phase ends; whether an interruption arrived during it (and waited).
    fn commit_ends(&self) -> bool {
        false
    }

    /// Whether the host stops at the named [`Event::Point`] (a test that kills or pauses the
    /// load there). The load then makes sure the point falls where its name says: the commits
    /// that otherwise go out together go in turn, with `commit` between the first and the rest.
    fn stops_at(&self, _point: &str) -> bool {
        false
    }
}

/// A host that ignores everything: for callers that only want the result.
pub struct Silent;

impl Host for Silent {
    fn event(&self, _event: Event<'_>) {}
}

/// The commit phase, held while it lives.
pub struct CommitPhase<'h> {
    host: &'h dyn Host,
    ended: bool,
}

impl<'h> CommitPhase<'h> {
    pub fn begin(host: &'h dyn Host) -> CommitPhase<'h> {
        host.commit_begins();
        CommitPhase { host, ended: false }
    }

    /// Ends the phase; whether an interruption waited for it.
    pub fn end(mut self) -> bool {
        self.ended = true;
        self.host.commit_ends()
    }
}

impl Drop for CommitPhase<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.host.commit_ends();
        }
    }
}
