//! A job that several workers load together: `sluice load --job NAME --workers N --worker K`
//! on each host, each with its own files (or all with the same shared ones).
//!
//! The target's ledger is the only coordinator. A worker joins the job by name ([`join`]),
//! takes its slot and registers its files and chunks; its streams claim each chunk in their
//! own transactions before loading it (`run::worker`), so a chunk of a shared file is loaded
//! by one worker, and a killed worker's claims come back when the server ends its session.
//! Nothing is visible until every slot is done: each worker prepares its streams'
//! transactions and hands its part over ([`settle`]); the hand-over that completes the last
//! slot records the decision to commit every slot's prepared transactions, and that worker
//! commits them. The others wait for the job to finish, so that every worker's exit 0 means the
//! whole job is in. A failure of any worker, or a wait past `--wait-workers`, fails the job
//! and rolls back everything prepared: all or nothing, across hosts.

use crate::events::{Event, Host};
use crate::failure::{Failure, ServerKind};
use crate::ledger::{file_records, ledger_failure, prepared_prefix_of, settings, JobRun, Start};
use crate::plan::Plan;
use crate::wire::WireChoice;
use sluice_core::destination::{Ledger, Wire};
use sluice_core::ledger::{CrewJoin, CrewStatus, CrewTurn, JobSpec, JobState, WorkerPart};
use std::time::{Duration, Instant};

/// What a worker is asked to be (`--job`, `--workers`, `--worker`, `--wait-workers`).
#[derive(Clone, Debug)]
pub struct Crew {
    pub join: CrewJoin,
    /// How long the job waits for its other workers (to start, to finish) before it gives up.
    pub wait: Duration,
}

/// A worker's run of a crew's job.
#[derive(Clone, Debug)]
pub struct CrewRun {
    pub crew: Crew,
    /// Transactions an earlier run of this slot prepared, which stand: this run loads nothing
    /// and hands them over.
    pub standing: Vec<String>,
    /// The job is decided already, this slot's part among it (its earlier run was killed
    /// after the decision): this run loads nothing, and finishes the job or waits.
    pub decided: bool,
}

impl CrewRun {
    /// Whether this run only hands over what an earlier run of the slot left, and waits.
    pub fn only_waits(&self) -> bool {
        self.decided || !self.standing.is_empty()
    }

    pub fn worker(&self) -> u32 {
        self.crew.join.worker
    }

    fn name(&self) -> &str {
        &self.crew.join.name
    }
}

/// How often a waiting worker polls the job, and says what it waits for.
const POLL: Duration = Duration::from_millis(100);
const SAY_EVERY: Duration = Duration::from_secs(10);
/// How long a decided commit may stay unfinished before a waiting worker finishes it (the
/// worker that decided died while committing).
const DECIDER_GRACE: Duration = Duration::from_secs(30);

/// Joins the crew's job: the slot, the files (numbered across the workers) and the chunks to
/// claim. `replan` cuts the files with the job's chunk size, when its first worker's differs.
pub fn join<D: Ledger>(
    dest: &D,
    plan: Plan,
    crew: &Crew,
    replan: &dyn Fn(u64) -> Result<Plan, Failure>,
) -> Result<Start, Failure> {
    let files = file_records(&plan)?;
    let spec = JobSpec {
        key: crew.join.key(),
        // A crew's workers join one job by its name; the join's own lock orders them.
        newest: None,
        settings: settings(&files),
        files,
        chunk_size: plan.chunk_size,
        chunks_total: 0,
        bytes_total: 0,
    };
    let joined = dest
        .join_crew(&crew.join, &spec)
        .map_err(|e| ledger_failure("joining the job", e))?;
    let mut plan = match plan.chunk_size == joined.chunk_size {
        true => plan,
        false => replan(joined.chunk_size)?,
    };
    let mut run = JobRun {
        job: joined.job,
        files: joined.files.iter().map(|&n| Some(n)).collect(),
        note: None,
        resumed: false,
        skipped: Vec::new(),
        crew: Some(Box::new(CrewRun {
            crew: crew.clone(),
            standing: joined.prepared.clone(),
            decided: joined.decided,
        })),
    };
    let (j, w) = (&crew.join, crew.join.worker);
    if joined.decided || !joined.prepared.is_empty() {
        plan.retain_chunks(|_| false);
        run.note = Some(match joined.decided {
            true => format!(
                "job {}: the job is decided, worker {w}'s part in it (its earlier run stopped \
                 after the decision); this run finishes the job, or waits for the worker that \
                 does",
                j.name
            ),
            false => format!(
                "job {}: worker {w}'s part was prepared by its earlier run and stands; this \
                 run waits for the other workers",
                j.name
            ),
        });
        return Ok(Start::Run(plan, run));
    }
    let records: Vec<_> = plan
        .chunks
        .iter()
        .filter_map(|c| run.record(c, 0))
        .collect();
    dest.add_claims(joined.job, &records)
        .map_err(|e| ledger_failure("registering the chunks in the ledger", e))?;
    run.note = Some(format!(
        "job {} (ledger job {}): worker {w} of {} on {}, {} chunk(s) of {} file(s) to claim",
        j.name,
        joined.job,
        j.workers,
        j.host,
        records.len(),
        plan.inputs.len()
    ));
    Ok(Start::Run(plan, run))
}

/// After this worker's streams prepared (`prepared`), staged (`part.staged`) or committed:
/// hands its part over and, when it completes the last slot, publishes the job's staging
/// tables and commits every slot's prepared transactions; else waits until the job is
/// finished, failed, or the wait runs out (a worker whose rows are all committed already,
/// under `--prepare off`, does not wait).
pub fn settle<D: Ledger>(
    dest: &D,
    host: &dyn Host,
    job: i64,
    crew: &CrewRun,
    prepared: &[String],
    part: &WorkerPart,
) -> Result<(), Failure> {
    let turn = dest
        .hand_over(job, crew.worker(), prepared, part)
        .map_err(|e| {
            roll_back(dest, prepared);
            Failure::server_kind(
                ServerKind::Other,
                format!(
                    "job {}: handing worker {}'s part over: {e}",
                    crew.name(),
                    crew.worker()
                ),
            )
        })?;
    match turn {
        CrewTurn::Decided { gids, staged } => {
            if staged > 0 {
                host.event(Event::Notice(format!(
                    "job {}: every worker's part is in; this worker (worker {}) switched in the \
                     job's {staged} staging table(s), every worker's, in the transaction that \
                     recorded the decision to commit",
                    crew.name(),
                    crew.worker()
                )));
            }
            commit_decided(dest, host, job, crew, &gids)
        }
        CrewTurn::Finished => {
            host.event(Event::Notice(format!(
                "job {}: another worker finished the job while worker {} joined it again; every \
                 worker's part is in",
                crew.name(),
                crew.worker()
            )));
            Ok(())
        }
        CrewTurn::Waiting { .. } if prepared.is_empty() && !part.staged => {
            host.event(Event::Notice(format!(
                "job {}: worker {}'s rows are committed (--prepare off: visible now, before the \
                 other workers' are); the job finishes when every worker has committed",
                crew.name(),
                crew.worker()
            )));
            Ok(())
        }
        CrewTurn::Waiting { .. } => {
            // Another worker commits the job: nothing here holds readers back, and whatever
            // this one kept for that (its streams' free connections) goes now.
            dest.release_readers();
            wait_for_the_others(dest, host, job, crew, prepared)
        }
    }
}

/// The decision is recorded: commits every prepared transaction of it (readers held back
/// meanwhile), then marks the job finished.
fn commit_decided<D: Ledger>(
    dest: &D,
    host: &dyn Host,
    job: i64,
    crew: &CrewRun,
    all: &[String],
) -> Result<(), Failure> {
    host.event(Event::Point("decided"));
    crate::strategy::hold_and_commit(dest, host, all, |n, e| {
        Failure::server_kind(
            ServerKind::Lost,
            format!(
                "job {}: committing the workers' prepared transaction {} failed: {e}. The \
                 decision to commit is in the ledger: any worker's command, run again, \
                 commits the rest",
                crew.name(),
                all.get(n).map_or("", String::as_str)
            ),
        )
    })?;
    dest.finish_job(job, &[])
        .map_err(|e| ledger_failure("recording that the job finished", e))?;
    host.event(Event::Notice(match all.len() {
        0 => format!(
            "job {}: every worker's part is committed; the job is finished",
            crew.name()
        ),
        n => format!(
            "job {}: every worker's part is in; this worker (worker {}) committed the job's {n} \
             prepared transaction(s)",
            crew.name(),
            crew.worker(),
        ),
    }));
    Ok(())
}

/// Waits until the job finishes (another worker commits it), fails, or `--wait-workers` runs
/// out (then fails it).
fn wait_for_the_others<D: Ledger>(
    dest: &D,
    host: &dyn Host,
    job: i64,
    crew: &CrewRun,
    prepared: &[String],
) -> Result<(), Failure> {
    let started = Instant::now();
    let mut said = started - SAY_EVERY;
    let mut decided_at: Option<Instant> = None;
    loop {
        let s = dest
            .crew_status(job)
            .map_err(|e| ledger_failure("reading the job's workers", e))?;
        match s.state {
            JobState::Finished => return Ok(()),
            JobState::Failed | JobState::Abandoned => {
                roll_back(dest, prepared);
                return Err(failed(crew, &s));
            }
            _ => {}
        }
        if let Some(decided) = &s.decided {
            // The decision stands (the job's staging tables are switched in with it): whoever
            // made it commits; if it died doing so, this worker finishes the commit after a
            // grace.
            let at = *decided_at.get_or_insert_with(Instant::now);
            if at.elapsed() > DECIDER_GRACE {
                return commit_decided(dest, host, job, crew, decided);
            }
        } else if started.elapsed() > crew.crew.wait {
            return give_up(dest, job, crew, &s);
        }
        if said.elapsed() >= SAY_EVERY {
            said = Instant::now();
            host.event(Event::Notice(waiting_for(crew, &s, started.elapsed())));
        }
        std::thread::sleep(POLL);
    }
}

/// What a waiting worker waits for, in words.
fn waiting_for(crew: &CrewRun, s: &CrewStatus, waited: Duration) -> String {
    let done = s
        .slots
        .iter()
        .filter(|w| matches!(w.state.as_str(), "prepared" | "committed"))
        .count();
    let others: Vec<String> = (1..=s.workers)
        .filter_map(|k| {
            let slot = s.slots.iter().find(|w| w.worker == k);
            match slot {
                None => Some(format!("{k} (not started)")),
                Some(w) if matches!(w.state.as_str(), "prepared" | "committed") => None,
                Some(w) if w.live => Some(format!("{k} ({} on {})", w.state, w.host)),
                Some(w) => Some(format!(
                    "{k} (gone from {}{}: run it again)",
                    w.host,
                    w.message
                        .as_deref()
                        .map(|m| format!(", {m}"))
                        .unwrap_or_default()
                )),
            }
        })
        .collect();
    let left = crew.crew.wait.saturating_sub(waited);
    format!(
        "job {}: worker {}'s part is prepared ({done} of {} workers); waiting for worker(s) {}; \
         gives up in {:.0} s (--wait-workers)",
        crew.name(),
        crew.worker(),
        s.workers,
        others.join(", "),
        left.as_secs_f64()
    )
}

/// The wait ran out: fails the job (unless a decision came first) and rolls back everything
/// it prepared.
fn give_up<D: Ledger>(dest: &D, job: i64, crew: &CrewRun, s: &CrewStatus) -> Result<(), Failure> {
    let why = format!(
        "worker {} waited {:.0} s (--wait-workers) for the others: {}",
        crew.worker(),
        crew.crew.wait.as_secs_f64(),
        waiting_for(crew, s, crew.crew.wait)
    );
    fail(dest, job, crew, &why)?;
    Err(Failure::server_kind(
        ServerKind::Other,
        format!(
            "{why}. Nothing of the job is committed: every worker's prepared transactions were \
             rolled back. Run every worker's command again (a longer --wait-workers if they \
             start far apart)"
        ),
    ))
}

/// Fails the crew's job for every worker (unless its commit is decided) and rolls back every
/// transaction the job's workers prepared.
pub fn fail<D: Ledger>(dest: &D, job: i64, crew: &CrewRun, why: &str) -> Result<(), Failure> {
    let failed = dest
        .fail_crew(job, crew.worker(), why)
        .map_err(|e| ledger_failure("recording that the job failed", e))?;
    if failed {
        let left = dest
            .prepared(&prepared_prefix_of(job))
            .map_err(|e| ledger_failure("reading the job's prepared transactions", e))?;
        roll_back(dest, &left);
    }
    Ok(())
}

/// Rolls back prepared transactions, as far as it can (one already finished is no error).
fn roll_back<D: Ledger>(dest: &D, prepared: &[String]) {
    let _ = dest.finish_all_prepared(prepared, false);
}

/// The job failed under another worker.
fn failed(crew: &CrewRun, s: &CrewStatus) -> Failure {
    Failure::server_kind(
        ServerKind::Other,
        format!(
            "job {} failed: {}. Nothing of it is committed (this worker's part was rolled back); \
             fix what it says, and run every worker's command again",
            crew.name(),
            s.message.as_deref().unwrap_or("another worker stopped it")
        ),
    )
}

/// How long a worker waits for another worker's `--wire auto` measurement (two of the path's
/// measurements at their longest, and slack) before it measures on its own.
const WIRE_WAIT: Duration = Duration::from_secs(20);

/// `--wire auto` for a crew's worker: decided once for the job. Workers that measured the path
/// and the server at the same moment would each see the server busy with the others'
/// measurements and pick binary on a link that is the limit; so the first worker measures
/// while the others wait for its decision (kept in the ledger) and take it, for the tables it
/// decided. A worker with a table the decision does not cover, or that waited too long,
/// decides on its own.
pub fn choose_wire<D: Ledger>(
    plan: &Plan,
    dest: &mut D,
    job: i64,
    crew: &CrewRun,
    jobs: usize,
) -> Option<WireChoice> {
    let choosable: Vec<&str> = (0..plan.tables.len())
        .filter(|&t| dest.wire_choice(t))
        .map(|t| plan.tables[t].table.qualified.as_str())
        .collect();
    if choosable.is_empty() || !dest.hold_crew_wire(job, true, WIRE_WAIT).unwrap_or(false) {
        return crate::wire::choose(plan, dest, jobs);
    }
    let stored = dest.crew_wire(job).ok().flatten();
    let choice = match stored
        .as_deref()
        .and_then(|s| Decision::parse(s, &choosable))
    {
        Some(d) => Some(d.apply(plan, dest, crew)),
        None => {
            let c = crate::wire::choose(plan, dest, jobs);
            if let (Some(c), None) = (&c, &stored) {
                let _ = dest.set_crew_wire(job, &Decision::of(plan, &choosable, c).render());
            }
            c
        }
    };
    let _ = dest.hold_crew_wire(job, false, WIRE_WAIT);
    choice
}

/// A job's `--wire auto` decision as the ledger keeps it: the tables it decided (by their
/// qualified names), those it sends as text, and why.
struct Decision {
    decided: Vec<String>,
    text: Vec<String>,
    why: String,
}

impl Decision {
    fn of(plan: &Plan, choosable: &[&str], c: &WireChoice) -> Decision {
        Decision {
            decided: choosable.iter().map(|s| s.to_string()).collect(),
            text: c
                .text
                .iter()
                .map(|&t| plan.tables[t].table.qualified.clone())
                .collect(),
            why: c.why.clone(),
        }
    }

    /// One line of decided tables, one of text tables (tab-separated), then why.
    fn render(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.decided.join("\t"),
            self.text.join("\t"),
            self.why
        )
    }

    /// The stored decision, when it covers every table of `choosable`.
    fn parse(s: &str, choosable: &[&str]) -> Option<Decision> {
        let mut lines = s.splitn(3, '\n');
        let list = |l: Option<&str>| -> Vec<String> {
            l.unwrap_or("")
                .split('\t')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        };
        let (decided, text) = (list(lines.next()), list(lines.next()));
        let why = lines.next()?.to_string();
        choosable
            .iter()
            .all(|t| decided.iter().any(|d| d == t))
            .then_some(Decision { decided, text, why })
    }

    /// Sends this worker's tables as the decision says.
    fn apply<D: Ledger>(&self, plan: &Plan, dest: &mut D, crew: &CrewRun) -> WireChoice {
        let text: Vec<usize> = (0..plan.tables.len())
            .filter(|&t| dest.wire_choice(t))
            .filter(|&t| self.text.contains(&plan.tables[t].table.qualified))
            .collect();
        for &t in &text {
            dest.set_wire(t, Wire::Text);
        }
        WireChoice {
            text,
            why: format!(
                "{} (decided once for job {}, by the worker that measured first)",
                self.why,
                crew.name()
            ),
        }
    }
}
