//! Asking the server to convert a value sluice's parsers do not accept.
//!
//! PostgreSQL accepts spellings no flat-file loader should imitate (`Feb 3 2024`, `today`,
//! DateStyle-dependent two-digit years). When a converter meets one it is *unsupported*, not
//! invalid: [`Oracle`] sends it to the server as `SELECT $1::text::type` on a connection with the
//! same settings as the load, takes the binary result, and so loads exactly what psql would.
//! The connection opens on first use: a clean file never pays for it.

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

/// Converts values through the server; used from converter threads (not runtime threads).
pub struct Oracle {
    runtime: Handle,
    info: ConnInfo,
    client: Option<Client>,
    statements: HashMap<String, Statement>,
    /// How many values went to the server, for the summary.
    pub conversions: u64,
}

impl Oracle {
    pub fn new(runtime: Handle, info: ConnInfo) -> Oracle {
        Oracle {
            runtime,
            info,
            client: None,
            statements: HashMap::new(),
            conversions: 0,
        }
    }
}

impl ServerConvert for Oracle {
    fn convert(&mut self, column: &Column, value: &str) -> Result<Vec<u8>, String> {
        let Oracle {
            runtime,
            info,
            client,
            statements,
            conversions,
        } = self;
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
