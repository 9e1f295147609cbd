//! `sluice ddl tpch`: print, or create, the TPC-H tables.

use crate::failure::Failure;
use crate::target;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DdlCommand {
    /// The eight TPC-H tables with the specification's types, without indexes.
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
    if !args.create {
        print!("{}", crate::tpch::ddl());
        return Ok(());
    }
    create(args.target.as_deref(), args.pg_dir.clone(), args.replace)?;
    eprintln!("sluice: created the TPC-H tables");
    Ok(())
}

/// Creates the TPC-H tables, dropping them first when `replace`.
pub fn create(target: Option<&str>, pg_dir: Option<PathBuf>, replace: bool) -> anyhow::Result<()> {
    let t = target::resolve(target, pg_dir, true)?;
    let db = sluice_postgres::admin::Admin::connect(&t.info)?;
    let mut sql = String::from("BEGIN;\n");
    if replace {
        sql.push_str(&format!(
            "DROP TABLE IF EXISTS {} CASCADE;\n",
            crate::tpch::TABLES.join(", ")
        ));
    }
    sql.push_str(&crate::tpch::ddl());
    sql.push_str("COMMIT;\n");
    db.execute(&sql)?;
    Ok(())
}
