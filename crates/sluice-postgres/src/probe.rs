//! `sluice probe`'s measurements of a PostgreSQL server: the preflight the record's team ran
//! with NTttcp, done with the database's own protocol. Nothing it does stays behind: every
//! table it writes is created inside a transaction that is rolled back.
//!
//! - **Round trip**: `SELECT 1`, the median of many.
//! - **Upload**: binary tuples through the COPY protocol into a sink that stores nothing
//!   (`COPY ... (FORMAT binary) WHERE false`, into a table created inside a rolled-back
//!   transaction): the network and the server's COPY input, without storage (binary, so that
//!   text parsing does not stand in for the network). A quick check found this the cheapest sink; a
//!   trigger that drops rows would measure PL/pgSQL instead.
//! - **Store**: rows stored into a table created inside a rolled-back transaction (never a
//!   user's table: no dead rows left, no triggers fired), in text and in binary: what the
//!   server can write. And the same rows made by the server itself (`INSERT ... SELECT`),
//!   which no network stands in front of: what `--wire auto` compares the path with.
//!
//! Each runs for a fixed time on 1..N streams at once, started together, so that a
//! measurement is bounded whatever the server's speed. Its first third is a warm-up that the
//! rate leaves out: across a long round trip, TCP's slow start and the socket buffer filling
//! would otherwise stand in for the path (the caller makes the time a few dozen round trips).

use crate::admin::AdminError;
use crate::catalog::quote_ident;
use crate::connect::connect;
use crate::conninfo::ConnInfo;
use crate::types::binary::{begin_tuple, FieldWriter, HEADER, TRAILER};
use crate::types::column::PgType;
use crate::types::convert::encode_value;
use crate::types::datetime::SessionZone;
use bytes::Bytes;
use futures_util::SinkExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::Barrier;

/// An error the server or the connection returned.
pub type DbError = tokio_postgres::Error;

pub use sluice_core::probe::Rate;
use sluice_core::probe::{text_row, Meter, COLUMNS};

/// What a measurement sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// `COPY ... WHERE false`: binary tuples read, stored nowhere.
    Nothing,
    /// Stored, from text rows.
    Text,
    /// Stored, from binary tuples.
    Binary,
    /// Stored, made by the server itself (`INSERT ... SELECT` of the same rows): what it can
    /// store with no network in the way. Counted as the rows' binary tuples' bytes.
    Generated,
}

/// The probe's rows as the server makes them: `text_row`'s values, from `generate_series`.
const GENERATED: &str = "SELECT g, g * 7 % 200000, (g % 50 + 1)::numeric, \
                         ((900 + g % 100000) || '.' || lpad((g % 100)::text, 2, '0'))::numeric, \
                         make_date(1992 + (g % 7)::int, 1 + (g % 9)::int, 10 + (g % 10)::int), \
                         (ARRAY['N','A','R'])[1 + g % 3], \
                         'carefully final deposits detect slyly agai' \
                         FROM generate_series($1::bigint, $2::bigint) g";

/// Rows one generated insert makes.
const GENERATED_BATCH: i64 = 20_000;

/// The same row as a binary COPY tuple.
fn binary_row(i: u64, text: &mut Vec<u8>, scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
    let types = [
        PgType::Int8,
        PgType::Int8,
        PgType::Numeric(Some((15, 2))),
        PgType::Numeric(Some((15, 2))),
        PgType::Date,
        PgType::Char(Some(1)),
        PgType::Varchar(Some(44)),
    ];
    text.clear();
    text_row(i, text);
    let line = &text[..text.len() - 1];
    begin_tuple(out, types.len());
    let zone = SessionZone::from_setting("UTC");
    for (ty, value) in types.iter().zip(line.split(|&b| b == b'\t')) {
        let field = FieldWriter::begin(out);
        // The probe's own values always convert.
        let _ = encode_value(ty, &zone, value, scratch, out);
        field.finish(out);
    }
}

/// A connection pool's worth of measurements on one server.
pub struct Probe {
    rt: Runtime,
    info: ConnInfo,
}

impl Probe {
    /// A probe of `info`'s server, connected once now so that a bad target fails here with
    /// the usual message.
    pub fn connect(info: &ConnInfo) -> Result<Probe, AdminError> {
        let probe = Probe::of(info)?;
        probe.rt.block_on(connect(info))?;
        Ok(probe)
    }

    /// A probe of a server already reached (a load's): its measurements connect for
    /// themselves, and a connection made only to check the target would cost a handshake.
    pub fn of(info: &ConnInfo) -> Result<Probe, AdminError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(AdminError::Runtime)?;
        Ok(Probe {
            rt,
            info: info.clone(),
        })
    }

    /// The median time of `n` round trips (`SELECT 1`).
    pub fn round_trip(&self, n: usize) -> Result<Duration, AdminError> {
        self.rt.block_on(async {
            let client = connect(&self.info).await?;
            let mut times = Vec::with_capacity(n);
            for _ in 0..n.max(1) {
                let t = Instant::now();
                client
                    .simple_query("SELECT 1")
                    .await
                    .map_err(|e| AdminError::Server(e.to_string()))?;
                times.push(t.elapsed());
            }
            times.sort();
            Ok(times[times.len() / 2])
        })
    }

    /// Sends rows into `sink` on `streams` connections at once for about `seconds`, or until
    /// the path has carried `budget` bytes of theirs in all (the server acknowledged them),
    /// whichever comes first; returns the aggregate. The first stream to fail stops the
    /// others (they would wait for it at the start for ever), and the whole is bounded by
    /// [`MEASURE_SLACK`] past `seconds`.
    pub fn measure(
        &self,
        sink: Sink,
        streams: usize,
        seconds: f64,
        budget: Option<u64>,
    ) -> Result<Rate, AdminError> {
        let info = self.info.clone();
        let budget = budget.map(|limit| {
            Arc::new(Budget {
                limit,
                carried: AtomicU64::new(0),
            })
        });
        let bound = Duration::from_secs_f64(seconds) + MEASURE_SLACK;
        let all = async move {
            // Every stream connects and creates its table first; then all start together.
            let barrier = Arc::new(Barrier::new(streams));
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..streams {
                let (info, barrier) = (info.clone(), barrier.clone());
                let stop = Stop {
                    seconds,
                    budget: budget.clone(),
                };
                tasks.spawn(async move { one_stream(&info, n, sink, stop, &barrier).await });
            }
            // The streams start together (the barrier): the slowest one's time is the span.
            let mut total = Rate::default();
            while let Some(joined) = tasks.join_next().await {
                let r = joined
                    .map_err(|e| AdminError::Server(format!("a probe stream failed: {e}")))??;
                total.add(r);
            }
            Ok(total)
        };
        let measured = self
            .rt
            .block_on(async move { tokio::time::timeout(bound, all).await });
        measured.unwrap_or_else(|_| {
            Err(AdminError::Server(format!(
                "the measurement did not end within {:.0} s",
                bound.as_secs_f64()
            )))
        })
    }
}

/// How long past its own time a measurement may take (connecting, creating its table,
/// finishing) before it is given up.
pub const MEASURE_SLACK: Duration = Duration::from_secs(30);

/// Inserts the server's own rows in batches for `seconds` from the barrier, each row counted
/// as `tuple` bytes.
async fn generated(
    client: &tokio_postgres::Client,
    insert: &str,
    tuple: u64,
    seconds: f64,
    barrier: &Barrier,
) -> Result<Rate, DbError> {
    let statement = client.prepare(insert).await?;
    barrier.wait().await;
    let mut meter = Meter::start(seconds);
    let (mut rows, mut next) = (0u64, 1i64);
    while meter.running() {
        let last = next + GENERATED_BATCH - 1;
        rows += client.execute(&statement, &[&next, &last]).await?;
        next = last + 1;
        meter.tick(rows * tuple, rows);
    }
    Ok(meter.rate(rows * tuple, rows))
}

/// When one stream of a measurement stops: after `seconds`, or once the path carried the
/// budget's bytes of all the streams'.
#[derive(Clone)]
struct Stop {
    seconds: f64,
    budget: Option<Arc<Budget>>,
}

/// A measurement's byte budget, shared by its streams: what the path carried of all of theirs.
struct Budget {
    limit: u64,
    carried: AtomicU64,
}

/// One stream of a measurement: what it sent, from the barrier to the end of its COPY.
async fn one_stream(
    info: &ConnInfo,
    n: usize,
    sink: Sink,
    stop: Stop,
    barrier: &Barrier,
) -> Result<Rate, AdminError> {
    let seconds = stop.seconds;
    let server = |e: DbError| AdminError::Server(crate::connect::chain(&e));
    let connected = crate::connect::connect_host(info).await?;
    let (client, socket) = (connected.client, connected.socket);
    let table = quote_ident(&format!("sluice_probe_{}_{n}", std::process::id()));
    // A table of the session's own schema would be simplest, but the role may not create
    // there; pg_temp is always allowed, and logs and stores like a table. An unlogged or temp
    // table would flatter the server, so a regular table is tried first. The transaction
    // begins in the same round trip: a refused CREATE leaves it open, at the savepoint.
    let created = client
        .batch_execute(&format!(
            "BEGIN; SAVEPOINT s; CREATE TABLE {table} ({COLUMNS})"
        ))
        .await;
    let relation = match created {
        Ok(()) => table.clone(),
        Err(_) => {
            client
                .batch_execute(&format!(
                    "ROLLBACK TO SAVEPOINT s; CREATE TEMP TABLE {table} ({COLUMNS})"
                ))
                .await
                .map_err(server)?;
            format!("pg_temp.{table}")
        }
    };
    let sql = match sink {
        Sink::Nothing => format!("COPY {relation} FROM STDIN (FORMAT binary) WHERE false"),
        Sink::Text => format!("COPY {relation} FROM STDIN"),
        Sink::Binary | Sink::Generated => {
            format!("COPY {relation} FROM STDIN (FORMAT binary)")
        }
    };
    // One message of 256 KiB, built before the clock starts and sent again and again, so
    // that the client's cost is nil and the measurement is the path's and the server's.
    let (mut msg, mut text, mut scratch) = (Vec::with_capacity(300 << 10), Vec::new(), Vec::new());
    let mut per_message = 0u64;
    while msg.len() < 256 << 10 {
        let i = ((n as u64) << 32) + per_message;
        match sink {
            Sink::Text => text_row(i, &mut msg),
            _ => binary_row(i, &mut text, &mut scratch, &mut msg),
        }
        per_message += 1;
    }
    if sink == Sink::Generated {
        let tuple = msg.len() as u64 / per_message;
        let insert = format!("INSERT INTO {relation} {GENERATED}");
        let rate = generated(&client, &insert, tuple, seconds, barrier).await;
        client.batch_execute("ROLLBACK").await.map_err(server)?;
        return rate.map_err(server);
    }
    let msg = Bytes::from(msg);
    barrier.wait().await;
    let mut meter = Meter::start(seconds);
    let copy = client.copy_in::<_, Bytes>(&sql).await.map_err(server)?;
    let mut copy = Box::pin(copy);
    if sink != Sink::Text {
        copy.send(Bytes::from_static(HEADER))
            .await
            .map_err(server)?;
    }
    // The rate counts to the end of the COPY.
    let (mut rows, mut bytes) = (0u64, 0u64);
    // The bytes the server acknowledged since the start, where the kernel says (those sent
    // include what waits in the socket's buffer): the path carried them.
    let acked = || {
        socket
            .as_ref()
            .and_then(crate::network::transport)
            .map(|t| t.bytes_acked)
    };
    let base = acked().unwrap_or(0);
    let mut counted = 0u64;
    let mut within = |sent: u64| {
        let Some(budget) = &stop.budget else {
            return true;
        };
        let carried = acked().map_or(sent, |a| a.saturating_sub(base));
        budget
            .carried
            .fetch_add(carried.saturating_sub(counted), Ordering::Relaxed);
        counted = counted.max(carried);
        budget.carried.load(Ordering::Relaxed) < budget.limit
    };
    while meter.running() && within(bytes) {
        copy.send(msg.clone()).await.map_err(server)?;
        bytes += msg.len() as u64;
        rows += per_message;
        meter.tick(bytes, rows);
    }
    let spent = meter.running();
    if sink != Sink::Text {
        copy.send(Bytes::from_static(TRAILER))
            .await
            .map_err(server)?;
    }
    // The ROLLBACK goes out behind the COPY's end (the connection sends it after the COPY's
    // last message): one round trip for both. The rate is taken when the COPY has ended.
    let ended = async {
        copy.as_mut().finish().await?;
        Ok::<_, DbError>(meter.rate(bytes, rows))
    };
    let (ended, rolled_back) = futures_util::join!(ended, client.batch_execute("ROLLBACK"));
    let rate = ended.map_err(server)?;
    rolled_back.map_err(server)?;
    Ok(Rate { spent, ..rate })
}
