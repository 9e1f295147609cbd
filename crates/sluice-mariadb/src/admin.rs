//! Statements a command runs outside a load (`sluice ddl tpch --create`): one connection, each
//! statement on its own (MariaDB's DDL commits on its own, so there is no transaction to put
//! them in), with every wait for a table's metadata lock bounded by [`LOCK_WAIT`] rather
//! than the server's default of a day.

use crate::condition;
use crate::connect::{connect, scrub, ConnectError};
use crate::conninfo::ConnInfo;
use crate::silence::Rt;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice_core::destination::ErrorKind;

/// How long a statement waits for another session's lock on a table (seconds).
pub const LOCK_WAIT: u32 = 30;

/// Why an administrative statement failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot start the connection runtime: {0}")]
    Runtime(std::io::Error),
    /// The server refused a statement (`kind`: its code in the engine's terms).
    #[error("{message}")]
    Server { kind: ErrorKind, message: String },
}

impl AdminError {
    fn from_driver(e: &mysql_async::Error, info: &ConnInfo) -> AdminError {
        let message = explain(&scrub(&e.to_string(), info));
        let kind = match e {
            mysql_async::Error::Server(s) => match s.code {
                // The table exists already: the command's to change, not the server's state.
                1050 => ErrorKind::Usage,
                code => condition::classify(code),
            },
            _ => ErrorKind::Connection,
        };
        AdminError::Server { kind, message }
    }
}

/// One connection for a command's own statements.
///
/// Its waits are given up, as a load's are, when the server stops answering
/// ([`crate::silence`]; the warnings go to standard error).
pub struct Admin {
    rt: Rt,
    conn: Conn,
    info: ConnInfo,
}

impl Admin {
    pub fn connect(info: &ConnInfo) -> Result<Admin, AdminError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AdminError::Runtime)?;
        let began = std::time::Instant::now();
        let conn = rt.block_on(connect(info))?;
        let warn = std::sync::Arc::new(|w: String| eprintln!("warning: {w}"));
        let mut admin = Admin {
            rt: Rt::new(rt, info, began.elapsed(), warn),
            conn,
            info: info.clone(),
        };
        admin.execute(&format!("SET SESSION lock_wait_timeout = {LOCK_WAIT}"))?;
        Ok(admin)
    }

    /// Runs one statement.
    pub fn execute(&mut self, sql: &str) -> Result<(), AdminError> {
        let Admin { rt, conn, info } = self;
        rt.block_on(conn.query_drop(sql))
            .map_err(|e| AdminError::from_driver(&e, info))
    }

    /// A query's result as text, for people: column names, then rows (NULL as the empty
    /// string).
    pub fn query_text(&mut self, sql: &str) -> Result<(Vec<String>, Vec<Vec<String>>), AdminError> {
        let Admin { rt, conn, info } = self;
        let rows: Vec<mysql_async::Row> = rt
            .block_on(conn.query(sql))
            .map_err(|e| AdminError::from_driver(&e, info))?;
        let columns = rows.first().map_or_else(Vec::new, |r| {
            r.columns_ref()
                .iter()
                .map(|c| c.name_str().into_owned())
                .collect()
        });
        let text = |v: &mysql_async::Value| match v {
            mysql_async::Value::NULL => String::new(),
            mysql_async::Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            other => other.as_sql(true).trim_matches('\'').to_string(),
        };
        let rows = rows
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.as_ref(i).map_or(String::new(), text))
                    .collect()
            })
            .collect();
        Ok((columns, rows))
    }

    /// Which of `names` are tables (or views) of the target's database.
    pub fn existing_tables(&mut self, names: &[&str]) -> Result<Vec<String>, AdminError> {
        let Admin { rt, conn, info } = self;
        let list = vec!["?"; names.len()].join(", ");
        rt.block_on(conn.exec(
            format!(
                "SELECT TABLE_NAME FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({list}) ORDER BY TABLE_NAME"
            ),
            names.to_vec(),
        ))
        .map_err(|e| AdminError::from_driver(&e, info))
    }
}

/// A lock wait that ran out names what to look for.
fn explain(message: &str) -> String {
    match message.contains("Lock wait timeout") {
        true => format!(
            "{message}: another session holds a lock on the table for more than {LOCK_WAIT} s \
             (a load running now, or one whose commit is prepared: run that load's command \
             again to finish it, or see SHOW PROCESSLIST and XA RECOVER)"
        ),
        false => message.to_string(),
    }
}
