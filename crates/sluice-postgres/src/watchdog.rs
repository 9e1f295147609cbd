//! A watchdog over one load's own backends: the waits the server cannot see as deadlocks.
//!
//! Every stream of a load holds its transaction open until every other stream has finished,
//! and only then are they committed. If two streams insert the same unique key, the later
//! insert waits for the earlier transaction to end (the unique check must know whether it
//! commits), while that transaction waits at sluice's commit barrier for the waiter to finish.
//! Half of that cycle is inside sluice, so the server's deadlock detector never fires, and the
//! load would hang forever. The same happens with exclusion constraints, and with deferred
//! unique checks fired by `SET CONSTRAINTS ALL IMMEDIATE` before the barrier.
//!
//! So a side connection samples `pg_stat_activity` a few times a second. A stream that waits
//! on a *sibling's transaction or tuple* (lock types `transactionid` and `tuple`) can never be
//! released before the barrier: after two sightings in a row the watchdog records the
//! conflict and cancels the waiting statement, whose error then names the index and the COPY
//! line it was on. Waits on relation extension, which sibling COPYs into one table meet all the
//! time, are never conflicts. A stream that waits on a session outside the load is reported
//! (a warning, once), not cancelled: that session may end, and psql would wait too.
//!
//! One session outside the load is the load's own: the backend of a connection sluice lost
//! (a network partition, a timeout on its side) that the server has not noticed is gone. It
//! may keep its transaction open for as long as the server's keepalives allow (two hours by
//! default), and the stream that redoes its chunks waits on it: the ledger's unique chunk row
//! makes the new transaction wait to learn whether the old one committed. Its client is gone,
//! so it can never commit (a COMMIT already under way finishes first: the server holds the
//! signal off until it is done, and the ledger then shows which chunks are in). So when a
//! stream waits on a backend that one of the streams had before it reconnected, the watchdog
//! ends that backend (`pg_terminate_backend`) after two sightings and says so.

use crate::connect::connect;
use crate::conninfo::ConnInfo;
use sluice_core::destination::{Activity, ServerWaits};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Statement};

/// How often the watchdog samples the load's backends.
const SAMPLE: Duration = Duration::from_millis(200);
/// Consecutive sightings of a wait on a sibling that make a conflict.
const SIGHTINGS: u32 = 2;
/// How long a wait on a session outside the load lasts before it is reported.
const EXTERNAL_REPORT: Duration = Duration::from_secs(10);
/// How long a sample may take before the server is reported as not answering.
const UNANSWERED_REPORT: Duration = Duration::from_secs(30);

/// Two streams of one load waiting on each other inside and outside the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The stream whose statement waited (and was cancelled).
    pub waiter: usize,
    /// The stream whose open transaction it waited on.
    pub blocker: usize,
}

#[derive(Default)]
struct State {
    /// Backend pid of each stream, once connected.
    pids: Vec<Option<i32>>,
    /// Backends of connections that ended on sluice's side (pid, start time), which the
    /// server may still run.
    former: Vec<(i32, String)>,
    conflicts: Vec<Conflict>,
    /// What the streams' sessions were doing, over every sample.
    waits: ServerWaits,
    /// Backend pids of streams with no more work, left out of `waits`.
    done: Vec<i32>,
    /// When the watch began, for the samples' times.
    started: Option<Instant>,
}

/// The running watchdog; [`Watchdog::stop`] ends it.
pub struct Watchdog {
    state: Arc<Mutex<State>>,
    stop: Arc<Notify>,
    task: JoinHandle<()>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watchdog {
    /// Starts sampling on the side connection `client` (on the runtime it is called in), for
    /// `streams` streams. `warn` receives the warnings about waits on sessions outside the
    /// load; `told_silent` says whether the load already told that the server answers nothing
    /// (its unanswered sample is then not told again).
    pub fn start(
        client: Client,
        info: &ConnInfo,
        streams: usize,
        warn: Arc<dyn Fn(String) + Send + Sync>,
        told_silent: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Watchdog {
        let state = Arc::new(Mutex::new(State {
            pids: vec![None; streams],
            started: Some(Instant::now()),
            ..State::default()
        }));
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(watch(
            info.clone(),
            client,
            state.clone(),
            stop.clone(),
            Speech { warn, told_silent },
        ));
        Watchdog { state, stop, task }
    }

    /// Records the backend pid of stream `stream`. A pid it replaces is not taken for a
    /// former one: only [`Watchdog::unregister`], when sluice's side of a connection has
    /// ended, says that (a live session must never be ended as one).
    pub fn register(&self, stream: usize, pid: i32) {
        if let Some(slot) = lock(&self.state).pids.get_mut(stream) {
            *slot = Some(pid);
        }
    }

    /// Stream `stream`'s connection to backend `pid` has ended on sluice's side: the
    /// backend, if the server still runs it, is the load's own former one.
    /// `started` is the backend's start time, so that a later session that gets the same pid
    /// is never taken for it.
    pub fn unregister(&self, stream: usize, pid: i32, started: &str) {
        let mut s = lock(&self.state);
        if let Some(slot) = s.pids.get_mut(stream) {
            if *slot == Some(pid) {
                *slot = None;
            }
        }
        s.former.push((pid, started.to_string()));
    }

    /// The conflict in which `stream` was the waiter, if the watchdog declared one; taking it
    /// lets the watchdog declare the stream's next one.
    pub fn take_conflict(&self, stream: usize) -> Option<Conflict> {
        let mut s = lock(&self.state);
        let i = s.conflicts.iter().position(|c| c.waiter == stream)?;
        Some(s.conflicts.remove(i))
    }

    /// Stream `stream` has no more work: its session is no longer sampled for the verdict
    /// (it is still watched as a blocker).
    pub fn stream_done(&self, stream: usize) {
        let mut s = lock(&self.state);
        if let Some(Some(pid)) = s.pids.get(stream).copied() {
            s.done.push(pid);
        }
    }

    /// Which stream a backend pid belongs to.
    pub fn stream_of(&self, pid: i32) -> Option<usize> {
        lock(&self.state).pids.iter().position(|p| *p == Some(pid))
    }

    /// Stops sampling and closes the side connection; returns what the sessions were doing.
    pub async fn stop(self) -> ServerWaits {
        self.stop.notify_one();
        // Whatever it waits on (a sample, a reconnect, a session's description, a cancel): the
        // streams are done, and across a long path the load's commit would otherwise wait for
        // a round trip or two, or for as long as a frozen session does not answer.
        self.task.abort();
        let _ = self.task.await;
        let mut waits = std::mem::take(&mut lock(&self.state).waits);
        waits.finish();
        waits
    }
}

/// The class of what a session was doing, from `pg_stat_activity`.
fn activity(wait_type: Option<&str>, event: Option<&str>, state: &str) -> Activity {
    match (wait_type, event) {
        (None, _) if state == "active" => Activity::Cpu,
        (None, _) => Activity::WaitingForClient,
        (Some("Client"), Some("ClientRead")) => Activity::WaitingForClient,
        (Some("IO"), Some(e)) if e.starts_with("WAL") => Activity::Log,
        (Some("LWLock"), Some(e)) if e.starts_with("WAL") => Activity::Log,
        (Some("IO"), _) => Activity::DiskIo,
        (Some("Lock" | "LWLock"), _) => Activity::Lock,
        _ => Activity::Other,
    }
}

/// Adds one sample of a session to the tally; returns its class.
fn tally(
    waits: &mut ServerWaits,
    wait_type: Option<&str>,
    event: Option<&str>,
    state: &str,
) -> Activity {
    let class = activity(wait_type, event, state);
    let name = match (class, event) {
        (Activity::Cpu, _) => "CPU".to_string(),
        (_, Some(e)) => e.to_string(),
        (_, None) => state.to_string(),
    };
    waits.add(class, &name);
    class
}

/// A waiting backend as one sample sees it.
struct Waiting {
    pid: i32,
    lock_type: String,
    blockers: Vec<i32>,
}

/// One sample of the streams' sessions: tallies what each was doing into `state`, and
/// returns those waiting on a lock, with who blocks them.
async fn sample(
    client: &Client,
    asked: &mut Option<Statement>,
    pids: &[i32],
    state: &Mutex<State>,
) -> Result<Vec<Waiting>, tokio_postgres::Error> {
    // Prepared once per connection: a statement named by its text is parsed anew each time,
    // a round trip of its own (across a long path, the sample's length doubled).
    let statement = match asked {
        Some(s) => s.clone(),
        None => asked.insert(client.prepare(SAMPLE_SQL).await?).clone(),
    };
    let rows = client.query(&statement, &[&pids]).await?;
    let mut waiting = Vec::new();
    let mut s = lock(state);
    let mut counts = [0u32; 6];
    for r in &rows {
        let pid: i32 = r.get(0);
        let wait_type: Option<String> = r.get(1);
        let event: Option<String> = r.get(2);
        let session: String = r.get(3);
        if !s.done.contains(&pid) {
            let class = tally(
                &mut s.waits,
                wait_type.as_deref(),
                event.as_deref(),
                &session,
            );
            if let Some(i) = Activity::ALL.iter().position(|a| *a == class) {
                counts[i] += 1;
            }
        }
        if wait_type.as_deref() == Some("Lock") {
            waiting.push(Waiting {
                pid,
                lock_type: event.unwrap_or_default(),
                blockers: r.get(4),
            });
        }
    }
    let at = s.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    s.waits.series.push((at, counts));
    Ok(waiting)
}

/// One sample, with a warning (once) when the server leaves it unanswered for
/// [`UNANSWERED_REPORT`], unless the load told already that the server answers nothing at all;
/// it is still waited for after that.
async fn sample_reporting(
    client: &Client,
    asked: &mut Option<Statement>,
    pids: &[i32],
    state: &Mutex<State>,
    speech: &Speech,
) -> Result<Vec<Waiting>, tokio_postgres::Error> {
    let asking = sample(client, asked, pids, state);
    tokio::pin!(asking);
    if let Ok(r) = tokio::time::timeout(UNANSWERED_REPORT, &mut asking).await {
        return r;
    }
    if (speech.told_silent)() {
        return asking.await;
    }
    (speech.warn)(format!(
        "the server has not answered the watchdog's query for {} s: it may be frozen or \
         overloaded; sluice keeps waiting while the server answers new connections (and, unless \
         tcp_user_timeout=0, gives it up once it has answered nothing for that long)",
        UNANSWERED_REPORT.as_secs()
    ));
    asking.await
}

async fn describe_session(client: &Client, pid: i32) -> String {
    match client
        .query_opt(
            "SELECT coalesce(nullif(application_name, ''), '?'), coalesce(usename::text, '?'), \
                    coalesce(state, '?') FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
    {
        Ok(Some(r)) => format!(
            "pid {pid} (application {}, user {}, {})",
            r.get::<_, String>(0),
            r.get::<_, String>(1),
            r.get::<_, String>(2)
        ),
        _ => format!("pid {pid}"),
    }
}

/// What one sample asks of the server about the streams' sessions.
const SAMPLE_SQL: &str = "SELECT pid, wait_event_type::text, wait_event::text, \
     coalesce(state, ''), CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) \
     ELSE '{}'::int[] END FROM pg_stat_activity WHERE pid = ANY($1)";

/// A (waiter, blocker) pair seen again: its count of consecutive sightings, this one included.
fn sighted(before: &[((i32, i32), u32)], pair: (i32, i32)) -> ((i32, i32), u32) {
    let n = before
        .iter()
        .find(|(k, _)| *k == pair)
        .map_or(0, |(_, n)| *n);
    (pair, n + 1)
}

/// Where the watchdog's words go, and whether the server's silence was told already.
struct Speech {
    warn: Arc<dyn Fn(String) + Send + Sync>,
    told_silent: Arc<dyn Fn() -> bool + Send + Sync>,
}

async fn watch(
    info: ConnInfo,
    mut client: Client,
    state: Arc<Mutex<State>>,
    stop: Arc<Notify>,
    speech: Speech,
) {
    // Consecutive sightings of each (waiter, blocker) pair of our own streams.
    let mut seen: Vec<((i32, i32), u32)> = Vec::new();
    let mut external_since: Vec<(i32, Instant, bool)> = Vec::new();
    // Consecutive sightings of each (waiter, former backend) pair, and the former backends
    // already ended (once each: one that does not go is then reported like any other).
    let mut orphans_seen: Vec<((i32, i32), u32)> = Vec::new();
    let mut ended: Vec<i32> = Vec::new();
    let mut asked: Option<Statement> = None;
    loop {
        tokio::select! {
            _ = stop.notified() => return,
            _ = tokio::time::sleep(SAMPLE) => {}
        }
        let pids: Vec<i32> = lock(&state).pids.iter().flatten().copied().collect();
        if pids.is_empty() {
            continue;
        }
        let sampled = sample_reporting(&client, &mut asked, &pids, &state, &speech).await;
        let waiting = match sampled {
            Ok(w) => w,
            Err(_) if client.is_closed() => {
                // The side connection is gone (terminated by an administrator, say): a blind
                // watchdog would let a conflict hang again, so connect anew and carry on.
                if let Ok(c) = connect(&info).await {
                    client = c;
                    asked = None;
                }
                continue;
            }
            Err(_) => {
                // Prepared again next time: a statement the session lost (a pooler's DISCARD
                // ALL, say) would fail every sample after.
                asked = None;
                continue;
            }
        };
        let mut now_seen = Vec::new();
        let mut now_external = Vec::new();
        let mut now_orphans = Vec::new();
        let former: Vec<i32> = lock(&state).former.iter().map(|f| f.0).collect();
        for w in &waiting {
            let sibling = w
                .blockers
                .iter()
                .copied()
                .find(|b| pids.contains(b) && *b != w.pid);
            match sibling {
                Some(b) if matches!(w.lock_type.as_str(), "transactionid" | "tuple") => {
                    now_seen.push(sighted(&seen, (w.pid, b)));
                }
                Some(_) => {}
                None => match w
                    .blockers
                    .iter()
                    .copied()
                    .find(|b| former.contains(b) && !ended.contains(b))
                {
                    Some(orphan) => {
                        now_orphans.push(sighted(&orphans_seen, (w.pid, orphan)));
                    }
                    None => {
                        if let Some(&ext) = w.blockers.first() {
                            now_external.push((w.pid, ext));
                        }
                    }
                },
            }
        }
        seen = now_seen;
        orphans_seen = now_orphans;
        for &((waiter, orphan), n) in &orphans_seen {
            if n < SIGHTINGS || ended.contains(&orphan) {
                continue;
            }
            ended.push(orphan);
            let who = describe_session(&client, orphan).await;
            // Only the backend that was ours: same pid and the same start time.
            let starts: Vec<String> = lock(&state)
                .former
                .iter()
                .filter(|f| f.0 == orphan)
                .map(|f| f.1.clone())
                .collect();
            let ended_it = client
                .query_opt(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE pid = $1 AND backend_start::text = ANY($2)",
                    &[&orphan, &starts],
                )
                .await
                .ok()
                .map(|r| r.map(|r| r.get::<_, bool>(0)));
            let ok = match ended_it {
                Some(Some(ok)) => ok,
                // Not the backend that was ours (its pid now names another session, or it
                // has gone): from here on it is reported like any other session.
                Some(None) => continue,
                None => false,
            };
            let stream = lock(&state).pids.iter().position(|p| *p == Some(waiter));
            (speech.warn)(format!(
                "stream {} waits on {who}, this load's own connection from before a reconnect, \
                 which the server still runs though sluice lost it: its transaction can never \
                 commit{}",
                stream.map_or(0, |s| s + 1),
                if ok {
                    ", so sluice ended it (pg_terminate_backend) and it rolls back"
                } else {
                    "; sluice could not end it (pg_terminate_backend failed): ask an \
                     administrator to, or wait for the server's keepalives to"
                }
            ));
        }
        for &((waiter, blocker), n) in &seen {
            if n < SIGHTINGS {
                continue;
            }
            let declared = {
                let mut s = lock(&state);
                let w = s.pids.iter().position(|p| *p == Some(waiter));
                let b = s.pids.iter().position(|p| *p == Some(blocker));
                match (w, b) {
                    (Some(waiter), Some(blocker))
                        if !s.conflicts.iter().any(|c| c.waiter == waiter) =>
                    {
                        s.conflicts.push(Conflict { waiter, blocker });
                        true
                    }
                    _ => false,
                }
            };
            if declared {
                let _ = client
                    .execute("SELECT pg_cancel_backend($1)", &[&waiter])
                    .await;
            }
        }
        external_since.retain(|(pid, _, _)| now_external.iter().any(|(p, _)| p == pid));
        for (pid, ext) in now_external {
            match external_since.iter_mut().find(|(p, _, _)| *p == pid) {
                None => external_since.push((pid, Instant::now(), false)),
                Some((_, since, reported)) if !*reported && since.elapsed() > EXTERNAL_REPORT => {
                    *reported = true;
                    let who = describe_session(&client, ext).await;
                    let stream = lock(&state).pids.iter().position(|p| *p == Some(pid));
                    (speech.warn)(format!(
                        "stream {} has waited {} s for a lock held by {who}, a session outside \
                         this load; sluice keeps waiting (end that session, or stop sluice: \
                         nothing is committed)",
                        stream.map_or(0, |s| s + 1),
                        since.elapsed().as_secs()
                    ));
                }
                Some(_) => {}
            }
        }
    }
}

/// The verdict's advice in PostgreSQL's terms, where the engine's would say less: its WAL
/// settings, and what `extend` (the lock for growing a table) means. The engine's own words
/// serve the other classes.
pub fn advice(
    class: Activity,
    waits: &ServerWaits,
    _costs: &sluice_core::destination::TableCosts,
) -> Option<String> {
    let log_event = waits
        .activities
        .iter()
        .find(|(c, _, _)| *c == Activity::Log)
        .map(|(_, e, _)| e.as_str());
    match class {
        Activity::Log if log_event.is_some_and(|e| e.starts_with("WALInit")) => Some(
            "the server is creating new WAL segments: a larger min_wal_size lets it recycle \
             them (and wal_init_zero = off on copy-on-write filesystems); the stage strategy \
             writes almost no WAL under wal_level = minimal"
                .into(),
        ),
        Activity::Log => Some(
            "the stage strategy writes almost no WAL into new staging tables under wal_level = \
             minimal; else a faster WAL disk, or wal_compression"
                .into(),
        ),
        Activity::Lock => Some(
            "another session holds the tables' locks, or the streams contend on one table \
             (`extend` is the lock for growing a table): fewer --jobs, or load when it is quiet"
                .into(),
        ),
        _ => None,
    }
}
