//! The target table as the catalog describes it, and the session settings conversion needs.
//!
//! sluice never asks the user to repeat what the database knows: column names, types,
//! typmods and NOT NULL flags come from `pg_attribute`. The table name is resolved by the
//! server (`to_regclass`), so quoting, case folding and `search_path` follow SQL rules exactly.
//! Domains, enums, arrays and other types become [`PgType::Other`] and are left to the server,
//! which also enforces domain constraints.

use crate::onetrip::{OneTrip, Param};
use crate::types::column::{Column, PgType};
use tokio_postgres::{Client, Row};

/// A resolved target table.
#[derive(Clone, Debug)]
pub struct Table {
    /// The table's oid: a table dropped and created again under the same name has another.
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// Every insertable column, in table order.
    pub columns: Vec<Column>,
    /// The oids of the tables its foreign keys reference.
    pub references: Vec<u32>,
}

impl Table {
    /// `"schema"."name"`, quoted for SQL.
    pub fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }

    /// The columns named, in that order (names as the catalog spells them; the plan has
    /// already checked them against the table's [`TableInfo`](sluice_core::destination::TableInfo)).
    pub fn columns_named(&self, names: &[String]) -> Result<Vec<Column>, String> {
        names
            .iter()
            .map(|n| {
                self.columns
                    .iter()
                    .find(|c| &c.name == n)
                    .cloned()
                    .ok_or_else(|| format!("table {} has no column \"{n}\"", self.qualified()))
            })
            .collect()
    }
}

/// Quotes an identifier for SQL: `My "T"` becomes `"My ""T"""`.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Session settings that change how text converts.
#[derive(Clone, Debug)]
pub struct Session {
    pub timezone: String,
    pub server_version: String,
    pub server_version_num: i32,
    pub max_connections: i32,
    pub server_encoding: String,
    /// The server is a standby.
    pub in_recovery: bool,
    /// The session's transactions are read-only (`default_transaction_read_only`, from
    /// PGOPTIONS, the role or the database).
    pub read_only: bool,
    /// How many transactions the server can hold prepared at once (0: none).
    pub max_prepared_transactions: i32,
    /// Standbys streaming from this server (not counting logical replication): they replay
    /// the `ACCESS EXCLUSIVE` locks taken here.
    pub standbys: i32,
    /// The server's tablespaces by oid, to name the one whose disk filled.
    pub tablespaces: Vec<(u32, String)>,
    /// Some constraint or trigger of the database can be deferred: a transaction may hold
    /// checks until its commit. Where none can, a stream has none to fire before the commit.
    pub deferrable: bool,
}

impl Session {
    /// Why nothing can be loaded through this session, if it cannot write: psql's `\copy`
    /// fails there too, at its first row; this says so before anything starts, and what to do.
    pub fn cannot_write(&self) -> Option<String> {
        if self.in_recovery {
            Some(
                "the server is a standby (in recovery), which cannot be loaded into: connect to \
                 the primary (with several hosts, target_session_attrs=read-write picks it)"
                    .into(),
            )
        } else if self.read_only {
            Some(
                "the session is read-only: default_transaction_read_only is on (from PGOPTIONS, \
                 ALTER ROLE ... SET or ALTER DATABASE ... SET), so psql's \\copy would fail too; \
                 PGOPTIONS='-c default_transaction_read_only=off' overrides it for sluice"
                    .into(),
            )
        } else {
            None
        }
    }
}

pub async fn session(client: &Client) -> Result<Session, tokio_postgres::Error> {
    // Both go out together: one round trip across a long path.
    let (row, tablespaces) = tokio::try_join!(
        client.fetch_one(
            "SELECT current_setting('TimeZone'), current_setting('server_version'), \
             current_setting('server_version_num')::int, \
             current_setting('max_connections')::int, current_setting('server_encoding'), \
             pg_is_in_recovery(), current_setting('transaction_read_only') = 'on', \
             current_setting('max_prepared_transactions')::int, \
             (SELECT count(*) FROM pg_stat_replication r WHERE NOT EXISTS ( \
                SELECT 1 FROM pg_replication_slots s \
                WHERE s.active_pid = r.pid AND s.slot_type = 'logical'))::int, \
             EXISTS (SELECT 1 FROM pg_constraint WHERE condeferrable) \
               OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgdeferrable)",
            &[],
        ),
        client.fetch("SELECT oid, spcname FROM pg_tablespace", &[])
    )?;
    let tablespaces = tablespaces.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(Session {
        tablespaces,
        timezone: row.get(0),
        server_version: row.get(1),
        server_version_num: row.get(2),
        max_connections: row.get(3),
        server_encoding: row.get(4),
        in_recovery: row.get(5),
        read_only: row.get(6),
        max_prepared_transactions: row.get(7),
        standbys: row.get(8),
        deferrable: row.get(9),
    })
}

/// Connection slots a load may still open: the fewest of what the server, the login role and
/// the database allow (`None` when the server will not say). The server's are
/// `max_connections` less the superuser reserve and the client backends already connected; a
/// role's or a database's `CONNECTION LIMIT` counts its own backends, and binds all but
/// superusers, as the server checks them at connection time.
pub async fn free_slots(client: &Client) -> Option<i64> {
    client
        .fetch_one(
            "WITH me AS (SELECT oid, rolsuper, rolconnlimit FROM pg_roles \
                         WHERE rolname = session_user), \
                  db AS (SELECT oid, datconnlimit FROM pg_database \
                         WHERE datname = current_database()), \
                  b AS (SELECT usesysid, datid FROM pg_stat_activity \
                        WHERE backend_type = 'client backend') \
             SELECT least( \
               current_setting('max_connections')::int \
                 - current_setting('superuser_reserved_connections')::int \
                 - (SELECT count(*) FROM b), \
               (SELECT me.rolconnlimit - (SELECT count(*) FROM b WHERE b.usesysid = me.oid) \
                FROM me WHERE me.rolconnlimit >= 0 AND NOT me.rolsuper), \
               (SELECT db.datconnlimit - (SELECT count(*) FROM b WHERE b.datid = db.oid) \
                FROM db, me WHERE db.datconnlimit >= 0 AND NOT me.rolsuper))::bigint",
            &[],
        )
        .await
        .ok()
        .map(|r| r.get(0))
}

/// What identifies one server across connections: its system identifier, which survives a
/// restart (so a load's retries may ride one out), with whether it is a standby (which shares
/// its primary's identifier). Where `pg_control_system` is revoked (some managed services), the
/// start time stands in for it, and a restart then looks like another server.
pub async fn server_identity(client: &Client) -> Result<String, tokio_postgres::Error> {
    let row = client
        .fetch_one(
            "SELECT system_identifier::text || \
                    CASE WHEN pg_is_in_recovery() THEN '/standby' ELSE '' END \
             FROM pg_control_system()",
            &[],
        )
        .await;
    match row {
        Ok(r) => Ok(r.get(0)),
        // Some managed services revoke pg_control_system: the start time alone must do.
        Err(e) if e.as_db_error().is_some() => {
            let r = client
                .fetch_one("SELECT pg_postmaster_start_time()::text", &[])
                .await?;
            Ok(r.get(0))
        }
        Err(e) => Err(e),
    }
}

/// An index's table (qualified for SQL) and key columns (without INCLUDE columns), or `None`
/// for an index with expressions or an unknown name. Ambiguous names (one per schema) resolve
/// to the first visible on the search path, then any.
pub async fn index_key(client: &Client, index: &str) -> Option<(String, Vec<String>)> {
    let row = client
        .fetch_opt(
            "SELECT i.indrelid::regclass::text, \
                    array(SELECT a.attname::text \
                          FROM unnest(i.indkey[0:i.indnkeyatts - 1]) WITH ORDINALITY k(n, o) \
                          LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n \
                          ORDER BY k.o), \
                    i.indnkeyatts::int, 0 = ANY(i.indkey[0:i.indnkeyatts - 1]) \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = $1 \
             ORDER BY pg_table_is_visible(c.oid) DESC LIMIT 1",
            &[&index],
        )
        .await
        .ok()??;
    let has_expression: bool = row.get(3);
    if has_expression {
        return None;
    }
    Some((row.get(0), row.get(1)))
}

/// Why a table cannot be described.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "table {0} does not exist: create it first (for TPC-H: sluice ddl tpch --create), or \
         name another with --table"
    )]
    NoSuchTable(String),
    #[error("{0} is not a table (sluice loads tables and partitioned tables)")]
    NotATable(String),
    #[error("reading the catalog: {0}")]
    Db(#[from] tokio_postgres::Error),
}

/// Describes `name` (as SQL spells a table name: `t`, `s.t`, `"My T"`).
pub async fn describe_table(client: &Client, name: &str) -> Result<Table, CatalogError> {
    // The relation, its columns and its references go out together, each naming the table
    // by `name`: one round trip across a long path.
    let by_name: [&dyn Param; 1] = [&name];
    let (rel, rows, references) = tokio::join!(
        client.fetch_opt(
            "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass($1)",
            &by_name,
        ),
        client.fetch(
            "SELECT a.attname::text, t.typname::text, t.typtype::text, a.atttypmod, \
                    a.attnotnull, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attgenerated = '' \
             ORDER BY a.attnum",
            &by_name,
        ),
        client.fetch(
            "SELECT DISTINCT confrelid FROM pg_constraint \
             WHERE contype = 'f' AND conrelid = to_regclass($1)",
            &by_name,
        )
    );
    let rel = match rel {
        Ok(r) => r,
        // to_regclass raises on a malformed name such as `a.b.c.d`.
        Err(e) if e.as_db_error().is_some() => None,
        Err(e) => return Err(e.into()),
    };
    let Some(rel) = rel else {
        return Err(CatalogError::NoSuchTable(name.to_string()));
    };
    let oid: u32 = rel.get(0);
    let kind: String = rel.get(3);
    if kind != "r" && kind != "p" {
        return Err(CatalogError::NotATable(name.to_string()));
    }
    let (rows, references) = (rows?, references?);
    let columns = rows
        .iter()
        .map(|r| {
            let typname: String = r.get(1);
            let typtype: String = r.get(2);
            let ty = if typtype == "b" {
                PgType::from_catalog(&typname, r.get(3))
            } else {
                PgType::Other
            };
            Column {
                name: r.get(0),
                ty,
                type_name: r.get(5),
                not_null: r.get(4),
            }
        })
        .collect();
    let references = references.iter().map(|r| r.get(0)).collect();
    Ok(Table {
        oid,
        schema: rel.get(1),
        name: rel.get(2),
        columns,
        references,
    })
}

/// What table `name` (as SQL spells it) carries that costs the server work per row (its
/// indexes, row triggers, and check and foreign-key constraints), for the verdict's advice:
/// it names only what a loaded table has. Read with the table's description
/// ([`describe_table`]'s round trip); [`costs_of`] gathers the tables'.
pub async fn table_cost_rows(
    client: &Client,
    name: &str,
) -> Result<Vec<CostRow>, tokio_postgres::Error> {
    let rows = client.fetch(COSTS, &[&name]).await?;
    Ok(rows.iter().map(cost_row).collect())
}

/// A table's name, what kind of cost (`index`, `trigger`, `check`) and its name.
pub type CostRow = (String, String, String);

fn cost_row(r: &Row) -> CostRow {
    (r.get(0), r.get(1), r.get(2))
}

/// The costs in `rows`, by table, kind and name.
pub fn costs_of(mut rows: Vec<CostRow>) -> sluice_core::destination::TableCosts {
    rows.sort();
    let mut costs = sluice_core::destination::TableCosts::default();
    for (table, kind, name) in rows {
        costs.add(&kind, table, name);
    }
    costs
}

/// The costs of table `$1`, as [`CostRow`]s.
const COSTS: &str = "SELECT c.relname::text, k.kind, k.name
   FROM pg_class c
   CROSS JOIN LATERAL (
         SELECT 'index' AS kind, i.relname::text AS name
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
          WHERE x.indrelid = c.oid
         UNION ALL
         SELECT 'trigger', t.tgname::text
           FROM pg_trigger t
          WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
            AND (t.tgtype & 1) = 1
         UNION ALL
         SELECT 'check', n.conname::text
           FROM pg_constraint n
          WHERE n.conrelid = c.oid AND n.contype IN ('c', 'f')
       ) k
  WHERE c.oid = to_regclass($1)";
