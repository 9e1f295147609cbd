//! A load as its caller asks for it: the plain "low" layer of a load, before any file is
//! opened or any table described. The command line fills it from flags; a job file or another
//! program can fill it as well. Planning ([`crate::plan::build`]) turns it into the checked
//! "high" layer, a [`crate::plan::Plan`].

use crate::rejects::Threshold;
pub use sluice_core::destination::Wire;
use sluice_core::dialect::Format;
use std::path::PathBuf;
use std::time::Duration;

/// How the rows reach their tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyChoice {
    /// Stage where it applies, direct elsewhere.
    Auto,
    /// Straight into the tables.
    Direct,
    /// Stage; at least one input must be staged.
    Stage,
}

/// Whether the streams commit through two-phase commit (prepared transactions, the decision
/// in the ledger), which closes the window between the first and the last commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareChoice {
    /// Where the destination can prepare as many transactions as there are streams.
    Auto,
    /// Always; a destination that cannot is a usage error.
    On,
    /// Never: plain commits, back to back.
    Off,
}

/// How many streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jobs {
    /// This machine's cores, at least 2 and at most 8.
    Default,
    /// Exactly this many (fewer when there are fewer chunks or free connection slots).
    Fixed(usize),
    /// Start with one and add streams while each raises the throughput.
    Auto,
}

/// Everything a load is asked to do.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Input paths; `-` is standard input.
    pub files: Vec<String>,
    /// The files as checked before the plan (filled by `check_inputs`).
    pub checked: CheckedInputs,
    /// Load every file into this table (else each file's name up to its first dot).
    pub table: Option<String>,
    pub format: Option<Format>,
    pub delimiter: Option<String>,
    pub quote: Option<String>,
    pub escape: Option<String>,
    pub header: bool,
    pub match_header: bool,
    pub null: Option<String>,
    /// The column list as written (`a,"My Col"`); the destination's identifier rules read it.
    pub columns: Option<String>,
    pub strategy: StrategyChoice,
    pub jobs: Jobs,
    /// Bytes per load message.
    pub copy_buffer: usize,
    /// Target chunk size; `None` for the default (an eighth of the input, 16 MiB to 1 GiB).
    pub chunk_size: Option<u64>,
    pub dry_run: bool,
    /// Lost connections each stream survives.
    pub retries: u32,
    /// The first wait before a stream reconnects (doubling on each retry).
    pub retry_pause: Duration,
    /// How long the publish waits for each lock; `None` for the destination's default.
    pub lock_wait: Option<Duration>,
    pub max_errors: Option<Threshold>,
    pub rejects: Option<PathBuf>,
    /// Load everything as a new job, whatever the ledger says.
    pub restart: bool,
    /// Two-phase commit of the streams.
    pub prepare: PrepareChoice,
    /// The encoding rows travel in.
    pub wire: Wire,
    /// Where rows routed to their partitions on the client wait for their partition's load
    /// (`None`: the system's temporary directory).
    pub temp_dir: Option<PathBuf>,
    /// This load is one worker of a job several load together (`--job`, `--workers`).
    pub crew: Option<crate::crew::Crew>,
}

impl LoadSpec {
    /// A load of `files` with every option at its default.
    pub fn new(files: Vec<String>) -> LoadSpec {
        LoadSpec {
            files,
            table: None,
            format: None,
            delimiter: None,
            quote: None,
            escape: None,
            header: false,
            match_header: false,
            null: None,
            columns: None,
            strategy: StrategyChoice::Auto,
            jobs: Jobs::Default,
            copy_buffer: 256 << 10,
            chunk_size: None,
            dry_run: false,
            retries: 5,
            retry_pause: crate::run::RETRY_PAUSE,
            lock_wait: None,
            max_errors: None,
            rejects: None,
            restart: false,
            prepare: PrepareChoice::Auto,
            wire: Wire::Auto,
            temp_dir: None,
            crew: None,
            checked: CheckedInputs::default(),
        }
    }
}

/// The inputs as [`crate::load::check_inputs`] found them (each file opened once, its size,
/// time, fingerprint, held bytes, identity, compression and line ending read), kept for the
/// plan: 100,000 small files are opened once before the load, not twice. Empty until checked;
/// a clone shares it, and the plan takes them (a second plan of the same spec, a resume's with
/// another chunk size, opens the files again).
#[derive(Clone, Debug, Default)]
pub struct CheckedInputs(
    pub(crate) std::sync::Arc<std::sync::Mutex<Option<Vec<crate::plan::Input>>>>,
);

impl CheckedInputs {
    /// Whether the inputs were checked, and not yet taken by a plan.
    pub fn is_filled(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }
}
