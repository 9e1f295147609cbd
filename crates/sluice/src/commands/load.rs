//! `sluice load`: flags to a checked plan, then the run, the summary and the JSON report.

use crate::failure::Failure;
use crate::load::chunk::Counters;
use crate::load::ledger;
use crate::load::plan::{self, table_from_file_name};
use crate::load::rejects::{self, Rejects, Threshold};
use crate::load::stage::{Mode, Stage};
use crate::load::strategy::{Direct, Strategy};
use crate::load::{execute, RunOptions};
use crate::{progress, report, target};
use clap::Args;
use sluice_core::destination::{Destination, ErrorKind, Ledger, LoadTable, Staging, TableInfo};
use sluice_core::dialect::Format;
use sluice_core::ledger::JobState;
use sluice_postgres::destination::{OpenError, PgDestination};
use std::path::PathBuf;
use std::sync::Arc;

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
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,

    /// Connection: a URI (postgresql://user@host:5432/db) or key=value string; libpq's PG*
    /// variables and ~/.pgpass fill the gaps. Without it, sluice's private cluster is used.
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
    /// summary says why. `auto`: stage where it applies (a table partitioned by ranges of an integer
    /// column, into empty partitions), direct elsewhere.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "auto|direct|stage"
    )]
    pub strategy: StrategyArg,

    /// Parallel connections. Default: this machine's cores, at least 2 and at most 8, never
    /// more than the chunks to load or the server's free connection slots. `auto`: start with
    /// one and add streams while each raises the throughput by 10% or more (up to twice the
    /// cores, at most 16); the summary shows the curve and the choice.
    #[arg(long, short = 'j', value_name = "N|auto", value_parser = parse_jobs)]
    pub jobs: Option<usize>,

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
    /// this name).
    #[arg(long, default_value = "10s", value_parser = parse_lock_wait, value_name = "DURATION")]
    pub lock_wait_timeout: std::time::Duration,

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

    /// No progress display.
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
            chunk_size: None,
            dry_run: false,
            retries: 5,
            lock_wait_timeout: sluice_postgres::stage::DEFAULT_LOCK_WAIT,
            max_errors: None,
            rejects: None,
            restart: false,
            quiet: true,
            report_json: None,
            report_html: None,
            pg_dir: None,
        }
    }
}

/// Parses a column list with SQL's identifier rules, as the server parses `COPY t (a, "B")`:
/// unquoted names fold ASCII letters to lower case, double-quoted names are taken as they are
/// (`""` for a quote), and names longer than 63 bytes are cut, as PostgreSQL cuts them.
pub fn parse_column_list(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted name in --columns `{list}`")),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    Some('"') => break,
                    Some(c) => name.push(c),
                }
            }
            if name.is_empty() {
                return Err(format!("an empty quoted name (\"\") in --columns `{list}`"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                if c == '"' {
                    return Err(format!(
                        "a quote inside a name in --columns `{list}`: quote the whole name"
                    ));
                }
                name.push(c.to_ascii_lowercase());
                chars.next();
            }
            if name.is_empty() {
                return Err(format!("an empty column name in --columns `{list}`"));
            }
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if name.len() > 63 {
            let mut cut = 63;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
        }
        names.push(name);
        match chars.next() {
            None => return Ok(names),
            Some(',') => {}
            Some(c) => {
                return Err(format!(
                    "unexpected `{c}` after column \"{}\" in --columns `{list}`",
                    names.last().map_or("", |n| n.as_str())
                ))
            }
        }
    }
}

/// Parses `--jobs`: a positive number.
pub fn parse_jobs(s: &str) -> Result<usize, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(plan::AUTO_JOBS);
    }
    match s.trim().parse::<usize>() {
        Ok(0) => Err("--jobs must be at least 1 (it is the number of connections)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of connections")),
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
    if let Failure::Input(e) = f {
        error["file"] = e.file.clone().into();
        error["table"] = e.table.clone().into();
        error["line"] = e.line.into();
        error["byte_offset"] = e.offset.into();
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

/// Prints the summary and writes the JSON report.
pub fn print_report(args: &LoadArgs, rep: &report::Report) -> Result<(), Failure> {
    print!("{}", report::render(rep));
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

/// Plans and runs a load; returns its report.
pub fn load(args: &LoadArgs) -> Result<report::Report, Failure> {
    let (file_tables, columns) = inputs(args)?;
    let mut dest = open_destination(args.target.as_deref(), args.pg_dir.clone(), args.quiet)?;
    dest.set_lock_wait(args.lock_wait_timeout);
    if let Some(why) = dest.session.cannot_write().filter(|_| !args.dry_run) {
        return Err(Failure::Usage(why));
    }
    load_into(args, &mut dest, &file_tables, columns)
}

/// A load on a destination already open (the probe's dry run).
pub fn load_on(args: &LoadArgs, dest: &mut PgDestination) -> Result<report::Report, Failure> {
    let (file_tables, columns) = inputs(args)?;
    load_into(args, dest, &file_tables, columns)
}

/// The table each input goes to and the column list, once every input is known readable.
fn inputs(args: &LoadArgs) -> Result<(Vec<String>, Option<Vec<String>>), Failure> {
    if args.files.iter().filter(|f| f.as_str() == "-").count() > 1 {
        return Err(Failure::Usage(
            "standard input (`-`) can be given only once".into(),
        ));
    }
    // The table each file goes to: --table, or the file's name up to its first dot.
    let file_tables = args
        .files
        .iter()
        .map(|f| match (&args.table, f.as_str()) {
            (Some(t), _) => Ok(t.clone()),
            (None, "-") => Err(Failure::Usage(
                "reading standard input needs --table (and --format)".into(),
            )),
            (None, path) => table_from_file_name(path).ok_or_else(|| {
                Failure::Usage(format!("cannot name a table after `{path}`: give --table"))
            }),
        })
        .collect::<Result<Vec<String>, Failure>>()?;
    let columns = args
        .columns
        .as_deref()
        .map(parse_column_list)
        .transpose()
        .map_err(Failure::Usage)?;
    // Every input must be readable before anything connects (or starts a cluster).
    for f in args.files.iter().filter(|f| f.as_str() != "-") {
        plan::check_input(f)?;
    }
    Ok((file_tables, columns))
}

/// Opens the destination a command names (`--target`, else libpq's variables, else the
/// private cluster). Every later connection goes to the host the first one reached.
pub fn open_destination(
    target: Option<&str>,
    pg_dir: Option<PathBuf>,
    quiet: bool,
) -> Result<PgDestination, Failure> {
    let target = target::resolve(target, pg_dir, quiet).map_err(|e| {
        match e.downcast_ref::<target::BadTarget>() {
            Some(_) => Failure::Usage(format!("{e:#}")),
            None => Failure::Connect(format!("{e:#}")),
        }
    })?;
    open_info(&target.info)
}

/// Opens the destination at a resolved connection.
pub fn open_info(info: &sluice_postgres::conninfo::ConnInfo) -> Result<PgDestination, Failure> {
    let warn: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|w| eprintln!("\nwarning: {w}"));
    PgDestination::open(info, warn).map_err(|e| match e {
        OpenError::Server(m) => Failure::Server(m),
        OpenError::Unsupported(m) => Failure::Usage(m),
        OpenError::Runtime(e) => Failure::Local(format!("cannot start the runtime: {e}")),
        other => Failure::Connect(other.to_string()),
    })
}

/// The load once a destination is open: describe, plan, run, report. Nothing here knows
/// which database it is.
fn load_into<D: Staging + Ledger>(
    args: &LoadArgs,
    dest: &mut D,
    file_tables: &[String],
    columns: Option<Vec<String>>,
) -> Result<report::Report, Failure> {
    let mut described: Vec<(String, TableInfo)> = Vec::new();
    for name in file_tables {
        if described.iter().any(|(n, _)| n == name) {
            continue;
        }
        let table = dest.describe(name).map_err(|e| {
            let by_name = match (&args.table, file_tables.iter().position(|t| t == name)) {
                (None, Some(i)) => format!("{} -> table {name}: ", args.files[i]),
                _ => String::new(),
            };
            match e.kind {
                ErrorKind::Usage => Failure::Usage(format!("{by_name}{e}")),
                ErrorKind::Connection => Failure::Connect(format!("{by_name}{e}")),
                _ => Failure::Server(format!("{by_name}reading the catalog: {e}")),
            }
        })?;
        described.push((name.clone(), table));
    }
    let plan = plan::build(args, file_tables, &described, columns.clone())?;
    let load_tables: Vec<LoadTable> = plan.tables.iter().map(|t| t.load_table()).collect();
    dest.set_tables(&load_tables).map_err(|e| match e.kind {
        ErrorKind::Usage => Failure::Usage(e.to_string()),
        _ => Failure::Server(e.to_string()),
    })?;
    // The ledger: resume an unfinished job, leave out what a finished one loaded.
    let replan = |size: u64| {
        let mut again = args.clone();
        again.chunk_size = Some(size as usize);
        plan::build(&again, file_tables, &described, columns.clone())
    };
    let (plan, job) = match open_ledger(args, &plan, &*dest) {
        false => (plan, None),
        true => match ledger::start(&*dest, plan, args.restart, &replan)? {
            ledger::Start::Run(plan, job) => (plan, Some(job)),
            ledger::Start::Nothing(why) => return Ok(nothing_to_load(args, &*dest, why)),
        },
    };
    if let (Some(note), false) = (job.as_ref().and_then(|j| j.note.as_ref()), args.quiet) {
        eprintln!("sluice: {note}");
    }
    let job_id = job.as_ref().map(|j| j.job);
    if let Some(id) = job_id {
        crate::signals::set_resume_hint(&format!(
            "run the same command again to resume job {id} (`sluice jobs` lists it)"
        ));
    }
    crate::faults::point("planned");
    let resumed = job.as_ref().is_some_and(|j| j.resumed);
    let result = match (job_id, resumed && plan.chunks.is_empty()) {
        (Some(id), true) => Ok(nothing_to_load(
            args,
            &*dest,
            format!("job {id}: every chunk was committed by an earlier run; it is finished now"),
        )),
        _ => run_plan(args, dest, plan, job.clone()),
    };
    let Some(id) = job_id else {
        return result.map_err(|f| match f {
            Failure::Server(m) if m.contains("COMMIT failed") => Failure::Server(format!(
                "{m}. This load kept no ledger: reload into empty tables"
            )),
            other => other,
        });
    };
    crate::faults::point("finished");
    end_job(&*dest, id, &result);
    // What a rerun does, now that the ledger knows what is in.
    result.map_err(|f| match f {
        Failure::Server(m) if m.contains("COMMIT failed") => Failure::Server(format!(
            "{m}. The ledger records exactly which chunks committed: run the same command \
             again to load the rest (job {id})"
        )),
        Failure::Server(m) => Failure::Server(format!(
            "{m}. Run the same command again to resume job {id}"
        )),
        Failure::Connect(m) => Failure::Connect(format!(
            "{m}. Run the same command again to resume job {id}"
        )),
        other => other,
    })
}

/// Whether this load keeps a ledger: not a dry run, not standard input (read once, it cannot
/// be resumed), and a role that may keep one (else a warning says why not).
fn open_ledger<D: Ledger>(args: &LoadArgs, plan: &plan::Plan, dest: &D) -> bool {
    if args.dry_run || plan.inputs.iter().any(|i| i.identity.is_none()) {
        return false;
    }
    match dest.open_ledger() {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "warning: this load keeps no resume ledger, so a rerun cannot resume it: {e}"
            );
            false
        }
    }
}

/// Records how the job ended: finished, failed (resumable), or for a bad row or a usage error,
/// which the user fixes in the input or the command, abandoned (nothing of it is committed, and
/// the fixed command is a new job).
fn end_job<D: Ledger>(dest: &D, id: i64, result: &Result<report::Report, Failure>) {
    let (state, message) = match result {
        Ok(_) => (JobState::Finished, None),
        Err(f) if f.abandons_job() => (JobState::Abandoned, Some(f.to_string())),
        Err(f) => (JobState::Failed, Some(f.to_string())),
    };
    if let Err(e) = dest.end_job(id, state, message.as_deref()) {
        eprintln!(
            "warning: could not record in the ledger that job {id} is {} ({e}); the next run \
             of the same command finds it interrupted and completes it",
            state.as_str()
        );
    }
}

/// The report of a load the ledger found nothing to do for.
fn nothing_to_load<D: Destination>(args: &LoadArgs, dest: &D, why: String) -> report::Report {
    if !args.quiet {
        eprintln!("sluice: {why}");
    }
    let plan = plan::Plan {
        tables: Vec::new(),
        inputs: Vec::new(),
        chunks: Vec::new(),
        chunk_size: 0,
    };
    let outcome = crate::load::RunOutcome {
        streams: Vec::new(),
        elapsed: std::time::Duration::ZERO,
        server_conversions: 0,
        strategy: "direct",
        server_waits: Default::default(),
        calibration: None,
    };
    let facts = report::Facts {
        target: dest.target(),
        formats: Vec::new(),
        staged: Vec::new(),
        fallbacks: Vec::new(),
        steps: None,
        wal_bytes: None,
        job: None,
        ledger: Some(why),
        rejected: None,
        server_settings: Vec::new(),
    };
    report::build(&plan, &outcome, facts, false, 0, args.copy_buffer)
}

/// Runs a checked plan (as the ledger left it) and reports.
fn run_plan<D: Staging + Ledger>(
    args: &LoadArgs,
    dest: &mut D,
    mut plan: plan::Plan,
    job: Option<ledger::JobRun>,
) -> Result<report::Report, Failure> {
    // A load that stages opens one more connection at its end, for the publish; and when it
    // also loads tables directly, each stream may hold a direct and a staging connection.
    let staging = |t: usize| {
        matches!(
            dest.partitioning(t),
            Ok(sluice_core::destination::Partitioning::IntegerRange { .. })
        )
    };
    let may_stage = args.strategy != StrategyArg::Direct
        && !args.dry_run
        && (0..plan.tables.len()).any(staging);
    let connections = match may_stage {
        false => (1, 0),
        true if (0..plan.tables.len()).all(staging) => (1, 1),
        true => (2, 1),
    };
    let (jobs, warning) = plan::choose_jobs(
        args.jobs,
        plan.chunks.len(),
        dest.free_slots(),
        connections,
        args.dry_run,
    );
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    // Routing reads each partitioned input's first row, and may say what earlier loads left;
    // the chunks an earlier run of the job staged leave the plan, their tables published as
    // they are.
    let mode = match (args.strategy, args.dry_run) {
        (StrategyArg::Direct, _) | (_, true) => None,
        (StrategyArg::Auto, false) => Some(Mode::Auto),
        (StrategyArg::Stage, false) => Some(Mode::Required),
    };
    let mut stage = mode
        .map(|mode| Stage::plan(&mut plan, &*dest, mode, jobs, job.as_ref()))
        .transpose()?;
    let ledger_note = job.as_ref().and_then(|j| j.note.clone());
    let job_id = job.as_ref().map(|j| j.job);
    let rejects = args
        .max_errors
        .filter(|t| t.allows_any())
        .map(|t| Arc::new(Rejects::new(t, args.rejects.clone(), &plan)));
    if let Some(s) = stage.as_mut() {
        s.verbose = !args.quiet;
        s.isolate_rejects = rejects.is_some();
    }
    let opts = RunOptions {
        jobs,
        copy_buffer: args.copy_buffer,
        dry_run: args.dry_run,
        job,
        retries: args.retries,
        rejects: rejects.clone(),
        calibrate: args.jobs == Some(plan::AUTO_JOBS) && !args.dry_run,
    };
    if !args.quiet && !args.dry_run {
        for group in crate::load::strategy::reference_groups(&plan) {
            let name = |t: usize| plan.tables[t].table.name.as_str();
            let mut keys: Vec<String> = Vec::new();
            for &t in &group {
                for &p in &group {
                    if plan.tables[t]
                        .table
                        .references
                        .contains(&plan.tables[p].table.id)
                    {
                        keys.push(format!("{} -> {}", name(t), name(p)));
                    }
                }
            }
            let order: Vec<&str> = group.iter().map(|&t| name(t)).collect();
            eprintln!(
                "sluice: foreign keys tie tables of this load ({}): they load on one stream, \
                 parents first ({}), so that each check sees its parent rows (streams cannot \
                 see each other's rows before they commit); to load them in parallel, load the \
                 parents in a command of their own first",
                keys.join(", "),
                order.join(", ")
            );
        }
    }
    let counters: Arc<Vec<Counters>> = Arc::new(
        (0..plan.tables.len())
            .map(|_| Counters::default())
            .collect(),
    );
    let names = plan.tables.iter().map(|t| t.table.name.clone()).collect();
    let totals = (0..plan.tables.len())
        .map(|t| {
            plan.chunks
                .iter()
                .filter(|c| plan.inputs[c.input].table == t)
                .map(|c| c.weight(&plan.inputs))
                .sum()
        })
        .collect();
    let chunk_counts = (0..plan.tables.len())
        .map(|t| {
            plan.chunks
                .iter()
                .filter(|c| plan.inputs[c.input].table == t)
                .count() as u64
        })
        .collect();
    let display = progress::start(
        progress::Mode::choose(args.quiet),
        names,
        totals,
        chunk_counts,
        counters.clone(),
        if args.dry_run { "checking" } else { "loading" },
    );
    let wal_start = (!args.dry_run).then(|| dest.log_position()).flatten();
    let strategy: &dyn Strategy<D> = match &stage {
        Some(s) => s,
        None => &Direct,
    };
    let outcome = execute(&plan, &opts, &*dest, strategy, &counters);
    drop(display);
    // The rejects files, whatever the outcome: past the threshold they say what to fix.
    if let Some(r) = &rejects {
        if let Err(e) = r.write(&plan) {
            let path = r.path.as_deref().unwrap_or(std::path::Path::new(""));
            eprintln!(
                "warning: cannot write the rejects file {}: {e}",
                path.display()
            );
        }
    }
    let outcome = outcome.map_err(|e| match e {
        // Say which table a file went to when the file's name chose it.
        Failure::Input(mut ie) if args.table.is_none() => {
            let t = plan.inputs.iter().find(|i| i.display == ie.file);
            ie.table = t.map(|i| plan.tables[i.table].table.name.clone());
            Failure::Input(ie)
        }
        other => other,
    })?;
    let formats = (0..plan.tables.len())
        .map(|t| dest.load_format(t))
        .collect();
    let wal_bytes = wal_start.and_then(|a| Some(dest.log_position()?.saturating_sub(a)));
    let facts = report::Facts {
        target: dest.target(),
        formats,
        staged: (0..plan.inputs.len())
            .map(|i| stage.as_ref().is_some_and(|s| s.staged(i)))
            .collect(),
        fallbacks: stage.as_ref().map(Stage::fallbacks).unwrap_or_default(),
        steps: stage.as_ref().map(Stage::times),
        wal_bytes,
        job: job_id,
        ledger: ledger_note,
        rejected: rejects.as_ref().map(|r| report::RejectedReport {
            rows: r.count(),
            by_cause: r.by_cause(),
            max_errors: r.threshold.to_string(),
            file: r.path.as_ref().map(|p| p.display().to_string()),
            details: r
                .path
                .as_ref()
                .map(|p| rejects::details_path(p).display().to_string()),
            first: r.first(&plan).map(|e| e.to_string()),
        }),
        server_settings: match args.dry_run {
            true => Vec::new(),
            false => dest.settings(),
        },
    };
    Ok(report::build(
        &plan,
        &outcome,
        facts,
        args.dry_run,
        jobs,
        args.copy_buffer,
    ))
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
    fn column_lists_follow_sql_identifier_rules() {
        let p = |s: &str| parse_column_list(s);
        assert_eq!(p("ID,v").unwrap(), ["id", "v"]);
        assert_eq!(p(" a , B ").unwrap(), ["a", "b"]);
        assert_eq!(
            p("\"Ünï \"\"q\"\"\",\"my col\"").unwrap(),
            ["Ünï \"q\"", "my col"]
        );
        assert_eq!(p("\"a,b\",\"ColA\"").unwrap(), ["a,b", "ColA"]);
        // Only ASCII letters fold, as in a UTF8 database.
        assert_eq!(p("ÄB").unwrap(), ["Äb"]);
        assert_eq!(p(&"x".repeat(70)).unwrap(), ["x".repeat(63)]);
        for bad in ["", "a,,b", "a,", "\"open", "a b", "x\"y\"", "\"\""] {
            assert!(p(bad).is_err(), "{bad:?} should be refused");
        }
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
