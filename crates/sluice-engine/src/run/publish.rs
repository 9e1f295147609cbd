//! The last step of a run: every stream finished cleanly, and the strategy makes the load
//! visible. A strategy may load chunks inside its publish transaction (the stage strategy's
//! rows that could not be staged); it does so through [`load_in_publish`], which runs them as
//! the streams do and writes there the ledger rows of every staged chunk.

use super::copy::{run_chunk, ChunkError};
use super::{within_max_errors, ChunkStat, RunContext, StreamTiming};
use crate::failure::Failure;
use crate::strategy::Commit;
use sluice_core::destination::{Destination, DestinationStream};
use sluice_core::ledger::ChunkRecord;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Publishes the load through the strategy; returns the chunks loaded in the publish, which
/// the report counts with the first stream's, and the transactions prepared and left for a
/// crew's decision.
pub(super) fn publish<'d, D: Destination>(
    ctx: &RunContext<'d, D>,
    streams: Vec<D::Stream<'d>>,
) -> Result<(Vec<ChunkStat>, Vec<String>), Failure> {
    let mut late: Vec<ChunkStat> = Vec::new();
    let mut run = |s: &mut D::Stream<'d>, chunks: &[usize], records: Vec<ChunkRecord>| {
        load_in_publish(ctx, s, chunks, records, &mut late)
    };
    let commit = Commit {
        host: ctx.host,
        job: ctx.opts.job.as_ref().map(|j| j.job),
        prepare: ctx.opts.prepare.clone(),
        hand_over: ctx.opts.job.as_ref().is_some_and(|j| j.crew.is_some()),
        prepared: Default::default(),
    };
    let published = ctx.strategy.publish(ctx.dest, streams, &mut run, &commit);
    if let Err(e) = published {
        ctx.strategy.abandon(ctx.dest, &e, ctx.host);
        return Err(e);
    }
    Ok((late, commit.prepared.into_inner().unwrap_or_default()))
}

/// Loads `chunks` on the publish stream `s`, then writes in its transaction their ledger rows
/// and `records` (the staged chunks' the strategy publishes with them).
fn load_in_publish<'d, D: Destination>(
    ctx: &RunContext<'d, D>,
    s: &mut D::Stream<'d>,
    chunks: &[usize],
    mut records: Vec<ChunkRecord>,
    late: &mut Vec<ChunkStat>,
) -> Result<(), Failure> {
    let plan = ctx.plan;
    let mut encoders: Vec<Option<D::Encoder<'d>>> = (0..plan.tables.len()).map(|_| None).collect();
    for &c in chunks {
        let chunk = &plan.chunks[c];
        let t = plan.inputs[chunk.input].table;
        let encoder = encoders[t].get_or_insert_with(|| ctx.dest.encoder(t));
        let chunk_start = Instant::now();
        // The publish's chunks are timed apart from the streams': the report counts them with
        // the first stream's rows, not its time.
        let mut timing = StreamTiming::default();
        let counters = &ctx.counters[t];
        match run_chunk(
            ctx,
            chunk,
            Some(&mut *s),
            encoder,
            counters,
            None,
            true,
            &mut timing,
        ) {
            Ok(o) => {
                records.extend(ctx.ledger_row(chunk, o.records));
                late.push(ChunkStat::of(
                    plan,
                    chunk,
                    o,
                    chunk_start - ctx.started,
                    ctx.started.elapsed(),
                ));
                counters.chunks_done.fetch_add(1, Ordering::Relaxed);
            }
            Err(ChunkError::Destination(e)) => return Err(ctx.copy_error(0, chunk, e)),
            Err(ChunkError::Failed(f)) => return Err(f),
        }
    }
    let loaded: u64 = late.iter().map(|c| c.rows).sum::<u64>() + ctx.loaded_by_streams();
    within_max_errors(ctx.opts, loaded)?;
    // These chunks' ledger rows, and those the strategy gave, commit with the publish.
    if let Some(job) = &ctx.opts.job {
        s.record_chunks(job.job, &records).map_err(|e| {
            super::destination_failure(&e, format!("recording the publish in the ledger: {e}"))
        })?;
    }
    Ok(())
}
