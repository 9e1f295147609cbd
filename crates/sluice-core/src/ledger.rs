//! The resume ledger's records: what a destination stores about each load (a *job*), in the
//! target database itself, so that the same command run again loads exactly what is missing.
//!
//! The ledger lives beside the data because only there can it never disagree with it: a
//! chunk's record commits in the same transaction as the chunk's rows (or, for staged rows,
//! as the publish that makes them visible). These are the records both sides share; the
//! engine decides what a rerun does with them (`sluice::load::ledger`), and a destination
//! ([`Ledger`](crate::destination::Ledger)) stores and reads them.

/// One input file of a job, as it was when the job began: enough to tell that a file changed
/// between two runs without reading all of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    /// The absolute path, links resolved.
    pub path: String,
    /// The table the file loads into, as the destination's SQL names it.
    pub table: String,
    /// That table's [`id`](crate::destination::TableInfo::id): a file loaded into a table
    /// since dropped and created again is not loaded in the new one.
    pub table_id: String,
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub modified_ns: i64,
    /// How the file's bytes become rows (its format options and the table's columns), in
    /// words: the same file loaded with other options is other data.
    pub settings: String,
    /// A digest of the size and of sampled blocks (beginning, end, and evenly spaced ones),
    /// hex: cheap for terabytes, and it catches a file rewritten within the same second.
    pub fingerprint: String,
}

/// What names a file in the ledger: its path, table, size, modification time, fingerprint and
/// settings (its table's id aside, which [`FileRecord::table_id`] checks apart).
pub type FileIdentity<'a> = (&'a str, &'a str, i64, i64, &'a str, &'a str);

impl FileRecord {
    /// What names this file in the ledger.
    pub fn identity(&self) -> FileIdentity<'_> {
        (
            self.path.as_str(),
            self.table.as_str(),
            self.size as i64,
            self.modified_ns,
            self.fingerprint.as_str(),
            self.settings.as_str(),
        )
    }

    /// What differs between the file as recorded (`self`) and as it is now, in words, or
    /// `None` when it is the same file.
    pub fn changes(&self, now: &FileRecord) -> Option<String> {
        let mut what = Vec::new();
        if self.size != now.size {
            what.push(format!(
                "its size went from {} to {} bytes",
                self.size, now.size
            ));
        }
        if self.modified_ns != now.modified_ns {
            what.push("its modification time changed".to_string());
        }
        if self.fingerprint != now.fingerprint && self.size == now.size {
            what.push("its content changed".to_string());
        }
        (!what.is_empty()).then(|| what.join(", "))
    }
}

/// One chunk a job committed: its file (an index into the job's files), its byte range and
/// the rows the server stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRecord {
    pub file: u32,
    pub start: u64,
    /// Exclusive end; `None` to the end of the file (a compressed file is one chunk).
    pub end: Option<u64>,
    pub rows: u64,
}

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// A sluice process is running it now (it holds the job's lock).
    Running,
    /// Its process ended without finishing it (killed, or the machine died); the same command
    /// resumes it.
    Interrupted,
    /// It failed and said why; the same command resumes it.
    Failed,
    /// Every chunk is committed.
    Finished,
    /// Replaced by a `--restart` of the same command.
    Abandoned,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Interrupted => "interrupted",
            JobState::Failed => "failed",
            JobState::Finished => "finished",
            JobState::Abandoned => "abandoned",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        [
            JobState::Running,
            JobState::Interrupted,
            JobState::Failed,
            JobState::Finished,
            JobState::Abandoned,
        ]
        .into_iter()
        .find(|j| j.as_str() == s)
    }

    /// Whether the same command would pick it up again.
    pub fn resumable(self) -> bool {
        matches!(self, JobState::Interrupted | JobState::Failed)
    }
}

/// What a job is, before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// Names the job across runs: a digest of its tables and input paths (hex).
    pub key: String,
    /// The newest job of this key the load saw when it looked (`None`: none). The destination
    /// records the job only if the ledger holds no newer one by then, under a lock on the key:
    /// else a run of the same command started at the same moment, and recording would load
    /// the files twice ([`crate::destination::Ledger::begin_job`]).
    pub newest: Option<i64>,
    pub files: Vec<FileRecord>,
    /// The chunk size the files were cut with, so that a resume cuts them the same way.
    pub chunk_size: u64,
    /// The options that decide how bytes become rows (format, delimiters, columns...), in
    /// words; a resume with other options is refused.
    pub settings: String,
    pub chunks_total: u64,
    pub bytes_total: u64,
}

/// What a destination says when it refuses to record a new job because a run of the same
/// command recorded one since this run looked (`Ledger::begin_job`'s `ErrorKind::Transient`).
pub const RECORDED_SINCE_LOOKED: &str =
    "another run of the same command recorded its job since this one looked";

/// What a destination says when the job a load resumes finished since the load looked: its run
/// ended while this one waited for its lock (`Ledger::resume_job`'s `ErrorKind::Transient`).
pub fn finished_since_looked(job: i64) -> String {
    format!(
        "job {job} finished while this run waited for it; run the same command again: it loads \
         nothing that is already in"
    )
}

/// A job as the ledger holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub key: String,
    pub state: JobState,
    /// Why it failed, for a failed job.
    pub message: Option<String>,
    pub tables: Vec<String>,
    pub chunk_size: u64,
    pub settings: String,
    pub chunks_total: u64,
    pub chunks_done: u64,
    pub rows_done: u64,
    /// Chunks (and their rows) that staging tables of the job hold: loaded by a run that
    /// stopped before its publish, they wait for the run that resumes the job to publish them.
    pub staged_chunks: u64,
    pub staged_rows: u64,
    pub bytes_total: u64,
    /// When it began and (if it did) finished, as the destination prints times.
    pub started: String,
    pub finished: Option<String>,
}

/// The finished job that last loaded a file (the same path, table, size, time, fingerprint
/// and settings), as [`Ledger::loaded_by`](crate::destination::Ledger::loaded_by) finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedBy {
    pub job: i64,
    /// When the job finished, as the destination prints times.
    pub finished: String,
    /// The file's index among that job's files.
    pub file: u32,
}

/// Where a job put a file's rows: the relation (a table, or the partition a staging table
/// became), as the destination's SQL names it. Recorded when the job finishes, with the
/// relation's [`RelationState`] then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub file: u32,
    pub relation: String,
}

/// What a destination can tell cheaply about a relation: whether it is the same object
/// (`id`), whether its storage was replaced since (`generation`: a truncate or a rewrite
/// changes it), and whether it holds any row. A partial delete changes none of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationState {
    /// The relation as the destination prints it for people (briefly where it can).
    pub name: String,
    pub id: String,
    /// `None` when the destination cannot tell (a job recorded before it kept them).
    pub generation: Option<String>,
    /// `None` when the role may not read the relation.
    pub has_rows: Option<bool>,
}

/// A finished job's placement of one file, with the relation's state then (at the job's
/// finish) and now (`None`: the relation is gone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementCheck {
    pub file: u32,
    pub relation: String,
    pub then: RelationState,
    pub now: Option<RelationState>,
}

/// One worker's place in a *crew*: a job that several `sluice load` processes, on one host or
/// many, load together (`--job NAME --workers N --worker K`). The target's own transactions
/// coordinate them, where the ledger lives: no side channel between the workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrewJoin {
    /// The job's name, the same on every worker (`--job`).
    pub name: String,
    /// How many workers the job has (`--workers`).
    pub workers: u32,
    /// This worker's slot, 1 to `workers` (`--worker`): a restarted worker takes its slot
    /// back, and a second process in a live slot is refused.
    pub worker: u32,
    /// This worker's host name and process id, for `sluice jobs` and the errors.
    pub host: String,
    pub pid: u32,
}

impl CrewJoin {
    /// The ledger key of a crew's job: its name, not its paths (hosts see different paths).
    pub fn key(&self) -> String {
        format!("crew:{}", self.name)
    }
}

/// What joining a crew's job found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    pub job: i64,
    /// The chunk size the job's first worker cut its files with: every worker cuts with it, so
    /// that a chunk of a shared file is the same chunk on every host.
    pub chunk_size: u64,
    /// Each of this worker's files' index among the job's files (a file another worker
    /// registered, the same path and content, keeps its index: a shared file).
    pub files: Vec<u32>,
    /// This slot's earlier run prepared its part, which stands: this run only waits for the
    /// others (these are its prepared transactions).
    pub prepared: Vec<String>,
    /// The job is decided already (its staging tables switched in, its commit recorded),
    /// this slot's part among it: this run loads nothing, and finishes the job or waits.
    pub decided: bool,
}

/// Whether a chunk is this worker's to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Claimed by the stream's transaction: it loads the chunk, and the claim commits (or
    /// prepares, or rolls back) with its rows.
    Mine,
    /// Another worker loaded it: committed, or prepared to commit with the job.
    Done,
    /// Another worker's open transaction holds it now: that worker loads it (if it dies, the
    /// claim comes back, and its slot's rerun loads it).
    Busy,
}

/// What a worker's turn at the end of its part gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrewTurn {
    /// Every slot has prepared its part, and this worker recorded the decision to commit all
    /// of these prepared transactions (`gids`): it commits them. In the same transaction it
    /// switched in the job's `staged` staging tables, every worker's.
    Decided { gids: Vec<String>, staged: usize },
    /// Slots still loading (or not started): this worker waits for them.
    Waiting { prepared: u32, workers: u32 },
    /// Another worker finished the job while this one (run again, with nothing left to load)
    /// was joining it.
    Finished,
}

/// One worker of a crew, as the ledger holds it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorkerRecord {
    pub worker: u32,
    pub host: String,
    pub pid: u32,
    /// `loading`, `prepared`, `committed` or `failed`.
    pub state: String,
    /// Whether its process holds the slot now.
    pub live: bool,
    pub streams: u32,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// The verdict's kind for its part of the load (`link-bound`...), once it has one.
    pub verdict: Option<String>,
    pub message: Option<String>,
    /// When its run joined, and when its slot last changed (its hand-over, for a worker
    /// done), seconds since the Unix epoch by the server's clock.
    pub joined_at: f64,
    pub updated_at: f64,
}

/// What a worker reports of its own part when it hands it over.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerPart {
    pub streams: u32,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub verdict: Option<String>,
    /// Its rows wait in staging tables for the job's publish (`--strategy stage`): like a
    /// prepared part, invisible until the job commits, and dropped if the job fails.
    pub staged: bool,
}

/// A crew's job as its workers poll it.
#[derive(Clone, Debug, PartialEq)]
pub struct CrewStatus {
    pub state: JobState,
    pub message: Option<String>,
    pub workers: u32,
    /// The decision's prepared transactions, once a worker recorded it (`None` before; a job
    /// whose parts were all staged or committed decides with none to commit).
    pub decided: Option<Vec<String>>,
    pub slots: Vec<WorkerRecord>,
    /// When the job finished, seconds since the Unix epoch by the server's clock.
    pub finished_at: Option<f64>,
}
