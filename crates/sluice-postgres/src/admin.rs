//! The SQL that commands run outside a load: create tables, count rows, run a query, read the
//! server's settings.
//!
//! [`Admin`] is a blocking connection with a small runtime of its own, so that commands
//! (`ddl`, `demo`, `bench`) neither build tokio runtimes nor speak tokio-postgres themselves:
//! only this crate talks to PostgreSQL.

use crate::connect::{connect, ConnectError};
use crate::conninfo::ConnInfo;
use crate::silence::Silence;
use std::sync::Arc;
use tokio::runtime::Runtime;
use tokio_postgres::{Client, SimpleQueryMessage};

/// An error the server or the connection returned.
pub type DbError = tokio_postgres::Error;

/// A query's result as text, for people: column names, then rows (NULL as the empty string).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextRows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// Why an admin connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot start the connection's runtime: {0}")]
    Runtime(std::io::Error),
    /// The server refused a statement (a probe's, say).
    #[error("{0}")]
    Server(String),
}

/// One blocking connection, given up as a load's are when its server stops answering
/// ([`crate::silence`]; the warnings go to standard error).
pub struct Admin {
    rt: Runtime,
    client: Client,
    silence: Arc<Silence>,
}

impl Admin {
    pub fn connect(info: &ConnInfo) -> Result<Admin, AdminError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AdminError::Runtime)?;
        let warn = Arc::new(|w: String| eprintln!("warning: {w}"));
        let silence = Silence::new(crate::silence::bound(info), warn);
        let mut info = info.clone();
        info.ends = silence.ends();
        let began = std::time::Instant::now();
        let client = rt.block_on(connect(&info))?;
        {
            let _entered = rt.enter();
            silence.watch(&info, began.elapsed());
        }
        Ok(Admin {
            rt,
            client,
            silence,
        })
    }

    /// Runs `f` to its end, counted as a wait on the server.
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        let _waiting = self.silence.waiting();
        self.rt.block_on(f)
    }

    /// Runs one or more statements (no results).
    pub fn execute(&self, sql: &str) -> Result<(), DbError> {
        self.block_on(self.client.batch_execute(sql))
    }

    /// `SELECT count(*)` of a table, named as SQL names it.
    pub fn count_rows(&self, table: &str) -> Result<u64, DbError> {
        let n: i64 = self
            .block_on(
                self.client
                    .query_one(&format!("SELECT count(*) FROM {table}"), &[]),
            )?
            .get(0);
        Ok(n as u64)
    }

    /// Runs a query and returns its rows as text.
    pub fn query_text(&self, sql: &str) -> Result<TextRows, DbError> {
        let messages = self.block_on(self.client.simple_query(sql))?;
        let mut out = TextRows::default();
        for m in &messages {
            if let SimpleQueryMessage::Row(r) = m {
                if out.columns.is_empty() {
                    out.columns = r.columns().iter().map(|c| c.name().to_string()).collect();
                }
                out.rows.push(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("").to_string())
                        .collect(),
                );
            }
        }
        Ok(out)
    }

    /// The settings that differ from PostgreSQL's defaults (set in files, on the command line,
    /// by ALTER SYSTEM), as `(name, value)` in the server's own units.
    pub fn changed_settings(&self) -> Result<Vec<(String, String)>, DbError> {
        let rows = self.block_on(self.client.query(
            "SELECT name, current_setting(name) FROM pg_settings \
             WHERE source NOT IN ('default', 'override', 'client') ORDER BY name",
            &[],
        ))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect())
    }

    pub fn server_version(&self) -> Result<String, DbError> {
        Ok(self
            .block_on(self.client.query_one("SHOW server_version", &[]))?
            .get(0))
    }
}
