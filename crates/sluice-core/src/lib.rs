//! sluice's core: everything between raw bytes and PostgreSQL's binary COPY stream, and
//! nothing else.
//!
//! This crate knows no sockets, files, threads or async runtime. Callers hand it byte slices
//! and output buffers, as with `csv-core`, which keeps the hot path testable in isolation and
//! lets every destination, reader and scheduler share it:
//!
//! - [`dialect`]: the input formats (tbl, CSV, text) and their options;
//! - [`records`]: splitting bytes into records and fields with COPY's exact rules;
//! - [`tokens`]: finding delimiters 64 bytes at a time for the record splitter;
//! - [`boundary`]: where a big file may be cut into chunks for parallel streams;
//! - [`column`]: target column types as the catalog describes them;
//! - [`convert`], [`numeric`], [`datetime`]: typed conversion with PostgreSQL's input rules;
//! - [`binary`]: the binary COPY framing;
//! - [`destination`]: the interface between the load engine and a destination database;
//! - [`error`]: input errors that name file, line, byte offset, column, value and reason.

pub mod binary;
pub mod boundary;
pub mod column;
pub mod convert;
pub mod datetime;
pub mod destination;
pub mod dialect;
pub mod error;
pub mod numeric;
pub mod records;
pub mod tokens;
