//! `sluice demo`: the whole job in one command. Generate TPC-H (unless it is already there and
//! complete), start the private cluster (or use `--target`), create the tables, load them in
//! parallel, verify every table's row count against the generator's, run Q1, and put the
//! throughput next to the seed paper's record, honestly labelled. `--engine mariadb` does the
//! same on a private MariaDB server (or a `mariadb://` target).

use super::gen::{default_tpch_dir, ensure_tpch};
use super::load::{load, LoadArgs};
use crate::failure::{Failure, OrFailure};
use crate::tpch;
use clap::Args;
use std::path::PathBuf;

/// The seed paper: 1.18 TB of TPC-H loaded into SQL Server 2008 in 1,794 s (2008, 64 cores).
const SEED_TB_PER_HOUR: f64 = 1.18 * 3600.0 / 1794.0;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  sluice demo                  # SF1 into the private cluster, verified
  sluice demo --scale 10 --jobs 8 --target postgresql://...
  sluice demo --clean          # and delete the generated data after
  sluice demo --engine mariadb # the same on a private MariaDB server

The demo drops and recreates the eight TPC-H tables in the target
database. It prints where it wrote the data (about 1 GB per scale
unit) and the private cluster (several GB once loaded): `sluice pg
destroy` removes the cluster, --clean the data. The private MariaDB
(--engine mariadb) takes about 700 MB before any data (its redo log)
and is stopped when the demo ends; rm -r its directory removes it.")]
pub struct DemoArgs {
    /// TPC-H scale factor (1 is about 1 GB).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Parallel connections, or `auto` (default as for `sluice load`).
    #[arg(long, short = 'j', value_name = "N|auto", value_parser = super::load::parse_jobs)]
    pub jobs: Option<sluice_engine::spec::Jobs>,
    /// Load into this server instead of the private cluster.
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,
    /// Where the generated data lives (default: beside the private cluster).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Files per table.
    #[arg(long, default_value_t = 4)]
    pub parts: u32,
    /// The private cluster's directory (default: $SLUICE_PG_DIR, else
    /// ~/.local/share/sluice/pg, or /var/lib/sluice/pg for root).
    #[arg(long, value_name = "DIR")]
    pub pg_dir: Option<PathBuf>,
    /// Which database: sluice's private PostgreSQL (the default) or a private MariaDB server,
    /// started for the demo and stopped after it (default: the --target's kind).
    #[arg(long, value_enum, value_name = "postgres|mariadb")]
    pub engine: Option<tpch::SqlDialect>,
    /// The private MariaDB's directory (default: $SLUICE_MARIADB_DIR, else `mariadb` beside
    /// the private PostgreSQL's).
    #[arg(long, value_name = "DIR")]
    pub mariadb_dir: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Delete the generated data when the demo is done (the loaded tables stay).
    #[arg(long)]
    pub clean: bool,
}

pub fn run(args: DemoArgs) -> Result<(), Failure> {
    demo(&args)
}

fn step(n: u32, text: &str) {
    eprintln!("sluice demo [{n}/8] {text}");
}

fn demo(args: &DemoArgs) -> Result<(), Failure> {
    let mariadb = crate::target::mariadb_target(args.target.as_deref());
    match (args.engine, mariadb) {
        (Some(tpch::SqlDialect::Postgres), Some(_)) => Err(Failure::Usage(
            "--engine postgres with a MariaDB target (--target or DATABASE_URL): give one or \
             the other"
                .into(),
        )),
        (Some(tpch::SqlDialect::Mariadb), None) if args.target.is_some() => Err(Failure::Usage(
            "--engine mariadb with a PostgreSQL --target: give a mariadb:// target, or \
                 leave --target out for a private MariaDB"
                .into(),
        )),
        (Some(tpch::SqlDialect::Mariadb), _) | (None, Some(_)) => demo_mariadb(args),
        _ => demo_postgres(args),
    }
}

/// Step 1 of either demo: the private PostgreSQL's directory (the data's default place), the
/// data's directory, and the generated (or found complete) TPC-H.
fn tpch_data(args: &DemoArgs) -> Result<(PathBuf, PathBuf, tpch::Manifest), Failure> {
    let pg_dir = crate::target::default_pg_dir(args.pg_dir.clone());
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| default_tpch_dir(&pg_dir, args.scale, args.parts));
    step(1, "TPC-H data");
    let manifest = ensure_tpch(args.scale, args.parts, &data, true, !args.quiet).or_fail()?;
    Ok((pg_dir, data, manifest))
}

fn demo_postgres(args: &DemoArgs) -> Result<(), Failure> {
    // 1. Data.
    let (pg_dir, data, manifest) = tpch_data(args)?;
    // 2. Server.
    step(
        2,
        match &args.target {
            Some(_) => "connecting to the target",
            None => "starting sluice's private PostgreSQL",
        },
    );
    let target =
        crate::target::resolve(args.target.as_deref(), Some(pg_dir.clone()), false).or_fail()?;
    let url = target.info.to_string();
    // 3. Tables.
    step(3, "creating the TPC-H tables (dropping old ones)");
    super::ddl::create(args.target.as_deref(), Some(pg_dir.clone()), true).or_fail()?;
    // 4. Load.
    step(4, "loading all eight tables");
    let files: Vec<String> = manifest
        .files
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect();
    let load_args = LoadArgs {
        files,
        target: Some(url_with_password(&target.info, args.target.as_deref())),
        jobs: args.jobs,
        quiet: args.quiet,
        pg_dir: Some(pg_dir.clone()),
        ..LoadArgs::defaults()
    };
    let report = load(&load_args)?;
    print!("{}", crate::summary::render(&report));
    // 5. Verify.
    step(
        5,
        "verifying every table's row count against the generator's",
    );
    let db = sluice_postgres::admin::Admin::connect(&target.info)
        .map_err(anyhow::Error::from)
        .or_fail()?;
    let counts = tpch::table_counts(&db)
        .map_err(anyhow::Error::from)
        .or_fail()?;
    verify(&counts, &manifest)?;
    // 6. Query.
    step(6, "running TPC-H Q1");
    let q1 = db
        .query_text(tpch::Q1)
        .map_err(anyhow::Error::from)
        .or_fail()?;
    println!("\nTPC-H Q1 (pricing summary report):");
    print_rows(&q1.columns, &q1.rows);
    // 7. The figure next to the seed's.
    step(7, "summary");
    print_throughput(&report);
    // 8. How to connect.
    step(8, "done");
    // Name the program as it was invoked: after scripts/demo.sh it is not on PATH.
    let me = std::env::args().next().unwrap_or_else(|| "sluice".into());
    match &args.target {
        None => println!(
            "\nconnect with: {}      (or: psql {url})",
            pg_command(&me, &pg_dir, "psql")
        ),
        Some(_) => println!("\nconnect with: psql {url}"),
    }
    report_data(args, &data, &format!("{me} demo"))?;
    if args.target.is_none() {
        println!(
            "cluster: {} ({}; `{}` removes it)",
            pg_dir.display(),
            size(&pg_dir),
            pg_command(&me, &pg_dir, "destroy")
        );
    }
    Ok(())
}

/// The demo on MariaDB: a private server in its directory for the demo's length (made once,
/// started with the bulk-load settings, stopped at the end), or a `mariadb://` target.
fn demo_mariadb(args: &DemoArgs) -> Result<(), Failure> {
    let (pg_dir, data, manifest) = tpch_data(args)?;
    let given = crate::target::mariadb_target(args.target.as_deref());
    step(
        2,
        match &given {
            Some(_) => "connecting to the target",
            None => "starting a private MariaDB server",
        },
    );
    let dir = mariadb_dir(args.mariadb_dir.clone(), &pg_dir);
    let (server, url) = match given {
        Some(url) => (None, url),
        None => {
            let (server, url) = private_mariadb(&dir)?;
            (Some(server), url)
        }
    };
    step(3, "creating the TPC-H tables (dropping old ones)");
    super::ddl::create_mariadb(&url, true, &tpch::ddl()).or_fail()?;
    step(4, "loading all eight tables");
    let load_args = LoadArgs {
        files: manifest
            .files
            .iter()
            .map(|f| f.path.to_string_lossy().into_owned())
            .collect(),
        target: Some(url.clone()),
        jobs: args.jobs,
        quiet: args.quiet,
        ..LoadArgs::defaults()
    };
    let report = load(&load_args)?;
    print!("{}", crate::summary::render(&report));
    step(
        5,
        "verifying every table's row count against the generator's",
    );
    let info = crate::target::resolve_mariadb(&url).or_fail()?;
    let mut db = sluice_mariadb::admin::Admin::connect(&info)
        .map_err(anyhow::Error::from)
        .or_fail()?;
    let mut counts = Vec::new();
    for t in tpch::TABLES {
        let (_, rows) = db
            .query_text(&format!("SELECT COUNT(*) FROM {t}"))
            .map_err(anyhow::Error::from)
            .or_fail()?;
        let n = rows
            .first()
            .and_then(|r| r.first())
            .and_then(|v| v.parse().ok());
        counts.push((t.to_string(), n.unwrap_or(0)));
    }
    verify(&counts, &manifest)?;
    step(6, "running TPC-H Q1");
    let (columns, rows) = db
        .query_text(tpch::Q1)
        .map_err(anyhow::Error::from)
        .or_fail()?;
    println!("\nTPC-H Q1 (pricing summary report):");
    print_rows(&columns, &rows);
    step(7, "summary");
    print_throughput(&report);
    step(8, "done");
    let me = std::env::args().next().unwrap_or_else(|| "sluice".into());
    if server.is_none() {
        println!("\nconnect with: {}", mariadb_command(&info));
    }
    report_data(args, &data, &format!("{me} demo --engine mariadb"))?;
    if let Some(server) = server {
        server.stop();
        println!(
            "server:  {} ({}; the private MariaDB stopped with the demo: its data directory \
             keeps the tables, and the next `--engine mariadb` demo starts it, drops them and \
             loads again; rm -r it to remove it)",
            dir.display(),
            size(&dir)
        );
    }
    Ok(())
}

/// The `mariadb` client's command for `info` (the password asked for, never printed).
fn mariadb_command(info: &sluice_mariadb::conninfo::ConnInfo) -> String {
    let db = info.database.as_deref().unwrap_or("");
    match &info.socket {
        Some(socket) => format!("mariadb --socket={socket} -u {} -p {db}", info.user),
        None => format!(
            "mariadb -h {} -P {} -u {} -p {db}",
            info.host, info.port, info.user
        ),
    }
}

/// The private MariaDB's directory: `--mariadb-dir`, `$SLUICE_MARIADB_DIR`, or `mariadb`
/// beside the private PostgreSQL's.
fn mariadb_dir(given: Option<PathBuf>, pg_dir: &std::path::Path) -> PathBuf {
    given
        .or_else(|| std::env::var_os("SLUICE_MARIADB_DIR").map(PathBuf::from))
        .unwrap_or_else(|| pg_dir.with_file_name("mariadb"))
}

/// Starts the private MariaDB in `dir` (made on first use) and gives its `tpch` database's URL.
/// A directory that holds anything else is refused (as root, making the server's directory
/// gives it to the `mysql` user), and so is one whose server still runs (a killed demo's).
fn private_mariadb(
    dir: &std::path::Path,
) -> Result<(sluice_mariadb::cluster::Cluster, String), Failure> {
    use sluice_mariadb::cluster::{bulk_load_settings, Cluster, ClusterError};
    let failed = |e: ClusterError| Failure::Connect(format!("the private MariaDB: {e}"));
    let server = Cluster::new(dir).map_err(failed)?;
    let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
    if !server.initialized() && !empty {
        return Err(Failure::Usage(format!(
            "--mariadb-dir {} holds other files and no private MariaDB: give an empty or new \
             directory",
            dir.display()
        )));
    }
    if std::os::unix::net::UnixStream::connect(server.socket()).is_ok() {
        return Err(Failure::Usage(format!(
            "a MariaDB server still runs in {} (an earlier demo's, stopped before it could \
             stop it): kill $(cat {}/mariadb.pid), then run the demo again",
            dir.display(),
            dir.display()
        )));
    }
    if !server.initialized() {
        server.init().map_err(failed)?;
    }
    server.start(&bulk_load_settings()).map_err(failed)?;
    server
        .root_sql("CREATE DATABASE IF NOT EXISTS tpch CHARACTER SET utf8mb4")
        .map_err(failed)?;
    let url = server
        .url("tpch")
        .ok_or_else(|| failed(ClusterError::Failed("it has no port".into())))?;
    Ok((server, url))
}

/// Every table's count against the generator's, or which differ.
fn verify(counts: &[(String, u64)], manifest: &tpch::Manifest) -> Result<(), Failure> {
    let mut bad = Vec::new();
    for (t, n) in counts {
        let want = manifest.rows(t);
        if *n != want {
            bad.push(format!("{t}: {n} rows loaded, {want} generated"));
        }
    }
    if !bad.is_empty() {
        return Err(Failure::Local(format!(
            "verification failed: {}",
            bad.join("; ")
        )));
    }
    println!("verified: all eight tables hold exactly the generated rows");
    Ok(())
}

fn size(d: &std::path::Path) -> String {
    crate::progress::human_bytes(super::pg::dir_size(d))
}

/// The load's throughput next to the seed paper's record.
fn print_throughput(report: &sluice_engine::report::Report) {
    let secs = report.elapsed_seconds;
    let bytes = report.total.bytes;
    let tb_h = bytes as f64 / 1e12 / (secs / 3600.0);
    println!(
        "\nloaded {} rows, {:.2} GB in {:.2} s: {:.1} MB/s = {:.4} TB/hour with {} connections",
        crate::progress::thousands(report.total.rows),
        bytes as f64 / 1e9,
        secs,
        report.total.mb_per_s,
        tb_h,
        report.jobs
    );
    println!(
        "for scale: the 2008 SSIS record was {SEED_TB_PER_HOUR:.2} TB/hour (1.18 TB in 1,794 s, \
         SQL Server on a 64-processor Unisys ES7000 fed by four source servers, 56 streams). Different machine, different \
         database: a reference point, not a like-for-like comparison."
    );
}

/// Where the generated data is (or that it was removed, with --clean); `demo` is the command
/// that runs this demo again.
fn report_data(args: &DemoArgs, data: &std::path::Path, demo: &str) -> Result<(), Failure> {
    if args.clean {
        let freed = size(data);
        std::fs::remove_dir_all(data)
            .map_err(|e| anyhow::anyhow!("removing {}: {e}", data.display()))
            .or_fail()?;
        println!("removed the generated data in {} ({freed})", data.display());
    } else {
        println!(
            "data:    {} ({}; `{demo} --clean` deletes it after the demo, or rm -r it)",
            data.display(),
            size(data)
        );
    }
    Ok(())
}

/// A `sluice pg` command the user can type in a fresh shell: with the cluster's directory in
/// `SLUICE_PG_DIR` when it is not where `sluice pg` looks by default (scripts/demo.sh, or a
/// `--pg-dir`, put it elsewhere).
fn pg_command(me: &str, pg_dir: &std::path::Path, sub: &str) -> String {
    if pg_dir == crate::target::builtin_pg_dir() {
        return format!("{me} pg {sub}");
    }
    let dir = pg_dir.display().to_string();
    let plain = dir
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@".contains(c));
    let dir = if plain {
        dir
    } else {
        format!("'{}'", dir.replace('\'', "'\\''"))
    };
    format!("SLUICE_PG_DIR={dir} {me} pg {sub}")
}

/// The target to hand to `load`: the user's own string when given (it may carry a password
/// the redacted display hides), else the private cluster's URL.
fn url_with_password(info: &sluice_postgres::conninfo::ConnInfo, given: Option<&str>) -> String {
    match given {
        Some(t) => t.to_string(),
        None => info.to_string(),
    }
}

fn print_rows(columns: &[String], body: &[Vec<String>]) {
    let mut rows: Vec<Vec<String>> = vec![columns.to_vec()];
    rows.extend(body.iter().cloned());
    let Some(header) = rows.first() else { return };
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for (i, r) in rows.iter().enumerate() {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect();
        println!("  {}", cells.join("  "));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("  {}", rule.join("  "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pg_command;
    use std::path::Path;

    #[test]
    fn the_connect_hint_names_a_cluster_that_is_not_in_its_default_place() {
        let default = crate::target::builtin_pg_dir();
        assert_eq!(pg_command("sluice", &default, "psql"), "sluice pg psql");
        assert_eq!(
            pg_command("target/release/sluice", Path::new("/data/pg"), "psql"),
            "SLUICE_PG_DIR=/data/pg target/release/sluice pg psql"
        );
        assert_eq!(
            pg_command("sluice", Path::new("/tmp/my pg's"), "destroy"),
            "SLUICE_PG_DIR='/tmp/my pg'\\''s' sluice pg destroy"
        );
    }
}
