//! `sluice gen tpch`: dbgen-identical TPC-H data, files generated in parallel.

use crate::failure::{Failure, OrFailure, UsageError};
use crate::tpch::{self, file_path, generate_file, is_partitioned, GenFormat, Manifest};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;

#[derive(Subcommand, Debug)]
pub enum GenCommand {
    /// TPC-H data, identical to dbgen's, from the tpchgen crate.
    Tpch(GenTpchArgs),
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  sluice gen tpch --scale 1 --parts 4 --out data/     # like dbgen -C 4
  sluice gen tpch --scale 100 --parts 56 --part 6 --out /mnt/src6
  sluice gen tpch --scale 0.1 --format csv --tables orders,lineitem

The first writes data/lineitem/lineitem.1.tbl and so on; the second,
one source host's share of a 56-stream load. With --parts 1 each table
is one file (data/lineitem.tbl). nation and region are never split and
are written with part 1. CSV files start with a header line.")]
pub struct GenTpchArgs {
    /// Scale factor: 1 is about 1 GB of .tbl files.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Split each big table into this many files.
    #[arg(long, default_value_t = 1)]
    pub parts: u32,
    /// Generate only this part (1-based) of every table.
    #[arg(long)]
    pub part: Option<u32>,
    /// Output directory.
    #[arg(long, default_value = "data")]
    pub out: PathBuf,
    /// Output format: `tbl` (dbgen's `|`-separated lines) or `csv`.
    #[arg(long, value_enum, default_value_t = GenFormat::Tbl, value_name = "tbl|csv")]
    pub format: GenFormat,
    /// Only these tables (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tables: Option<Vec<String>>,
    /// Files generated at once (default: the machine's cores).
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

pub fn run(cmd: GenCommand) -> Result<(), Failure> {
    let GenCommand::Tpch(args) = cmd;
    let m = generate_all(&args).or_fail()?;
    if !args.quiet {
        let rows: u64 = m.files.iter().map(|f| f.rows).sum();
        let bytes: u64 = m.files.iter().map(|f| f.bytes).sum();
        eprintln!(
            "sluice: wrote {} files, {} rows, {} to {}",
            m.files.len(),
            crate::progress::thousands(rows),
            crate::progress::human_bytes(bytes),
            args.out.display()
        );
    }
    Ok(())
}

/// Checks the flags before anything is written.
fn check_args(args: &GenTpchArgs) -> Result<(), UsageError> {
    let fail = |m: String| Err(UsageError(m));
    if args.scale.is_nan() || args.scale <= 0.0 {
        return fail("--scale must be positive".into());
    }
    if args.parts < 1 {
        return fail("--parts must be at least 1".into());
    }
    if let Some(p) = args.part {
        if !(1..=args.parts).contains(&p) {
            return fail(format!("--part {p} is outside 1..={}", args.parts));
        }
    }
    for name in args.tables.iter().flatten() {
        if !tpch::TABLES.contains(&name.as_str()) {
            return fail(format!(
                "`{name}` is not a TPC-H table ({})",
                tpch::TABLES.join(", ")
            ));
        }
    }
    Ok(())
}

/// Generates the requested files and writes the manifest.
pub fn generate_all(args: &GenTpchArgs) -> anyhow::Result<Manifest> {
    check_args(args)?;
    let tables: Vec<String> = match &args.tables {
        Some(t) => t.clone(),
        None => tpch::TABLES.iter().map(|s| s.to_string()).collect(),
    };
    let mut tasks = Vec::new();
    for t in &tables {
        let parts: Vec<u32> = if is_partitioned(t) {
            match args.part {
                Some(p) => vec![p],
                None => (1..=args.parts).collect(),
            }
        } else if args.part.is_none_or(|p| p == 1) {
            vec![1]
        } else {
            vec![]
        };
        for p in parts {
            tasks.push((t.clone(), p));
        }
    }
    std::fs::create_dir_all(&args.out)?;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(tasks.len() as u64);
        if !std::io::stderr().is_terminal() {
            b.set_draw_target(ProgressDrawTarget::hidden());
        }
        b.set_style(
            ProgressStyle::with_template(
                "{prefix:>12.bold} [{bar:32.cyan/blue}] {pos}/{len} files {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_prefix("generating");
        b
    };
    let queue = Mutex::new(tasks.into_iter());
    let results = Mutex::new(Vec::new());
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some((table, part)) = next else { break };
                let path = file_path(&args.out, &table, part, args.parts, args.format);
                let r = generate_file(&table, args.scale, part, args.parts, args.format, &path);
                bar.inc(1);
                if let Ok(f) = &r {
                    bar.set_message(format!("{} done", f.path.display()));
                }
                results.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            });
        }
    });
    bar.finish_and_clear();
    let mut files = Vec::new();
    for r in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        files.push(r?);
    }
    files.sort_by(|a, b| (&a.table, a.part).cmp(&(&b.table, b.part)));
    let manifest = Manifest {
        scale: args.scale,
        parts: args.parts,
        format: args.format,
        files,
    };
    manifest.write(&args.out)?;
    Ok(manifest)
}

/// Where demo and bench keep generated TPC-H by default: beside the private cluster.
pub fn default_tpch_dir(pg_dir: &std::path::Path, scale: f64, parts: u32) -> PathBuf {
    pg_dir
        .parent()
        .unwrap_or(pg_dir)
        .join(format!("tpch-sf{scale}-p{parts}"))
}

/// TPC-H `.tbl` data at `dir`: reused when its manifest matches and every file is intact,
/// generated otherwise (with a progress bar when `bars`). Says which on stderr when `say`.
pub fn ensure_tpch(
    scale: f64,
    parts: u32,
    dir: &std::path::Path,
    say: bool,
    bars: bool,
) -> anyhow::Result<Manifest> {
    let wanted = |m: &Manifest| {
        m.scale == scale && m.parts == parts && m.format == GenFormat::Tbl && m.complete()
    };
    if let Some(m) = Manifest::read(dir).filter(wanted) {
        if say {
            eprintln!("sluice: TPC-H SF{scale} is already in {}", dir.display());
        }
        return Ok(m);
    }
    if say {
        eprintln!(
            "sluice: generating TPC-H SF{scale} in {parts} parts in {}",
            dir.display()
        );
    }
    let m = generate_all(&GenTpchArgs {
        scale,
        parts,
        part: None,
        out: dir.to_path_buf(),
        format: GenFormat::Tbl,
        tables: None,
        jobs: None,
        quiet: !bars,
    })?;
    Ok(m)
}
