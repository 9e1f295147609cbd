//! Readers held back while a load's transactions commit one after another.
//!
//! A load on several streams ends with several commits (`COMMIT PREPARED` of each stream's
//! prepared transaction, or each stream's `COMMIT`), and PostgreSQL has no statement that
//! makes two transactions visible at once. A reader whose snapshot falls between two of them
//! would see part of the load.
//!
//! PostgreSQL queues a lock request behind a conflicting request already waiting. So a
//! session that asks for `ACCESS EXCLUSIVE` on a table while the load's transactions still hold
//! their `ROW EXCLUSIVE` on it waits for all of them, and every reader that comes after waits
//! behind it. Such a *gate* runs `BEGIN; LOCK TABLE ONLY t IN ACCESS EXCLUSIVE MODE; ROLLBACK`
//! in one message: the server ends it the moment the last of the load's transactions commits,
//! with no round trip to sluice, and the readers it held take their snapshots after that. They
//! see all of the load. A reader's statement that began before the gate has its snapshot
//! already and sees none of it; the gate waits for it, holding the readers behind it no
//! longer than the commits take, since the gates are cancelled once the commits are done.
//!
//! What bounds a gate when sluice is gone: its session checks every [`CLIENT_CHECK`] that
//! sluice is still connected (`client_connection_check_interval`, PostgreSQL 14 and later),
//! and gives up after [`GATE_WAIT`] (`lock_timeout`), for a sluice cut off by the network.
//!
//! What it does not cover: a reader that names a partition, or an inheritance child, rather
//! than the table the load wrote (only the tables themselves are gated); a statement of a
//! `REPEATABLE READ` or `SERIALIZABLE` transaction that is its first (its snapshot is taken
//! before it opens the table, so it may wait and still see part); a transaction that already
//! holds a lock on the table from an earlier statement (it is not queued). A reader with a
//! short `lock_timeout` of its own may get that error instead of waiting.

use crate::onetrip::OneTrip;
use futures_util::FutureExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// How long a gate waits for the load's transactions before it gives up by itself: the bound on
/// how long readers can be held by a sluice that can no longer reach the server.
const GATE_WAIT: &str = "10s";

/// How often a gate's session checks that sluice is still connected: the bound on how long a
/// killed sluice holds readers back.
const CLIENT_CHECK: &str = "250ms";

/// How long the load waits to see every gate queued before it commits without them.
const QUEUE_WAIT: Duration = Duration::from_secs(2);

/// How long, after the commits, the gates get to end by themselves before they are cancelled
/// (a reader's long statement may hold the lock they wait for).
const END_WAIT: Duration = Duration::from_millis(300);

/// The most tables whose readers are held, a connection each.
pub const MAX_GATES: usize = 32;

/// A connection left free by a stream that prepared its transaction, kept for a gate.
pub struct Spare {
    pub client: Arc<Client>,
    pub pid: i32,
}

/// One table's gate: its session's backend, and the task running its statement (until it has
/// been awaited).
struct Gate {
    table: String,
    pid: i32,
    task: Option<JoinHandle<Result<(), tokio_postgres::Error>>>,
}

/// The gates of one commit, until [`Gates::release`].
pub struct Gates {
    gates: Vec<Gate>,
}

/// Whose writes the commits make visible: prepared transactions (by name) and open
/// transactions (by backend).
pub struct Writers {
    pub prepared: Vec<String>,
    pub pids: Vec<i32>,
}

/// The tables `writers` wrote (a lock of a writing mode: a foreign key's parent, which they only
/// read, is not one) other than the load's own (`own`, by oid): a trigger's table, a crew's
/// other workers' tables. Partitions are left out (their parent is gated), and so are sluice's
/// own schemas. Names as `regclass` prints them, quoted where needed.
async fn others(
    client: &Client,
    own: &[u32],
    writers: &Writers,
) -> Result<Vec<String>, tokio_postgres::Error> {
    if writers.prepared.is_empty() && writers.pids.is_empty() {
        return Ok(Vec::new());
    }
    let own: Vec<i64> = own.iter().map(|&o| i64::from(o)).collect();
    let rows = client
        .fetch(
            "WITH locks AS ( \
               SELECT r.relation, r.mode FROM pg_prepared_xacts p \
               JOIN pg_locks x ON x.locktype = 'transactionid' AND x.pid IS NULL \
                 AND x.transactionid = p.transaction \
               JOIN pg_locks r ON r.virtualtransaction = x.virtualtransaction \
                 AND r.pid IS NULL AND r.locktype = 'relation' \
               WHERE p.gid = ANY($2) AND p.database = current_database() \
               UNION ALL \
               SELECT relation, mode FROM pg_locks \
               WHERE pid = ANY($3) AND locktype = 'relation') \
             SELECT DISTINCT c.oid::regclass::text FROM locks l \
             JOIN pg_class c ON c.oid = l.relation \
             WHERE l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', \
                 'ExclusiveLock', 'AccessExclusiveLock') \
               AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND c.oid <> ALL($1::bigint[]::oid[]) \
               AND c.relnamespace NOT IN (SELECT oid FROM pg_namespace \
                 WHERE nspname IN ('sluice_ledger', 'sluice_stage') \
                   OR nspname LIKE 'pg\\_temp\\_%') \
             ORDER BY 1",
            &[&own, &writers.prepared, &writers.pids],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Which of the backends `pids` wait for an `ACCESS EXCLUSIVE` lock on a table.
async fn waiting(client: &Client, pids: &[i32]) -> Result<Vec<i32>, tokio_postgres::Error> {
    let rows = client
        .fetch(
            "SELECT pid FROM pg_locks WHERE pid = ANY($1) AND NOT granted \
             AND locktype = 'relation' AND mode = 'AccessExclusiveLock'",
            &[&pids],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Why a gate's lock on `table` was refused, and the grant that allows it where that is why.
fn refused(table: &str, e: &tokio_postgres::Error) -> String {
    let why = crate::connect::chain(e);
    match e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
        true => format!(
            "asking for a lock on {table}: {why}; the load's role needs UPDATE, DELETE or \
             TRUNCATE on it to hold readers back"
        ),
        false => format!("asking for a lock on {table}: {why}"),
    }
}

/// The gate's statement for `table`: its bounds, then the lock it waits for, given up as soon
/// as it is granted.
fn gate_sql(table: &str, server_version_num: i32) -> String {
    let check = match server_version_num >= 140_000 {
        true => format!("SET client_connection_check_interval = '{CLIENT_CHECK}'; "),
        false => String::new(),
    };
    format!(
        "SET statement_timeout = 0; SET lock_timeout = '{GATE_WAIT}'; {check}\
         BEGIN; LOCK TABLE ONLY {table} IN ACCESS EXCLUSIVE MODE; ROLLBACK"
    )
}

/// A load's own tables, by name and oid, to gate while its transactions commit.
pub struct Own {
    pub names: Vec<String>,
    pub oids: Vec<u32>,
}

/// Starts a gate on each of the load's own tables and on each other table `writers` wrote, each on a session from `sessions` (a free stream's connection
/// or a new one), and returns once every one is queued (or already through: its table's
/// transactions had ended). The own tables' gates go out first, so that the question which
/// other tables there are, and whether the gates wait, take one round trip together. On any
/// failure the gates started are released and the reason returned: the commits then go ahead
/// without them.
pub async fn hold<S, F>(
    client: &Client,
    own: Own,
    writers: &Writers,
    sessions: S,
    server_version_num: i32,
) -> Result<Gates, String>
where
    S: FnMut(usize) -> F,
    F: std::future::Future<Output = Result<Vec<Spare>, String>>,
{
    let mut held = Gates { gates: Vec::new() };
    let started = held
        .start_all(client, own, writers, sessions, server_version_num)
        .await;
    match started {
        Ok(()) => Ok(held),
        Err(why) => {
            held.release(client).await;
            Err(why)
        }
    }
}

impl Gates {
    /// [`hold`]'s steps, each gate started kept in `self` for the release.
    async fn start_all<S, F>(
        &mut self,
        client: &Client,
        own: Own,
        writers: &Writers,
        mut sessions: S,
        server_version_num: i32,
    ) -> Result<(), String>
    where
        S: FnMut(usize) -> F,
        F: std::future::Future<Output = Result<Vec<Spare>, String>>,
    {
        let chain = |e: tokio_postgres::Error| crate::connect::chain(&e);
        let too_many = |tables: usize| {
            format!(
                "the load's transactions wrote {tables} tables, and sluice holds readers of at \
                 most {MAX_GATES} (a connection each)"
            )
        };
        if own.names.len() > MAX_GATES {
            return Err(too_many(own.names.len()));
        }
        let first = sessions(own.names.len()).await?;
        self.start(own.names, first, server_version_num);
        let running = self.running();
        let (queued, others) = tokio::join!(
            waiting(client, &running),
            others(client, &own.oids, writers)
        );
        let (mut queued, others) = (queued.map_err(chain)?, others.map_err(chain)?);
        let tables = others.len() + self.gates.len();
        if tables > MAX_GATES {
            return Err(too_many(tables));
        }
        if !others.is_empty() {
            let more = sessions(others.len()).await?;
            self.start(others, more, server_version_num);
            queued.clear();
        }
        self.queued(client, queued).await
    }

    /// Starts a gate on each of `tables`, one on each of `sessions`.
    fn start(&mut self, tables: Vec<String>, sessions: Vec<Spare>, server_version_num: i32) {
        for (table, s) in tables.into_iter().zip(sessions) {
            let sql = gate_sql(&table, server_version_num);
            let session = s.client;
            let task = tokio::spawn(async move { session.batch_execute(&sql).await });
            self.gates.push(Gate {
                table,
                pid: s.pid,
                task: Some(task),
            });
        }
    }

    /// The backends of the gates whose statement has not ended.
    fn running(&self) -> Vec<i32> {
        self.gates
            .iter()
            .filter(|g| g.task.as_ref().is_some_and(|t| !t.is_finished()))
            .map(|g| g.pid)
            .collect()
    }

    /// Waits until the server shows every gate still running as waiting for its lock; `seen`
    /// are those a first look (made with the gates started) found waiting.
    async fn queued(&mut self, client: &Client, mut seen: Vec<i32>) -> Result<(), String> {
        let deadline = Instant::now() + QUEUE_WAIT;
        loop {
            for g in &mut self.gates {
                let Some(task) = g.task.take_if(|t| t.is_finished()) else {
                    continue;
                };
                match task.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(refused(&g.table, &e)),
                    Err(e) => return Err(format!("asking for a lock on {}: {e}", g.table)),
                }
            }
            let running = self.running();
            if running.iter().all(|pid| seen.contains(pid)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server did not show the gates waiting within {} s",
                    QUEUE_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            seen = waiting(client, &running)
                .await
                .map_err(|e| crate::connect::chain(&e))?;
        }
    }

    /// Ends the gates: each normally ended by itself when the commits released its table; any
    /// still waiting after [`END_WAIT`] (a reader's long statement holds the table) is
    /// cancelled. Returns what ended a gate before the commits were done (its lock's bound ran
    /// out, say): readers may have seen part of the load then.
    pub async fn release(mut self, client: &Client) -> Vec<String> {
        let mut early = self.ended();
        let deadline = Instant::now() + END_WAIT;
        for g in &mut self.gates {
            let Some(task) = g.task.as_mut() else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if let Ok(done) = tokio::time::timeout(left, task).await {
                g.task = None;
                if let Ok(Err(e)) = done {
                    early.push(refused(&g.table, &e));
                }
            }
        }
        let waiting = self.running();
        if waiting.is_empty() {
            return early;
        }
        let _ = client
            .fetch(
                "SELECT pg_cancel_backend(pid) FROM unnest($1::int4[]) pid",
                &[&waiting],
            )
            .await;
        let deadline = Instant::now() + Duration::from_secs(2);
        for g in &mut self.gates {
            if let Some(task) = g.task.as_mut() {
                let left = deadline.saturating_duration_since(Instant::now());
                if tokio::time::timeout(left, task).await.is_ok() {
                    g.task = None;
                }
            }
        }
        early
    }

    /// What ended the gates whose statement has ended with an error by now.
    fn ended(&mut self) -> Vec<String> {
        let mut why = Vec::new();
        for g in &mut self.gates {
            if g.task.as_ref().is_some_and(|t| t.is_finished()) {
                if let Some(Ok(Err(e))) = g.task.take().and_then(|t| t.now_or_never()) {
                    why.push(refused(&g.table, &e));
                }
            }
        }
        why
    }
}

impl Drop for Gates {
    /// A gate not waited for is stopped with its task (its session waits on until its lock is
    /// granted or its bound runs out: [`Gates::release`] is the way to end one).
    fn drop(&mut self) {
        for task in self.gates.iter().filter_map(|g| g.task.as_ref()) {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_asks_its_lock_in_one_message_and_gives_it_up_at_once() {
        let sql = gate_sql("public.\"T\"", 150_004);
        assert!(
            sql.ends_with("BEGIN; LOCK TABLE ONLY public.\"T\" IN ACCESS EXCLUSIVE MODE; ROLLBACK")
        );
        assert!(sql.contains("lock_timeout = '10s'"), "{sql}");
        assert!(sql.contains("client_connection_check_interval"), "{sql}");
        // Before PostgreSQL 14 the setting does not exist, and only the lock's bound is set.
        assert!(!gate_sql("t", 130_000).contains("client_connection_check_interval"));
    }
}
