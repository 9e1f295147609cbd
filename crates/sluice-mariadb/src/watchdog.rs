//! Spotting two streams of one load waiting on each other: a key both insert. Neither sees the
//! other's uncommitted row, so the second waits for the first's commit, which waits for the
//! second at the barrier: MariaDB would end the wait only after `innodb_lock_wait_timeout`
//! (50 s by default), as a timeout that names no row. The watch reads InnoDB's lock waits a
//! few times a second on a connection of its own; when a stream of the load waits on another
//! stream of the load, it records the index and the key the waiter asked for (InnoDB's
//! `lock_data`) and ends the waiting statement (`KILL QUERY`), whose error the destination
//! then reports as the engine's `Conflict`, naming both rows.

use crate::connect::connect;
use crate::conninfo::ConnInfo;
use mysql_async::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watched {
    /// Stream `n` now runs on server connection `id`.
    pub fn register(&self, n: usize, id: u32) {
        lock(&self.streams).insert(id, n);
    }

    pub fn unregister(&self, id: u32) {
        lock(&self.streams).remove(&id);
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
    pub async fn start(
        info: &ConnInfo,
        watched: Arc<Watched>,
    ) -> Result<Watch, crate::connect::ConnectError> {
        let mut conn = connect(info).await?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            // A wait seen twice in a row is a conflict: one seen once may be passing.
            let mut seen: HashMap<u64, u64> = HashMap::new();
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(INTERVAL) => {}
                }
                let Ok(rows) = conn.query::<WaitRow, _>(LOCK_WAITS).await else {
                    continue;
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
                    if seen.get(&waiter) != Some(&blocker) {
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
                seen = now;
            }
            let _ = conn.disconnect().await;
        });
        Ok(Watch { stop, task })
    }

    /// Ends the watch.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
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
    fn lock_data_becomes_key_values() {
        assert_eq!(key_values("17"), ["17"]);
        assert_eq!(key_values("17, 'a b'"), ["17", "a b"]);
        assert!(key_values("supremum pseudo-record").is_empty());
    }
}
