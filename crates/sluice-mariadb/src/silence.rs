//! A bound on a server that stops answering, in every phase of a MariaDB load: the waits
//! counted, the looks taken, the waits given up ([`sluice_core::silence`] keeps the clock and
//! says why).
//!
//! Every wait of the load on its server is counted ([`Rt::wait`]): a watcher on the load's
//! runtime asks the server for a new connection when a look is due, and when the server is
//! given up (after the target's `answer-timeout=`), the waits under way end as lost
//! connections. Most go through [`Rt::block_on`] (a `COMMIT`, an `XA PREPARE` or `XA COMMIT`,
//! the ledger's decision, an index build, a new connection), whose future is dropped there,
//! mid-statement: that connection is never used again (a lost stream's session is dropped,
//! and the load's own is opened anew). The streams' `LOAD DATA`s are only counted: the watch
//! (`watchdog.rs`) ends them at each give-up ([`Rt::give_ups`]), as it ends a LOAD whose
//! session has vanished, and ends their sessions once the server answers again.

use crate::conninfo::ConnInfo;
use sluice_core::destination::{DestinationError, ErrorKind};
use sluice_core::silence::{watch_over, Waiting, Waits};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// A wait given up because the server answered nothing for the bound.
#[derive(Debug)]
pub struct GaveUp;

const GAVE_UP: &str = "the server answers nothing: sluice gave the wait up as a lost connection";

impl From<GaveUp> for DestinationError {
    fn from(_: GaveUp) -> DestinationError {
        DestinationError::new(ErrorKind::Connection, GAVE_UP)
    }
}

impl From<GaveUp> for mysql_async::Error {
    fn from(_: GaveUp) -> mysql_async::Error {
        mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            GAVE_UP,
        )))
    }
}

impl From<GaveUp> for String {
    fn from(_: GaveUp) -> String {
        GAVE_UP.to_string()
    }
}

impl From<GaveUp> for crate::connect::ConnectError {
    fn from(_: GaveUp) -> crate::connect::ConnectError {
        crate::connect::ConnectError::Failed {
            target: "the server".to_string(),
            reason: "it answers nothing, and sluice gave the connection up".to_string(),
        }
    }
}

impl From<GaveUp> for crate::stream::StreamOpenError {
    fn from(g: GaveUp) -> crate::stream::StreamOpenError {
        crate::stream::StreamOpenError::Connect(g.into())
    }
}

impl From<GaveUp> for crate::stream::ServerError {
    fn from(_: GaveUp) -> crate::stream::ServerError {
        crate::stream::ServerError {
            code: 0,
            message: GAVE_UP.to_string(),
            record: None,
            column: None,
            lost: true,
            warning: false,
        }
    }
}

impl From<GaveUp> for crate::ledger::LedgerError {
    fn from(g: GaveUp) -> crate::ledger::LedgerError {
        crate::ledger::LedgerError::Db(g.into())
    }
}

impl From<GaveUp> for crate::catalog::CatalogError {
    fn from(g: GaveUp) -> crate::catalog::CatalogError {
        crate::catalog::CatalogError::Db(g.into())
    }
}

impl From<GaveUp> for crate::xa::FinishError {
    fn from(g: GaveUp) -> crate::xa::FinishError {
        crate::xa::FinishError::Db(g.into())
    }
}

/// The load's runtime, whose waits on the server are counted and given up with it.
pub struct Rt {
    rt: Runtime,
    silence: Silence,
}

impl Rt {
    /// `rt`, with a silence giving the server up after `info`'s `answer-timeout=`; the watcher
    /// asks `info`'s server, each look taking at most
    /// [`sluice_core::silence::answer_within`] of `first`, what the load's first connection
    /// took.
    pub fn new(
        rt: Runtime,
        info: &ConnInfo,
        first: Duration,
        warn: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Rt {
        let silence = Silence::new(info.answer_timeout, warn);
        let within = sluice_core::silence::answer_within(first);
        let asked = info.clone();
        let look = move || answers(asked.clone(), within);
        let _entered = rt.enter();
        tokio::spawn(watch_over(
            Arc::downgrade(&silence.waits),
            tokio::time::sleep,
            look,
        ));
        Rt { rt, silence }
    }

    /// Runs `f`, a wait on the server, to its end, or until the server is given up meanwhile
    /// (then [`GaveUp`], as a lost connection).
    pub fn block_on<T, E: From<GaveUp>>(
        &self,
        f: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.wait(self.cut(f, || Err(GaveUp.into())))
    }

    /// Runs `f` to its end, counted as a wait on the server (what ends it early is `f`'s own:
    /// [`Rt::cut`]).
    pub fn wait<F: Future>(&self, f: F) -> F::Output {
        let _waiting = self.silence.waiting();
        self.rt.block_on(f)
    }

    /// `f`, or `cut` when the server is given up after this call.
    pub fn cut<'a, F: Future + 'a>(
        &'a self,
        f: F,
        cut: impl FnOnce() -> F::Output + 'a,
    ) -> impl Future<Output = F::Output> + 'a {
        let generation = self.generation();
        async move {
            tokio::select! {
                // An answer that came is taken, whatever the give-up.
                biased;
                done = f => done,
                _ = self.silence.given_up_after(generation) => cut(),
            }
        }
    }

    /// How many times the server has been given up so far.
    pub fn generation(&self) -> u64 {
        self.silence.generation()
    }

    /// The give-ups as they come, for the watch, which ends the streams' LOADs at each.
    pub fn give_ups(&self) -> watch::Receiver<u64> {
        self.silence.given_up.subscribe()
    }

    /// The runtime itself, for what is not a wait on the server (or is bounded otherwise).
    pub fn raw(&self) -> &Runtime {
        &self.rt
    }
}

/// The load's waits on its server, and the give-ups so far.
struct Silence {
    waits: Arc<Waits>,
    given_up: watch::Sender<u64>,
}

impl Silence {
    fn new(bound: Option<Duration>, warn: Arc<dyn Fn(String) + Send + Sync>) -> Silence {
        let given_up = watch::channel(0).0;
        let give_ups = given_up.clone();
        let give_up = Box::new(move || give_ups.send_modify(|g| *g += 1));
        let setting = "answer-timeout= in the target";
        Silence {
            waits: Arc::new(Waits::new(bound, setting, warn, give_up)),
            given_up,
        }
    }

    fn waiting(&self) -> Waiting<'_> {
        self.waits.waiting()
    }

    fn generation(&self) -> u64 {
        *self.given_up.borrow()
    }

    /// Resolves once the server has been given up after `generation`.
    async fn given_up_after(&self, generation: u64) {
        let mut rx = self.given_up.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = rx.wait_for(|g| *g > generation).await;
    }
}

/// Whether the server answers a new connection `within`. A refusal (too many connections, a
/// password refused, a port closed by a restart) is an answer: only silence is not.
async fn answers(info: ConnInfo, within: Duration) -> bool {
    match tokio::time::timeout(within, crate::connect::connect(&info)).await {
        Ok(Ok(c)) => {
            // Closed on the runtime, not waited for: the look is done.
            tokio::spawn(c.disconnect());
            true
        }
        Ok(Err(crate::connect::ConnectError::Failed { .. })) => true,
        Ok(Err(crate::connect::ConnectError::Timeout { .. })) | Err(_) => false,
    }
}
