//! sluice's MariaDB (and MySQL) destination.
//!
//! Everything that knows MariaDB's protocol and catalog lives here, in the same shape as the
//! PostgreSQL destination, so that whoever has read one knows where everything of the other is:
//!
//! - [`admin`]: a command's own statements outside a load (`ddl tpch --create`);
//! - [`conninfo`]: the client's conventions (`mariadb://` URI, `~/.my.cnf`, `MYSQL_*`);
//! - [`connect`]: opening connections, every wait bounded;
//! - [`catalog`]: tables and columns from `information_schema`, a table's identity;
//! - [`destination`]: MariaDB behind the engine's one interface;
//! - [`stream`]: one connection's transaction of `LOAD DATA LOCAL` statements, and the
//!   warning trap;
//! - [`types`]: MariaDB's type rules on the client, and the canonical stream's encoding;
//! - [`condition`]: error codes to the engine's error kinds;
//! - [`ledger`]: the resume ledger's tables in the server (`sluice jobs`);
//! - [`probe`]: `sluice probe`'s round trip, upload and store rates;
//! - [`watchdog`]: spotting two streams of one load waiting on each other, and sampling what
//!   the streams' sessions do for the verdict;
//! - [`silence`]: every other wait on the server given up when it stops answering;
//! - [`xa`]: the streams' two-phase commit, as XA branches named for the load and database;
//! - [`cluster`]: a private MariaDB server in a directory, for tests.
//!
//! Not here yet (the README's "not on MariaDB yet"): jobs of several workers.

pub mod admin;
pub mod catalog;
pub mod cluster;
pub mod condition;
pub mod connect;
pub mod conninfo;
pub mod destination;
pub mod ledger;
pub mod probe;
pub mod readers;
pub mod silence;
pub mod stage;
mod staging;
pub mod stream;
pub mod types;
pub mod watchdog;
pub mod xa;
