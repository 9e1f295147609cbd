//! A bound on a server that stops answering: the bookkeeping every destination shares.
//!
//! Keepalives and a TCP user timeout end a connection whose peer's *kernel* has gone: a host
//! down, a path cut. A server whose kernel still acknowledges while the server itself answers
//! nothing (its processes stopped, a machine frozen under it) fails nothing: a load waiting
//! for an answer (a commit, a prepare, the ledger's decision, a catalog question) would wait
//! forever, in silence.
//!
//! So a destination counts every wait of a load on its server here ([`Silence::begin`],
//! [`Silence::end`]). Once one has lasted [`LOOK_AFTER`], the destination asks the server for
//! a new connection, within [`answer_within`], every [`LOOK_EVERY`] while waits last, and tells
//! this what came of it ([`Silence::looked`]). Any answer, a refusal included, shows that the
//! server works: the waits go on, however long (an index build may take an hour). A server
//! that answers nothing is reported after [`SILENCE_REPORT`] and, once the bound has passed
//! with at least two unanswered looks in a row, given up: the destination ends every
//! connection of the load, so that each wait ends as a lost connection, which the load
//! handles as it does any other. Once the server is given up, each unanswered look gives it
//! up again (ending the connections opened since), until it answers.
//!
//! The clock and the waits are here ([`Silence`], shared by a load's threads as [`Waits`]),
//! and the watcher's loop ([`watch_over`]), which takes its sleep and its look from the
//! destination: the looks, the connections and the runtime are the destination's.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// How often the watcher checks whether a look is due.
pub const TICK: Duration = Duration::from_millis(500);

/// How long a wait lasts before the destination looks whether the server answers at all.
pub const LOOK_AFTER: Duration = Duration::from_secs(5);
/// How long a look (a new connection) may take before it counts as unanswered, at least.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// How long a look may take where the load's first connection took `first`: [`ANSWER_WITHIN`],
/// or four times that connection's time where a long path (or a slow handshake) makes that
/// longer, so that a server far away is never taken for a silent one.
pub fn answer_within(first: Duration) -> Duration {
    ANSWER_WITHIN.max(first * 4)
}
/// How often the destination looks while a wait lasts.
pub const LOOK_EVERY: Duration = Duration::from_secs(5);
/// How long the server may answer nothing before the user is told.
pub const SILENCE_REPORT: Duration = Duration::from_secs(10);

/// The waits under way, and since when the server has answered nothing.
pub struct Silence {
    /// The waits under way, by number, with when each began.
    waits: BTreeMap<u64, Instant>,
    next: u64,
    last_look: Option<Instant>,
    clock: Clock,
}

/// What a look's outcome tells the user, and whether the connections are to be ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Said {
    /// A silence long enough to say so.
    Report(String),
    /// The server given up: end the connections. The words, the first time.
    GiveUp(Option<String>),
}

impl Silence {
    /// No wait yet. `bound` is how long the server may answer nothing before it is given up
    /// (never for `None`); `setting` names what sets it, for the messages (`tcp_user_timeout
    /// in the target`).
    pub fn new(bound: Option<Duration>, setting: &'static str, now: Instant) -> Silence {
        Silence {
            waits: BTreeMap::new(),
            next: 0,
            last_look: None,
            clock: Clock::new(bound, setting, now),
        }
    }

    /// A wait begins: its number, for [`Silence::end`].
    pub fn begin(&mut self, now: Instant) -> u64 {
        let id = self.next;
        self.next += 1;
        self.waits.insert(id, now);
        id
    }

    /// The wait `id` has ended.
    pub fn end(&mut self, id: u64) {
        self.waits.remove(&id);
    }

    /// Whether a look is due now, with when the oldest wait began: a wait has lasted
    /// [`LOOK_AFTER`] (any wait, once the server has been given up), and the last look was
    /// [`LOOK_EVERY`] ago.
    pub fn look_due(&self, now: Instant) -> Option<Instant> {
        let oldest = *self.waits.values().min()?;
        let waited = now.duration_since(oldest) >= LOOK_AFTER || self.clock.given_up;
        let rested = self
            .last_look
            .is_none_or(|l| now.duration_since(l) >= LOOK_EVERY);
        (waited && rested).then_some(oldest)
    }

    /// Whether the silence under way was told to the user (until the server answers again):
    /// another part of the load that finds its own question unanswered need not say it too.
    pub fn told(&self) -> bool {
        self.clock.reported
    }

    /// A look's outcome, the oldest wait having begun at `oldest`.
    pub fn looked(&mut self, answered: bool, oldest: Instant, now: Instant) -> Option<Said> {
        self.last_look = Some(now);
        match answered {
            true => {
                self.clock.answered(now);
                None
            }
            false => self.clock.unanswered(now, oldest),
        }
    }
}

/// A load's [`Silence`], shared by its threads: every wait counted ([`Waits::waiting`]), every
/// look's outcome told to the user (`warn`) and, at a give-up, to the destination (`give_up`,
/// which ends the waits under way).
pub struct Waits {
    clock: Mutex<Silence>,
    warn: Arc<dyn Fn(String) + Send + Sync>,
    give_up: Box<dyn Fn() + Send + Sync>,
}

/// One wait on the server, counted until it is dropped.
pub struct Waiting<'a> {
    waits: &'a Waits,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waits.clock().end(self.id);
    }
}

impl Waits {
    /// As [`Silence::new`], with where its words go and what a give-up does.
    pub fn new(
        bound: Option<Duration>,
        setting: &'static str,
        warn: Arc<dyn Fn(String) + Send + Sync>,
        give_up: Box<dyn Fn() + Send + Sync>,
    ) -> Waits {
        Waits {
            clock: Mutex::new(Silence::new(bound, setting, Instant::now())),
            warn,
            give_up,
        }
    }

    fn clock(&self) -> MutexGuard<'_, Silence> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a wait on the server from now until the value is dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        let id = self.clock().begin(Instant::now());
        Waiting { waits: self, id }
    }

    /// Whether the silence under way was told to the user ([`Silence::told`]).
    pub fn silence_told(&self) -> bool {
        self.clock().told()
    }

    /// A look's outcome at `now`: the user told, the waits given up.
    fn looked(&self, answered: bool, oldest: Instant, now: Instant) {
        let said = self.clock().looked(answered, oldest, now);
        match said {
            Some(Said::Report(text)) => (self.warn)(text),
            Some(Said::GiveUp(text)) => {
                if let Some(text) = text {
                    (self.warn)(text);
                }
                (self.give_up)();
            }
            None => {}
        }
    }
}

/// Looks at the server while waits last, until `waits` is dropped: every [`TICK`] (`sleep`)
/// whether a look is due, and then `look` (true: the server answered).
pub async fn watch_over<S, L>(
    waits: Weak<Waits>,
    sleep: impl Fn(Duration) -> S,
    look: impl Fn() -> L,
) where
    S: Future<Output = ()>,
    L: Future<Output = bool>,
{
    loop {
        sleep(TICK).await;
        let Some(w) = waits.upgrade() else {
            return;
        };
        let due = w.clock().look_due(Instant::now());
        let Some(oldest) = due else {
            continue;
        };
        // Not held across the look: the load's end drops it, and the watcher with it.
        drop(w);
        let answered = look().await;
        match waits.upgrade() {
            Some(w) => w.looked(answered, oldest, Instant::now()),
            None => return,
        }
    }
}

/// Since when the server has answered nothing, and what was said about it.
struct Clock {
    bound: Option<Duration>,
    setting: &'static str,
    last_answer: Instant,
    /// Unanswered looks since the last answer: one look cut short on a busy machine gives
    /// nothing up.
    unanswered_looks: u32,
    reported: bool,
    given_up: bool,
}

/// Unanswered looks in a row before the server is given up, whatever the bound.
const LOOKS_TO_GIVE_UP: u32 = 2;

impl Clock {
    fn new(bound: Option<Duration>, setting: &'static str, now: Instant) -> Clock {
        Clock {
            bound,
            setting,
            last_answer: now,
            unanswered_looks: 0,
            reported: false,
            given_up: false,
        }
    }

    /// The server answered: the clock starts again.
    fn answered(&mut self, now: Instant) {
        *self = Clock::new(self.bound, self.setting, now);
    }

    /// A look went unanswered while the oldest wait had begun at `oldest`. The silence counts
    /// from the last answer, or from that wait's start when it began later (a load that asked
    /// nothing for a while was not waiting); once given up, from the last answer.
    fn unanswered(&mut self, now: Instant, oldest: Instant) -> Option<Said> {
        let since = match self.given_up {
            true => self.last_answer,
            false => self.last_answer.max(oldest),
        };
        let silent = now.duration_since(since);
        self.unanswered_looks += 1;
        let enough = self.given_up || self.unanswered_looks >= LOOKS_TO_GIVE_UP;
        if let Some(bound) = self.bound.filter(|b| silent >= *b && enough) {
            let first = !self.given_up;
            self.given_up = true;
            self.reported = true;
            return Some(Said::GiveUp(first.then(|| {
                format!(
                    "the server has answered nothing for {} s: sluice gives its connections up \
                     as lost (a stream's work is retried within --retries; a commit cut off is \
                     finished by the same command's next run); {} sets this bound ({} s)",
                    silent.as_secs(),
                    self.setting,
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
            None => format!("sluice keeps waiting ({} is 0)", self.setting),
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

    fn silence(bound: Option<u64>, t0: Instant) -> Silence {
        Silence::new(bound.map(Duration::from_secs), "the setting", t0)
    }

    #[test]
    fn a_silence_is_told_once_then_given_up_at_the_bound_and_an_answer_starts_the_clock_again() {
        let t0 = Instant::now();
        let mut s = silence(Some(60), t0);
        assert_eq!(s.looked(false, t0, at(t0, 5)), None);
        assert!(!s.told());
        let Some(Said::Report(r)) = s.looked(false, t0, at(t0, 11)) else {
            panic!("no report after 11 s");
        };
        assert!(s.told());
        assert!(
            r.contains("after 60 s sluice gives its connections up"),
            "{r}"
        );
        assert_eq!(s.looked(false, t0, at(t0, 30)), None, "told once");
        let Some(Said::GiveUp(Some(g))) = s.looked(false, t0, at(t0, 61)) else {
            panic!("not given up at the bound");
        };
        assert!(g.contains("the setting sets this bound (60 s)"), "{g}");
        // A wait begun after the give-up is given up at its first unanswered look, in silence.
        assert_eq!(
            s.looked(false, at(t0, 69), at(t0, 70)),
            Some(Said::GiveUp(None))
        );
        assert_eq!(s.looked(true, at(t0, 69), at(t0, 80)), None);
        assert!(!s.told(), "an answer ends the silence told");
        assert_eq!(s.looked(false, at(t0, 80), at(t0, 85)), None);
        assert!(matches!(
            s.looked(false, at(t0, 81), at(t0, 141)),
            Some(Said::GiveUp(Some(_)))
        ));
    }

    #[test]
    fn one_look_cut_short_gives_nothing_up_even_past_a_short_bound() {
        let t0 = Instant::now();
        let mut s = silence(Some(8), t0);
        assert!(matches!(
            s.looked(false, t0, at(t0, 10)),
            Some(Said::Report(_))
        ));
        assert!(matches!(
            s.looked(false, t0, at(t0, 20)),
            Some(Said::GiveUp(Some(_)))
        ));
    }

    #[test]
    fn the_silence_counts_from_the_oldest_wait_when_it_began_after_the_last_answer() {
        let t0 = Instant::now();
        let mut s = silence(Some(60), t0);
        // Nothing waited for 100 s, then a wait began: 20 s of silence, not 120.
        assert!(matches!(
            s.looked(false, at(t0, 100), at(t0, 120)),
            Some(Said::Report(_))
        ));
        assert_eq!(s.looked(false, at(t0, 100), at(t0, 150)), None);
    }

    #[test]
    fn without_a_bound_the_silence_is_told_and_never_given_up() {
        let t0 = Instant::now();
        let mut s = silence(None, t0);
        let Some(Said::Report(r)) = s.looked(false, t0, at(t0, 11)) else {
            panic!("no report");
        };
        assert!(r.contains("keeps waiting (the setting is 0)"), "{r}");
        assert_eq!(s.looked(false, t0, at(t0, 100_000)), None);
    }

    #[test]
    fn the_shared_waits_tell_the_user_and_give_up_through_the_destination() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let told = Arc::new(Mutex::new(Vec::new()));
        let gave_up = Arc::new(AtomicU32::new(0));
        let (t, g) = (told.clone(), gave_up.clone());
        let waits = Waits::new(
            Some(Duration::from_secs(8)),
            "the setting",
            Arc::new(move |w| t.lock().unwrap().push(w)),
            Box::new(move || {
                g.fetch_add(1, Ordering::SeqCst);
            }),
        );
        let waiting = waits.waiting();
        let began = Instant::now();
        waits.looked(false, began, at(began, 11));
        assert_eq!(
            gave_up.load(Ordering::SeqCst),
            0,
            "one look gives nothing up"
        );
        waits.looked(false, began, at(began, 20));
        assert_eq!(gave_up.load(Ordering::SeqCst), 1);
        let told = told.lock().unwrap().clone();
        assert!(told[0].contains("answered nothing for 11 s"), "{told:?}");
        assert!(
            told[1].contains("the setting sets this bound (8 s)"),
            "{told:?}"
        );
        assert!(waits.clock().look_due(at(began, 25)).is_some());
        drop(waiting);
        assert_eq!(
            waits.clock().look_due(at(began, 25)),
            None,
            "no wait, no look"
        );
    }

    #[test]
    fn a_look_may_take_four_times_the_first_connection_and_never_less_than_five_seconds() {
        assert_eq!(answer_within(Duration::from_millis(3)), ANSWER_WITHIN);
        assert_eq!(
            answer_within(Duration::from_secs(2)),
            Duration::from_secs(8)
        );
    }

    #[test]
    fn a_look_is_due_once_a_wait_has_lasted_and_not_again_before_the_next_interval() {
        let t0 = Instant::now();
        let mut s = silence(Some(60), t0);
        assert_eq!(s.look_due(at(t0, 100)), None, "no wait, no look");
        let w = s.begin(at(t0, 100));
        assert_eq!(s.look_due(at(t0, 103)), None);
        assert_eq!(s.look_due(at(t0, 105)), Some(at(t0, 100)));
        assert_eq!(s.looked(true, at(t0, 100), at(t0, 105)), None);
        assert_eq!(s.look_due(at(t0, 107)), None, "rests between looks");
        assert_eq!(s.look_due(at(t0, 110)), Some(at(t0, 100)));
        s.end(w);
        assert_eq!(s.look_due(at(t0, 120)), None);
    }
}
