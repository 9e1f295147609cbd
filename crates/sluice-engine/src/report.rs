//! The end-of-load report's data: per table and in total, the streams' timelines, the ledger's
//! decision, rejects, the server's activity and the verdict. Its caller renders it (a text
//! summary, JSON, an HTML page).

use crate::plan::Plan;
use crate::run::RunOutcome;
use crate::stage::{Fallback, StepTimes};
use serde::Serialize;

#[derive(Serialize, Debug, Clone)]
pub struct TableReport {
    pub table: String,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
    /// Bytes sent to the destination in its encoding (`copy_format`).
    pub wire_bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// How the destination loads the table (`binary`, or `text` when some column
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
    /// Why `--wire auto` chose the encodings it did (`None` when it had no choice to make).
    pub wire_choice: Option<String>,
    pub jobs: usize,
    pub copy_buffer_bytes: usize,
    pub chunks: usize,
    pub tables: Vec<TableReport>,
    pub total: TableReport,
    pub elapsed_seconds: f64,
    pub server_conversions: u64,
    pub streams: Vec<crate::run::StreamStats>,
    /// The ledger's job this load ran as (`sluice jobs` lists it); `None` without a ledger
    /// (a dry run, standard input, or a role that cannot keep one).
    pub job: Option<i64>,
    /// What the ledger decided before the load: resumed, files skipped, nothing to do.
    pub ledger: Option<String>,
    /// Files a finished job had loaded that this load left out, each with why.
    pub skipped: Vec<crate::ledger::Skipped>,
    /// Rows rejected within `--max-errors` (`None` when none may be).
    pub rejected: Option<RejectedReport>,
    /// What bound the load (`None` for a dry run, or a load too short to judge).
    pub verdict: Option<crate::verdict::Verdict>,
    /// What the load's server sessions were doing, sampled while the streams ran.
    pub server_waits: ServerWaitsReport,
    /// `--jobs auto`: the throughput measured at each stream count, and the choice.
    pub calibration: Option<crate::calibrate::Calibration>,
    /// The server settings that matter to a bulk load, as the server reported them.
    pub server_settings: Vec<(String, String)>,
    /// This load as one worker of a job several load together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crew: Option<CrewReport>,
    /// The transactions the streams prepared and left for the crew's decision.
    #[serde(skip)]
    pub prepared: Vec<String>,
}

/// A crew worker's place and share, in the report.
#[derive(Serialize, Debug, Clone)]
pub struct CrewReport {
    pub job: String,
    pub worker: u32,
    pub workers: u32,
    /// Chunks of this worker's files that other workers had loaded, or were loading, when its
    /// streams came to them.
    pub chunks_loaded_elsewhere: u64,
    /// Every worker of the job, as the ledger held them once the job finished (for the
    /// per-worker timeline).
    pub slots: Vec<sluice_core::ledger::WorkerRecord>,
    /// When the job finished, seconds since the Unix epoch by the server's clock.
    pub finished_at: Option<f64>,
}

impl Report {
    /// What this worker reports of its part to its crew.
    pub fn worker_part(&self) -> sluice_core::ledger::WorkerPart {
        sluice_core::ledger::WorkerPart {
            streams: self.jobs as u32,
            rows: self.total.rows,
            bytes: self.total.bytes,
            seconds: self.elapsed_seconds,
            verdict: self.verdict.as_ref().map(|v| v.kind.clone()),
            staged: false,
        }
    }
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
#[derive(Default)]
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
    pub skipped: Vec<crate::ledger::Skipped>,
    pub rejected: Option<RejectedReport>,
    /// Why `--wire auto` chose the encodings it did.
    pub wire: Option<String>,
    pub server_settings: Vec<(String, String)>,
    pub crew: Option<CrewReport>,
}

/// The report of a load from its plan and outcome.
pub fn build(
    plan: &Plan,
    outcome: &RunOutcome,
    facts: Facts,
    dry_run: bool,
    jobs: usize,
    copy_buffer: usize,
) -> Report {
    build_judged(
        plan,
        outcome,
        facts,
        dry_run,
        jobs,
        copy_buffer,
        &crate::verdict::Plain,
    )
}

/// The advisor as the verdict sees it: a table every input of which was staged had its
/// indexes built after its rows, so they cost the load no work per row, and the advice does not
/// tell the user to do what sluice did.
struct IndexesAfter<'a> {
    inner: &'a dyn crate::verdict::Advisor,
    /// The staged tables' names.
    staged: Vec<String>,
}

impl crate::verdict::Advisor for IndexesAfter<'_> {
    fn label(&self, class: sluice_core::destination::Activity) -> Option<&'static str> {
        self.inner.label(class)
    }

    fn words(&self, class: sluice_core::destination::Activity) -> Option<&'static str> {
        self.inner.words(class)
    }

    fn advice(
        &self,
        class: sluice_core::destination::Activity,
        waits: &sluice_core::destination::ServerWaits,
        costs: &sluice_core::destination::TableCosts,
    ) -> Option<String> {
        self.inner.advice(class, waits, costs)
    }

    fn costs(&self) -> sluice_core::destination::TableCosts {
        let mut costs = self.inner.costs();
        costs.indexes.retain(|(t, _)| !self.staged.contains(t));
        costs
    }
}

/// The report of a load, its verdict worded with `advisor`'s (the destination's) terms.
pub fn build_judged(
    plan: &Plan,
    outcome: &RunOutcome,
    facts: Facts,
    dry_run: bool,
    jobs: usize,
    copy_buffer: usize,
    advisor: &dyn crate::verdict::Advisor,
) -> Report {
    let staged_tables: Vec<String> = (0..plan.tables.len())
        .filter(|&t| {
            let mut inputs = (0..plan.inputs.len()).filter(|&k| plan.inputs[k].table == t);
            let mut any = false;
            let all = inputs.all(|k| {
                any = true;
                facts.staged.get(k).copied().unwrap_or(false)
            });
            any && all
        })
        .map(|t| plan.tables[t].table.name.clone())
        .collect();
    let chunks: Vec<&crate::run::ChunkStat> =
        outcome.streams.iter().flat_map(|s| &s.chunks).collect();
    // `--jobs auto` is given its cap; the load used the streams it admitted.
    let jobs = match outcome.calibration {
        Some(_) => outcome
            .streams
            .iter()
            .filter(|s| !s.chunks.is_empty())
            .count()
            .max(1),
        None => jobs,
    };
    let tables: Vec<TableReport> = plan
        .tables
        .iter()
        .enumerate()
        .map(|(i, tp)| {
            let mine = chunks.iter().filter(|c| c.table_index == i);
            let (rows, bytes, wire_bytes, start, end) =
                mine.fold((0, 0, 0, f64::INFINITY, 0f64), |(r, b, w, s, e), c| {
                    (
                        r + c.rows,
                        b + c.bytes,
                        w + c.wire_bytes,
                        s.min(c.start),
                        e.max(c.end),
                    )
                });
            // A routed table's rows load after they are routed, in steps of their own.
            let end = outcome
                .streams
                .iter()
                .flat_map(|s| &s.steps)
                .filter(|s| s.table == Some(i))
                .fold(end, |e, s| e.max(s.end));
            let seconds = (end - start).max(0.0);
            TableReport {
                table: tp.table.name.clone(),
                files: plan.inputs.iter().filter(|inp| inp.table == i).count(),
                rows,
                bytes,
                wire_bytes,
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
        wire_bytes: tables.iter().map(|t| t.wire_bytes).sum(),
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
        wire_choice: facts.wire,
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
        skipped: facts.skipped,
        rejected: facts.rejected,
        verdict: (!dry_run)
            .then(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                let advisor = IndexesAfter {
                    inner: advisor,
                    staged: staged_tables,
                };
                crate::verdict::judge(plan, outcome, jobs, cores, &advisor)
            })
            .flatten(),
        calibration: outcome.calibration.clone(),
        server_settings: facts.server_settings,
        crew: facts.crew,
        prepared: outcome.prepared.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::Advisor;
    use sluice_core::destination::TableCosts;

    struct Carries;

    impl Advisor for Carries {
        fn costs(&self) -> TableCosts {
            TableCosts {
                indexes: vec![
                    ("orders".into(), vec!["orders_pkey".into()]),
                    ("lineitem".into(), vec!["lineitem_pkey".into()]),
                ],
                checks: vec![("lineitem".into(), vec!["positive".into()])],
                ..TableCosts::default()
            }
        }
    }

    #[test]
    fn a_staged_tables_indexes_are_not_a_cost_per_row() {
        let advisor = IndexesAfter {
            inner: &Carries,
            staged: vec!["lineitem".into()],
        };
        let costs = advisor.costs();
        assert_eq!(
            costs.indexes,
            vec![("orders".to_string(), vec!["orders_pkey".to_string()])]
        );
        // Its checks still are: the staging table carries them as it loads.
        assert_eq!(costs.checks.len(), 1);
    }
}
