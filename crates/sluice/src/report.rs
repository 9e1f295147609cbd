//! The end-of-load summary: a table on stdout and the same figures as JSON.

use crate::load::plan::Plan;
use crate::load::stage::{Fallback, StepTimes};
use crate::load::RunOutcome;
use serde::Serialize;

#[derive(Serialize, Debug, Clone)]
pub struct TableReport {
    pub table: String,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// How the destination loads the table (PostgreSQL: `binary`, or `text` when some column
    /// is converted by the server).
    pub copy_format: &'static str,
    pub server_converted_columns: Vec<String>,
    /// How its inputs reached it: `direct`, `stage`, or `stage+direct`.
    pub strategy: &'static str,
}

#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub target: String,
    pub dry_run: bool,
    /// How the rows reached their tables: `direct`, `stage`, or `stage+direct`.
    pub strategy: &'static str,
    /// Inputs that could not be staged and went through `direct`, and why.
    pub fallbacks: Vec<Fallback>,
    /// The stage strategy's steps (summed over staging tables) and its publish.
    pub steps: Option<StepTimes>,
    /// Bytes of write-ahead log the server wrote during the load (all sessions).
    pub wal_bytes: Option<u64>,
    pub jobs: usize,
    pub copy_buffer_bytes: usize,
    pub chunks: usize,
    pub tables: Vec<TableReport>,
    pub total: TableReport,
    pub elapsed_seconds: f64,
    pub server_conversions: u64,
    pub streams: Vec<crate::load::StreamStats>,
    /// The ledger's job this load ran as (`sluice jobs` lists it); `None` without a ledger
    /// (a dry run, standard input, or a role that cannot keep one).
    pub job: Option<i64>,
    /// What the ledger decided before the load: resumed, files skipped, nothing to do.
    pub ledger: Option<String>,
    /// Rows rejected within `--max-errors` (`None` when none may be).
    pub rejected: Option<RejectedReport>,
    /// What bound the load (`None` for a dry run, or a load too short to judge).
    pub verdict: Option<crate::verdict::Verdict>,
    /// What the load's server sessions were doing, sampled while the streams ran.
    pub server_waits: ServerWaitsReport,
    /// `--jobs auto`: the throughput measured at each stream count, and the choice.
    pub calibration: Option<crate::load::calibrate::Calibration>,
    /// The server settings that matter to a bulk load, as the server reported them.
    pub server_settings: Vec<(String, String)>,
}

/// The server's side of where the time went.
#[derive(Serialize, Debug, Clone, Default)]
pub struct ServerWaitsReport {
    /// Session samples (sessions times samples, a few a second).
    pub samples: u64,
    /// Samples by class (`waiting_for_client`, `cpu`, `wal`, `disk_io`, `lock`, `other`) and
    /// the server's own name for the wait, most frequent first.
    pub events: Vec<WaitEvent>,
    /// The classes, in the order of each sample's counts in `series`.
    pub classes: Vec<&'static str>,
    /// Each sample: seconds since the watch began, and the sessions in each class.
    pub series: Vec<(f64, [u32; 6])>,
}

#[derive(Serialize, Debug, Clone)]
pub struct WaitEvent {
    pub class: &'static str,
    pub event: String,
    pub samples: u64,
}

/// The rows a load rejected and loaded around.
#[derive(Serialize, Debug, Clone, Default)]
pub struct RejectedReport {
    pub rows: u64,
    /// Counts by cause: `invalid_value`, `missing_data`, `extra_data`, `not_null_violation`,
    /// `unique_violation`, `foreign_key_violation`, `check_violation`, `exclusion_violation`,
    /// `raised_by_trigger`, `rejected`.
    pub by_cause: std::collections::BTreeMap<&'static str, u64>,
    /// The `--max-errors` threshold, as given.
    pub max_errors: String,
    /// The rejects file (the rows' own bytes) and its details (JSON lines).
    pub file: Option<String>,
    pub details: Option<String>,
    /// The first rejected row in input order, as a message.
    pub first: Option<String>,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// What the run's caller knows beyond the plan and the outcome.
pub struct Facts {
    /// The target, without a password.
    pub target: String,
    /// How the destination loads each table (`binary`, `text`).
    pub formats: Vec<&'static str>,
    /// Whether each input went through a staging table.
    pub staged: Vec<bool>,
    pub fallbacks: Vec<Fallback>,
    pub steps: Option<StepTimes>,
    pub wal_bytes: Option<u64>,
    pub job: Option<i64>,
    pub ledger: Option<String>,
    pub rejected: Option<RejectedReport>,
    pub server_settings: Vec<(String, String)>,
}

pub fn build(
    plan: &Plan,
    outcome: &RunOutcome,
    facts: Facts,
    dry_run: bool,
    jobs: usize,
    copy_buffer: usize,
) -> Report {
    let chunks: Vec<&crate::load::ChunkStat> =
        outcome.streams.iter().flat_map(|s| &s.chunks).collect();
    let tables: Vec<TableReport> = plan
        .tables
        .iter()
        .enumerate()
        .map(|(i, tp)| {
            let mine = chunks.iter().filter(|c| c.table_index == i);
            let (rows, bytes, start, end) = mine
                .fold((0, 0, f64::INFINITY, 0f64), |(r, b, s, e), c| {
                    (r + c.rows, b + c.bytes, s.min(c.start), e.max(c.end))
                });
            let seconds = (end - start).max(0.0);
            TableReport {
                table: tp.table.name.clone(),
                files: plan.inputs.iter().filter(|inp| inp.table == i).count(),
                rows,
                bytes,
                seconds,
                mb_per_s: mbps(bytes, seconds),
                copy_format: facts.formats.get(i).copied().unwrap_or(""),
                strategy: {
                    let mine: Vec<bool> = (0..plan.inputs.len())
                        .filter(|&k| plan.inputs[k].table == i)
                        .map(|k| facts.staged.get(k).copied().unwrap_or(false))
                        .collect();
                    match (mine.iter().any(|&s| s), mine.iter().all(|&s| s)) {
                        (true, true) => "stage",
                        (true, false) => "stage+direct",
                        _ => "direct",
                    }
                },
                server_converted_columns: tp
                    .server_converted()
                    .iter()
                    .map(|c| format!("{} ({})", c.name, c.type_name))
                    .collect(),
            }
        })
        .collect();
    let elapsed = outcome.elapsed.as_secs_f64();
    let bytes = tables.iter().map(|t| t.bytes).sum();
    let total = TableReport {
        table: "total".into(),
        files: plan.inputs.len(),
        rows: tables.iter().map(|t| t.rows).sum(),
        bytes,
        seconds: elapsed,
        mb_per_s: mbps(bytes, elapsed),
        copy_format: "",
        server_converted_columns: Vec::new(),
        strategy: outcome.strategy,
    };
    Report {
        target: facts.target,
        dry_run,
        strategy: outcome.strategy,
        fallbacks: facts.fallbacks,
        steps: facts.steps,
        wal_bytes: facts.wal_bytes,
        jobs,
        copy_buffer_bytes: copy_buffer,
        chunks: plan.chunks.len(),
        tables,
        total,
        elapsed_seconds: elapsed,
        server_conversions: outcome.server_conversions,
        streams: outcome.streams.clone(),
        job: facts.job,
        ledger: facts.ledger,
        rejected: facts.rejected,
        verdict: (!dry_run)
            .then(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                crate::verdict::judge(plan, outcome, jobs, cores)
            })
            .flatten(),
        calibration: outcome.calibration.clone(),
        server_settings: facts.server_settings,
        server_waits: ServerWaitsReport {
            classes: sluice_core::destination::Activity::ALL
                .iter()
                .map(|a| a.name())
                .collect(),
            series: outcome.server_waits.series.clone(),
            samples: outcome.server_waits.samples,
            events: outcome
                .server_waits
                .activities
                .iter()
                .map(|(class, event, n)| WaitEvent {
                    class: class.name(),
                    event: event.clone(),
                    samples: *n,
                })
                .collect(),
        },
    }
}

/// The summary as an aligned text table.
pub fn render(report: &Report) -> String {
    if let (Some(note), true) = (&report.ledger, report.tables.is_empty()) {
        // The ledger found nothing to load: that is the whole summary.
        return format!("ledger: {note}\n");
    }
    let mut rows: Vec<[String; 6]> = vec![[
        "table".into(),
        "files".into(),
        "rows".into(),
        "bytes".into(),
        "seconds".into(),
        "MB/s".into(),
    ]];
    for t in report.tables.iter().chain(std::iter::once(&report.total)) {
        rows.push([
            t.table.clone(),
            t.files.to_string(),
            crate::progress::thousands(t.rows),
            crate::progress::human_bytes(t.bytes),
            format!("{:.2}", t.seconds),
            format!("{:.1}", t.mb_per_s),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        if i == rows.len() - 1 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for t in &report.tables {
        if !t.server_converted_columns.is_empty() {
            out.push_str(&format!(
                "note: {} loads through text COPY; the server converts {}\n",
                t.table,
                t.server_converted_columns.join(", ")
            ));
        }
    }
    if report.server_conversions > 0 {
        out.push_str(&format!(
            "note: {} values in spellings sluice does not parse were converted by the server\n",
            crate::progress::thousands(report.server_conversions)
        ));
    }
    if report.strategy != "direct" {
        let staged: Vec<&str> = report
            .tables
            .iter()
            .filter(|t| t.strategy != "direct")
            .map(|t| t.table.as_str())
            .collect();
        out.push_str(&format!(
            "strategy: {} (staged: {})\n",
            report.strategy,
            staged.join(", ")
        ));
    }
    if let Some(s) = &report.steps {
        if s.staging_tables > 0 {
            out.push_str(&format!(
                "stage: {} staging table{}; load {:.2} s, index build {:.2} s, analyze {:.2} s \
                 (summed over streams); publish {:.2} s in {} attempt(s), then analyze of the \
                 parents {:.2} s\n",
                s.staging_tables,
                if s.staging_tables == 1 { "" } else { "s" },
                s.load_seconds,
                s.index_seconds,
                s.analyze_seconds,
                s.publish_seconds,
                s.publish_attempts,
                s.parent_analyze_seconds
            ));
        }
        if s.reused_staging_tables > 0 {
            out.push_str(&format!(
                "stage: {} staging table(s) an earlier run of the job committed were published \
                 as they were ({} rows, not loaded again)\n",
                s.reused_staging_tables, s.reused_rows
            ));
        }
        for p in &s.appended {
            out.push_str(&format!(
                "note: {p} had rows by the publish, so its staged rows were appended, not \
                 switched in\n"
            ));
        }
    }
    for f in &report.fallbacks {
        out.push_str(&format!(
            "direct: {} (table {}): {}\n",
            f.file, f.table, f.reason
        ));
    }
    if let Some(w) = report.wal_bytes {
        out.push_str(&format!(
            "WAL written during the load: {}\n",
            crate::progress::human_bytes(w)
        ));
    }
    if let Some(note) = &report.ledger {
        out.push_str(&format!("ledger: {note}\n"));
    }
    if let Some(r) = report.rejected.as_ref().filter(|r| r.rows > 0) {
        let causes: Vec<String> = r
            .by_cause
            .iter()
            .map(|(c, n)| format!("{} {}", crate::progress::thousands(*n), c.replace('_', " ")))
            .collect();
        out.push_str(&format!(
            "rejected: {} row{} ({}), within --max-errors {}{}\n",
            crate::progress::thousands(r.rows),
            if r.rows == 1 { "" } else { "s" },
            causes.join(", "),
            r.max_errors,
            match (&r.file, &r.details) {
                (Some(f), Some(d)) => format!("; the rows are in {f}, why in {d}"),
                _ => "; give --rejects PATH to keep them".to_string(),
            }
        ));
        if let Some(first) = &r.first {
            out.push_str(&format!("first rejected row: {first}\n"));
        }
    }
    if let Some(c) = &report.calibration {
        let curve: Vec<String> = c
            .curve
            .iter()
            .map(|p| format!("{} -> {:.0} MB/s", p.jobs, p.mb_per_s))
            .collect();
        let knee = match c.knee {
            Some(k) if k != c.chosen => format!("knee at {k}, kept {}", c.chosen),
            Some(k) => format!("knee at {k}"),
            None => format!("chose {}", c.chosen),
        };
        out.push_str(&format!(
            "jobs auto: {}; {knee} ({})\n",
            curve.join(", "),
            c.why
        ));
    }
    if let Some(v) = &report.verdict {
        out.push_str(&format!("verdict: {}\n", v.line()));
    }
    if report.dry_run {
        out.push_str("dry run: every row was read, converted and encoded; nothing was sent\n");
    }
    out
}
