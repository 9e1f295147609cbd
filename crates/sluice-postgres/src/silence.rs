//! A bound on a server that stops answering.
//!
//! Keepalives and `tcp_user_timeout` end a connection whose peer's *kernel* has gone: a host
//! down, a path cut. A server whose kernel still acknowledges while the server itself answers
//! nothing (its processes stopped, a machine frozen under it, a storage it waits on forever)
//! fails nothing: a load waiting for an answer (a `COMMIT`, a `PREPARE TRANSACTION`, the
//! ledger's decision, a catalog question) would wait forever, in silence.
//!
//! So every wait of a load on its server is counted here ([`Silence::waiting`]). Once one has
//! lasted [`LOOK_AFTER`], a watcher asks the server for a new connection, within
//! [`ANSWER_WITHIN`], every [`LOOK_EVERY`] while waits last. Any answer, a refusal included,
//! shows that the server works: the waits go on, however long (an index build may take an
//! hour). A server that answers nothing is reported after [`SILENCE_REPORT`] and, after the
//! bound (the target's `tcp_user_timeout`, two minutes by default), given up: every connection
//! of the load is ended, and each wait ends as a lost connection, which the load handles as it
//! does any other (a stream's work retried within `--retries`; a commit cut off finished by
//! the same command's next run). Once the server is given up, a connection it does not answer
//! is given up at the next unanswered look, until the server answers again.
//!
//! The connections learn of it through [`Ends`], which [`crate::conninfo::ConnInfo`] carries
//! to every connection the load opens: a connection's task ends, and an attempt to connect is
//! cut off, when the server is given up after they began.

use crate::conninfo::ConnInfo;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a wait lasts before the watcher looks whether the server answers at all.
const LOOK_AFTER: Duration = Duration::from_secs(5);
/// How long a look (a new connection) may take before it counts as unanswered.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How often the watcher looks while a wait lasts.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// How long the server may answer nothing before the user is told.
const SILENCE_REPORT: Duration = Duration::from_secs(10);
/// How often the watcher checks the waits.
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

/// The load's waits on its server, and the watcher's clock.
pub struct Silence {
    state: Mutex<State>,
    ended: watch::Sender<u64>,
    warn: Arc<dyn Fn(String) + Send + Sync>,
}

struct State {
    /// The waits under way, by number, with when each began.
    waits: BTreeMap<u64, Instant>,
    next: u64,
    clock: Clock,
    last_look: Option<Instant>,
}

/// One wait on the server, counted until it is dropped.
pub struct Waiting<'a> {
    silence: &'a Silence,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.silence.state).waits.remove(&self.id);
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Silence {
    /// A silence of no wait yet, giving the server up after `bound` (never for `None`); its
    /// watcher starts with [`Silence::watch`].
    pub fn new(bound: Option<Duration>, warn: Arc<dyn Fn(String) + Send + Sync>) -> Arc<Silence> {
        let (ended, _) = watch::channel(0);
        Arc::new(Silence {
            state: Mutex::new(State {
                waits: BTreeMap::new(),
                next: 0,
                clock: Clock::new(bound, Instant::now()),
                last_look: None,
            }),
            ended,
            warn,
        })
    }

    /// Starts the watcher, on the current runtime: it asks the server of `info` (the host the
    /// load pinned) while waits last, for as long as the silence lives.
    pub fn watch(self: &Arc<Silence>, info: &ConnInfo) {
        // The looks' own connections: bounded by the look alone, and never ended by it.
        let mut asked = info.clone();
        asked.connect_timeout = None;
        asked.ends = Ends::default();
        tokio::spawn(watch_over(Arc::downgrade(self), asked));
    }

    /// What the load's connections carry, to be ended when the server is given up.
    pub fn ends(&self) -> Ends {
        Ends(Some(self.ended.subscribe()))
    }

    /// Counts a wait on the server from now until the value is dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        let mut s = lock(&self.state);
        let id = s.next;
        s.next += 1;
        s.waits.insert(id, Instant::now());
        Waiting { silence: self, id }
    }

    /// Whether a look is due now: a wait has lasted long enough (any wait, once the server has
    /// been given up), and the last look was long enough ago.
    fn look_due(&self, now: Instant) -> Option<Instant> {
        let s = lock(&self.state);
        let oldest = *s.waits.values().min()?;
        let waited = now.duration_since(oldest) >= LOOK_AFTER || s.clock.given_up;
        let rested = s
            .last_look
            .is_none_or(|l| now.duration_since(l) >= LOOK_EVERY);
        (waited && rested).then_some(oldest)
    }

    /// A look's outcome: the clock moves, the user is told, connections are ended.
    fn looked(&self, answered: bool, oldest: Instant) {
        let now = Instant::now();
        let said = {
            let mut s = lock(&self.state);
            s.last_look = Some(now);
            match answered {
                true => {
                    s.clock.answered(now);
                    None
                }
                false => s.clock.unanswered(now, oldest),
            }
        };
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
async fn watch_over(silence: Weak<Silence>, info: ConnInfo) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(s) = silence.upgrade() else {
            return;
        };
        let Some(oldest) = s.look_due(Instant::now()) else {
            continue;
        };
        // Not held across the look: the load's end drops it, and the watcher with it.
        drop(s);
        let answered = answers(&info).await;
        match silence.upgrade() {
            Some(s) => s.looked(answered, oldest),
            None => return,
        }
    }
}

/// Whether the server answers a new connection within [`ANSWER_WITHIN`]. A refusal (too many
/// connections, a password refused, a port closed by a restart) is an answer: only silence
/// is not.
async fn answers(info: &ConnInfo) -> bool {
    tokio::time::timeout(ANSWER_WITHIN, crate::connect::connect(info))
        .await
        .is_ok()
}

/// What a look's outcome tells.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    Report(String),
    /// The server given up; the words, the first time.
    GiveUp(Option<String>),
}

/// Since when the server has answered nothing, and what was said about it.
struct Clock {
    bound: Option<Duration>,
    last_answer: Instant,
    reported: bool,
    given_up: bool,
}

impl Clock {
    fn new(bound: Option<Duration>, now: Instant) -> Clock {
        Clock {
            bound,
            last_answer: now,
            reported: false,
            given_up: false,
        }
    }

    fn answered(&mut self, now: Instant) {
        *self = Clock::new(self.bound, now);
    }

    /// A look went unanswered while the oldest wait had begun at `oldest`. The silence counts
    /// from the last answer, or from that wait's start when it began later (a load that sent
    /// nothing for a while was not waiting); once given up, from the last answer.
    fn unanswered(&mut self, now: Instant, oldest: Instant) -> Option<Said> {
        let since = match self.given_up {
            true => self.last_answer,
            false => self.last_answer.max(oldest),
        };
        let silent = now.duration_since(since);
        if let Some(bound) = self.bound.filter(|b| silent >= *b) {
            let first = !self.given_up;
            self.given_up = true;
            self.reported = true;
            return Some(Said::GiveUp(first.then(|| {
                format!(
                    "the server has answered nothing for {} s: sluice gives its connections up \
                     as lost (a stream's work is retried within --retries; a commit cut off is \
                     finished by the same command's next run); tcp_user_timeout in the target \
                     sets this bound ({} s)",
                    silent.as_secs(),
                    bound.as_secs()
                )
            })));
        }
        if silent < SILENCE_REPORT || self.reported {
            return None;
        }
        self.reported = true;
        let next = match self.bound {
            Some(b) => format!(
                "after {} s sluice gives its connections up as lost",
                b.as_secs()
            ),
            None => "sluice keeps waiting (tcp_user_timeout=0)".to_string(),
        };
        Some(Said::Report(format!(
            "the server has answered nothing for {} s (stopped, overloaded, or cut off by the \
             network): {next}",
            silent.as_secs()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn a_silence_is_told_once_then_given_up_at_the_bound_and_an_answer_starts_the_clock_again() {
        let t0 = Instant::now();
        let mut c = Clock::new(Some(Duration::from_secs(60)), t0);
        assert_eq!(c.unanswered(at(t0, 5), t0), None);
        let Some(Said::Report(r)) = c.unanswered(at(t0, 11), t0) else {
            panic!("no report after 11 s");
        };
        assert!(
            r.contains("after 60 s sluice gives its connections up"),
            "{r}"
        );
        assert_eq!(c.unanswered(at(t0, 30), t0), None, "told once");
        let Some(Said::GiveUp(Some(g))) = c.unanswered(at(t0, 61), t0) else {
            panic!("not given up at the bound");
        };
        assert!(
            g.contains("tcp_user_timeout in the target sets this bound (60 s)"),
            "{g}"
        );
        // A wait begun after the give-up is given up at its first unanswered look, in silence.
        assert_eq!(
            c.unanswered(at(t0, 70), at(t0, 69)),
            Some(Said::GiveUp(None))
        );
        c.answered(at(t0, 80));
        assert_eq!(c.unanswered(at(t0, 85), at(t0, 80)), None);
        assert!(matches!(
            c.unanswered(at(t0, 141), at(t0, 81)),
            Some(Said::GiveUp(Some(_)))
        ));
    }

    #[test]
    fn the_silence_counts_from_the_oldest_wait_when_it_began_after_the_last_answer() {
        let t0 = Instant::now();
        let mut c = Clock::new(Some(Duration::from_secs(60)), t0);
        // Nothing waited for 100 s, then a wait began: 20 s of silence, not 120.
        assert!(matches!(
            c.unanswered(at(t0, 120), at(t0, 100)),
            Some(Said::Report(_))
        ));
        assert_eq!(c.unanswered(at(t0, 150), at(t0, 100)), None);
    }

    #[test]
    fn without_a_bound_the_silence_is_told_and_never_given_up() {
        let t0 = Instant::now();
        let mut c = Clock::new(None, t0);
        let Some(Said::Report(r)) = c.unanswered(at(t0, 11), t0) else {
            panic!("no report");
        };
        assert!(r.contains("keeps waiting (tcp_user_timeout=0)"), "{r}");
        assert_eq!(c.unanswered(at(t0, 100_000), t0), None);
    }

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
        let cut = ends
            .cut(std::future::pending::<u8>(), || 7)
            .await_with(|| tx.send_modify(|g| *g += 1))
            .await;
        assert_eq!(cut, 7);
    }

    /// Runs `then` once the future has been polled (so that it began before it).
    trait AwaitWith: Future + Sized {
        async fn await_with(self, then: impl FnOnce()) -> Self::Output {
            let mut f = std::pin::pin!(self);
            let first = futures_util::poll!(f.as_mut());
            assert!(first.is_pending());
            then();
            f.await
        }
    }

    impl<F: Future> AwaitWith for F {}
}
