//! PostgreSQL as a [`Destination`]: the engine's one interface, implemented with binary (or
//! text) COPY streams, the watchdog and the server-side converter.
//!
//! [`PgDestination`] owns the tokio runtime its connections run on, so the engine stays free of
//! async code and of tokio-postgres. It is opened once per load: the first connection chooses
//! the host (every later one is pinned to it and checks the server's identity), reads the
//! session and the catalog, and then [`PgDestination::set_tables`] fixes the COPY targets the
//! plan chose. Server errors come back as [`DestinationError`]s that carry what PostgreSQL said
//! about the row: the COPY line, the key in the DETAIL, the index in the context, and for a
//! conflict between two streams, the key read back from the waiting stream's own transaction.

use crate::catalog::{
    describe_table, free_slots, index_key, quote_ident, server_identity, session, CatalogError,
    Session, Table,
};
use crate::condition;
use crate::connect::{connect, connect_asking, ConnectError};
use crate::conninfo::ConnInfo;
use crate::onetrip::OneTrip;
use crate::oracle::Oracle;
use crate::silence::Silence;
use crate::stage::{self, PublishError, Staged, TablePartitions};
use crate::stream::{CopyWriter, ServerError, Stream, StreamOpenError};
use crate::types::binary::{split_lines, split_tuples, HEADER, TRAILER};
use crate::types::column::Column;
use crate::types::convert::Converter;
use crate::types::datetime::SessionZone;
use crate::watchdog::Watchdog;
use bytes::Bytes;
use sluice_core::destination::{
    Activity, Capabilities, ColumnInfo, Destination, DestinationError, DestinationStream, ErrorKey,
    ErrorKind, ErrorReport, IdentifierRules, Ledger, Leftover, LoadTable, Partitioning,
    PreparedStaging, PublishModel, PublishTimes, RecordEncoder, ServerWaits, StageTimes, Staging,
    TableCosts, TableInfo, Transport, Wire,
};
use sluice_core::error::RecordError;
use sluice_core::ledger::{
    ChunkRecord, Claim, CrewJoin, CrewStatus, CrewTurn, FileRecord, Job, JobSpec, JobState, Joined,
    LoadedBy, Placement, PlacementCheck, WorkerPart,
};
use sluice_core::records::{Fields, RecordParser};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::runtime::Runtime;
use tokio_postgres::Client;

/// One table as the load copies into it: the plan's columns, in field order.
#[derive(Clone, Debug)]
struct CopyTarget {
    table: Table,
    columns: Vec<Column>,
    /// Binary COPY when every column converts on the client; text COPY otherwise.
    binary: bool,
}

/// Why the destination could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("cannot start the connection runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Server(String),
    /// The server is one sluice cannot load correctly (its encoding, say).
    #[error("{0}")]
    Unsupported(String),
}

/// The server's settings the report shows, by name.
type Settings = Vec<(String, String)>;

/// A PostgreSQL server, for one load.
pub struct PgDestination {
    rt: Runtime,
    /// The target pinned to the host the first connection reached.
    pub info: ConnInfo,
    identity: String,
    /// The load's own connection (catalog, staging area, ledger); replaced by a new one when
    /// the server dropped it (a restart the streams rode out).
    client: Mutex<Arc<Client>>,
    /// The session's time zone, for `timestamptz` values without an offset.
    zone: SessionZone,
    /// The session the first connection found.
    pub session: Session,
    free_slots: Option<i64>,
    /// The server's round trip, once measured.
    round_trip_seen: Mutex<Option<std::time::Duration>>,
    /// Tables described so far, with PostgreSQL's own column types.
    described: Vec<Table>,
    tables: Vec<CopyTarget>,
    watchdog: Mutex<Option<Watchdog>>,
    /// The load's waits on the server, given up when it answers nothing for too long.
    silence: Arc<Silence>,
    warn: Arc<dyn Fn(String) + Send + Sync>,
    /// This load's id, carried by its staging tables' names.
    load_id: u32,
    /// Each table's partitions, once asked for.
    partitions: Mutex<Vec<Option<TablePartitions>>>,
    /// The partitions of the tables described, by qualified name, read with their description
    /// (the engine asks for them next: no round trip of their own).
    partitions_ahead: std::collections::HashMap<String, TablePartitions>,
    /// What each table described carries that costs the server work per row, read with its
    /// description, for the verdict at the load's end (no round trip then).
    costs_ahead: std::collections::HashMap<String, Vec<crate::catalog::CostRow>>,
    /// Staging tables numbered so far.
    stage_seq: AtomicU32,
    /// Staging tables finished (or reused) and waiting for the publish.
    staged: Mutex<Vec<Staged>>,
    /// An earlier run's staging tables of this load's job, until the strategy says which it
    /// reuses.
    leftovers: Mutex<Vec<Staged>>,
    /// The partitions switched in by the publish, with their streams' statistics.
    analyzed: Mutex<Vec<String>>,
    /// The streams that have staged: when several, each builds its indexes without workers.
    staging_streams: Mutex<std::collections::BTreeSet<usize>>,
    /// How long each attempt of the publish, and the statistics step, waits for a lock.
    lock_wait: std::time::Duration,
    /// The encoding asked for: text COPY for every table when `Text`.
    wire: Wire,
    /// Connections opened ahead of the streams and the watch ([`Destination::open_ahead`]).
    ahead: Mutex<Ahead>,
    /// The ledger, when opened, held no finished job (a first load): no file of this load can
    /// have been loaded by one, and the question is not sent (for 100,000 files, it is their
    /// paths and sizes in one statement).
    none_finished: std::sync::atomic::AtomicBool,
    /// Whether the ledger held no job at all when it was opened, until a load first looks.
    no_job: std::sync::atomic::AtomicBool,
    /// The connection whose transaction opened the ledger and awaits its end
    /// ([`Ledger::hold_ledger`]): that one, never a reconnected one, commits it.
    ledger_pending: Mutex<Option<Arc<Client>>>,
    /// The second half of the job's start, sent and not yet answered ([`Begun`]).
    begun: Mutex<Begun>,
    /// The server's log position read with the job's row: where the load's log starts.
    begin_lsn: Mutex<Option<String>>,
    /// The log position and the settings read right behind the load's last commits (in their
    /// round trip): where the load's log ends.
    end_lsn: Mutex<Option<(String, Option<Settings>)>>,
    /// Whether a stream of this load has opened: commits before it (an earlier run's,
    /// settled) are not the load's end.
    streams_opened: std::sync::atomic::AtomicBool,
    /// Connections of streams that prepared their transactions, kept for the readers' gates.
    spare: Mutex<Vec<crate::readers::Spare>>,
    /// The backends of this load's open streams, whose locks name the tables a back-to-back
    /// commit makes visible (a trigger's table among them).
    stream_pids: Mutex<Vec<i32>>,
    /// The readers' gates while the commits run ([`Destination::hold_readers`]).
    gates: Mutex<Option<crate::readers::Gates>>,
    /// The job this load runs, once begun or resumed: its streams' sessions hold a shared lock
    /// on it ([`crate::ledger::STREAM_CLASS`]), which a later run waits on.
    job: Mutex<Option<i64>>,
    /// The server's settings for the report, read with the load's last log position.
    settings_read: Mutex<Option<Settings>>,
    /// The streams' transactions will be prepared, not committed back to back
    /// ([`Destination::name_transactions`]).
    prepares: std::sync::atomic::AtomicBool,
    /// This load is a worker of a job several load together: its staging tables commit only
    /// while the job runs ([`crate::crew::running`]).
    crew: std::sync::atomic::AtomicBool,
    /// What this worker's hand-over published of its job, whose statistics are gathered once
    /// the job is recorded finished ([`Ledger::finish_job`]): not before, so that the other
    /// workers never wait on an ANALYZE for the job's end.
    published: Mutex<Option<crate::crew::Published>>,
}

/// A job's start is two round trips: its row (whose id the streams need), then its files, its
/// COMMIT and its lock, which for thousands of files take longer than the row. The second is
/// sent and left to the runtime while the streams load; whatever makes rows visible (a
/// stream's PREPARE or COMMIT, the commit's decision) or writes the job's end waits for it
/// first ([`PgDestination::begun`]), so that no row is committed for a job whose files were
/// not. Statements the load's connection is asked in the meantime queue behind its COMMIT.
enum Begun {
    Settled,
    Pending(tokio::task::JoinHandle<Result<(), DestinationError>>),
    Failed(DestinationError),
}

/// Connections being opened in the background, while the load's own connection does its
/// serial steps: across a long path each is several round trips (TCP, authentication, the
/// session's settings, the server's identity), which then overlap those steps. A stream's
/// transaction begins when a stream takes it, so that none waits idle inside one.
#[derive(Default)]
struct Ahead {
    streams: Vec<tokio::task::JoinHandle<Result<Stream, StreamOpenError>>>,
    watch: Option<tokio::task::JoinHandle<Result<Client, ConnectError>>>,
    /// Sessions for the readers' gates at the commit, across a long path only
    /// ([`GATES_AHEAD_FROM`]); they outlive the streams' and the watch's ([`Ahead::close`]).
    gates: Vec<tokio::task::JoinHandle<Result<Stream, StreamOpenError>>>,
    /// The streams the load said it runs ([`Destination::open_ahead`]).
    planned: usize,
    /// The tables' COPY statements for the streams' connections to prepare, once the tables
    /// are known ([`PgDestination::copies_ahead`]).
    copies: std::sync::Arc<std::sync::OnceLock<Vec<String>>>,
}

/// The round trip from which the streams' connections open before the tables are described
/// ([`Destination::open_early`]), and the readers' gates' sessions that the streams'
/// connections will not provide are opened with the streams', not at the commit: each is four or five round
/// trips (TCP, authentication, the session's settings, the server's identity), and at the
/// commit they are in series with the last row's visibility. Below it they cost less than the
/// idle connections would hold.
const GATES_AHEAD_FROM: std::time::Duration = std::time::Duration::from_millis(10);

/// The most tables whose COPY statements a stream opened ahead prepares.
const COPIES_AHEAD: usize = 32;

impl Ahead {
    /// Connections held open (or opening) that no stream, watch or gate took yet.
    fn held(&self) -> usize {
        self.streams.len() + usize::from(self.watch.is_some()) + self.gates.len()
    }

    /// Closes the streams' and the watch's: one still opening stops where it is, and dropping
    /// a handle drops the connection its task made. The gates' stay for the commit.
    fn close(&mut self) {
        for pending in self.streams.drain(..) {
            pending.abort();
        }
        if let Some(watch) = self.watch.take() {
            watch.abort();
        }
        self.copies = Default::default();
    }

    /// Closes the gates' too.
    fn close_all(&mut self) {
        self.close();
        for pending in self.gates.drain(..) {
            pending.abort();
        }
    }
}

impl PgDestination {
    /// Connects (trying each host of the target), pins the host, and reads the session and
    /// the free connection slots. `warn` receives warnings while the load runs. A database
    /// whose encoding is not UTF-8 is refused: sluice loads UTF-8 input, unconverted.
    pub fn open(
        target: &ConnInfo,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Result<PgDestination, OpenError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("sluice-net")
            .build()
            .map_err(OpenError::Runtime)?;
        let silence = Silence::new(crate::silence::bound(target), warn.clone());
        let mut target = target.clone();
        target.ends = silence.ends();
        let began = std::time::Instant::now();
        let (info, client, identity, session, free, rtt) = rt.block_on(async {
            // Independent questions, pipelined behind the session's setup: no round trip of
            // their own across a long path, where they would take four.
            let connected = connect_asking(&target, |client: &Client| {
                Box::pin(async move {
                    tokio::join!(server_identity(client), session(client), free_slots(client))
                })
            })
            .await?;
            let info = target.pinned(connected.host);
            let (client, socket) = (connected.client, connected.socket);
            let server = |e: tokio_postgres::Error| OpenError::Server(e.to_string());
            let (identity, session, free) = connected.first;
            let (identity, session) = (identity.map_err(server)?, session.map_err(server)?);
            // The round trip, as the kernel measured it over these exchanges.
            let rtt = socket.as_ref().and_then(crate::network::kernel_round_trip);
            Ok::<_, OpenError>((info, client, identity, session, free, rtt))
        })?;
        {
            let _entered = rt.enter();
            silence.watch(&info, began.elapsed());
        }
        if session.server_encoding != "UTF8" && session.server_encoding != "SQL_ASCII" {
            return Err(OpenError::Unsupported(format!(
                "the database's encoding is {}; sluice loads UTF-8 input into UTF8 databases only",
                session.server_encoding
            )));
        }
        Ok(PgDestination {
            rt,
            info,
            identity,
            client: Mutex::new(Arc::new(client)),
            zone: SessionZone::from_setting(&session.timezone),
            session,
            free_slots: free,
            round_trip_seen: Mutex::new(rtt),
            described: Vec::new(),
            tables: Vec::new(),
            watchdog: Mutex::new(None),
            silence,
            warn,
            load_id: load_id(),
            partitions: Mutex::new(Vec::new()),
            partitions_ahead: std::collections::HashMap::new(),
            costs_ahead: std::collections::HashMap::new(),
            stage_seq: AtomicU32::new(0),
            staged: Mutex::new(Vec::new()),
            leftovers: Mutex::new(Vec::new()),
            analyzed: Mutex::new(Vec::new()),
            staging_streams: Mutex::new(std::collections::BTreeSet::new()),
            lock_wait: stage::DEFAULT_LOCK_WAIT,
            wire: Wire::Auto,
            ahead: Mutex::new(Ahead::default()),
            none_finished: std::sync::atomic::AtomicBool::new(false),
            no_job: std::sync::atomic::AtomicBool::new(false),
            ledger_pending: Mutex::new(None),
            begun: Mutex::new(Begun::Settled),
            begin_lsn: Mutex::new(None),
            end_lsn: Mutex::new(None),
            streams_opened: std::sync::atomic::AtomicBool::new(false),
            spare: Mutex::new(Vec::new()),
            stream_pids: Mutex::new(Vec::new()),
            gates: Mutex::new(None),
            job: Mutex::new(None),
            prepares: std::sync::atomic::AtomicBool::new(false),
            crew: std::sync::atomic::AtomicBool::new(false),
            published: Mutex::new(None),
            settings_read: Mutex::new(None),
        })
    }

    /// Sets the socket buffers of every connection this load opens from here on (its
    /// streams); `Auto` sizes them from the load's own connection's round trip
    /// ([`Self::server_round_trip_or_ask`]). Returns the buffer chosen and why, for the
    /// summary.
    pub fn size_sockets(
        &mut self,
        choice: crate::network::SocketBuffer,
    ) -> Result<crate::network::Sizing, String> {
        use crate::network::{auto_buffer, KernelLimits, Sizing, SocketBuffer};
        let sizing = match choice {
            SocketBuffer::Off => Sizing {
                streams: 1,
                buffer: None,
                why: "--socket-buffer off: the kernel's autotuning".into(),
            },
            SocketBuffer::Size(n) => Sizing {
                streams: 1,
                buffer: Some(n as u64),
                why: "--socket-buffer".into(),
            },
            SocketBuffer::Auto => {
                let rtt = self.server_round_trip_or_ask()?;
                auto_buffer(rtt, &KernelLimits::read())
            }
        };
        self.info.socket_buffer = sizing.buffer.map(|b| b as usize);
        Ok(sizing)
    }

    /// One of the probe's measurements, on a runtime of its own, bytes a second (`None` when
    /// it sent `budget` bytes before its time was up); on no more connections than the server
    /// had free beside the load's own.
    fn measure(
        &self,
        sink: crate::probe::Sink,
        streams: usize,
        seconds: f64,
        budget: Option<u64>,
    ) -> Result<Option<f64>, String> {
        let held = lock(&self.ahead).held();
        let free = self
            .free_slots
            .map_or(usize::MAX, |n| (n.max(0) as usize).saturating_sub(held));
        let streams = streams.min(free).max(1);
        let probe = crate::probe::Probe::of(&self.info).map_err(|e| e.to_string())?;
        let rate = probe
            .measure(sink, streams, seconds, budget)
            .map_err(|e| e.to_string())?;
        Ok((!rate.spent).then(|| rate.mb_per_s() * 1e6))
    }

    /// The median time of `n` round trips (`SELECT 1`) on the load's own connection.
    pub fn round_trip(&self, n: usize) -> Result<std::time::Duration, String> {
        let client = lock(&self.client).clone();
        self.block_on(async {
            let mut times = Vec::with_capacity(n.max(1));
            for _ in 0..n.max(1) {
                let t = std::time::Instant::now();
                client
                    .simple_query("SELECT 1")
                    .await
                    .map_err(|e| crate::connect::chain(&e))?;
                times.push(t.elapsed());
            }
            times.sort();
            Ok(times[times.len() / 2])
        })
    }

    /// The server's round trip: the kernel's figure from the connection's first exchanges
    /// (a TCP connection), else the median of 5 `SELECT 1` (a Unix socket), asked once.
    fn server_round_trip_or_ask(&self) -> Result<std::time::Duration, String> {
        let mut seen = lock(&self.round_trip_seen);
        if let Some(rtt) = *seen {
            return Ok(rtt);
        }
        let rtt = self.round_trip(5)?;
        *seen = Some(rtt);
        Ok(rtt)
    }

    /// How long each attempt of the publish waits for its locks (the server's `lock_timeout`)
    /// before it gives way to the table's other users and tries again, and how long the
    /// statistics step waits before it gives up.
    /// The load's own connection, connected anew (to the same server) if the old one closed.
    async fn live(&self) -> Result<Arc<Client>, DestinationError> {
        let current = lock(&self.client).clone();
        if !current.is_closed() {
            return Ok(current);
        }
        let s = Stream::open(&self.info, &self.identity)
            .await
            .map_err(|e| self.open_error(0, e))?;
        let fresh = s.into_client();
        *lock(&self.client) = fresh.clone();
        Ok(fresh)
    }

    /// `n` sessions for the readers' gates: the free connections of streams that prepared
    /// their transactions first, then new connections, opened at once.
    async fn gate_sessions(&self, n: usize) -> Result<Vec<crate::readers::Spare>, String> {
        let mut sessions: Vec<crate::readers::Spare> = {
            let mut spare = lock(&self.spare);
            spare.retain(|s| !s.client.is_closed());
            let keep = spare.len().saturating_sub(n);
            spare.split_off(keep)
        };
        // Those opened with the streams ([`GATES_AHEAD_FROM`]) that made it and are still
        // connected; the rest are opened now.
        let ahead = std::mem::take(&mut lock(&self.ahead).gates);
        for pending in ahead {
            if sessions.len() >= n {
                pending.abort();
                continue;
            }
            if let Ok(Ok(s)) = pending.await {
                if !s.client().is_closed() {
                    sessions.push(s.spare());
                }
            }
        }
        let opened = futures_util::future::join_all(
            (sessions.len()..n).map(|_| Stream::open(&self.info, &self.identity)),
        )
        .await;
        for s in opened {
            let s = s.map_err(|e| format!("opening a connection: {e}"))?;
            sessions.push(s.spare());
        }
        Ok(sessions)
    }

    /// The COPY statements a connection opened ahead prepares with its session's setup (or,
    /// opened before the tables were known, once it is open): each table's (at most
    /// [`COPIES_AHEAD`] tables), in its encoding, and in both where `--wire auto` may still
    /// change it. Across a long path each saves the stream a round trip at its first chunk of
    /// the table. (A statement follows them, so that the waiting session's last statement in
    /// `pg_stat_activity` is not a COPY the load has not begun.)
    fn copies_ahead(&self) -> Vec<String> {
        let formats = |t: usize| match self.wire_choice(t) {
            true => vec![true, false],
            false => vec![self.tables[t].binary],
        };
        (0..self.tables.len().min(COPIES_AHEAD))
            .flat_map(|t| {
                let (relation, columns) =
                    (self.tables[t].table.qualified(), &self.tables[t].columns);
                formats(t)
                    .into_iter()
                    .map(move |b| crate::stream::copy_sql(&relation, columns, b, false))
            })
            .collect()
    }

    /// Opens, in the background, the readers' gates' sessions that `streams` streams (of
    /// which `spares` leave their connections free at the commit: prepared ones) will not
    /// provide ([`PgDestination::gates_ahead`]).
    fn open_gates_ahead(&self, ahead: &mut Ahead, streams: usize, spares: usize) {
        let others = ahead.held() - ahead.gates.len();
        let gates = self.gates_ahead(streams, spares, others);
        while ahead.gates.len() < gates {
            let (info, identity) = (self.info.clone(), self.identity.clone());
            let opening = async move { Stream::open(&info, &identity).await };
            ahead.gates.push(self.rt.spawn(opening));
        }
    }

    /// How many of the readers' gates' sessions to have open with `streams` streams, `spares`
    /// of whose connections are free at the commit (prepared streams'; none for streams
    /// committed back to back), beside `others` connections opened ahead: across a long path
    /// ([`GATES_AHEAD_FROM`]), one for each table beyond the spares, as far as the server's
    /// free connections leave room. (Those a crew's deciding worker needs for the other
    /// workers' tables open at the commit.)
    fn gates_ahead(&self, streams: usize, spares: usize, others: usize) -> usize {
        let long = self.long_path();
        // One stream commits once and holds no reader; `--jobs auto` opens one ahead and may
        // want the free slots for the streams its calibration adds; past the most tables
        // gated, readers are not held at all.
        if !long || streams < 2 || self.tables.len() > crate::readers::MAX_GATES {
            return 0;
        }
        let wanted = self.tables.len().saturating_sub(spares);
        let room = self
            .free_slots
            .map_or(usize::MAX, |n| (n.max(0) as usize).saturating_sub(others));
        wanted.min(room)
    }

    /// Whether the load's first connection measured a round trip of [`GATES_AHEAD_FROM`] or
    /// more.
    fn long_path(&self) -> bool {
        lock(&self.round_trip_seen).is_some_and(|rtt| rtt >= GATES_AHEAD_FROM)
    }

    /// Why a connection could not be opened, in the engine's terms.
    fn open_error(&self, stream: usize, e: StreamOpenError) -> DestinationError {
        match e {
            StreamOpenError::Server(e) => self.error(stream, e),
            // Another server is not a lost connection: retrying cannot help.
            e @ StreamOpenError::OtherServer { .. } => {
                DestinationError::new(ErrorKind::Other, e.to_string())
            }
            other => DestinationError::new(ErrorKind::Connection, other.to_string()),
        }
    }

    /// Runs `f` on the load's runtime, counted as a wait on the server: a server that answers
    /// nothing for too long meanwhile is given up, and `f` ends as a lost connection
    /// ([`crate::silence`]).
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        let _waiting = self.silence.waiting();
        self.rt.block_on(f)
    }

    /// Runs `f` on the load's own connection.
    fn on_client<T, F, Fut>(&self, f: F) -> Result<T, DestinationError>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, DestinationError>>,
    {
        self.block_on(async {
            let c = self.live().await?;
            f(c).await
        })
    }

    /// Sends `task`'s statements now (its first poll writes them all to the connection) and
    /// leaves its answer to the runtime.
    fn send_ahead(
        &self,
        task: impl std::future::Future<Output = Result<(), DestinationError>> + Send + 'static,
    ) -> Result<Begun, DestinationError> {
        match self.block_on(send_now(task)) {
            Ok(result) => result.map(|()| Begun::Settled),
            Err(pending) => Ok(Begun::Pending(pending)),
        }
    }

    /// Waits for the job's start sent ahead ([`Begun`]), once; its failure, every time asked.
    fn begun(&self) -> Result<(), DestinationError> {
        let mut begun = lock(&self.begun);
        if let Begun::Pending(_) = &*begun {
            let Begun::Pending(task) = std::mem::replace(&mut *begun, Begun::Settled) else {
                unreachable!("matched just above")
            };
            let answer = self.block_on(task).unwrap_or_else(|e| {
                Err(DestinationError::new(
                    ErrorKind::Connection,
                    format!("recording the job's files in the ledger: {e}"),
                ))
            });
            if let Err(e) = answer {
                *begun = Begun::Failed(e);
            }
        }
        match &*begun {
            Begun::Failed(e) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// The conflict the watchdog declared for `stream`'s cancelled statement, taken: a stream
    /// that isolates rejects meets one conflict per duplicate key, and a later cancel by an
    /// administrator must not read as one.
    fn conflict_for(&self, stream: usize) -> Option<usize> {
        let w = lock(&self.watchdog);
        w.as_ref()?.take_conflict(stream).map(|c| c.blocker)
    }

    /// The sibling a deadlock report names as the other side, when it is one of ours.
    fn deadlock_partner(&self, e: &ServerError, stream: usize) -> Option<usize> {
        let detail = e.detail.as_deref()?;
        let w = lock(&self.watchdog);
        let w = w.as_ref()?;
        detail
            .split("process ")
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .filter_map(|pid| w.stream_of(pid))
            .find(|&s| s != stream)
    }

    /// Turns a server error on stream `stream` into the engine's terms.
    fn error(&self, stream: usize, e: ServerError) -> DestinationError {
        let sibling = if e.sqlstate == "40P01" {
            self.deadlock_partner(&e, stream)
        } else if e.is_cancelled() {
            self.conflict_for(stream)
        } else {
            None
        };
        let kind = match sibling {
            Some(blocker) => ErrorKind::Conflict { blocker },
            None => condition::classify(&e),
        };
        let message = match kind {
            ErrorKind::Condition => condition::condition_message(&e, &self.session.tablespaces),
            _ => e.to_string(),
        };
        DestinationError::from(ErrorReport {
            kind,
            message,
            summary: e.message.clone(),
            detail: e.detail.clone(),
            record: e.record,
            column: e.column.clone(),
            key: e.detail_key().map(|(columns, values)| ErrorKey {
                columns,
                values: values.into_iter().map(Some).collect(),
            }),
            index: e.context_relation().or_else(|| e.constraint.clone()),
            referenced_table: referenced_table(&e),
            duplicate: e.sqlstate == "23505",
            cause: (kind == ErrorKind::Rejected).then(|| rejection_cause(&e.sqlstate)),
        })
    }
}

/// Why the server refused data, in the names every destination shares.
fn rejection_cause(sqlstate: &str) -> &'static str {
    match sqlstate {
        "23502" => "not_null_violation",
        "23503" => "foreign_key_violation",
        "23505" => "unique_violation",
        "23514" => "check_violation",
        "23P01" => "exclusion_violation",
        s if s.starts_with("22") => "invalid_value",
        s if s.starts_with("P0") => "raised_by_trigger",
        _ => "rejected",
    }
}

/// The table a foreign-key DETAIL names: `... is not present in table "parent".`
fn referenced_table(e: &ServerError) -> Option<String> {
    let d = e.detail.as_deref()?;
    let rest = d.split(" in table \"").nth(1)?;
    Some(rest.split('"').next()?.to_string())
}

/// A catalog table in the engine's terms.
fn table_info(t: &Table) -> TableInfo {
    TableInfo {
        id: t.oid.to_string(),
        schema: t.schema.clone(),
        name: t.name.clone(),
        qualified: t.qualified(),
        references: t.references.iter().map(u32::to_string).collect(),
        columns: t
            .columns
            .iter()
            .map(|c| ColumnInfo {
                name: c.name.clone(),
                type_name: c.type_name.clone(),
                not_null: c.not_null,
                client_converted: c.ty.client_converted(),
            })
            .collect(),
    }
}

impl Destination for PgDestination {
    fn describe(&mut self, name: &str) -> Result<TableInfo, DestinationError> {
        let mut one = self.describe_all(&[name.to_string()]);
        one.remove(0)
    }

    /// The tables' questions, their partitions' and their costs' go out together: one round
    /// trip across a long path for all of them, not four per table (a partitioned table's
    /// partitions take more, in series).
    fn describe_all(&mut self, names: &[String]) -> Vec<Result<TableInfo, DestinationError>> {
        let described = self.on_client(|c| async move {
            let asked = names.iter().map(|n| async {
                let (table, partitions, costs) = futures_util::join!(
                    describe_table(&c, n),
                    stage::describe_partitions(&c, n),
                    crate::catalog::table_cost_rows(&c, n)
                );
                (table, (partitions, costs))
            });
            Ok(futures_util::future::join_all(asked).await)
        });
        let described = match described {
            Ok(d) => d,
            Err(e) => return names.iter().map(|_| Err(e.clone())).collect(),
        };
        described
            .into_iter()
            .map(|(d, (partitions, costs))| {
                let table = d.map_err(|e| match e {
                    CatalogError::Db(e) => db_error(e),
                    other => DestinationError::new(ErrorKind::Usage, other.to_string()),
                })?;
                let info = table_info(&table);
                keep_ahead(&mut self.partitions_ahead, &info.qualified, partitions);
                keep_ahead(&mut self.costs_ahead, &info.qualified, costs);
                if !self
                    .described
                    .iter()
                    .any(|t| t.qualified() == info.qualified)
                {
                    self.described.push(table);
                }
                Ok(info)
            })
            .collect()
    }

    fn free_slots(&self) -> Option<u64> {
        self.free_slots.map(|n| n.max(0) as u64)
    }

    fn prefer_wire(&mut self, wire: Wire) {
        self.wire = wire;
    }

    fn wire_choice(&self, table: usize) -> bool {
        self.wire == Wire::Auto
            && self.tables[table]
                .columns
                .iter()
                .all(|c| c.ty.client_converted())
    }

    fn encoder_in(&self, table: usize, wire: Wire) -> PgEncoder {
        PgEncoder {
            binary: wire == Wire::Binary,
            ..self.encoder(table)
        }
    }

    fn set_wire(&mut self, table: usize, wire: Wire) {
        if self.wire_choice(table) {
            self.tables[table].binary = wire != Wire::Text;
        }
    }

    fn server_is_local(&self) -> bool {
        self.info.hosts.iter().all(|h| h.is_local())
    }

    fn server_round_trip(&self) -> Option<std::time::Duration> {
        self.server_round_trip_or_ask().ok()
    }

    /// The probe's upload: `COPY ... WHERE false`, the network and COPY's input, nothing
    /// stored.
    fn measure_link(
        &self,
        streams: usize,
        seconds: f64,
        budget: u64,
    ) -> Result<Option<f64>, String> {
        self.measure(crate::probe::Sink::Nothing, streams, seconds, Some(budget))
    }

    /// The probe's rows made and stored by the server itself, no network in the way, counted
    /// as binary tuples.
    fn measure_server(&self, streams: usize, seconds: f64) -> Result<f64, String> {
        self.measure(crate::probe::Sink::Generated, streams, seconds, None)
            .map(|rate| rate.expect("a measurement without a budget runs its time"))
    }

    fn set_tables(&mut self, tables: &[LoadTable]) -> Result<(), DestinationError> {
        let mut targets = Vec::with_capacity(tables.len());
        for t in tables {
            let Some(table) = self
                .described
                .iter()
                .find(|d| d.qualified() == t.table.qualified)
            else {
                return Err(DestinationError::new(
                    ErrorKind::Other,
                    format!("table {} was not described", t.table.qualified),
                ));
            };
            let columns = table
                .columns_named(&t.columns)
                .map_err(|m| DestinationError::new(ErrorKind::Usage, m))?;
            let binary = self.wire != Wire::Text && columns.iter().all(|c| c.ty.client_converted());
            targets.push(CopyTarget {
                table: table.clone(),
                columns,
                binary,
            });
        }
        *lock(&self.partitions) = vec![None; targets.len()];
        self.tables = targets;
        Ok(())
    }

    fn load_format(&self, table: usize) -> &'static str {
        if self.tables[table].binary {
            "binary"
        } else {
            "text"
        }
    }

    fn target(&self) -> String {
        self.info.to_string()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            identifiers: IdentifierRules {
                quote: '"',
                fold_lower: true,
                case_insensitive_columns: false,
                max_bytes: 63,
            },
            publish: Some(PublishModel::OneTransaction),
            // COPY ... FREEZE refuses a savepoint.
            savepoints_in_staged_unit: false,
            prepare: match self.session.max_prepared_transactions {
                0 => Err("the server's max_prepared_transactions is 0".into()),
                n => Ok(n as u32),
            },
        }
    }

    fn cannot_write(&self) -> Option<String> {
        self.session.cannot_write()
    }

    fn finish_prepared(&self, id: &str, commit: bool) -> Result<(), DestinationError> {
        self.finish_all_prepared(std::slice::from_ref(&id.to_string()), commit)
            .map_err(|(_, e)| e)
    }

    /// Each `COMMIT PREPARED` (or `ROLLBACK PREPARED`) is a statement of its own, which no
    /// transaction block may hold; sent together, they still cross the path once.
    fn finish_all_prepared(
        &self,
        ids: &[String],
        commit: bool,
    ) -> Result<(), (usize, DestinationError)> {
        if ids.is_empty() {
            return Ok(());
        }
        let verb = if commit { "COMMIT" } else { "ROLLBACK" };
        let statements: Vec<String> = ids
            .iter()
            .map(|id| format!("{verb} PREPARED {}", stage::quote_literal(id)))
            .collect();
        let client = self.block_on(self.live()).map_err(|e| (0, e))?;
        // Behind the commits, in their round trip: the log position and the settings the
        // load's end asks for next ([`Destination::log_position`]). (Not the tables' states:
        // a look at a table would queue behind the readers' gates, which wait for this.)
        let (results, after) = self.block_on(async {
            futures_util::join!(
                futures_util::future::join_all(
                    statements.iter().map(|sql| client.batch_execute(sql)),
                ),
                async {
                    // Only a load's own commits end it: not an earlier run's, settled before
                    // this load's first stream opened.
                    match commit && self.streams_opened.load(Ordering::Relaxed) {
                        true => Some(position_and_settings(&client).await),
                        false => None,
                    }
                }
            )
        });
        // Always the last commits' reading: a failed one leaves the end to be asked for.
        if let Some((lsn, settings)) = after {
            *lock(&self.end_lsn) = lsn.ok().map(|lsn| (lsn, settings));
        }
        results
            .into_iter()
            .enumerate()
            .try_for_each(|(n, r)| match r {
                Ok(()) => Ok(()),
                // Already finished (by an earlier attempt, or by hand): nothing left to do.
                Err(e) if e.code().is_some_and(|c| c.code() == "42704") => Ok(()),
                Err(e) => Err((n, db_error(e))),
            })
    }

    fn prepared(&self, prefix: &str) -> Result<Vec<String>, DestinationError> {
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        self.on_client(|c| async move {
            let rows = c
                .fetch(
                    "SELECT gid FROM pg_prepared_xacts \
                     WHERE database = current_database() AND gid LIKE $1 ORDER BY gid",
                    &[&pattern],
                )
                .await
                .map_err(db_error)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn decide_commit(&self, job: i64, ids: &[String]) -> Result<(), DestinationError> {
        self.begun()?;
        let ids = ids.to_vec();
        self.on_client(|c| async move {
            crate::ledger::decide_commit(&c, job, &ids)
                .await
                .map_err(db_error)
        })
    }

    fn decided(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        self.on_client(|c| async move { crate::ledger::decided(&c, job).await.map_err(db_error) })
    }

    /// A gate on each table the commits make visible ([`crate::readers`]), on the prepared
    /// streams' connections where there are enough, else on new ones.
    fn hold_readers(&self, prepared: &[String]) -> Result<(), DestinationError> {
        if self.session.standbys > 0 {
            return Err(DestinationError::new(
                ErrorKind::Other,
                format!(
                    "this server streams to {} standby(s), which would replay the hold's \
                     ACCESS EXCLUSIVE lock and could cancel long queries there, so sluice does \
                     not hold readers on a primary with standbys",
                    self.session.standbys
                ),
            ));
        }
        let own = crate::readers::Own {
            names: self.tables.iter().map(|t| t.table.qualified()).collect(),
            oids: self.tables.iter().map(|t| t.table.oid).collect(),
        };
        let version = self.session.server_version_num;
        // The tables the transactions wrote beyond the load's own (a trigger's, a crew's other
        // workers'): those of the prepared ones, and of the open streams' for a back-to-back
        // commit.
        let writers = crate::readers::Writers {
            prepared: prepared.to_vec(),
            pids: match prepared.is_empty() {
                true => lock(&self.stream_pids).clone(),
                false => Vec::new(),
            },
        };
        let held = self.block_on(async {
            let client = self.live().await?;
            crate::readers::hold(&client, own, &writers, |n| self.gate_sessions(n), version)
                .await
                .map_err(|why| DestinationError::new(ErrorKind::Other, why))
        })?;
        *lock(&self.gates) = Some(held);
        Ok(())
    }

    fn release_readers(&self) {
        lock(&self.spare).clear();
        lock(&self.ahead).close_all();
        let Some(gates) = lock(&self.gates).take() else {
            return;
        };
        // A new connection if the load's own was lost (a failed COMMIT PREPARED): a gate
        // still waiting must be cancelled, or it holds readers until its bound.
        let early = self.block_on(async {
            match self.live().await {
                Ok(client) => gates.release(&client).await,
                Err(e) => vec![format!("cancelling the readers' gates: {e}")],
            }
        });
        for why in early {
            (self.warn)(format!(
                "readers of the load's tables were held back for only part of its commits \
                 ({why}): a reader's query in those milliseconds may have seen some of its \
                 transactions committed and not the others"
            ));
        }
    }

    fn activity_label(&self, class: Activity) -> Option<&'static str> {
        (class == Activity::Log).then_some("WAL")
    }

    fn advice(&self, class: Activity, waits: &ServerWaits, costs: &TableCosts) -> Option<String> {
        crate::watchdog::advice(class, waits, costs)
    }

    /// Read with the tables' descriptions; a table whose question failed then is asked now.
    fn table_costs(&self) -> TableCosts {
        let names: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        let ahead = &self.costs_ahead;
        self.on_client(|c| async move {
            let asked = names
                .iter()
                .map(|n| read_ahead_or(ahead, n, crate::catalog::table_cost_rows(&c, n)));
            let rows = futures_util::future::try_join_all(asked).await;
            Ok(crate::catalog::costs_of(rows.map_err(db_error)?.concat()))
        })
        .unwrap_or_default()
    }

    type Stream<'a> = PgStream<'a>;

    fn open_stream(&self, n: usize) -> Result<PgStream<'_>, DestinationError> {
        self.streams_opened.store(true, Ordering::Relaxed);
        let ahead = lock(&self.ahead).streams.pop();
        let opened = self.block_on(async {
            // One opened ahead, if it made it and is still connected (a long wait, for a
            // crew's other workers, may outlast a server's idle timeout); else (it failed, or
            // none was) one now, whose error is the one to report.
            let begin = crate::ledger::stream_begin(*lock(&self.job));
            if let Some(Ok(Ok(s))) = match ahead {
                Some(pending) => Some(pending.await),
                None => None,
            } {
                if !s.client().is_closed() {
                    let pending = send_begin(&s, begin).await;
                    return Ok((s, Some(pending)));
                }
            }
            let s = open_begun(self.info.clone(), self.identity.clone(), &begin).await?;
            Ok((s, None))
        });
        let (stream, begin_pending) = opened.map_err(|e| self.open_error(n, e))?;
        if let Some(w) = lock(&self.watchdog).as_ref() {
            w.register(n, stream.pid);
        }
        lock(&self.stream_pids).push(stream.pid);
        Ok(PgStream {
            dest: self,
            n,
            stream,
            begin_pending,
            writer: None,
            stage: None,
            stage_table: None,
            ledger: Vec::new(),
            tcp_mark: None,
            tcp: None,
        })
    }

    type Encoder<'a> = PgEncoder;

    fn encoder(&self, table: usize) -> PgEncoder {
        let t = &self.tables[table];
        PgEncoder {
            converter: Converter::new(t.columns.clone(), self.zone.clone()),
            binary: t.binary,
            oracle: Oracle::new(
                self.rt.handle().clone(),
                self.info.clone(),
                self.silence.clone(),
            ),
        }
    }

    fn name_transactions(&self, prefix: Option<&str>) {
        self.prepares.store(prefix.is_some(), Ordering::Relaxed);
        // Streams committed back to back leave no connection free for a gate: every table
        // needs a session of its own.
        if prefix.is_none() {
            let mut ahead = lock(&self.ahead);
            let planned = ahead.planned;
            self.open_gates_ahead(&mut ahead, planned, 0);
        }
    }

    fn open_ahead(&self, streams: usize) {
        let mut ahead = lock(&self.ahead);
        ahead.planned = streams;
        // Opened for more streams than the plan runs (`--jobs` above the chunks, say).
        while ahead.streams.len() > streams {
            if let Some(extra) = ahead.streams.pop() {
                extra.abort();
            }
        }
        let copies = self.copies_ahead();
        if !self.tables.is_empty() {
            // Those opened before the tables were known (by [`Destination::open_early`]) and
            // still connecting prepare them with their session's setup; those past it, once
            // open (in the background: a stream waits only if it comes first).
            if ahead.copies.set(copies.clone()).is_ok() {
                let opening: Vec<_> = ahead.streams.drain(..).collect();
                for pending in opening {
                    let prepared = prepare_once_open(pending, copies.clone());
                    ahead.streams.push(self.rt.spawn(prepared));
                }
            }
        }
        while ahead.streams.len() < streams {
            let (info, identity) = (self.info.clone(), self.identity.clone());
            let copies = ahead.copies.clone();
            let opening = async move { Stream::open_preparing(&info, &identity, copies).await };
            ahead.streams.push(self.rt.spawn(opening));
        }
        if ahead.watch.is_none() {
            let info = self.info.clone();
            ahead.watch = Some(self.rt.spawn(async move { connect(&info).await }));
        }
        self.open_gates_ahead(&mut ahead, streams, streams);
    }

    /// Only across a long path ([`GATES_AHEAD_FROM`]): nearby, the description they would
    /// overlap takes a millisecond, and connections the plan then closes would cost the
    /// server their starts for nothing.
    fn open_early(&self, streams: usize) {
        if self.long_path() {
            self.open_ahead(streams);
        }
    }

    fn watch(&self, streams: usize) -> Result<(), DestinationError> {
        let ahead = lock(&self.ahead).watch.take();
        let w = self
            .block_on(async {
                let client = match ahead {
                    Some(pending) => match pending.await {
                        Ok(Ok(client)) => client,
                        _ => connect(&self.info).await?,
                    },
                    None => connect(&self.info).await?,
                };
                let silence = self.silence.clone();
                Ok::<_, ConnectError>(Watchdog::start(
                    client,
                    &self.info,
                    streams,
                    self.warn.clone(),
                    Arc::new(move || silence.told()),
                ))
            })
            .map_err(|e| DestinationError::new(ErrorKind::Connection, e.to_string()))?;
        *lock(&self.watchdog) = Some(w);
        Ok(())
    }

    /// Read with the load's last log position ([`Destination::log_position`]) when it was
    /// asked for, in the same round trip; else now.
    fn settings(&self) -> Vec<(String, String)> {
        if let Some(read) = lock(&self.settings_read).take() {
            return read;
        }
        self.block_on(async {
            // The load's own connection: a new one costs a handshake and a few round trips.
            let client = self.live().await.ok()?;
            server_settings(&client).await.ok()
        })
        .unwrap_or_default()
    }

    fn stream_done(&self, n: usize) {
        if let Some(w) = lock(&self.watchdog).as_ref() {
            w.stream_done(n);
        }
    }

    fn close_ahead(&self) {
        lock(&self.ahead).close();
    }

    fn stop_watching(&self) -> ServerWaits {
        self.close_ahead();
        let w = lock(&self.watchdog).take();
        match w {
            Some(w) => self.block_on(w.stop()),
            None => ServerWaits::default(),
        }
    }

    fn key_columns(&self, index: &str) -> Option<Vec<String>> {
        self.block_on(async {
            // A side connection: the stream that failed is in an aborted transaction.
            let client = connect(&self.info).await.ok()?;
            index_key(&client, index).await.map(|(_, cols)| cols)
        })
    }

    fn split_encoded(
        &self,
        table: usize,
        encoded: &[u8],
        column: usize,
        each: &mut dyn FnMut(usize, Option<i64>),
    ) -> bool {
        match self.tables[table].binary {
            true => split_tuples(encoded, column, each),
            false => split_lines(encoded, column, each),
        }
        true
    }

    fn framing(&self, table: usize) -> (&[u8], &[u8]) {
        if self.tables[table].binary {
            (HEADER, TRAILER)
        } else {
            (&[], &[])
        }
    }

    /// The position read with the job's row, when there is one not yet taken (the load's
    /// start); else the one read behind the load's last commits, with the settings for the
    /// report (the load's end); otherwise the server is asked, with its settings
    /// ([`Destination::settings`]) in the same round trip.
    fn log_position(&self) -> Option<u64> {
        // The load's first asks here right after the job's start: the position read with its
        // row, rather than a question that would queue behind the files' insert.
        let begun = lock(&self.begin_lsn).take();
        let ended = lock(&self.end_lsn).take();
        let lsn: String = match (begun, ended) {
            (Some(lsn), _) => lsn,
            (None, Some((lsn, settings))) => {
                *lock(&self.settings_read) = settings;
                lsn
            }
            (None, None) => {
                let (lsn, settings) = self
                    .on_client(|c| async move {
                        let (lsn, settings) = position_and_settings(&c).await;
                        Ok((lsn.map_err(db_error)?, settings))
                    })
                    .ok()?;
                *lock(&self.settings_read) = settings;
                lsn
            }
        };
        let (hi, lo) = lsn.split_once('/')?;
        Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A load id: different for every load that can run at the same time.
fn load_id() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = (nanos ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as u32
}

/// A database error from the load's own connection, in the engine's terms.
fn db_error(e: tokio_postgres::Error) -> DestinationError {
    let e = ServerError::from_pg(&e);
    match condition::classify(&e) {
        ErrorKind::Condition => {
            DestinationError::new(ErrorKind::Condition, condition::condition_message(&e, &[]))
        }
        ErrorKind::Connection => DestinationError::new(ErrorKind::Connection, e.to_string()),
        // Outside a COPY nothing names a row: a refusal is the server's.
        _ => DestinationError::new(ErrorKind::Other, e.to_string()),
    }
}

impl Staging for PgDestination {
    fn set_lock_wait(&mut self, wait: std::time::Duration) {
        self.lock_wait = wait;
    }

    fn prepare_staging(&self, job: Option<i64>) -> Result<PreparedStaging, DestinationError> {
        let id = self.load_id;
        let found =
            self.on_client(
                |c| async move { stage::prepare(&c, id, job).await.map_err(prepare_error) },
            )?;
        let mut prepared = PreparedStaging {
            dropped: found.dropped,
            waiting: found.waiting,
            leftovers: Vec::new(),
        };
        // Each candidate stands in for a partition of one of this load's tables, as the
        // table is now, or it goes.
        let mut unfit = Vec::new();
        for (name, meta) in found.candidates {
            let place = self
                .tables
                .iter()
                .position(|t| t.table.oid == meta.parent)
                .and_then(|t| {
                    self.partitioning(t).ok()?;
                    let partitions = lock(&self.partitions);
                    let details = &partitions[t].as_ref()?.details;
                    let p = details
                        .iter()
                        .position(|d| d.oid == meta.partition && d.bound == meta.bound)?;
                    Some((t, p, details[p].clone()))
                });
            let Some((t, p, detail)) = place else {
                unfit.push((
                    name,
                    "its partition is gone, or was attached with other bounds",
                ));
                continue;
            };
            let parent = self.tables[t].table.qualified();
            let (fits, analyzed) = {
                let (name, parent) = (name.clone(), parent.clone());
                self.on_client(|c| async move {
                    stage::still_fits(&c, &name, &parent)
                        .await
                        .map_err(db_error)
                })?
            };
            if !fits {
                unfit.push((
                    name,
                    "the table's columns, CHECK constraints or indexes changed since",
                ));
                continue;
            }
            prepared.leftovers.push(Leftover {
                id: name.clone(),
                table: t,
                partition: p,
                chunks: meta.chunks,
            });
            lock(&self.leftovers).push(self.staged(t, detail, name, analyzed));
        }
        if !unfit.is_empty() {
            let names: Vec<String> = unfit.iter().map(|(n, _)| n.clone()).collect();
            self.on_client(
                |c| async move { stage::drop_named(&c, &names).await.map_err(db_error) },
            )?;
            prepared.dropped.extend(
                unfit
                    .into_iter()
                    .map(|(n, why)| format!("{}.{n} (this job's, but {why})", stage::SCHEMA)),
            );
        }
        Ok(prepared)
    }

    fn reuse_staging(&self, keep: &[String]) -> Result<(), DestinationError> {
        let (kept, other): (Vec<Staged>, Vec<Staged>) = std::mem::take(&mut *lock(&self.leftovers))
            .into_iter()
            .partition(|s| keep.contains(&s.staging));
        lock(&self.staged).extend(kept);
        let names: Vec<String> = other.into_iter().map(|s| s.staging).collect();
        if names.is_empty() {
            return Ok(());
        }
        self.on_client(|c| async move { stage::drop_named(&c, &names).await.map_err(db_error) })
    }

    /// Every table's partitions are asked for at the first question, together (across a long
    /// path, the round trips of one table's questions, not of all tables' in turn), and kept.
    fn partitioning(&self, table: usize) -> Result<Partitioning, DestinationError> {
        if let Some(p) = &lock(&self.partitions)[table] {
            return Ok(p.partitioning.clone());
        }
        let parents: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        let ahead = &self.partitions_ahead;
        let all = self.on_client(|c| async move {
            let asked = parents
                .iter()
                .map(|p| read_ahead_or(ahead, p, stage::describe_partitions(&c, p)));
            Ok(futures_util::future::join_all(asked).await)
        })?;
        // Another table's failure is that table's to report, when it is asked about.
        let mut known = lock(&self.partitions);
        let mut mine = None;
        for (t, p) in all.into_iter().enumerate() {
            match p {
                Ok(p) if known[t].is_none() => known[t] = Some(p),
                Err(e) if t == table => mine = Some(db_error(e)),
                _ => {}
            }
        }
        match (mine, &known[table]) {
            (Some(e), _) => Err(e),
            (None, Some(p)) => Ok(p.partitioning.clone()),
            (None, None) => Ok(Partitioning::None),
        }
    }

    fn begin_stage(
        &self,
        stream: &mut PgStream<'_>,
        table: usize,
        partition: usize,
    ) -> Result<(), DestinationError> {
        let detail = lock(&self.partitions)[table]
            .as_ref()
            .and_then(|p| p.details.get(partition).cloned())
            .ok_or_else(|| {
                DestinationError::new(ErrorKind::Other, "staging before asking for partitions")
            })?;
        let parent = self.tables[table].table.qualified();
        let seq = self.stage_seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.staging_streams).insert(stream.n);
        let staging = stage::staging_name(self.load_id, seq);
        self.block_on(stage::create_staging(
            stream.session()?.client(),
            &parent,
            &detail,
            &staging,
        ))
        .map_err(|e| self.error(stream.n, ServerError::from_pg(&e)))?;
        stream.stage = Some(self.staged(table, detail, staging, true));
        stream.stage_table = Some(table);
        Ok(())
    }

    fn finish_stage(
        &self,
        stream: &mut PgStream<'_>,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<StageTimes, DestinationError> {
        let Some(staged) = stream.stage.take() else {
            return Err(DestinationError::new(ErrorKind::Other, "no staging table"));
        };
        let table = stream.stage_table.take();
        let client = stream.session()?.client();
        let mut times = StageTimes {
            table: staged.staging.clone(),
            ..StageTimes::default()
        };
        let mut committed = false;
        let mut job_failed = false;
        let crew_job = job.filter(|_| self.crew.load(std::sync::atomic::Ordering::SeqCst));
        // What a later run of the job needs to publish it instead of loading it again.
        let meta = match (job, table) {
            (Some(job), Some(t)) => Some(stage::StagedMeta {
                job,
                since: 0,
                parent: self.tables[t].table.oid,
                partition: staged.partition.oid,
                bound: staged.partition.bound.clone(),
                chunks: chunks.to_vec(),
            }),
            _ => None,
        };
        let result = self.block_on(async {
            if let Some(meta) = &meta {
                stage::mark(client, &staged.staging, &staged.partition, meta).await?;
            }
            let t = std::time::Instant::now();
            let serial = lock(&self.staging_streams).len() > 1;
            stage::build_indexes(client, &staged.parent, &staged.staging, serial).await?;
            times.index = t.elapsed();
            if let Some(job) = crew_job {
                if !crate::crew::running(client, job).await? {
                    job_failed = true;
                    return client.batch_execute("ROLLBACK; BEGIN").await;
                }
            }
            // The commit's row counts reach the server's statistics before the ANALYZE
            // below, which then leaves nothing for autovacuum to analyze again: with the
            // ANALYZE inside the loading transaction, every partition would show all its
            // rows as changed since, and be analyzed a second time a minute later.
            client.batch_execute("COMMIT").await?;
            committed = true;
            if self.session.server_version_num >= 150_000 {
                // The counts are sent when the session goes idle, at most once a second
                // unless forced. Outside the transaction: a refusal costs only a re-analyze.
                let _ = client
                    .batch_execute("SELECT pg_stat_force_next_flush()")
                    .await;
            }
            // Here, in parallel with the other streams, rather than in the parents'
            // ANALYZE after the publish (see `stage::analyze_parents`).
            let t = std::time::Instant::now();
            stage::analyze(client, &staged.staging).await?;
            times.analyze = t.elapsed();
            client.batch_execute("BEGIN").await
        });
        let partition = staged.partition.qualified();
        // Once committed, the staging table is the publish's (or, on failure, the discard's),
        // and the unit is done: a failure after the COMMIT (its ANALYZE, the next BEGIN; a
        // connection lost there) must not send the unit back to be loaded a second time. Its
        // statistics are then the parents' ANALYZE's and autovacuum's to gather, and the
        // stream's next statement finds a lost connection and reconnects.
        if committed {
            lock(&self.staged).push(staged);
            return Ok(times);
        }
        if job_failed && result.is_ok() {
            return Err(DestinationError::new(
                ErrorKind::Other,
                format!(
                    "job {} failed while this worker staged partition {partition} (another \
                     worker's failure, said there): its staging table was rolled back",
                    crew_job.unwrap_or_default()
                ),
            ));
        }
        result.map_err(|e| {
            // The staging table's name means nothing to the user; its partition does.
            let mut err = self.error(stream.n, ServerError::from_pg(&e));
            let what = match job_failed {
                true => format!("rolling back the staging table of partition {partition}"),
                false => format!("building the indexes of partition {partition}"),
            };
            err.summary = format!("{what}: {}", err.summary);
            err.message = format!("{what}: {}", err.message);
            err
        })?;
        Ok(times)
    }

    fn abandon_stage(&self, stream: &mut PgStream<'_>) -> Result<(), DestinationError> {
        stream.stage = None;
        stream.stage_table = None;
        self.block_on(stream.session()?.client().batch_execute("ROLLBACK; BEGIN"))
            .map_err(|e| self.error(stream.n, ServerError::from_pg(&e)))
    }

    fn outside_partition(&self, e: &DestinationError) -> bool {
        e.kind == ErrorKind::Rejected && e.index.as_deref() == Some(stage::BOUND_CHECK)
    }

    fn discard_staging(&self) -> Result<(), DestinationError> {
        let staged = std::mem::take(&mut *lock(&self.staged));
        let names: Vec<String> = staged.into_iter().map(|s| s.staging).collect();
        self.on_client(|c| async move { stage::drop_named(&c, &names).await.map_err(db_error) })
    }

    fn switch_in(&self, stream: &mut PgStream<'_>) -> Result<PublishTimes, DestinationError> {
        let staged = lock(&self.staged).clone();
        let times = self
            .block_on(stage::switch_in(
                stream.session()?.client(),
                &staged,
                self.lock_wait,
            ))
            .map_err(|e| match e {
                PublishError::Db(e) => {
                    let mut err = db_error(e);
                    err.message = format!("the publish failed: {}", err.message);
                    err
                }
                PublishError::Locked(who) => DestinationError::new(
                    ErrorKind::Other,
                    format!(
                        "the publish could not lock the tables in {} attempts of {} ms each; \
                         nothing was published. Holding locks: {who}. End those sessions' \
                         transactions, or give the publish longer with --lock-wait-timeout",
                        stage::PUBLISH_ATTEMPTS,
                        self.lock_wait.as_millis()
                    ),
                ),
            })?;
        // A switched-in partition keeps the statistics its stream gathered; an appended one
        // lost them with its staging table and is analyzed with its parent.
        *lock(&self.analyzed) = stage::kept_statistics(&staged, &times.appended);
        Ok(times)
    }

    fn gather_statistics(&self, parallel: usize) -> std::time::Duration {
        // Its ANALYZE writes to the log after the commits: the load's end is read after it.
        lock(&self.end_lsn).take();
        let parents = stage::parents_of(&lock(&self.staged));
        let started = std::time::Instant::now();
        let analyzed = lock(&self.analyzed).clone();
        self.analyze_parents("the load", &parents, &analyzed, parallel);
        started.elapsed()
    }
}

impl PgDestination {
    /// The parents' statistics after a publish of `what` (the load, a job of several workers)
    /// committed, `parallel` at a time ([`stage::analyze_parents`]). A failure is a warning:
    /// the data is in and visible; only the statistics are missing.
    fn analyze_parents(
        &self,
        what: &str,
        parents: &[String],
        analyzed: &[String],
        parallel: usize,
    ) {
        let gathered = self.block_on(stage::analyze_parents(
            &self.info,
            parents,
            analyzed,
            parallel,
            self.lock_wait,
        ));
        if let Err(e) = gathered {
            (self.warn)(format!(
                "{what} is published, but gathering statistics failed ({e}); run ANALYZE on \
                 {} yourself",
                parents.join(", ")
            ));
        }
    }

    /// Staging table `staging` of the load's table `table`, standing in for `partition`.
    fn staged(
        &self,
        table: usize,
        partition: stage::PartitionDetail,
        staging: String,
        analyzed: bool,
    ) -> Staged {
        let t = &self.tables[table].table;
        Staged {
            parent: t.qualified(),
            columns: t.columns.iter().map(|c| quote_ident(&c.name)).collect(),
            partition,
            staging,
            analyzed,
        }
    }
}

/// Readying the staging area failed: the role's to fix, or the server's.
fn prepare_error(e: stage::PrepareError) -> DestinationError {
    match e {
        stage::PrepareError::Db(e) => db_error(e),
        other => DestinationError::new(ErrorKind::Usage, other.to_string()),
    }
}

/// Inserts a stream's held ledger rows, one statement per job.
async fn record_held(
    client: &Client,
    mut held: Vec<(i64, ChunkRecord)>,
) -> Result<(), tokio_postgres::Error> {
    while let Some(&(job, _)) = held.first() {
        let (mine, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|(j, _)| *j == job);
        let chunks: Vec<ChunkRecord> = mine.into_iter().map(|(_, c)| c).collect();
        crate::ledger::record(client, job, &chunks).await?;
        held = rest;
    }
    Ok(())
}

/// Keeps what a table's description read ahead for `name` (its partitions, its costs), or,
/// where the question failed, forgets it: it is asked again when the engine asks.
fn keep_ahead<T, E>(
    ahead: &mut std::collections::HashMap<String, T>,
    name: &str,
    read: Result<T, E>,
) {
    match read {
        Ok(known) => ahead.insert(name.to_string(), known),
        Err(_) => ahead.remove(name),
    };
}

/// What was read ahead for `name` ([`keep_ahead`]), else the answer to `ask`, asked now.
async fn read_ahead_or<T: Clone, E>(
    ahead: &std::collections::HashMap<String, T>,
    name: &str,
    ask: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match ahead.get(name) {
        Some(known) => Ok(known.clone()),
        None => ask.await,
    }
}

/// A stream's BEGIN, sent and not yet answered ([`PgStream::begin_pending`]).
type PendingBegin = tokio::task::JoinHandle<Result<(), ServerError>>;

/// Polls `task` once, which writes its statements to the connection (tokio-postgres queues a
/// request when it is first polled): its answer if it came at once, else the task, left to
/// the runtime.
async fn send_now<T: Send + 'static>(
    task: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinHandle<T>> {
    use std::task::Poll;
    let mut task = Box::pin(task);
    match std::future::poll_fn(|cx| Poll::Ready(task.as_mut().poll(cx))).await {
        Poll::Ready(answer) => Ok(answer),
        Poll::Pending => Err(tokio::spawn(task)),
    }
}

/// Sends stream `s`'s BEGIN (`begin`, [`crate::ledger::stream_begin`]) now, so that every
/// later statement of the stream follows it on the connection; its answer is left to the
/// runtime.
async fn send_begin(s: &Stream, begin: String) -> PendingBegin {
    let client = s.shared_client();
    let task = async move {
        client
            .batch_execute(&begin)
            .await
            .map_err(|e| ServerError::from_pg(&e))
    };
    match send_now(task).await {
        Ok(answer) => tokio::spawn(async move { answer }),
        Err(pending) => pending,
    }
}

/// A connection opened ahead (`opening`) with `copies` ([`crate::stream::copy_sql`])
/// prepared once it is open, those it prepared with its setup not again.
async fn prepare_once_open(
    opening: tokio::task::JoinHandle<Result<Stream, StreamOpenError>>,
    copies: Vec<String>,
) -> Result<Stream, StreamOpenError> {
    // Aborted with this task ([`Ahead::close`]), the opening stops too.
    let mut opening = AbortOnDrop(opening);
    let s = (&mut opening.0)
        .await
        .map_err(|e| StreamOpenError::Server(ServerError::lost(e.to_string())))??;
    s.prepare_copies_waiting(copies).await;
    Ok(s)
}

/// A task that is aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The answer to a BEGIN sent ahead ([`send_begin`]), if one was; a task that failed to give
/// it is a lost connection.
async fn begin_answer(pending: Option<PendingBegin>) -> Result<(), ServerError> {
    match pending {
        None => Ok(()),
        Some(p) => match p.await {
            Ok(answer) => answer,
            Err(e) => Err(ServerError::lost(e.to_string())),
        },
    }
}

/// A stream's connection, opened with its transaction begun.
async fn open_begun(
    info: ConnInfo,
    identity: String,
    begin: &str,
) -> Result<Stream, StreamOpenError> {
    let s = Stream::open(&info, &identity).await?;
    s.begin(begin).await.map_err(StreamOpenError::Server)?;
    Ok(s)
}

/// The server's log position and, for the report, its settings (`None` where they could not
/// be read), in one round trip.
async fn position_and_settings(
    client: &Client,
) -> (Result<String, tokio_postgres::Error>, Option<Settings>) {
    let (lsn, settings) = futures_util::join!(
        client.fetch_one("SELECT pg_current_wal_lsn()::text", &[]),
        server_settings(client)
    );
    (lsn.map(|r| r.get(0)), settings.ok())
}

/// The server settings a load's report shows, as `name`, value.
async fn server_settings(client: &Client) -> Result<Vec<(String, String)>, tokio_postgres::Error> {
    const NAMES: &[&str] = &[
        "server_version",
        "max_connections",
        "shared_buffers",
        "wal_level",
        "wal_compression",
        "synchronous_commit",
        "fsync",
        "full_page_writes",
        "min_wal_size",
        "max_wal_size",
        "checkpoint_timeout",
        "wal_init_zero",
        "maintenance_work_mem",
        "max_parallel_maintenance_workers",
        "autovacuum",
    ];
    let names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    let rows = client
        .fetch(
            "SELECT name, current_setting(name) FROM pg_settings \
             WHERE name = ANY($1) ORDER BY array_position($1, name)",
            &[&names],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

impl PgDestination {
    /// What the ledger was seen to hold as it opened, for the load's first questions.
    fn ledger_held(&self, held: crate::ledger::Held) {
        self.none_finished.store(!held.finished, Ordering::Relaxed);
        self.no_job.store(held.empty, Ordering::Relaxed);
    }
}

/// A ledger failure in the engine's terms: a refusal is the user's to act on.
fn ledger_error(e: crate::ledger::LedgerError) -> DestinationError {
    match e {
        crate::ledger::LedgerError::Db(e) => db_error(e),
        crate::ledger::LedgerError::Refused(m) => DestinationError::new(ErrorKind::Usage, m),
        crate::ledger::LedgerError::Raced(m) | crate::ledger::LedgerError::Busy(m) => {
            DestinationError::new(ErrorKind::Transient, m)
        }
    }
}

impl Ledger for PgDestination {
    fn open_ledger(&self) -> Result<(), DestinationError> {
        let held =
            self.on_client(|c| async move { crate::ledger::open(&c).await.map_err(ledger_error) })?;
        self.ledger_held(held);
        Ok(())
    }

    fn hold_ledger(&self) -> Result<bool, DestinationError> {
        use crate::ledger::Pending;
        let pending = self.on_client(|c| async move {
            let pending = crate::ledger::open_pending(&c)
                .await
                .map_err(ledger_error)?;
            Ok(pending.map(|p| (p, c)))
        })?;
        match pending {
            // There already: committed, and opened again after the plan, when what it holds
            // is read for the load (the check may take seconds, and other loads finish jobs).
            None | Some((Pending::Opened, _)) => Ok(false),
            Some((Pending::Made(held), client)) => {
                self.ledger_held(held);
                *lock(&self.ledger_pending) = Some(client);
                Ok(true)
            }
        }
    }

    fn settle_ledger(&self, keep: bool) -> Result<(), DestinationError> {
        let Some(client) = lock(&self.ledger_pending).take() else {
            return Ok(());
        };
        self.block_on(async move {
            crate::ledger::settle(&client, keep)
                .await
                .map_err(ledger_error)
        })
    }

    fn jobs(&self, key: Option<&str>) -> Result<Vec<Job>, DestinationError> {
        // A load's first look in a ledger seen empty as it was opened (just made, say) finds
        // nothing: no round trip. Only the first: a run of the same command that recorded its
        // job since is found when the load looks again (its job's record is refused).
        if key.is_some() && self.no_job.swap(false, Ordering::Relaxed) {
            return Ok(Vec::new());
        }
        let jobs = self
            .on_client(|c| async move { crate::ledger::jobs(&c, key).await.map_err(db_error) })?;
        // A job of this key that finished since the ledger was opened (another process's run
        // of the same command): the ledger is no longer without finished jobs.
        if jobs.iter().any(|j| j.state == JobState::Finished) {
            self.none_finished.store(false, Ordering::Relaxed);
        }
        Ok(jobs)
    }

    fn job_files(&self, job: i64) -> Result<Vec<FileRecord>, DestinationError> {
        self.on_client(|c| async move { crate::ledger::job_files(&c, job).await.map_err(db_error) })
    }

    fn job_chunks(&self, job: i64) -> Result<Vec<ChunkRecord>, DestinationError> {
        self.on_client(
            |c| async move { crate::ledger::job_chunks(&c, job).await.map_err(db_error) },
        )
    }

    fn loaded_by(&self, files: &[FileRecord]) -> Result<Vec<Option<LoadedBy>>, DestinationError> {
        if self.none_finished.load(Ordering::Relaxed) {
            return Ok(vec![None; files.len()]);
        }
        self.on_client(
            |c| async move { crate::ledger::loaded_by(&c, files).await.map_err(db_error) },
        )
    }

    fn placements(&self, job: i64, files: &[u32]) -> Result<Vec<PlacementCheck>, DestinationError> {
        self.on_client(|c| async move {
            crate::ledger::placements(&c, job, files)
                .await
                .map_err(db_error)
        })
    }

    fn finish_job(&self, job: i64, placements: &[Placement]) -> Result<(), DestinationError> {
        self.begun()?;
        self.none_finished.store(false, Ordering::Relaxed);
        self.on_client(|c| async move {
            crate::ledger::finish(&c, job, placements)
                .await
                .map_err(db_error)
        })?;
        if let Some(p) = lock(&self.published).take() {
            let parallel = p.parents.len().clamp(1, 4);
            self.analyze_parents("the job", &p.parents, &p.analyzed, parallel);
        }
        Ok(())
    }

    fn begin_job(&self, spec: &JobSpec) -> Result<i64, DestinationError> {
        self.begun()?;
        let tables: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        let (id, lsn, client) = self.on_client(|c| async move {
            let (id, lsn) = crate::ledger::begin_row(&c, spec, &tables)
                .await
                .map_err(ledger_error)?;
            Ok((id, lsn, c))
        })?;
        *lock(&self.begin_lsn) = Some(lsn);
        let files = spec.files.clone();
        let rest = async move {
            crate::ledger::record_files(&client, id, &files)
                .await
                .map_err(ledger_error)
        };
        *lock(&self.begun) = self.send_ahead(rest)?;
        *lock(&self.job) = Some(id);
        Ok(id)
    }

    fn resume_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        let ended = self.on_client(|c| async move {
            crate::ledger::resume(&c, job).await.map_err(ledger_error)
        })?;
        *lock(&self.job) = Some(job);
        Ok(ended)
    }

    fn end_job(
        &self,
        job: i64,
        state: JobState,
        message: Option<&str>,
    ) -> Result<(), DestinationError> {
        self.begun()?;
        self.on_client(|c| async move {
            crate::ledger::end(&c, job, state, message)
                .await
                .map_err(db_error)
        })
    }

    /// The job's lock, and then no session of its earlier runs' streams left (what they
    /// commit or prepare must have landed before the job's leftovers are finished).
    fn hold_job(&self, job: i64) -> Result<Option<String>, DestinationError> {
        self.on_client(|c| async move { crate::ledger::hold(&c, job).await.map_err(ledger_error) })
    }

    fn forget_job(&self, job: i64) -> Result<Vec<String>, DestinationError> {
        let id = self.load_id;
        self.on_client(|c| async move {
            crate::ledger::forget(&c, job).await.map_err(ledger_error)?;
            // The staging tables of loads that no longer run go with it (they may be this
            // job's, or another dead load's: none can be published any more).
            let staging: bool = c
                .fetch_one("SELECT to_regnamespace($1) IS NOT NULL", &[&stage::SCHEMA])
                .await
                .map_err(db_error)?
                .get(0);
            if !staging {
                return Ok(Vec::new());
            }
            let found = stage::prepare(&c, id, None).await.map_err(prepare_error)?;
            Ok(found.dropped)
        })
    }

    fn join_crew(&self, join: &CrewJoin, spec: &JobSpec) -> Result<Joined, DestinationError> {
        if join.workers > crate::crew::MAX_WORKERS {
            return Err(DestinationError::new(
                ErrorKind::Usage,
                format!("--workers: at most {}", crate::crew::MAX_WORKERS),
            ));
        }
        let tables: Vec<String> = self.tables.iter().map(|t| t.table.qualified()).collect();
        let joined = self.on_client(|c| async move {
            crate::crew::join(&c, join, spec, &tables)
                .await
                .map_err(ledger_error)
        })?;
        self.crew.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(joined)
    }

    fn add_claims(&self, job: i64, chunks: &[ChunkRecord]) -> Result<(), DestinationError> {
        self.on_client(|c| async move {
            crate::crew::add_claims(&c, job, chunks)
                .await
                .map_err(db_error)
        })
    }

    fn hand_over(
        &self,
        job: i64,
        worker: u32,
        prepared: &[String],
        part: &WorkerPart,
    ) -> Result<CrewTurn, DestinationError> {
        let lock_wait = self.lock_wait;
        let (turn, published) = self.on_client(|c| async move {
            crate::crew::hand_over(&c, job, worker, prepared, part, lock_wait)
                .await
                .map_err(ledger_error)
        })?;
        if !published.parents.is_empty() {
            *lock(&self.published) = Some(published);
        }
        Ok(turn)
    }

    fn hold_crew_wire(
        &self,
        job: i64,
        hold: bool,
        wait: std::time::Duration,
    ) -> Result<bool, DestinationError> {
        self.on_client(|c| async move {
            crate::crew::hold_wire(&c, job, hold, wait)
                .await
                .map_err(db_error)
        })
    }

    fn crew_wire(&self, job: i64) -> Result<Option<String>, DestinationError> {
        self.on_client(|c| async move { crate::crew::wire(&c, job).await.map_err(db_error) })
    }

    fn set_crew_wire(&self, job: i64, decision: &str) -> Result<(), DestinationError> {
        self.on_client(|c| async move {
            crate::crew::set_wire(&c, job, decision)
                .await
                .map_err(db_error)
        })
    }

    fn crew_status(&self, job: i64) -> Result<CrewStatus, DestinationError> {
        self.on_client(|c| async move { crate::crew::status(&c, job).await.map_err(db_error) })
    }

    fn fail_crew(&self, job: i64, worker: u32, why: &str) -> Result<bool, DestinationError> {
        self.on_client(|c| async move {
            crate::crew::fail(&c, job, worker, why)
                .await
                .map_err(db_error)
        })
    }
}

/// One table's records to binary COPY tuples (or text COPY lines, for a table with a column
/// the server must convert), with PostgreSQL's rules; spellings sluice does not parse go to
/// the server through the [`Oracle`].
pub struct PgEncoder {
    converter: Converter,
    binary: bool,
    oracle: Oracle,
}

impl RecordEncoder for PgEncoder {
    #[inline]
    fn encode(
        &mut self,
        fields: &Fields,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if self.binary {
            self.converter
                .encode_record(fields, input, out, Some(&mut self.oracle))
        } else {
            self.converter.encode_text_record(fields, input, out)
        }
    }

    #[inline]
    fn encode_plain(
        &mut self,
        parser: &RecordParser,
        input: &[u8],
        start: usize,
        out: &mut Vec<u8>,
        limit: usize,
        same_input: bool,
    ) -> (usize, usize) {
        if !self.binary {
            return (0, start);
        }
        self.converter.encode_plain(
            parser,
            input,
            start,
            out,
            limit,
            same_input,
            Some(&mut self.oracle),
        )
    }

    fn encode_field(&mut self, column: usize, raw: &[u8]) -> Option<Vec<u8>> {
        self.converter.encode_field(column, raw)
    }

    fn server_conversions(&self) -> u64 {
        self.oracle.conversions
    }
}

/// One connection of a load, inside its transaction.
pub struct PgStream<'a> {
    dest: &'a PgDestination,
    n: usize,
    stream: Stream,
    /// Its BEGIN, sent when a connection opened ahead became this stream and not awaited:
    /// the first COPY's bind goes out right behind it, both answered in one round trip where
    /// the COPY was prepared ahead (a round trip fewer before the first row, across a long
    /// path). Every other statement waits for it first ([`PgStream::transaction_begun`]).
    begin_pending: Option<PendingBegin>,
    writer: Option<CopyWriter>,
    /// The connection's TCP figures when the COPY in progress started sending.
    tcp_mark: Option<Transport>,
    /// Its figures over its COPYs so far.
    tcp: Option<Transport>,
    /// The staging table this stream's transaction is filling, if any.
    stage: Option<Staged>,
    /// The load's table whose COPYs go to that staging table.
    stage_table: Option<usize>,
    /// Chunk records for the ledger, not yet inserted: they go in with the transaction's
    /// deferred checks or its commit (the same transaction either way), so that a stream of
    /// many small chunks pays one round trip for many records, not one each.
    ledger: Vec<(i64, ChunkRecord)>,
}

/// Chunk records a stream holds before it inserts them anyway.
const LEDGER_BATCH: usize = 512;

impl PgStream<'_> {
    /// Waits for the BEGIN sent as the stream opened ([`PgStream::begin_pending`]), once.
    fn transaction_begun(&mut self) -> Result<(), DestinationError> {
        let pending = self.begin_pending.take();
        match self.dest.block_on(begin_answer(pending)) {
            Ok(()) => Ok(()),
            Err(_) => self.begin_again(),
        }
    }

    /// The BEGIN sent on a connection opened ahead failed (one that died while it waited, say):
    /// a new connection, begun, takes its place, as [`PgDestination::open_stream`] opens one
    /// where none was opened ahead; its error is the one to report.
    fn begin_again(&mut self) -> Result<(), DestinationError> {
        let (dest, n) = (self.dest, self.n);
        let begin = crate::ledger::stream_begin(*lock(&dest.job));
        let fresh = dest
            .block_on(open_begun(dest.info.clone(), dest.identity.clone(), &begin))
            .map_err(|e| dest.open_error(n, e))?;
        if let Some(w) = lock(&dest.watchdog).as_ref() {
            w.unregister(n, self.stream.pid, &self.stream.started);
            w.register(n, fresh.pid);
        }
        let mut pids = lock(&dest.stream_pids);
        pids.retain(|&p| p != self.stream.pid);
        pids.push(fresh.pid);
        self.stream = fresh;
        Ok(())
    }

    /// The stream's session, its transaction begun: every statement but the first COPY's
    /// goes through here.
    fn session(&mut self) -> Result<&Stream, DestinationError> {
        self.transaction_begun()?;
        Ok(&self.stream)
    }

    /// Adds what the connection did during the COPY that just ended to the stream's figures.
    fn count_copy(&mut self) {
        let (Some(start), Some(now)) = (self.tcp_mark.take(), self.stream.transport()) else {
            return;
        };
        let copy = now.since(start);
        self.tcp = Some(match self.tcp {
            Some(before) => before.then(copy),
            None => Transport {
                connections: 1,
                ..copy
            },
        });
    }

    /// Inserts the chunk records the stream holds, and sends `then` (its COMMIT, PREPARE or
    /// deferred checks) right behind them: one round trip. A failed insert aborts the
    /// transaction (a COMMIT or PREPARE then rolls it back): the insert's error is the one
    /// returned. Records of several jobs (one insert each) go first, on their own, so that
    /// none comes after `then`.
    fn records_and<'s, T, F: std::future::Future<Output = T>>(
        &'s mut self,
        then: impl FnOnce(&'s Stream) -> F,
    ) -> Result<T, DestinationError> {
        if self.ledger.windows(2).any(|w| w[0].0 != w[1].0) {
            self.flush_ledger()?;
        }
        self.transaction_begun()?;
        let held = std::mem::take(&mut self.ledger);
        let (dest, n, stream) = (self.dest, self.n, &self.stream);
        let (recorded, then) = dest.block_on(async {
            futures_util::join!(record_held(stream.client(), held), then(stream))
        });
        recorded.map_err(|e| dest.error(n, ServerError::from_pg(&e)))?;
        Ok(then)
    }

    /// Inserts the chunk records the stream holds, in its transaction.
    fn flush_ledger(&mut self) -> Result<(), DestinationError> {
        self.transaction_begun()?;
        let held = std::mem::take(&mut self.ledger);
        self.dest
            .block_on(record_held(self.stream.client(), held))
            .map_err(|e| self.dest.error(self.n, ServerError::from_pg(&e)))
    }
}

/// A stream's connection ends here (committed, rolled back, or lost): its backend is no
/// longer one of the load's live streams. If the server still runs it (a connection sluice
/// lost but the server did not), the watchdog knows it as the load's own from now on, also
/// while the stream pauses before it reconnects and a sibling takes its chunks.
impl Drop for PgStream<'_> {
    fn drop(&mut self) {
        if let Some(w) = lock(&self.dest.watchdog).as_ref() {
            w.unregister(self.n, self.stream.pid, &self.stream.started);
        }
        lock(&self.dest.stream_pids).retain(|&p| p != self.stream.pid);
    }
}

impl PgStream<'_> {
    fn execute(&mut self, sql: &str) -> Result<(), DestinationError> {
        let (dest, n) = (self.dest, self.n);
        dest.block_on(self.session()?.execute(sql))
            .map_err(|e| dest.error(n, e))
    }
}

impl DestinationStream for PgStream<'_> {
    fn begin_copy(&mut self, table: usize) -> Result<(), DestinationError> {
        let t = &self.dest.tables[table];
        let (relation, freeze) = match (&self.stage, self.stage_table) {
            (Some(s), Some(st)) if st == table => (
                format!("{}.{}", quote_ident(stage::SCHEMA), quote_ident(&s.staging)),
                true,
            ),
            _ => (t.table.qualified(), false),
        };
        let pending = self.begin_pending.take();
        let (copy, began) = self.dest.block_on(async {
            // The bind goes out behind the BEGIN sent as the stream opened: where its COPY
            // was prepared ahead, one round trip answers both.
            let copy = self.stream.copy_in(&relation, &t.columns, t.binary, freeze);
            futures_util::join!(copy, begin_answer(pending))
        });
        let copy = match began {
            Ok(()) => copy,
            Err(_) => {
                // A COPY whose BEGIN failed would run on its own and commit: dropping its
                // writer unsent ends it with CopyFail, and nothing of it stays. A new
                // connection, begun, runs it instead.
                drop(copy);
                self.begin_again()?;
                let copying = self.stream.copy_in(&relation, &t.columns, t.binary, freeze);
                self.dest.block_on(copying)
            }
        };
        let w = copy.map_err(|e| self.dest.error(self.n, e))?;
        self.writer = Some(w);
        self.tcp_mark = self.stream.transport();
        Ok(())
    }

    fn send(&mut self, data: Vec<u8>) -> Result<(), DestinationError> {
        let Some(w) = self.writer.as_mut() else {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "no COPY in progress",
            ));
        };
        if let Err(send_err) = self.dest.block_on(w.send(Bytes::from(data))) {
            // A failed send usually means the server rejected the COPY: finishing it returns
            // the server's own error, with the record it names.
            let e = match self.writer.take() {
                Some(w) => self.dest.block_on(w.finish()).err().unwrap_or(send_err),
                None => send_err,
            };
            return Err(self.dest.error(self.n, e));
        }
        Ok(())
    }

    fn finish_copy(&mut self) -> Result<u64, DestinationError> {
        let Some(w) = self.writer.take() else {
            return Err(DestinationError::new(
                ErrorKind::Other,
                "no COPY in progress",
            ));
        };
        let finished = self.dest.block_on(w.finish());
        self.count_copy();
        finished.map_err(|e| self.dest.error(self.n, e))
    }

    fn fire_deferred_checks(&mut self) -> Result<(), DestinationError> {
        // No constraint or trigger of the database could be deferred when the load began (one
        // added since to a table the load writes waits for the load's locks; only another
        // table's, written by a trigger, could slip in between): no check waits for the
        // commit. Prepared streams then send their held ledger rows with the PREPARE, a round
        // trip fewer; streams committed back to back insert them now, so that a refused row
        // fails the load before any stream commits.
        if !self.dest.session.deferrable {
            return match self.dest.prepares.load(Ordering::Relaxed) {
                true => Ok(()),
                false => self.flush_ledger(),
            };
        }
        // The held ledger rows and the checks go out together: one round trip, not two; the
        // rows before the checks' savepoint.
        let fired = self.records_and(|s| s.fire_deferred_checks())?;
        let Err(e) = fired else {
            return Ok(());
        };
        let mut err = self.dest.error(self.n, e.clone());
        if let (ErrorKind::Conflict { .. }, Some(index), Some(tid)) =
            (err.kind, e.context_relation(), e.context_tuple())
        {
            // The waiting row is this stream's own: read its key back, which only this
            // transaction can see.
            if let Some((columns, values)) = self
                .dest
                .block_on(self.stream.deferred_conflict_key(&index, &tid))
            {
                err.key = Some(ErrorKey { columns, values });
            }
        }
        Err(err)
    }

    fn savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("SAVEPOINT sluice_rows")
    }

    fn release_savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("RELEASE SAVEPOINT sluice_rows")
    }

    fn rollback_to_savepoint(&mut self) -> Result<(), DestinationError> {
        self.execute("ROLLBACK TO SAVEPOINT sluice_rows")
    }

    fn check_each_copy(&mut self) -> Result<(), DestinationError> {
        self.execute("SET CONSTRAINTS ALL IMMEDIATE")
    }

    fn record_chunks(&mut self, job: i64, chunks: &[ChunkRecord]) -> Result<(), DestinationError> {
        self.ledger.extend(chunks.iter().map(|c| (job, c.clone())));
        match self.ledger.len() >= LEDGER_BATCH {
            true => self.flush_ledger(),
            false => Ok(()),
        }
    }

    fn transport(&self) -> Option<Transport> {
        self.tcp
    }

    fn claim(
        &mut self,
        job: i64,
        worker: u32,
        chunks: &[ChunkRecord],
    ) -> Result<Vec<Claim>, DestinationError> {
        let (dest, n) = (self.dest, self.n);
        dest.block_on(crate::crew::claim(
            self.session()?.client(),
            job,
            worker,
            chunks,
        ))
        .map_err(|e| dest.error(n, ServerError::from_pg(&e)))
    }

    fn commit(mut self) -> Result<(), DestinationError> {
        self.dest.begun()?;
        let committed = self.records_and(|s| s.commit())?;
        committed.map_err(|e| self.dest.error(self.n, e))
    }

    fn prepare(mut self, id: &str) -> Result<String, DestinationError> {
        self.dest.begun()?;
        let prepared = self.records_and(|s| s.prepare(id))?;
        prepared.map_err(|e| self.dest.error(self.n, e))?;
        // Its session is free now: a gate may use it ([`crate::readers`]).
        lock(&self.dest.spare).push(self.stream.spare());
        Ok(id.to_string())
    }
}
