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
//!
//! A new job is recorded only if no run of the same command recorded one since this run looked
//! (the destination checks that under a lock on the job's key): two runs started at once would
//! otherwise both find nothing and both load every row. The later one looks again.

use crate::events::{Event, Host};
use crate::failure::Failure;
use crate::plan::{Chunk, InputSource, Plan};
use sluice_core::destination::{ErrorKind, Ledger};
use sluice_core::dialect::Dialect;
use sluice_core::ledger::{ChunkRecord, FileRecord, JobSpec, JobState, LoadedBy, PlacementCheck};
use std::collections::HashMap;
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

/// The same digest as [`fingerprint`], from bytes already read that are the whole file (no
/// larger than the blocks `fingerprint` would read): a small file is not opened again.
pub fn fingerprint_whole(bytes: &[u8]) -> String {
    debug_assert!(bytes.len() as u64 <= BLOCK * BLOCKS);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
    format!("{:032x}", h.digest128())
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

/// The settings the files' records use ([`file_records`]), each once, in the order of first
/// use: the job's record for people to read. Resuming compares each file's own settings
/// (`job_files`), so 100,000 files with one dialect make one line here, not 100,000.
pub(crate) fn settings(files: &[FileRecord]) -> String {
    let mut seen = std::collections::HashSet::new();
    files
        .iter()
        .map(|f| f.settings.as_str())
        .filter(|s| seen.insert(*s))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Each input's settings ([`input_settings`]), formatted once per table and dialect:
/// 100,000 files of one dialect are formatted once, not 100,000 times.
fn each_input_settings(plan: &Plan) -> Vec<String> {
    let mut known: HashMap<(usize, &Dialect), String> = Default::default();
    (0..plan.inputs.len())
        .map(|i| {
            let input = &plan.inputs[i];
            known
                .entry((input.table, &input.dialect))
                .or_insert_with(|| input_settings(plan, i))
                .clone()
        })
        .collect()
}

/// The ledger's record of each input file, as it is now.
pub(crate) fn file_records(plan: &Plan) -> Result<Vec<FileRecord>, Failure> {
    plan.inputs
        .iter()
        .zip(each_input_settings(plan))
        .map(|(input, settings)| {
            let (InputSource::File(p), Some(id)) = (&input.source, &input.identity) else {
                return Err(Failure::Local("standard input has no ledger record".into()));
            };
            let fingerprint = match &input.fingerprint {
                Some(f) => f.clone(),
                None => fingerprint(p, input.size)
                    .map_err(|e| Failure::Local(format!("cannot read {}: {e}", input.display)))?,
            };
            Ok(FileRecord {
                path: id.path.to_string_lossy().into_owned(),
                table: plan.tables[input.table].table.qualified.clone(),
                table_id: plan.tables[input.table].table.id.clone(),
                size: id.size,
                modified_ns: i64::try_from(id.modified_ns).unwrap_or(i64::MAX),
                settings,
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
    /// Files a finished job loaded that this run leaves out, and why.
    pub skipped: Vec<Skipped>,
    /// The worker's place, in a job that several workers load together.
    pub crew: Option<Box<crate::crew::CrewRun>>,
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

/// A file a finished job loaded, left out of this run, and why (for the report).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skipped {
    pub file: String,
    /// The finished job that loaded it.
    pub job: i64,
    pub reason: String,
}

/// Whether a finished job's rows of a file can still be in its tables.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Standing {
    /// As far as can be told cheaply (a partial delete cannot be): leave the file out.
    Holds,
    /// The rows are gone (the relation is empty, or gone): load the file again.
    Gone(String),
    /// The relation changed in a way that does not tell whether the rows are there: leave
    /// the file out, and say so.
    Changed(String),
}

/// One placement's standing, for a file of `rows` rows.
fn placement_standing(c: &PlacementCheck, rows: u64) -> Standing {
    let Some(now) = &c.now else {
        let rel = &c.relation;
        return Standing::Gone(format!("{rel} no longer exists"));
    };
    let rel = &now.name;
    let rows_now = match now.has_rows {
        Some(_) => "has rows",
        None => "the role may not read it, so whether it has rows cannot be told",
    };
    if now.id != c.then.id {
        return match now.has_rows {
            Some(false) => Standing::Gone(format!("{rel} was dropped and created again")),
            _ => Standing::Changed(format!(
                "{rel} is not the table it loaded (it was dropped and created again, or restored \
                 from a backup) and {rows_now}"
            )),
        };
    }
    if now.has_rows == Some(false) && rows > 0 {
        return Standing::Gone(format!("{rel} is empty"));
    }
    match (&c.then.generation, &now.generation) {
        (Some(then), Some(now)) if then != now => Standing::Changed(format!(
            "{rel} was rewritten since (its storage was replaced: emptied and filled again, \
             compacted, reordered, or altered) and {rows_now}"
        )),
        _ => Standing::Holds,
    }
}

/// A file's standing over all of its placements: gone only when every relation it went to
/// lost its rows (loading it again then cannot double any row).
fn file_standing(checks: &[&PlacementCheck], rows: u64) -> Standing {
    let each: Vec<Standing> = checks.iter().map(|c| placement_standing(c, rows)).collect();
    if let Some(changed) = each.iter().find(|s| matches!(s, Standing::Changed(_))) {
        return changed.clone();
    }
    let gone: Vec<&Standing> = each
        .iter()
        .filter(|s| matches!(s, Standing::Gone(_)))
        .collect();
    match (gone.first(), gone.len() == each.len()) {
        (Some(g), true) => (*g).clone(),
        (Some(Standing::Gone(why)), false) => Standing::Changed(format!(
            "{why}, but other tables it loaded into still have rows"
        )),
        _ => Standing::Holds,
    }
}

/// What a rerun does with the files finished jobs loaded.
#[derive(Default)]
struct Rerun {
    skipped: Vec<Skipped>,
    /// What it decided, in words, one sentence per (job, reason).
    notes: Vec<String>,
}

/// Decides, for each input a finished job loaded (`loaded`), whether that job's rows can
/// still be there: when they are gone, the entry is cleared (the file loads again). The rest
/// are left out, each with its reason.
fn recheck<D: Ledger>(
    dest: &D,
    plan: &Plan,
    loaded: &mut [Option<LoadedBy>],
) -> Result<Rerun, Failure> {
    let read = |e| ledger_failure("reading the ledger", e);
    let mut jobs: Vec<i64> = loaded.iter().flatten().map(|l| l.job).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let mut rerun = Rerun::default();
    for job in jobs {
        let mine: Vec<usize> = (0..loaded.len())
            .filter(|&i| loaded[i].as_ref().is_some_and(|l| l.job == job))
            .collect();
        let numbers: Vec<u32> = mine
            .iter()
            .filter_map(|&i| loaded[i].as_ref().map(|l| l.file))
            .collect();
        let checks = dest.placements(job, &numbers).map_err(read)?;
        // Each file's checks and rows gathered once: a job of 100,000 files looked up file by
        // file in lists of 100,000 took 50 s.
        let mut checks_of: HashMap<u32, Vec<&PlacementCheck>> = HashMap::new();
        for c in &checks {
            checks_of.entry(c.file).or_default().push(c);
        }
        let mut rows_of: HashMap<u32, u64> = HashMap::new();
        for c in dest.job_chunks(job).map_err(read)? {
            *rows_of.entry(c.file).or_default() += c.rows;
        }
        let finished = loaded[mine[0]].as_ref().map(|l| l.finished.clone());
        let finished = finished.unwrap_or_default();
        // (standing, files, rows) in the order first met.
        let mut groups: Vec<(Standing, Vec<usize>, u64)> = Vec::new();
        for &i in &mine {
            let Some(by) = loaded[i].clone() else {
                continue;
            };
            let own = checks_of.get(&by.file).map_or(&[][..], Vec::as_slice);
            let rows = rows_of.get(&by.file).copied().unwrap_or(0);
            let standing = file_standing(own, rows);
            if let Standing::Gone(_) = standing {
                loaded[i] = None;
            }
            match groups.iter_mut().find(|g| g.0 == standing) {
                Some(g) => {
                    g.1.push(i);
                    g.2 += rows;
                }
                None => groups.push((standing, vec![i], rows)),
            }
        }
        for (standing, files, rows) in groups {
            let by = Decided {
                job,
                finished: &finished,
                rows,
                files: files.len(),
            };
            let (note, reason) = by.words(&standing, &file_names(plan, &files));
            rerun.notes.push(note);
            if matches!(standing, Standing::Gone(_)) {
                continue;
            }
            rerun.skipped.extend(files.iter().map(|&i| Skipped {
                file: plan.inputs[i].display.clone(),
                job,
                reason: reason.clone(),
            }));
        }
    }
    Ok(rerun)
}

/// A group of files that finished job `job` loaded, with one standing: for its words.
struct Decided<'a> {
    job: i64,
    finished: &'a str,
    /// The group's rows, as the job recorded them.
    rows: u64,
    files: usize,
}

impl Decided<'_> {
    /// What the rerun says of the group (`names` its files), and the reason a skipped file
    /// gets in the report.
    fn words(&self, standing: &Standing, names: &str) -> (String, String) {
        let Decided {
            job,
            finished,
            rows,
            files: n,
        } = *self;
        match standing {
            Standing::Holds => (
                format!(
                    "skipping {n} file(s) job {job} loaded (finished {finished}); they have not \
                     changed since: {names} (`--restart` loads them again)"
                ),
                format!("loaded by job {job} (finished {finished}), not changed since"),
            ),
            Standing::Gone(why) => (
                format!(
                    "{why}, although job {job} loaded {} rows into it (finished {finished}): \
                     loading its {n} file(s) again: {names}",
                    crate::units::thousands(rows)
                ),
                String::new(),
            ),
            Standing::Changed(why) => {
                let why = format!(
                    "{why}: whether the rows job {job} loaded (finished {finished}) are still \
                     there cannot be told"
                );
                (
                    format!("skipping {n} file(s): {why}; `--restart` loads them again: {names}"),
                    why,
                )
            }
        }
    }
}

/// Up to five inputs' names, and how many more.
fn file_names(plan: &Plan, inputs: &[usize]) -> String {
    let mut names: Vec<String> = inputs
        .iter()
        .take(5)
        .map(|&i| plan.inputs[i].display.clone())
        .collect();
    if inputs.len() > 5 {
        names.push(format!("and {} more", inputs.len() - 5));
    }
    names.join(", ")
}

/// What the ledger decided.
pub enum Start {
    /// Load the plan (now without what is already in) as this job.
    Run(Plan, JobRun),
    /// Nothing is left to load; the message says why (and which files were left out).
    Nothing(String, Vec<Skipped>),
}

/// A ledger call that failed, in the load's terms (`what` says what it was doing).
pub fn ledger_failure(what: &str, e: sluice_core::destination::DestinationError) -> Failure {
    match e.kind {
        ErrorKind::Usage => Failure::Usage(e.to_string()),
        ErrorKind::Connection => Failure::Connect(format!("{what}: {e}")),
        _ => crate::run::destination_failure(&e, format!("{what}: {e}")),
    }
}

/// How many times a load looks the job up before it gives up on recording one: each look but
/// the first follows a run of the same command that recorded its job first.
const LOOKS: u32 = 3;

/// Looks the load up in the ledger and decides what it loads. `replan` cuts the files again
/// with another chunk size (the one an interrupted job used).
///
/// A run of the same command that started at the same moment may record its job between this
/// run's look and its own record: the destination refuses the record then
/// (`ErrorKind::Transient`), and the look is taken again, which finds that run's job (running:
/// refused; finished: nothing of what it loaded is loaded again). Likewise when the job a look
/// found unfinished finishes before this run holds it.
pub fn start<D: Ledger>(
    dest: &D,
    host: &dyn Host,
    plan: Plan,
    restart: bool,
    replan: &dyn Fn(u64) -> Result<Plan, Failure>,
) -> Result<Start, Failure> {
    let key = job_key(&plan);
    let mut settled: Vec<String> = Vec::new();
    let mut look = 0;
    loop {
        look += 1;
        // `--restart` replaces what the first look found; what a later look finds is another
        // run's of the same command (its own `--restart`, say), not this one's to replace.
        let restart = restart && look == 1;
        let jobs = dest
            .jobs(Some(&key))
            .map_err(|e| ledger_failure("reading the ledger", e))?;
        let unfinished = jobs
            .iter()
            .find(|j| j.state.resumable() || j.state == JobState::Running);
        if let Some(job) = unfinished {
            match settle_unfinished(dest, job.id, look < LOOKS)? {
                Held::Again => continue,
                Held::Settled(what) => settled.extend(what),
            }
            if !restart {
                let settled = (!settled.is_empty()).then(|| settled.join("\n"));
                return resume(dest, plan, job, settled, replan);
            }
            dest.end_job(job.id, JobState::Abandoned, Some("replaced by --restart"))
                .map_err(|e| ledger_failure("updating the ledger", e))?;
        }
        let newest = jobs.iter().map(|j| j.id).max();
        let new = new_job(dest, &plan, &key, restart, newest)?;
        match record_new(dest, host, new, &settled, look < LOOKS)? {
            Recorded::Again => continue,
            Recorded::Nothing(why, skipped) => return Ok(Start::Nothing(why, skipped)),
            Recorded::Job(run, loaded) => {
                let mut plan = plan;
                plan.retain_chunks(|c| unloaded(&loaded, c));
                return Ok(Start::Run(plan, run));
            }
        }
    }
}

/// An unfinished job, held for this run.
enum Held {
    /// It finished since this run looked (its run ended while this one waited): look again.
    Again,
    /// Held, with what finishing its last run's leftovers did, in words.
    Settled(Option<String>),
}

/// Takes an unfinished job's lock (another process may run it now), then finishes what its
/// last run left prepared: a commit it decided is finished, whatever this run does next.
/// `again`: whether a job that finished meanwhile sends this run to look again, or fails it.
fn settle_unfinished<D: Ledger>(dest: &D, job: i64, again: bool) -> Result<Held, Failure> {
    let ended = match dest.resume_job(job) {
        Ok(ended) => ended,
        Err(e) if e.kind == ErrorKind::Transient && again => return Ok(Held::Again),
        Err(e) => return Err(ledger_failure("resuming the job", e)),
    };
    let prepared = settle_prepared(dest, job)?;
    Ok(Held::Settled(match (ended, prepared) {
        (Some(ended), Some(prepared)) => Some(format!("{ended}\n{prepared}")),
        (ended, prepared) => ended.or(prepared),
    }))
}

/// What recording a new job came to.
enum Recorded {
    /// A run of the same command recorded its job since this one looked: look again.
    Again,
    /// Every file is in already: why, and the files left out.
    Nothing(String, Vec<Skipped>),
    /// The job, and each input's finished job (the inputs it leaves out).
    Job(JobRun, Vec<Option<LoadedBy>>),
}

/// Records the new job `new` describes (with `settled`, what this run finished of earlier
/// ones, in its note), unless there is nothing to load. `again`: whether a run of the same
/// command that recorded its job first sends this one to look again, or fails it.
fn record_new<D: Ledger>(
    dest: &D,
    host: &dyn Host,
    new: NewJob,
    settled: &[String],
    again: bool,
) -> Result<Recorded, Failure> {
    let NewJob {
        spec,
        loaded,
        rerun,
    } = new;
    let notes: Vec<&str> = settled
        .iter()
        .chain(&rerun.notes)
        .map(String::as_str)
        .collect();
    // One decision a line: a load of many tables has as many.
    let note = (!notes.is_empty()).then(|| notes.join("\n"));
    let Some(spec) = spec else {
        return Ok(Recorded::Nothing(
            format!("nothing to load:\n{}", note.unwrap_or_default()),
            rerun.skipped,
        ));
    };
    host.event(Event::Point("looked"));
    let job = match dest.begin_job(&spec) {
        Ok(job) => job,
        Err(e) if e.kind == ErrorKind::Transient && again => return Ok(Recorded::Again),
        Err(e) => return Err(ledger_failure("recording the job in the ledger", e)),
    };
    let run = JobRun {
        job,
        files: file_index(&loaded),
        note,
        resumed: false,
        skipped: rerun.skipped,
        crew: None,
    };
    Ok(Recorded::Job(run, loaded))
}

/// Whether chunk `c`'s input is one no finished job loaded (`loaded`, by input).
fn unloaded(loaded: &[Option<LoadedBy>], c: &Chunk) -> bool {
    loaded[c.input].is_none()
}

/// What a new job records ([`new_job`]).
struct NewJob {
    /// `None` when a finished job loaded every file.
    spec: Option<JobSpec>,
    /// Each input's finished job, if one loaded it as it is now.
    loaded: Vec<Option<LoadedBy>>,
    rerun: Rerun,
}

/// What a new job of `plan` records: the files no finished job loaded as they are now
/// (every file with `restart`), and the chunks and bytes of those files.
fn new_job<D: Ledger>(
    dest: &D,
    plan: &Plan,
    key: &str,
    restart: bool,
    newest: Option<i64>,
) -> Result<NewJob, Failure> {
    let files = file_records(plan)?;
    let mut loaded = if restart {
        vec![None; files.len()]
    } else {
        dest.loaded_by(&files)
            .map_err(|e| ledger_failure("reading the ledger", e))?
    };
    let rerun = recheck(dest, plan, &mut loaded)?;
    if !rerun.skipped.is_empty() && rerun.skipped.len() == files.len() {
        return Ok(NewJob {
            spec: None,
            loaded,
            rerun,
        });
    }
    let left = |c: &Chunk| unloaded(&loaded, c);
    let settings = settings(&files);
    let spec = JobSpec {
        key: key.to_string(),
        newest,
        files: files
            .into_iter()
            .zip(&loaded)
            .filter(|(_, l)| l.is_none())
            .map(|(f, _)| f)
            .collect(),
        chunk_size: plan.chunk_size,
        settings,
        chunks_total: plan.chunks.iter().filter(|c| left(c)).count() as u64,
        bytes_total: plan
            .chunks
            .iter()
            .filter(|c| left(c))
            .map(|c| c.weight(&plan.inputs))
            .sum(),
    };
    Ok(NewJob {
        spec: Some(spec),
        loaded,
        rerun,
    })
}

/// Each input's place among the job's files (`None`: a file a finished job loaded, left out).
fn file_index(loaded: &[Option<LoadedBy>]) -> Vec<Option<u32>> {
    let mut next = 0;
    loaded
        .iter()
        .map(|l| {
            l.is_none().then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// The prefix of every prepared transaction of job `job`'s runs.
pub fn prepared_prefix_of(job: i64) -> String {
    format!("sluice_{job}_")
}

/// Finishes what an earlier run of `job` left prepared: commits the transactions it decided to
/// commit (the decision is in the ledger) and rolls back the others. Returns what it did, in
/// words, when it did anything.
fn settle_prepared<D: Ledger>(dest: &D, job: i64) -> Result<Option<String>, Failure> {
    let read = |e| ledger_failure("reading the job's prepared transactions", e);
    let left = dest.prepared(&prepared_prefix_of(job)).map_err(read)?;
    if left.is_empty() {
        return Ok(None);
    }
    let decided = dest.decided(job).map_err(read)?;
    let committed = finish_as_decided(dest, &left, &decided)?;
    let rolled_back = left.len() - committed;
    Ok(Some(format!(
        "job {job}'s last run stopped during its commit: committed {committed} of its prepared \
         transaction(s), as it had decided, and rolled back {rolled_back} it had not"
    )))
}

/// Forgets job `job` (one not running), first finishing what its last run left prepared (the
/// commits it decided, committed; the rest rolled back): a forgotten job's commit is finished
/// by no one, so none of it may stay prepared, holding its locks. Returns the staging tables
/// of dead loads the destination dropped with it, and what it had to end of the job's last
/// run on the server, in words.
pub fn forget<D: Ledger>(dest: &D, job: i64) -> Result<(Vec<String>, Option<String>), Failure> {
    // Under the job's lock (refused while a process runs it), so nothing is finished under a
    // live process; and finished before the job's records go, since a prepared transaction
    // holds the ledger rows it wrote (a removal would wait on them where reads lock).
    let ended = dest
        .hold_job(job)
        .map_err(|e| ledger_failure("taking the job's lock", e))?;
    let decided = dest
        .decided(job)
        .map_err(|e| ledger_failure("reading the job's commit decision", e))?;
    let left = dest
        .prepared(&prepared_prefix_of(job))
        .map_err(|e| ledger_failure("reading the job's prepared transactions", e))?;
    finish_as_decided(dest, &left, &decided)?;
    let dropped = dest
        .forget_job(job)
        .map_err(|e| ledger_failure("forgetting the job", e))?;
    Ok((dropped, ended))
}

/// Finishes the prepared transactions `left`: those in `decided` committed, the others rolled
/// back. Returns how many it committed.
fn finish_as_decided<D: Ledger>(
    dest: &D,
    left: &[String],
    decided: &[String],
) -> Result<usize, Failure> {
    let mut committed = 0;
    for id in left {
        let commit = decided.contains(id);
        dest.finish_prepared(id, commit)
            .map_err(|e| ledger_failure("finishing a prepared transaction", e))?;
        committed += usize::from(commit);
    }
    Ok(committed)
}

/// What resuming `job` keeps, in words: the chunks committed (`done`), those in staging tables
/// an earlier run finished (published by this run, not loaded again), what is left of the
/// `left` chunks still in the plan, and when nothing was kept, why and what would have kept it.
fn resume_note(job: &sluice_core::ledger::Job, done: &[ChunkRecord], left: u64) -> String {
    let rows: u64 = done.iter().map(|d| d.rows).sum();
    let staged = job.staged_chunks.min(left);
    let mut note = format!(
        "resuming job {}: {} of {} chunks already loaded ({} rows)",
        job.id,
        done.len(),
        job.chunks_total,
        crate::units::thousands(rows)
    );
    if staged > 0 {
        note.push_str(&format!(
            ", {staged} more ({} rows) in staging tables an earlier run finished, which this \
             run publishes without loading them again",
            crate::units::thousands(job.staged_rows)
        ));
    }
    note.push_str(&format!(", {} to go", left - staged));
    if done.is_empty() && staged == 0 {
        note.push_str(
            ". Nothing of the interrupted run was kept: its streams commit only at the end, all \
             or nothing (a table partitioned by ranges, loaded with the stage strategy, keeps \
             each partition it finished across an interruption)",
        );
    }
    note
}

/// Resumes `job`: the same files, unchanged, cut the same way, less what it committed.
/// `settled` says what finishing the last run's prepared transactions did, if anything. The
/// caller holds the job's lock; a refusal gives it back, the job left failed (and resumable).
fn resume<D: Ledger>(
    dest: &D,
    plan: Plan,
    job: &sluice_core::ledger::Job,
    settled: Option<String>,
    replan: &dyn Fn(u64) -> Result<Plan, Failure>,
) -> Result<Start, Failure> {
    let id = job.id;
    let resumed = resume_as_planned(dest, plan, job, settled, replan);
    if let Err(e) = &resumed {
        let _ = dest.end_job(id, JobState::Failed, Some(&e.to_string()));
    }
    resumed
}

/// [`resume`]'s checks and plan.
fn resume_as_planned<D: Ledger>(
    dest: &D,
    plan: Plan,
    job: &sluice_core::ledger::Job,
    settled: Option<String>,
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
    let by_path: std::collections::HashMap<(&str, &str, &str), usize> = recorded
        .iter()
        .enumerate()
        .map(|(n, r)| ((r.path.as_str(), r.table.as_str(), r.table_id.as_str()), n))
        .collect();
    for (i, f) in now.iter().enumerate() {
        let Some(&n) = by_path.get(&(f.path.as_str(), f.table.as_str(), f.table_id.as_str()))
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
        if recorded[n].settings != f.settings {
            return Err(refuse(
                "the options that decide how files become rows (format, delimiter, quote, \
                 null, header, columns) differ from the interrupted run's"
                    .into(),
            ));
        }
        files[i] = Some(n as u32);
    }
    let done = dest.job_chunks(id).map_err(read)?;
    let done_at: std::collections::HashMap<(u32, u64), Option<u64>> =
        done.iter().map(|d| ((d.file, d.start), d.end)).collect();
    let mut plan = plan;
    let mut mismatch = None;
    plan.retain_chunks(|c| {
        let Some(file) = files[c.input] else {
            return false;
        };
        match done_at.get(&(file, c.start)) {
            Some(&end) if end == c.end => false,
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
    let mut note = resume_note(job, &done, plan.chunks.len() as u64);
    if let Some(s) = settled {
        note = format!("{s}; {note}");
    }
    Ok(Start::Run(
        plan,
        JobRun {
            job: id,
            files,
            note: Some(note),
            resumed: true,
            skipped: Vec::new(),
            crew: None,
        },
    ))
}
