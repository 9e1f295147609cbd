//! `sluice ddl tpch`: print, or create, the TPC-H tables, in PostgreSQL's SQL or MariaDB's.

use crate::failure::{Failure, OrFailure};
use crate::target;
use crate::tpch::SqlDialect;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DdlCommand {
    /// The eight TPC-H tables with the specification's types; plain or partitioned, with or
    /// without primary keys.
    Tpch(DdlTpchArgs),
}

#[derive(Args, Debug, Clone)]
pub struct DdlTpchArgs {
    /// Create the tables instead of printing the statements.
    #[arg(long)]
    pub create: bool,
    /// Drop existing TPC-H tables first (with --create).
    #[arg(long, requires = "create")]
    pub replace: bool,
    /// Partition the six big tables by key range into N partitions, one per part of
    /// `sluice gen tpch --scale S --parts N` (the record's layout; `sluice load` then stages
    /// each part and switches it in on PostgreSQL). nation and region stay plain.
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
    /// The scale factor the partitions are aligned with (with --partitions).
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub scale: f64,
    /// Add the primary keys (on the parents, so every partition has them).
    #[arg(long)]
    pub keys: bool,
    /// Where to create them (default: as for `sluice load`); a mariadb:// target creates
    /// MariaDB's tables (InnoDB, one statement at a time: MariaDB's DDL commits on its own).
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,
    /// Whose SQL to print (default: the target's, else PostgreSQL's). MariaDB's partitions
    /// are `PARTITION p<k> VALUES LESS THAN (...)` clauses of their table.
    #[arg(long, value_enum, value_name = "postgres|mariadb")]
    pub dialect: Option<SqlDialect>,
    /// The private cluster's directory, used when no target is given (default:
    /// $SLUICE_PG_DIR, else ~/.local/share/sluice/pg, or /var/lib/sluice/pg for root).
    #[arg(long, value_name = "DIR")]
    pub pg_dir: Option<PathBuf>,
}

pub fn run(cmd: DdlCommand) -> Result<(), Failure> {
    let DdlCommand::Tpch(args) = cmd;
    if args.partitions == Some(0) {
        return Err(Failure::Usage("--partitions must be at least 1".into()));
    }
    if args.scale.is_nan() || args.scale <= 0.0 {
        return Err(Failure::Usage("--scale must be positive".into()));
    }
    let mariadb = target::mariadb_target(args.target.as_deref());
    let dialect =
        match (args.dialect, &mariadb) {
            (Some(SqlDialect::Postgres), Some(_)) if args.create => return Err(Failure::Usage(
                "--dialect postgres with a MariaDB target: give --dialect mariadb, or leave it \
                 out"
                .into(),
            )),
            (Some(d), _) => d,
            (None, Some(_)) => SqlDialect::Mariadb,
            (None, None) => SqlDialect::Postgres,
        };
    let sql = layout(args.partitions, args.scale, args.keys, dialect)?;
    if !args.create {
        print!("{sql}");
        return Ok(());
    }
    match (mariadb, dialect) {
        (Some(url), _) => create_mariadb(&url, args.replace, &sql).or_fail()?,
        (None, SqlDialect::Mariadb) => {
            return Err(Failure::Usage(
                "--dialect mariadb --create needs a mariadb:// --target to create them in".into(),
            ))
        }
        (None, SqlDialect::Postgres) => create_sql(
            args.target.as_deref(),
            args.pg_dir.clone(),
            args.replace,
            &sql,
        )
        .or_fail()?,
    }
    eprintln!(
        "sluice: created the TPC-H tables{}{}",
        args.partitions.map_or(String::new(), |n| format!(
            ", the big six in {n} partitions each"
        )),
        if args.keys { ", with primary keys" } else { "" }
    );
    Ok(())
}

/// The DDL of a layout: plain or partitioned, with or without primary keys. More partitions
/// than a table has rows at the scale leave a part empty, with no key to start its partition
/// at: a usage error.
pub fn layout(
    partitions: Option<u32>,
    scale: f64,
    keys: bool,
    dialect: SqlDialect,
) -> Result<String, Failure> {
    match partitions {
        Some(n) => crate::tpch::partitioned_ddl(scale, n, keys, dialect).map_err(|e| {
            Failure::Usage(format!(
                "--partitions {n} at --scale {scale}: part {} of {} would be empty, with no key \
                 to start its partition at; give fewer partitions (at most {}'s rows at this \
                 scale) or a larger scale",
                e.part, e.table, e.table
            ))
        }),
        None if keys => Ok(crate::tpch::ddl() + &crate::tpch::primary_keys()),
        None => Ok(crate::tpch::ddl()),
    }
}

/// Creates the plain TPC-H tables, dropping them first when `replace`.
pub fn create(target: Option<&str>, pg_dir: Option<PathBuf>, replace: bool) -> anyhow::Result<()> {
    create_sql(target, pg_dir, replace, &crate::tpch::ddl())
}

/// Runs `ddl` in one transaction, dropping the TPC-H tables first when `replace`.
pub fn create_sql(
    target: Option<&str>,
    pg_dir: Option<PathBuf>,
    replace: bool,
    ddl: &str,
) -> anyhow::Result<()> {
    let t = target::resolve(target, pg_dir, true)?;
    let db = sluice_postgres::admin::Admin::connect(&t.info)?;
    if !replace {
        refuse_existing(&db)?;
    }
    let mut sql = String::from("BEGIN;\n");
    if replace {
        sql.push_str(&format!(
            "DROP TABLE IF EXISTS {} CASCADE;\n",
            crate::tpch::TABLES.join(", ")
        ));
    }
    sql.push_str(ddl);
    sql.push_str("COMMIT;\n");
    db.execute(&sql)?;
    Ok(())
}

/// Creates the tables in MariaDB, one statement at a time (each commits on its own), after
/// dropping them when `replace`; without it, refuses before creating anything when any
/// exists.
pub fn create_mariadb(url: &str, replace: bool, ddl: &str) -> anyhow::Result<()> {
    let info = target::resolve_mariadb(url)?;
    let mut db = sluice_mariadb::admin::Admin::connect(&info)?;
    if replace {
        db.execute(&format!(
            "DROP TABLE IF EXISTS {}",
            crate::tpch::TABLES.join(", ")
        ))?;
    } else {
        let found = db.existing_tables(&crate::tpch::TABLES)?;
        refuse_these(&found.iter().map(String::as_str).collect::<Vec<_>>())?;
    }
    for statement in ddl.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        db.execute(statement)?;
    }
    Ok(())
}

/// Without `--replace`, TPC-H tables that already exist are the user's to keep or drop: a usage
/// error (exit 2) naming them and the two ways on, before anything is created.
fn refuse_existing(db: &sluice_postgres::admin::Admin) -> anyhow::Result<()> {
    let probes: Vec<String> = crate::tpch::TABLES
        .iter()
        .map(|t| format!("SELECT '{t}' WHERE to_regclass('{t}') IS NOT NULL"))
        .collect();
    let found = db.query_text(&probes.join(" UNION ALL "))?;
    let existing: Vec<&str> = found.rows.iter().map(|r| r[0].as_str()).collect();
    refuse_these(&existing)
}

/// The refusal of `existing` TPC-H tables, if any.
fn refuse_these(existing: &[&str]) -> anyhow::Result<()> {
    if existing.is_empty() {
        return Ok(());
    }
    Err(crate::failure::UsageError(format!(
        "the TPC-H table(s) {} already exist in this database: give --replace to drop and \
         create them again (their rows are lost), or drop them yourself, or load into them as \
         they are",
        existing.join(", ")
    ))
    .into())
}
