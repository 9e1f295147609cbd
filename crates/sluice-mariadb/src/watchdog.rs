//! Spotting two streams of one load waiting on each other: a key both insert. Neither sees the
//! other's uncommitted row, so the second waits for the first's commit, which waits for the
//! second at the barrier: MariaDB would end the wait only after `innodb_lock_wait_timeout`
//! (50 s by default), as a timeout that names no row. The watch reads InnoDB's lock waits a
//! few times a second on a connection of its own; when a stream of the load waits on another
//! stream of the load, it records the index and the key the waiter asked for (InnoDB's
//! `lock_data`) and ends the waiting statement (`KILL QUERY`), whose error the destination
//! then reports as the engine's `Conflict`, naming both rows.
//!
//! The same connection samples what each stream's session is doing, for the verdict
//! ([`activity`]): `information_schema.PROCESSLIST`'s command and state, with InnoDB's
//! transaction state where the login may read it (the `PROCESS` privilege). A `LOAD DATA
//! LOCAL` waiting for sluice's bytes says `Reading from net`; one storing rows says `Reading
//! file` (InnoDB: `inserting`). MariaDB shows no wait events by default (its Performance
//! Schema is off), so a busy statement is one class: on CPU or in its data files, which it
//! does not tell apart.
//!
//! The samples also notice a stream's session that has left the server (ended by `KILL`, a
//! restart or one of its timeouts) while the stream still counts on it ([`Vanished`]). A
//! `LOAD DATA LOCAL` only writes: its driver learns that the server has gone only when a write
//! fails, and when the server stopped reading with its socket's window shut, the kernel
//! keeps that write waiting for about two minutes. The watch tells the stream within a
//! sample, and the stream gives its LOAD up as a lost connection, which the engine retries.

use crate::connect::connect;
use crate::conninfo::ConnInfo;
use mysql_async::prelude::*;
use sluice_core::destination::{Activity, ServerWaits};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// How often the lock waits are read.
pub const INTERVAL: Duration = Duration::from_millis(200);

/// A stream caught waiting on a sibling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub blocker: usize,
    /// The index the waiter asked a lock on (`PRIMARY`, or a unique index's name).
    pub index: String,
    /// The key's values as InnoDB prints them, quotes taken off; empty when it gave none.
    pub key: Vec<String>,
}

/// The watch's shared state: which server connection is which stream, and the conflicts
/// found.
#[derive(Default)]
pub struct Watched {
    pub streams: Mutex<HashMap<u32, usize>>,
    pub conflicts: Mutex<HashMap<usize, Conflict>>,
    /// Connections whose stream has no more work: no longer sampled.
    pub done: Mutex<HashSet<u32>>,
    /// What the streams' sessions were doing, sample by sample.
    pub waits: Mutex<ServerWaits>,
    /// The streams' sessions that have left the server.
    pub vanished: Vanished,
}

/// The sessions of the load's streams that are no longer on the server while their stream
/// still counts on them. A stream's session is registered once it is connected, so one
/// missing from the process list has gone (one marked `Killed` may be a `KILL QUERY`, such as
/// the watch's own, and is not). Only when the server's ids are the driver's: a proxy between
/// sluice and the server may hand out ids of its own (the watch checks its own with
/// `CONNECTION_ID()`).
///
/// A server that answers nothing for the target's `answer-timeout` has, for the load, lost
/// every stream's session too ([`Gone::Silent`]).
#[derive(Default)]
pub struct Vanished {
    ids: Mutex<HashMap<u32, Gone>>,
    changed: Notify,
    /// The sessions whose LOAD a stream gave up for the server's silence and that may still
    /// be on the server: once it answers again, the watch ends them (they can never commit),
    /// and a stream's new session waits until they are gone (their rows' locks would hold up
    /// the redo, and their rollback leaves locks on gaps the streams then wait on each other
    /// for).
    former: Mutex<HashSet<u32>>,
    former_gone: Notify,
}

/// How a session was found gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// It is no longer in the server's process list.
    Left,
    /// The server has answered nothing for this many seconds.
    Silent(u64),
}

impl Vanished {
    fn mark(&self, id: u32, how: Gone) {
        lock(&self.ids).entry(id).or_insert(how);
        self.changed.notify_waiters();
    }

    /// How session `id` was found gone, if it was.
    pub fn get(&self, id: u32) -> Option<Gone> {
        lock(&self.ids).get(&id).copied()
    }

    /// A stream gave session `id`'s LOAD up (its side of the connection closed).
    pub fn abandoned(&self, id: u32, how: Gone) {
        if matches!(how, Gone::Silent(_)) {
            lock(&self.former).insert(id);
        }
    }

    fn former(&self) -> Vec<u32> {
        lock(&self.former).iter().copied().collect()
    }

    /// Former session `id` is no longer on the server (or, after a restart, never was).
    fn former_ended(&self, id: u32) {
        lock(&self.former).remove(&id);
        self.former_gone.notify_waiters();
    }

    /// Returns once no session given up is left on the server (at once if none is).
    pub async fn formers_gone(&self) {
        loop {
            let gone = self.former_gone.notified();
            tokio::pin!(gone);
            gone.as_mut().enable();
            if lock(&self.former).is_empty() {
                return;
            }
            gone.await;
        }
    }

    /// A session id is the load's anew (a server restarted numbers from the start again), or
    /// no longer: it carries no earlier mark.
    fn forget(&self, id: u32) {
        lock(&self.ids).remove(&id);
    }

    /// Returns how session `id` was found gone, once it is (at once if it already is).
    pub async fn wait(&self, id: u32) -> Gone {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(how) = self.get(id) {
                return how;
            }
            changed.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watched {
    /// Stream `n` now runs on server connection `id`.
    pub fn register(&self, n: usize, id: u32) {
        self.vanished.forget(id);
        lock(&self.streams).insert(id, n);
    }

    pub fn unregister(&self, id: u32) {
        lock(&self.streams).remove(&id);
        self.vanished.forget(id);
    }

    /// Stream `n` has no more work: its session is no longer sampled.
    pub fn stream_done(&self, n: usize) {
        let ids: Vec<u32> = lock(&self.streams)
            .iter()
            .filter(|(_, s)| **s == n)
            .map(|(id, _)| *id)
            .collect();
        lock(&self.done).extend(ids);
    }

    /// The samples so far, most frequent first, taken.
    pub fn take_waits(&self) -> ServerWaits {
        let mut waits = std::mem::take(&mut *lock(&self.waits));
        waits.finish();
        waits
    }

    /// Session `id` is gone: its stream's waits end, if it is still the load's.
    fn vanish(&self, id: u32, how: Gone) {
        let ours = lock(&self.streams).contains_key(&id) && !lock(&self.done).contains(&id);
        if ours {
            self.vanished.mark(id, how);
        }
    }

    /// The connections to sample now.
    fn sampled(&self) -> Vec<u32> {
        let done = lock(&self.done);
        lock(&self.streams)
            .keys()
            .filter(|id| !done.contains(id))
            .copied()
            .collect()
    }

    /// The conflict declared for stream `n`, taken.
    pub fn take_conflict(&self, n: usize) -> Option<Conflict> {
        lock(&self.conflicts).remove(&n)
    }
}

/// A running watch; dropping it (or [`Watch::stop`]) ends it.
pub struct Watch {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

type WaitRow = (u64, u64, Option<String>, Option<String>);

const LOCK_WAITS: &str = "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, l.lock_index, \
        l.lock_data \
     FROM information_schema.INNODB_LOCK_WAITS w \
     JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
     JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id \
     JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id";

impl Watch {
    /// Starts watching on a connection of its own (on the current runtime).
    ///
    /// `give_ups` counts the load's give-ups of its silent server ([`crate::silence`]): at
    /// each, the streams' sessions sampled are marked gone, which ends their LOADs as lost
    /// connections.
    pub async fn start(
        info: &ConnInfo,
        watched: Arc<Watched>,
        warn: Arc<dyn Fn(String) + Send + Sync>,
        mut give_ups: watch::Receiver<u64>,
    ) -> Result<Watch, crate::connect::ConnectError> {
        let mut conn = connect(info).await?;
        let (stop, mut stopped) = watch::channel(false);
        let info = info.clone();
        let bound = info.answer_timeout.map_or(0, |b| b.as_secs());
        let task = tokio::spawn(async move {
            let mut looker = Looker::new(&mut conn, watched, warn).await;
            let mut conn = Some(conn);
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(INTERVAL) => {}
                }
                let mut answered = match conn.as_mut() {
                    Some(c) => matches!(
                        tokio::time::timeout(ANSWER_WITHIN, looker.look(c)).await,
                        Ok(Ok(()))
                    ),
                    None => false,
                };
                if !answered {
                    // Its state after a look cut short is unknown: a new connection, if the
                    // server takes one.
                    let (new, answered_now) = reconnect(&info).await;
                    conn = new;
                    answered = answered_now;
                }
                if let Some(c) = conn.as_mut().filter(|_| answered) {
                    end_former(c, &looker.watched.vanished, looker.server_started).await;
                }
                if give_ups.has_changed().unwrap_or(false) {
                    give_ups.borrow_and_update();
                    give_up_streams(&looker.watched, bound);
                }
            }
            if let Some(c) = conn {
                let _ = c.disconnect().await;
            }
        });
        Ok(Watch { stop, task })
    }

    /// Ends the watch: at once, or at its next step (a look and a reconnect take at most
    /// `2 * ANSWER_WITHIN`); past that it is aborted, so that it marks or ends nothing after
    /// the load.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        if tokio::time::timeout(2 * ANSWER_WITHIN, self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// How long one look (a sample and the lock waits) may take before the server counts as
/// silent for it: as long as a look of every other wait's ([`sluice_core::silence`]).
const ANSWER_WITHIN: Duration = sluice_core::silence::ANSWER_WITHIN;

/// The watch's state between looks.
struct Looker {
    watched: Arc<Watched>,
    warn: Arc<dyn Fn(String) + Send + Sync>,
    ids_are_the_servers: bool,
    /// A wait seen twice in a row is a conflict: one seen once may be passing.
    seen: HashMap<u64, u64>,
    /// The streams' sessions found on the server so far.
    seen_sessions: HashSet<u32>,
    /// When the server started, as the watch began.
    server_started: Option<i64>,
    started: Instant,
    /// Whether InnoDB's transactions are readable (the `PROCESS` privilege).
    innodb: bool,
    locked: LockedSince,
}

impl Looker {
    /// The watch's state, with what its first connection tells of the server (each question
    /// bounded: a server silent from the start is the loop's to find).
    async fn new(
        conn: &mut mysql_async::Conn,
        watched: Arc<Watched>,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Looker {
        let ids = tokio::time::timeout(ANSWER_WITHIN, ids_are_the_servers(conn)).await;
        let started = tokio::time::timeout(ANSWER_WITHIN, server_started(conn)).await;
        Looker {
            ids_are_the_servers: ids.unwrap_or(false),
            server_started: started.ok().flatten(),
            watched,
            warn,
            seen: HashMap::new(),
            seen_sessions: HashSet::new(),
            started: Instant::now(),
            innodb: true,
            locked: LockedSince::default(),
        }
    }

    /// One look: what the sessions do (and which have left), then the lock waits between
    /// streams. `Err` when the connection failed.
    async fn look(&mut self, conn: &mut mysql_async::Conn) -> Result<(), ()> {
        let watched = self.watched.clone();
        if let Some(sampled) = sample(conn, &watched, self.started, &mut self.innodb).await? {
            if self.ids_are_the_servers {
                sampled.note_vanished(&watched, &mut self.seen_sessions);
            }
            for report in self.locked.seen(&sampled.sessions, &watched) {
                (self.warn)(report);
            }
        }
        let rows = match conn.query::<WaitRow, _>(LOCK_WAITS).await {
            Ok(rows) => rows,
            Err(mysql_async::Error::Server(_)) => return Ok(()),
            Err(_) => return Err(()),
        };
        let mut now = HashMap::new();
        for (waiter, blocker, index, data) in rows {
            let ids = {
                let s = lock(&watched.streams);
                (
                    s.get(&(waiter as u32)).copied(),
                    s.get(&(blocker as u32)).copied(),
                )
            };
            let (Some(w), Some(b)) = ids else { continue };
            if w == b {
                continue;
            }
            now.insert(waiter, blocker);
            if self.seen.get(&waiter) != Some(&blocker) {
                continue;
            }
            lock(&watched.conflicts).insert(
                w,
                Conflict {
                    blocker: b,
                    index: index.unwrap_or_default().trim_matches('`').to_string(),
                    key: data.as_deref().map(key_values).unwrap_or_default(),
                },
            );
            let _ = conn.query_drop(format!("KILL QUERY {waiter}")).await;
        }
        self.seen = now;
        Ok(())
    }
}

/// A new connection for the watch, and whether the server answered the attempt: a session,
/// or a refusal of its own (too many connections, a blocked host, a refused port: the server
/// or its machine speaks), as against no answer within `ANSWER_WITHIN`.
async fn reconnect(info: &ConnInfo) -> (Option<mysql_async::Conn>, bool) {
    match tokio::time::timeout(ANSWER_WITHIN, connect(info)).await {
        Ok(Ok(c)) => (Some(c), true),
        Ok(Err(crate::connect::ConnectError::Failed { .. })) => (None, true),
        Ok(Err(crate::connect::ConnectError::Timeout { .. })) | Err(_) => (None, false),
    }
}

/// The server was given up for its silence (after `bound` seconds): every stream's session
/// the watch has sampled is marked gone, so that its LOAD ends as a lost connection, which the
/// engine retries.
fn give_up_streams(watched: &Watched, bound: u64) {
    for id in watched.sampled() {
        watched.vanish(id, Gone::Silent(bound));
    }
}

/// Ends the sessions whose LOAD was given up while the server was silent (`KILL`, look
/// after look, until the server no longer knows the id), so that their locks do not hold up
/// the streams that redo their work. Only those: a session the mark caught in a COMMIT or DDL
/// went on. A server that restarted (`started` differs) took them down, and its ids are
/// others' now: none is ended.
async fn end_former(conn: &mut mysql_async::Conn, vanished: &Vanished, started: Option<i64>) {
    let former = vanished.former();
    if former.is_empty() {
        return;
    }
    let restarted = match (started, server_started(conn).await) {
        (Some(then), Some(now)) => (now - then).abs() > 2,
        _ => false,
    };
    for id in former {
        let gone = restarted
            || matches!(
                conn.query_drop(format!("KILL {id}")).await,
                Err(mysql_async::Error::Server(e)) if e.code == UNKNOWN_THREAD
            );
        if gone {
            vanished.former_ended(id);
        }
    }
}

/// MariaDB's "Unknown thread id" (`ER_NO_SUCH_THREAD`).
const UNKNOWN_THREAD: u16 = 1094;

/// When the server started, in Unix seconds (to a second or so): a restart changes it.
async fn server_started(conn: &mut mysql_async::Conn) -> Option<i64> {
    conn.query_first::<i64, _>(
        "SELECT CAST(UNIX_TIMESTAMP() - VARIABLE_VALUE AS SIGNED) \
         FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'",
    )
    .await
    .ok()
    .flatten()
}

/// How long a stream waits on a lock another session holds before the watch says so.
const EXTERNAL_REPORT: Duration = Duration::from_secs(10);

/// Since when each stream's session has waited on a lock, and whether that was reported. A
/// sibling's lock is ended within two samples (a conflict); one that lasts is another
/// session's.
#[derive(Default)]
struct LockedSince(HashMap<u32, (Instant, bool)>);

impl LockedSince {
    /// Notes this sample's sessions; the reports of the waits that just passed the bound.
    fn seen(&mut self, sessions: &[(u32, Activity, String)], watched: &Watched) -> Vec<String> {
        self.0.retain(|id, _| {
            sessions
                .iter()
                .any(|(s, a, _)| s == id && *a == Activity::Lock)
        });
        let mut reports = Vec::new();
        for (id, _, name) in sessions.iter().filter(|(_, a, _)| *a == Activity::Lock) {
            let (since, reported) = self.0.entry(*id).or_insert((Instant::now(), false));
            if *reported || since.elapsed() < EXTERNAL_REPORT {
                continue;
            }
            *reported = true;
            let stream = lock(&watched.streams).get(id).map_or(0, |n| n + 1);
            reports.push(long_wait(stream, since.elapsed().as_secs(), name));
        }
        reports
    }
}

/// What a stream's long wait on another session's lock is, and what comes of it.
fn long_wait(stream: usize, seconds: u64, name: &str) -> String {
    let next = match name == ROW_LOCK {
        true => {
            "InnoDB gives up after innodb_lock_wait_timeout (50 s by default) and the load \
                 then fails, nothing committed"
        }
        false => "sluice keeps waiting",
    };
    format!(
        "stream {stream} has waited {seconds} s on a lock another session holds ({name}); \
         {next}: SHOW PROCESSLIST names the session (LOCK TABLES, or a transaction or DDL on \
         the table); end it, or stop sluice: nothing is committed until every stream is in"
    )
}

/// The name a row lock wait (InnoDB's `LOCK WAIT`) is sampled under.
const ROW_LOCK: &str = "row lock wait";

type SessionRow = (u64, String, String, String, String);

/// Whether the server knows this connection by the id the driver was given (no proxy in
/// between that numbers its own connections).
async fn ids_are_the_servers(conn: &mut mysql_async::Conn) -> bool {
    let id = conn.id();
    matches!(
        conn.query_first::<u64, _>("SELECT CONNECTION_ID()").await,
        Ok(Some(server)) if server == u64::from(id)
    )
}

/// One sample: the sessions asked about, and what each found was doing.
#[derive(Default)]
struct Sampled {
    asked: Vec<u32>,
    sessions: Vec<(u32, Activity, String)>,
}

impl Sampled {
    /// The sessions asked about and not found have vanished, where the watch is known to see
    /// the streams' server: the session was found before (`seen`), or a sibling is found now.
    /// Where none ever is (a balancer put the watch on another node of a cluster), nothing is
    /// declared gone.
    fn note_vanished(&self, watched: &Watched, seen: &mut HashSet<u32>) {
        let found = |id: &u32| self.sessions.iter().any(|(s, _, _)| s == id);
        let (present, missing): (Vec<u32>, Vec<u32>) = self.asked.iter().partition(|id| found(id));
        let siblings_here = !present.is_empty();
        seen.extend(present);
        for id in missing {
            if seen.remove(&id) || siblings_here {
                watched.vanish(id, Gone::Left);
            }
        }
    }
}

/// One sample of the streams' sessions into the tally; `None` when the server refused it,
/// `Err` when the connection failed. Without the `PROCESS` privilege InnoDB's transactions
/// are not readable (`innodb` turns false) and the process list alone is read.
async fn sample(
    conn: &mut mysql_async::Conn,
    watched: &Watched,
    started: Instant,
    innodb: &mut bool,
) -> Result<Option<Sampled>, ()> {
    let ids = watched.sampled();
    if ids.is_empty() {
        return Ok(Some(Sampled::default()));
    }
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let query = |with_innodb: bool| match with_innodb {
        true => format!(
            "SELECT p.ID, p.COMMAND, COALESCE(p.STATE, ''), COALESCE(t.trx_state, ''), \
                    COALESCE(t.trx_operation_state, '') \
             FROM information_schema.PROCESSLIST p \
             LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID \
             WHERE p.ID IN ({})",
            list.join(",")
        ),
        false => format!(
            "SELECT ID, COMMAND, COALESCE(STATE, ''), '', '' \
             FROM information_schema.PROCESSLIST WHERE ID IN ({})",
            list.join(",")
        ),
    };
    let rows = match conn.query::<SessionRow, _>(query(*innodb)).await {
        Ok(rows) => rows,
        Err(mysql_async::Error::Server(e)) if e.code == 1227 => {
            *innodb = false;
            return Ok(None);
        }
        Err(mysql_async::Error::Server(_)) => return Ok(None),
        Err(_) => return Err(()),
    };
    let mut counts = [0u32; Activity::ALL.len()];
    let mut waits = lock(&watched.waits);
    let mut sampled = Sampled {
        asked: ids,
        ..Sampled::default()
    };
    for (id, command, state, trx, operation) in rows {
        let (class, name) = activity(&command, &state, &trx, &operation);
        waits.add(class, &name);
        if let Some(i) = Activity::ALL.iter().position(|a| *a == class) {
            counts[i] += 1;
        }
        sampled.sessions.push((id as u32, class, name));
    }
    waits.series.push((started.elapsed().as_secs_f64(), counts));
    Ok(Some(sampled))
}

/// The class of what a session was doing, and its name for it, from the process list's
/// command and state and InnoDB's transaction state and operation.
pub fn activity(command: &str, state: &str, trx: &str, operation: &str) -> (Activity, String) {
    let lock_state = state.starts_with("Waiting for") && state.contains("lock");
    let commit_state = state == "Commit"
        || state == "Commit implicit"
        || state.starts_with("Waiting for prior transaction")
        || operation == "flushing log"
        || trx == "COMMITTING";
    match () {
        _ if command == "Sleep" => (Activity::WaitingForClient, "Sleep".into()),
        _ if state == "Reading from net" => (Activity::WaitingForClient, state.into()),
        _ if trx == "LOCK WAIT" => (Activity::Lock, ROW_LOCK.into()),
        _ if lock_state => (Activity::Lock, state.into()),
        _ if trx == "ROLLING BACK" => (Activity::Other, "rolling back".into()),
        _ if commit_state => (Activity::Log, named(state, operation)),
        _ if command == "Query" && (state == "Reading file" || !operation.is_empty()) => {
            (Activity::Cpu, named(state, operation))
        }
        _ => (Activity::Other, named(state, operation)),
    }
}

/// `Reading file (inserting)`, or whichever of the two there is.
fn named(state: &str, operation: &str) -> String {
    match (state.is_empty(), operation.is_empty()) {
        (false, false) => format!("{state} ({operation})"),
        (true, false) => operation.into(),
        (false, true) => state.into(),
        (true, true) => "no state".into(),
    }
}

/// InnoDB's `lock_data` (`17`, `17, 3`, `'abc'`) as values; none for the supremum.
pub fn key_values(data: &str) -> Vec<String> {
    if data.contains("pseudo-record") {
        return Vec::new();
    }
    data.split(", ")
        .map(|v| {
            let v = v.trim();
            match v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
                true => v[1..v.len() - 1].replace("\\'", "'"),
                false => v.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_classed_by_what_the_server_shows() {
        let class = |c, s, t, o| activity(c, s, t, o).0;
        assert_eq!(
            class("Query", "Reading from net", "RUNNING", ""),
            Activity::WaitingForClient
        );
        assert_eq!(
            class("Sleep", "", "RUNNING", ""),
            Activity::WaitingForClient
        );
        assert_eq!(
            activity("Query", "Reading file", "RUNNING", "inserting"),
            (Activity::Cpu, "Reading file (inserting)".into())
        );
        assert_eq!(
            class("Query", "Reading file", "LOCK WAIT", "inserting"),
            Activity::Lock
        );
        assert_eq!(
            class("Query", "Waiting for table metadata lock", "", ""),
            Activity::Lock
        );
        assert_eq!(class("Query", "Commit", "COMMITTING", ""), Activity::Log);
        assert_eq!(class("Query", "User sleep", "", ""), Activity::Other);
        assert_eq!(
            class("Query", "Reading file", "ROLLING BACK", "rollback"),
            Activity::Other
        );
        assert!(long_wait(2, 11, ROW_LOCK).contains("innodb_lock_wait_timeout"));
        assert!(long_wait(1, 10, "Waiting for table metadata lock").contains("keeps waiting"));
    }

    #[test]
    fn a_loading_session_missing_from_the_sample_has_vanished_and_no_other() {
        let watched = Watched::default();
        for (n, id) in [(0, 11), (1, 12), (2, 13)] {
            watched.register(n, id);
        }
        watched.stream_done(2);
        let sampled = Sampled {
            asked: vec![11, 12, 13, 14],
            sessions: vec![(11, Activity::Cpu, "Reading file".into())],
        };
        sampled.note_vanished(&watched, &mut HashSet::new());
        // 12 is gone; 13's stream is done and 14 is no stream's: neither is waited on.
        let gone: Vec<u32> = (11..=14)
            .filter(|&id| watched.vanished.get(id).is_some())
            .collect();
        assert_eq!(gone, [12]);
        assert_eq!(watched.vanished.get(12), Some(Gone::Left));
    }

    #[test]
    fn where_no_stream_is_ever_found_none_is_declared_gone() {
        let watched = Watched::default();
        watched.register(0, 11);
        watched.register(1, 12);
        let mut seen = HashSet::new();
        let none_found = Sampled {
            asked: vec![11, 12],
            sessions: Vec::new(),
        };
        // The watch on another node of a cluster: it never finds the streams.
        none_found.note_vanished(&watched, &mut seen);
        assert_eq!(watched.vanished.get(11), None);
        // Once found, a session that goes missing has gone, siblings or not.
        let found = Sampled {
            asked: vec![11, 12],
            sessions: vec![(11, Activity::Cpu, String::new())],
        };
        found.note_vanished(&watched, &mut seen);
        assert_eq!(watched.vanished.get(12), Some(Gone::Left));
        none_found.note_vanished(&watched, &mut seen);
        assert_eq!(watched.vanished.get(11), Some(Gone::Left));
        // A registration anew (a restarted server's numbers) carries no earlier mark.
        watched.register(0, 11);
        assert_eq!(watched.vanished.get(11), None);
    }

    #[test]
    fn a_give_up_marks_every_sampled_stream_gone_and_its_load_is_a_session_to_end() {
        let watched = Watched::default();
        watched.register(0, 21);
        watched.register(1, 22);
        give_up_streams(&watched, 120);
        assert_eq!(watched.vanished.get(21), Some(Gone::Silent(120)));
        assert_eq!(watched.vanished.get(22), Some(Gone::Silent(120)));
        // A LOAD given up for it is a former session to end once the server answers; one that
        // left on its own is not.
        watched.vanished.abandoned(21, Gone::Silent(120));
        watched.vanished.abandoned(22, Gone::Left);
        assert_eq!(watched.vanished.former(), [21]);
    }

    #[test]
    fn a_wait_on_a_session_ends_when_it_vanishes_and_not_before() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let watched = Arc::new(Watched::default());
        watched.register(0, 7);
        rt.block_on(async {
            let waiting = tokio::spawn({
                let w = watched.clone();
                async move { w.vanished.wait(7).await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!waiting.is_finished());
            watched.vanish(7, Gone::Left);
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("the wait ends once the session has vanished")
                .unwrap();
            // Once gone, a new wait (the LOAD's finish) returns at once.
            tokio::time::timeout(Duration::from_secs(5), watched.vanished.wait(7))
                .await
                .unwrap();
            // A session given up for a silence holds new sessions back until it has ended.
            watched.vanished.abandoned(7, Gone::Silent(120));
            let held = tokio::spawn({
                let w = watched.clone();
                async move { w.vanished.formers_gone().await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!held.is_finished());
            watched.vanished.former_ended(7);
            tokio::time::timeout(Duration::from_secs(5), held)
                .await
                .expect("new sessions go on once the former one has ended")
                .unwrap();
        });
    }

    #[test]
    fn lock_data_becomes_key_values() {
        assert_eq!(key_values("17"), ["17"]);
        assert_eq!(key_values("17, 'a b'"), ["17", "a b"]);
        assert!(key_values("supremum pseudo-record").is_empty());
    }
}
