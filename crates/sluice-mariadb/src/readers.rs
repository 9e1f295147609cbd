//! Readers held back while the streams' transactions (XA branches, or plain ones) commit one
//! after another.
//!
//! Each stream's branch is committed by its own session, and MariaDB has no statement that
//! makes two transactions visible at once: a reader between two `XA COMMIT`s would see part of
//! the load. A stream's open or prepared transaction holds a shared metadata lock on each table
//! it wrote until it ends, and MariaDB queues a new reader's metadata lock behind a waiting
//! request for a write lock. So a session that runs `LOCK TABLES t WRITE` before the commits
//! waits for all of them, and every later reader of `t` waits behind it. Its message goes on
//! with `UNLOCK TABLES`, which the server runs the moment the lock is granted (after the last
//! commit), with no round trip to sluice: the readers it held then see the whole load.
//!
//! Bounds: the request gives up after [`GATE_WAIT`] (`lock_wait_timeout`), which bounds what
//! a killed sluice leaves (MariaDB does not notice a gone client while its thread waits for a
//! metadata lock); once the commits are done, a request still waiting (a reader's long
//! statement holds the table) is stopped with `KILL QUERY`.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a gate waits for the load's transactions, in seconds, before it gives up.
const GATE_WAIT: u32 = 10;

/// How long the load waits to see every gate queued before it commits without them.
const QUEUE_WAIT: Duration = Duration::from_secs(2);

/// How long, after the commits, the gates get to end by themselves before they are stopped.
const END_WAIT: Duration = Duration::from_millis(300);

/// The most tables whose readers are held, a connection each.
pub const MAX_GATES: usize = 32;

/// One table's gate: its session's id, and the task running its statements (until awaited).
struct Gate {
    table: String,
    id: u32,
    task: Option<JoinHandle<Result<(), mysql_async::Error>>>,
}

/// The gates of one commit, until [`Gates::release`].
pub struct Gates {
    gates: Vec<Gate>,
}

/// The gate's statements for `table`, sent in one message.
fn gate_sql(table: &str) -> String {
    format!("SET SESSION lock_wait_timeout = {GATE_WAIT}; LOCK TABLES {table} WRITE; UNLOCK TABLES")
}

/// Why a gate's lock on `table` was refused, and the grant that allows it where that is why.
fn refused(table: &str, e: &mysql_async::Error) -> String {
    let denied = matches!(e, mysql_async::Error::Server(s) if s.code == 1044 || s.code == 1142);
    match denied {
        true => format!(
            "asking for a lock on {table}: {e}; the load's user needs the LOCK TABLES privilege \
             on its database (and SELECT on the table) to hold readers back"
        ),
        false => format!("asking for a lock on {table}: {e}"),
    }
}

/// Starts a gate on each of `tables`, one on each of `sessions`, and returns once the server
/// shows each waiting (or through). On any failure the gates started are released and the
/// reason returned: the commits then go ahead without them.
pub async fn hold(
    own: &mut Conn,
    tables: Vec<String>,
    sessions: Vec<Conn>,
) -> Result<Gates, String> {
    let mut held = Gates { gates: Vec::new() };
    for (table, mut conn) in tables.into_iter().zip(sessions) {
        let id = conn.id();
        let sql = gate_sql(&table);
        let task = tokio::spawn(async move {
            let done = conn.query_drop(sql).await;
            let _ = conn.disconnect().await;
            done
        });
        held.gates.push(Gate {
            table,
            id,
            task: Some(task),
        });
    }
    match held.queued(own).await {
        Ok(()) => Ok(held),
        Err(why) => {
            held.release(own).await;
            Err(why)
        }
    }
}

impl Gates {
    /// Waits until the server shows every gate still running as waiting for its lock.
    async fn queued(&mut self, own: &mut Conn) -> Result<(), String> {
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
            let running: Vec<String> = self
                .gates
                .iter()
                .filter(|g| g.task.is_some())
                .map(|g| g.id.to_string())
                .collect();
            if running.is_empty() {
                return Ok(());
            }
            let waiting: Option<u64> = own
                .query_first(format!(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ({}) \
                     AND STATE = 'Waiting for table metadata lock'",
                    running.join(",")
                ))
                .await
                .map_err(|e| e.to_string())?;
            if waiting == Some(running.len() as u64) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server did not show the gates waiting within {} s",
                    QUEUE_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Ends the gates: each normally ended by itself when the commits released its table; any
    /// still waiting after [`END_WAIT`] is stopped with `KILL QUERY`. Returns what ended a gate
    /// before the commits were done (its lock's bound ran out, say): readers may have seen
    /// part of the load then.
    pub async fn release(mut self, own: &mut Conn) -> Vec<String> {
        let mut early = Vec::new();
        let deadline = Instant::now() + END_WAIT;
        let mut waiting = Vec::new();
        for g in &mut self.gates {
            let Some(task) = g.task.as_mut() else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, task).await {
                Ok(done) => {
                    g.task = None;
                    if let Ok(Err(e)) = done {
                        early.push(refused(&g.table, &e));
                    }
                }
                Err(_) => waiting.push(g.id),
            }
        }
        for id in waiting {
            let _ = own.query_drop(format!("KILL QUERY {id}")).await;
        }
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
}

impl Drop for Gates {
    /// A gate not waited for is stopped with its task, which closes its connection (the
    /// server then ends its wait).
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
    fn a_gate_locks_and_unlocks_in_one_message_with_a_bound() {
        assert_eq!(
            gate_sql("`db`.`t`"),
            "SET SESSION lock_wait_timeout = 10; LOCK TABLES `db`.`t` WRITE; UNLOCK TABLES"
        );
    }
}
