//! Exactly once across runs: what a load does with the resume ledger before it starts.
//!
//! A load is a *job*, named by its tables and input paths ([`job_key`]). Before the streams
//! open, [`start`] looks the job up in the target's ledger:
//!
//! - an unfinished job (interrupted, or failed for a reason other than a bad row) is
//!   resumed: every file is checked against what the job recorded (size, modification time,
//!   a sampled fingerprint), and the chunks it committed are left out of the plan. A changed
//!   file refuses the resume, since the rows already in would be of another version.
//! - otherwise each file that a finished job loaded, unchanged since, is left out (a cron
//!   job run twice loads nothing the second time), and the rest is a new job.
//!
//! `--restart` skips both checks and loads everything as a new job. The chunks' ledger rows
//! are written by the streams, in the transactions that commit the rows (`super::execute`).

use crate::failure::Failure;
use crate::plan::{Chunk, InputSource, Plan};
use sluice_core::destination::{ErrorKind, Ledger};
use sluice_core::ledger::{ChunkRecord, FileRecord, JobSpec, JobState};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes read per sampled block, and blocks per file: 1 MiB read for a file of any size.
const BLOCK: u64 = 64 << 10;
const BLOCKS: u64 = 16;

/// A digest of a file's size and of `BLOCKS` evenly spaced blocks (the first and the last
/// among them), hex. It reads at most a MiB, so a terabyte of inputs costs seconds; a change
/// it cannot see (bytes between samples rewritten in place, with the same size and
/// modification time) is the one a resume cannot detect.
pub fn fingerprint(path: &Path, size: u64) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&size.to_le_bytes());
    let mut buf = vec![0u8; BLOCK as usize];
    let offsets: Vec<u64> = if size <= BLOCK * BLOCKS {
        (0..size.div_ceil(BLOCK)).map(|i| i * BLOCK).collect()
    } else {
        let last = size - BLOCK;
        (0..BLOCKS).map(|i| last * i / (BLOCKS - 1)).collect()
    };
    for off in offsets {
        f.seek(SeekFrom::Start(off))?;
        let want = BLOCK.min(size - off) as usize;
        let mut got = 0;
        while got < want {
            let k = f.read(&mut buf[got..want])?;
            if k == 0 {
                break;
            }
            got += k;
        }
        h.update(&buf[..got]);
    }
    Ok(format!("{:032x}", h.digest128()))
}

/// The job's name across runs: its tables and input paths, in the command's order.
pub fn job_key(plan: &Plan) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for input in &plan.inputs {
        let path = input
            .identity
            .as_ref()
            .map(|i| i.path.to_string_lossy().into_owned())
            .unwrap_or_else(|| input.display.clone());
        h.update(plan.tables[input.table].table.qualified.as_bytes());
        h.update(&[0]);
        h.update(path.as_bytes());
        h.update(&[0]);
    }
    format!("{:032x}", h.digest128())
}

/// The options that decide how input `i`'s bytes become rows, in words: its dialect and its
/// table's columns.
fn input_settings(plan: &Plan, i: usize) -> String {
    let input = &plan.inputs[i];
    let t = &plan.tables[input.table];
    let cols: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    format!(
        "{:?}; {}({})",
        input.dialect,
        t.table.qualified,
        cols.join(",")
    )
}

/// The same for every input of the plan.
fn settings(plan: &Plan) -> String {
    (0..plan.inputs.len())
        .map(|i| input_settings(plan, i))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The ledger's record of each input file, as it is now.
fn file_records(plan: &Plan) -> Result<Vec<FileRecord>, Failure> {
    plan.inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let (InputSource::File(p), Some(id)) = (&input.source, &input.identity) else {
                return Err(Failure::Local("standard input has no ledger record".into()));
            };
            let fingerprint = fingerprint(p, input.size)
                .map_err(|e| Failure::Local(format!("cannot read {}: {e}", input.display)))?;
            Ok(FileRecord {
                path: id.path.to_string_lossy().into_owned(),
                table: plan.tables[input.table].table.qualified.clone(),
                table_id: plan.tables[input.table].table.id.clone(),
                size: id.size,
                modified_ns: i64::try_from(id.modified_ns).unwrap_or(i64::MAX),
                settings: input_settings(plan, i),
                fingerprint,
            })
        })
        .collect()
}

/// The job a run belongs to, as the streams need it: its id, and each input's index among
/// the job's files (`None` for an input this job does not load).
#[derive(Clone, Debug)]
pub struct JobRun {
    pub job: i64,
    pub files: Vec<Option<u32>>,
    /// What the ledger said before the load, for the summary (`resuming job 3: ...`).
    pub note: Option<String>,
    /// The job was resumed (rather than begun by this run).
    pub resumed: bool,
}

impl JobRun {
    /// The ledger row of a chunk this job loaded.
    pub fn record(&self, chunk: &Chunk, rows: u64) -> Option<ChunkRecord> {
        Some(ChunkRecord {
            file: self.files.get(chunk.input).copied().flatten()?,
            start: chunk.start,
            end: chunk.end,
            rows,
        })
    }
}

/// What the ledger decided.
pub enum Start {
    /// Load the plan (now without what is already in) as this job.
    Run(Plan, JobRun),
    /// Nothing is left to load; the message says why.
    Nothing(String),
}

/// A ledger call that failed, in the load's terms (`what` says what it was doing).
pub fn ledger_failure(what: &str, e: sluice_core::destination::DestinationError) -> Failure {
    match e.kind {
        ErrorKind::Usage => Failure::Usage(e.to_string()),
        ErrorKind::Connection => Failure::Connect(format!("{what}: {e}")),
        _ => crate::run::destination_failure(&e, format!("{what}: {e}")),
    }
}

/// Looks the load up in the ledger and decides what it loads. `replan` cuts the files again
/// with another chunk size (the one an interrupted job used).
pub fn start<D: Ledger>(
    dest: &D,
    plan: Plan,
    restart: bool,
    replan: &dyn Fn(u64) -> Result<Plan, Failure>,
) -> Result<Start, Failure> {
    let key = job_key(&plan);
    let jobs = dest
        .jobs(Some(&key))
        .map_err(|e| ledger_failure("reading the ledger", e))?;
    let unfinished = jobs
        .iter()
        .find(|j| j.state.resumable() || j.state == JobState::Running);
    if let Some(job) = unfinished {
        if restart {
            dest.end_job(job.id, JobState::Abandoned, Some("replaced by --restart"))
                .map_err(|e| ledger_failure("updating the ledger", e))?;
        } else {
            return resume(dest, plan, job, replan);
        }
    }
    let files = file_records(&plan)?;
    let loaded = if restart {
        vec![None; files.len()]
    } else {
        dest.loaded_by(&files)
            .map_err(|e| ledger_failure("reading the ledger", e))?
    };
    let skipped: Vec<usize> = (0..files.len()).filter(|&i| loaded[i].is_some()).collect();
    let mut note = None;
    if !skipped.is_empty() {
        let mut by: Vec<String> = skipped
            .iter()
            .filter_map(|&i| loaded[i].as_ref())
            .map(|(job, when)| format!("job {job}, finished {when}"))
            .collect();
        by.dedup();
        let mut names: Vec<&str> = skipped
            .iter()
            .take(5)
            .map(|&i| plan.inputs[i].display.as_str())
            .collect();
        let more = format!("and {} more", skipped.len().saturating_sub(5));
        if skipped.len() > 5 {
            names.push(&more);
        }
        let what = format!(
            "{} of {} file(s) were loaded by {} and have not changed since: {}",
            skipped.len(),
            files.len(),
            by.join("; "),
            names.join(", ")
        );
        if skipped.len() == files.len() {
            return Ok(Start::Nothing(format!(
                "nothing to load: {what}. `--restart` loads them again"
            )));
        }
        note = Some(format!("skipping {what} (`--restart` loads them again)"));
    }
    let mut plan = plan;
    plan.retain_chunks(|c| loaded[c.input].is_none());
    let mut job_files = Vec::new();
    let mut index = vec![None; files.len()];
    for (i, f) in files.into_iter().enumerate() {
        if loaded[i].is_none() {
            index[i] = Some(job_files.len() as u32);
            job_files.push(f);
        }
    }
    let spec = JobSpec {
        key,
        files: job_files,
        chunk_size: plan.chunk_size,
        settings: settings(&plan),
        chunks_total: plan.chunks.len() as u64,
        bytes_total: plan.chunks.iter().map(|c| c.weight(&plan.inputs)).sum(),
    };
    let job = dest
        .begin_job(&spec)
        .map_err(|e| ledger_failure("recording the job in the ledger", e))?;
    Ok(Start::Run(
        plan,
        JobRun {
            job,
            files: index,
            note,
            resumed: false,
        },
    ))
}

/// Resumes `job`: the same files, unchanged, cut the same way, less what it committed.
fn resume<D: Ledger>(
    dest: &D,
    plan: Plan,
    job: &sluice_core::ledger::Job,
    replan: &dyn Fn(u64) -> Result<Plan, Failure>,
) -> Result<Start, Failure> {
    let id = job.id;
    let read = |e| ledger_failure("reading the ledger", e);
    let recorded = dest.job_files(id).map_err(read)?;
    let plan = if plan.chunk_size == job.chunk_size {
        plan
    } else {
        replan(job.chunk_size)?
    };
    let now = file_records(&plan)?;
    let refuse = |why: String| {
        Failure::Usage(format!(
            "cannot resume job {id} (started {}, {} of {} chunks committed): {why}. Restore it \
             and run the same command again, or give --restart to load every file again as a \
             new job (the rows job {id} committed stay in the tables)",
            job.started, job.chunks_done, job.chunks_total
        ))
    };
    // The job's files, by path: every input the job loads must be there, unchanged.
    let mut files = vec![None; plan.inputs.len()];
    for (i, f) in now.iter().enumerate() {
        let Some(n) = recorded
            .iter()
            .position(|r| r.path == f.path && r.table == f.table && r.table_id == f.table_id)
        else {
            // A file a finished job had loaded when this job began: still not this job's.
            continue;
        };
        if let Some(what) = recorded[n].changes(f) {
            return Err(refuse(format!(
                "{} changed since the job began: {what}",
                plan.inputs[i].display
            )));
        }
        files[i] = Some(n as u32);
    }
    if settings(&plan) != job.settings {
        return Err(refuse(
            "the options that decide how files become rows (format, delimiter, quote, null, \
             header, columns) differ from the interrupted run's"
                .into(),
        ));
    }
    let done = dest.job_chunks(id).map_err(read)?;
    let mut plan = plan;
    let mut mismatch = None;
    plan.retain_chunks(|c| {
        let Some(file) = files[c.input] else {
            return false;
        };
        match done.iter().find(|d| d.file == file && d.start == c.start) {
            Some(d) if d.end == c.end => false,
            Some(_) => {
                mismatch.get_or_insert(c.input);
                true
            }
            None => true,
        }
    });
    if let Some(i) = mismatch {
        return Err(refuse(format!(
            "{} is cut into chunks differently than when the job began",
            plan.inputs[i].display
        )));
    }
    dest.resume_job(id)
        .map_err(|e| ledger_failure("resuming the job", e))?;
    let rows: u64 = done.iter().map(|d| d.rows).sum();
    let note = format!(
        "resuming job {id}: {} of {} chunks already loaded ({rows} rows), {} to go",
        done.len(),
        job.chunks_total,
        plan.chunks.len()
    );
    Ok(Start::Run(
        plan,
        JobRun {
            job: id,
            files,
            note: Some(note),
            resumed: true,
        },
    ))
}
