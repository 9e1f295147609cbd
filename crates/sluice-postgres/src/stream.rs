//! One connection's share of a load: a transaction holding one COPY per chunk.
//!
//! A [`Stream`] opens a transaction before its first COPY and never commits on its own: the
//! caller commits every stream only after all of them finished cleanly, so that a failed load
//! leaves nothing visible. A [`CopyWriter`] that is dropped without [`CopyWriter::finish`]
//! aborts its COPY (tokio-postgres sends CopyFail), and a stream dropped without
//! [`Stream::commit`] rolls back when its connection closes: the safe outcome is the default.

use crate::catalog::quote_ident;
use crate::conninfo::ConnInfo;
use crate::onetrip::OneTrip;
use crate::types::column::Column;
use bytes::Bytes;
use futures_util::SinkExt;
use std::pin::Pin;
use tokio_postgres::{Client, CopyInSink, Row, Statement};

/// A server error, with the COPY record number it names when it names one.
#[derive(Debug, Clone)]
pub struct ServerError {
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub sqlstate: String,
    /// 1-based record number within the COPY that failed, from the error's context.
    pub record: Option<u64>,
    /// The column the server was converting, from the error's context.
    pub column: Option<String>,
    /// The error's whole context (`CONTEXT:` lines), for the index and tuple it names.
    pub context: Option<String>,
    /// The constraint the error names.
    pub constraint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

impl ServerError {
    pub fn from_pg(e: &tokio_postgres::Error) -> ServerError {
        match e.as_db_error() {
            Some(db) => {
                let (record, column) = db.where_().map(parse_copy_context).unwrap_or_default();
                ServerError {
                    message: db.message().to_string(),
                    detail: db.detail().map(str::to_string),
                    hint: db.hint().map(str::to_string),
                    sqlstate: db.code().code().to_string(),
                    record,
                    column,
                    context: db.where_().map(str::to_string),
                    constraint: db.constraint().map(str::to_string),
                }
            }
            None => ServerError::lost(crate::connect::chain(e)),
        }
    }

    /// A failure of the connection (or of the task that waited on it), with no word from the
    /// server: [`ServerError::is_connection`].
    pub fn lost(message: String) -> ServerError {
        ServerError {
            message,
            detail: None,
            hint: None,
            sqlstate: String::new(),
            record: None,
            column: None,
            context: None,
            constraint: None,
        }
    }

    /// Whether the connection or server failed, as opposed to the data: connection errors,
    /// an operator's shutdown or termination, and the session timeouts that end a connection.
    /// A cancelled statement (57014) is not one: the connection is still there.
    pub fn is_connection(&self) -> bool {
        self.sqlstate.is_empty()
            || self.sqlstate.starts_with("08")
            || matches!(
                self.sqlstate.as_str(),
                "57P01" | "57P02" | "57P03" | "57P04" | "57P05" | "25P03"
            )
    }

    /// Whether the error is about the rows sent rather than the server or the session: a data
    /// exception (class 22), an integrity constraint (23), an error a trigger raised (P0),
    /// or any other error on a COPY line (a program limit one value exceeds, such as an
    /// over-long index key), except a lack of resources (disk full, out of memory), an
    /// operator's intervention, a transaction failure or an internal error, which no row
    /// causes and which rejecting rows would not cure (`crate::condition` has the table).
    pub fn is_row_fault(&self) -> bool {
        let class = self.sqlstate.get(..2).unwrap_or("");
        matches!(class, "22" | "23" | "P0")
            || (self.record.is_some()
                && !matches!(
                    class,
                    "08" | "25" | "40" | "42" | "53" | "55" | "57" | "58" | "XX" | ""
                ))
    }

    /// A statement cancelled by `pg_cancel_backend`, a statement timeout or a lock timeout.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.sqlstate.as_str(), "57014" | "55P03")
    }

    /// The relation the error's context names (`... in relation "t_pkey"`): for a unique
    /// check, the index. PostgreSQL prints the name as it is, without escaping quotes in it
    /// (`errcontext("... in relation \"%s\"", RelationGetRelationName(rel))`), so the name
    /// is the rest of that line up to its last quote.
    pub fn context_relation(&self) -> Option<String> {
        let ctx = self.context.as_deref()?;
        let rest = ctx.split(" in relation \"").nth(1)?;
        let line = rest.lines().next()?;
        line.strip_suffix('"').map(str::to_string)
    }

    /// The heap tuple the context names (`tuple (12,3)`), as a `tid` literal.
    pub fn context_tuple(&self) -> Option<String> {
        let ctx = self.context.as_deref()?;
        let i = ctx.find("tuple (")? + "tuple ".len();
        let end = i + ctx[i..].find(')')? + 1;
        Some(ctx[i..end].to_string())
    }

    /// The key a constraint error's DETAIL names: `Key (a, b)=(1, x) ...` gives the column
    /// names and the values as the server prints them. Multi-column keys whose values contain
    /// `, ` cannot be split unambiguously and give `None`.
    pub fn detail_key(&self) -> Option<(Vec<String>, Vec<String>)> {
        let d = self.detail.as_deref()?.strip_prefix("Key (")?;
        let (cols, rest) = d.split_once(")=(")?;
        let columns: Vec<String> = cols.split(", ").map(unquote_ident).collect();
        // The values end at the last `)` before the sentence that follows them.
        let end = [
            ") already exists",
            ") is not present",
            ") is still referenced",
            ") conflicts",
        ]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .or_else(|| rest.rfind(')'))?;
        let vals = &rest[..end];
        let values: Vec<String> = if columns.len() == 1 {
            vec![vals.to_string()]
        } else {
            vals.split(", ").map(str::to_string).collect()
        };
        (values.len() == columns.len()).then_some((columns, values))
    }
}

/// `"My Col"` to `My Col`; plain names are returned as they are.
fn unquote_ident(s: &str) -> String {
    match s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => s.to_string(),
    }
}

/// Reads `COPY t, line 5, column c: "..."` (PostgreSQL's COPY error context).
fn parse_copy_context(ctx: &str) -> (Option<u64>, Option<String>) {
    let Some(copy) = ctx.lines().find(|l| l.starts_with("COPY ")) else {
        return (None, None);
    };
    let record = copy.split(", line ").nth(1).and_then(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    let column = copy
        .split(", column ")
        .nth(1)
        .map(|rest| rest.split(':').next().unwrap_or(rest).trim().to_string());
    (record, column)
}

/// One connection, inside one transaction.
pub struct Stream {
    /// Shared so that its connection can outlive the stream as a [`crate::readers::Spare`].
    client: std::sync::Arc<Client>,
    /// A handle on its TCP socket, for [`Stream::transport`].
    socket: Option<socket2::Socket>,
    /// The backend's process id, for the watchdog.
    pub pid: i32,
    /// When the backend started, as the server prints it: with the pid, it names this
    /// backend and no later one that reuses its pid.
    pub started: String,
    /// Each COPY statement this session prepared, by its text (a table's own, not a staging
    /// table's, which takes one COPY): a chunk's COPY then starts in one round trip, not two
    /// (parse, then bind), which across a long path is a round trip per chunk.
    copies: std::sync::Mutex<std::collections::HashMap<String, tokio_postgres::Statement>>,
}

/// A stream's first questions (its backend's pid and start, the server's identity), and
/// `copies` prepared: the prepared ones, by their text.
async fn first_questions(
    client: &Client,
    copies: Vec<String>,
) -> Result<(Row, String, Vec<(String, Statement)>), tokio_postgres::Error> {
    let preparing: Vec<_> = copies
        .into_iter()
        .map(|sql| async move {
            // A failed one aborts nothing (no transaction is open) and is prepared again on
            // use, where its error is reported.
            client.prepare(&sql).await.ok().map(|st| (sql, st))
        })
        .collect();
    let prepared = futures_util::future::join_all(preparing);
    let asked = async {
        tokio::try_join!(
            client.fetch_one(
                "SELECT pid, backend_start::text FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid()",
                &[],
            ),
            crate::catalog::server_identity(client)
        )
    };
    // The COPYs first: the session's last statement, which `pg_stat_activity` shows while it
    // waits, is then the identity's, not a COPY the load has not begun.
    let (prepared, asked) = futures_util::join!(prepared, asked);
    let (row, here) = asked?;
    Ok((row, here, prepared.into_iter().flatten().collect()))
}

/// The savepoint taken before deferred checks fire, so that a conflict found by them leaves
/// the stream's own rows readable for the message.
const DEFERRED_SAVEPOINT: &str = "sluice_deferred_checks";

impl Stream {
    /// Connects to the server whose identity ([`crate::catalog::server_identity`]) is
    /// `identity`: every connection of one load must reach the same server, and a multi-host
    /// target could send a later one elsewhere.
    pub async fn open(info: &ConnInfo, identity: &str) -> Result<Stream, StreamOpenError> {
        Stream::open_preparing(info, identity, Default::default()).await
    }

    /// [`Stream::open`], with the COPY statements ([`copy_sql`]) that `copies` holds when the
    /// session's setup is sent (it may be filled while the connection opens) prepared in the
    /// same round trip: a stream opened ahead of the load then binds its first COPY right
    /// behind its BEGIN, one round trip where it took two.
    pub async fn open_preparing(
        info: &ConnInfo,
        identity: &str,
        copies: std::sync::Arc<std::sync::OnceLock<Vec<String>>>,
    ) -> Result<Stream, StreamOpenError> {
        // All go out together, behind the session's setup: no round trip of their own.
        // (A future boxed with its own copy of the list: an async closure that borrows what it
        // holds makes the connection's future not provably `Send` for a spawn.)
        let connected = crate::connect::connect_asking(info, |client: &Client| {
            let known = copies.get().cloned().unwrap_or_default();
            Box::pin(first_questions(client, known))
        })
        .await?;
        let (client, socket) = (connected.client, connected.socket);
        let (row, here, prepared) = connected
            .first
            .map_err(|e| StreamOpenError::Server(ServerError::from_pg(&e)))?;
        let (pid, started): (i32, String) = (row.get(0), row.get(1));
        if here != identity {
            return Err(StreamOpenError::OtherServer {
                target: info.to_string(),
            });
        }
        Ok(Stream {
            client: std::sync::Arc::new(client),
            socket,
            pid,
            started,
            copies: std::sync::Mutex::new(prepared.into_iter().collect()),
        })
    }

    /// Fires every deferred constraint check now, under a savepoint, so that a check that
    /// must wait on a sibling stream waits *before* the commit barrier, where the watchdog sees
    /// it and every transaction can still roll back.
    pub async fn fire_deferred_checks(&self) -> Result<(), ServerError> {
        self.client
            .batch_execute(&format!(
                "SAVEPOINT {DEFERRED_SAVEPOINT}; SET CONSTRAINTS ALL IMMEDIATE"
            ))
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    /// After [`Stream::fire_deferred_checks`] failed: reads the key columns of the tuple the
    /// error named (`tid`, in the table the index `index` belongs to), which only this
    /// transaction can see. Returns the key's column names and text values.
    pub async fn deferred_conflict_key(
        &self,
        index: &str,
        tid: &str,
    ) -> Option<(Vec<String>, Vec<Option<String>>)> {
        self.client
            .batch_execute(&format!("ROLLBACK TO SAVEPOINT {DEFERRED_SAVEPOINT}"))
            .await
            .ok()?;
        let (table, columns) = crate::catalog::index_key(&self.client, index).await?;
        let list: Vec<String> = columns
            .iter()
            .map(|c| format!("{}::text", quote_ident(c)))
            .collect();
        let row = self
            .client
            .query_opt(
                &format!(
                    "SELECT {} FROM ONLY {table} WHERE ctid = $1::text::tid",
                    list.join(", ")
                ),
                &[&tid],
            )
            .await
            .ok()??;
        let values = (0..columns.len()).map(|i| row.get(i)).collect();
        Some((columns, values))
    }

    /// Runs one utility statement (a savepoint, `SET CONSTRAINTS`) in the stream's
    /// transaction.
    pub async fn execute(&self, sql: &str) -> Result<(), ServerError> {
        self.client
            .batch_execute(sql)
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    /// Begins the stream's transaction with `sql` ([`crate::ledger::stream_begin`]).
    pub async fn begin(&self, sql: &str) -> Result<(), ServerError> {
        self.client
            .batch_execute(sql)
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    /// What the kernel says of its TCP connection so far.
    pub fn transport(&self) -> Option<sluice_core::destination::Transport> {
        self.socket.as_ref().and_then(crate::network::transport)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The connection, shared with a task that outlives this borrow.
    pub fn shared_client(&self) -> std::sync::Arc<Client> {
        self.client.clone()
    }

    /// The connection, for uses other than a load's stream.
    pub fn into_client(self) -> std::sync::Arc<Client> {
        self.client
    }

    /// The connection, kept open after the stream for one of [`crate::readers`]' gates (its
    /// transaction prepared, the session is free).
    pub fn spare(&self) -> crate::readers::Spare {
        crate::readers::Spare {
            client: self.client.clone(),
            pid: self.pid,
        }
    }

    /// Starts `COPY relation (columns) FROM STDIN` in binary or text format; with `freeze`,
    /// rows are written frozen (the relation must be new in this transaction).
    pub async fn copy_in(
        &self,
        relation: &str,
        columns: &[Column],
        binary: bool,
        freeze: bool,
    ) -> Result<CopyWriter, ServerError> {
        let sql = copy_sql(relation, columns, binary, freeze);
        let sink = match freeze {
            // A staging table's COPY runs once per table: nothing to keep.
            true => self.client.copy_in(&sql).await,
            false => match self.copy_statement(sql).await {
                Ok(statement) => self.client.copy_in(&statement).await,
                Err(e) => Err(e),
            },
        }
        .map_err(|e| ServerError::from_pg(&e))?;
        Ok(CopyWriter {
            sink: Box::pin(sink),
        })
    }

    /// Prepares these COPY statements ([`copy_sql`]) now, all in one round trip, for the
    /// chunks to come; sent outside a transaction, a failed one aborts nothing, and is
    /// prepared again on use, where its error is reported.
    pub async fn prepare_copies(&self, statements: Vec<String>) {
        futures_util::future::join_all(statements.into_iter().map(|sql| self.copy_statement(sql)))
            .await;
    }

    /// [`Stream::prepare_copies`] on a connection that then waits: the backend's pid is asked
    /// again behind them, so that the session's last statement, which `pg_stat_activity` shows
    /// while it waits, is not a COPY the load has not begun.
    pub async fn prepare_copies_waiting(&self, statements: Vec<String>) {
        let again = self.client.simple_query("SELECT pg_backend_pid()");
        let ((), _) = futures_util::join!(self.prepare_copies(statements), again);
    }

    /// The prepared COPY statement `sql`, prepared on first use.
    async fn copy_statement(
        &self,
        sql: String,
    ) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        let known = self.copies.lock().ok().and_then(|c| c.get(&sql).cloned());
        if let Some(statement) = known {
            return Ok(statement);
        }
        let statement = self.client.prepare(&sql).await?;
        if let Ok(mut c) = self.copies.lock() {
            c.insert(sql, statement.clone());
        }
        Ok(statement)
    }

    pub async fn commit(&self) -> Result<(), ServerError> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    /// `PREPARE TRANSACTION`: the transaction leaves this session, prepared under `gid`.
    pub async fn prepare(&self, gid: &str) -> Result<(), ServerError> {
        self.client
            .batch_execute(&format!(
                "PREPARE TRANSACTION {}",
                crate::stage::quote_literal(gid)
            ))
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    pub async fn rollback(self) -> Result<(), ServerError> {
        self.client
            .batch_execute("ROLLBACK")
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }
}

/// `COPY relation (columns) FROM STDIN` in binary or text format; with `freeze`, rows are
/// written frozen.
pub fn copy_sql(relation: &str, columns: &[Column], binary: bool, freeze: bool) -> String {
    let cols: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
    let format = if binary { "binary" } else { "text" };
    let option = if freeze { ", FREEZE" } else { "" };
    format!(
        "COPY {relation} ({}) FROM STDIN (FORMAT {format}{option})",
        cols.join(", ")
    )
}

/// Why a stream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StreamOpenError {
    #[error(transparent)]
    Connect(#[from] crate::connect::ConnectError),
    #[error("{0}")]
    Server(ServerError),
    #[error(
        "a connection to {target} reached a different server than the load's first connection \
         (a multi-host target?): sluice does not split one load across servers; name one host"
    )]
    OtherServer { target: String },
}

/// An open COPY. Dropping it without `finish` aborts the COPY.
pub struct CopyWriter {
    sink: Pin<Box<CopyInSink<Bytes>>>,
}

impl CopyWriter {
    /// Queues one CopyData message; the connection task writes it while the caller converts
    /// the next buffer.
    pub async fn send(&mut self, data: Bytes) -> Result<(), ServerError> {
        self.sink
            .feed(data)
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    /// Ends the COPY and returns the number of rows the server stored.
    pub async fn finish(mut self) -> Result<u64, ServerError> {
        self.sink
            .as_mut()
            .finish()
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_context_is_parsed() {
        assert_eq!(
            parse_copy_context("COPY t, line 5, column qty: \"abc\""),
            (Some(5), Some("qty".into()))
        );
        assert_eq!(
            parse_copy_context("COPY \"My T\", line 12"),
            (Some(12), None)
        );
        assert_eq!(parse_copy_context("SQL function"), (None, None));
    }

    fn error(detail: Option<&str>, context: Option<&str>) -> ServerError {
        ServerError {
            message: String::new(),
            detail: detail.map(str::to_string),
            hint: None,
            sqlstate: "23505".into(),
            record: None,
            column: None,
            context: context.map(str::to_string),
            constraint: None,
        }
    }

    #[test]
    fn keys_indexes_and_tuples_are_read_from_errors() {
        let e = error(Some("Key (id)=(50000) already exists."), None);
        assert_eq!(
            e.detail_key(),
            Some((vec!["id".into()], vec!["50000".into()]))
        );
        let e = error(
            Some("Key (a, \"My B\")=(1, x y) is not present in table \"p\"."),
            None,
        );
        assert_eq!(
            e.detail_key(),
            Some((
                vec!["a".into(), "My B".into()],
                vec!["1".into(), "x y".into()]
            ))
        );
        let e = error(Some("Key (t)=(a, b) already exists."), None);
        assert_eq!(
            e.detail_key(),
            Some((vec!["t".into()], vec!["a, b".into()]))
        );
        let e = error(
            None,
            Some("while inserting index tuple (443,3) in relation \"pk \"x\"\"\nCOPY pk, line 3"),
        );
        assert_eq!(e.context_relation().as_deref(), Some("pk \"x\""));
        assert_eq!(e.context_tuple().as_deref(), Some("(443,3)"));
    }
}
