//! MariaDB's input rules for each column type, checked on the client (`convert`, with
//! `ENUM`/`SET` lists in `members`; `YEAR`, `FLOAT`/`DOUBLE`, `TIME`, `TIMESTAMP`'s range and
//! `BIT` in `scalar`; `JSON`'s `json_valid` in `json`), and the column types as the catalog
//! spells them (`column`).
//!
//! The wire is a canonical text stream for `LOAD DATA LOCAL INFILE` (see [`convert`]'s module
//! doc): sluice validates what it can parse with the server's strict-mode rules and writes one
//! spelling the server cannot read two ways; what it cannot prove it passes on for the
//! server to convert, and the stream's warning trap turns any complaint into an error.

pub mod column;
pub mod convert;
pub mod json;
pub mod members;
pub mod scalar;
