//! What the load engine asks of a destination database, and what a destination reports back.
//!
//! The engine plans, reads, splits, converts, schedules and reports; a destination crate
//! (`sluice-postgres` today, MariaDB/MySQL next) alone speaks its database's protocol. This is
//! the one interface between them. It is defined here, in the crate both depend on, so that a
//! second destination implements it without touching the engine. It does no I/O itself: the
//! implementations do, behind these blocking calls (the engine runs one thread per stream).
//!
//! A stream is one connection holding one transaction: the engine opens `jobs` of them, loads
//! chunks through them (`begin_copy`, `send`, `finish_copy`), lets each fire its deferred
//! checks before the commit barrier, and commits them only when all have finished. Dropping a
//! stream without `commit` rolls it back: the safe outcome is the default one.

use crate::error::RecordError;
use crate::ledger::{
    ChunkRecord, Claim, CrewJoin, CrewStatus, CrewTurn, FileRecord, Job, JobSpec, JobState, Joined,
    LoadedBy, Placement, PlacementCheck, WorkerPart,
};
use crate::records::{Fields, RecordParser};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A table as a destination describes it, in the terms every destination shares: what the
/// engine needs to plan a load (columns in table order) and to name things in messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Identifies this very table while it exists: a table dropped and created again under
    /// the same name has another id (PostgreSQL: its oid). The ledger keys loaded files on it.
    pub id: String,
    pub schema: String,
    pub name: String,
    /// The name as the destination's SQL quotes it (`"s"."My T"`), for messages.
    pub qualified: String,
    /// Every insertable column, in table order.
    pub columns: Vec<ColumnInfo>,
    /// The ids of the tables its foreign keys reference (itself included, for a key on its own
    /// rows): a load of both must let the check see the parent's rows.
    pub references: Vec<String>,
}

/// One column of a [`TableInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    /// The type as the destination spells it (`numeric(15,2)`), for messages and summaries.
    pub type_name: String,
    pub not_null: bool,
    /// Whether sluice converts this column's values itself; the others go to the server as
    /// text, and the summary names them.
    pub client_converted: bool,
}

/// One table of a load as the plan chose it: the table, and the columns the input's fields
/// map to, in field order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadTable {
    pub table: TableInfo,
    pub columns: Vec<String>,
}

/// How a destination's SQL writes names: what `--columns` and messages follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifierRules {
    /// The character that quotes a name (`"` in PostgreSQL, `` ` `` in MariaDB).
    pub quote: char,
    /// Whether unquoted names fold to lower case (PostgreSQL); otherwise they are kept.
    pub fold_lower: bool,
    /// Whether column names match ignoring case (MariaDB's do, PostgreSQL's do not).
    pub case_insensitive_columns: bool,
    /// The longest name, in bytes; longer ones are cut (PostgreSQL: 63) or refused.
    pub max_bytes: usize,
}

/// How a destination makes staged partitions visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishModel {
    /// Every staging table is switched in by one transaction: readers see all of them at
    /// once, or none (PostgreSQL: DETACH/ATTACH are transactional DDL).
    OneTransaction,
    /// Each partition is switched in by a durable step of its own (its DDL commits
    /// implicitly, as MariaDB's `EXCHANGE PARTITION` does), which the ledger records so that a
    /// rerun finishes a publish cut off halfway. A reader may see partitions appear one by
    /// one.
    PerPartition,
}

/// What a destination can do, stated rather than assumed: the engine asks, and takes the named
/// fallback where a capability is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub identifiers: IdentifierRules,
    /// How staged partitions are published; `None` when the destination cannot stage at all.
    pub publish: Option<PublishModel>,
    /// Whether a savepoint works inside a staged unit (PostgreSQL's `COPY ... FREEZE` refuses
    /// them; so does a bulk path that must see an empty table). Without them, a staged unit
    /// whose rows the server refuses is loaded again where rows can be isolated.
    pub savepoints_in_staged_unit: bool,
    /// How many stream transactions can be prepared at once (two-phase commit) on this
    /// server now, or why none can (PostgreSQL: `max_prepared_transactions` is 0).
    pub prepare: Result<u32, String>,
}

/// How rows travel to the server: the destination's binary tuples (the least work for the
/// server), or text lines (fewer bytes for most tables, where the link is the limit). Either
/// way the client has validated every value it converts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Wire {
    /// The destination's choice (binary where it converts every column).
    #[default]
    Auto,
    Binary,
    Text,
}

/// A stream's TCP connection as the kernel saw it (Linux's `TCP_INFO`), summed over the
/// connections a stream used. Times are microseconds the sender spent with data to deliver
/// (`busy`), and the parts of it when the receiver's advertised window (`rwnd_limited`) or the
/// sender's own buffer (`sndbuf_limited`) held it back rather than congestion control: a
/// stream held by a window most of its busy time moves about window / round trip, and more
/// streams or bigger buffers lift it; one held by congestion shares a full link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    pub connections: u32,
    /// Smoothed round trip, microseconds (the last connection's).
    pub rtt_us: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// The window the receiver last advertised, bytes.
    pub receive_window: u64,
    /// The socket's send buffer as the kernel counts it (autotuned or set), bytes.
    pub send_buffer: u64,
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_retransmitted: u64,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
}

impl Transport {
    /// What the connection did between `earlier` and these figures (no connection counted):
    /// the counts' differences, the window figures now.
    pub fn since(self, earlier: Transport) -> Transport {
        Transport {
            connections: 0,
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_acked: self.bytes_acked.saturating_sub(earlier.bytes_acked),
            bytes_retransmitted: self
                .bytes_retransmitted
                .saturating_sub(earlier.bytes_retransmitted),
            busy_us: self.busy_us.saturating_sub(earlier.busy_us),
            rwnd_limited_us: self.rwnd_limited_us.saturating_sub(earlier.rwnd_limited_us),
            sndbuf_limited_us: self
                .sndbuf_limited_us
                .saturating_sub(earlier.sndbuf_limited_us),
            ..self
        }
    }

    /// Two connections' figures as one stream's: counts add, the window figures are the
    /// later's.
    pub fn then(self, later: Transport) -> Transport {
        Transport {
            connections: self.connections + later.connections,
            rtt_us: later.rtt_us,
            cwnd_bytes: later.cwnd_bytes,
            receive_window: later.receive_window,
            send_buffer: later.send_buffer,
            bytes_sent: self.bytes_sent + later.bytes_sent,
            bytes_acked: self.bytes_acked + later.bytes_acked,
            bytes_retransmitted: self.bytes_retransmitted + later.bytes_retransmitted,
            busy_us: self.busy_us + later.busy_us,
            rwnd_limited_us: self.rwnd_limited_us + later.rwnd_limited_us,
            sndbuf_limited_us: self.sndbuf_limited_us + later.sndbuf_limited_us,
        }
    }
}

/// A destination database, as the engine uses it during a load.
///
/// Before the load: [`describe`](Destination::describe) each table the inputs name, read
/// [`free_slots`](Destination::free_slots), then fix the plan's tables with
/// [`set_tables`](Destination::set_tables); their indexes are what the other calls take.
pub trait Destination: Sync {
    /// Describes a table named as the destination's SQL names it (`t`, `s.t`, `"My T"`). A
    /// name that is not a loadable table fails with [`ErrorKind::Usage`].
    fn describe(&mut self, name: &str) -> Result<TableInfo, DestinationError>;

    /// [`describe`](Destination::describe) for each of `names`, in their order; a destination
    /// may ask for them together (one round trip across a long path, not one per table).
    fn describe_all(&mut self, names: &[String]) -> Vec<Result<TableInfo, DestinationError>> {
        names.iter().map(|n| self.describe(n)).collect()
    }

    /// Connections the server still accepts (`None` when it will not say).
    fn free_slots(&self) -> Option<u64>;

    /// The encoding the load asks for on the wire, before [`set_tables`](Destination::set_tables).
    /// A destination with one encoding ignores it.
    fn prefer_wire(&mut self, _wire: Wire) {}

    /// Whether table `table` (after [`set_tables`](Destination::set_tables)) may travel in
    /// either encoding, for `--wire auto` to choose.
    fn wire_choice(&self, _table: usize) -> bool {
        false
    }

    /// An encoder of table `table` in `wire` (binary or text), to compare their sizes;
    /// destinations without a choice give their one encoder.
    fn encoder_in(&self, table: usize, _wire: Wire) -> Self::Encoder<'_> {
        self.encoder(table)
    }

    /// Sends table `table`'s rows in `wire` from now on (one [`wire_choice`] allows).
    ///
    /// [`wire_choice`]: Destination::wire_choice
    fn set_wire(&mut self, _table: usize, _wire: Wire) {}

    /// Whether the server is on this machine (no network between them).
    fn server_is_local(&self) -> bool {
        false
    }

    /// The server's round trip, where it can be measured.
    fn server_round_trip(&self) -> Option<std::time::Duration> {
        None
    }

    /// What the path carries to the server on `streams` connections for about `seconds`, to
    /// a sink that stores nothing, bytes a second; `None` when the path carried `budget`
    /// bytes of theirs in all before the time was up (the measurement stops there: the path
    /// moves that much sooner).
    fn measure_link(
        &self,
        _streams: usize,
        _seconds: f64,
        _budget: u64,
    ) -> Result<Option<f64>, String> {
        Err("this destination cannot measure the path".into())
    }

    /// What the server stores on `streams` connections for about `seconds` of rows that do
    /// not cross the network (made on its side), counted as its binary form, bytes a second.
    fn measure_server(&self, _streams: usize, _seconds: f64) -> Result<f64, String> {
        Err("this destination cannot measure the server".into())
    }

    /// Fixes the load's tables, in the plan's order.
    fn set_tables(&mut self, tables: &[LoadTable]) -> Result<(), DestinationError>;

    /// How table `table` is loaded, for the summary (`binary`, `text`).
    fn load_format(&self, table: usize) -> &'static str;

    /// The target as the summary shows it, with no password.
    fn target(&self) -> String;

    /// What this destination can do (see [`Capabilities`]).
    fn capabilities(&self) -> Capabilities;

    /// Whether streams writing into table `table` (an index into the tables given to
    /// [`set_tables`](Destination::set_tables)) at once slow each other down inside the server
    /// more than streams writing into different tables do. Where so, a stream takes a table no
    /// other stream is loading first, while the queue has one, rather than the biggest work
    /// first (which ends the streams together). MariaDB: an InnoDB table that is not
    /// partitioned (two sessions appending to one took 0.82 of the time one took alone).
    fn writers_contend(&self, _table: usize) -> bool {
        false
    }

    /// Why this session cannot load at all (read-only, a standby), if so: the load is refused
    /// before anything starts.
    fn cannot_write(&self) -> Option<String> {
        None
    }

    /// The next step for a server that spent most of a load in `class`, in this database's
    /// terms (its settings, its wait events): the verdict's advice. `waits` are the samples,
    /// `tables` what the loaded tables carry (indexes, triggers, checks), so that advice names
    /// only what applies. `None` for the engine's own, database-neutral words.
    fn advice(
        &self,
        _class: Activity,
        _waits: &ServerWaits,
        _tables: &TableCosts,
    ) -> Option<String> {
        None
    }

    /// What the loaded tables carry that costs the server per row, for the verdict's advice.
    fn table_costs(&self) -> TableCosts {
        TableCosts::default()
    }

    /// The destination's own name for an activity class, where it has one that its users know
    /// better than the engine's (PostgreSQL calls its log `WAL`): the verdict says `WAL-bound`
    /// rather than `log-bound`.
    fn activity_label(&self, _class: Activity) -> Option<&'static str> {
        None
    }

    /// How the verdict describes a server busy in `class`, where the engine's words ("on CPU")
    /// would claim more than this database shows (MariaDB cannot tell CPU from its data
    /// files).
    fn activity_words(&self, _class: Activity) -> Option<&'static str> {
        None
    }

    /// One connection in one open transaction.
    type Stream<'a>: DestinationStream
    where
        Self: 'a;

    /// Opens stream `n` (0-based) and begins its transaction.
    fn open_stream(&self, n: usize) -> Result<Self::Stream<'_>, DestinationError>;

    /// A hint, given before the load's serial steps (the ledger, the wire's choice): `streams`
    /// streams and the watch will open. A destination may start opening their connections in
    /// the background, so that across a long path their round trips overlap those steps;
    /// [`Destination::open_stream`] and [`Destination::watch`] then take them. Connections
    /// opened ahead beyond `streams` (by [`Destination::open_early`]) are closed now, and
    /// those not taken by [`Destination::close_ahead`].
    fn open_ahead(&self, _streams: usize) {}

    /// An earlier hint than [`Destination::open_ahead`], before the tables are described:
    /// about `streams` streams will run. A destination may start their connections now where
    /// that gains (across a long path, their round trips then overlap the description's), or
    /// ignore it. [`Destination::open_ahead`] follows with the plan's count, and closes any
    /// beyond it; or [`Destination::close_ahead`] closes them all.
    fn open_early(&self, _streams: usize) {}

    /// Closes the connections opened ahead that no stream took: the streams are done, or none
    /// will run (nothing to load, a crew's worker that only waits for the others).
    fn close_ahead(&self) {}

    /// The streams opened from now on will be prepared (two-phase commit) under names that
    /// start with `prefix`, or, with `None`, committed. A destination that must name a
    /// transaction when it begins (XA's `XA START`) begins theirs under such names; another
    /// may plan its commit by it.
    fn name_transactions(&self, _prefix: Option<&str>) {}

    /// Turns records into what this destination loads.
    type Encoder<'a>: RecordEncoder + Send
    where
        Self: 'a;

    /// An encoder for table `table` (an index into the plan's tables), with the destination's
    /// own type rules and session (time zone); one per stream and table.
    fn encoder(&self, table: usize) -> Self::Encoder<'_>;

    /// Starts watching `streams` streams for waits on each other (a key two of them insert),
    /// which the server cannot see as a deadlock; a stream caught waiting fails with
    /// [`ErrorKind::Conflict`]. Called once before the streams open.
    fn watch(&self, streams: usize) -> Result<(), DestinationError>;

    /// Stream `n` has no more work (it waits for the commit): what its session does from now
    /// on says nothing about the load's bottleneck, and is not sampled.
    fn stream_done(&self, _n: usize) {}

    /// Stops watching (after every stream has finished, before the commits), and says what
    /// the load's sessions were doing while it watched.
    fn stop_watching(&self) -> ServerWaits;

    /// The server settings that matter to a bulk load, as `(name, value)`, for reports.
    fn settings(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The key columns of an index or constraint the server named, for finding rows by key.
    fn key_columns(&self, index: &str) -> Option<Vec<String>>;

    /// The bytes a chunk's data starts and ends with for table `table` (binary COPY framing,
    /// say), around the encoded records.
    fn framing(&self, table: usize) -> (&[u8], &[u8]);

    /// Splits `encoded` (whole records of table `table`, as its encoder wrote them, without
    /// framing) into records, calling `each` with each record's end and the integer in its
    /// loaded column `column` (`None` for a NULL or a value that is not an integer): how the
    /// engine routes converted rows to their partitions on the client. `false` when this
    /// destination's encoding cannot be split (the default), and then nothing is routed.
    fn split_encoded(
        &self,
        _table: usize,
        _encoded: &[u8],
        _column: usize,
        _each: &mut dyn FnMut(usize, Option<i64>),
    ) -> bool {
        false
    }

    /// Commits (or, with `commit` false, rolls back) the prepared transaction `id`. One that
    /// is no longer prepared (already finished) is not an error.
    fn finish_prepared(&self, _id: &str, _commit: bool) -> Result<(), DestinationError> {
        Err(DestinationError::new(
            ErrorKind::Usage,
            "this destination cannot prepare a transaction",
        ))
    }

    /// As [`Destination::finish_prepared`] for each of `ids`, at once where the destination can
    /// (one round trip rather than one each). Every id is tried, whatever an earlier one did;
    /// on errors, the first, with its id's index (ids after it may be finished or not: a rerun
    /// finishes what is left, and one already finished is no error).
    fn finish_all_prepared(
        &self,
        ids: &[String],
        commit: bool,
    ) -> Result<(), (usize, DestinationError)> {
        let mut first = None;
        for (n, id) in ids.iter().enumerate() {
            if let Err(e) = self.finish_prepared(id, commit) {
                first.get_or_insert((n, e));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The prepared transactions whose ids start with `prefix`, left by a run that stopped
    /// between its prepares and its commits.
    fn prepared(&self, _prefix: &str) -> Result<Vec<String>, DestinationError> {
        Ok(Vec::new())
    }

    /// Records in the ledger, in a transaction of its own and before the first of them
    /// commits, that job `job` commits the prepared transactions `ids`: from here on a rerun
    /// commits whichever of them is still prepared, and rolls back any other of the job's.
    fn decide_commit(&self, _job: i64, _ids: &[String]) -> Result<(), DestinationError> {
        Err(DestinationError::new(
            ErrorKind::Usage,
            "this destination cannot prepare a transaction",
        ))
    }

    /// The prepared transactions job `job` decided to commit (empty when it decided none).
    fn decided(&self, _job: i64) -> Result<Vec<String>, DestinationError> {
        Ok(Vec::new())
    }

    /// Before several transactions commit one after another (the load's streams, and the
    /// prepared transactions `prepared`): holds back readers of the tables they wrote until
    /// [`Destination::release_readers`], so that a reader sees all of them or none. A
    /// destination that cannot does nothing (readers may then see the commits land in turn);
    /// `Err` says why holding them failed.
    fn hold_readers(&self, _prepared: &[String]) -> Result<(), DestinationError> {
        Ok(())
    }

    /// Lets the readers held by [`Destination::hold_readers`] go, once the commits are done
    /// (or given up), and anything kept for a hold (free connections) with them; called also
    /// where no hold will come.
    fn release_readers(&self) {}

    /// Where the server's write-ahead log is, in bytes, to tell how much a load wrote (`None`
    /// when the server will not say).
    fn log_position(&self) -> Option<u64> {
        None
    }
}

/// What a session of the load was doing when the destination looked: the server's side of
/// where a load's time goes, in classes every destination can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Activity {
    /// Waiting for sluice: for data, or idle between statements.
    WaitingForClient,
    /// Working: on CPU, no wait event.
    Cpu,
    /// Writing or flushing the database's log (PostgreSQL's WAL, InnoDB's redo log).
    Log,
    /// Reading, writing or extending data files.
    DiskIo,
    /// Waiting on a lock another session holds.
    Lock,
    /// Anything else (a sleep in a trigger, an extension, inter-process waits).
    Other,
}

impl Activity {
    /// Every class, in the order of [`ServerWaits::series`]' counts.
    pub const ALL: [Activity; 6] = [
        Activity::WaitingForClient,
        Activity::Cpu,
        Activity::Log,
        Activity::DiskIo,
        Activity::Lock,
        Activity::Other,
    ];

    /// A short name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Activity::WaitingForClient => "waiting_for_client",
            Activity::Cpu => "cpu",
            Activity::Log => "log",
            Activity::DiskIo => "disk_io",
            Activity::Lock => "lock",
            Activity::Other => "other",
        }
    }
}

/// What the load's sessions were doing, sampled a few times a second while the streams ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerWaits {
    /// Session samples taken (sessions times samples).
    pub samples: u64,
    /// Samples by activity and the destination's own name for it (PostgreSQL: the wait
    /// event, or `CPU`), most frequent first.
    pub activities: Vec<(Activity, String, u64)>,
    /// Each sample over time: seconds since the watch began, and the sessions in each class
    /// (in [`Activity::ALL`]'s order).
    pub series: Vec<(f64, [u32; 6])>,
}

impl ServerWaits {
    /// One session's sample: `class`, under the destination's `name` for what it was doing.
    pub fn add(&mut self, class: Activity, name: &str) {
        self.samples += 1;
        match self
            .activities
            .iter_mut()
            .find(|(a, n, _)| *a == class && n == name)
        {
            Some(entry) => entry.2 += 1,
            None => self.activities.push((class, name.to_string(), 1)),
        }
    }

    /// Sorts the activities most frequent first (then by class), as a finished watch gives
    /// them.
    pub fn finish(&mut self) {
        self.activities
            .sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    }

    /// The share (0 to 1) of samples in `class`.
    pub fn share(&self, class: Activity) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        let n: u64 = self
            .activities
            .iter()
            .filter(|(a, _, _)| *a == class)
            .map(|(_, _, n)| n)
            .sum();
        n as f64 / self.samples as f64
    }
}

/// What the load's tables carry that costs the server work per row: the verdict names only
/// what a table has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCosts {
    /// `table: index, index` for each loaded table with indexes (a primary key counts).
    pub indexes: Vec<(String, Vec<String>)>,
    /// Row triggers, by table.
    pub triggers: Vec<(String, Vec<String>)>,
    /// Check and foreign-key constraints, by table.
    pub checks: Vec<(String, Vec<String>)>,
}

impl TableCosts {
    /// Adds `table`'s `name`, of `kind` (`index`, `trigger`, or anything else for a check or
    /// foreign key); a table's names are added together, one table after another.
    pub fn add(&mut self, kind: &str, table: String, name: String) {
        let into = match kind {
            "index" => &mut self.indexes,
            "trigger" => &mut self.triggers,
            _ => &mut self.checks,
        };
        match into.last_mut() {
            Some((t, names)) if *t == table => names.push(name),
            _ => into.push((table, vec![name])),
        }
    }

    /// Whether no loaded table has any of them.
    pub fn is_empty(&self) -> bool {
        self.indexes.is_empty() && self.triggers.is_empty() && self.checks.is_empty()
    }
}

/// How a table's rows are split into partitions, as far as a staging strategy can use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// A plain table.
    None,
    /// Partitioned, or guarded, in a way that keeps sluice from staging it; the reason, for
    /// the summary.
    Unroutable(String),
    /// By one integer column: ranges of it, lists of its values, or its hash.
    IntegerKey {
        /// The key column's name.
        column: String,
        partitions: Vec<KeyPartition>,
        /// Whether a default partition takes keys outside every partition.
        default: bool,
    },
}

/// One partition of a table partitioned by an integer key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPartition {
    /// The partition as the destination's SQL quotes it, for messages.
    pub name: String,
    pub bound: KeyBound,
    /// Why a staging table cannot replace it (it has rows, say), if so.
    pub obstacle: Option<String>,
}

/// Which keys a partition holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyBound {
    /// From `lower` (inclusive) to `upper` (exclusive); `None` is unbounded.
    Range {
        lower: Option<i64>,
        upper: Option<i64>,
    },
    /// These values, and NULL when `null`.
    List { values: Vec<i64>, null: bool },
    /// The keys whose hash, by the database's own function, leaves `remainder` when divided
    /// by `modulus`.
    Hash {
        modulus: u64,
        remainder: u64,
        function: HashFunction,
    },
}

/// A database's hash of an integer partition key, named (two are equal when their names are).
#[derive(Clone, Copy)]
pub struct HashFunction {
    pub name: &'static str,
    pub hash: fn(i64) -> u64,
}

impl PartialEq for HashFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for HashFunction {}

impl fmt::Debug for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl KeyPartition {
    /// A range partition (the common case, and the tests').
    pub fn range(name: impl Into<String>, lower: Option<i64>, upper: Option<i64>) -> Self {
        KeyPartition {
            name: name.into(),
            bound: KeyBound::Range { lower, upper },
            obstacle: None,
        }
    }

    /// Whether `key` falls in the partition.
    pub fn contains(&self, key: i64) -> bool {
        match &self.bound {
            KeyBound::Range { lower, upper } => {
                lower.is_none_or(|l| key >= l) && upper.is_none_or(|u| key < u)
            }
            KeyBound::List { values, .. } => values.contains(&key),
            KeyBound::Hash {
                modulus,
                remainder,
                function,
            } => (function.hash)(key) % modulus == *remainder,
        }
    }

    /// Whether a NULL key falls in the partition: a list's that names NULL, or the hash
    /// partition of remainder 0 (a NULL key hashes to 0, as the databases skip it).
    pub fn holds_null(&self) -> bool {
        matches!(
            self.bound,
            KeyBound::List { null: true, .. } | KeyBound::Hash { remainder: 0, .. }
        )
    }
}

/// A finished staging table: the destination's name for it, and the time its steps after
/// the data took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// The destination's name for the staging table (what [`Staging::switch_one`] takes).
    pub table: String,
    pub index: std::time::Duration,
    pub analyze: std::time::Duration,
}

/// What the publish did and how long it took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PublishTimes {
    /// The one transaction that switches every staging table in.
    pub publish: std::time::Duration,
    /// Statistics on the parents, after it.
    pub analyze: std::time::Duration,
    /// Attempts the publish needed (a lock wait that timed out is retried).
    pub attempts: u32,
    /// Partitions that had rows by the publish (a direct fallback's, another session's),
    /// whose staging table's rows were appended to them rather than switched in.
    pub appended: Vec<String>,
}

/// What readying the staging area found, besides this load's own work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreparedStaging {
    /// Staging tables dropped: left by loads that stopped before their publish, of no job
    /// that can still be resumed. Each says what it was for.
    pub dropped: Vec<String>,
    /// Staging tables left in place for another job that can still be resumed, which will
    /// publish them. Each says which job.
    pub waiting: Vec<String>,
    /// Staging tables an earlier run of this load's job committed, that still fit the tables
    /// as they are now: candidates for [`Staging::reuse_staging`].
    pub leftovers: Vec<Leftover>,
}

/// A staging table an earlier run of the job committed and did not publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The destination's name for it.
    pub id: String,
    /// The load's table and partition (an index into [`Partitioning::IntegerKey`]'s list)
    /// it stands in for.
    pub table: usize,
    pub partition: usize,
    /// The chunks whose rows it holds, as the job's ledger names them.
    pub chunks: Vec<ChunkRecord>,
}

/// A destination that loads a partition's rows into a staging table of its own and switches
/// every staging table in at once: the seed paper's design. The staging tables are invisible
/// to the table's users until [`publish`](Staging::publish), which is one transaction.
pub trait Staging: Destination {
    /// Bounds each lock wait of the publish and of the statistics step (the destination has
    /// a default).
    fn set_lock_wait(&mut self, wait: std::time::Duration);

    /// Before the load: readies the staging area and drops staging tables that earlier loads
    /// left behind, that no running load owns and no resumable job can publish. Those of
    /// `job` (this load's, when it keeps a ledger) that still fit come back as leftovers.
    fn prepare_staging(&self, job: Option<i64>) -> Result<PreparedStaging, DestinationError>;

    /// Takes the leftovers named in `keep` as this load's finished staging tables (the
    /// publish switches them in, the ledger rows of their chunks go with it); drops the other
    /// leftovers [`prepare_staging`](Staging::prepare_staging) returned.
    fn reuse_staging(&self, keep: &[String]) -> Result<(), DestinationError>;

    /// How table `table` of the load is partitioned.
    fn partitioning(&self, table: usize) -> Result<Partitioning, DestinationError>;

    /// On `stream`, in a transaction of its own, creates the staging table for partition
    /// `partition` (an index into [`Partitioning::IntegerKey`]'s list) of table `table`;
    /// the stream's COPYs into `table` go to it until [`finish_stage`](Staging::finish_stage).
    /// A row outside the partition fails the COPY ([`outside_partition`](Staging::outside_partition)).
    fn begin_stage(
        &self,
        stream: &mut Self::Stream<'_>,
        table: usize,
        partition: usize,
    ) -> Result<(), DestinationError>;

    /// Builds the table's indexes on the staging table, gathers its statistics and commits
    /// it, to wait for the publish. When the load keeps a ledger, the staging table records,
    /// in the same transaction, that it holds `chunks` of job `job`, so that a later run of
    /// the job can publish it instead of loading those chunks again.
    fn finish_stage(
        &self,
        stream: &mut Self::Stream<'_>,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<StageTimes, DestinationError>;

    /// Rolls back the staging table in progress on `stream`, leaving the stream ready.
    fn abandon_stage(&self, stream: &mut Self::Stream<'_>) -> Result<(), DestinationError>;

    /// Whether `e` says that a row was outside the staging table's partition.
    fn outside_partition(&self, e: &DestinationError) -> bool;

    /// Drops every staging table this load finished or reused: the load failed before its
    /// publish in a way no rerun resumes.
    fn discard_staging(&self) -> Result<(), DestinationError>;

    /// [`PublishModel::PerPartition`]: switches the finished staging table `table` in for its
    /// partition as one durable step of its own. When the load keeps a ledger, the step's
    /// `chunks` of job `job` count as committed exactly when the switch happened: a later
    /// run's [`prepare_staging`](Staging::prepare_staging) settles a step cut off halfway
    /// (the chunks recorded, or the staging table a leftover again).
    fn switch_one(
        &self,
        _table: &str,
        _job: Option<i64>,
        _chunks: &[ChunkRecord],
    ) -> Result<PublishTimes, DestinationError> {
        Err(DestinationError::new(
            ErrorKind::Usage,
            "this destination publishes every staging table in one transaction",
        ))
    }

    /// [`PublishModel::OneTransaction`]: in `stream`'s transaction (opened for the publish;
    /// the caller commits it), switches every finished staging table in for its partition (or
    /// appends its rows, when the partition has rows by then). The caller may load more rows
    /// into the parents in the same transaction afterwards: rows that could not be staged. A
    /// [`PublishModel::PerPartition`] destination is asked for this too, when there are such
    /// rows: it appends every staging table's rows, so that all appear at once or none.
    fn switch_in(&self, stream: &mut Self::Stream<'_>) -> Result<PublishTimes, DestinationError>;

    /// After the publish committed: gathers the parents' statistics, `parallel` at a time. A
    /// failure here is the destination's to report as a warning: the data is in.
    fn gather_statistics(&self, parallel: usize) -> std::time::Duration;

    /// Why `--strategy auto` loads table `table` directly although it could stage it (staging
    /// measured slower there on this destination), if so; `--strategy stage` stages it anyway.
    fn auto_loads_directly(&self, _table: usize) -> Option<String> {
        None
    }
}

/// Converts one table's records, with the destination's rules, into its load format.
pub trait RecordEncoder {
    /// Appends one record's encoding to `out` (the fields refer to `input`); on error `out` is
    /// left as it was.
    fn encode(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError>;

    /// The fast path: encodes the run of records from `start` of `input` straight from their
    /// bytes, as [`RecordParser::index_plain`] gives them, without splitting them into
    /// [`Fields`] first, until a record or one of its values needs the general path, the
    /// input runs out, or `out` holds `limit` bytes. Returns how many records it encoded
    /// (`out` gains exactly those) and where the next one starts; the caller takes that one
    /// through [`RecordEncoder::encode`]. `same_input` says that `input` is the very input
    /// of the previous call, unchanged, and that the caller took the records between there
    /// and `start` itself: the encoder may then go on over what it learned of the input
    /// (its structural index) rather than read it again. The default declines every record.
    fn encode_plain(
        &mut self,
        _parser: &RecordParser,
        _input: &[u8],
        start: usize,
        _out: &mut Vec<u8>,
        _limit: usize,
        _same_input: bool,
    ) -> (usize, usize) {
        (0, start)
    }

    /// One value of column `column` in a comparable form (its encoding), or `None` when it
    /// cannot be converted: used to match a key the server names with the input's rows,
    /// whatever their spelling.
    fn encode_field(&mut self, column: usize, raw: &[u8]) -> Option<Vec<u8>>;

    /// How many values the server converted for this encoder, for the summary.
    fn server_conversions(&self) -> u64 {
        0
    }
}

/// One stream of a load.
pub trait DestinationStream: Send {
    /// Starts loading one chunk into table `table` (an index into the plan's tables).
    fn begin_copy(&mut self, table: usize) -> Result<(), DestinationError>;

    /// Sends encoded data; the implementation may write it while the engine encodes more.
    fn send(&mut self, data: Vec<u8>) -> Result<(), DestinationError>;

    /// Ends the chunk; returns the rows the server stored.
    fn finish_copy(&mut self) -> Result<u64, DestinationError>;

    /// Fires the checks the database defers to commit, while every stream can still roll
    /// back and the watch still runs.
    fn fire_deferred_checks(&mut self) -> Result<(), DestinationError>;

    /// Sets a savepoint in the stream's transaction: rows sent after it can be rolled back
    /// alone ([`rollback_to_savepoint`](DestinationStream::rollback_to_savepoint)), which is
    /// how a chunk's bad rows are isolated while its good rows load. One savepoint at a time.
    fn savepoint(&mut self) -> Result<(), DestinationError>;

    /// Keeps what was sent since the savepoint, and forgets the savepoint.
    fn release_savepoint(&mut self) -> Result<(), DestinationError>;

    /// Undoes what was sent since the savepoint (after an error, too), keeping the savepoint's
    /// transaction usable.
    fn rollback_to_savepoint(&mut self) -> Result<(), DestinationError>;

    /// Makes the checks the database would defer to commit run at the end of each COPY
    /// instead, so that a failing check can be tied to a chunk's rows while they can still
    /// be rolled back alone.
    fn check_each_copy(&mut self) -> Result<(), DestinationError>;

    /// Records, in the stream's open transaction, that job `job` committed these chunks: the
    /// ledger rows commit with the rows they describe, or not at all.
    fn record_chunks(&mut self, job: i64, chunks: &[ChunkRecord]) -> Result<(), DestinationError>;

    /// What the kernel says of the stream's network connection while it sent rows (none where
    /// it has no TCP socket): the verdict tells a window that is too small from a full link by
    /// it. The round trips of its other statements are left out: they keep a connection busy
    /// with a few bytes in flight, which says nothing of the path's capacity.
    fn transport(&self) -> Option<Transport> {
        None
    }

    /// Claims `chunks` of crew job `job` for worker `worker` in the stream's open transaction
    /// ([`Claim`]): a claim lasts as long as the transaction, so a worker that dies gives its
    /// chunks back, and a prepared one keeps them until the job commits.
    fn claim(
        &mut self,
        _job: i64,
        _worker: u32,
        _chunks: &[ChunkRecord],
    ) -> Result<Vec<Claim>, DestinationError> {
        Err(no_crews())
    }

    /// Commits the stream's transaction.
    fn commit(self) -> Result<(), DestinationError>;

    /// Prepares the stream's transaction for a two-phase commit under `id`: from here on it
    /// survives this connection and a server restart, holding its locks and invisible, until
    /// [`Destination::finish_prepared`] commits or rolls it back. Only where
    /// [`Capabilities::prepare`] allows it. Returns the name it is prepared under: `id`, or,
    /// where a transaction is named when it begins (XA), the name it began under, which starts
    /// with the prefix [`Destination::name_transactions`] gave.
    fn prepare(self, _id: &str) -> Result<String, DestinationError>
    where
        Self: Sized,
    {
        Err(DestinationError::new(
            ErrorKind::Usage,
            "this destination cannot prepare a transaction",
        ))
    }
}

/// A destination that keeps the resume ledger in its own database: jobs, their files, and the
/// chunks each committed ([`crate::ledger`]). Each call is its own short transaction, on a
/// connection of the destination's (a fresh one if the server restarted since).
pub trait Ledger: Destination {
    /// Creates the ledger's tables if need be. An error (the role may not create a schema,
    /// say) means this load runs without one; its message says how to give it one.
    fn open_ledger(&self) -> Result<(), DestinationError>;

    /// Makes the ledger where there is none while the load's inputs are still being checked,
    /// leaving it uncommitted until [`Ledger::settle_ledger`]: a load whose inputs or plan then
    /// fail leaves no ledger behind, as one that opened it after them. `Ok(true)` when it holds
    /// one so made, open as [`Ledger::open_ledger`] leaves it. `Ok(false)`, holding nothing,
    /// where the ledger was there, or the destination cannot hold it (its DDL commits itself,
    /// or the ledger needs more than a plain open): the load opens it after the plan.
    fn hold_ledger(&self) -> Result<bool, DestinationError> {
        Ok(false)
    }

    /// Commits (`keep`) or rolls back what [`Ledger::hold_ledger`] left open, if anything.
    /// Nothing else runs on the destination between the two.
    fn settle_ledger(&self, keep: bool) -> Result<(), DestinationError> {
        let _ = keep;
        Ok(())
    }

    /// Jobs, newest first: those with this key, or all of them.
    fn jobs(&self, key: Option<&str>) -> Result<Vec<Job>, DestinationError>;

    /// A job's files, in its order (a [`ChunkRecord::file`] indexes them).
    fn job_files(&self, job: i64) -> Result<Vec<FileRecord>, DestinationError>;

    /// The chunks a job committed.
    fn job_chunks(&self, job: i64) -> Result<Vec<ChunkRecord>, DestinationError>;

    /// For each file: the finished job that loaded that very file (same path, table name,
    /// size, time, fingerprint and settings) most recently. Whether its rows can still be
    /// there is [`Ledger::placements`]' question.
    fn loaded_by(&self, files: &[FileRecord]) -> Result<Vec<Option<LoadedBy>>, DestinationError>;

    /// Where finished job `job` put the rows of its files `files`, each relation's state
    /// when the job finished and now. A job that recorded no placement (one finished before
    /// the ledger kept them) has one per file: its table, with the table's id then.
    fn placements(&self, job: i64, files: &[u32]) -> Result<Vec<PlacementCheck>, DestinationError>;

    /// Marks a job finished, recording where its files' rows went, with each relation's
    /// state now (one transaction).
    fn finish_job(&self, job: i64, placements: &[Placement]) -> Result<(), DestinationError>;

    /// Records a new job and takes its lock (held until the destination is dropped). Fails
    /// with [`ErrorKind::Transient`], recording nothing, when the ledger holds a job of the
    /// same key newer than [`JobSpec::newest`]: another run of the same command recorded it
    /// since this one looked (checked under a lock on the key, held until the record commits).
    fn begin_job(&self, spec: &JobSpec) -> Result<i64, DestinationError>;

    /// Takes an interrupted or failed job's lock and marks it running. A destination that can
    /// tell a killed run's sessions on the server (whose last COMMIT may still land) first
    /// waits for them to end, or ends them, so that what the job committed is read whole.
    /// Fails with [`ErrorKind::Usage`] when another process runs it now, and with
    /// [`ErrorKind::Transient`], holding nothing, when the job finished since the load looked
    /// (its run ended while this one waited): the load looks again. Returns what it had to end
    /// of an earlier run, in words.
    fn resume_job(&self, job: i64) -> Result<Option<String>, DestinationError>;

    /// Marks a job finished, failed (with why) or abandoned.
    fn end_job(
        &self,
        job: i64,
        state: JobState,
        message: Option<&str>,
    ) -> Result<(), DestinationError>;

    /// Takes job `job`'s lock for as long as the destination lives, as a run of it does (see
    /// [`Ledger::begin_job`]), without marking it running: so that what a command does to a
    /// job's leftovers happens under no live process (and, as in
    /// [`resume_job`](Ledger::resume_job), none of a killed run's sessions).
    /// [`ErrorKind::Usage`] when another process runs it now. Returns what it had to end of an
    /// earlier run, in words.
    fn hold_job(&self, job: i64) -> Result<Option<String>, DestinationError>;

    /// Removes a job that is not running, with its records; returns the staging tables of
    /// dead loads it dropped with it.
    fn forget_job(&self, job: i64) -> Result<Vec<String>, DestinationError>;

    /// Joins crew `join`'s job, creating it for its first worker (with `spec`: its chunk
    /// size, settings and tables), takes the worker's slot for as long as the destination
    /// lives, and registers its files; one transaction. [`ErrorKind::Usage`] when the slot's
    /// process still runs, or the job has another number of workers.
    fn join_crew(&self, _join: &CrewJoin, _spec: &JobSpec) -> Result<Joined, DestinationError> {
        Err(no_crews())
    }

    /// Registers the chunks a worker plans to load as claimable (a shared file's chunk that
    /// another worker registered stays as it is).
    fn add_claims(&self, _job: i64, _chunks: &[ChunkRecord]) -> Result<(), DestinationError> {
        Err(no_crews())
    }

    /// Hands over worker `worker`'s part, loaded and prepared as `prepared` (or committed,
    /// when empty and the load does not prepare); when every slot has done so, records the
    /// decision to commit all of them, in the same transaction.
    fn hand_over(
        &self,
        _job: i64,
        _worker: u32,
        _prepared: &[String],
        _part: &WorkerPart,
    ) -> Result<CrewTurn, DestinationError> {
        Err(no_crews())
    }

    /// Holds (`true`, waiting at most `wait`; false when it did not get it) or releases the
    /// job's lock on its `--wire auto` decision, so that one worker measures the path while
    /// the others wait for its answer rather than measure at the same moment.
    fn hold_crew_wire(
        &self,
        _job: i64,
        _hold: bool,
        _wait: std::time::Duration,
    ) -> Result<bool, DestinationError> {
        Err(no_crews())
    }

    /// The job's `--wire auto` decision, as [`Ledger::set_crew_wire`] stored it.
    fn crew_wire(&self, _job: i64) -> Result<Option<String>, DestinationError> {
        Err(no_crews())
    }

    /// Stores the job's `--wire auto` decision for its other workers.
    fn set_crew_wire(&self, _job: i64, _decision: &str) -> Result<(), DestinationError> {
        Err(no_crews())
    }

    /// Where a crew's job stands, for its waiting workers and `sluice jobs`.
    fn crew_status(&self, _job: i64) -> Result<CrewStatus, DestinationError> {
        Err(no_crews())
    }

    /// Fails a crew's job for every worker (why: a worker's failure, or a wait that ran out),
    /// unless its commit is decided already (false then). The caller then rolls back every
    /// prepared transaction of the job.
    fn fail_crew(&self, _job: i64, _worker: u32, _why: &str) -> Result<bool, DestinationError> {
        Err(no_crews())
    }
}

/// The refusal of a destination that cannot run a job with several workers.
fn no_crews() -> DestinationError {
    DestinationError::new(
        ErrorKind::Usage,
        "this destination cannot run a job with several workers (--workers)",
    )
}

/// What kind of failure a destination reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection or the server went away, or the server was shut down.
    Connection,
    /// The statement was cancelled by someone else (an administrator, a timeout).
    Cancelled,
    /// The stream waited on sibling stream `blocker`'s transaction and was stopped.
    Conflict { blocker: usize },
    /// The data was rejected: a bad value, a constraint.
    Rejected,
    /// The server's own condition, which no row causes: out of disk, memory or connection
    /// slots, a configured resource limit, an I/O or internal error. The message says what to
    /// do; never a bad row, never isolated row by row.
    Condition,
    /// The transaction was aborted by something that passes (a serialization failure, a
    /// deadlock with a session not of this load): retried on a new connection, as a lost
    /// connection is.
    Transient,
    /// The request names something the destination cannot load into (no such table, a
    /// view, a column list it refuses): the user's to fix.
    Usage,
    /// Anything else the server said.
    Other,
}

impl ErrorKind {
    /// Whether the stream's work is worth running again on a new connection.
    pub fn retried(self) -> bool {
        matches!(self, ErrorKind::Connection | ErrorKind::Transient)
    }
}

/// A key a destination named: columns and values as the server prints them (`None` for NULL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorKey {
    pub columns: Vec<String>,
    pub values: Vec<Option<String>>,
}

/// A failure, with whatever the destination could say about where it came from. Boxed, so
/// that results stay small on the hot path; its fields are reached through `Deref`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationError(Box<ErrorReport>);

impl std::ops::Deref for DestinationError {
    type Target = ErrorReport;
    fn deref(&self) -> &ErrorReport {
        &self.0
    }
}

impl std::ops::DerefMut for DestinationError {
    fn deref_mut(&mut self) -> &mut ErrorReport {
        &mut self.0
    }
}

impl From<ErrorReport> for DestinationError {
    fn from(r: ErrorReport) -> DestinationError {
        DestinationError(Box::new(r))
    }
}

/// What a [`DestinationError`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReport {
    pub kind: ErrorKind,
    /// The whole message, for people.
    pub message: String,
    /// The server's short message alone, without detail or hint.
    pub summary: String,
    /// The server's detail, when it gave one.
    pub detail: Option<String>,
    /// 1-based record of the chunk the failure names.
    pub record: Option<u64>,
    /// The column the server was converting.
    pub column: Option<String>,
    /// The key the failure names (a unique or foreign key), when known.
    pub key: Option<ErrorKey>,
    /// The index or constraint the failure names.
    pub index: Option<String>,
    /// The table a foreign key points to.
    pub referenced_table: Option<String>,
    /// A unique key already present (in the table, or earlier in this stream's rows).
    pub duplicate: bool,
    /// For refused data, a short stable name of why, shared by every destination so that
    /// rejects are counted alike: `invalid_value`, `not_null_violation`, `unique_violation`,
    /// `foreign_key_violation`, `check_violation`, `exclusion_violation`, `raised_by_trigger`,
    /// or `rejected`.
    pub cause: Option<&'static str>,
}

impl DestinationError {
    /// A failure with nothing but a kind and a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> DestinationError {
        let message = message.into();
        DestinationError::from(ErrorReport {
            kind,
            summary: message.clone(),
            message,
            detail: None,
            record: None,
            column: None,
            key: None,
            index: None,
            referenced_table: None,
            duplicate: false,
            cause: None,
        })
    }
}

impl fmt::Display for DestinationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DestinationError {}
