//! `sluice ddl tpch`: print, or create, the TPC-H tables.

use crate::failure::{Failure, OrFailure};
use crate::target;
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
    /// each part and switches it in). nation and region stay plain.
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
    /// The scale factor the partitions are aligned with (with --partitions).
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub scale: f64,
    /// Add the primary keys (on the parents, so every partition has them).
    #[arg(long)]
    pub keys: bool,
    /// Where to create them (default: as for `sluice load`).
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,
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
    let sql = layout(args.partitions, args.scale, args.keys);
    if !args.create {
        print!("{sql}");
        return Ok(());
    }
    create_sql(
        args.target.as_deref(),
        args.pg_dir.clone(),
        args.replace,
        &sql,
    )
    .or_fail()?;
    eprintln!(
        "sluice: created the TPC-H tables{}{}",
        args.partitions.map_or(String::new(), |n| format!(
            ", the big six in {n} partitions each"
        )),
        if args.keys { ", with primary keys" } else { "" }
    );
    Ok(())
}

/// The DDL of a layout: plain or partitioned, with or without primary keys.
pub fn layout(partitions: Option<u32>, scale: f64, keys: bool) -> String {
    match partitions {
        Some(n) => crate::tpch::partitioned_ddl(scale, n, keys),
        None if keys => crate::tpch::ddl() + &crate::tpch::primary_keys(),
        None => crate::tpch::ddl(),
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

/// Without `--replace`, TPC-H tables that already exist are the user's to keep or drop: a usage
/// error (exit 2) naming them and the two ways on, before anything is created.
fn refuse_existing(db: &sluice_postgres::admin::Admin) -> anyhow::Result<()> {
    let probes: Vec<String> = crate::tpch::TABLES
        .iter()
        .map(|t| format!("SELECT '{t}' WHERE to_regclass('{t}') IS NOT NULL"))
        .collect();
    let found = db.query_text(&probes.join(" UNION ALL "))?;
    let existing: Vec<&str> = found.rows.iter().map(|r| r[0].as_str()).collect();
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
