//! A whole load on a destination already open: check the inputs while the tables are
//! described and the ledger opened, plan, ask the ledger, choose the strategy, run, and
//! report. Nothing here knows which database it is: a destination that can stage is loaded
//! through [`load_staging`], any other through [`load`], and both share every step.

use crate::chunk::Counters;
use crate::events::{Event, Host, Progress};
use crate::failure::{Failure, ServerKind};
use crate::ledger::{self, JobRun};
use crate::plan::{self, table_from_file_name, Plan};
use crate::rejects::{self, Rejects};
use crate::report::{self, Report};
use crate::run::{execute, RunOptions, RunOutcome};
use crate::spec::{Jobs, LoadSpec, PrepareChoice, StrategyChoice};
use crate::stage::{Mode, Stage, StageOptions, StagePlanner, Staged};
use crate::strategy::{self, Direct, Strategy};
use sluice_core::destination::{
    Destination, DestinationError, ErrorKind, Ledger, LoadTable, Staging, TableInfo,
};
use sluice_core::ledger::{JobState, Placement, WorkerPart};
use std::sync::Arc;

/// Loads `spec` into a destination that cannot stage: every input goes direct.
pub fn load<D: Destination + Ledger>(
    spec: &LoadSpec,
    dest: &mut D,
    host: &dyn Host,
) -> Result<Report, Failure> {
    Load { spec, host }.run(dest, None)
}

/// Loads `spec` into a destination that can stage: `--strategy` decides where it does.
pub fn load_staging<D: Destination + Ledger + Staging>(
    spec: &LoadSpec,
    dest: &mut D,
    host: &dyn Host,
) -> Result<Report, Failure> {
    Load { spec, host }.run(dest, Some(&Staged))
}

/// The table each input goes to, once every input is known readable. Call it before anything
/// that could start a server (a mistyped file name must never start one); a load whose inputs
/// were not checked checks them itself, while it describes the tables.
pub fn check_inputs(spec: &LoadSpec) -> Result<Vec<String>, Failure> {
    let file_tables = input_tables(spec)?;
    let inputs = plan::plan_inputs(spec)?;
    *spec
        .checked
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(inputs);
    Ok(file_tables)
}

/// The table each input goes to. The files themselves are opened, and checked as
/// `check_inputs` checks them, when the load plans, unless `check_inputs` did already: once per
/// file, which matters for 100,000 small ones.
fn input_tables(spec: &LoadSpec) -> Result<Vec<String>, Failure> {
    if spec.files.iter().filter(|f| f.as_str() == "-").count() > 1 {
        return Err(Failure::Usage(
            "standard input (`-`) can be given only once".into(),
        ));
    }
    if spec.files.iter().any(|f| f == "-") && spec.format.is_none() {
        return Err(Failure::Usage(
            "reading standard input needs --format tbl|csv|text (and --table)".into(),
        ));
    }
    spec.files
        .iter()
        .map(|f| match (&spec.table, f.as_str()) {
            (Some(t), _) => Ok(t.clone()),
            (None, "-") => Err(Failure::Usage(
                "reading standard input needs --table (and --format)".into(),
            )),
            (None, path) => table_from_file_name(path).ok_or_else(|| {
                Failure::Usage(format!("cannot name a table after `{path}`: give --table"))
            }),
        })
        .collect()
}

/// Where the job's files' rows went: each input the job loads, by its index among the job's
/// files, with its relation.
fn placements(job: &JobRun, relations: &[String]) -> Vec<Placement> {
    job.files
        .iter()
        .zip(relations)
        .filter_map(|(file, relation)| {
            Some(Placement {
                file: (*file)?,
                relation: relation.clone(),
            })
        })
        .collect()
}

/// The streams of a load that stages nothing, as the plan allows them (chunks, free slots).
fn direct_jobs<D: Destination>(spec: &LoadSpec, dest: &D, plan: &Plan) -> usize {
    plan::choose_jobs(
        spec.jobs,
        plan.chunks.len(),
        dest.free_slots(),
        (1, 0),
        false,
    )
    .0
}

/// Whether the server can hold `jobs` prepared transactions at once, or why not.
fn prepare_slots<D: Destination>(dest: &D, jobs: usize) -> Result<(), String> {
    dest.capabilities()
        .prepare
        .and_then(|slots| match slots as usize >= jobs {
            true => Ok(()),
            false => Err(format!(
                "the server can prepare {slots} transaction(s) at once, and this load has {jobs} \
                 streams"
            )),
        })
}

/// `--strategy stage` in a job of several workers, refused before the worker joins.
fn crew_cannot_stage(why: &str) -> Failure {
    Failure::Usage(format!(
        "--strategy stage in a job of several workers (--workers): {why}; give --strategy \
         direct or auto (which load a job of several workers directly)"
    ))
}

fn crew_cannot_prepare(why: &str) -> Failure {
    Failure::Usage(format!(
        "--workers: {why}. A job of several workers keeps every worker's rows invisible until \
         all are done through prepared transactions: set the server's \
         max_prepared_transactions to at least the workers times --jobs (a restart), or give \
         --prepare off, and each worker commits its own rows when it finishes (visible worker \
         by worker; each chunk still loaded exactly once)"
    ))
}

fn prepare_on_refused(why: &str) -> Failure {
    Failure::Usage(format!(
        "--prepare on: {why}; give --prepare off, or fewer --jobs"
    ))
}

/// The ledger as a load found it while its inputs were checked.
enum EarlyLedger {
    /// This load keeps none ([`keeps_ledger`]).
    NotKept,
    /// Made, not yet committed ([`Ledger::hold_ledger`]).
    Held,
    /// Opened and committed, or failed to be: said where opening it would be.
    Opened(Result<(), DestinationError>),
    /// Opened once the plan holds: the inputs were checked before the load, the check ended
    /// before the description, or the destination holds nothing open (it cannot, or the
    /// ledger was there).
    Later,
}

impl EarlyLedger {
    /// A held ledger's transaction ended: committed (`keep`) or rolled back, and how that went;
    /// any other as it was.
    fn settled<D: Ledger>(self, dest: &D, keep: bool) -> EarlyLedger {
        match self {
            EarlyLedger::Held => EarlyLedger::Opened(dest.settle_ledger(keep)),
            other => other,
        }
    }
}

/// The `--columns` list, and each table the inputs name as the destination described it.
type Ready = (Option<Vec<String>>, Vec<(String, TableInfo)>);

/// Whether a load keeps a ledger: not a dry run, and not one of standard input, which is read
/// once and cannot be resumed.
fn keeps_ledger(spec: &LoadSpec) -> bool {
    !spec.dry_run && !spec.files.iter().any(|f| f == "-")
}

/// The ledger opened while the inputs are still checked, where the destination can hold it.
fn hold_ledger<D: Ledger>(dest: &D) -> EarlyLedger {
    match dest.hold_ledger() {
        Ok(true) => EarlyLedger::Held,
        Ok(false) => EarlyLedger::Later,
        Err(e) => EarlyLedger::Opened(Err(e)),
    }
}

/// How long a ledger made while the inputs are checked waits for the check at most before it
/// is committed: its creation lock keeps other loads of the database from opening it
/// meanwhile. A check that takes longer (a million files on a slow disk) finds the ledger
/// committed, and if it fails, leaves it made, as a load that failed after the plan would.
const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the thread ends within `bound` (polled: a scoped thread has no timed join).
fn finishes_within<T>(
    thread: &std::thread::ScopedJoinHandle<'_, T>,
    bound: std::time::Duration,
) -> bool {
    let deadline = std::time::Instant::now() + bound;
    while !thread.is_finished() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// One load's request and its listener.
struct Load<'a> {
    spec: &'a LoadSpec,
    host: &'a dyn Host,
}

impl Load<'_> {
    fn run<D: Destination + Ledger>(
        &self,
        dest: &mut D,
        stager: Option<&dyn StagePlanner<D>>,
    ) -> Result<Report, Failure> {
        let spec = self.spec;
        let file_tables = input_tables(spec)?;
        let ((columns, described), ledger) = self.ready_while_checking(dest, &file_tables)?;
        let plan = match self.plan_tables(dest, &file_tables, &described, columns.clone()) {
            Ok(plan) => plan,
            Err(f) => {
                // What the ledger's open made stays unmade: the fixed command makes it.
                let _ = ledger.settled(&*dest, false);
                return Err(f);
            }
        };
        // Settled before anything else asks the server (the streams' connections open next).
        let ledger = ledger.settled(&*dest, true);
        self.open_ahead(&*dest, stager, &plan);
        // The ledger: resume an unfinished job, leave out what a finished one loaded.
        let replan = |size: u64| {
            let mut again = spec.clone();
            again.chunk_size = Some(size);
            plan::build(&again, &file_tables, &described, columns.clone())
        };
        let crew = spec.crew.as_ref().filter(|_| !spec.dry_run);
        let keeps = match ledger {
            EarlyLedger::NotKept => false,
            // Settled once the plan held, above; were it not, here.
            EarlyLedger::Held => self.ledger_opened(dest.settle_ledger(true))?,
            EarlyLedger::Opened(opened) => self.ledger_opened(opened)?,
            EarlyLedger::Later => self.ledger_opened(dest.open_ledger())?,
        };
        if let (true, Some(_)) = (keeps, crew) {
            self.refuse_before_joining(&*dest, stager.is_some(), &plan)?;
        }
        let (plan, job) = match (keeps, crew) {
            (false, Some(c)) => return Err(no_ledger_for_a_crew(c)),
            (true, Some(c)) => match crate::crew::join(&*dest, plan, c, &replan)? {
                ledger::Start::Run(plan, job) => (plan, Some(job)),
                ledger::Start::Nothing(why, skipped) => {
                    return Ok(self.nothing_to_load(&*dest, why, skipped))
                }
            },
            (false, None) => (plan, None),
            (true, None) => match ledger::start(&*dest, self.host, plan, spec.restart, &replan)? {
                ledger::Start::Run(plan, job) => (plan, Some(job)),
                ledger::Start::Nothing(why, skipped) => {
                    return Ok(self.nothing_to_load(&*dest, why, skipped))
                }
            },
        };
        self.run_job(dest, stager, plan, job)
    }

    /// Everything before the plan that asks the destination (whether it can be written, the
    /// `--columns` list in its identifiers, the tables' description, the ledger's open), done
    /// while the inputs are checked (opened and their first bytes read: for 5,000 small files,
    /// as long as the description and a first load's making of the ledger), unless they were
    /// checked before the load. A failed check is said first, as it would be had the inputs
    /// been checked before anything connected, and what the ledger's open made is rolled back.
    fn ready_while_checking<D: Destination + Ledger>(
        &self,
        dest: &mut D,
        file_tables: &[String],
    ) -> Result<(Ready, EarlyLedger), Failure> {
        let spec = self.spec;
        std::thread::scope(|scope| {
            let check = (!spec.checked.is_filled()).then(|| {
                scope.spawn(|| {
                    self.host.event(Event::Point("checking"));
                    check_inputs(spec).map(|_| ())
                })
            });
            let ready = self.ready(dest, file_tables);
            // Held only while the check still runs: where it is done (a far server answers
            // the description after it), the open after the plan costs no round trip more.
            let checking = check.as_ref().is_some_and(|c| !c.is_finished());
            let mut ledger = match (keeps_ledger(spec), checking && ready.is_ok()) {
                (false, _) => EarlyLedger::NotKept,
                (true, false) => EarlyLedger::Later,
                (true, true) => hold_ledger(&*dest),
            };
            if let Some(check) = check {
                if let Err(f) = self.wait_for_check(&*dest, check, &mut ledger) {
                    let _ = ledger.settled(&*dest, false);
                    return Err(f);
                }
            }
            Ok((ready?, ledger))
        })
    }

    /// What [`Load::ready_while_checking`] asks of the destination: whether it can be written,
    /// the `--columns` list, the streams opened early, the tables' description.
    fn ready<D: Destination>(
        &self,
        dest: &mut D,
        file_tables: &[String],
    ) -> Result<Ready, Failure> {
        let spec = self.spec;
        if let Some(why) = dest.cannot_write().filter(|_| !spec.dry_run) {
            return Err(Failure::Usage(why));
        }
        let columns = spec
            .columns
            .as_deref()
            .map(|l| plan::parse_column_list(l, &dest.capabilities().identifiers))
            .transpose()
            .map_err(Failure::Usage)?;
        self.open_early(&*dest);
        Ok((columns, self.describe(dest, file_tables)?))
    }

    /// The check's outcome. A ledger held longer than [`HOLD_AT_MOST`] is committed meanwhile,
    /// and opened again after the plan: what it was seen to hold may have changed since.
    fn wait_for_check<D: Ledger>(
        &self,
        dest: &D,
        check: std::thread::ScopedJoinHandle<'_, Result<(), Failure>>,
        ledger: &mut EarlyLedger,
    ) -> Result<(), Failure> {
        if matches!(ledger, EarlyLedger::Held) && !finishes_within(&check, HOLD_AT_MOST) {
            *ledger = match dest.settle_ledger(true) {
                Ok(()) => EarlyLedger::Later,
                Err(e) => EarlyLedger::Opened(Err(e)),
            };
        }
        check.join().expect("the inputs' check panicked")
    }

    /// The plan, and the destination told its tables.
    fn plan_tables<D: Destination>(
        &self,
        dest: &mut D,
        file_tables: &[String],
        described: &[(String, TableInfo)],
        columns: Option<Vec<String>>,
    ) -> Result<Plan, Failure> {
        let plan = plan::build(self.spec, file_tables, described, columns)?;
        let load_tables: Vec<LoadTable> = plan.tables.iter().map(|t| t.load_table()).collect();
        dest.prefer_wire(self.spec.wire);
        dest.set_tables(&load_tables).map_err(|e| match e.kind {
            ErrorKind::Usage => Failure::Usage(e.to_string()),
            _ => crate::run::destination_failure(&e, e.to_string()),
        })?;
        Ok(plan)
    }

    /// Describes each table the inputs name, once (asked together); the first failure, in the
    /// inputs' order, is the one reported.
    fn describe<D: Destination>(
        &self,
        dest: &mut D,
        file_tables: &[String],
    ) -> Result<Vec<(String, TableInfo)>, Failure> {
        let spec = self.spec;
        let mut names: Vec<String> = Vec::new();
        for name in file_tables {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let described = dest.describe_all(&names);
        names
            .into_iter()
            .zip(described)
            .map(|(name, table)| {
                let table = table.map_err(|e| {
                    let by_name = match (&spec.table, file_tables.iter().position(|t| *t == name)) {
                        (None, Some(i)) => format!("{} -> table {name}: ", spec.files[i]),
                        _ => String::new(),
                    };
                    match e.kind {
                        ErrorKind::Usage => Failure::Usage(format!("{by_name}{e}")),
                        ErrorKind::Connection => Failure::Connect(format!("{by_name}{e}")),
                        _ => crate::run::destination_failure(
                            &e,
                            format!("{by_name}reading the catalog: {e}"),
                        ),
                    }
                })?;
                Ok((name, table))
            })
            .collect()
    }

    /// Runs the plan as the ledger left it, and records how the job ended.
    fn run_job<D: Destination + Ledger>(
        &self,
        dest: &mut D,
        stager: Option<&dyn StagePlanner<D>>,
        plan: Plan,
        job: Option<JobRun>,
    ) -> Result<Report, Failure> {
        // What the ledger decided is an outcome, printed whatever `-q` says.
        if let Some(note) = job.as_ref().and_then(|j| j.note.as_ref()) {
            self.host.event(Event::Notice(note.clone()));
        }
        let job_id = job.as_ref().map(|j| j.job);
        if let Some(id) = job_id {
            self.host.event(Event::Job { id });
        }
        self.host.event(Event::Point("planned"));
        let resumed = job.as_ref().is_some_and(|j| j.resumed);
        if let Some((id, crew)) = job.as_ref().and_then(|j| Some((j.job, j.crew.as_ref()?))) {
            return self.run_crew_job(dest, stager, plan, job.clone(), id, crew);
        }
        let result = match (job_id, resumed && plan.chunks.is_empty()) {
            (Some(id), true) => Ok((
                self.nothing_to_load(
                    &*dest,
                    format!(
                        "job {id}: every chunk was committed by an earlier run; it is finished now"
                    ),
                    Vec::new(),
                ),
                Vec::new(),
            )),
            _ => self.run_plan(dest, stager, plan, job.clone()),
        };
        let Some(id) = job_id else {
            return result
                .map(|(report, _)| report)
                .map_err(|f| match f.server_kind_of() {
                    Some(ServerKind::Commit) => {
                        f.and_then_say(". This load kept no ledger: reload into empty tables")
                    }
                    _ => f,
                });
        };
        self.host.event(Event::Point("finished"));
        let placements = match (&result, &job) {
            (Ok((_, relations)), Some(job)) => placements(job, relations),
            _ => Vec::new(),
        };
        let result = result.map(|(report, _)| report);
        self.end_job(&*dest, id, &result, &placements);
        // What a rerun does, now that the ledger knows what is in.
        result.map_err(|f| match (&f, f.server_kind_of()) {
            (_, Some(ServerKind::Commit)) => f.and_then_say(&format!(
                ". The ledger records exactly which chunks committed: run the same command \
                 again to load the rest (job {id})"
            )),
            (Failure::Server(_) | Failure::Connect(_), _) => {
                f.and_then_say(&format!(". Run the same command again to resume job {id}"))
            }
            _ => f,
        })
    }

    /// Runs a crew worker's part and settles it with the other workers ([`crate::crew`]): a
    /// part an earlier run of the slot prepared is only handed over again. Any failure fails
    /// the whole job, for every worker, and rolls back everything the job prepared.
    fn run_crew_job<D: Destination + Ledger>(
        &self,
        dest: &mut D,
        stager: Option<&dyn StagePlanner<D>>,
        plan: Plan,
        job: Option<JobRun>,
        id: i64,
        crew: &crate::crew::CrewRun,
    ) -> Result<Report, Failure> {
        let result = match !crew.only_waits() {
            true => self
                .run_plan(dest, stager, plan, job)
                .and_then(|(mut report, _)| {
                    // A staging worker's part waits for the job's publish, whatever --prepare
                    // says: the tables it staged, and those its earlier run or other workers
                    // staged of chunks it would have loaded.
                    let part = WorkerPart {
                        staged: self.spec.strategy == StrategyChoice::Stage,
                        ..report.worker_part()
                    };
                    crate::crew::settle(&*dest, self.host, id, crew, &report.prepared, &part)?;
                    // Every worker, for the report's per-worker timeline.
                    if let (Some(c), Ok(s)) = (report.crew.as_mut(), dest.crew_status(id)) {
                        c.slots = s.slots;
                        c.finished_at = s.finished_at;
                    }
                    Ok(report)
                }),
            false => {
                // This worker only waits: no stream of its runs.
                dest.close_ahead();
                crate::crew::settle(
                    &*dest,
                    self.host,
                    id,
                    crew,
                    &crew.standing,
                    // A part handed over before waits for the job's end, whatever it held.
                    &WorkerPart {
                        staged: true,
                        ..WorkerPart::default()
                    },
                )
                .map(|()| {
                    self.nothing_to_load(
                        &*dest,
                        format!(
                            "job {}: worker {}'s part was in already; the job is finished",
                            crew.crew.join.name,
                            crew.worker()
                        ),
                        Vec::new(),
                    )
                })
            }
        };
        if let Err(f) = &result {
            if let Err(e) = crate::crew::fail(&*dest, id, crew, &f.to_string()) {
                self.host.event(Event::Warning(format!(
                    "could not record in the ledger that job {} failed ({e}): its other \
                     workers give up when their --wait-workers runs out",
                    crew.crew.join.name
                )));
            }
        }
        result
    }

    /// Whether this load keeps a ledger, from how opening it went: a role that may keep one
    /// does (else a warning says why not). A lost connection or a server going down meanwhile
    /// fails the load, which has loaded nothing yet: going on without the ledger would leave a
    /// rerun nothing to resume from, and load every row again.
    fn ledger_opened(&self, opened: Result<(), DestinationError>) -> Result<bool, Failure> {
        match opened {
            Ok(()) => Ok(true),
            Err(e) if e.kind.retried() => Err(crate::run::destination_failure(
                &e,
                format!(
                    "opening the resume ledger: {e}. Nothing was loaded: run the same command \
                     again"
                ),
            )),
            Err(e) => {
                self.host.event(Event::Warning(format!(
                    "this load keeps no resume ledger, so a rerun cannot resume it: {e}"
                )));
                Ok(false)
            }
        }
    }

    /// Records how the job ended: finished, failed (resumable), or for a bad row or a usage
    /// error, which the user fixes in the input or the command, abandoned (nothing of it is
    /// committed, and the fixed command is a new job).
    fn end_job<D: Ledger>(
        &self,
        dest: &D,
        id: i64,
        result: &Result<Report, Failure>,
        placements: &[Placement],
    ) {
        let (state, message) = match result {
            Ok(_) => (JobState::Finished, None),
            Err(f) if f.abandons_job() => (JobState::Abandoned, Some(f.to_string())),
            Err(f) => (JobState::Failed, Some(f.to_string())),
        };
        let ended = match state {
            JobState::Finished => dest.finish_job(id, placements),
            _ => dest.end_job(id, state, message.as_deref()),
        };
        if let Err(e) = ended {
            self.host.event(Event::Warning(format!(
                "could not record in the ledger that job {id} is {} ({e}); the next run of the \
                 same command finds it interrupted and completes it",
                state.as_str()
            )));
        }
    }

    /// The report of a load the ledger found nothing to do for; the reason is a notice,
    /// shown whatever `-q` says.
    fn nothing_to_load<D: Destination>(
        &self,
        dest: &D,
        why: String,
        skipped: Vec<ledger::Skipped>,
    ) -> Report {
        dest.close_ahead();
        self.host.event(Event::Notice(why.clone()));
        let plan = Plan {
            tables: Vec::new(),
            inputs: Vec::new(),
            chunks: Vec::new(),
            chunk_size: 0,
        };
        let outcome = RunOutcome {
            streams: Vec::new(),
            elapsed: std::time::Duration::ZERO,
            server_conversions: 0,
            strategy: "direct",
            server_waits: Default::default(),
            calibration: None,
            prepared: Vec::new(),
            elsewhere: 0,
        };
        let facts = report::Facts {
            target: dest.target(),
            ledger: Some(why),
            skipped,
            ..report::Facts::default()
        };
        report::build(&plan, &outcome, facts, false, 0, self.spec.copy_buffer)
    }

    /// The streams this load runs, and a warning when the server's free slots cut them.
    fn choose_jobs<D: Destination>(
        &self,
        dest: &D,
        stager: Option<&dyn StagePlanner<D>>,
        plan: &Plan,
    ) -> usize {
        let spec = self.spec;
        // A load that stages opens one more connection at its end, for the publish; and when
        // it also loads tables directly, each stream may hold a direct and a staging one.
        let stageable = self.stageable(dest, stager, plan);
        let connections = match (stageable.iter().any(|&s| s), stageable.iter().all(|&s| s)) {
            (false, _) => (1, 0),
            (true, true) => (1, 1),
            (true, false) => (2, 1),
        };
        let (jobs, warning) = plan::choose_jobs(
            spec.jobs,
            plan.chunks.len(),
            dest.free_slots(),
            connections,
            spec.dry_run,
        );
        if let Some(w) = warning {
            self.host.event(Event::Warning(w));
        }
        jobs
    }

    /// Which of the plan's tables the strategy asked for may stage.
    fn stageable<D: Destination>(
        &self,
        dest: &D,
        stager: Option<&dyn StagePlanner<D>>,
        plan: &Plan,
    ) -> Vec<bool> {
        match (stager, self.spec.strategy, self.spec.dry_run) {
            (Some(s), StrategyChoice::Auto | StrategyChoice::Stage, false) => {
                (0..plan.tables.len())
                    .map(|t| s.may_stage(dest, t))
                    .collect()
            }
            _ => vec![false; plan.tables.len()],
        }
    }

    /// Lets the destination open the streams' connections while the ledger and the wire's
    /// choice take their round trips ([`Destination::open_ahead`]; across a long path, several
    /// round trips each). Only where the count is known now: not a dry run, nothing staged
    /// (a staging stream's connections open as its units come), and under `--jobs auto` the
    /// first stream only.
    fn open_ahead<D: Destination>(
        &self,
        dest: &D,
        stager: Option<&dyn StagePlanner<D>>,
        plan: &Plan,
    ) {
        if self.spec.dry_run {
            return;
        }
        if self.stageable(dest, stager, plan).contains(&true) {
            // Those opened early ([`Load::open_early`]) have no stream to become.
            dest.close_ahead();
            return;
        }
        let streams = match self.spec.jobs {
            Jobs::Auto => 1,
            _ => direct_jobs(self.spec, dest, plan),
        };
        dest.open_ahead(streams);
    }

    /// [`Destination::open_early`], before the tables are described, with the streams' count as
    /// far as it hangs on nothing the description says (`--jobs N`, or the default count,
    /// within the server's free connections; `auto`'s first stream). The plan's own count follows
    /// ([`Load::open_ahead`]), and closes any beyond it (fewer chunks than `--jobs`, or a load
    /// that stages).
    fn open_early<D: Destination>(&self, dest: &D) {
        if self.spec.dry_run || self.spec.strategy == StrategyChoice::Stage {
            return;
        }
        let streams = match self.spec.jobs {
            Jobs::Auto => 1,
            jobs => plan::choose_jobs(jobs, usize::MAX, dest.free_slots(), (1, 0), false).0,
        };
        dest.open_early(streams);
    }

    /// What would refuse a crew's worker once it had joined, said before it joins: a refusal
    /// after fails the job for its other workers too.
    fn refuse_before_joining<D: Destination>(
        &self,
        dest: &D,
        can_stage: bool,
        plan: &Plan,
    ) -> Result<(), Failure> {
        let spec = self.spec;
        if spec.strategy == StrategyChoice::Stage {
            if !can_stage {
                return Err(crew_cannot_stage(&format!(
                    "{} cannot stage",
                    dest.target()
                )));
            }
            // A staged unit's refused rows are loaded again in the publish, on the host that
            // read them: the job's publish runs on whichever worker finishes last.
            if spec.max_errors.is_some_and(|t| t.allows_any()) {
                return Err(crew_cannot_stage(
                    "--max-errors isolates a staging table's bad rows in the publish, which \
                     another worker's host may run without the file",
                ));
            }
        }
        if self.spec.prepare == PrepareChoice::Off {
            return Ok(());
        }
        match prepare_slots(dest, direct_jobs(self.spec, dest, plan)) {
            Ok(()) => Ok(()),
            Err(why) if self.spec.prepare == PrepareChoice::On => Err(prepare_on_refused(&why)),
            Err(why) => Err(crew_cannot_prepare(&why)),
        }
    }

    /// Says which tables load on one stream because foreign keys tie them.
    fn announce_reference_groups(&self, plan: &Plan) {
        for group in strategy::reference_groups(plan) {
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
            self.host.event(Event::Info(format!(
                "foreign keys tie tables of this load ({}): they load on one stream, parents \
                 first ({}), so that each check sees its parent rows (streams cannot see each \
                 other's rows before they commit); to load them in parallel, load the parents \
                 in a command of their own first",
                keys.join(", "),
                order.join(", ")
            )));
        }
    }

    /// Runs a checked plan (as the ledger left it) and reports, with the relation each input's
    /// rows went to (its table, or the partition its staging table became).
    fn run_plan<D: Destination + Ledger>(
        &self,
        dest: &mut D,
        stager: Option<&dyn StagePlanner<D>>,
        mut plan: Plan,
        job: Option<JobRun>,
    ) -> Result<(Report, Vec<String>), Failure> {
        let spec = self.spec;
        let jobs = self.choose_jobs(&*dest, stager, &plan);
        let wire = match spec.dry_run {
            true => crate::wire::dry_run_note(&plan, &*dest),
            false => match job.as_ref().and_then(|j| Some((j.job, j.crew.as_ref()?))) {
                Some((id, crew)) => crate::crew::choose_wire(&plan, dest, id, crew, jobs),
                None => crate::wire::choose(&plan, dest, jobs),
            },
        };
        if let Some(w) = wire.as_ref().filter(|w| !w.text.is_empty()) {
            self.host
                .event(Event::Info(format!("--wire auto chose {}", w.why)));
        }
        let rejects = spec
            .max_errors
            .filter(|t| t.allows_any())
            .map(|t| Arc::new(Rejects::new(t, spec.rejects.clone(), &plan)));
        // Routing reads each partitioned input's first row, and may say what earlier loads
        // left; the chunks an earlier run of the job staged leave the plan, their tables
        // published as they are.
        let crew = job.as_ref().is_some_and(|j| j.crew.is_some());
        let mode = match (spec.strategy, spec.dry_run) {
            (StrategyChoice::Direct, _) | (_, true) => None,
            (StrategyChoice::Auto, false) if crew => None,
            (StrategyChoice::Auto, false) => Some(Mode::Auto),
            (StrategyChoice::Stage, false) => Some(Mode::Required),
        };
        let stage: Option<Stage> = match (stager, mode) {
            (Some(s), Some(mode)) => {
                let opts = StageOptions {
                    mode,
                    crew,
                    jobs,
                    isolate_rejects: rejects.is_some(),
                    temp_dir: spec.temp_dir.clone().unwrap_or_else(std::env::temp_dir),
                };
                Some(s.plan(&mut plan, &*dest, opts, job.as_ref(), self.host)?)
            }
            (None, Some(Mode::Required)) => {
                return Err(Failure::Usage(format!(
                    "--strategy stage: {} cannot stage (give --strategy direct)",
                    dest.target()
                )))
            }
            _ => None,
        };
        let calibrate = spec.jobs == Jobs::Auto && !spec.dry_run;
        let opts = RunOptions {
            jobs,
            copy_buffer: spec.copy_buffer,
            dry_run: spec.dry_run,
            job: job.clone(),
            retries: spec.retries,
            rejects: rejects.clone(),
            calibrate,
            round_trip: calibrate.then(|| dest.server_round_trip()).flatten(),
            retry_pause: spec.retry_pause,
            prepare: self.prepare(&*dest, job.as_ref(), jobs)?,
        };
        dest.name_transactions(opts.prepare.as_deref());
        if !spec.dry_run {
            self.announce_reference_groups(&plan);
        }
        let counters: Arc<Vec<Counters>> = Arc::new(
            (0..plan.tables.len())
                .map(|_| Counters::default())
                .collect(),
        );
        self.host.event(Event::Progress(&progress_of(
            &plan,
            &counters,
            spec.dry_run,
        )));
        let wal_start = (!spec.dry_run).then(|| dest.log_position()).flatten();
        let strategy: &dyn Strategy<D> = match (&stage, stager) {
            (Some(s), Some(stager)) => stager.strategy(s),
            _ => &Direct,
        };
        let outcome = execute(&plan, &opts, &*dest, strategy, &counters, self.host);
        self.host.event(Event::ProgressDone);
        // The rejects files, whatever the outcome: past the threshold they say what to fix.
        if let Some(r) = &rejects {
            if let Err(e) = r.write(&plan) {
                let path = r.path.as_deref().unwrap_or(std::path::Path::new(""));
                self.host.event(Event::Warning(format!(
                    "cannot write the rejects file {}: {e}",
                    path.display()
                )));
            }
        }
        let outcome = outcome.map_err(|e| self.name_table(&plan, e))?;
        let wal_bytes = wal_start.and_then(|a| Some(dest.log_position()?.saturating_sub(a)));
        let facts = report::Facts {
            target: dest.target(),
            formats: (0..plan.tables.len())
                .map(|t| dest.load_format(t))
                .collect(),
            staged: (0..plan.inputs.len())
                .map(|i| stage.as_ref().is_some_and(|s| s.staged(i)))
                .collect(),
            fallbacks: stage.as_ref().map(Stage::fallbacks).unwrap_or_default(),
            steps: stage.as_ref().map(Stage::times),
            wal_bytes,
            job: job.as_ref().map(|j| j.job),
            ledger: job.as_ref().and_then(|j| j.note.clone()),
            skipped: job.as_ref().map(|j| j.skipped.clone()).unwrap_or_default(),
            rejected: rejects.as_ref().map(|r| r.report(&plan)),
            wire: wire.map(|w| w.why),
            server_settings: match spec.dry_run {
                true => Vec::new(),
                false => dest.settings(),
            },
            crew: job
                .as_ref()
                .and_then(|j| j.crew.as_ref())
                .map(|c| report::CrewReport {
                    job: c.crew.join.name.clone(),
                    worker: c.worker(),
                    workers: c.crew.join.workers,
                    chunks_loaded_elsewhere: outcome.elsewhere,
                    slots: Vec::new(),
                    finished_at: None,
                }),
        };
        let relations = (0..plan.inputs.len())
            .map(|i| {
                let table = &plan.tables[plan.inputs[i].table].table.qualified;
                stage
                    .as_ref()
                    .and_then(|s| s.relation(i))
                    .unwrap_or_else(|| table.clone())
            })
            .collect();
        let report = report::build_judged(
            &plan,
            &outcome,
            facts,
            spec.dry_run,
            jobs,
            spec.copy_buffer,
            &*dest,
        );
        Ok((report, relations))
    }

    /// Whether the streams commit through prepared transactions, and under which names: only a
    /// load that keeps a ledger (where the decision goes), on a destination that can prepare a
    /// transaction per stream.
    fn prepare<D: Destination>(
        &self,
        dest: &D,
        job: Option<&JobRun>,
        jobs: usize,
    ) -> Result<Option<String>, Failure> {
        let choice = self.spec.prepare;
        if choice == PrepareChoice::Off || self.spec.dry_run {
            return Ok(None);
        }
        let crew = job.and_then(|j| Some((j.job, j.crew.as_ref()?)));
        match (choice, job, prepare_slots(dest, jobs)) {
            (_, Some(job), Ok(())) => Ok(Some(prepared_prefix(job.job, crew.map(|c| &**c.1)))),
            (PrepareChoice::Auto, _, Err(why)) if crew.is_some() => Err(crew_cannot_prepare(&why)),
            (PrepareChoice::On, None, _) => Err(Failure::Usage(
                "--prepare on needs the resume ledger, where the commit decision is kept (this \
                 load keeps none: standard input, or a role that cannot create it)"
                    .into(),
            )),
            (PrepareChoice::On, _, Err(why)) => Err(prepare_on_refused(&why)),
            _ => Ok(None),
        }
    }

    /// Says which table a file went to when the file's name chose it.
    fn name_table(&self, plan: &Plan, e: Failure) -> Failure {
        match e {
            Failure::Input(mut ie) if self.spec.table.is_none() => {
                let t = plan.inputs.iter().find(|i| i.display == ie.file);
                ie.table = t.map(|i| plan.tables[i.table].table.name.clone());
                Failure::Input(ie)
            }
            other => other,
        }
    }
}

/// The names of a run's prepared transactions: the job's, and this process's, so that a later
/// run of the job finds them by the job's prefix ([`ledger::prepared_prefix_of`]).
fn prepared_prefix(job: i64, crew: Option<&crate::crew::CrewRun>) -> String {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let worker = crew
        .map(|c| format!("w{}_", c.worker()))
        .unwrap_or_default();
    format!(
        "{}{worker}{}_{nonce}",
        ledger::prepared_prefix_of(job),
        std::process::id()
    )
}

/// A crew's worker without a ledger: standard input, or a role that cannot keep one.
fn no_ledger_for_a_crew(crew: &crate::crew::Crew) -> Failure {
    Failure::Usage(format!(
        "--job {}: the workers of a job coordinate through the ledger in the target database, \
         and this load keeps none (standard input cannot be claimed chunk by chunk, or the \
         role cannot write the ledger: the warning above says which)",
        crew.join.name
    ))
}

/// What a progress display shows of a plan.
fn progress_of(plan: &Plan, counters: &Arc<Vec<Counters>>, dry_run: bool) -> Progress {
    let of_table = |t: usize| {
        plan.chunks
            .iter()
            .filter(move |c| plan.inputs[c.input].table == t)
    };
    Progress {
        tables: plan.tables.iter().map(|t| t.table.name.clone()).collect(),
        bytes: (0..plan.tables.len())
            .map(|t| of_table(t).map(|c| c.weight(&plan.inputs)).sum())
            .collect(),
        chunks: (0..plan.tables.len())
            .map(|t| of_table(t).count() as u64)
            .collect(),
        counters: counters.clone(),
        verb: if dry_run { "checking" } else { "loading" },
    }
}

/// `--max-errors` parsing, for callers that take it as text.
pub use rejects::parse_threshold;
