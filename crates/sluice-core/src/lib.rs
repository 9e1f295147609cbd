//! sluice's core: everything between raw bytes and a destination's records that every
//! destination shares, and nothing of any one database.
//!
//! This crate opens no sockets or files, starts no threads and needs no async runtime (its one
//! async loop, [`silence::watch_over`], sleeps and looks with what its caller gives it).
//! Callers hand it byte slices and output buffers, as with `csv-core`, which keeps the hot
//! path testable in isolation and lets every destination, reader and scheduler share it:
//!
//! - [`dialect`]: the input formats (tbl, CSV, text) and their options;
//! - [`records`]: splitting bytes into records and fields with COPY's exact rules;
//! - [`swar`]: short fields read and checked a machine word at a time;
//! - [`tokens`]: finding delimiters 64 bytes at a time for the record splitter;
//! - [`boundary`]: where a big file may be cut into chunks for parallel streams;
//! - [`primitives`]: digits, integers, calendar dates and exact decimals, read fast and
//!   exactly, for every destination's converter;
//! - [`destination`]: the interface between the load engine and a destination database;
//! - [`ledger`]: the resume ledger's records (jobs, files, committed chunks);
//! - [`silence`]: the clock, the waits and the watcher's loop of a bound on a server that stops
//!   answering while a load waits;
//! - [`error`]: input errors that name file, line, byte offset, column, value and reason.
//!
//! Each destination's own rules (which spellings its server accepts, how it rounds, its wire
//! format) live in its crate: PostgreSQL's typed conversion and binary COPY encoding are in
//! `sluice-postgres::types`.

pub mod boundary;
pub mod destination;
pub mod dialect;
pub mod error;
pub mod ledger;
pub mod primitives;
pub mod probe;
pub mod records;
pub mod silence;
pub mod swar;
pub mod tokens;
