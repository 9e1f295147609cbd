//! How a load's rows reach their tables and become visible: the load-strategy seam.
//!
//! The engine runs the same loop for every strategy (streams take chunks from one queue,
//! convert and send them, and write each chunk's ledger row where its rows commit: beside
//! them for direct work, in the publish for staged work); a [`Strategy`] decides the rest, at
//! four points:
//!
//! 1. `prepare`: before any stream opens (create staging tables, check partitions);
//! 2. `route`: the units of work streams take from the queue, in order: one chunk each
//!    (direct, biggest first), or all of one partition's chunks (stage), which a stream loads in
//!    a transaction of their own between `begin_unit` and `end_unit`;
//! 3. `build`: on each stream after its last chunk, before the barrier (deferred checks;
//!    indexes and statistics on a staging table);
//! 4. `publish`: once every stream has finished cleanly, make the load visible (commit every
//!    stream; or swap the staging tables in, in one transaction).
//!
//! [`Direct`] loads straight into the target tables, committed back to back. The seed paper's
//! staging-and-switch design is [`crate::stage::Stage`].

use crate::events::{CommitPhase, Event, Host};
use crate::failure::{Failure, ServerKind};
use crate::plan::{Chunk, Plan};
use sluice_core::destination::{Destination, DestinationError, DestinationStream, ErrorKind};
use sluice_core::ledger::ChunkRecord;

/// A piece of work one stream takes from the queue: chunks (indexes into `plan.chunks`)
/// loaded in order, into the stream's long transaction, or, for a staged unit, in a
/// transaction of their own that the strategy begins and ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub chunks: Vec<usize>,
    /// The strategy's own number for a staged unit; `None` for direct work.
    pub staged: Option<usize>,
    /// A route unit: its chunks are converted and routed to their partitions' spills
    /// ([`crate::route`]), on no connection.
    pub route: bool,
}

/// A way of loading; see the module doc for when each step runs.
pub trait Strategy<D: Destination>: Sync {
    /// Its name, for the summary and the JSON report.
    fn name(&self) -> &'static str;

    /// Before any stream opens.
    fn prepare(&self, _plan: &Plan, _dest: &D) -> Result<(), Failure> {
        Ok(())
    }

    /// The work, in the order the streams take it.
    fn route(&self, plan: &Plan) -> Vec<Unit> {
        direct_units(plan, 0..plan.chunks.len())
    }

    /// Before a staged unit's first chunk, on its stream.
    fn begin_unit(
        &self,
        _dest: &D,
        _stream: &mut D::Stream<'_>,
        _unit: &Unit,
    ) -> Result<(), DestinationError> {
        Ok(())
    }

    /// After a staged unit's last chunk, on its stream; `records` are its chunks' ledger rows
    /// (empty when the load keeps no ledger), which the publish writes.
    fn end_unit(
        &self,
        _dest: &D,
        _stream: &mut D::Stream<'_>,
        _unit: &Unit,
        _records: &[ChunkRecord],
    ) -> Result<(), DestinationError> {
        Ok(())
    }

    /// A staged unit that has nothing to load after all (another worker of its job claimed
    /// every chunk): rolls back its staging table, leaving the stream ready.
    fn drop_unit(
        &self,
        _dest: &D,
        _stream: &mut D::Stream<'_>,
        _unit: &Unit,
    ) -> Result<(), DestinationError> {
        Ok(())
    }

    /// A staged unit failed on `chunk` with `e`: the units that redo all of its chunks
    /// another way (its transaction is rolled back first), or `None` when the failure stands.
    fn redo(
        &self,
        _dest: &D,
        _stream: &mut D::Stream<'_>,
        _unit: &Unit,
        _chunk: &Chunk,
        _e: &DestinationError,
    ) -> Option<Vec<Unit>> {
        None
    }

    /// What to add to the failure of a staged unit that [`redo`](Strategy::redo) did not redo
    /// (`e`, on its stream), when the strategy knows more than the server said.
    fn not_redone(&self, _dest: &D, _e: &DestinationError) -> Option<String> {
        None
    }

    /// The routing of rows to partitions on the client, when the strategy routes some.
    fn router(&self) -> Option<&crate::route::Router> {
        None
    }

    /// For a staged unit that loads a partition's routed rows from the spill: the routed
    /// table (an index into the router's) and partition.
    fn spilled(&self, _unit: &Unit) -> Option<(usize, usize)> {
        None
    }

    /// After a stream's last chunk, before the commit barrier, on its long transaction.
    fn build(&self, stream: &mut D::Stream<'_>) -> Result<(), DestinationError> {
        stream.fire_deferred_checks()
    }

    /// The load failed with `failure` before its publish (every stream has rolled back):
    /// clean up what the strategy committed on the side, or keep it for the run that resumes.
    fn abandon(&self, _dest: &D, _failure: &Failure, _host: &dyn Host) {}

    /// Once every stream has finished cleanly: makes the load visible. `streams` are the
    /// long transactions that did direct work, committed as `commit` says; `run` loads chunks
    /// on a stream as the engine does, for a strategy that loads some inside its publish
    /// transaction, and writes there their ledger rows and the ones it is given (a staged
    /// unit's, published with them).
    fn publish<'s>(
        &self,
        dest: &'s D,
        streams: Vec<D::Stream<'s>>,
        run: &mut ChunkRunner<'_, 's, D>,
        commit: &Commit<'_>,
    ) -> Result<(), Failure>;
}

/// Loads chunks (indexes into `plan.chunks`) on a stream, as the engine loads them, naming the
/// row behind any error, then writes in the stream's transaction the ledger rows of those
/// chunks and of the records it is given.
pub type ChunkRunner<'r, 's, D> = dyn FnMut(&mut <D as Destination>::Stream<'s>, &[usize], Vec<ChunkRecord>) -> Result<(), Failure>
    + 'r;

/// How the streams' transactions commit at the end.
pub struct Commit<'a> {
    pub host: &'a dyn Host,
    /// The ledger's job, when the load keeps one.
    pub job: Option<i64>,
    /// Commit through two-phase commit, with prepared transactions named from this prefix:
    /// every stream prepared, the decision recorded in the ledger, then each committed; a
    /// rerun finishes what a crash left prepared. `None`: plain COMMITs, back to back.
    pub prepare: Option<String>,
    /// A crew's worker: its prepared transactions are left for the crew's decision (in
    /// `prepared`), not decided here ([`crate::crew::settle`]).
    pub hand_over: bool,
    pub prepared: std::sync::Mutex<Vec<String>>,
}

/// A chunk smaller than this (and than a quarter of the plan's chunk size) may share a load
/// with its neighbours of the same table.
pub(crate) const SMALL_CHUNK: u64 = 256 << 10;
/// At most this many bytes, and chunks, share one load: a round trip or two per MiB is
/// nothing, and smaller units keep the streams evenly busy.
const SHARED_BYTES: u64 = 1 << 20;
const SHARED_CHUNKS: usize = 1000;
/// Small chunks share loads only when there are at least this many: a few files keep a unit
/// each, so that every stream has work (and its own transaction).
const SHARED_FROM: usize = 64;

/// Whether a load of the unit's table may go on into `unit` rather than end first: a unit of
/// one chunk too big to share a load. Small chunks' units stay apart, so that a few small files
/// keep every stream busy, as [`direct_units`] means them to.
pub fn load_goes_on_into(plan: &Plan, unit: &Unit) -> bool {
    match unit.chunks.as_slice() {
        [c] => plan.chunks[*c].weight(&plan.inputs) >= SMALL_CHUNK,
        _ => false,
    }
}

/// The direct units of `chunks`, in the given order: one per chunk, except that consecutive
/// small chunks of one table (many small files) form one unit, which a stream loads in one
/// go and which goes back on the queue whole.
pub fn direct_units(plan: &Plan, chunks: impl IntoIterator<Item = usize>) -> Vec<Unit> {
    let table = |c: usize| plan.inputs[plan.chunks[c].input].table;
    let weight = |c: usize| plan.chunks[c].weight(&plan.inputs);
    let chunks: Vec<usize> = chunks.into_iter().collect();
    let small = match chunks.iter().filter(|&&c| weight(c) < SMALL_CHUNK).count() {
        n if n >= SHARED_FROM => SMALL_CHUNK.min(plan.chunk_size / 4),
        _ => 0,
    };
    let mut units: Vec<Unit> = Vec::new();
    let mut bytes = 0;
    for c in chunks {
        let w = weight(c);
        let joins = units.last().is_some_and(|u| {
            let l = u.chunks[u.chunks.len() - 1];
            w < small
                && weight(l) < small
                && table(l) == table(c)
                && bytes + w <= SHARED_BYTES
                && u.chunks.len() < SHARED_CHUNKS
        });
        match (joins, units.last_mut()) {
            (true, Some(u)) => {
                u.chunks.push(c);
                bytes += w;
            }
            _ => {
                units.push(Unit {
                    chunks: vec![c],
                    staged: None,
                    route: false,
                });
                bytes = w;
            }
        }
    }
    units
}

/// Straight into the target tables; every stream's transaction committed back to back once
/// all have finished. Its one window, a crash between the first and the last COMMIT, is
/// documented in the README.
pub struct Direct;

impl<D: Destination> Strategy<D> for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn publish<'s>(
        &self,
        dest: &'s D,
        streams: Vec<D::Stream<'s>>,
        _run: &mut ChunkRunner<'_, 's, D>,
        commit: &Commit<'_>,
    ) -> Result<(), Failure> {
        commit_all(dest, streams, commit)
    }
}

/// Commits the streams: back to back, or through prepared transactions when `commit` says so.
/// A Ctrl-C meanwhile waits for the last commit rather than leave the load half committed.
pub fn commit_all<D: Destination>(
    dest: &D,
    streams: Vec<D::Stream<'_>>,
    commit: &Commit<'_>,
) -> Result<(), Failure> {
    let host = commit.host;
    let phase = CommitPhase::begin(host);
    match (&commit.prepare, commit.job) {
        (Some(prefix), Some(_)) if commit.hand_over => {
            let ids = prepare_all(dest, streams, prefix)?;
            host.event(Event::Point("prepared"));
            *crate::run::lock(&commit.prepared) = ids;
        }
        (Some(prefix), Some(job)) => commit_prepared(dest, streams, host, job, prefix)?,
        _ => commit_back_to_back(dest, streams, host)?,
    }
    if phase.end() {
        host.event(Event::Notice(
            "the interrupted load finished its commit: every row is committed".into(),
        ));
    }
    Ok(())
}

/// Readers of the load's tables, held back by the destination while several transactions
/// commit one after another ([`Destination::hold_readers`]); let go when dropped, on every way
/// out of the commit (and whatever the destination kept for a hold, when there was none).
pub(crate) struct ReadersHeld<'a, D: Destination>(&'a D);

impl<D: Destination> Drop for ReadersHeld<'_, D> {
    fn drop(&mut self) {
        self.0.release_readers();
    }
}

/// Holds readers back before `commits` transactions (among them the prepared `prepared`)
/// commit in turn; one commit needs no hold. A hold that fails is said, and the commits go
/// ahead: readers may then see them land one by one, as without a hold.
pub(crate) fn hold_readers<'a, D: Destination>(
    dest: &'a D,
    host: &dyn Host,
    prepared: &[String],
    commits: usize,
) -> ReadersHeld<'a, D> {
    if let Err(e) = try_hold(dest, prepared, commits) {
        warn_unheld(host, commits, &e);
    }
    ReadersHeld(dest)
}

/// The destination's hold before `commits` transactions commit; one commit needs none.
fn try_hold<D: Destination>(
    dest: &D,
    prepared: &[String],
    commits: usize,
) -> Result<(), DestinationError> {
    match commits < 2 {
        true => Ok(()),
        false => dest.hold_readers(prepared),
    }
}

/// Says that readers could not be held back while `commits` transactions commit, and why.
fn warn_unheld(host: &dyn Host, commits: usize, e: &DestinationError) {
    host.event(Event::Warning(format!(
        "readers of the load's tables could not be held back while its {commits} \
         transactions commit ({e}): a reader's query in those milliseconds may see \
         some of them committed and not the others"
    )));
}

/// Plain COMMITs, one stream after another: a crash between the first and the last leaves some
/// committed, which the ledger knows and a rerun completes. Readers are held back meanwhile.
fn commit_back_to_back<D: Destination>(
    dest: &D,
    streams: Vec<D::Stream<'_>>,
    host: &dyn Host,
) -> Result<(), Failure> {
    let total = streams.len();
    let _held = hold_readers(dest, host, &[], total);
    for (committed, s) in streams.into_iter().enumerate() {
        if committed == 1 {
            host.event(Event::Point("commit"));
        }
        if let Err(e) = s.commit() {
            return Err(Failure::server_kind(
                ServerKind::Commit,
                format!(
                    "COMMIT failed on stream {} of {total} after {committed} committed: {e}. \
                     The committed streams' rows are visible",
                    committed + 1
                ),
            ));
        }
    }
    Ok(())
}

/// Rolls back prepared transactions after `e` stopped the commit, and says so.
fn undo<D: Destination>(
    dest: &D,
    prepared: &[String],
    e: sluice_core::destination::DestinationError,
    what: &str,
) -> Failure {
    let _ = dest.finish_all_prepared(prepared, false);
    crate::run::destination_failure(
        &e,
        format!("{what}: {e}; every stream's transaction was rolled back, nothing committed"),
    )
}

/// Prepares every stream's transaction, named from `prefix`; on a failure, rolls back those
/// prepared (and the rest with their connections).
fn prepare_all<D: Destination>(
    dest: &D,
    streams: Vec<D::Stream<'_>>,
    prefix: &str,
) -> Result<Vec<String>, Failure> {
    let ids: Vec<String> = (0..streams.len())
        .map(|n| format!("{prefix}_{n}"))
        .collect();
    // At once, each on a thread: across a long path, one round trip for all rather than one
    // each.
    let results: Vec<Result<String, DestinationError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .into_iter()
            .zip(&ids)
            .map(|(s, id)| scope.spawn(move || s.prepare(id)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DestinationError::new(
                        ErrorKind::Other,
                        "a stream's prepare stopped on a bug in sluice",
                    ))
                })
            })
            .collect()
    });
    // Those that did prepare are rolled back with the others when any failed (an id never
    // prepared is no error to roll back).
    let mut named = Vec::with_capacity(ids.len());
    let mut failed = None;
    for (asked, result) in ids.into_iter().zip(results) {
        match result {
            Ok(name) => named.push(name),
            Err(e) => {
                failed.get_or_insert(e);
                named.push(asked);
            }
        }
    }
    let Some(e) = failed else {
        return Ok(named);
    };
    // A prepare whose answer was lost may have prepared under a name the destination chose:
    // this run's prefix finds those too (it is this process's alone).
    if let Ok(left) = dest.prepared(prefix) {
        let more: Vec<String> = left.into_iter().filter(|id| !named.contains(id)).collect();
        named.extend(more);
    }
    Err(undo(dest, &named, e, "preparing a stream's transaction"))
}

/// Records the decision to commit `ids`. When recording it fails, whether it was recorded is
/// read back: a decision that did reach the ledger (its answer was lost) is carried out; one
/// that did not rolls everything back; and when even that cannot be read, everything stays
/// prepared for the same command to finish as the ledger says, since rolling back a decided
/// commit would half-commit the load.
fn decide<D: Destination>(dest: &D, job: i64, ids: &[String]) -> Result<(), Failure> {
    let Err(e) = dest.decide_commit(job, ids) else {
        return Ok(());
    };
    match dest.decided(job) {
        Ok(decided) if ids.iter().all(|id| decided.contains(id)) => Ok(()),
        Ok(_) => Err(undo(
            dest,
            ids,
            e,
            "recording the commit decision in the ledger",
        )),
        Err(unread) => Err(crate::run::destination_failure(
            &e,
            format!(
                "recording the commit decision in the ledger failed ({e}), and whether it was \
                 recorded cannot be read ({unread}): every stream's transaction stays prepared \
                 (invisible); run the same command again, which commits or rolls them back as \
                 the ledger says"
            ),
        )),
    }
}

/// Two-phase commit: every stream prepared (nothing visible yet), the decision to commit them
/// recorded in the ledger, then each committed, readers held back meanwhile. Before the
/// decision, a failure rolls every prepared stream back; after it, a rerun of the same command
/// commits what is still prepared. No moment leaves a part of the load visible for good
/// without the rest.
fn commit_prepared<D: Destination>(
    dest: &D,
    streams: Vec<D::Stream<'_>>,
    host: &dyn Host,
    job: i64,
    prefix: &str,
) -> Result<(), Failure> {
    // Whatever the destination keeps for the hold goes on every way out, the failures too.
    let _kept = ReadersHeld(dest);
    let ids = prepare_all(dest, streams, prefix)?;
    host.event(Event::Point("prepared"));
    let _held = decide_holding(dest, host, job, &ids)?;
    host.event(Event::Point("decided"));
    commit_all_prepared(dest, host, &ids, |n, e| {
        Failure::server_kind(
            ServerKind::Lost,
            format!(
                "committing prepared stream {} of {} failed: {e}. The decision to commit is \
                 in the ledger: whatever stays prepared (invisible) is committed by the same \
                 command, run again",
                n + 1,
                ids.len()
            ),
        )
    })
}

/// Records the decision to commit `ids` ([`decide`]) while the readers' hold starts (where the
/// destination lets neither wait for the other, across a long path they take one round trip,
/// not two or three). The hold queues behind the prepared transactions' locks, which only the
/// commits (or, when the decision fails, the rollbacks) release; either way it is let go when
/// the returned guard drops. A hold that failed is said only when the commits go ahead.
fn decide_holding<'a, D: Destination>(
    dest: &'a D,
    host: &dyn Host,
    job: i64,
    ids: &[String],
) -> Result<ReadersHeld<'a, D>, Failure> {
    std::thread::scope(|scope| {
        let holding = scope.spawn(|| try_hold(dest, ids, ids.len()));
        let decided = decide(dest, job, ids);
        let held = ReadersHeld(dest);
        let hold = holding.join().unwrap_or_else(|_| {
            Err(DestinationError::new(
                ErrorKind::Other,
                "the hold stopped on a bug in sluice",
            ))
        });
        decided?;
        if let Err(e) = hold {
            warn_unheld(host, ids.len(), &e);
        }
        Ok(held)
    })
}

/// Commits the decided prepared transactions `ids`, readers held back meanwhile. `failed`
/// words the failure of the id at its index.
pub(crate) fn hold_and_commit<D: Destination>(
    dest: &D,
    host: &dyn Host,
    ids: &[String],
    failed: impl Fn(usize, DestinationError) -> Failure,
) -> Result<(), Failure> {
    let _held = hold_readers(dest, host, ids, ids.len());
    commit_all_prepared(dest, host, ids, failed)
}

/// Commits the decided prepared transactions `ids`, all sent together: one round trip. Where
/// the host stops at the point `commit` (a test that kills or pauses the load between two
/// commits), the first goes alone and the rest after that point.
fn commit_all_prepared<D: Destination>(
    dest: &D,
    host: &dyn Host,
    ids: &[String],
    failed: impl Fn(usize, DestinationError) -> Failure,
) -> Result<(), Failure> {
    let alone = match host.stops_at("commit") {
        true => ids.len().min(1),
        false => ids.len(),
    };
    let (first, rest) = ids.split_at(alone);
    dest.finish_all_prepared(first, true)
        .map_err(|(n, e)| failed(n, e))?;
    if rest.is_empty() {
        return Ok(());
    }
    host.event(Event::Point("commit"));
    dest.finish_all_prepared(rest, true)
        .map_err(|(n, e)| failed(first.len() + n, e))
}

/// Groups of the plan's tables tied by foreign keys among themselves (a table referencing
/// itself is a group of one), each ordered parents first. A foreign key's check runs in the
/// loading transaction, which sees its own rows and committed ones, never a sibling stream's:
/// so a group's rows must load on one stream, parents first, for the check to see them.
pub fn reference_groups(plan: &Plan) -> Vec<Vec<usize>> {
    let n = plan.tables.len();
    let refs: Vec<Vec<usize>> = plan
        .tables
        .iter()
        .map(|t| {
            (0..n)
                .filter(|&p| t.table.references.contains(&plan.tables[p].table.id))
                .collect()
        })
        .collect();
    // Connected components, by a small union-find.
    let mut root: Vec<usize> = (0..n).collect();
    fn find(root: &mut [usize], mut i: usize) -> usize {
        while root[i] != i {
            root[i] = root[root[i]];
            i = root[i];
        }
        i
    }
    for (t, parents) in refs.iter().enumerate() {
        for &p in parents {
            let (a, b) = (find(&mut root, t), find(&mut root, p));
            root[a] = b;
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for r in 0..n {
        let members: Vec<usize> = (0..n).filter(|&t| find(&mut root, t) == r).collect();
        let tied = members.len() > 1 || members.iter().any(|&t| refs[t].contains(&t));
        if !tied {
            continue;
        }
        // Parents first: repeatedly take a table whose parents (other than itself) are
        // placed; a cycle of keys is placed in plan order.
        let mut order: Vec<usize> = Vec::new();
        let mut rest = members;
        while !rest.is_empty() {
            let next = rest
                .iter()
                .position(|&t| refs[t].iter().all(|p| *p == t || order.contains(p)))
                .unwrap_or(0);
            order.push(rest.remove(next));
        }
        groups.push(order);
    }
    groups
}

/// Puts the direct work of each [`reference_groups`] group into one unit, first in the queue
/// (it is the longest), parents' chunks first. Staged units and route units (whose rows go to
/// staging tables, not to the table) stay as they are.
pub fn keep_references_together(plan: &Plan, units: Vec<Unit>) -> Vec<Unit> {
    let groups = reference_groups(plan);
    if groups.is_empty() {
        return units;
    }
    let table_of = |c: usize| plan.inputs[plan.chunks[c].input].table;
    let mut tied: Vec<Unit> = Vec::new();
    let mut rest: Vec<Unit> = units;
    for group in &groups {
        let mut chunks: Vec<usize> = Vec::new();
        for &t in group {
            for u in rest.iter().filter(|u| u.staged.is_none() && !u.route) {
                chunks.extend(u.chunks.iter().copied().filter(|&c| table_of(c) == t));
            }
        }
        rest.retain(|u| {
            u.staged.is_some() || u.route || !u.chunks.iter().any(|&c| chunks.contains(&c))
        });
        if !chunks.is_empty() {
            tied.push(Unit {
                chunks,
                staged: None,
                route: false,
            });
        }
    }
    tied.extend(rest);
    tied
}
