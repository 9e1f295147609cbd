//! `sluice load`: flags to a load specification, then the engine's load on the destination
//! the target names, the summary and the JSON and HTML reports.

use crate::destination;
use crate::failure::Failure;
use crate::host::CliHost;
use clap::Args;
use sluice_core::dialect::Format;
use sluice_engine::failure::ServerKind;
use sluice_engine::rejects::{self, Threshold};
use sluice_engine::report::Report;
use sluice_engine::spec::{Jobs, LoadSpec, PrepareChoice, StrategyChoice, Wire};
use sluice_postgres::network::SocketBuffer;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  sluice load -t postgresql://me@db:5432/shop orders.csv
  sluice load -t \"$URL\" --jobs 4 data/lineitem/*.tbl data/orders.tbl.gz
  sluice load -t \"$URL\" --table trips --header trips-2024-*.csv.zst
  sluice load -t \"$URL\" --header --match-header people.csv
  cat x.tsv | sluice load -t \"$URL\" --table t --format text -
  sluice load --dry-run data/lineitem.tbl     # check every row, load none

Each file goes to --table, or else to the table named by the file's
name up to its first dot (lineitem.3.tbl and lineitem.tbl.gz both go
to lineitem). The table must exist; its columns and types come from
the catalog. By default the first bad row fails the whole command and
no row of it is visible afterwards.

Each load is a job in the target's ledger (schema sluice_ledger; see `sluice
jobs`). Running the same command again after any failure resumes it:
chunks already committed are skipped, staging tables it finished are
published as they are, the rest load, exactly once.
Files a finished job loaded, unchanged since, are not loaded again
(--restart loads everything).

Exit codes: 0 loaded, 1 local failure (an input that cannot be read),
2 usage (also: a resume refused because an input changed, a read-only
session or a standby), 3 bad row
(nothing committed; also: more rejects than --max-errors), 4 cannot
connect, 5 server failure (a connection lost beyond --retries, a failed
COMMIT), 6 loaded, with rows rejected within --max-errors, 130/143
Ctrl-C/SIGTERM. After 4, 5, 130, 143 or a crash, the same command
resumes the job.")]
pub struct LoadArgs {
    /// Files to load (.tbl, .csv, .tsv/.txt, optionally .gz or .zst); `-` reads standard input.
    /// A quoted pattern ('logs/*.csv', 'data/**/*.tbl') is expanded by sluice, with no limit
    /// on the number of files it names.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,

    /// Connection: a URI (postgresql://user@host:5432/db) or key=value string; libpq's PG*
    /// variables and ~/.pgpass fill the gaps. Without it, sluice's private cluster is used.
    /// A server that answers nothing (stopped, frozen) is given up after tcp_user_timeout
    /// (milliseconds, 120000 by default; 0 keeps waiting): ?tcp_user_timeout=30000.
    /// mariadb://user@host:3306/db (or mysql://) loads into MariaDB, with ~/.my.cnf's [client]
    /// and MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_PWD filling the gaps (URI parameters: socket=,
    /// ssl-mode=, ssl-ca=, answer-timeout= seconds a silent server is waited on, 120 by
    /// default); not on MariaDB yet: --workers.
    #[arg(long, short = 't', value_name = "URL")]
    pub target: Option<String>,

    /// Load every file into this table (`name`, `schema.name`, `"Mixed Case"`).
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,

    /// Input format; without it, chosen from each file's extension.
    #[arg(long, value_name = "tbl|csv|text")]
    pub format: Option<Format>,

    /// Field delimiter (one character; `\t` for tab). Defaults: `|` tbl, `,` csv, tab text.
    #[arg(long, value_name = "CHAR")]
    pub delimiter: Option<String>,

    /// CSV quote character (default `"`).
    #[arg(long, value_name = "CHAR")]
    pub quote: Option<String>,

    /// CSV escape character inside quotes (default: the quote, i.e. `""`).
    #[arg(long, value_name = "CHAR")]
    pub escape: Option<String>,

    /// The first line of each file is a header and is skipped. Its names are not compared
    /// with the table's columns unless --match-header is given: fields map to the table's
    /// columns in order (or to --columns).
    #[arg(long)]
    pub header: bool,

    /// Map fields to columns by the header's names instead of by position (needs --header).
    /// A name matches a column exactly, or ignoring case when only one column matches; the
    /// other columns get their defaults. Every file of a table must have the same header.
    #[arg(long, requires = "header", conflicts_with = "columns")]
    pub match_header: bool,

    /// The spelling of NULL (default `\N` for tbl and text, the empty unquoted string for CSV).
    #[arg(long, value_name = "STRING")]
    pub null: Option<String>,

    /// The table columns the fields map to, in order, when not all columns in table order.
    /// SQL identifiers, as in `psql \copy t(a,b)`: unquoted names fold to lower case,
    /// `"Quoted"` names keep case, spaces and commas (`--columns 'id,"My Col"'`).
    #[arg(long, value_name = "A,B,C")]
    pub columns: Option<String>,

    /// How rows reach their tables. `direct`: straight into the tables, every stream's
    /// transaction committed at the end. `stage`: each partition's files into a staging table
    /// of their own (FREEZE, then the table's indexes, by the same stream), all switched in by
    /// one publish transaction, then ANALYZE; inputs that cannot be staged go direct and the
    /// summary says why. `auto`: stage where it applies (a table partitioned by one integer column,
    /// by ranges, lists or hash, into empty partitions), direct elsewhere. When a table's files cross its
    /// partitions' bounds (cut elsewhere, or unsorted), its rows are routed to their
    /// partitions on the client, through a spill under --temp-dir. On MariaDB a staging table
    /// fills on InnoDB's empty-table bulk path, and each is exchanged into its partition
    /// (EXCHANGE PARTITION) as a step of its own: readers see the partitions appear one by
    /// one, and a stop between two steps is finished by the same command (staging there
    /// needs the resume ledger; rows are not routed on the client there, and `auto` stages
    /// only a table with secondary indexes, where staging measured faster).
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "auto|direct|stage"
    )]
    pub strategy: StrategyArg,

    /// Parallel connections. Default: this machine's cores, at least 2 and at most 8, never
    /// more than the chunks to load or the server's free connection slots. `auto`: start with
    /// one and add streams while each raises the throughput by 5% or more (up to twice the
    /// cores, at most 16); the summary shows the curve and the choice.
    #[arg(long, short = 'j', value_name = "N|auto", value_parser = parse_jobs)]
    pub jobs: Option<Jobs>,

    /// Where rows routed to their partitions on the client wait for their partition's
    /// staging table (about twice the routed input, deleted at the end). Default: $TMPDIR, or
    /// /tmp. A directory without room for the estimate makes the table load direct instead,
    /// and the summary says so.
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,

    /// Each stream's kernel socket buffer (SO_SNDBUF and SO_RCVBUF), k/M suffixes. Setting
    /// it turns off the kernel's autotuning for the socket, so `auto` sets one only where the
    /// round trip (measured at the start) makes autotuning's ceiling the limit and the kernel
    /// grants more to SO_SNDBUF; `off` always leaves autotuning. `sluice probe` measures the
    /// path and says which to give.
    #[arg(long, default_value = "auto", value_parser = parse_socket_buffer, value_name = "auto|off|SIZE")]
    pub socket_buffer: SocketBuffer,

    /// Size of each COPY message (k/M suffixes).
    #[arg(long, default_value = "256k", value_parser = parse_size, value_name = "SIZE")]
    pub copy_buffer: usize,

    /// Target size of the chunks big files are cut into (default: an eighth of the input,
    /// between 16M and 1G; it does not depend on --jobs).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub chunk_size: Option<usize>,

    /// Read, convert, validate and encode every row, but load none; reports MB/s. It still
    /// connects (to --target, or the private cluster) to read the tables' definitions.
    #[arg(long)]
    pub dry_run: bool,

    /// How many times each stream reconnects after losing its connection (a backend
    /// terminated, a network reset, a server restart), redoing its uncommitted chunks on the
    /// new connection, with pauses of 1, 2, 4, 8, 16, 16... seconds. 0 fails at the first loss.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub retries: u32,

    /// How long each attempt of the stage strategy's publish waits for its lock on a target
    /// table before it gives way and tries again (5 attempts, with pauses of a tenth of it,
    /// doubling: 1, 2, 4 and 8 s by default), and how long the statistics step waits. While
    /// the publish waits, the server queues the table's later queries behind it, so this is
    /// also how long readers may be held up at a time. PostgreSQL's units (`500ms`, `10s`,
    /// `1min`; a bare number is milliseconds, as for lock_timeout and pg_dump's option of
    /// this name). Default: 10s.
    #[arg(long, value_parser = parse_lock_wait, value_name = "DURATION")]
    pub lock_wait_timeout: Option<std::time::Duration>,

    /// How many bad rows the load may reject and still commit the rest: a count (`100`) or
    /// a share of all input rows (`0.1%`). Rows sluice cannot convert are dropped before
    /// they are sent; rows the server refuses (a duplicate key, also one that two streams
    /// both load; a check; a foreign key; a trigger's error) are isolated under savepoints,
    /// so every good row loads once. Past the threshold the load fails (exit 3) and nothing
    /// is committed. Default 0: the first bad row fails the load.
    #[arg(long, value_name = "N|P%", value_parser = rejects::parse_threshold)]
    pub max_errors: Option<Threshold>,

    /// Write the rejected rows to PATH, byte for byte as they stood in their input (fix the
    /// file, and load it with the same flags), and where and why each was rejected, one JSON
    /// object per line, to PATH.jsonl. Needs --max-errors.
    #[arg(long, value_name = "PATH", requires = "max_errors")]
    pub rejects: Option<PathBuf>,

    /// Load every file again as a new job, even files a finished job loaded unchanged, and
    /// instead of resuming an unfinished job (whose committed rows stay in the tables; its
    /// unpublished staging tables are dropped).
    #[arg(long)]
    pub restart: bool,

    /// Commit the streams through two-phase commit: every stream's transaction prepared, the
    /// decision to commit recorded in the ledger, then each committed; a crash at any moment
    /// leaves nothing visible, or a decision the same command carries out. It closes the
    /// window between the first and the last stream's COMMIT. `auto`: where the server can
    /// prepare a transaction per stream (PostgreSQL: max_prepared_transactions; MariaDB:
    /// XA, from 10.5.2).
    #[arg(long, value_enum, default_value = "auto", value_name = "auto|on|off")]
    pub prepare: PrepareArg,

    /// Name a job that several workers load together, each a `sluice load` with the same
    /// --job, --workers and target, on its own host with its own files (or all with the same
    /// shared ones: each chunk is loaded once). The target's ledger coordinates them: each
    /// stream claims its chunks there, and nothing is visible until every worker is done (the
    /// last one commits every worker's prepared transactions; with --strategy stage, it
    /// first switches in every worker's staging tables, in the transaction of that decision).
    /// Each worker exits 0 only once the whole job is in. A worker run again after a crash
    /// takes its slot back. --strategy auto loads a job of several workers directly.
    #[arg(
        long,
        value_name = "NAME",
        requires = "workers",
        conflicts_with = "restart"
    )]
    pub job: Option<String>,

    /// How many workers --job has, the same on every worker.
    #[arg(long, value_name = "N", requires_all = ["job", "worker"], value_parser = clap::value_parser!(u32).range(1..=4095))]
    pub workers: Option<u32>,

    /// This worker's slot, 1 to --workers: a launcher's task index (a Slurm array's
    /// SLURM_ARRAY_TASK_ID, a Kubernetes indexed Job's JOB_COMPLETION_INDEX plus 1, GNU
    /// parallel's {%}). Each slot is one process at a time.
    #[arg(long, value_name = "K", requires = "workers", value_parser = clap::value_parser!(u32).range(1..=4095))]
    pub worker: Option<u32>,

    /// How long a worker of --job waits for the others, to start and to finish, before it
    /// fails the job (nothing committed) instead. PostgreSQL's units (`30s`, `10min`).
    #[arg(long, value_parser = parse_lock_wait, value_name = "DURATION", default_value = "10min", requires = "job")]
    pub wait_workers: std::time::Duration,

    /// How rows travel to the server. `binary`: binary COPY tuples, the least work for the
    /// server. `text`: text COPY lines, fewer bytes for most tables (binary lineitem is about
    /// 1.66x its input), for a link that is the bottleneck; sluice validates every value either
    /// way. `auto`: text where the server must convert a column; else binary, unless text is
    /// clearly smaller for the table and a measure of the path at the start (on a server on
    /// another machine, for 8 MiB of input or more) finds the link slower than what the
    /// server stores; the summary's `wire:` line says what it chose and why.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "auto|binary|text"
    )]
    pub wire: WireArg,

    /// No progress display (outcomes, skips and warnings are still printed).
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub report_json: Option<PathBuf>,

    /// Also write the report as one self-contained HTML page (inline SVG charts: the
    /// streams' timeline, throughput, where the time went, the server's activity).
    #[arg(long, value_name = "PATH")]
    pub report_html: Option<PathBuf>,

    /// The private cluster's directory, used when no target is given (default:
    /// $SLUICE_PG_DIR, else ~/.local/share/sluice/pg, or /var/lib/sluice/pg for root).
    #[arg(long, value_name = "DIR")]
    pub pg_dir: Option<PathBuf>,
}

/// `--wire`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WireArg {
    Auto,
    Binary,
    Text,
}

/// `--prepare`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareArg {
    Auto,
    On,
    Off,
}

/// `--strategy`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyArg {
    Auto,
    Direct,
    Stage,
}

impl LoadArgs {
    /// A load of nothing with every option at its default, to be filled in.
    pub fn defaults() -> LoadArgs {
        LoadArgs {
            files: Vec::new(),
            target: None,
            table: None,
            format: None,
            delimiter: None,
            quote: None,
            escape: None,
            header: false,
            match_header: false,
            null: None,
            columns: None,
            strategy: StrategyArg::Auto,
            jobs: None,
            copy_buffer: 256 << 10,
            socket_buffer: SocketBuffer::Auto,
            chunk_size: None,
            dry_run: false,
            retries: 5,
            lock_wait_timeout: None,
            max_errors: None,
            rejects: None,
            restart: false,
            prepare: PrepareArg::Auto,
            wire: WireArg::Auto,
            job: None,
            workers: None,
            worker: None,
            wait_workers: std::time::Duration::from_secs(600),
            temp_dir: None,
            quiet: true,
            report_json: None,
            report_html: None,
            pg_dir: None,
        }
    }

    /// The load these flags ask for.
    pub fn spec(&self) -> LoadSpec {
        LoadSpec {
            files: self.files.clone(),
            checked: Default::default(),
            table: self.table.clone(),
            format: self.format,
            delimiter: self.delimiter.clone(),
            quote: self.quote.clone(),
            escape: self.escape.clone(),
            header: self.header,
            match_header: self.match_header,
            null: self.null.clone(),
            columns: self.columns.clone(),
            strategy: match self.strategy {
                StrategyArg::Auto => StrategyChoice::Auto,
                StrategyArg::Direct => StrategyChoice::Direct,
                StrategyArg::Stage => StrategyChoice::Stage,
            },
            jobs: self.jobs.unwrap_or(Jobs::Default),
            copy_buffer: self.copy_buffer,
            chunk_size: self.chunk_size.map(|s| s as u64),
            dry_run: self.dry_run,
            retries: self.retries,
            retry_pause: sluice_engine::run::RETRY_PAUSE,
            lock_wait: self.lock_wait_timeout,
            max_errors: self.max_errors,
            rejects: self.rejects.clone(),
            restart: self.restart,
            prepare: match self.prepare {
                PrepareArg::Auto => PrepareChoice::Auto,
                PrepareArg::On => PrepareChoice::On,
                PrepareArg::Off => PrepareChoice::Off,
            },
            wire: match self.wire {
                WireArg::Auto => Wire::Auto,
                WireArg::Binary => Wire::Binary,
                WireArg::Text => Wire::Text,
            },
            temp_dir: self.temp_dir.clone(),
            crew: self.crew(),
        }
    }

    /// The crew this worker joins, when --job names one.
    fn crew(&self) -> Option<sluice_engine::crew::Crew> {
        let (name, workers, worker) = (self.job.clone()?, self.workers?, self.worker?);
        Some(sluice_engine::crew::Crew {
            join: sluice_core::ledger::CrewJoin {
                name,
                workers,
                worker,
                host: crate::host::name(),
                pid: std::process::id(),
            },
            wait: self.wait_workers,
        })
    }
}

/// Parses `--jobs`: a positive number, or `auto`.
pub fn parse_jobs(s: &str) -> Result<Jobs, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(Jobs::Auto);
    }
    match s.trim().parse::<usize>() {
        Ok(0) => Err("--jobs must be at least 1 (it is the number of connections)".into()),
        Ok(n) => Ok(Jobs::Fixed(n)),
        Err(_) => Err(format!("`{s}` is not a number of connections")),
    }
}

/// Parses `--socket-buffer`: `auto`, `off`, or a size.
pub fn parse_socket_buffer(s: &str) -> Result<SocketBuffer, String> {
    match s.trim() {
        "auto" => Ok(SocketBuffer::Auto),
        "off" => Ok(SocketBuffer::Off),
        size => parse_size(size).map(SocketBuffer::Size),
    }
}

/// Parses `256k`, `1M`, `4096`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 256k, 1M)"))?;
    if n == 0 {
        return Err("a size must be positive".into());
    }
    Ok(n * mult)
}

/// Parses a lock wait as PostgreSQL reads `lock_timeout`: a number with an optional unit
/// (`us`, `ms`, `s`, `min`, `h`, `d`), milliseconds when there is none. Zero is refused: it
/// would mean waiting forever.
pub fn parse_lock_wait(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let bad = || {
        format!(
            "`{s}` is not a duration (examples: 500ms, 10s, 1min; a bare number is milliseconds)"
        )
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "us" => n / 1000.0,
        "" | "ms" => n,
        "s" => n * 1000.0,
        "min" => n * 60_000.0,
        "h" => n * 3_600_000.0,
        "d" => n * 86_400_000.0,
        _ => return Err(bad()),
    };
    if ms < 1.0 {
        return Err(format!(
            "`{s}` is under a millisecond, the server's unit for lock waits"
        ));
    }
    if ms > i32::MAX as f64 {
        return Err(format!(
            "`{s}` is longer than the server accepts (about 24 days)"
        ));
    }
    Ok(std::time::Duration::from_millis(ms as u64))
}

pub fn run(args: LoadArgs) -> Result<(), Failure> {
    crate::signals::install();
    match load(&args) {
        Ok(report) => {
            print_report(&args, &report)?;
            match report.rejected.as_ref().map_or(0, |r| r.rows) {
                0 => Ok(()),
                n => Err(Failure::LoadedWithRejects(n)),
            }
        }
        Err(failure) => {
            // A failed load's report is what an operator's tooling needs most.
            if let Some(path) = &args.report_json {
                let json = serde_json::to_string_pretty(&failure_report(&failure))
                    .expect("failure report serializes");
                if let Err(e) = std::fs::write(path, json + "\n") {
                    eprintln!("warning: cannot write {}: {e}", path.display());
                }
            }
            Err(failure)
        }
    }
}

/// The JSON report of a failed load: `ok: false`, the failure's kind (its exit code is the
/// README's for that kind) and message, and for a bad row where it is.
pub fn failure_report(f: &Failure) -> serde_json::Value {
    let mut error = serde_json::json!({
        "kind": f.kind(),
        "message": f.to_string(),
    });
    if let Failure::Server(s) = f {
        // What stopped the load, for tooling: its kind, and for the server's own condition
        // (a full disk, say) the verdict on the failed load.
        error["server_kind"] = serde_json::to_value(s.kind).unwrap_or_default();
        if s.kind == ServerKind::Condition {
            let said = s.message.split(". ").next().unwrap_or(&s.message);
            error["verdict"] = format!("stopped by the server's condition: {said}").into();
        }
    }
    if let Failure::Input(e) = f {
        error["file"] = e.file.clone().into();
        error["table"] = e.table.clone().into();
        error["line"] = e.line.into();
        error["byte_offset"] = e.offset.into();
        error["offset_of"] = e.offset.map(|_| e.offset_of.name()).into();
        error["column"] = e.column.clone().into();
        error["value"] = e
            .value
            .as_ref()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .into();
        error["reason"] = e.reason.clone().into();
    }
    serde_json::json!({ "ok": false, "error": error })
}

/// Prints the summary and writes the JSON and HTML reports.
pub fn print_report(args: &LoadArgs, rep: &Report) -> Result<(), Failure> {
    print!("{}", crate::summary::render(rep));
    if let Some(path) = &args.report_json {
        let json = serde_json::to_string_pretty(rep).expect("report serializes");
        std::fs::write(path, json + "\n")
            .map_err(|e| Failure::Local(format!("cannot write {}: {e}", path.display())))?;
    }
    if let Some(path) = &args.report_html {
        std::fs::write(path, crate::report_html::render(rep))
            .map_err(|e| Failure::Local(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Checks the inputs, opens the destination the target names, and loads; returns the report.
pub fn load(args: &LoadArgs) -> Result<Report, Failure> {
    let mut spec = args.spec();
    spec.files = crate::patterns::expand(&spec.files)?;
    // Every input must be readable before a cluster starts for it. Where none will, the load
    // checks them while it describes the tables; a failed check is still said first.
    let checked = crate::target::may_start_server(args.target.as_deref(), args.pg_dir.clone());
    if checked {
        sluice_engine::load::check_inputs(&spec)?;
    }
    let mut dest = destination::open(args.target.as_deref(), args.pg_dir.clone(), args.quiet)
        .map_err(|f| inputs_first(&spec, checked, f))?;
    let sizing = dest
        .size_sockets(args.socket_buffer)
        .map_err(|f| inputs_first(&spec, checked, f))?;
    // Said when it changes something, or was asked for: `auto` leaving the kernel alone (every
    // load on a near server) is not news.
    let worth_saying = sizing.buffer.is_some() || args.socket_buffer != SocketBuffer::Auto;
    if !args.quiet && worth_saying {
        eprintln!(
            "sluice: socket buffer: {} ({})",
            sizing.buffer.map_or("kernel autotuning".into(), |b| {
                format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
            }),
            sizing.why
        );
    }
    dest.load(&spec, &CliHost::new(args.quiet))
}

/// `failure`, unless the inputs, not checked yet, fail their check: that is said first, as it
/// is when they are checked before anything connects.
fn inputs_first(spec: &LoadSpec, checked: bool, failure: Failure) -> Failure {
    match checked {
        true => failure,
        false => sluice_engine::load::check_inputs(spec)
            .err()
            .unwrap_or(failure),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_wait_timeout_takes_postgresql_units() {
        use std::time::Duration;
        let p = parse_lock_wait;
        assert_eq!(p("250"), Ok(Duration::from_millis(250)));
        assert_eq!(p("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(p("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(p("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(p(" 500ms "), Ok(Duration::from_millis(500)));
        assert!(p("0").unwrap_err().contains("under a millisecond"));
        assert!(p("10 parsecs").unwrap_err().contains("not a duration"));
        assert!(p("30d")
            .unwrap_err()
            .contains("longer than the server accepts"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("x").is_err());
        assert!(parse_size("0").is_err());
    }
}
