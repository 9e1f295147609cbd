//! One connection's share of a load: a transaction holding one COPY per chunk.
//!
//! A [`Stream`] opens a transaction before its first COPY and never commits on its own: the
//! caller commits every stream only after all of them finished cleanly, so that a failed load
//! leaves nothing visible. A [`CopyWriter`] that is dropped without [`CopyWriter::finish`]
//! aborts its COPY (tokio-postgres sends CopyFail), and a stream dropped without
//! [`Stream::commit`] rolls back when its connection closes: the safe outcome is the default.

use crate::catalog::{quote_ident, Table};
use crate::conninfo::ConnInfo;
use bytes::Bytes;
use futures_util::SinkExt;
use sluice_core::column::Column;
use std::pin::Pin;
use tokio_postgres::{Client, CopyInSink};

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
                }
            }
            None => ServerError {
                message: e.to_string(),
                detail: None,
                hint: None,
                sqlstate: String::new(),
                record: None,
                column: None,
            },
        }
    }

    /// Whether the connection or server failed, as opposed to the data.
    pub fn is_connection(&self) -> bool {
        self.sqlstate.is_empty()
            || self.sqlstate.starts_with("08")
            || self.sqlstate.starts_with("57")
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
    client: Client,
}

impl Stream {
    /// Connects and begins the transaction.
    pub async fn open(info: &ConnInfo) -> Result<Stream, crate::connect::ConnectError> {
        let client = crate::connect::connect(info).await?;
        Ok(Stream { client })
    }

    pub async fn begin(&self) -> Result<(), ServerError> {
        self.client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| ServerError::from_pg(&e))
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts `COPY table (columns) FROM STDIN` in binary or text format.
    pub async fn copy_in(
        &self,
        table: &Table,
        columns: &[Column],
        binary: bool,
    ) -> Result<CopyWriter, ServerError> {
        let cols: Vec<String> = columns.iter().map(|c| quote_ident(&c.name)).collect();
        let format = if binary { "binary" } else { "text" };
        let sql = format!(
            "COPY {} ({}) FROM STDIN (FORMAT {format})",
            table.qualified(),
            cols.join(", ")
        );
        let sink = self
            .client
            .copy_in(&sql)
            .await
            .map_err(|e| ServerError::from_pg(&e))?;
        Ok(CopyWriter {
            sink: Box::pin(sink),
        })
    }

    pub async fn commit(self) -> Result<(), ServerError> {
        self.client
            .batch_execute("COMMIT")
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
}
