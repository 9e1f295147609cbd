//! `sluice bench`: the TPC-H load, repeated over a sweep of `--jobs`, each run on a fresh
//! server and verified stream by stream.
//!
//! The seeds' discipline, built in: every run starts the same way (a fresh private cluster, or
//! freshly recreated tables on `--target`); every stream must report back, every chunk must
//! have been loaded exactly once, each stream's rows must equal the rows of the chunks it ran,
//! and every table must hold its input's rows, or the bench fails loudly (the sqlskills series
//! found a test that had silently run half its clients). Results are medians with their
//! spread, the long tail (slowest stream against the median stream, named), the best setting
//! and the point past which more connections made the load slower.

use super::gen::{default_tpch_dir, ensure_tpch};
use super::load::StrategyArg;
use super::load::{load, LoadArgs};
use crate::failure::{Failure, OrFailure};
use crate::tpch::{self, Manifest};
use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice_engine::report::Report;
use sluice_engine::run::StreamStats;
use sluice_postgres::cluster::Cluster;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerConfig {
    /// The private cluster's bulk-load settings (wal_level replica).
    Default,
    /// The same, with wal_level minimal and max_wal_senders 0.
    Minimal,
}

impl ServerConfig {
    /// The settings of a fresh cluster: the one list the private cluster uses too.
    pub fn settings(self) -> Vec<(String, String)> {
        match self {
            ServerConfig::Default => sluice_postgres::cluster::bulk_load_settings(),
            ServerConfig::Minimal => sluice_postgres::cluster::minimal_wal_settings(),
        }
    }
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  sluice bench --scale 1 --parts 8 --jobs 1,2,4,8 --repeat 3
  sluice bench --scale 10 --jobs auto --target postgresql://... --yes

Without --target every run gets a fresh private cluster (initdb, then
deleted). With --target the eight TPC-H tables there are dropped and
recreated before every run, hence --yes. Results go to --out:
results.md, results.json, throughput.svg and timeline.svg.")]
pub struct BenchArgs {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Files per table.
    #[arg(long, default_value_t = 8)]
    pub parts: u32,
    /// The --jobs settings to compare (comma-separated), or `auto` (1, 2, 4... up to twice
    /// the cores).
    #[arg(long, short = 'j', default_value = "1,2,4,8")]
    pub jobs: String,
    /// Runs per setting (interleaved: every setting once, then again).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Benchmark this server instead of fresh private clusters.
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,
    /// Allow dropping and recreating the TPC-H tables on --target.
    #[arg(long)]
    pub yes: bool,
    /// Output directory (default ./sluice-bench-<timestamp>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Configuration of the fresh clusters: `default` (the private cluster's bulk-load
    /// settings: shared_buffers 1GB, max_wal_size 16GB, checkpoint_timeout 30min, wal_level
    /// replica...) or `minimal` (the same with wal_level minimal, max_wal_senders 0).
    #[arg(
        long,
        value_enum,
        default_value_t = ServerConfig::Default,
        hide_possible_values = true,
        value_name = "CONFIG"
    )]
    pub server_config: ServerConfig,
    /// The tables' layout: `plain`, or `partitioned` (the six big tables in one partition
    /// per part, `sluice ddl tpch --partitions PARTS`).
    #[arg(
        long,
        value_enum,
        default_value = "plain",
        value_name = "plain|partitioned"
    )]
    pub layout: Layout,
    /// The load strategy (as `sluice load --strategy`).
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "auto|direct|stage"
    )]
    pub strategy: StrategyArg,
    /// Where the generated data lives (default: beside the private cluster).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// No progress display; the results still print.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// One timed, verified run.
#[derive(Serialize, Debug, Clone)]
pub struct Run {
    pub jobs: usize,
    pub repeat: usize,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub rows_per_s: f64,
    pub rows: u64,
    pub bytes: u64,
    pub long_tail: LongTail,
    /// Streams that connected but were given no chunk.
    pub idle_streams: Vec<usize>,
    pub streams: Vec<StreamStats>,
}

/// The slowest stream against the median stream.
#[derive(Serialize, Debug, Clone)]
pub struct LongTail {
    pub slowest_stream: usize,
    pub slowest_seconds: f64,
    pub median_stream: usize,
    pub median_seconds: f64,
    /// slowest / median.
    pub ratio: f64,
}

/// All runs of one --jobs setting.
#[derive(Serialize, Debug, Clone)]
pub struct Setting {
    pub jobs: usize,
    pub median_seconds: f64,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub median_mb_per_s: f64,
    pub median_rows_per_s: f64,
    /// The long tail of the median run.
    pub long_tail: LongTail,
}

/// `--layout`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Plain,
    Partitioned,
}

#[derive(Serialize, Debug)]
pub struct Results {
    pub scale: f64,
    pub parts: u32,
    pub repeat: usize,
    pub target: String,
    pub server_config: ServerConfig,
    pub layout: Layout,
    /// The strategy the loads used, as reported by the first run.
    pub strategy: String,
    pub machine: BTreeMap<String, String>,
    pub server_settings: Vec<(String, String)>,
    pub settings: Vec<Setting>,
    pub best_jobs: usize,
    /// The smallest setting past which the next one was slower, if any.
    pub slower_past: Option<usize>,
    pub runs: Vec<Run>,
}

pub fn run(args: BenchArgs) -> Result<(), Failure> {
    let dir = bench(&args)?;
    if !args.quiet {
        eprintln!("sluice bench: results in {}", dir.display());
    }
    Ok(())
}

/// Parses `1,2,4` or `auto`.
pub fn parse_jobs(s: &str) -> Result<Vec<usize>, String> {
    if s == "auto" {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let top = (2 * cores).max(4);
        let mut v = vec![1];
        while v.last().copied().unwrap_or(1) * 2 <= top {
            v.push(v.last().copied().unwrap_or(1) * 2);
        }
        return Ok(v);
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let n: usize = part
            .trim()
            .parse()
            .map_err(|_| format!("--jobs takes numbers like 1,2,4 or `auto`, not `{part}`"))?;
        if n == 0 {
            return Err("--jobs settings must be at least 1".into());
        }
        v.push(n);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The run of setting `jobs` closest to the median time `med`: the one a setting is shown by.
fn median_run(runs: &[Run], jobs: usize, med: f64) -> Option<&Run> {
    runs.iter()
        .filter(|r| r.jobs == jobs)
        .min_by(|a, b| (a.seconds - med).abs().total_cmp(&(b.seconds - med).abs()))
}

/// The slowest stream against the median stream (by the stream's busy seconds).
fn long_tail(streams: &[StreamStats]) -> LongTail {
    let mut by_time: Vec<&StreamStats> = streams.iter().collect();
    by_time.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let slowest = by_time.last().copied();
    let mid = by_time.get(by_time.len().saturating_sub(1) / 2).copied();
    match (slowest, mid) {
        (Some(s), Some(m)) => LongTail {
            slowest_stream: s.stream,
            slowest_seconds: s.seconds,
            median_stream: m.stream,
            median_seconds: m.seconds,
            ratio: if m.seconds > 0.0 {
                s.seconds / m.seconds
            } else {
                1.0
            },
        },
        _ => LongTail {
            slowest_stream: 0,
            slowest_seconds: 0.0,
            median_stream: 0,
            median_seconds: 0.0,
            ratio: 1.0,
        },
    }
}

/// Checks that every stream ran, every chunk loaded exactly once, each stream's rows are the
/// rows of its chunks, and every table holds its input's rows.
pub fn verify(
    report: &Report,
    manifest: &Manifest,
    counts: &[(String, u64)],
) -> Result<Vec<usize>, String> {
    let mut problems = Vec::new();
    if report.streams.len() != report.jobs {
        problems.push(format!(
            "{} streams reported back of the {} started",
            report.streams.len(),
            report.jobs
        ));
    }
    let mut seen = vec![0usize; report.chunks];
    for s in &report.streams {
        for c in &s.chunks {
            match seen.get_mut(c.chunk) {
                Some(n) => *n += 1,
                None => problems.push(format!("stream {} ran unknown chunk {}", s.stream, c.chunk)),
            }
        }
        let sum: u64 = s.chunks.iter().map(|c| c.rows).sum();
        if sum != s.rows {
            problems.push(format!(
                "stream {} reports {} rows but its chunks hold {sum}",
                s.stream, s.rows
            ));
        }
    }
    for (chunk, n) in seen.iter().enumerate() {
        if *n != 1 {
            problems.push(format!("chunk {chunk} was loaded {n} times"));
        }
    }
    for (table, got) in counts {
        let want = manifest.rows(table);
        if *got != want {
            problems.push(format!(
                "table {table} holds {got} rows; its input has {want}"
            ));
        }
    }
    let streamed: u64 = report.streams.iter().map(|s| s.rows).sum();
    let total: u64 = tpch::TABLES.iter().map(|t| manifest.rows(t)).sum();
    if streamed != total {
        problems.push(format!(
            "the streams loaded {streamed} rows; the input has {total}"
        ));
    }
    if problems.is_empty() {
        Ok(report
            .streams
            .iter()
            .filter(|s| s.chunks.is_empty())
            .map(|s| s.stream)
            .collect())
    } else {
        Err(problems.join("; "))
    }
}

/// What a run's server holds and how it is configured.
struct ServerState {
    counts: Vec<(String, u64)>,
    settings: Vec<(String, String)>,
    version: String,
}

/// Row counts and non-default settings of the server at `url`.
fn inspect(url: &str) -> anyhow::Result<ServerState> {
    let info =
        sluice_postgres::conninfo::ConnInfo::resolve(url, &sluice_postgres::conninfo::ProcessEnv)
            .map_err(|e| anyhow::anyhow!(e))?;
    let db = sluice_postgres::admin::Admin::connect(&info)?;
    Ok(ServerState {
        counts: tpch::table_counts(&db)?,
        settings: db.changed_settings()?,
        version: db.server_version()?,
    })
}

fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "cores".into(),
        std::thread::available_parallelism()
            .map_or(0, |n| n.get())
            .to_string(),
    );
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if let Some(model) = cpuinfo.lines().find(|l| l.starts_with("model name")) {
        m.insert(
            "cpu".into(),
            model.split(':').nth(1).unwrap_or("").trim().to_string(),
        );
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(total) = meminfo.lines().find(|l| l.starts_with("MemTotal")) {
        m.insert(
            "memory".into(),
            total.split(':').nth(1).unwrap_or("").trim().to_string(),
        );
    }
    m
}

fn bench(args: &BenchArgs) -> Result<PathBuf, Failure> {
    let jobs = parse_jobs(&args.jobs).map_err(Failure::Usage)?;
    if args.repeat == 0 {
        return Err(Failure::Usage("--repeat must be at least 1".into()));
    }
    if args.target.is_some() && !args.yes {
        return Err(Failure::Usage(
            "sluice bench drops and recreates the eight TPC-H tables on --target before every \
             run: add --yes to allow it"
                .into(),
        ));
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("sluice-bench-{secs}"))
    });
    std::fs::create_dir_all(&out).map_err(|e| Failure::Local(format!("{}: {e}", out.display())))?;
    let pg_dir = crate::target::default_pg_dir(None);
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| default_tpch_dir(&pg_dir, args.scale, args.parts));
    let manifest =
        ensure_tpch(args.scale, args.parts, &data, !args.quiet, !args.quiet).or_fail()?;
    let files: Vec<String> = manifest
        .files
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect();
    let mut runs = Vec::new();
    let mut server_settings = Vec::new();
    let mut version = String::new();
    let mut strategy = String::new();
    let total = args.repeat * jobs.len();
    for r in 0..args.repeat {
        for &j in &jobs {
            let n = runs.len() + 1;
            let (url, cluster) = match &args.target {
                Some(t) => (t.clone(), None),
                None => {
                    let dir = out.join("clusters").join(format!("run-{n}"));
                    let c = Cluster::new(&dir).map_err(|e| Failure::Local(e.to_string()))?;
                    let _ = c.destroy();
                    c.init(&args.server_config.settings())
                        .and_then(|_| c.start())
                        .map_err(|e| Failure::Local(e.to_string()))?;
                    (c.url().unwrap_or_default(), Some(c))
                }
            };
            let partitions = (args.layout == Layout::Partitioned).then_some(args.parts);
            let ddl = super::ddl::layout(
                partitions,
                args.scale,
                false,
                crate::tpch::SqlDialect::Postgres,
            )?;
            super::ddl::create_sql(Some(&url), None, true, &ddl).or_fail()?;
            let load_args = LoadArgs {
                files: files.clone(),
                target: Some(url.clone()),
                jobs: Some(sluice_engine::spec::Jobs::Fixed(j)),
                quiet: true,
                strategy: args.strategy,
                ..LoadArgs::defaults()
            };
            let report = load(&load_args).map_err(|e| Failure::Local(format!("run {n}: {e}")))?;
            // Every run's own report, to look at: its timeline, throughput and verdict.
            let page = out.join(format!("run-{n}-jobs-{j}.html"));
            std::fs::write(&page, crate::report_html::render(&report))
                .map_err(|e| Failure::Local(format!("{}: {e}", page.display())))?;
            let state = inspect(&url).or_fail()?;
            if let Some(c) = cluster {
                let _ = c.destroy();
            }
            let idle = verify(&report, &manifest, &state.counts).map_err(|e| {
                Failure::Local(format!(
                    "verification failed for --jobs {j}, run {} of {}: {e}",
                    r + 1,
                    args.repeat
                ))
            })?;
            server_settings = state.settings;
            version = state.version;
            strategy = report.strategy.to_string();
            let tail = long_tail(&report.streams);
            let secs = report.elapsed_seconds;
            if !args.quiet {
                eprintln!(
                    "sluice bench [{n}/{total}] --jobs {j}: {secs:.2} s, {:.1} MB/s, verified; \
                     long tail: stream {} {:.2} s vs median stream {} {:.2} s{}",
                    report.total.mb_per_s,
                    tail.slowest_stream,
                    tail.slowest_seconds,
                    tail.median_stream,
                    tail.median_seconds,
                    if idle.is_empty() {
                        String::new()
                    } else {
                        format!("; idle streams {idle:?}")
                    }
                );
            }
            runs.push(Run {
                jobs: j,
                repeat: r,
                seconds: secs,
                mb_per_s: report.total.mb_per_s,
                rows_per_s: report.total.rows as f64 / secs.max(1e-9),
                rows: report.total.rows,
                bytes: report.total.bytes,
                long_tail: tail,
                idle_streams: idle,
                streams: report.streams.clone(),
            });
        }
    }
    let settings: Vec<Setting> = jobs
        .iter()
        .map(|&j| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.jobs == j).collect();
            let mut secs: Vec<f64> = mine.iter().map(|r| r.seconds).collect();
            let med = median(&mut secs.clone());
            secs.sort_by(f64::total_cmp);
            let median_run = median_run(&runs, j, med).expect("every setting ran");
            Setting {
                jobs: j,
                median_seconds: med,
                min_seconds: secs[0],
                max_seconds: secs[secs.len() - 1],
                median_mb_per_s: median(&mut mine.iter().map(|r| r.mb_per_s).collect::<Vec<_>>()),
                median_rows_per_s: median(
                    &mut mine.iter().map(|r| r.rows_per_s).collect::<Vec<_>>(),
                ),
                long_tail: median_run.long_tail.clone(),
            }
        })
        .collect();
    let best = settings
        .iter()
        .min_by(|a, b| a.median_seconds.total_cmp(&b.median_seconds))
        .map_or(1, |s| s.jobs);
    let slower_past = settings
        .windows(2)
        .find(|w| w[1].median_seconds > w[0].median_seconds)
        .map(|w| w[0].jobs);
    let mut machine = machine();
    machine.insert("postgresql".into(), version);
    let results = Results {
        scale: args.scale,
        parts: args.parts,
        repeat: args.repeat,
        target: match &args.target {
            Some(t) => sluice_postgres::conninfo::ConnInfo::resolve(
                t,
                &sluice_postgres::conninfo::ProcessEnv,
            )
            .map_or_else(|_| "(target)".into(), |i| i.to_string()),
            None => "fresh private cluster per run".into(),
        },
        server_config: args.server_config,
        layout: args.layout,
        strategy,
        machine,
        server_settings,
        settings,
        best_jobs: best,
        slower_past,
        runs,
    };
    let md = markdown(&results);
    print!("{md}");
    let write = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| Failure::Local(format!("{name}: {e}")))
    };
    write("results.md", &md)?;
    write(
        "results.json",
        &(serde_json::to_string_pretty(&results).expect("results serialize") + "\n"),
    )?;
    super::bench_charts::throughput(&results, &out.join("throughput.svg"))
        .map_err(|e| Failure::Local(format!("drawing throughput.svg: {e}")))?;
    let best = results
        .settings
        .iter()
        .find(|s| s.jobs == results.best_jobs);
    if let Some(run) = best.and_then(|b| median_run(&results.runs, b.jobs, b.median_seconds)) {
        super::bench_charts::timeline(run, &out.join("timeline.svg"))
            .map_err(|e| Failure::Local(format!("drawing timeline.svg: {e}")))?;
    }
    Ok(out)
}

fn markdown(r: &Results) -> String {
    let mut s = format!(
        "TPC-H SF{} in {} parts, {} runs per setting (interleaved), {}; server config {:?}, \
         {:?} layout, strategy {}\n\n",
        r.scale, r.parts, r.repeat, r.target, r.server_config, r.layout, r.strategy
    );
    s.push_str("| jobs | median s | min s | max s | MB/s | rows/s | long tail (slowest / median stream) |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---|\n");
    for x in &r.settings {
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} | stream {} {:.2} s / stream {} {:.2} s = {:.2} |\n",
            x.jobs,
            x.median_seconds,
            x.min_seconds,
            x.max_seconds,
            x.median_mb_per_s,
            x.median_rows_per_s,
            x.long_tail.slowest_stream,
            x.long_tail.slowest_seconds,
            x.long_tail.median_stream,
            x.long_tail.median_seconds,
            x.long_tail.ratio
        ));
    }
    s.push_str(&format!("\nbest: --jobs {}\n", r.best_jobs));
    match r.slower_past {
        Some(j) => s.push_str(&format!(
            "past --jobs {j}, adding connections made the load slower\n"
        )),
        None => s.push_str("no setting was slower than the one before it\n"),
    }
    s.push_str("every run verified: each stream's rows equal its chunks' rows, every chunk loaded once, every table holds its input's rows\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_lists() {
        assert_eq!(parse_jobs("4,1,2,2").unwrap(), vec![1, 2, 4]);
        assert!(parse_jobs("0").is_err());
        assert!(parse_jobs("x").is_err());
        let auto = parse_jobs("auto").unwrap();
        assert_eq!(auto[0], 1);
        assert!(auto.windows(2).all(|w| w[1] == 2 * w[0]));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn server_configs() {
        let m = ServerConfig::Minimal.settings();
        assert!(m.contains(&("wal_level".into(), "minimal".into())));
        assert!(m.contains(&("max_wal_senders".into(), "0".into())));
        assert!(ServerConfig::Default
            .settings()
            .contains(&("wal_level".into(), "replica".into())));
    }

    fn stream(n: usize, secs: f64) -> StreamStats {
        StreamStats {
            stream: n,
            seconds: secs,
            ..Default::default()
        }
    }

    /// A run in which every stream reported, but one chunk was never loaded (a lost stream):
    /// verification must fail and say which chunk and which table.
    #[test]
    fn a_lost_chunk_fails_verification() {
        use sluice_engine::report::TableReport;
        use sluice_engine::run::ChunkStat;
        let manifest = Manifest {
            scale: 0.01,
            parts: 2,
            format: tpch::GenFormat::Tbl,
            files: tpch::TABLES
                .iter()
                .map(|t| tpch::GeneratedFile {
                    table: t.to_string(),
                    part: 1,
                    path: PathBuf::new(),
                    rows: if *t == "lineitem" { 100 } else { 0 },
                    bytes: 0,
                })
                .collect(),
        };
        let chunk = |chunk, rows| ChunkStat {
            chunk,
            table: "lineitem".into(),
            rows,
            ..Default::default()
        };
        let total = TableReport {
            table: "total".into(),
            files: 2,
            rows: 60,
            bytes: 0,
            wire_bytes: 0,
            seconds: 0.0,
            mb_per_s: 0.0,
            copy_format: "binary",
            server_converted_columns: Vec::new(),
            strategy: "direct",
        };
        let mut report = Report {
            target: String::new(),
            dry_run: false,
            strategy: "direct",
            fallbacks: Vec::new(),
            steps: None,
            wal_bytes: None,
            wire_choice: None,
            jobs: 2,
            copy_buffer_bytes: 0,
            chunks: 2,
            tables: Vec::new(),
            total,
            elapsed_seconds: 1.0,
            server_conversions: 0,
            streams: vec![
                StreamStats {
                    stream: 0,
                    chunks: vec![chunk(1, 60)],
                    rows: 60,
                    ..Default::default()
                },
                stream(1, 1.0),
            ],
            job: None,
            ledger: None,
            skipped: Vec::new(),
            rejected: None,
            verdict: None,
            calibration: None,
            server_settings: Vec::new(),
            crew: None,
            prepared: Vec::new(),
            server_waits: Default::default(),
        };
        let counts: Vec<(String, u64)> = tpch::TABLES
            .iter()
            .map(|t| (t.to_string(), if *t == "lineitem" { 60 } else { 0 }))
            .collect();
        let err = verify(&report, &manifest, &counts).unwrap_err();
        assert!(err.contains("chunk 0 was loaded 0 times"), "{err}");
        assert!(
            err.contains("table lineitem holds 60 rows; its input has 100"),
            "{err}"
        );
        assert!(err.contains("the streams loaded 60 rows"), "{err}");
        // With the chunk loaded, the run verifies, and the idle stream is named.
        report.streams[1].chunks.push(chunk(0, 40));
        report.streams[1].rows = 40;
        let counts: Vec<(String, u64)> = tpch::TABLES
            .iter()
            .map(|t| (t.to_string(), if *t == "lineitem" { 100 } else { 0 }))
            .collect();
        assert_eq!(verify(&report, &manifest, &counts), Ok(vec![]));
    }

    #[test]
    fn long_tail_names_the_streams() {
        let t = long_tail(&[stream(0, 2.0), stream(1, 9.0), stream(2, 3.0)]);
        assert_eq!((t.slowest_stream, t.median_stream), (1, 2));
        assert_eq!(t.ratio, 3.0);
    }
}
