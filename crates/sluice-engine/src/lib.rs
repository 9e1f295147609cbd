//! sluice's load engine, as a library: it plans a load, runs it on parallel streams, keeps
//! it exactly once through the target's ledger, and says what happened (the report's data and
//! the verdict). It knows no database: every database call goes through the destination
//! contract in `sluice_core::destination`, which each destination crate implements, and it
//! reports through events ([`events::Host`]) that its caller renders. It depends on no command
//! line, no database client and no async runtime (`tests/architecture.rs` holds that).
//!
//! The data path: a [`spec::LoadSpec`] -> [`load::load`] (describe the tables, [`plan::build`]
//! a checked plan, the ledger's decision in [`ledger::start`] (or, for a job several workers
//! load together, [`crew::join`]), a strategy) ->
//! [`run::execute`] (streams on threads: read, split, convert, send; the barrier; the
//! strategy's publish) -> [`report::Report`] with its [`verdict::Verdict`].

pub mod calibrate;
pub mod chunk;
pub mod conflict;
pub mod crew;
pub mod events;
pub mod failure;
pub mod ledger;
pub mod load;
pub mod plan;
pub mod rejects;
pub mod report;
pub mod route;
pub mod run;
pub mod source;
pub mod spec;
pub mod stage;
pub mod strategy;
pub mod units;
pub mod verdict;
pub mod wire;

pub use events::{Event, Host};
pub use failure::{Failure, ServerKind};
pub use spec::LoadSpec;
