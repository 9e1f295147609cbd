//! The command line's side of failures: the engine's [`Failure`] (whose kinds are the README's
//! exit codes, decided in main.rs alone), and how errors from the command line's own libraries
//! become one. An `anyhow` chain is classified by the first typed cause it holds (a malformed
//! target is usage, a connection error is "cannot connect", a server error is a server
//! failure unless it says the command cannot work as given, which is usage) and is otherwise
//! a local failure.

pub use sluice_engine::failure::Failure;

/// A usage error raised inside `anyhow` code, so that [`from_anyhow`] can tell it apart.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The failure an `anyhow` chain stands for.
pub fn from_anyhow(e: anyhow::Error) -> Failure {
    let text = format!("{e:#}");
    for cause in e.chain() {
        if cause.is::<UsageError>() || cause.is::<crate::target::BadTarget>() {
            return Failure::Usage(text);
        }
        if cause.is::<sluice_postgres::connect::ConnectError>()
            || cause.is::<sluice_postgres::cluster::ClusterError>()
            || cause.is::<sluice_postgres::admin::AdminError>()
        {
            return Failure::Connect(text);
        }
        if let Some(m) = cause.downcast_ref::<sluice_mariadb::admin::AdminError>() {
            return from_mariadb(m, text);
        }
        if cause.is::<sluice_mariadb::connect::ConnectError>() {
            return Failure::Connect(text);
        }
        if let Some(pg) = cause.downcast_ref::<sluice_postgres::admin::DbError>() {
            return match pg.as_db_error() {
                Some(db) if is_the_commands_fault(db.code().code()) => Failure::Usage(text),
                Some(_) => Failure::server(text),
                None => Failure::Connect(text),
            };
        }
    }
    Failure::Local(text)
}

/// A MariaDB command's failure: usage where the server says the command cannot work as given
/// (no privilege, no such database, the table exists), "cannot connect" for the connection,
/// else the server's.
fn from_mariadb(e: &sluice_mariadb::admin::AdminError, text: String) -> Failure {
    use sluice_core::destination::ErrorKind;
    use sluice_mariadb::admin::AdminError;
    match e {
        AdminError::Server {
            kind: ErrorKind::Usage,
            ..
        } => Failure::Usage(text),
        AdminError::Server {
            kind: ErrorKind::Connection,
            ..
        }
        | AdminError::Connect(_) => Failure::Connect(text),
        AdminError::Server { .. } => Failure::server(text),
        AdminError::Runtime(_) => Failure::Local(text),
    }
}

/// Whether a server error says the command cannot work as given, whatever the server's state:
/// an object that exists already or not at all, a privilege the role lacks, a schema or
/// database that is not there (SQLSTATE classes 42, 3D and 3F). Running the same command again
/// would fail the same way, so it is a usage error (exit 2), not a server failure (exit 5,
/// "the same command resumes").
fn is_the_commands_fault(sqlstate: &str) -> bool {
    ["42", "3D", "3F"].iter().any(|c| sqlstate.starts_with(c))
}

/// The private cluster failing in `sluice pg` is that command's own, local failure (a load that
/// needed the cluster says "cannot connect" instead, through the `anyhow` path).
pub fn from_cluster(e: sluice_postgres::cluster::ClusterError) -> Failure {
    Failure::Local(e.to_string())
}

/// `?` for `anyhow` results in commands that return a [`Failure`].
pub trait OrFailure<T> {
    fn or_fail(self) -> Result<T, Failure>;
}

impl<T> OrFailure<T> for anyhow::Result<T> {
    fn or_fail(self) -> Result<T, Failure> {
        self.map_err(from_anyhow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anyhow_chains_are_classified_by_their_typed_cause() {
        let usage = anyhow::Error::new(UsageError("--part 9 is outside 1..=4".into()));
        assert!(matches!(from_anyhow(usage), Failure::Usage(_)));
        let io = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        match from_anyhow(io) {
            Failure::Local(m) => assert_eq!(m, "writing x: disk full"),
            other => panic!("{other:?}"),
        }
        let target = anyhow::Error::new(crate::target::BadTarget("invalid port".into()));
        assert!(matches!(from_anyhow(target), Failure::Usage(_)));
    }
}
