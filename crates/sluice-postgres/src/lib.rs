//! sluice's PostgreSQL destination.
//!
//! Everything that knows PostgreSQL's protocol and catalog lives here, so a MySQL destination
//! can sit beside it with the same shape:
//!
//! - [`admin`]: a blocking connection for the SQL commands run outside a load;
//! - [`conninfo`]: libpq connection conventions (URI, key=value, `PG*` variables, `.pgpass`);
//! - [`connect`]: opening connections with `sslmode` semantics;
//! - [`network`]: the path's round trip, the kernel's socket buffer limits, and sizing a
//!   stream's buffer (or the number of streams) to the bandwidth-delay product;
//! - [`catalog`]: the target table's columns and the session settings conversion depends on;
//! - [`destination`]: PostgreSQL behind the engine's one interface (streams, watch, framing);
//! - [`ledger`]: the resume ledger's tables in the target database (`sluice jobs`);
//! - [`types`]: PostgreSQL's type rules and binary COPY encoding, on the client;
//! - [`stage`]: staging tables switched into partitions, and the one publish;
//! - [`stream`]: one connection's transaction of COPYs, committed only when the caller says so;
//! - [`oracle`]: asking the server to convert a value sluice cannot parse itself;
//! - [`watchdog`]: spotting two streams of one load waiting on each other;
//! - [`silence`]: a bound on a server that stops answering while the load waits on it;
//! - [`cluster`]: a private PostgreSQL cluster in a directory, for tests and `sluice demo`.

pub mod admin;
pub mod catalog;
pub mod cluster;
pub mod condition;
pub mod connect;
pub mod conninfo;
pub mod crew;
pub mod destination;
pub mod hash;
pub mod ledger;
pub mod network;
pub(crate) mod onetrip;
pub mod oracle;
pub mod probe;
pub mod readers;
pub mod silence;
pub mod stage;
pub mod stream;
pub mod types;
pub mod watchdog;
