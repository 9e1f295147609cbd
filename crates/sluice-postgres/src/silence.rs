//! A bound on a server that stops answering, for PostgreSQL loads: the waits counted, the
//! looks taken, the connections ended ([`sluice_core::silence`] keeps the clock and says why).
//!
//! Every wait of the load on its server goes through [`Silence::waiting`]; a watcher on the
//! load's runtime asks the server for a new connection when a look is due. When the server is
//! given up (after the target's `tcp_user_timeout`, two minutes by default), every connection
//! of the load is ended through [`Ends`], which [`crate::conninfo::ConnInfo`] carries to every
//! connection the load opens: a connection's task ends, and an attempt to connect is cut off,
//! when the server is given up after they began. Each wait then fails as a lost connection.

use crate::conninfo::ConnInfo;
use sluice_core::silence::Said;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the watcher checks whether a look is due.
const TICK: Duration = Duration::from_millis(500);

/// What ends a load's connections when its server is given up: a generation number, raised at
/// each give-up. A connection, or an attempt to connect, ends when the generation rises past
/// the one it began in. The default ends nothing (a command that is not a load).
#[derive(Clone, Default)]
pub struct Ends(Option<watch::Receiver<u64>>);

/// Not part of what a target is: two targets that differ only in it are the same.
impl PartialEq for Ends {
    fn eq(&self, _: &Ends) -> bool {
        true
    }
}

impl Eq for Ends {}

impl Ends {
    /// The generation now: what a connection beginning now is ended after.
    pub fn now(&self) -> u64 {
        self.0.as_ref().map_or(0, |rx| *rx.borrow())
    }

    /// Resolves once the server has been given up after `generation`; never without a watcher.
    pub async fn after(&self, generation: u64) {
        let Some(mut rx) = self.0.clone() else {
            return std::future::pending().await;
        };
        if rx.wait_for(|g| *g > generation).await.is_err() {
            // The watcher is gone (the load's end): nothing will end this connection.
            std::future::pending::<()>().await;
        }
    }

    /// `task` (a connection's), ended early when the server is given up after it began.
    pub fn end<F: Future>(&self, task: F) -> impl Future<Output = ()> {
        let (ends, generation) = (self.clone(), self.now());
        async move {
            tokio::select! {
                _ = task => {}
                _ = ends.after(generation) => {}
            }
        }
    }

    /// `attempt` (a connection's startup), or `cut` when the server is given up meanwhile.
    pub async fn cut<T>(&self, attempt: impl Future<Output = T>, cut: impl FnOnce() -> T) -> T {
        let generation = self.now();
        tokio::select! {
            done = attempt => done,
            _ = self.after(generation) => cut(),
        }
    }
}

/// The load's waits on its server, and what ends its connections.
pub struct Silence {
    clock: Mutex<sluice_core::silence::Silence>,
    ended: watch::Sender<u64>,
    warn: Arc<dyn Fn(String) + Send + Sync>,
}

/// One wait on the server, counted until it is dropped.
pub struct Waiting<'a> {
    silence: &'a Silence,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.silence.clock().end(self.id);
    }
}

impl Silence {
    /// A silence of no wait yet, giving the server up after `bound` (never for `None`); its
    /// watcher starts with [`Silence::watch`].
    pub fn new(bound: Option<Duration>, warn: Arc<dyn Fn(String) + Send + Sync>) -> Arc<Silence> {
        let clock = sluice_core::silence::Silence::new(
            bound,
            "tcp_user_timeout in the target",
            Instant::now(),
        );
        Arc::new(Silence {
            clock: Mutex::new(clock),
            ended: watch::channel(0).0,
            warn,
        })
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, sluice_core::silence::Silence> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the watcher, on the current runtime: it asks the server of `info` (the host the
    /// load pinned) while waits last, for as long as the silence lives; each look may take
    /// [`sluice_core::silence::answer_within`] of `first`, what the load's first connection
    /// took.
    pub fn watch(self: &Arc<Silence>, info: &ConnInfo, first: Duration) {
        // The looks' own connections: bounded by the look alone, and never ended by it.
        let mut asked = info.clone();
        asked.connect_timeout = None;
        asked.ends = Ends::default();
        let within = sluice_core::silence::answer_within(first);
        tokio::spawn(watch_over(Arc::downgrade(self), asked, within));
    }

    /// What the load's connections carry, to be ended when the server is given up.
    pub fn ends(&self) -> Ends {
        Ends(Some(self.ended.subscribe()))
    }

    /// Counts a wait on the server from now until the value is dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        let id = self.clock().begin(Instant::now());
        Waiting { silence: self, id }
    }

    /// A look's outcome: the user told, the connections ended.
    fn looked(&self, answered: bool, oldest: Instant) {
        let said = self.clock().looked(answered, oldest, Instant::now());
        match said {
            Some(Said::Report(text)) => (self.warn)(text),
            Some(Said::GiveUp(text)) => {
                if let Some(text) = text {
                    (self.warn)(text);
                }
                self.ended.send_modify(|g| *g += 1);
            }
            None => {}
        }
    }
}

/// Looks at the server while waits last, until the silence is dropped.
async fn watch_over(silence: Weak<Silence>, info: ConnInfo, within: Duration) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(s) = silence.upgrade() else {
            return;
        };
        let due = s.clock().look_due(Instant::now());
        let Some(oldest) = due else {
            continue;
        };
        // Not held across the look: the load's end drops it, and the watcher with it.
        drop(s);
        let answered = answers(&info, within).await;
        match silence.upgrade() {
            Some(s) => s.looked(answered, oldest),
            None => return,
        }
    }
}

/// Whether the server answers a new connection `within`. A refusal (too many connections, a
/// password refused, a port closed by a restart) is an answer: only silence is not.
async fn answers(info: &ConnInfo, within: Duration) -> bool {
    tokio::time::timeout(within, crate::connect::connect(info))
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_ends_when_the_server_is_given_up_after_it_began_and_not_before() {
        let (tx, rx) = watch::channel(0u64);
        let ends = Ends(Some(rx));
        tx.send_modify(|g| *g += 1);
        // Begun after that give-up: not ended by it.
        let task = tokio::spawn(ends.end(std::future::pending::<()>()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!task.is_finished());
        tx.send_modify(|g| *g += 1);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("ended at the give-up")
            .unwrap();
        // An attempt to connect under way when the server is given up is cut off.
        let mut attempt = std::pin::pin!(ends.cut(std::future::pending::<u8>(), || 7));
        assert!(futures_util::poll!(attempt.as_mut()).is_pending());
        tx.send_modify(|g| *g += 1);
        assert_eq!(attempt.await, 7);
    }
}
