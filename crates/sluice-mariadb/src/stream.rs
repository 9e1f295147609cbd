//! One connection's transaction of `LOAD DATA LOCAL INFILE` statements, committed only when the
//! caller says so.
//!
//! Each chunk is one `LOAD DATA LOCAL` of the canonical stream (`types::convert`): the
//! statement runs on a task of the runtime while the caller sends the chunk's bytes through a
//! bounded channel that feeds the driver's per-connection LOCAL INFILE handler. Three facts
//! shape the rest:
//!
//! - **LOCAL implies IGNORE** (MDEV-11235): the server does not stop at a bad value, it stores
//!   something else and raises a *warning*. So every warning of the statement is an error here
//!   (the warning trap), named by the record it gives ("at row N"), and the rows the server
//!   says it stored must equal the records sent.
//! - **A stream that fails still ends the LOAD**: when the data stops with an error, the driver
//!   sends the end of the file and the server commits the statement with what it had. So every
//!   load runs inside an explicit transaction (`START TRANSACTION` when the stream opens, or
//!   `XA START` when the load prepares its streams) that only [`Stream::commit`] commits (or
//!   [`Stream::prepare`] prepares); an abandoned chunk makes the whole stream unusable, and
//!   dropping it (closing the connection) rolls everything back.
//! - **The session is sluice's**: `sql_mode` is the server's own minus `NO_BACKSLASH_ESCAPES`
//!   (so the statement's `ESCAPED BY '\\'` means one backslash), so that the strict-mode
//!   rules that apply are the server's configured ones.
//! - **A LOAD only writes**, so the driver notices that the server ended the session (`KILL`,
//!   a restart) only when a write fails, which can take the kernel minutes. The watch notices
//!   it in the process list (`watchdog.rs`, [`Vanished`](crate::watchdog::Vanished)); sending
//!   and finishing give the LOAD up then, as a lost connection.

use crate::catalog::quote_ident;
use crate::connect::{connect, ConnectError};
use crate::conninfo::ConnInfo;
use crate::watchdog::{Gone, Watched};
use crate::xa::{self, Xid};
use bytes::Bytes;
use futures_util::StreamExt;
use mysql_async::prelude::*;
use mysql_async::Conn;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Chunks of data the channel holds before `send` waits for the server.
const CHANNEL_DEPTH: usize = 4;

/// What the server said about a statement: its code, SQLSTATE and message, or a warning the
/// trap caught (with the record it names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerError {
    /// MariaDB's error code (0 when the failure is the client's, or the connection's).
    pub code: u16,
    pub message: String,
    /// The 1-based record of the statement a warning names ("at row N").
    pub record: Option<u64>,
    /// The column a warning names.
    pub column: Option<String>,
    /// The connection is gone (or was never there).
    pub lost: bool,
    /// Set when the error is a trapped warning rather than an error of the statement.
    pub warning: bool,
}

impl ServerError {
    pub fn from_driver(e: &mysql_async::Error) -> ServerError {
        match e {
            mysql_async::Error::Server(s) => ServerError {
                code: s.code,
                message: format!(
                    "{} (MariaDB error {}, SQLSTATE {})",
                    s.message, s.code, s.state
                ),
                record: at_row(&s.message),
                column: for_column(&s.message),
                lost: false,
                warning: false,
            },
            mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => ServerError {
                code: 0,
                message: format!("the connection failed: {e}"),
                record: None,
                column: None,
                lost: true,
                warning: false,
            },
            other => ServerError::client(other.to_string()),
        }
    }

    pub fn client(message: impl Into<String>) -> ServerError {
        ServerError {
            code: 0,
            message: message.into(),
            record: None,
            column: None,
            lost: false,
            warning: false,
        }
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// `N` of "... at row N" in a MariaDB message.
pub fn at_row(message: &str) -> Option<u64> {
    let rest = message.rsplit_once(" at row ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The column of "... for column 'c' ..." or "... for column `db`.`t`.`c` ...".
pub fn for_column(message: &str) -> Option<String> {
    let rest = message.split_once("for column ")?.1;
    if let Some(r) = rest.strip_prefix('\'') {
        return Some(r.split('\'').next()?.to_string());
    }
    // `db`.`t`.`c`: the last quoted part before the next space.
    let path = rest.split(' ').next()?;
    let last = path.rsplit('.').next()?;
    Some(last.trim_matches('`').to_string())
}

/// A connection inside its transaction.
pub struct Stream {
    /// `None` while a LOAD owns it (it comes back with the LOAD's result), or after it failed.
    conn: Option<Conn>,
    /// The server's id of this connection, for the watch and `KILL`.
    pub id: u32,
    /// The XA branch the transaction began as, when the load prepares its streams.
    xid: Option<Xid>,
}

/// A `LOAD DATA LOCAL` in progress: the channel its data goes through, and the statement's
/// task, which gives the connection back.
pub struct Load {
    tx: Option<mpsc::Sender<std::io::Result<Bytes>>>,
    task: Option<JoinHandle<(Conn, Result<Outcome, ServerError>)>>,
    /// Records sent (lines of the canonical stream).
    pub records: u64,
    /// Where the watch says that the session has left the server.
    watched: Arc<Watched>,
    /// The session's id.
    id: u32,
}

/// What a LOAD did, by the server's count.
struct Outcome {
    affected: u64,
    warnings: Vec<(String, u16, String)>,
    warning_count: u16,
}

impl Stream {
    /// Connects, makes the session sluice's, and opens the transaction: as XA branch `xid`
    /// when the load prepares its streams (`xa.rs`), else a plain one.
    pub async fn open(info: &ConnInfo, xid: Option<Xid>) -> Result<Stream, StreamOpenError> {
        let mut conn = connect(info).await?;
        let id = conn.id();
        conn.query_drop(
            "SET SESSION sql_mode = TRIM(BOTH ',' FROM \
             REPLACE(CONCAT(',', @@GLOBAL.sql_mode, ','), ',NO_BACKSLASH_ESCAPES,', ',')), \
             SESSION sql_notes = 1, SESSION max_error_count = 64",
        )
        .await
        .map_err(|e| StreamOpenError::Server(ServerError::from_driver(&e)))?;
        let begun = match &xid {
            Some(xid) => xa::start(&mut conn, xid).await,
            None => conn.query_drop("START TRANSACTION").await,
        };
        begun.map_err(|e| StreamOpenError::Server(ServerError::from_driver(&e)))?;
        Ok(Stream {
            conn: Some(conn),
            id,
            xid,
        })
    }

    fn conn(&mut self) -> Result<&mut Conn, ServerError> {
        self.conn.as_mut().ok_or_else(|| {
            ServerError::client(
                "this stream's connection was given up after a failed LOAD; its transaction is \
                 rolled back",
            )
        })
    }

    /// Runs SQL in the stream's transaction.
    pub async fn execute(&mut self, sql: &str) -> Result<(), ServerError> {
        self.conn()?
            .query_drop(sql)
            .await
            .map_err(|e| ServerError::from_driver(&e))
    }

    /// Runs a statement with parameters in the stream's transaction.
    pub async fn exec(
        &mut self,
        sql: &str,
        params: mysql_async::Params,
    ) -> Result<(), ServerError> {
        self.conn()?
            .exec_drop(sql, params)
            .await
            .map_err(|e| ServerError::from_driver(&e))
    }

    /// Starts `LOAD DATA LOCAL INFILE` into `relation`'s `columns`; the data follows through
    /// [`Load::send`]. `watched` says when the session has left the server.
    pub fn load(
        &mut self,
        relation: &str,
        columns: &[String],
        watched: Arc<Watched>,
    ) -> Result<Load, ServerError> {
        let mut conn = self.conn.take().ok_or_else(|| {
            ServerError::client("this stream's connection was given up after a failed LOAD")
        })?;
        let tx = infile_channel(&mut conn);
        let sql = load_statement(relation, columns);
        let task = tokio::spawn(async move {
            let result = run_load(&mut conn, &sql).await;
            (conn, result)
        });
        Ok(Load {
            tx: Some(tx),
            task: Some(task),
            records: 0,
            watched,
            id: self.id,
        })
    }

    /// Ends a LOAD: waits for the server's answer and springs the warning trap. The connection
    /// comes back to the stream when the statement ended cleanly or with the server's own
    /// error (its transaction still open); after a failure of the data or a trapped warning
    /// it is kept too, since the transaction (never committed) can still be rolled back to a
    /// savepoint, and is rolled back whole when the stream is dropped.
    ///
    /// When the session has left the server, the LOAD is given up (its connection closed on
    /// this side) and the error is a lost connection.
    pub async fn finish(&mut self, mut load: Load) -> Result<u64, ServerError> {
        drop(load.tx.take());
        let mut task = load.task.take().expect("a LOAD is finished once");
        let ended = tokio::select! {
            biased;
            ended = &mut task => ended,
            how = load.watched.vanished.wait(load.id) => {
                // The task's connection closes on this side; its transaction, never
                // committed (every LOAD runs inside one), is the server's to roll back.
                task.abort();
                load.watched.vanished.abandoned(load.id, how);
                return Err(vanished(load.id, how));
            }
        };
        let (conn, result) = match ended {
            Ok(r) => r,
            Err(e) => return Err(ServerError::client(format!("the LOAD's task failed: {e}"))),
        };
        self.conn = Some(conn);
        let outcome = result?;
        check_outcome(&outcome, load.records)
    }

    /// Commits the transaction (an XA branch in one phase).
    pub async fn commit(&mut self) -> Result<(), ServerError> {
        match self.xid.clone() {
            Some(xid) => xa::commit_one_phase(self.conn()?, &xid)
                .await
                .map_err(|e| ServerError::from_driver(&e)),
            None => self.execute("COMMIT").await,
        }
    }

    /// Prepares the XA branch the stream began as, and gives up its connection, whose session
    /// alone may commit the branch while it lives (`xa.rs`).
    pub async fn prepare(&mut self) -> Result<(Xid, Conn), ServerError> {
        let Some(xid) = self.xid.clone() else {
            return Err(ServerError::client(
                "this stream did not begin as an XA transaction: it cannot be prepared",
            ));
        };
        xa::prepare(self.conn()?, &xid)
            .await
            .map_err(|e| ServerError::from_driver(&e))?;
        let conn = self.conn.take().expect("used above");
        Ok((xid, conn))
    }

    /// Ends the transaction the stream is in, which holds nothing yet (an XA branch is ended
    /// and rolled back), so that DDL can run: each statement of it commits on its own, and
    /// none may run inside an XA branch. The stream's later transactions are plain ones
    /// ([`begin`](Stream::begin)): a staging table's rows commit on their own.
    pub async fn leave_transaction(&mut self) -> Result<(), ServerError> {
        let xid = self.xid.take();
        let conn = self.conn()?;
        let left = match xid {
            Some(xid) => xa::end_and_roll_back(conn, &xid).await,
            None => conn.query_drop("ROLLBACK").await,
        };
        left.map_err(|e| ServerError::from_driver(&e))
    }

    /// Begins a plain transaction (after [`leave_transaction`](Stream::leave_transaction)).
    pub async fn begin(&mut self) -> Result<(), ServerError> {
        self.execute("START TRANSACTION").await
    }

    /// The connection, for statements outside a LOAD.
    pub fn connection(&mut self) -> Result<&mut Conn, ServerError> {
        self.conn()
    }
}

/// The data a connection's next `LOAD DATA LOCAL` reads: what is sent into the channel
/// returned, to its end (the sender dropped) or an error. The handler future holds the
/// receiver alone (the driver wants it `Sync`) and makes the stream when the server asks for
/// the file.
pub(crate) fn infile_channel(conn: &mut Conn) -> mpsc::Sender<std::io::Result<Bytes>> {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(CHANNEL_DEPTH);
    conn.set_infile_handler(async move {
        Ok(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed())
    });
    tx
}

/// Every choice of the canonical stream's format, spelled out for `LOAD DATA`.
pub(crate) const CANONICAL_FORMAT: &str = "CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' \
     ENCLOSED BY '' ESCAPED BY '\\\\' LINES STARTING BY '' TERMINATED BY '\\n'";

/// The statement, with every choice of the stream's format spelled out.
fn load_statement(relation: &str, columns: &[String]) -> String {
    let cols: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    format!(
        "LOAD DATA LOCAL INFILE 'sluice-stream' INTO TABLE {relation} {CANONICAL_FORMAT} ({})",
        cols.join(", ")
    )
}

async fn run_load(conn: &mut Conn, sql: &str) -> Result<Outcome, ServerError> {
    conn.query_drop(sql)
        .await
        .map_err(|e| ServerError::from_driver(&e))?;
    let affected = conn.affected_rows();
    let warning_count = conn.get_warnings();
    let warnings = if warning_count > 0 {
        conn.query::<(String, u16, String), _>("SHOW WARNINGS")
            .await
            .map_err(|e| ServerError::from_driver(&e))?
    } else {
        Vec::new()
    };
    Ok(Outcome {
        affected,
        warnings,
        warning_count,
    })
}

/// The warning trap: any warning is an error naming its record; the server's row count must
/// be the records sent.
fn check_outcome(o: &Outcome, sent: u64) -> Result<u64, ServerError> {
    if let Some((level, code, message)) = o.warnings.first() {
        let more = match o.warning_count {
            0 | 1 => String::new(),
            n => format!(" ({} more)", n - 1),
        };
        return Err(ServerError {
            code: *code,
            message: format!(
                "the server did not take a value as it is: {level} {code}: {message}{more} \
                 (LOAD DATA LOCAL stores such rows altered or skips them; sluice refuses them)"
            ),
            record: at_row(message),
            column: for_column(message),
            lost: false,
            warning: true,
        });
    }
    if o.warning_count > 0 {
        return Err(ServerError::client(format!(
            "the server raised {} warning(s) it did not list; nothing of this load is kept",
            o.warning_count
        )));
    }
    if o.affected != sent {
        return Err(ServerError::client(format!(
            "the server stored {} rows of the {sent} sent, without a warning; nothing of this \
             load is kept",
            o.affected
        )));
    }
    Ok(o.affected)
}

/// The error of a LOAD whose session was found gone while it ran.
fn vanished(id: u32, how: Gone) -> ServerError {
    let message = match how {
        Gone::Left => format!(
            "the server ended session {id} in the middle of its LOAD DATA LOCAL: the session \
             is no longer in the server's process list (a KILL, a restart, or a timeout such \
             as net_read_timeout ends one so)"
        ),
        Gone::Silent(secs) => format!(
            "the server has answered nothing for {secs} s during session {id}'s LOAD DATA \
             LOCAL (stopped, or cut off by the network): the session is given up \
             (answer-timeout= in the target sets this bound)"
        ),
    };
    ServerError {
        lost: true,
        ..ServerError::client(message)
    }
}

impl Load {
    /// Sends one buffer of whole records. `Err` means the statement ended early, or its
    /// session left the server: finish the load for the reason.
    pub async fn send(&mut self, data: Vec<u8>) -> Result<(), ()> {
        self.records += memchr_count(&data);
        let Some(tx) = self.tx.as_ref() else {
            return Err(());
        };
        tokio::select! {
            sent = tx.send(Ok(Bytes::from(data))) => sent.map_err(|_| ()),
            _ = self.watched.vanished.wait(self.id) => Err(()),
        }
    }
}

fn memchr_count(data: &[u8]) -> u64 {
    data.iter().filter(|&&b| b == b'\n').count() as u64
}

/// A LOAD dropped without [`Stream::finish`] (the chunk was abandoned): its data ends with an
/// error, so the driver fails the statement. The server still stores what it had, inside the
/// stream's transaction, which is never committed: the stream is dropped with it.
impl Drop for Load {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Err(std::io::Error::other("the chunk was abandoned")));
        }
    }
}

/// Why a stream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StreamOpenError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("{0}")]
    Server(ServerError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_their_row_and_column() {
        let m = "Data truncated for column 'd' at row 17";
        assert_eq!(at_row(m), Some(17));
        assert_eq!(for_column(m).as_deref(), Some("d"));
        let m = "Incorrect date value: '2024-02-30' for column `t`.`b`.`d` at row 1";
        assert_eq!(at_row(m), Some(1));
        assert_eq!(for_column(m).as_deref(), Some("d"));
        assert_eq!(at_row("Duplicate entry '5' for key 'PRIMARY'"), None);
    }

    #[test]
    fn the_trap_refuses_any_warning_and_a_short_count() {
        let o = Outcome {
            affected: 3,
            warnings: vec![(
                "Warning".into(),
                1264,
                "Out of range value for column 'i' at row 3".into(),
            )],
            warning_count: 2,
        };
        let e = check_outcome(&o, 3).unwrap_err();
        assert_eq!(
            (e.code, e.record, e.column.as_deref()),
            (1264, Some(3), Some("i"))
        );
        assert!(e.message.contains("(1 more)"));
        let o = Outcome {
            affected: 2,
            warnings: vec![],
            warning_count: 0,
        };
        assert!(check_outcome(&o, 3)
            .unwrap_err()
            .message
            .contains("stored 2 rows of the 3"));
        let o = Outcome {
            affected: 3,
            warnings: vec![],
            warning_count: 0,
        };
        assert_eq!(check_outcome(&o, 3), Ok(3));
    }
}
