//! Two-phase commit across a load's streams with XA, MariaDB's prepared transactions.
//!
//! PostgreSQL prepares an ordinary transaction under a name chosen at the end; XA names the
//! transaction when it begins (`XA START xid`), so the destination learns the load's prefix
//! before its streams open (`Destination::name_transactions`) and each stream begins under
//! a name of its own. Four facts of MariaDB (10.5.2 and later; MySQL from 5.7.7) shape the
//! rest:
//!
//! - **A prepared branch survives its connection** and a server restart; `XA RECOVER` lists it.
//!   Before those versions a disconnect rolled it back, which would let a crash between two
//!   commits lose a decided stream: such servers are refused the capability.
//! - **Only its own session may finish it while that session lives**: another connection's
//!   `XA COMMIT` then fails with `XAER_NOTA`, as for a name that is not prepared at all. So a
//!   load commits each branch on the connection that prepared it, and a rerun (after a kill,
//!   when the old sessions are gone or going) retries a name `XA RECOVER` still lists for a
//!   bounded while before it says which session holds it.
//! - **`XA RECOVER` is the whole server's**: every database's branches. Each xid carries its
//!   database's name as the branch qualifier (`bqual`), so that job 3 of one database never
//!   finishes job 3 of another.
//! - **Names are bytes**, at most 64 in each part: they are sent as hexadecimal literals, so no
//!   quoting or `sql_mode` changes what they mean.

use mysql_async::prelude::*;
use mysql_async::Conn;
use std::time::{Duration, Instant};

/// The longest part of an xid, in bytes.
pub const MAX_PART: usize = 64;

/// `XAER_NOTA`: no prepared branch of that name that this session may finish.
const XAER_NOTA: u16 = 1397;

/// How long a rerun waits for a dead process's session to let go of a branch it prepared.
pub const RELEASE_WAIT: Duration = Duration::from_secs(15);

/// A branch's name: the engine's transaction name and the database it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xid {
    pub gtrid: String,
    pub bqual: String,
}

impl Xid {
    pub fn new(gtrid: &str, database: &str) -> Xid {
        Xid {
            gtrid: gtrid.to_string(),
            bqual: database.to_string(),
        }
    }

    /// The xid as XA statements take it: two hexadecimal literals.
    fn sql(&self) -> String {
        format!("X'{}', X'{}'", hex(&self.gtrid), hex(&self.bqual))
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Whether the server keeps a prepared branch when its connection ends, from `VERSION()`:
/// MariaDB from 10.5.2, MySQL from 5.7.7. `Err` says why not.
pub fn survives_disconnect(version: &str) -> Result<(), String> {
    // MariaDB behind some proxies and old clients reports `5.5.5-10.11.6-MariaDB`.
    let real = version.strip_prefix("5.5.5-").unwrap_or(version);
    let numbers: Vec<u32> = real
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    let v = (
        numbers[0],
        *numbers.get(1).unwrap_or(&0),
        *numbers.get(2).unwrap_or(&0),
    );
    let (least, name) = match version.contains("MariaDB") {
        true => ((10, 5, 2), "MariaDB 10.5.2"),
        false => ((5, 7, 7), "MySQL 5.7.7"),
    };
    match v >= least {
        true => Ok(()),
        false => Err(format!(
            "this server ({version}) rolls back a prepared XA transaction when its connection \
             ends (kept from {name}), so a crash between two commits could lose a decided \
             stream"
        )),
    }
}

/// Begins the session's transaction as branch `xid`.
pub async fn start(conn: &mut Conn, xid: &Xid) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("XA START {}", xid.sql())).await
}

/// Ends and prepares branch `xid`: from here on it waits for `XA COMMIT` or `XA ROLLBACK`.
pub async fn prepare(conn: &mut Conn, xid: &Xid) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("XA END {}", xid.sql())).await?;
    conn.query_drop(format!("XA PREPARE {}", xid.sql())).await
}

/// Commits branch `xid` without preparing it (a load that does not prepare).
pub async fn commit_one_phase(conn: &mut Conn, xid: &Xid) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("XA END {}", xid.sql())).await?;
    conn.query_drop(format!("XA COMMIT {} ONE PHASE", xid.sql()))
        .await
}

/// Ends branch `xid`, not prepared, and rolls it back.
pub async fn end_and_roll_back(conn: &mut Conn, xid: &Xid) -> Result<(), mysql_async::Error> {
    conn.query_drop(format!("XA END {}", xid.sql())).await?;
    conn.query_drop(format!("XA ROLLBACK {}", xid.sql())).await
}

/// Commits (or rolls back) prepared branch `xid` on the session that prepared it.
pub async fn finish(conn: &mut Conn, xid: &Xid, commit: bool) -> Result<(), mysql_async::Error> {
    let verb = if commit { "COMMIT" } else { "ROLLBACK" };
    conn.query_drop(format!("XA {verb} {}", xid.sql())).await
}

/// Commits (or rolls back) prepared branch `xid` from any session: a name no longer prepared
/// is done already; one still listed but held by a session that has not gone yet (a killed
/// process's, whose disconnect the server has not seen) is tried again for up to `wait`.
pub async fn finish_detached(
    conn: &mut Conn,
    xid: &Xid,
    commit: bool,
    wait: Duration,
) -> Result<(), FinishError> {
    let deadline = Instant::now() + wait;
    loop {
        let e = match finish(conn, xid, commit).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if !matches!(&e, mysql_async::Error::Server(s) if s.code == XAER_NOTA) {
            return Err(FinishError::Db(e));
        }
        if !recover(conn, &xid.bqual).await?.contains(&xid.gtrid) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(FinishError::Held(xid.gtrid.clone()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Why a prepared branch could not be finished.
#[derive(Debug, thiserror::Error)]
pub enum FinishError {
    #[error(transparent)]
    Db(#[from] mysql_async::Error),
    #[error(
        "the prepared XA transaction {0} is still held by a session of the server (a load's \
         connection that has not ended yet): run the same command again once it has ended, \
         or end it (SHOW PROCESSLIST, KILL)"
    )]
    Held(String),
}

/// The prepared branches of database `bqual`, by transaction name (`XA RECOVER`).
pub async fn recover(conn: &mut Conn, bqual: &str) -> Result<Vec<String>, mysql_async::Error> {
    let rows: Vec<(i64, usize, usize, Vec<u8>)> = conn.query("XA RECOVER").await?;
    Ok(rows
        .into_iter()
        .filter_map(|(_, g, b, data)| split(&data, g, b))
        .filter(|(_, q)| q == bqual)
        .map(|(g, _)| g)
        .collect())
}

/// `XA RECOVER`'s `data` (the two parts end to end) split by their lengths.
fn split(data: &[u8], gtrid: usize, bqual: usize) -> Option<(String, String)> {
    let g = data.get(..gtrid)?;
    let b = data.get(gtrid..gtrid + bqual)?;
    Some((
        String::from_utf8(g.to_vec()).ok()?,
        String::from_utf8(b.to_vec()).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xid_is_two_hexadecimal_literals() {
        let x = Xid::new("sluice_3_1", "d'b");
        assert_eq!(x.sql(), "X'736c756963655f335f31', X'642762'");
    }

    #[test]
    fn recover_data_splits_by_the_lengths() {
        let data = b"sluice_1_9_2db1";
        assert_eq!(
            split(data, 12, 3),
            Some(("sluice_1_9_2".into(), "db1".into()))
        );
        assert_eq!(split(data, 12, 9), None);
    }

    #[test]
    fn old_servers_roll_back_on_disconnect() {
        assert!(survives_disconnect("10.11.19-MariaDB-0+deb12u1").is_ok());
        assert!(survives_disconnect("10.5.2-MariaDB").is_ok());
        assert!(survives_disconnect("10.4.30-MariaDB").is_err());
        assert!(survives_disconnect("8.0.36").is_ok());
        assert!(survives_disconnect("5.7.6-log").is_err());
        assert!(survives_disconnect("").is_err());
        assert!(survives_disconnect("5.5.5-10.11.6-MariaDB").is_ok());
    }
}
