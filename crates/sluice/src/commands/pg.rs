//! `sluice pg`: the private PostgreSQL cluster sluice uses when no target is given.

use crate::failure::Failure;
use crate::target::default_pg_dir;
use clap::{Args, Subcommand};
use sluice_postgres::cluster::{bulk_load_settings, Cluster, Status};
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  sluice pg start              # create (first time), start, print the URL
  sluice pg status             # where, which port, settings, disk use
  sluice pg psql -- -c 'select 1'   # arguments after -- go to psql
  psql \"$(sluice pg url)\"      # any client, with the URL
  sluice pg stop
  sluice pg destroy            # stop it and delete its directory

Exit codes: 0 done, 1 local failure, 4 the cluster is not running
(status, url).")]
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
    /// Print the connection URL (exit 4 when the cluster is not running).
    Url,
    /// Open psql on the cluster (starting it if needed); arguments after `--` go to psql.
    Psql {
        /// Arguments for psql, after `--` (for example: -- -c 'select 1').
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "PSQL ARGS"
        )]
        args: Vec<String>,
    },
    /// Stop the cluster and delete its directory, data and all.
    Destroy,
    /// Print the bulk-load server settings the cluster is made with, as postgresql.conf lines
    /// (to apply them to another server, or to a benchmark's cluster).
    Settings {
        /// With wal_level minimal and max_wal_senders 0.
        #[arg(long)]
        minimal_wal: bool,
    },
}

pub fn run(args: PgArgs) -> Result<(), Failure> {
    run_inner(args)
}

fn run_inner(args: PgArgs) -> Result<(), Failure> {
    if let PgCommand::Settings { minimal_wal } = args.command {
        let settings = if minimal_wal {
            sluice_postgres::cluster::minimal_wal_settings()
        } else {
            bulk_load_settings()
        };
        for (k, v) in settings {
            println!("{k} = '{v}'");
        }
        return Ok(());
    }
    let dir = default_pg_dir(args.pg_dir);
    let cluster = Cluster::new(&dir).map_err(crate::failure::from_cluster)?;
    match args.command {
        PgCommand::Start => {
            cluster
                .init(&bulk_load_settings())
                .map_err(crate::failure::from_cluster)?;
            let port = cluster.start().map_err(crate::failure::from_cluster)?;
            eprintln!(
                "sluice: PostgreSQL is running in {} on port {port}",
                dir.display()
            );
            println!("{}", cluster.url().unwrap_or_default());
            Ok(())
        }
        PgCommand::Stop => {
            if !matches!(cluster.status(), Status::Running { .. }) {
                eprintln!(
                    "sluice: the cluster in {} is not running (nothing to stop)",
                    dir.display()
                );
                return Ok(());
            }
            cluster.stop().map_err(crate::failure::from_cluster)?;
            eprintln!("sluice: stopped the cluster in {}", dir.display());
            Ok(())
        }
        PgCommand::Destroy => {
            if matches!(cluster.status(), Status::Absent) && !dir.exists() {
                eprintln!(
                    "sluice: no cluster in {} (nothing to remove)",
                    dir.display()
                );
                return Ok(());
            }
            if !cluster.is_sluice_cluster() {
                return Err(Failure::Usage(format!(
                    "{} does not look like a cluster sluice made (no sluice.port, no \
                     PG_VERSION): not removing it",
                    dir.display()
                )));
            }
            let size = dir_size(&dir);
            cluster.destroy().map_err(crate::failure::from_cluster)?;
            eprintln!(
                "sluice: removed the cluster in {} ({})",
                dir.display(),
                crate::progress::human_bytes(size)
            );
            Ok(())
        }
        PgCommand::Status => {
            let status = cluster.status();
            println!("directory: {}", dir.display());
            println!("binaries:  {}", cluster.bindir.display());
            match status {
                Status::Absent => {
                    println!("status:    no cluster (`sluice pg start` creates one)");
                    return Err(Failure::Connect(format!("no cluster in {}", dir.display())));
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
            println!(
                "disk use:  {} (`sluice pg destroy` removes it)",
                crate::progress::human_bytes(dir_size(&dir))
            );
            println!("configuration (postgresql.auto.conf):");
            for line in cluster.settings_text().lines() {
                println!("  {line}");
            }
            match status {
                Status::Running { .. } => Ok(()),
                _ => Err(Failure::Connect(format!(
                    "the cluster in {} is not running",
                    dir.display()
                ))),
            }
        }
        PgCommand::Url => match (cluster.status(), cluster.url()) {
            (Status::Running { .. }, Some(u)) => {
                println!("{u}");
                Ok(())
            }
            (Status::Absent, _) => Err(Failure::Connect(format!(
                "no cluster in {}: run `sluice pg start`",
                dir.display()
            ))),
            _ => Err(Failure::Connect(format!(
                "the cluster in {} is not running: run `sluice pg start`",
                dir.display()
            ))),
        },
        PgCommand::Settings { .. } => Ok(()),
        PgCommand::Psql { args } => {
            cluster
                .init(&bulk_load_settings())
                .map_err(crate::failure::from_cluster)?;
            cluster.start().map_err(crate::failure::from_cluster)?;
            let url = cluster.url().unwrap_or_default();
            // clap keeps a `--` that follows other arguments; psql would take it as the end
            // of its options and ignore the rest.
            let args: Vec<&String> = args.iter().filter(|a| a.as_str() != "--").collect();
            let status = std::process::Command::new(cluster.bindir.join("psql"))
                .arg(&url)
                .args(args)
                .status()
                .map_err(|e| Failure::Local(format!("cannot run psql: {e}")))?;
            match status.code() {
                Some(0) => Ok(()),
                code => Err(Failure::Exited(code.unwrap_or(1) as u8)),
            }
        }
    }
}

/// The bytes under a directory (what removing it frees).
pub fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
