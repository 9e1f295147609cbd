//! Tables and columns as MariaDB's `information_schema` describes them, and the identity of a
//! table across runs (the ledger keys loaded files on it).
//!
//! A table's id is its schema, name and creation time, and its generation InnoDB's table id
//! (see [`table_identity`]), so that a rerun tells a table created again (another table) from
//! one truncated (the same table, its storage replaced), as PostgreSQL's oid and file node do.

use crate::types::column::{Column, ColumnType, TimestampRule};
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice_core::destination::TableCosts;

/// A table as the load uses it.
#[derive(Clone, Debug)]
pub struct Table {
    pub schema: String,
    pub name: String,
    /// See the module doc.
    pub id: String,
    pub engine: String,
    /// Whether it is partitioned (`information_schema.TABLES.CREATE_OPTIONS` says so).
    pub partitioned: bool,
    pub columns: Vec<Column>,
    /// The ids of the tables its foreign keys reference.
    pub references: Vec<String>,
}

impl Table {
    /// `` `schema`.`name` ``.
    pub fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

/// Why a table cannot be described.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Db(#[from] mysql_async::Error),
    #[error("{0}")]
    Usage(String),
}

/// `` `name` ``, with backticks doubled.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Splits `db.t`, `` `My DB`.`My T` `` or `t` into schema (if given) and name.
pub fn split_name(name: &str) -> Result<(Option<String>, String), String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = name.trim().chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '`' if quoted && chars.peek() == Some(&'`') => {
                chars.next();
                cur.push('`');
            }
            '`' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("{name:?} has an unclosed backtick"));
    }
    parts.push(cur);
    if parts.iter().any(String::is_empty) {
        return Err(format!("{name:?} is not a table name"));
    }
    match parts.len() {
        1 => Ok((None, parts.remove(0))),
        2 => {
            let n = parts.remove(1);
            Ok((Some(parts.remove(0)), n))
        }
        _ => Err(format!("{name:?} has more than two parts (database.table)")),
    }
}

/// The table `name` names, with its insertable columns in table order.
pub async fn describe_table(conn: &mut Conn, name: &str) -> Result<Table, CatalogError> {
    let (schema, table) = split_name(name).map_err(CatalogError::Usage)?;
    let schema = match schema {
        Some(s) => s,
        None => conn
            .query_first::<Option<String>, _>("SELECT DATABASE()")
            .await?
            .flatten()
            .ok_or_else(|| {
                CatalogError::Usage(format!(
                    "{name} names no database, and the target has none: put it in the target \
                     (mariadb://host/DATABASE) or name the table as database.table"
                ))
            })?,
    };
    let found: Option<(String, Option<String>, Option<String>)> = conn
        .exec_first(
            "SELECT TABLE_TYPE, ENGINE, CREATE_OPTIONS FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&schema, &table),
        )
        .await?;
    let Some((kind, engine, options)) = found else {
        return Err(CatalogError::Usage(format!(
            "there is no table {}.{} in this server",
            quote_ident(&schema),
            quote_ident(&table)
        )));
    };
    if kind != "BASE TABLE" {
        return Err(CatalogError::Usage(format!(
            "{}.{} is a {}, not a table sluice can load",
            quote_ident(&schema),
            quote_ident(&table),
            kind.to_lowercase()
        )));
    }
    let engine = engine.unwrap_or_default();
    let columns = columns(conn, &schema, &table).await?;
    let id = table_id(conn, &schema, &table).await?;
    let refs: Vec<(String, String)> = conn
        .exec(
            "SELECT DISTINCT REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME \
             FROM information_schema.REFERENTIAL_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
            (&schema, &table),
        )
        .await
        .unwrap_or_default();
    let mut references = Vec::new();
    for (s, t) in refs {
        references.push(table_id(conn, &s, &t).await?);
    }
    Ok(Table {
        schema,
        name: table,
        id,
        engine,
        partitioned: options.is_some_and(|o| o.split(' ').any(|w| w == "partitioned")),
        columns,
        references,
    })
}

type ColumnRow = (
    String,
    String,
    String,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<String>,
    String,
    String,
    Option<String>,
    Option<u64>,
);

async fn columns(conn: &mut Conn, schema: &str, table: &str) -> Result<Vec<Column>, CatalogError> {
    let rows: Vec<ColumnRow> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, \
                NUMERIC_PRECISION, NUMERIC_SCALE, CHARACTER_SET_NAME, IS_NULLABLE, EXTRA, \
                COLLATION_NAME, DATETIME_PRECISION \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        .await?;
    let has = |t: &str| rows.iter().any(|r| r.1.eq_ignore_ascii_case(t));
    let timestamps = match has("timestamp") {
        true => timestamp_rule(conn).await?,
        false => TimestampRule::unknown(),
    };
    let json = match has("longtext") {
        true => json_checked(conn, schema, table).await,
        false => Vec::new(),
    };
    Ok(rows
        .into_iter()
        .filter(|r| {
            let extra = r.8.to_ascii_uppercase();
            !(extra.contains("GENERATED")
                || extra.contains("VIRTUAL")
                || extra.contains("PERSISTENT")
                || extra.contains("STORED"))
        })
        .map(
            |(
                name,
                data_type,
                column_type,
                chars,
                precision,
                scale,
                charset,
                nullable,
                _,
                collation,
                fsp,
            )| {
                // A time's fraction digits are its scale here.
                let scale = match data_type.eq_ignore_ascii_case("time") {
                    true => fsp,
                    false => scale,
                };
                let is_json = data_type.eq_ignore_ascii_case("longtext")
                    && charset.as_deref().is_some_and(|c| c.starts_with("utf8mb4"))
                    && json.contains(&name);
                Column {
                    ty: ColumnType::from_catalog(
                        &data_type,
                        &column_type,
                        chars,
                        precision,
                        scale,
                        charset.as_deref(),
                        collation.as_deref(),
                    )
                    .in_session(&timestamps, is_json),
                    name,
                    type_name: column_type,
                    not_null: nullable == "NO",
                }
            },
        )
        .collect())
}

/// What `schema.table` keeps up row by row: its indexes (a primary key counts), its `INSERT`
/// triggers, and its checks and foreign keys, for the verdict's advice.
pub async fn table_costs(
    conn: &mut Conn,
    schema: &str,
    table: &str,
    costs: &mut TableCosts,
) -> Result<(), mysql_async::Error> {
    let rows: Vec<(String, String)> = conn
        .exec(
            "SELECT DISTINCT 'index', INDEX_NAME FROM information_schema.STATISTICS \
               WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             UNION ALL SELECT 'trigger', TRIGGER_NAME FROM information_schema.TRIGGERS \
               WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? \
                 AND EVENT_MANIPULATION = 'INSERT' \
             UNION ALL SELECT 'check', CONSTRAINT_NAME \
               FROM information_schema.TABLE_CONSTRAINTS \
               WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
                 AND CONSTRAINT_TYPE IN ('CHECK', 'FOREIGN KEY') \
             ORDER BY 1, 2",
            (schema, table, schema, table, schema, table),
        )
        .await?;
    for (kind, name) in rows {
        costs.add(&kind, table.to_string(), name);
    }
    Ok(())
}

/// Where the session's `TIMESTAMP`s fit: the server's version and time zone.
async fn timestamp_rule(conn: &mut Conn) -> Result<TimestampRule, CatalogError> {
    let (version, zone, system): (String, String, String) = conn
        .query_first("SELECT VERSION(), @@session.time_zone, @@system_time_zone")
        .await?
        .unwrap_or_default();
    Ok(TimestampRule::of(&version, &zone, &system))
}

/// The columns of `table` whose own check is exactly `json_valid` of the column (how MariaDB
/// spells a `JSON` column). None where the catalog has no such view (MySQL, whose `JSON` is a
/// type of its own, left to the server).
async fn json_checked(conn: &mut Conn, schema: &str, table: &str) -> Vec<String> {
    let checks: Vec<(String, String)> = conn
        .exec(
            "SELECT CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ? AND LEVEL = 'Column'",
            (schema, table),
        )
        .await
        .unwrap_or_default();
    checks
        .into_iter()
        .filter(|(column, clause)| *clause == format!("json_valid({})", quote_ident(column)))
        .map(|(column, _)| column)
        .collect()
}

/// The table's identity, `schema.name@creation time`, and its storage's generation, InnoDB's
/// table id: a table created again has another creation time (and another table id), a
/// truncated one keeps its creation time and gets a new table id. The generation is `None`
/// where InnoDB's own table list is not readable (it needs the PROCESS privilege).
pub async fn table_identity(
    conn: &mut Conn,
    schema: &str,
    table: &str,
) -> Result<(String, Option<String>), CatalogError> {
    let created: Option<Option<String>> = conn
        .exec_first(
            "SELECT CAST(CREATE_TIME AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (schema, table),
        )
        .await?;
    let generation: Option<u64> = conn
        .exec_first(
            "SELECT TABLE_ID FROM information_schema.INNODB_SYS_TABLES WHERE NAME = ?",
            (format!("{schema}/{table}"),),
        )
        .await
        .ok()
        .flatten();
    let created = created.flatten().unwrap_or_default();
    Ok((
        format!("{schema}.{table}@{created}"),
        generation.map(|g| g.to_string()),
    ))
}

/// The table's identity alone (see [`table_identity`]).
pub async fn table_id(conn: &mut Conn, schema: &str, table: &str) -> Result<String, CatalogError> {
    Ok(table_identity(conn, schema, table).await?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_on_dots_outside_backticks() {
        assert_eq!(split_name("t"), Ok((None, "t".into())));
        assert_eq!(split_name("d.t"), Ok((Some("d".into()), "t".into())));
        assert_eq!(
            split_name("`my.db`.`a``b`"),
            Ok((Some("my.db".into()), "a`b".into()))
        );
        assert!(split_name("a.b.c").is_err());
        assert!(split_name("`a").is_err());
        assert_eq!(quote_ident("a`b"), "`a``b`");
    }
}
