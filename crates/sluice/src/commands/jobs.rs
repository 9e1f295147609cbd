//! `sluice jobs`: the loads a target's ledger knows, and `sluice jobs forget ID`.
//!
//! The ledger is the target's own (schema `sluice_ledger`), so this command reads it where the loads
//! wrote it, with the same connection conventions as `sluice load`.

use crate::destination::{self, WithDestination};
use crate::failure::Failure;
use clap::{Args, Subcommand};
use sluice_core::destination::Ledger;
use sluice_core::ledger::{CrewStatus, Job, JobState, WorkerRecord};
use sluice_engine::ledger::ledger_failure;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  sluice jobs -t \"$URL\"              # every load the target's ledger knows
  sluice jobs -t \"$URL\" --json
  sluice jobs -t \"$URL\" forget 12    # drop job 12's records

States: running (a sluice process runs it now), interrupted (its process
died: the same command resumes it), failed (it said why: the same command
resumes it), finished, abandoned (a bad row or a usage error, fixed by a
new command; or replaced by --restart). \"(+N staged)\" counts chunks and
rows that staging tables of an interrupted run hold: the run that resumes
the job publishes them without loading them again.

Exit codes: 0 done, 2 usage (no such job, a job still running), 4 cannot
connect, 5 server failure.")]
pub struct JobsArgs {
    #[command(subcommand)]
    pub command: Option<JobsCommand>,

    /// Connection, as for `sluice load` (without it, the private cluster).
    #[arg(long, short = 't', value_name = "URL", global = true)]
    pub target: Option<String>,

    /// The private cluster's directory, when no target is given.
    #[arg(long, value_name = "DIR", global = true)]
    pub pg_dir: Option<PathBuf>,

    /// Print the jobs as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum JobsCommand {
    /// Remove a job that is not running from the ledger, with the staging tables it left
    /// unpublished (and those of other stopped loads that no job can publish). Its published
    /// rows stay in the tables; a later run of the same command no longer knows them (it
    /// resumes nothing and skips nothing of this job's).
    Forget {
        /// The job's id, as `sluice jobs` lists it.
        id: i64,
    },
}

pub fn run(args: JobsArgs) -> Result<(), Failure> {
    let mut dest = destination::open(args.target.as_deref(), args.pg_dir.clone(), true)?;
    dest.with(Jobs(args))
}

/// The command on whichever destination the target names.
struct Jobs(JobsArgs);

impl WithDestination<Result<(), Failure>> for Jobs {
    fn call<D: Ledger>(self, dest: &mut D) -> Result<(), Failure> {
        jobs(self.0, dest)
    }
}

fn jobs<D: Ledger>(args: JobsArgs, dest: &D) -> Result<(), Failure> {
    dest.open_ledger()
        .map_err(|e| ledger_failure("opening the ledger", e))?;
    match args.command {
        Some(JobsCommand::Forget { id }) => {
            // The ledger refuses an unknown job, and one another process runs (exit 2).
            let (dropped, ended) = sluice_engine::ledger::forget(dest, id)?;
            if let Some(ended) = ended {
                eprintln!("sluice: {ended}");
            }
            println!("forgot job {id}");
            if !dropped.is_empty() {
                println!(
                    "dropped {} staging table(s) that stopped loads left: {}",
                    dropped.len(),
                    dropped.join(", ")
                );
            }
            Ok(())
        }
        None => {
            let jobs = dest
                .jobs(None)
                .map_err(|e| ledger_failure("reading the ledger", e))?;
            let crews = crews(dest, &jobs)?;
            if args.json {
                let list: Vec<serde_json::Value> = jobs
                    .iter()
                    .map(|j| {
                        let mut v = json(j);
                        if let Some((_, s)) = crews.iter().find(|(id, _)| *id == j.id) {
                            v["workers"] = s.slots.iter().map(worker_json).collect();
                        }
                        v
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("jobs serialize")
                );
            } else {
                print!("{}", render(&jobs));
                for (id, s) in &crews {
                    print!("{}", render_workers(*id, s));
                }
            }
            Ok(())
        }
    }
}

fn json(j: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": j.id,
        "state": j.state.as_str(),
        "tables": j.tables,
        "chunks_done": j.chunks_done,
        "chunks_total": j.chunks_total,
        "rows_done": j.rows_done,
        "staged_chunks": j.staged_chunks,
        "staged_rows": j.staged_rows,
        "bytes_total": j.bytes_total,
        "started": j.started,
        "finished": j.finished,
        "message": j.message,
    })
}

/// The workers of each job that several load together (`--job`), newest job first.
fn crews<D: Ledger>(dest: &D, jobs: &[Job]) -> Result<Vec<(i64, CrewStatus)>, Failure> {
    jobs.iter()
        .filter(|j| j.key.starts_with("crew:"))
        .map(|j| {
            dest.crew_status(j.id)
                .map(|s| (j.id, s))
                .map_err(|e| ledger_failure("reading a job's workers", e))
        })
        .collect()
}

fn worker_json(w: &WorkerRecord) -> serde_json::Value {
    serde_json::json!({
        "worker": w.worker,
        "host": w.host,
        "pid": w.pid,
        "state": w.state,
        "live": w.live,
        "streams": w.streams,
        "rows": w.rows,
        "bytes": w.bytes,
        "seconds": w.seconds,
        "verdict": w.verdict,
        "message": w.message,
    })
}

/// A crew's workers, a line each: host, state, streams, rows, rate and verdict.
fn render_workers(id: i64, s: &CrewStatus) -> String {
    let mut out = String::new();
    for w in &s.slots {
        let rate = match w.seconds > 0.0 {
            true => format!(", {:.1} MB/s", w.bytes as f64 / w.seconds / 1e6),
            false => String::new(),
        };
        out.push_str(&format!(
            "job {id} worker {} of {} on {} (process {}{}): {}, {} stream(s), {} rows in {:.1} \
             s{rate}{}{}\n",
            w.worker,
            s.workers,
            w.host,
            w.pid,
            if w.live { ", running" } else { "" },
            w.state,
            w.streams,
            crate::progress::thousands(w.rows),
            w.seconds,
            w.verdict
                .as_deref()
                .map(|v| format!(", {v}"))
                .unwrap_or_default(),
            w.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    out
}

/// What staging tables hold for a job, beside what it committed: `" (+8 staged)"`.
fn staged(n: u64) -> String {
    match n {
        0 => String::new(),
        n => format!(" (+{} staged)", crate::progress::thousands(n)),
    }
}

/// The jobs as an aligned table, newest first.
fn render(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "no jobs: this target's ledger is empty\n".into();
    }
    let mut rows: Vec<[String; 7]> = vec![[
        "id".into(),
        "state".into(),
        "chunks".into(),
        "rows".into(),
        "started".into(),
        "finished".into(),
        "tables".into(),
    ]];
    for j in jobs {
        rows.push([
            j.id.to_string(),
            j.state.as_str().into(),
            format!(
                "{}/{}{}",
                j.chunks_done,
                j.chunks_total,
                staged(j.staged_chunks)
            ),
            format!(
                "{}{}",
                crate::progress::thousands(j.rows_done),
                staged(j.staged_rows)
            ),
            j.started.clone(),
            j.finished.clone().unwrap_or_else(|| "-".into()),
            j.tables.join(","),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| match c {
                2 | 3 => format!("{v:>w$}", w = widths[c]),
                _ => format!("{v:<w$}", w = widths[c]),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for j in jobs {
        if let (Some(m), true) = (&j.message, j.state != JobState::Finished) {
            out.push_str(&format!("job {}: {m}\n", j.id));
        }
    }
    out
}
