//! Why a command failed: one type for every command, whose kinds are the README's exit codes.
//!
//! Commands return `Result<(), Failure>`; main.rs alone prints the failure and turns its kind
//! into the process's exit code, the same way for every command (ripgrep's habit: one place
//! maps errors to codes). Errors from libraries arrive through `From`: an `anyhow` chain is
//! classified by the first typed cause it holds (a malformed target is usage, a connection
//! error is "cannot connect", a server error is a server failure) and is otherwise a local
//! failure.

use sluice_core::error::InputError;
use std::fmt;

/// A failed command, by the exit code it leads to.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags, a malformed target, unknown table or column: exit 2.
    Usage(String),
    /// A rejected row, found by sluice or by the server; nothing committed: exit 3.
    Input(Box<InputError>),
    /// Cannot connect or authenticate, or the private cluster is not running: exit 4.
    Connect(String),
    /// The server failed for a reason not tied to one row: exit 5.
    Server(String),
    /// A local failure: an input that cannot be read, another I/O error, a bug: exit 1.
    Local(String),
    /// Stopped because another stream failed (never reported on its own): exit 1.
    Aborted,
    /// The load committed, with this many rows rejected within `--max-errors`: exit 6. The
    /// summary has said so.
    LoadedWithRejects(u64),
    /// A program run on the user's behalf (`sluice pg psql`) exited with this code, which is
    /// passed through; it has said why itself.
    Exited(u8),
}

impl Failure {
    /// Whether a job that failed this way is over: a bad row or a usage error is fixed in the
    /// input or the command, which then loads as a new job; any other failure leaves the job
    /// for the same command to resume.
    pub fn abandons_job(&self) -> bool {
        matches!(self, Failure::Input(_) | Failure::Usage(_))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Connect(m) | Failure::Local(m) => f.write_str(m),
            Failure::Server(m) => write!(f, "server error: {m}"),
            Failure::Input(e) => write!(f, "bad row: {e}"),
            Failure::Aborted => f.write_str("stopped because another stream failed"),
            Failure::Exited(code) => write!(f, "exited with code {code}"),
            Failure::LoadedWithRejects(n) => write!(f, "loaded, with {n} row(s) rejected"),
        }
    }
}

impl Failure {
    /// The failure's kind, as reports name it (main.rs maps kinds to exit codes).
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Usage(_) => "usage",
            Failure::Input(_) => "bad_row",
            Failure::Connect(_) => "connect",
            Failure::Server(_) => "server",
            Failure::Local(_) | Failure::Aborted => "local",
            Failure::Exited(_) => "exited",
            Failure::LoadedWithRejects(_) => "rejected",
        }
    }
}

/// A usage error raised inside `anyhow` code, so that [`Failure::from`] can tell it apart.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        let text = format!("{e:#}");
        for cause in e.chain() {
            if cause.is::<UsageError>() || cause.is::<crate::target::BadTarget>() {
                return Failure::Usage(text);
            }
            if cause.is::<sluice_postgres::connect::ConnectError>()
                || cause.is::<sluice_postgres::cluster::ClusterError>()
            {
                return Failure::Connect(text);
            }
            if cause.is::<sluice_postgres::admin::AdminError>() {
                return Failure::Connect(text);
            }
            if let Some(pg) = cause.downcast_ref::<sluice_postgres::admin::DbError>() {
                return if pg.as_db_error().is_some() {
                    Failure::Server(text)
                } else {
                    Failure::Connect(text)
                };
            }
        }
        Failure::Local(text)
    }
}

/// The private cluster failing in `sluice pg` is that command's own, local failure (a load that
/// needed the cluster says "cannot connect" instead, through the `anyhow` path).
impl From<sluice_postgres::cluster::ClusterError> for Failure {
    fn from(e: sluice_postgres::cluster::ClusterError) -> Failure {
        Failure::Local(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anyhow_chains_are_classified_by_their_typed_cause() {
        let usage = anyhow::Error::new(UsageError("--part 9 is outside 1..=4".into()));
        assert!(matches!(Failure::from(usage), Failure::Usage(_)));
        let io = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        match Failure::from(io) {
            Failure::Local(m) => assert_eq!(m, "writing x: disk full"),
            other => panic!("{other:?}"),
        }
        let target = anyhow::Error::new(crate::target::BadTarget("invalid port".into()));
        assert!(matches!(Failure::from(target), Failure::Usage(_)));
    }
}
