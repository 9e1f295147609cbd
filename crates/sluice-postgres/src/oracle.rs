//! Asking the server to convert a value sluice's parsers do not accept.
//!
//! PostgreSQL accepts spellings no flat-file loader should imitate (`Feb 3 2024`, `today`,
//! DateStyle-dependent two-digit years). When a converter meets one it is *unsupported*, not
//! invalid: [`Oracle`] sends it to the server as `SELECT $1::text::type` on a connection with the
//! same settings as the load, takes the binary result, and so loads exactly what psql would.
//! The connection opens on first use: a clean file never pays for it. Each answer is kept (up
//! to [`REMEMBERED`] of them): a file that spells its dates `Jan 1 2000` repeats each date on
//! many rows, and asks the server once per distinct value, not once per row.

use crate::conninfo::ConnInfo;
use crate::types::column::Column;
use crate::types::convert::ServerConvert;
use std::collections::HashMap;
use tokio::runtime::Handle;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, Statement};

/// A value's raw binary form.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Answers kept before the memory starts over (a few MB at most).
const REMEMBERED: usize = 1 << 16;

/// Converts values through the server; used from converter threads (not runtime threads).
pub struct Oracle {
    runtime: Handle,
    info: ConnInfo,
    /// The load's waits on its server ([`crate::silence`]): the oracle's are counted too.
    silence: std::sync::Arc<crate::silence::Silence>,
    client: Option<Client>,
    statements: HashMap<String, Statement>,
    /// The server's answers, by type and spelling.
    answers: HashMap<(String, String), Vec<u8>>,
    /// How many values went to the server, for the summary.
    pub conversions: u64,
}

impl Oracle {
    pub fn new(
        runtime: Handle,
        info: ConnInfo,
        silence: std::sync::Arc<crate::silence::Silence>,
    ) -> Oracle {
        Oracle {
            runtime,
            info,
            silence,
            client: None,
            statements: HashMap::new(),
            answers: HashMap::new(),
            conversions: 0,
        }
    }
}

impl ServerConvert for Oracle {
    fn convert(&mut self, column: &Column, value: &str) -> Result<Vec<u8>, String> {
        let key = (column.type_name.clone(), value.to_string());
        if let Some(raw) = self.answers.get(&key) {
            self.conversions += 1;
            return Ok(raw.clone());
        }
        let raw = self.ask(column, value)?;
        if self.answers.len() >= REMEMBERED {
            self.answers.clear();
        }
        self.answers.insert(key, raw.clone());
        Ok(raw)
    }
}

impl Oracle {
    /// One value, converted by the server.
    fn ask(&mut self, column: &Column, value: &str) -> Result<Vec<u8>, String> {
        let Oracle {
            runtime,
            info,
            silence,
            client,
            statements,
            conversions,
            ..
        } = self;
        let _waiting = silence.waiting();
        runtime.block_on(async {
            if client.is_none() {
                *client = Some(
                    crate::connect::connect(info)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            let c = client.as_ref().expect("connected above");
            let stmt = match statements.get(&column.type_name) {
                Some(s) => s.clone(),
                None => {
                    let sql = format!("SELECT $1::text::{}", column.type_name);
                    let s = c.prepare(&sql).await.map_err(|e| e.to_string())?;
                    statements.insert(column.type_name.clone(), s.clone());
                    s
                }
            };
            let row = c.query_one(&stmt, &[&value]).await.map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_string())
            })?;
            *conversions += 1;
            let raw: Raw = row.get(0);
            Ok(raw.0)
        })
    }
}
