//! `sluice probe`'s measurements of a MariaDB server, with the protocol a load uses (`LOAD DATA
//! LOCAL INFILE` of text lines). Nothing it writes stays: its tables are `TEMPORARY`, gone
//! with their session even when sluice is killed, and its rows are rolled back.
//!
//! - **Round trip**: `SELECT 1`, the median of many.
//! - **Upload**: the probe's rows into a temporary MyISAM table that keeps one byte of each
//!   (the fields are read into variables): the network and the server's `LOAD DATA` parsing,
//!   almost without storage. MariaDB has no sink that stores nothing by default (`BLACKHOLE`
//!   is a plugin an administrator installs).
//! - **Store**: the same rows into a temporary InnoDB table of the rows' columns, in a
//!   transaction rolled back at the end. InnoDB writes no redo log for temporary tables, so
//!   this is an upper bound of what a real table takes.
//!
//! Each runs for a fixed time on 1..N streams started together; its first third is a warm-up
//! the rate leaves out (`sluice_core::probe::Meter`).

use crate::connect::connect;
use crate::conninfo::ConnInfo;
use crate::stream::{infile_channel, CANONICAL_FORMAT};
use bytes::Bytes;
use mysql_async::prelude::*;
use sluice_core::probe::{text_row, Meter, Rate, COLUMNS};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, Barrier};

/// Where a measurement's rows go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// A temporary MyISAM table keeping one byte per row: the path and the server's parsing.
    Upload,
    /// A temporary InnoDB table of the rows' columns, rolled back.
    Store,
}

/// How long past its own time a measurement may take (connecting, creating its table,
/// finishing) before it is given up.
pub const MEASURE_SLACK: Duration = Duration::from_secs(30);

/// The rows one `send` carries.
const ROWS_PER_SEND: u64 = 2_000;

/// A probe of one server, on a runtime of its own.
pub struct Probe {
    rt: Runtime,
    info: ConnInfo,
}

impl Probe {
    /// Checks that the server answers.
    pub fn connect(info: &ConnInfo) -> Result<Probe, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let conn = rt.block_on(connect(info)).map_err(|e| e.to_string())?;
        rt.block_on(conn.disconnect()).map_err(|e| e.to_string())?;
        Ok(Probe {
            rt,
            info: info.clone(),
        })
    }

    /// The median of `n` round trips of `SELECT 1`.
    pub fn round_trip(&self, n: usize) -> Result<Duration, String> {
        self.rt.block_on(async {
            let mut conn = connect(&self.info).await.map_err(|e| e.to_string())?;
            let mut times = Vec::with_capacity(n);
            for _ in 0..n.max(1) {
                let t = Instant::now();
                conn.query_drop("SELECT 1")
                    .await
                    .map_err(|e| e.to_string())?;
                times.push(t.elapsed());
            }
            let _ = conn.disconnect().await;
            times.sort();
            Ok(times[times.len() / 2])
        })
    }

    /// `streams` streams sending the probe's rows into `sink` for `seconds`, started together:
    /// the bytes and rows of all, over the slowest one's time.
    pub fn measure(&self, sink: Sink, streams: usize, seconds: f64) -> Result<Rate, String> {
        let info = self.info.clone();
        let bound = Duration::from_secs_f64(seconds) + MEASURE_SLACK;
        let all = async move {
            let barrier = Arc::new(Barrier::new(streams));
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..streams {
                let (info, barrier) = (info.clone(), barrier.clone());
                tasks.spawn(async move { one_stream(&info, n, sink, seconds, &barrier).await });
            }
            let mut total = Rate::default();
            while let Some(joined) = tasks.join_next().await {
                let r = joined.map_err(|e| format!("a probe stream failed: {e}"))??;
                total.add(r);
            }
            Ok(total)
        };
        self.rt
            .block_on(async move { tokio::time::timeout(bound, all).await })
            .unwrap_or_else(|_| {
                Err(format!(
                    "the measurement did not end within {:.0} s",
                    bound.as_secs_f64()
                ))
            })
    }
}

/// The table a stream's sink is, created in its session, and the `LOAD DATA` into it.
fn sink_statements(sink: Sink, n: usize) -> (String, String) {
    let table = format!("sluice_probe_{}_{n}", std::process::id());
    match sink {
        Sink::Upload => (
            format!("CREATE TEMPORARY TABLE {table} (x tinyint) ENGINE=MyISAM"),
            format!(
                "LOAD DATA LOCAL INFILE 'sluice-probe' INTO TABLE {table} {CANONICAL_FORMAT} \
                 (@k, @p, @q, @price, @d, @flag, @comment) SET x = 0"
            ),
        ),
        Sink::Store => (
            format!("CREATE TEMPORARY TABLE {table} ({COLUMNS}) ENGINE=InnoDB"),
            format!("LOAD DATA LOCAL INFILE 'sluice-probe' INTO TABLE {table} {CANONICAL_FORMAT}"),
        ),
    }
}

/// One stream of a measurement: what it sent, from the barrier to the end of its LOAD.
async fn one_stream(
    info: &ConnInfo,
    n: usize,
    sink: Sink,
    seconds: f64,
    barrier: &Barrier,
) -> Result<Rate, String> {
    let err = |e: mysql_async::Error| e.to_string();
    let mut conn = connect(info).await.map_err(|e| e.to_string())?;
    let (create, load) = sink_statements(sink, n);
    conn.query_drop(create).await.map_err(err)?;
    conn.query_drop("START TRANSACTION").await.map_err(err)?;
    let tx = infile_channel(&mut conn);
    barrier.wait().await;
    let statement = tokio::spawn(async move {
        let r = conn.query_drop(load).await;
        (conn, r)
    });
    let (meter, bytes, rows) = send_rows(&tx, seconds).await;
    drop(tx);
    let (mut conn, loaded) = statement
        .await
        .map_err(|e| format!("the probe's LOAD failed: {e}"))?;
    loaded.map_err(err)?;
    // Up to the statement's end: the rows still in flight count in the time too.
    let rate = meter.rate(bytes, rows);
    let _ = conn.query_drop("ROLLBACK").await;
    let _ = conn.disconnect().await;
    Ok(rate)
}

/// Sends the probe's rows for `seconds` (the server ending the statement early stops it):
/// the clock, and the bytes and rows sent.
async fn send_rows(tx: &mpsc::Sender<std::io::Result<Bytes>>, seconds: f64) -> (Meter, u64, u64) {
    let mut meter = Meter::start(seconds);
    let (mut bytes, mut rows) = (0u64, 0u64);
    while meter.running() {
        let mut buf = Vec::with_capacity(ROWS_PER_SEND as usize * 110);
        for i in rows..rows + ROWS_PER_SEND {
            text_row(i, &mut buf);
        }
        bytes += buf.len() as u64;
        rows += ROWS_PER_SEND;
        if tx.send(Ok(Bytes::from(buf))).await.is_err() {
            break;
        }
        meter.tick(bytes, rows);
    }
    (meter, bytes, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upload_sink_keeps_a_byte_and_the_store_the_rows() {
        let (create, load) = sink_statements(Sink::Upload, 1);
        assert!(create.starts_with("CREATE TEMPORARY TABLE") && create.contains("MyISAM"));
        assert!(load.contains("(@k, @p, @q, @price, @d, @flag, @comment) SET x = 0"));
        let (create, load) = sink_statements(Sink::Store, 1);
        assert!(create.contains("comment varchar(44)) ENGINE=InnoDB"));
        assert!(!load.contains("SET x"));
    }
}
