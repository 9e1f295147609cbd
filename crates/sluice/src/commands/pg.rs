//! `sluice pg`: the private PostgreSQL cluster sluice uses when no target is given.

use crate::target::default_pg_dir;
use clap::{Args, Subcommand};
use sluice_postgres::cluster::{bulk_load_settings, Cluster, Status};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct PgArgs {
    #[command(subcommand)]
    pub command: PgCommand,
    /// The cluster's directory (default: $SLUICE_PG_DIR, else ~/.local/share/sluice/pg, or
    /// /var/lib/sluice/pg for root).
    #[arg(long, value_name = "DIR", global = true)]
    pub pg_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum PgCommand {
    /// Create the cluster if needed and start it (a running cluster is reused).
    Start,
    /// Stop the cluster.
    Stop,
    /// Is it running, where, on which port, with which settings.
    Status,
    /// Print the connection URL.
    Url,
    /// Open psql on the cluster; arguments after `--` go to psql.
    Psql {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(args: PgArgs) -> i32 {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn run_inner(args: PgArgs) -> anyhow::Result<i32> {
    let dir = default_pg_dir(args.pg_dir);
    let cluster = Cluster::new(&dir)?;
    match args.command {
        PgCommand::Start => {
            cluster.init(&bulk_load_settings())?;
            let port = cluster.start()?;
            eprintln!(
                "sluice: PostgreSQL is running in {} on port {port}",
                dir.display()
            );
            println!("{}", cluster.url().unwrap_or_default());
            Ok(0)
        }
        PgCommand::Stop => {
            cluster.stop()?;
            eprintln!("sluice: stopped the cluster in {}", dir.display());
            Ok(0)
        }
        PgCommand::Status => {
            let status = cluster.status();
            println!("directory: {}", dir.display());
            println!("binaries:  {}", cluster.bindir.display());
            match status {
                Status::Absent => {
                    println!("status:    no cluster (`sluice pg start` creates one)");
                    return Ok(3);
                }
                Status::Stopped => println!("status:    stopped"),
                Status::Running { port, pid } => {
                    println!("status:    running (pid {pid}, port {port})");
                    println!("url:       {}", cluster.url().unwrap_or_default());
                }
            }
            println!(
                "server user: {}",
                if cluster.runs_as_postgres() {
                    "postgres (sluice runs as root)"
                } else {
                    "the invoking user"
                }
            );
            println!("configuration (postgresql.auto.conf):");
            for line in cluster.settings_text().lines() {
                println!("  {line}");
            }
            Ok(if matches!(status, Status::Running { .. }) {
                0
            } else {
                3
            })
        }
        PgCommand::Url => match cluster.url() {
            Some(u) => {
                println!("{u}");
                Ok(0)
            }
            None => {
                eprintln!(
                    "error: no cluster in {}: run `sluice pg start`",
                    dir.display()
                );
                Ok(3)
            }
        },
        PgCommand::Psql { args } => {
            cluster.init(&bulk_load_settings())?;
            cluster.start()?;
            let url = cluster.url().unwrap_or_default();
            let status = std::process::Command::new(cluster.bindir.join("psql"))
                .arg(&url)
                .args(&args)
                .status()?;
            Ok(status.code().unwrap_or(1))
        }
    }
}
