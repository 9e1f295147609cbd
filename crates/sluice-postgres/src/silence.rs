//! A bound on a server that stops answering, for PostgreSQL loads: the waits counted, the
//! looks taken, the connections ended ([`sluice_core::silence`] keeps the clock and says why).
//!
//! Every wait of the load on its server goes through [`Silence::waiting`]; a watcher on the
//! load's runtime asks the server for the first byte of a new connection when a look is due.
//! When the server is given up (after the target's `tcp_user_timeout`, two minutes by
//! default), every connection of the load is ended through [`Ends`], which
//! [`crate::conninfo::ConnInfo`] carries to every connection the load opens: a connection's
//! task ends, and an attempt to connect is cut off, when the server is given up after they
//! began. Each wait then fails as a lost connection.

use crate::conninfo::{ConnInfo, HostSpec};
use sluice_core::silence::{watch_over, Waiting, Waits};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long the server may answer nothing before a load gives it up: the target's
/// `tcp_user_timeout`, the bound it sets on data the server's kernel never acknowledges, also
/// bounds a server whose kernel acknowledges while it answers nothing; 0 (the system's) sets
/// none.
pub fn bound(target: &ConnInfo) -> Option<Duration> {
    let ms = target.liveness.tcp_user_timeout_ms;
    (ms > 0).then(|| Duration::from_millis(ms))
}

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
                biased;
                _ = task => {}
                _ = ends.after(generation) => {}
            }
        }
    }

    /// `attempt` (a connection's startup), or `cut` when the server is given up after this
    /// call (not after the first poll: an attempt spawned to run later is still cut).
    pub fn cut<T>(
        &self,
        attempt: impl Future<Output = T>,
        cut: impl FnOnce() -> T,
    ) -> impl Future<Output = T> {
        let (ends, generation) = (self.clone(), self.now());
        async move {
            tokio::select! {
                biased;
                done = attempt => done,
                _ = ends.after(generation) => cut(),
            }
        }
    }
}

/// The load's waits on its server, and what ends its connections.
pub struct Silence {
    waits: Arc<Waits>,
    ended: watch::Sender<u64>,
}

impl Silence {
    /// A silence of no wait yet, giving the server up after `bound` (never for `None`); its
    /// watcher starts with [`Silence::watch`].
    pub fn new(bound: Option<Duration>, warn: Arc<dyn Fn(String) + Send + Sync>) -> Arc<Silence> {
        let ended = watch::channel(0).0;
        let ends = ended.clone();
        let give_up = Box::new(move || ends.send_modify(|g| *g += 1));
        let setting = "tcp_user_timeout (milliseconds) in the target";
        Arc::new(Silence {
            waits: Arc::new(Waits::new(bound, setting, warn, give_up)),
            ended,
        })
    }

    /// Starts the watcher, on the current runtime: it asks the server of `info` (the host the
    /// load pinned) while waits last, for as long as the silence lives; each look may take
    /// [`sluice_core::silence::answer_within`] of `first`, what the load's first connection
    /// took.
    pub fn watch(&self, info: &ConnInfo, first: Duration) {
        let within = sluice_core::silence::answer_within(first);
        let host = info.hosts.first().cloned();
        let look = move || answers(host.clone(), within);
        tokio::spawn(watch_over(
            Arc::downgrade(&self.waits),
            tokio::time::sleep,
            look,
        ));
    }

    /// What the load's connections carry, to be ended when the server is given up.
    pub fn ends(&self) -> Ends {
        Ends(Some(self.ended.subscribe()))
    }

    /// Counts a wait on the server from now until the value is dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        self.waits.waiting()
    }

    /// Whether the silence under way was told to the user.
    pub fn told(&self) -> bool {
        self.waits.silence_told()
    }
}

/// Whether the server answers a look `within`: its first byte on a new connection, the answer
/// to an `SSLRequest`, which the server gives before any authentication (a slow one, a
/// password it would refuse) and before a pooler queues the session. A refusal (a port closed
/// by a restart, a connection reset) is an answer too: only silence is not.
async fn answers(host: Option<HostSpec>, within: Duration) -> bool {
    match host {
        Some(h) => tokio::time::timeout(within, first_byte(&h)).await.is_ok(),
        None => true,
    }
}

/// The server's first byte on a new connection to `h`, asked with an `SSLRequest`.
async fn first_byte(h: &HostSpec) -> std::io::Result<u8> {
    // Length 8, then the request code 80877103.
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    if h.is_unix_socket() {
        let path = format!("{}/.s.PGSQL.{}", h.host, h.port);
        return ask(tokio::net::UnixStream::connect(path).await?, &SSL_REQUEST).await;
    }
    let host = h.hostaddr.as_deref().unwrap_or(&h.host);
    ask(
        tokio::net::TcpStream::connect((host, h.port)).await?,
        &SSL_REQUEST,
    )
    .await
}

async fn ask(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    request: &[u8],
) -> std::io::Result<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request).await?;
    let mut byte = [0u8];
    stream.read_exact(&mut byte).await?;
    Ok(byte[0])
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
        // An attempt to connect made before the server is given up is cut off, even one not
        // polled yet.
        let attempt = ends.cut(std::future::pending::<u8>(), || 7);
        tx.send_modify(|g| *g += 1);
        assert_eq!(attempt.await, 7);
    }
}
