//! The `stage` strategy: the seed paper's design. Each partition's files are loaded by one
//! stream into a staging table of its own (created in that stream's transaction, loaded with
//! the destination's bulk path, then indexed by the same stream, so index builds run in parallel),
//! and one publish
//! transaction switches every staging table in at once.
//!
//! Routing is by each file's first record: its partition key picks the partition. A table
//! whose files cross its partitions' bounds (seen in each file's first rows and its last)
//! has every row routed on the client instead ([`crate::route`]): a staging target per
//! partition, loaded from the spill. The staging table carries the partition's bound as a
//! CHECK, so a later row outside it fails that staging table's load; the strategy then rolls
//! the staging table back, keeps that file for the publish, and stages the partition's other
//! files again. Whatever cannot be staged (a
//! partition that has rows, a key sluice cannot route, a parent with triggers or foreign keys,
//! standard input) is loaded directly, and the summary says which inputs were and why:
//! fallbacks, not errors. A first row that belongs to no partition is a bad row.
//!
//! Order at the end: one publish transaction switches the staging tables in and then loads
//! the staged tables' inputs that could not be staged (so a staged table's rows appear at
//! once, and a bad row among the late ones leaves nothing visible); then the direct streams,
//! which only load tables with nothing staged, commit; then the parents are analyzed.
//!
//! Across runs: a staging table records, as it commits, the ledger rows of the chunks it
//! holds (the destination keeps them with the table). A run that resumes the job takes back
//! the ones that still fit ([`take_back`]): their chunks leave the plan, and their ledger rows
//! go into the publish with this run's. A failure the job resumes from keeps this run's
//! finished staging tables for that; one that ends the job (a bad row) drops them.

use crate::chunk::{first_values, locate_record};
use crate::events::{CommitPhase, Event, Host};
use crate::failure::Failure;
use crate::ledger::JobRun;
use crate::plan::{Chunk, Compression, InputSource, Plan};
use crate::route::{free_space, RoutedTable, Router};
use crate::run::lock;
use crate::strategy::{commit_all, direct_units, ChunkRunner, Commit, Strategy, Unit};
use sluice_core::destination::{
    Destination, DestinationError, DestinationStream, ErrorKind, Leftover, Partitioning,
    PublishModel, PublishTimes, Staging,
};
use sluice_core::error::InputError;
use sluice_core::ledger::ChunkRecord;
use sluice_core::primitives::{parse_i64, trim_c_space};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How the user asked for staging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Stage what can be staged, load the rest directly.
    Auto,
    /// As `Auto`, but at least one input must be staged.
    Required,
}

/// Why a worker of a job of several routes no row on the client: each of its files stages
/// into the partition of its first row, as a whole.
const CREW_ROUTES_NOTHING: &str = "a worker of a job of several does not route rows on the \
     client: a file that crosses partition bounds cannot be staged";

/// One staging table's work: a partition of a table and the inputs routed to it.
#[derive(Clone, Debug)]
struct Target {
    table: usize,
    partition: usize,
    /// The partition's name, for messages.
    name: String,
    inputs: Vec<usize>,
    /// For a table whose rows are routed on the client: the routed table (an index into the
    /// router's) and partition, whose spill the unit loads.
    routed: Option<(usize, usize)>,
}

/// How the user asked for staging, and what routing on the client may use.
pub struct StageOptions {
    pub mode: Mode,
    /// The load is one worker of a job that several load together ([`crate::crew`]): its
    /// staging tables wait, committed, for the job's publish, which the worker whose
    /// hand-over completes the job runs.
    pub crew: bool,
    /// Streams of the load.
    pub jobs: usize,
    /// Rows may be rejected (`--max-errors`).
    pub isolate_rejects: bool,
    /// Where routed rows spill (`--temp-dir`).
    pub temp_dir: std::path::PathBuf,
}

/// An input that went through `direct`, and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Fallback {
    pub file: String,
    pub table: String,
    pub reason: String,
}

/// Where the stage strategy's time went, summed over staging tables (the streams run them
/// in parallel, so the sums can exceed the wall time).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StepTimes {
    /// Staging tables switched in.
    pub staging_tables: usize,
    /// Seconds of loading into staging tables.
    pub load_seconds: f64,
    pub index_seconds: f64,
    pub analyze_seconds: f64,
    /// The one publish transaction.
    pub publish_seconds: f64,
    /// Statistics of the parents after it.
    pub parent_analyze_seconds: f64,
    pub publish_attempts: u32,
    /// Partitions whose staging rows were appended, not switched in (they had rows by then).
    pub appended: Vec<String>,
    /// Staging tables an earlier run of the job committed, published by this run as they
    /// were, and the rows they held (not loaded again, so not among this run's rows).
    pub reused_staging_tables: usize,
    pub reused_rows: u64,
    /// Tables whose rows were routed to their partitions on the client.
    #[serde(default)]
    pub routed: Vec<crate::route::RoutedSummary>,
}

/// The stage strategy, with its routing decided.
pub struct Stage {
    units: Vec<Unit>,
    targets: Mutex<Vec<Target>>,
    /// When each staged unit began, by target.
    begun: Mutex<Vec<Option<Instant>>>,
    fallbacks: Mutex<Vec<Fallback>>,
    times: Mutex<StepTimes>,
    /// Whether each input was loaded through a staging table.
    staged_inputs: Mutex<Vec<bool>>,
    /// Chunks of staged tables that could not be staged: loaded in the publish transaction.
    deferred: Mutex<Vec<usize>>,
    /// Each chunk's input, and each input's file and table, for redoing a spanning file.
    chunk_inputs: Vec<usize>,
    input_names: Vec<(String, String)>,
    /// The tables' names, for the routing's summary.
    table_names: Vec<String>,
    /// Streams of the load: the parents' statistics are gathered as many at a time.
    jobs: usize,
    /// Rows may be rejected (`--max-errors`): a staged unit the server refuses a row of is
    /// loaded again in the publish transaction, where its bad rows are isolated under
    /// savepoints (a staged unit's bulk path may refuse them).
    pub isolate_rejects: bool,
    /// The load's job, when it keeps a ledger: its staging tables record their chunks, and
    /// outlive a failure the job resumes from.
    job: Option<i64>,
    /// Every finished staging table (this run's, and those an earlier run left that this one
    /// reuses), with its chunks' ledger rows, for the publish.
    finished: Mutex<Vec<(String, Vec<ChunkRecord>)>>,
    /// The publish committed: the staging tables are the tables' partitions now.
    published: AtomicBool,
    /// The routing of rows on the client, when a table's files cross its partitions' bounds.
    router: Option<Router>,
    /// One worker of a job that several load together: its staging tables are published
    /// with the job's, by the worker that completes it ([`StageOptions::crew`]).
    crew: bool,
}

/// The leftovers of an earlier run [`reusable`] takes back, each with the plan chunks it
/// holds, and those it refuses, each with why.
#[derive(Default)]
struct Reuse {
    take: Vec<(Leftover, Vec<usize>)>,
    refuse: Vec<(Leftover, &'static str)>,
}

/// The leftovers of an earlier run of `job` that this run can publish as they are: each
/// holds whole inputs whose chunks are all still to load (so none is in twice), and stands in
/// for a partition that can still be replaced.
fn reusable(
    plan: &Plan,
    partitionings: &[Partitioning],
    job: &JobRun,
    leftovers: Vec<Leftover>,
) -> Reuse {
    let mut taken = vec![false; plan.chunks.len()];
    let mut reuse = Reuse::default();
    for l in leftovers {
        let open = match &partitionings[l.table] {
            Partitioning::IntegerKey { partitions, .. } => partitions
                .get(l.partition)
                .is_some_and(|p| p.obstacle.is_none()),
            _ => false,
        };
        if !open {
            reuse
                .refuse
                .push((l, "its partition cannot be replaced now"));
            continue;
        }
        let held: Option<Vec<usize>> = l
            .chunks
            .iter()
            .map(|r| {
                (0..plan.chunks.len()).find(|&c| {
                    let chunk = &plan.chunks[c];
                    !taken[c]
                        && plan.inputs[chunk.input].table == l.table
                        && job.files.get(chunk.input).copied().flatten() == Some(r.file)
                        && chunk.start == r.start
                        && chunk.end == r.end
                })
            })
            .collect();
        let whole = |held: &[usize]| {
            (0..plan.chunks.len()).all(|c| {
                held.contains(&c)
                    || !held
                        .iter()
                        .any(|&h| plan.chunks[h].input == plan.chunks[c].input)
            })
        };
        match held {
            Some(held) if !held.is_empty() && whole(&held) => {
                for &c in &held {
                    taken[c] = true;
                }
                reuse.take.push((l, held));
            }
            _ => reuse
                .refuse
                .push((l, "its chunks are not among those left to load")),
        }
    }
    reuse
}

/// What [`take_back`] took back from an earlier run of the job.
struct TakenBack {
    /// Whether the staging area can be used, or why not.
    ready: Result<(), String>,
    /// The (table, partition) each reused staging table stands in for.
    partitions: Vec<(usize, usize)>,
    /// The inputs they hold, whole.
    inputs: Vec<bool>,
    /// Each reused staging table, with its chunks' ledger rows, for the publish.
    tables: Vec<(String, Vec<ChunkRecord>)>,
    rows: u64,
}

impl TakenBack {
    fn none(plan: &Plan) -> TakenBack {
        TakenBack {
            ready: Ok(()),
            partitions: Vec::new(),
            inputs: vec![false; plan.inputs.len()],
            tables: Vec::new(),
            rows: 0,
        }
    }
}

/// Readies the staging area, says what it dropped and what it left for other jobs, and takes
/// back the staging tables an earlier run of `job` committed that still fit: their chunks
/// leave `plan`.
fn take_back<D: Staging>(
    plan: &mut Plan,
    dest: &D,
    partitionings: &[Partitioning],
    job: Option<&JobRun>,
    host: &dyn Host,
) -> Result<TakenBack, Failure> {
    let mut back = TakenBack::none(plan);
    let prepared = match dest.prepare_staging(job.map(|j| j.job)) {
        Ok(p) => p,
        Err(e) => {
            back.ready = Err(format!("the staging area cannot be used: {e}"));
            return Ok(back);
        }
    };
    let Reuse { take, refuse } = match job {
        Some(job) => reusable(plan, partitionings, job, prepared.leftovers),
        None => Reuse::default(),
    };
    let keep: Vec<String> = take.iter().map(|(l, _)| l.id.clone()).collect();
    dest.reuse_staging(&keep)
        .map_err(|e| Failure::server(format!("taking back the staging tables: {e}")))?;
    let mut dropped = prepared.dropped;
    dropped.extend(
        refuse
            .into_iter()
            .map(|(l, why)| format!("{} (this job's, but {why})", l.id)),
    );
    if !dropped.is_empty() {
        host.event(Event::Notice(format!(
            "dropped {} staging table(s) left by a load that stopped before its publish (none \
             of their rows was ever visible): {}",
            dropped.len(),
            dropped.join(", ")
        )));
    }
    if !prepared.waiting.is_empty() {
        host.event(Event::Notice(format!(
            "left {} staging table(s) in place for the job that made them, which publishes \
             them when it resumes (`sluice jobs forget ID` drops them): {}",
            prepared.waiting.len(),
            prepared.waiting.join(", ")
        )));
    }
    let mut held = vec![false; plan.chunks.len()];
    for (l, chunks) in take {
        for c in chunks {
            held[c] = true;
            back.inputs[plan.chunks[c].input] = true;
        }
        back.rows += l.chunks.iter().map(|r| r.rows).sum::<u64>();
        back.tables.push((l.id.clone(), l.chunks));
        back.partitions.push((l.table, l.partition));
    }
    if !back.partitions.is_empty() {
        host.event(Event::Notice(format!(
            "{} staging table(s) that an earlier run of job {} committed hold {} chunk(s) ({} \
             rows): they are published with this run's, not loaded again",
            back.partitions.len(),
            job.map_or(0, |j| j.job),
            back.tables.iter().map(|(_, c)| c.len()).sum::<usize>(),
            crate::units::thousands(back.rows)
        )));
    }
    plan.retain_chunks(|c| !held[c.id]);
    Ok(back)
}

/// The stage strategy as the engine asks for it, for a destination whose type it does not
/// know: a load of a destination that can stage carries a planner ([`Staged`]); any other
/// carries none and loads direct.
pub trait StagePlanner<D: Destination>: Sync {
    /// Whether table `table` of the load could be staged (for counting connections).
    fn may_stage(&self, dest: &D, table: usize) -> bool;

    /// Routes every input (see [`Stage::plan`]).
    fn plan(
        &self,
        plan: &mut Plan,
        dest: &D,
        opts: StageOptions,
        job: Option<&JobRun>,
        host: &dyn Host,
    ) -> Result<Stage, Failure>;

    /// The routed stage as the strategy the engine runs.
    fn strategy<'s>(&self, stage: &'s Stage) -> &'s dyn Strategy<D>;
}

/// The planner of a destination that can stage.
pub struct Staged;

impl<D: Staging> StagePlanner<D> for Staged {
    fn may_stage(&self, dest: &D, table: usize) -> bool {
        matches!(
            dest.partitioning(table),
            Ok(Partitioning::IntegerKey { .. })
        )
    }

    fn plan(
        &self,
        plan: &mut Plan,
        dest: &D,
        opts: StageOptions,
        job: Option<&JobRun>,
        host: &dyn Host,
    ) -> Result<Stage, Failure> {
        Stage::plan(plan, dest, opts, job, host)
    }

    fn strategy<'s>(&self, stage: &'s Stage) -> &'s dyn Strategy<D> {
        stage
    }
}

/// Where each input goes, decided table by table: a staging target, direct, or a fallback
/// with its reason.
struct Routing<'p> {
    plan: &'p Plan,
    mode: Mode,
    fallbacks: Vec<Fallback>,
    targets: Vec<Target>,
    direct_inputs: Vec<usize>,
    /// The (table, partition) of each staging table an earlier run left, published as it is.
    reused: Vec<(usize, usize)>,
    /// Whether rows can be routed on the client, and with what; `Err` says why not.
    spill: Result<Spill, String>,
    /// Bytes a table's spill takes per input byte (sampled when the table is routed).
    growth: &'p dyn Fn(usize) -> f64,
    /// Whether each table is tied to others of the load by foreign keys.
    tied: Vec<bool>,
    /// The tables whose rows are routed on the client.
    routed: Vec<RoutedTable>,
}

/// What routing rows on the client may use: the spill's directory and the room left in it,
/// and which tables' encodings the destination can split into records.
struct Spill {
    dir: std::path::PathBuf,
    /// Bytes free for the spill, less what the tables routed so far are expected to take
    /// (`None` when the file system will not say).
    room: Option<u64>,
    splittable: Vec<bool>,
    /// Spill files the tables routed so far keep open (one per partition).
    files: usize,
}

/// Whether a table's rows are routed on the client.
enum RouteRows {
    /// Its files line up with its partitions: each file's rows go to one staging table.
    Aligned,
    Route,
    /// Its files cross partition bounds, and its rows cannot be routed, for this reason.
    Cannot(String),
}

impl Routing<'_> {
    /// Input `i` goes direct, for `reason`.
    fn fall_back(&mut self, i: usize, reason: String) {
        let plan = self.plan;
        self.fallbacks.push(Fallback {
            file: plan.inputs[i].display.clone(),
            table: plan.tables[plan.inputs[i].table].table.name.clone(),
            reason,
        });
        self.direct_inputs.push(i);
    }

    /// Routes the inputs of table `t`, partitioned as `partitioning`; `ready` says whether
    /// the staging area can be used.
    fn route_table(
        &mut self,
        t: usize,
        partitioning: Partitioning,
        ready: &Result<(), String>,
        reused_inputs: &[bool],
    ) -> Result<(), Failure> {
        let plan = self.plan;
        let table = &plan.tables[t];
        let inputs: Vec<usize> = (0..plan.inputs.len())
            .filter(|&i| plan.inputs[i].table == t && !reused_inputs[i])
            .collect();
        let partitioning = match partitioning {
            // Its rows must be visible to the checks of the tables it is tied to by foreign
            // keys as they load, on their one stream: staged rows appear only at the publish.
            Partitioning::IntegerKey { .. } if self.tied[t] => Partitioning::Unroutable(
                "foreign keys tie it to other tables of this load, whose checks must see its \
                 rows as they load (staged rows appear only at the publish)"
                    .into(),
            ),
            p => p,
        };
        let (column, partitions, default) = match partitioning {
            Partitioning::None => {
                self.direct_inputs.extend(&inputs);
                return Ok(());
            }
            Partitioning::Unroutable(why) => {
                for &i in &inputs {
                    self.fall_back(i, format!("table {}: {why}", table.table.qualified));
                }
                return Ok(());
            }
            Partitioning::IntegerKey {
                column,
                partitions,
                default,
            } => (column, partitions, default),
        };
        if let Err(why) = ready {
            for &i in &inputs {
                self.fall_back(i, why.clone());
            }
            return Ok(());
        }
        let Some(key) = table.columns.iter().position(|c| c.name == column) else {
            for &i in &inputs {
                self.fall_back(
                    i,
                    format!("the partition key column \"{column}\" is not loaded"),
                );
            }
            return Ok(());
        };
        let ranges = Ranges {
            table: t,
            column: &column,
            key,
            partitions: &partitions,
            default,
        };
        let surveys: Vec<Option<Survey>> =
            inputs.iter().map(|&i| self.survey(i, &ranges)).collect();
        let why_not = match self.route_rows(&inputs, &ranges, &surveys) {
            RouteRows::Route => {
                self.route_on_client(&inputs, &ranges);
                return Ok(());
            }
            RouteRows::Cannot(why) => Some(why),
            RouteRows::Aligned => None,
        };
        for (&i, survey) in inputs.iter().zip(&surveys) {
            self.route_input(i, &ranges, survey.as_ref(), why_not.as_deref())?;
        }
        if self.mode == Mode::Auto {
            self.keep_parallel(t, &inputs);
        }
        Ok(())
    }

    /// Whether the rows of a table with `inputs` go to their partitions through the client:
    /// when a file crosses partition bounds ([`Survey::crosses`]), and nothing stands in
    /// the way (a default partition, a partition with rows, standard input, rejects to
    /// isolate, a spill that would not fit).
    fn route_rows(
        &mut self,
        inputs: &[usize],
        r: &Ranges<'_>,
        surveys: &[Option<Survey>],
    ) -> RouteRows {
        let plan = self.plan;
        if !surveys.iter().flatten().any(|s| s.crosses(r)) {
            return RouteRows::Aligned;
        }
        let spill = match &mut self.spill {
            Ok(spill) => spill,
            Err(why) => return RouteRows::Cannot(why.clone()),
        };
        let cannot = if r.default {
            Some("the table has a default partition, which sluice does not route rows to".into())
        } else if let Some(p) = r.partitions.iter().find(|p| p.obstacle.is_some()) {
            Some(format!(
                "{}: {}",
                p.name,
                p.obstacle.as_deref().unwrap_or_default()
            ))
        } else if inputs.iter().any(|&i| plan.inputs[i].identity.is_none()) {
            Some("standard input is read once".into())
        } else if !spill.splittable[r.table] {
            Some("the destination cannot split this table's encoding into rows".into())
        } else if self.reused.iter().any(|x| x.0 == r.table) {
            Some("an earlier run's staging tables of the table wait for their publish".into())
        } else {
            None
        };
        let cannot = cannot
            .or_else(|| crate::route::room_for_files(spill.files + r.partitions.len()).err())
            .or_else(|| crate::route::can_spill(&spill.dir).err());
        if let Some(why) = cannot {
            return RouteRows::Cannot(why);
        }
        let bytes: u64 = inputs.iter().map(|&i| spill_estimate(plan, i)).sum();
        let need = (bytes as f64 * (self.growth)(r.table)) as u64;
        match spill.room {
            Some(room) if need > room => RouteRows::Cannot(format!(
                "routing its rows on the client would spill about {} under {}, which has {} \
                 free (give --temp-dir a directory with room)",
                crate::units::human_bytes(need),
                spill.dir.display(),
                crate::units::human_bytes(room)
            )),
            room => {
                spill.room = room.map(|room| room - need);
                spill.files += r.partitions.len();
                RouteRows::Route
            }
        }
    }

    /// Routes the rows of the table of `inputs` on the client: a staging target for each of
    /// its partitions, loaded from the spill.
    fn route_on_client(&mut self, inputs: &[usize], r: &Ranges<'_>) {
        let routed = self.routed.len();
        self.routed.push(RoutedTable::new(
            r.table,
            r.key,
            r.column.to_string(),
            r.partitions.to_vec(),
        ));
        for (p, partition) in r.partitions.iter().enumerate() {
            self.targets.push(Target {
                table: r.table,
                partition: p,
                name: partition.name.clone(),
                inputs: inputs.to_vec(),
                routed: Some((routed, p)),
            });
        }
    }

    /// What routing reads of input `i`, once: its first [`HEAD_ROWS`] rows' keys and its last
    /// row's partition. `None` for standard input (read once, by the load) and an input with
    /// no chunk.
    fn survey(&self, i: usize, r: &Ranges<'_>) -> Option<Survey> {
        let plan = self.plan;
        plan.inputs[i].identity.as_ref()?;
        let first = plan.chunks.iter().find(|c| c.input == i && c.is_first())?;
        let head = first_values(plan, first, HEAD_ROWS, r.key);
        let last = match head.is_empty() {
            true => None,
            false => self.last_partition(i, r),
        };
        Some(Survey { head, last })
    }

    /// `auto` is never the slow choice: a table some of whose inputs cannot be staged would
    /// load those inside the publish transaction, on one connection, after the switch. Rather
    /// than that, the whole table loads direct, in parallel streams (all or nothing still), and
    /// the summary says why. Not when an earlier run's staging tables of the table wait for
    /// their publish.
    fn keep_parallel(&mut self, t: usize, inputs: &[usize]) {
        let direct = inputs
            .iter()
            .filter(|i| self.direct_inputs.contains(i))
            .count();
        let staged: Vec<usize> = self
            .targets
            .iter()
            .filter(|g| g.table == t)
            .flat_map(|g| g.inputs.clone())
            .collect();
        if direct == 0 || staged.is_empty() || self.reused.iter().any(|r| r.0 == t) {
            return;
        }
        self.targets.retain(|g| g.table != t);
        let table = &self.plan.tables[t].table.qualified;
        for i in staged {
            self.fall_back(
                i,
                format!(
                    "{direct} other input(s) of {table} cannot be staged, so the whole table \
                     loads direct, in parallel streams, rather than those inside the publish \
                     transaction on one connection (--strategy stage forces that)"
                ),
            );
        }
    }

    /// The partition input `i`'s last record belongs to, when it can be read cheaply (the
    /// file's last 64 KiB, uncompressed, and for CSV no quote in them, so that every line end
    /// ends a record): `Some(None)` when it belongs to none.
    fn last_partition(&self, i: usize, r: &Ranges<'_>) -> Option<Option<usize>> {
        let plan = self.plan;
        let start = last_record_start(plan, i)?;
        let tail = Chunk {
            id: usize::MAX,
            input: i,
            start,
            end: None,
        };
        let (_, values) = locate_record(plan, &tail, 1, &[r.key])?;
        r.partition_of(values.into_iter().next()?.as_deref())
    }

    /// Routes input `i` by its first row's key: to its partition's staging target, or direct
    /// with the reason (and `why_not`, why its table's rows are not routed on the client). A
    /// first row that belongs to no partition is a bad row.
    fn route_input(
        &mut self,
        i: usize,
        r: &Ranges<'_>,
        survey: Option<&Survey>,
        why_not: Option<&str>,
    ) -> Result<(), Failure> {
        let plan = self.plan;
        let input = &plan.inputs[i];
        if !plan.chunks.iter().any(|c| c.input == i && c.is_first()) {
            self.direct_inputs.push(i);
            return Ok(());
        }
        if input.identity.is_none() {
            self.fall_back(i, "standard input is read once".into());
            return Ok(());
        }
        let Some((at, raw)) = survey.and_then(|s| s.head.first()) else {
            // Empty, or unreadable: direct says what is wrong, if anything.
            self.direct_inputs.push(i);
            return Ok(());
        };
        let (at, raw) = (*at, raw.clone());
        let Some(value) = raw.as_deref().and_then(|v| parse_i64(trim_c_space(v)).ok()) else {
            self.fall_back(i, "its first row's partition key is not an integer".into());
            return Ok(());
        };
        let Some(p) = r.partitions.iter().position(|p| p.contains(value)) else {
            if r.default {
                self.fall_back(i, "its first row belongs to the default partition".into());
                return Ok(());
            }
            let mut err = InputError::new(
                &input.display,
                format!(
                    "{} = {value} belongs to no partition of {}",
                    r.column, plan.tables[r.table].table.qualified
                ),
            );
            err.line = Some(at.line);
            err.offset = Some(at.offset);
            err.column = Some(r.column.to_string());
            err.value = raw.clone();
            return Err(Failure::Input(Box::new(err)));
        };
        if let Some(why) = &r.partitions[p].obstacle {
            self.fall_back(i, why.clone());
            return Ok(());
        }
        // A file whose last row is in another partition than its first crosses bounds (cut
        // elsewhere than the partitions, or unsorted): found here, before anything loads.
        if self.mode == Mode::Auto {
            if let Some(last) = survey.and_then(|s| s.last).filter(|&q| q != Some(p)) {
                let to = last.map_or("no partition".to_string(), |q| r.partitions[q].name.clone());
                self.fall_back(
                    i,
                    format!(
                        "its rows cross partition bounds: its first row belongs to {}, its last \
                         to {to}{}",
                        r.partitions[p].name,
                        why_not.map_or(String::new(), |w| format!(
                            "; not routed on the client: {w}"
                        ))
                    ),
                );
                return Ok(());
            }
        }
        if self.reused.contains(&(r.table, p)) {
            self.fall_back(
                i,
                format!(
                    "an earlier run's staging table for {} is published as it is; this file's \
                     rows load in the publish transaction",
                    r.partitions[p].name
                ),
            );
            return Ok(());
        }
        match self
            .targets
            .iter_mut()
            .find(|g| g.table == r.table && g.partition == p)
        {
            Some(g) => g.inputs.push(i),
            None => self.targets.push(Target {
                table: r.table,
                partition: p,
                name: r.partitions[p].name.clone(),
                inputs: vec![i],
                routed: None,
            }),
        }
        Ok(())
    }

    /// The work in queue order: one unit per staging target, one per direct chunk of a table
    /// nothing is staged into, biggest first; and the chunks that wait for the publish (the
    /// direct inputs of a table that is also staged).
    fn units(&self) -> (Vec<Unit>, Vec<usize>) {
        let plan = self.plan;
        let mut units: Vec<(u64, Unit)> = Vec::new();
        let mut spilled: Vec<Unit> = Vec::new();
        for (k, g) in self.targets.iter().enumerate() {
            if g.routed.is_some() {
                spilled.push(Unit {
                    chunks: Vec::new(),
                    staged: Some(k),
                    route: false,
                });
                continue;
            }
            let unit = staged_unit(plan, &g.inputs, k);
            units.push((weight(plan, &unit), unit));
        }
        let mut is_direct = vec![false; plan.inputs.len()];
        for &i in &self.direct_inputs {
            is_direct[i] = true;
        }
        // Direct inputs of a table that is also staged wait for the publish transaction: there
        // they load after the switch, so that all of the table's rows appear at once, and no
        // direct stream holds a lock on a parent the publish must lock.
        let staged_table: Vec<bool> = (0..plan.tables.len())
            .map(|t| {
                self.targets.iter().any(|g| g.table == t) || self.reused.iter().any(|r| r.0 == t)
            })
            .collect();
        let (deferred, direct): (Vec<usize>, Vec<usize>) = (0..plan.chunks.len())
            .filter(|&c| is_direct[plan.chunks[c].input])
            .partition(|&c| staged_table[plan.inputs[plan.chunks[c].input].table]);
        for u in direct_units(plan, direct) {
            units.push((weight(plan, &u), u));
        }
        // Biggest first (a stable sort keeps the plan's order among equals).
        units.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        // Routed tables: every chunk is routed first (biggest first: the plan's order), the
        // other work runs while the last are, and the partitions load from the spill at the end.
        let routed_table = |c: &Chunk| {
            let t = plan.inputs[c.input].table;
            self.routed.iter().any(|r| r.table == t)
        };
        let route = plan
            .chunks
            .iter()
            .filter(|c| routed_table(c))
            .map(|c| Unit {
                chunks: vec![c.id],
                staged: None,
                route: true,
            });
        let order = route
            .chain(units.into_iter().map(|(_, u)| u))
            .chain(spilled)
            .collect();
        (order, deferred)
    }

    /// A worker of a job stages every input of a partitioned table, or fails before it
    /// loads: its direct rows for a partition would wait, prepared, for the job's publish,
    /// which waits for their locks (and another worker's staging table for the same
    /// partition could not be switched in over them).
    fn all_staged(&self, routable: &[bool]) -> Result<(), Failure> {
        let plan = self.plan;
        let fell_back = self
            .fallbacks
            .iter()
            .filter(|f| {
                (0..plan.tables.len()).any(|t| routable[t] && plan.tables[t].table.name == f.table)
            })
            .map(|f| format!("{} ({})", f.file, f.reason));
        // An input with no first row to route (a header alone) would load directly.
        let unread = self
            .direct_inputs
            .iter()
            .filter(|&&i| routable[plan.inputs[i].table])
            .filter(|&&i| plan.chunks.iter().any(|c| c.input == i))
            .filter(|&&i| {
                !self
                    .fallbacks
                    .iter()
                    .any(|f| f.file == plan.inputs[i].display)
            })
            .map(|&i| {
                format!(
                    "{} (no first row to route: empty but for a header, or unreadable)",
                    plan.inputs[i].display
                )
            });
        let unstaged: Vec<String> = fell_back.chain(unread).collect();
        if unstaged.is_empty() {
            return Ok(());
        }
        Err(Failure::Usage(format!(
            "--strategy stage in a job of several workers stages every file of a partitioned \
             table, each into the partition of its rows, and {} cannot be: {}. Give --strategy \
             direct, or files that each fall within one partition",
            unstaged.len(),
            unstaged.join("; ")
        )))
    }

    /// `--strategy stage` with nothing to stage is the user's mistake, named with the reasons.
    fn required(&self) -> Result<(), Failure> {
        if !self.targets.is_empty() || !self.reused.is_empty() {
            return Ok(());
        }
        let why: Vec<String> = self
            .fallbacks
            .iter()
            .map(|f| format!("{}: {}", f.file, f.reason))
            .collect();
        Err(Failure::Usage(format!(
            "--strategy stage: no input can be staged (it needs a table partitioned by one \
             integer column, by ranges, lists or hash, and empty partitions){}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join("; "))
            }
        )))
    }
}

/// What routing rows on the client may use for this load, or why it cannot be used.
fn spill_for<D: Staging>(
    plan: &Plan,
    dest: &D,
    isolate_rejects: bool,
    dir: std::path::PathBuf,
) -> Result<Spill, String> {
    if isolate_rejects {
        return Err(
            "rows may be rejected (--max-errors), and the server's errors on routed \
                    rows cannot name their lines"
                .into(),
        );
    }
    if dest.capabilities().publish != Some(PublishModel::OneTransaction) {
        return Err("the destination publishes one partition at a time".into());
    }
    let splittable = (0..plan.tables.len())
        .map(|t| dest.split_encoded(t, &[], 0, &mut |_, _| {}))
        .collect();
    // A tenth of the free space is left to everything else.
    let room = free_space(&dir).map(|free| free / 10 * 9);
    Ok(Spill {
        dir,
        room,
        splittable,
        files: 0,
    })
}

/// Bytes a routed table's spill takes per input byte, as its encoder writes the first
/// thousand records of its first input, with a quarter more for rows unlike them; twice the
/// input where nothing can be sampled.
fn spill_growth<D: Staging>(plan: &Plan, dest: &D, t: usize) -> f64 {
    // Standard input is read once, and never routed.
    let first = plan.chunks.iter().find(|c| {
        let input = &plan.inputs[c.input];
        c.is_first() && input.table == t && matches!(input.source, InputSource::File(_))
    });
    let sampled = first
        .and_then(|c| crate::chunk::encoded_growth(plan, c, &mut dest.encoder(t), SAMPLED_RECORDS));
    sampled.map_or(2.0, |g| g * 1.25)
}

/// Records encoded to estimate a spill's size.
const SAMPLED_RECORDS: u64 = 1000;

/// The input bytes an input's rows amount to, for the spill's estimate (a compressed file's
/// ratio is not known before it is read: four is typical of text).
fn spill_estimate(plan: &Plan, i: usize) -> u64 {
    let input = &plan.inputs[i];
    match input.compression {
        Compression::None => input.size,
        _ => input.size.saturating_mul(4),
    }
}

/// What planning read of an input to route it ([`Routing::survey`]).
struct Survey {
    /// Its first [`HEAD_ROWS`] records: where each is, and its key as written (NULL as `None`).
    head: Vec<(crate::chunk::Found, Option<Vec<u8>>)>,
    /// Its last row's partition (`Some(None)`: none), when that can be read cheaply.
    last: Option<Option<usize>>,
}

impl Survey {
    /// Whether the input's rows cross a partition bound: one of its first rows is in no
    /// partition or in another partition than its first, or its last is. (A shuffled file
    /// shows it at once; a file cut elsewhere than the bounds, at its end.)
    fn crosses(&self, r: &Ranges<'_>) -> bool {
        // Values that are not integers are the load's to name.
        let parts: Vec<Option<usize>> = self
            .head
            .iter()
            .filter_map(|(_, v)| r.partition_of(v.as_deref()))
            .collect();
        match parts.first() {
            None => false,
            Some(None) => !r.default,
            Some(&Some(p)) => {
                parts.iter().any(|&q| q != Some(p)) || self.last.is_some_and(|q| q != Some(p))
            }
        }
    }
}

/// Rows read from an input's start to tell whether it crosses partition bounds.
const HEAD_ROWS: u64 = 100;

/// Bytes read from an input's end to find its last record.
const TAIL: u64 = 64 << 10;

/// Where input `i`'s last record starts, from its last [`TAIL`] bytes: only for an uncompressed
/// file, and for CSV only when those bytes hold no quote (a line end in them then always ends
/// a record). `None` when it cannot be told cheaply.
fn last_record_start(plan: &Plan, i: usize) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let input = &plan.inputs[i];
    let InputSource::File(path) = &input.source else {
        return None;
    };
    if input.compression != Compression::None || input.size == 0 {
        return None;
    }
    let from = input.size.saturating_sub(TAIL);
    let mut f = std::fs::File::open(path).ok()?;
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::with_capacity((input.size - from) as usize);
    f.take(input.size - from).read_to_end(&mut tail).ok()?;
    let d = &input.dialect;
    if d.format == sluice_core::dialect::Format::Csv && tail.contains(&d.quote) {
        return None;
    }
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    match body.iter().rposition(|&b| b == b'\n') {
        Some(k) => Some(from + k as u64 + 1),
        // One line in the tail: the file's only record when the tail is the whole file.
        None => (from == 0 && !d.header).then_some(0),
    }
}

/// A table's range partitions, as routing reads them.
struct Ranges<'a> {
    table: usize,
    column: &'a str,
    /// The key column's position among the loaded columns.
    key: usize,
    partitions: &'a [sluice_core::destination::KeyPartition],
    default: bool,
}

impl Ranges<'_> {
    /// The partition of a key as the input spells it (`None` for NULL): `Some(None)` when it
    /// is in none, `None` when it is not an integer.
    fn partition_of(&self, raw: Option<&[u8]>) -> Option<Option<usize>> {
        let Some(raw) = raw else {
            return Some(self.partitions.iter().position(|p| p.holds_null()));
        };
        let value = parse_i64(trim_c_space(raw)).ok()?;
        Some(self.partitions.iter().position(|p| p.contains(value)))
    }
}

/// Why a destination that publishes one partition at a time cannot stage a load that keeps no
/// ledger: a publish cut off between two partitions is finished by the next run of the same
/// job, which needs the job.
fn per_partition_without_job<D: Staging>(dest: &D, job: Option<&JobRun>) -> Option<&'static str> {
    let per_partition = dest.capabilities().publish == Some(PublishModel::PerPartition);
    (per_partition && job.is_none()).then_some(
        "this destination publishes one partition at a time, and a publish cut off halfway is \
         finished by the next run of the same job: staging needs the resume ledger, which this \
         load does not keep",
    )
}

/// Each table's partitioning, as the destination reads it.
fn partitionings<D: Staging>(plan: &Plan, dest: &D) -> Result<Vec<Partitioning>, Failure> {
    (0..plan.tables.len())
        .map(|t| {
            dest.partitioning(t).map_err(|e| {
                Failure::server(format!(
                    "reading {}'s partitions: {e}",
                    plan.tables[t].table.qualified
                ))
            })
        })
        .collect()
}

impl Stage {
    /// Routes every input: readies the staging area (dropping what dead loads left, taking
    /// back what an earlier run of `job` staged: those chunks leave `plan`), reads each
    /// partitioned table's partitions and each input's first key.
    pub fn plan<D: Staging>(
        plan: &mut Plan,
        dest: &D,
        opts: StageOptions,
        job: Option<&JobRun>,
        host: &dyn Host,
    ) -> Result<Stage, Failure> {
        let StageOptions {
            mode,
            crew,
            jobs,
            isolate_rejects,
            temp_dir,
        } = opts;
        let mut partitionings = partitionings(plan, dest)?;
        let no_job = per_partition_without_job(dest, job);
        for (t, p) in partitionings.iter_mut().enumerate() {
            if !matches!(p, Partitioning::IntegerKey { .. }) {
                continue;
            }
            let chosen = match mode {
                Mode::Auto => dest.auto_loads_directly(t),
                Mode::Required => None,
            };
            if let Some(why) = no_job.map(str::to_string).or(chosen) {
                *p = Partitioning::Unroutable(why);
            }
        }
        // The staging area is readied when a table could use it.
        let routable = |p: &Partitioning| matches!(p, Partitioning::IntegerKey { .. });
        let routable_tables: Vec<bool> = partitionings.iter().map(routable).collect();
        // A worker of a job takes nothing back: the job's staging tables, whichever worker
        // or run made them, wait for its publish, and the chunks they hold are claimed.
        let back = match routable_tables.contains(&true) {
            true => take_back(plan, dest, &partitionings, job.filter(|_| !crew), host)?,
            false => TakenBack::none(plan),
        };
        let plan = &*plan;
        let growth = |t: usize| spill_growth(plan, dest, t);
        let groups = crate::strategy::reference_groups(plan);
        let mut routing = Routing {
            plan,
            mode,
            fallbacks: Vec::new(),
            targets: Vec::new(),
            direct_inputs: Vec::new(),
            reused: back.partitions,
            spill: match crew {
                true => Err(CREW_ROUTES_NOTHING.into()),
                false => spill_for(plan, dest, isolate_rejects, temp_dir),
            },
            growth: &growth,
            tied: (0..plan.tables.len())
                .map(|t| groups.iter().any(|g| g.contains(&t)))
                .collect(),
            routed: Vec::new(),
        };
        for (t, p) in partitionings.into_iter().enumerate() {
            routing.route_table(t, p, &back.ready, &back.inputs)?;
        }
        if mode == Mode::Required {
            routing.required()?;
        }
        if crew {
            routing.all_staged(&routable_tables)?;
        }
        let (units, deferred) = routing.units();
        let n = routing.targets.len();
        let router = match routing.routed.is_empty() {
            true => None,
            false => {
                let dir = routing
                    .spill
                    .as_ref()
                    .map(|s| s.dir.clone())
                    .unwrap_or_default();
                let route_units = units.iter().filter(|u| u.route).count();
                Some(Router::new(routing.routed, &dir, route_units))
            }
        };
        Ok(Stage {
            units,
            targets: Mutex::new(routing.targets),
            begun: Mutex::new(vec![None; n]),
            fallbacks: Mutex::new(routing.fallbacks),
            times: Mutex::new(StepTimes {
                reused_staging_tables: routing.reused.len(),
                reused_rows: back.rows,
                ..StepTimes::default()
            }),
            staged_inputs: Mutex::new(back.inputs),
            deferred: Mutex::new(deferred),
            chunk_inputs: plan.chunks.iter().map(|c| c.input).collect(),
            jobs,
            isolate_rejects,
            job: job.map(|j| j.job),
            finished: Mutex::new(back.tables),
            published: AtomicBool::new(false),
            router,
            crew,
            table_names: plan.tables.iter().map(|t| t.table.name.clone()).collect(),
            input_names: plan
                .inputs
                .iter()
                .map(|i| (i.display.clone(), plan.tables[i.table].table.name.clone()))
                .collect(),
        })
    }

    /// The inputs that went through `direct`, and why.
    pub fn fallbacks(&self) -> Vec<Fallback> {
        lock(&self.fallbacks).clone()
    }

    /// Where the time went, and what routing did.
    pub fn times(&self) -> StepTimes {
        let mut times = lock(&self.times).clone();
        if let Some(router) = &self.router {
            times.routed = router.summary(|t| self.table_names[t].clone());
        }
        times
    }

    /// The partition input `i`'s rows went to through a staging table, if they did.
    pub fn relation(&self, i: usize) -> Option<String> {
        if !self.staged(i) {
            return None;
        }
        let targets = lock(&self.targets);
        targets
            .iter()
            .find(|t| t.inputs.contains(&i) && t.routed.is_none())
            .map(|t| t.name.clone())
    }

    /// Whether input `i` was loaded through a staging table.
    pub fn staged(&self, i: usize) -> bool {
        lock(&self.staged_inputs).get(i).copied().unwrap_or(false)
    }
}

/// A staged unit: every chunk of `inputs`, in file order.
fn staged_unit(plan: &Plan, inputs: &[usize], target: usize) -> Unit {
    let mut chunks: Vec<usize> = (0..plan.chunks.len())
        .filter(|&c| inputs.contains(&plan.chunks[c].input))
        .collect();
    chunks.sort_by_key(|&c| (plan.chunks[c].input, plan.chunks[c].start));
    Unit {
        chunks,
        staged: Some(target),
        route: false,
    }
}

fn weight(plan: &Plan, unit: &Unit) -> u64 {
    unit.chunks
        .iter()
        .map(|&c| plan.chunks[c].weight(&plan.inputs))
        .sum()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl<D: Staging> Strategy<D> for Stage {
    fn name(&self) -> &'static str {
        // What happened, once the load ran: a staged file can have been loaded directly after all.
        let inputs = lock(&self.staged_inputs);
        let staged = inputs.iter().any(|&s| s);
        let direct = inputs.iter().any(|&s| !s);
        match (staged, direct) {
            (true, true) => "stage+direct",
            (true, false) => "stage",
            _ => "direct",
        }
    }

    fn route(&self, _plan: &Plan) -> Vec<Unit> {
        self.units.clone()
    }

    fn router(&self) -> Option<&Router> {
        self.router.as_ref()
    }

    fn spilled(&self, unit: &Unit) -> Option<(usize, usize)> {
        lock(&self.targets)[unit.staged?].routed
    }

    fn begin_unit(
        &self,
        dest: &D,
        stream: &mut D::Stream<'_>,
        unit: &Unit,
    ) -> Result<(), DestinationError> {
        let Some(k) = unit.staged else { return Ok(()) };
        let (table, partition) = {
            let targets = lock(&self.targets);
            (targets[k].table, targets[k].partition)
        };
        dest.begin_stage(stream, table, partition)?;
        lock(&self.begun)[k] = Some(Instant::now());
        Ok(())
    }

    fn end_unit(
        &self,
        dest: &D,
        stream: &mut D::Stream<'_>,
        unit: &Unit,
        records: &[ChunkRecord],
    ) -> Result<(), DestinationError> {
        let Some(k) = unit.staged else { return Ok(()) };
        let loaded = lock(&self.begun)[k]
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let built = dest.finish_stage(stream, self.job, records)?;
        lock(&self.finished).push((built.table.clone(), records.to_vec()));
        let mut times = lock(&self.times);
        times.staging_tables += 1;
        times.load_seconds += secs(loaded);
        times.index_seconds += secs(built.index);
        times.analyze_seconds += secs(built.analyze);
        drop(times);
        let inputs = lock(&self.targets)[k].inputs.clone();
        let mut staged = lock(&self.staged_inputs);
        for i in inputs {
            staged[i] = true;
        }
        Ok(())
    }

    fn drop_unit(
        &self,
        dest: &D,
        stream: &mut D::Stream<'_>,
        unit: &Unit,
    ) -> Result<(), DestinationError> {
        match unit.staged {
            Some(_) => dest.abandon_stage(stream),
            None => Ok(()),
        }
    }

    fn redo(
        &self,
        dest: &D,
        stream: &mut D::Stream<'_>,
        unit: &Unit,
        chunk: &Chunk,
        e: &DestinationError,
    ) -> Option<Vec<Unit>> {
        let k = unit.staged?;
        // A worker of a job loads no file in the publish: another worker's host runs it.
        if self.crew {
            return None;
        }
        let refused = self.isolate_rejects
            && matches!(e.kind, ErrorKind::Rejected | ErrorKind::Conflict { .. });
        if refused && !dest.outside_partition(e) {
            if dest.abandon_stage(stream).is_err() {
                return None;
            }
            let target = lock(&self.targets)[k].clone();
            let mut fallbacks = lock(&self.fallbacks);
            for &i in &target.inputs {
                let (file, table) = self.input_names[i].clone();
                fallbacks.push(Fallback {
                    file,
                    table,
                    reason: format!(
                        "the server refused a row of {}; its rows were loaded in the publish \
                         transaction, where bad rows are isolated",
                        target.name
                    ),
                });
            }
            lock(&self.deferred).extend(unit.chunks.iter().copied());
            return Some(Vec::new());
        }
        if !dest.outside_partition(e) || dest.abandon_stage(stream).is_err() {
            return None;
        }
        let spanning = chunk.input;
        let mut targets = lock(&self.targets);
        let target = targets[k].clone();
        let (file, table) = self.input_names[spanning].clone();
        lock(&self.fallbacks).push(Fallback {
            file,
            table,
            reason: format!(
                "a row after its first belongs to another partition than {}",
                target.name
            ),
        });
        let (go, stay): (Vec<usize>, Vec<usize>) = unit
            .chunks
            .iter()
            .partition(|&&c| self.chunk_inputs[c] == spanning);
        let mut units = Vec::new();
        if !stay.is_empty() {
            units.push(Unit {
                chunks: stay,
                staged: Some(targets.len()),
                route: false,
            });
            targets.push(Target {
                inputs: target
                    .inputs
                    .into_iter()
                    .filter(|&i| i != spanning)
                    .collect(),
                ..target
            });
            lock(&self.begun).push(None);
        }
        // The file loads in the publish transaction, after the switch.
        lock(&self.deferred).extend(go);
        Some(units)
    }

    fn not_redone(&self, dest: &D, e: &DestinationError) -> Option<String> {
        (self.crew && dest.outside_partition(e)).then(|| {
            "this row belongs to another partition than the file's first row, and a worker of \
             a job of several stages each file into the partition of its first row: give \
             --strategy direct for such files (nothing of the job is visible)"
                .to_string()
        })
    }

    fn abandon(&self, dest: &D, failure: &Failure, host: &dyn Host) {
        // A job's staging tables go when the job fails, with the claims of their chunks, under
        // the job's lock ([`crate::crew::fail`]): dropped here, their chunks would stay claimed.
        if self.published.load(Ordering::SeqCst) || self.crew {
            return;
        }
        let times = self.times();
        let finished = times.staging_tables + times.reused_staging_tables;
        // A job the same command resumes publishes them then, without loading them again;
        // otherwise a failed load leaves nothing. A routed table's staging tables hold no
        // whole chunk, so no later run can publish them: a load that routed rows leaves none.
        if self.job.is_some() && !failure.abandons_job() && self.router.is_none() {
            if finished > 0 {
                host.event(Event::Notice(format!(
                    "kept the {finished} staging table(s) this load finished (invisible to the \
                     tables' users): the run that resumes the job publishes them without \
                     loading their rows again"
                )));
            }
            return;
        }
        if let Err(e) = dest.discard_staging() {
            host.event(Event::Warning(format!(
                "could not drop this load's staging tables ({e}); the next load drops them"
            )));
        }
    }

    fn publish<'s>(
        &self,
        dest: &'s D,
        streams: Vec<D::Stream<'s>>,
        run: &mut ChunkRunner<'_, 's, D>,
        commit: &Commit<'_>,
    ) -> Result<(), Failure> {
        let host = commit.host;
        if self.crew {
            return self.hand_over_staged(dest, streams, commit);
        }
        // A signal from here on waits for the publish and the commits: one phase.
        let phase = CommitPhase::begin(host);
        let deferred = lock(&self.deferred).clone();
        let staged = lock(&self.staged_inputs).iter().filter(|&&s| s).count();
        if staged > 0 || !deferred.is_empty() {
            // Rows loaded after a partition's own step could fail once others are visible:
            // with any, every staging table goes in with them, in one transaction.
            let model = match dest.capabilities().publish {
                Some(PublishModel::PerPartition) if !deferred.is_empty() => {
                    Some(PublishModel::OneTransaction)
                }
                m => m,
            };
            host.event(Event::Info(format!(
                "publishing the staging tables of {staged} input(s){} {}, then gathering the \
                 tables' statistics",
                if deferred.is_empty() {
                    String::new()
                } else {
                    format!(" and {} chunk(s) that could not be staged", deferred.len())
                },
                match (model, dest.capabilities().publish) {
                    (Some(PublishModel::PerPartition), _) => "one partition at a time",
                    (_, Some(PublishModel::PerPartition)) => {
                        "in one transaction, their rows appended rather than switched in one \
                         partition at a time, so that they and the rows loaded after them \
                         appear at once or not at all"
                    }
                    _ => "in one transaction",
                }
            )));
            let started = Instant::now();
            let switched = match model {
                Some(PublishModel::PerPartition) => self.publish_per_partition(dest, host)?,
                _ => self.publish_at_once(dest, run, &deferred, host)?,
            };
            self.published.store(true, Ordering::SeqCst);
            let mut times = lock(&self.times);
            times.publish_seconds = secs(started.elapsed());
            times.publish_attempts = switched.attempts;
            times.appended = switched.appended;
        }
        host.event(Event::Point("published"));
        // Direct streams load only tables that nothing was staged into.
        commit_all(dest, streams, commit).map_err(|e| match staged > 0 {
            true => e.and_then_say(" (the staged tables were published just before this commit)"),
            false => e,
        })?;
        if staged > 0 {
            lock(&self.times).parent_analyze_seconds = secs(dest.gather_statistics(self.jobs));
        }
        if phase.end() {
            host.event(Event::Notice(
                "the interrupted load finished its publish: every row is committed".into(),
            ));
        }
        Ok(())
    }
}

impl Stage {
    /// A worker of a job publishes nothing itself: its staging tables, committed with the
    /// claims of their chunks, wait for the job's publish, which the worker whose hand-over
    /// completes the job runs in the transaction that records the job's commit decision. Its
    /// direct streams (tables it did not stage) prepare, as in a direct job.
    fn hand_over_staged<'s, D: Staging>(
        &self,
        dest: &'s D,
        streams: Vec<D::Stream<'s>>,
        commit: &Commit<'_>,
    ) -> Result<(), Failure> {
        let finished = lock(&self.finished).len();
        if finished > 0 {
            commit.host.event(Event::Info(format!(
                "{finished} staging table(s) committed, invisible to the tables' users: the \
                 job's publish switches them in with every other worker's once all are done"
            )));
        }
        commit_all(dest, streams, commit)
    }

    /// One transaction: the switch, then the rows that could not be staged, then the ledger
    /// rows of every staged chunk, then the commit. All of the staged tables' rows appear at
    /// once, or none (the direct streams for other tables are still open, and roll back if
    /// this fails).
    fn publish_at_once<'s, D: Staging>(
        &self,
        dest: &'s D,
        run: &mut ChunkRunner<'_, 's, D>,
        deferred: &[usize],
        host: &dyn Host,
    ) -> Result<PublishTimes, Failure> {
        let invisible = |e: DestinationError| {
            crate::run::destination_failure(&e, format!("{e}; no row of this load is visible"))
        };
        let mut publisher = self.publisher(dest)?;
        let switched = dest.switch_in(&mut publisher).map_err(invisible)?;
        let mut records: Vec<ChunkRecord> = lock(&self.finished)
            .iter()
            .flat_map(|(_, r)| r.clone())
            .collect();
        // Routed chunks count once their rows are all switched in: here.
        records.extend(self.router.iter().flat_map(Router::records));
        run(&mut publisher, deferred, records)?;
        host.event(Event::Point("publish"));
        publisher
            .fire_deferred_checks()
            .and_then(|()| publisher.commit())
            .map_err(invisible)?;
        Ok(switched)
    }

    /// One durable step per staging table, each recording its chunks as its switch happens
    /// (readers may see the partitions appear one by one). A failure part way leaves the
    /// steps taken: the same command, run again, finishes the publish. (A load with rows that
    /// could not be staged publishes at once instead: see [`Stage::publish`].)
    fn publish_per_partition<D: Staging>(
        &self,
        dest: &D,
        host: &dyn Host,
    ) -> Result<PublishTimes, Failure> {
        let finished = lock(&self.finished).clone();
        let mut times = PublishTimes::default();
        for (k, (table, records)) in finished.iter().enumerate() {
            let step = dest.switch_one(table, self.job, records).map_err(|e| {
                crate::run::destination_failure(
                    &e,
                    format!(
                        "publishing staging table {table}: {e}; {k} of {} staging table(s) \
                         were published before it, and stay (this one's step may have taken \
                         too: the next run settles it): run the same command again to \
                         publish the rest",
                        finished.len()
                    ),
                )
            })?;
            times.attempts = times.attempts.max(step.attempts);
            times.appended.extend(step.appended);
            // Published: no longer among the staging tables a failure keeps or drops.
            lock(&self.finished).retain(|(t, _)| t != table);
            host.event(Event::Point("switched"));
        }
        Ok(times)
    }

    /// The connection the publish runs on.
    fn publisher<'s, D: Staging>(&self, dest: &'s D) -> Result<D::Stream<'s>, Failure> {
        dest.open_stream(0).map_err(|e| {
            crate::run::destination_failure(&e, format!("opening the publish connection: {e}"))
        })
    }
}
