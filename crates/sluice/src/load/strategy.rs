//! How a load's rows reach their tables and become visible: the load-strategy seam.
//!
//! The engine runs the same loop for every strategy (streams take chunks from one queue,
//! convert and send them); a [`Strategy`] decides the rest, at five points:
//!
//! 1. `prepare`: before any stream opens (create staging tables, check partitions);
//! 2. `route`: the order in which chunks enter the queue (biggest first; a strategy that loads
//!    one partition per stream would group them);
//! 3. `after_chunk`: on the stream, after each chunk's COPY (a ledger row, committed with it);
//! 4. `build`: on each stream after its last chunk, before the barrier (deferred checks;
//!    indexes and ANALYZE on a staging table);
//! 5. `publish`: once every stream has finished cleanly, make the load visible (commit every
//!    stream; or swap the staging tables in, in one transaction).
//!
//! [`Direct`] is today's behaviour: straight into the target tables, committed back to back.
//! The seed paper's staging-and-switch design goes beside it as a second strategy.

use super::plan::{Chunk, Plan};
use crate::failure::Failure;
use sluice_core::destination::{Destination, DestinationError, DestinationStream};

/// A way of loading; see the module doc for when each step runs.
pub trait Strategy<D: Destination>: Sync {
    /// Its name, for the summary and the JSON report.
    fn name(&self) -> &'static str;

    /// Before any stream opens.
    fn prepare(&self, _plan: &Plan, _dest: &D) -> Result<(), Failure> {
        Ok(())
    }

    /// The chunks in the order the streams take them (indexes into `plan.chunks`).
    fn route(&self, plan: &Plan) -> Vec<usize> {
        (0..plan.chunks.len()).collect()
    }

    /// After a chunk's COPY, on the stream that ran it.
    fn after_chunk(&self, _stream: &mut D::Stream<'_>, _chunk: &Chunk) -> Result<(), Failure> {
        Ok(())
    }

    /// After a stream's last chunk, before the commit barrier.
    fn build(&self, stream: &mut D::Stream<'_>) -> Result<(), DestinationError> {
        stream.fire_deferred_checks()
    }

    /// Once every stream has finished cleanly: makes the load visible.
    fn publish(&self, streams: Vec<D::Stream<'_>>) -> Result<(), Failure>;
}

/// Straight into the target tables; every stream's transaction committed back to back once
/// all have finished. Its one window, a crash between the first and the last COMMIT, is
/// documented in the README.
pub struct Direct;

impl<D: Destination> Strategy<D> for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn publish(&self, streams: Vec<D::Stream<'_>>) -> Result<(), Failure> {
        // A Ctrl-C now waits for the last COMMIT rather than leave the load half committed.
        let phase = crate::signals::CommitPhase::begin();
        let total = streams.len();
        for (committed, s) in streams.into_iter().enumerate() {
            if let Err(e) = s.commit() {
                return Err(Failure::Server(format!(
                    "COMMIT failed on stream {} of {total} after {committed} committed: {e}. \
                     The committed streams' rows are visible; reload into empty tables.",
                    committed + 1
                )));
            }
        }
        if phase.deferred().is_some() {
            eprintln!("sluice: the interrupted load finished its commit: every row is committed");
        }
        Ok(())
    }
}
