//! PostgreSQL's types on the client: which spellings each type's input function accepts, how
//! it rounds, and the binary `send` form COPY takes, so that sluice converts exactly as the
//! server would, and frames the result as binary COPY.
//!
//! - [`column`]: column types as the catalog describes them;
//! - [`convert`]: one record's fields to one binary (or text) COPY tuple;
//! - [`numeric`], [`datetime`]: PostgreSQL's numeric (base 10000) and date/time (2000-01-01
//!   epoch) rules;
//! - [`binary`]: the binary COPY framing.

pub mod binary;
pub mod column;
pub mod convert;
pub mod datetime;
pub mod numeric;
