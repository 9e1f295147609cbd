//! Why a load failed: one type whose kinds are the README's exit codes, and whose server
//! failures carry a kind that retries, the ledger and exit codes match on, never their text.
//!
//! The engine returns `Result<_, Failure>`; the command line alone prints a failure and turns
//! its kind into the process's exit code, the same way for every command (ripgrep's habit: one
//! place maps errors to codes).

use sluice_core::error::InputError;
use std::fmt;

/// A failed load (or command), by the exit code it leads to.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags, a malformed target, unknown table or column: exit 2.
    Usage(String),
    /// A rejected row, found by sluice or by the server; nothing committed: exit 3.
    Input(Box<InputError>),
    /// Cannot connect or authenticate, or the private server is not running: exit 4.
    Connect(String),
    /// The server failed for a reason not tied to one row: exit 5.
    Server(ServerFailure),
    /// A local failure: an input that cannot be read, another I/O error, a bug: exit 1.
    Local(String),
    /// Stopped because another stream failed (never reported on its own): exit 1.
    Aborted,
    /// The load committed, with this many rows rejected within `--max-errors`: exit 6. The
    /// summary has said so.
    LoadedWithRejects(u64),
    /// A program run on the user's behalf (a database's own client) exited with this code, which is
    /// passed through; it has said why itself.
    Exited(u8),
}

/// A failure of the server's, not tied to one row, with what kind it is.
#[derive(Debug)]
pub struct ServerFailure {
    pub kind: ServerKind,
    pub message: String,
}

/// What kind of server failure: what a rerun can do about it follows from the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// A connection lost beyond `--retries`, or during a step no retry covers.
    Lost,
    /// A COMMIT failed after some streams had committed: the ledger knows which.
    Commit,
    /// The server's own condition: a full disk, out of memory, too many connections, a
    /// `temp_file_limit`, an I/O or internal error. No row is at fault.
    Condition,
    /// A statement cancelled by another session or an administrator.
    Cancelled,
    /// The publish could not take its locks within its bound.
    Locked,
    /// Anything else the server said.
    Other,
}

impl Failure {
    /// A server failure of kind [`ServerKind::Other`].
    pub fn server(message: impl Into<String>) -> Failure {
        Failure::server_kind(ServerKind::Other, message)
    }

    /// A server failure of the given kind.
    pub fn server_kind(kind: ServerKind, message: impl Into<String>) -> Failure {
        Failure::Server(ServerFailure {
            kind,
            message: message.into(),
        })
    }

    /// Whether a job that failed this way is over: a bad row or a usage error is fixed in the
    /// input or the command, which then loads as a new job; any other failure leaves the job
    /// for the same command to resume.
    pub fn abandons_job(&self) -> bool {
        matches!(self, Failure::Input(_) | Failure::Usage(_))
    }

    /// The server failure's kind, if it is one.
    pub fn server_kind_of(&self) -> Option<ServerKind> {
        match self {
            Failure::Server(s) => Some(s.kind),
            _ => None,
        }
    }

    /// The same failure with `more` appended to its message (for server and connection
    /// failures, which say what became of the load; the others say it themselves).
    pub fn and_then_say(self, more: &str) -> Failure {
        match self {
            Failure::Server(s) => Failure::Server(ServerFailure {
                kind: s.kind,
                message: format!("{}{more}", s.message),
            }),
            Failure::Connect(m) => Failure::Connect(format!("{m}{more}")),
            other => other,
        }
    }

    /// The failure's kind, as reports name it (the command line maps kinds to exit codes).
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

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Connect(m) | Failure::Local(m) => f.write_str(m),
            Failure::Server(s) => write!(f, "server error: {}", s.message),
            Failure::Input(e) => write!(f, "bad row: {e}"),
            Failure::Aborted => f.write_str("stopped because another stream failed"),
            Failure::Exited(code) => write!(f, "exited with code {code}"),
            Failure::LoadedWithRejects(n) => write!(f, "loaded, with {n} row(s) rejected"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_grow_only_where_they_say_what_became_of_the_load() {
        let s = Failure::server_kind(ServerKind::Commit, "COMMIT failed").and_then_say("; x");
        assert_eq!(s.server_kind_of(), Some(ServerKind::Commit));
        assert_eq!(s.to_string(), "server error: COMMIT failed; x");
        let u = Failure::Usage("bad".into()).and_then_say("; x");
        assert_eq!(u.to_string(), "bad");
        assert!(u.abandons_job());
        assert!(!s.abandons_job());
    }
}
