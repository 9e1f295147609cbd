//! MariaDB as a [`Staging`] destination: the engine's `stage` strategy, with each staging
//! table exchanged into its partition as a durable step of its own
//! ([`PublishModel::PerPartition`](sluice_core::destination::PublishModel)), since MariaDB's
//! DDL commits on its own. What each step does in SQL, and why it survives a kill, is in
//! `stage.rs`; this file keeps the load's side: which partitions the tables have, the
//! staging table each stream fills, and the finished ones waiting for the publish.
//!
//! A staging table is named for its job, and found again by it: the engine stages on MariaDB
//! only a load that keeps a ledger (a publish cut off between two exchanges is finished by the
//! next run of the same job, which needs the job).

use crate::destination::{MariaDbDestination, MariaDbStream};
use crate::stage::{self, PartitionDetail, Record, TablePartitions};
use sluice_core::destination::{
    DestinationError, ErrorKind, Leftover, Partitioning, PreparedStaging, PublishTimes, StageTimes,
    Staging,
};
use sluice_core::ledger::ChunkRecord;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The staging table a stream is filling.
pub(crate) struct InProgress {
    /// The load's table it stands in for a partition of.
    pub table: usize,
    pub staging: String,
    partition: PartitionDetail,
    /// The parent's secondary indexes, built after the rows.
    indexes: Vec<(String, String)>,
}

/// What staging keeps for the load.
pub struct StagingState {
    /// Each table's partitions, read once.
    partitions: Mutex<Vec<Option<TablePartitions>>>,
    /// The job the load's staging tables belong to.
    job: Mutex<Option<i64>>,
    /// This run's number in its staging tables' names (a rerun of the job must not reuse a
    /// leftover's name), and the next table's.
    run: u32,
    seq: AtomicU32,
    lock_wait: Mutex<Duration>,
    /// The leftovers offered to the engine, until it says which it keeps.
    offered: Mutex<Vec<Record>>,
    /// Finished staging tables, this run's and kept leftovers, waiting for the publish.
    finished: Mutex<Vec<Record>>,
    /// Parents that got a partition, for their statistics.
    parents: Mutex<Vec<String>>,
    /// Staging tables begun and not yet finished or abandoned: one whose stream lost its
    /// connection stays here, and is dropped after the publish (or by the next load).
    begun: Mutex<Vec<String>>,
}

impl Default for StagingState {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        StagingState {
            partitions: Mutex::new(Vec::new()),
            job: Mutex::new(None),
            run: nanos ^ std::process::id().rotate_left(16),
            seq: AtomicU32::new(0),
            lock_wait: Mutex::new(stage::DEFAULT_LOCK_WAIT),
            offered: Mutex::new(Vec::new()),
            finished: Mutex::new(Vec::new()),
            parents: Mutex::new(Vec::new()),
            begun: Mutex::new(Vec::new()),
        }
    }
}

impl StagingState {
    /// Forgets the partitions read for another set of tables.
    pub(crate) fn reset(&self, tables: usize) {
        *lock(&self.partitions) = vec![None; tables];
    }

    /// How long a staging step waits for a lock.
    pub(crate) fn lock_wait(&self) -> Duration {
        *lock(&self.lock_wait)
    }
}

fn not_staging(what: &str) -> DestinationError {
    DestinationError::new(
        ErrorKind::Other,
        format!("{what}: no staging table in progress"),
    )
}

impl MariaDbDestination {
    fn partition_detail(
        &self,
        table: usize,
        partition: usize,
    ) -> Option<(String, PartitionDetail)> {
        let parts = lock(&self.staging.partitions);
        let t = parts.get(table)?.as_ref()?;
        Some((t.column.clone(), t.details.get(partition)?.clone()))
    }

    /// Where leftover `r` stands in the load's tables: its table and partition, as they are
    /// now.
    fn place_of(&self, r: &Record) -> Option<(usize, usize)> {
        let t = self.tables.iter().position(|t| t.table.name == r.parent)?;
        self.partitioning(t).ok()?;
        let parts = lock(&self.staging.partitions);
        let p = parts[t]
            .as_ref()?
            .details
            .iter()
            .position(|d| d.name == r.part && d.description == r.bound)?;
        Some((t, p))
    }

    fn drop_staging(&self, names: &[String]) -> Result<(), DestinationError> {
        self.on_own(|rt, c| {
            for n in names {
                rt.block_on(stage::drop_staging(c, n))
                    .map_err(|e| self.db_error(e))?;
            }
            Ok(())
        })
    }

    /// `stream`'s connection, for a staging step's statements.
    fn stream_conn<'s>(
        &self,
        stream: &'s mut MariaDbStream<'_>,
    ) -> Result<&'s mut mysql_async::Conn, DestinationError> {
        let n = stream.n;
        stream
            .stream
            .connection()
            .map_err(|e| self.stream_error(n, e))
    }

    /// Notes that `parent` got rows from staging tables: its statistics are gathered after.
    fn note_parent(&self, parent: &str) {
        let parent = crate::catalog::quote_ident(parent);
        let mut parents = lock(&self.staging.parents);
        if !parents.contains(&parent) {
            parents.push(parent);
        }
    }
}

impl Staging for MariaDbDestination {
    fn set_lock_wait(&mut self, wait: Duration) {
        *lock(&self.staging.lock_wait) = wait;
    }

    fn prepare_staging(&self, job: Option<i64>) -> Result<PreparedStaging, DestinationError> {
        let found = self.on_own(|rt, c| {
            rt.block_on(stage::prepare(c, job))
                .map_err(|e| self.db_error(e))
        })?;
        *lock(&self.staging.job) = job;
        let mut prepared = PreparedStaging {
            dropped: found.dropped,
            waiting: found.waiting,
            leftovers: Vec::new(),
        };
        let mut unfit = Vec::new();
        for r in found.candidates {
            let Some((table, partition)) = self.place_of(&r) else {
                unfit.push((r.staging, "its partition is gone, or has other bounds"));
                continue;
            };
            let parent = r.parent.clone();
            let fits = self.on_own(|rt, c| {
                rt.block_on(stage::still_fits(c, &r.staging, &parent))
                    .map_err(|e| self.db_error(e))
            })?;
            if !fits {
                unfit.push((r.staging, "the table's columns or indexes changed since"));
                continue;
            }
            prepared.leftovers.push(Leftover {
                id: r.staging.clone(),
                table,
                partition,
                chunks: r.chunks.clone(),
            });
            lock(&self.staging.offered).push(r);
        }
        let names: Vec<String> = unfit.iter().map(|(n, _)| n.clone()).collect();
        self.drop_staging(&names)?;
        prepared.dropped.extend(
            unfit
                .into_iter()
                .map(|(n, why)| format!("{n} (this job's, but {why})")),
        );
        Ok(prepared)
    }

    fn reuse_staging(&self, keep: &[String]) -> Result<(), DestinationError> {
        let (kept, other): (Vec<Record>, Vec<Record>) =
            std::mem::take(&mut *lock(&self.staging.offered))
                .into_iter()
                .partition(|r| keep.contains(&r.staging));
        lock(&self.staging.finished).extend(kept);
        let names: Vec<String> = other.into_iter().map(|r| r.staging).collect();
        self.drop_staging(&names)
    }

    fn partitioning(&self, table: usize) -> Result<Partitioning, DestinationError> {
        if let Some(Some(p)) = lock(&self.staging.partitions).get(table) {
            return Ok(p.partitioning.clone());
        }
        let t = &self.tables[table].table;
        let (schema, name) = (t.schema.clone(), t.name.clone());
        let p = self.on_own(|rt, c| {
            rt.block_on(stage::describe_partitions(c, &schema, &name))
                .map_err(|e| self.db_error(e))
        })?;
        let partitioning = p.partitioning.clone();
        if let Some(slot) = lock(&self.staging.partitions).get_mut(table) {
            *slot = Some(p);
        }
        Ok(partitioning)
    }

    fn begin_stage(
        &self,
        stream: &mut MariaDbStream<'_>,
        table: usize,
        partition: usize,
    ) -> Result<(), DestinationError> {
        let (column, detail) = self
            .partition_detail(table, partition)
            .ok_or_else(|| not_staging("staging before asking for partitions"))?;
        let job = lock(&self.staging.job).ok_or_else(|| {
            DestinationError::new(
                ErrorKind::Usage,
                "staging on MariaDB needs the load's ledger (its job names the staging tables)",
            )
        })?;
        let seq = self.staging.seq.fetch_add(1, Ordering::Relaxed);
        let staging = stage::staging_name(job, self.staging.run, seq);
        let n = stream.n;
        self.rt
            .block_on(stream.stream.leave_transaction())
            .map_err(|e| self.stream_error(n, e))?;
        let parent = self.tables[table].table.qualified();
        let check = stage::bound_check(&column, &detail.range.bound);
        lock(&self.staging.begun).push(staging.clone());
        let wait = *lock(&self.staging.lock_wait);
        let conn = self.stream_conn(stream)?;
        let indexes = self
            .rt
            .block_on(stage::begin(conn, &parent, &staging, &check, wait))
            .map_err(|e| self.db_error(e))?;
        stream.stage = Some(InProgress {
            table,
            staging,
            partition: detail,
            indexes,
        });
        Ok(())
    }

    fn finish_stage(
        &self,
        stream: &mut MariaDbStream<'_>,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<StageTimes, DestinationError> {
        let staged = stream
            .stage
            .take()
            .ok_or_else(|| not_staging("finishing a staging table"))?;
        let record = Record {
            staging: staged.staging.clone(),
            job: job.or(*lock(&self.staging.job)).unwrap_or_default(),
            parent: self.tables[staged.table].table.name.clone(),
            part: staged.partition.name.clone(),
            bound: staged.partition.description.clone(),
            chunks: chunks.to_vec(),
            switching: false,
        };
        let conn = self.stream_conn(stream)?;
        let index = self
            .rt
            .block_on(stage::finish(conn, &record, &staged.indexes))
            .map_err(|e| self.db_error(e))?;
        lock(&self.staging.finished).push(record);
        lock(&self.staging.begun).retain(|b| *b != staged.staging);
        Ok(StageTimes {
            table: staged.staging,
            index,
            analyze: Duration::ZERO,
        })
    }

    fn abandon_stage(&self, stream: &mut MariaDbStream<'_>) -> Result<(), DestinationError> {
        let Some(staged) = stream.stage.take() else {
            return Ok(());
        };
        let conn = self.stream_conn(stream)?;
        self.rt
            .block_on(stage::abandon(conn, &staged.staging))
            .map_err(|e| self.db_error(e))?;
        lock(&self.staging.begun).retain(|b| *b != staged.staging);
        Ok(())
    }

    /// Warning 4025 names the CHECK a row failed: the staging table's own is the partition's
    /// bound.
    fn outside_partition(&self, e: &DestinationError) -> bool {
        e.message.contains(stage::BOUND_CHECK)
    }

    fn discard_staging(&self) -> Result<(), DestinationError> {
        let mut names: Vec<String> = std::mem::take(&mut *lock(&self.staging.finished))
            .into_iter()
            .map(|r| r.staging)
            .collect();
        names.append(&mut lock(&self.staging.begun));
        self.drop_staging(&names)
    }

    fn switch_one(
        &self,
        table: &str,
        job: Option<i64>,
        chunks: &[ChunkRecord],
    ) -> Result<PublishTimes, DestinationError> {
        let record = lock(&self.staging.finished)
            .iter()
            .find(|r| r.staging == table)
            .cloned()
            .ok_or_else(|| not_staging("publishing"))?;
        let record = Record {
            job: job.unwrap_or(record.job),
            chunks: chunks.to_vec(),
            ..record
        };
        let wait = *lock(&self.staging.lock_wait);
        let started = Instant::now();
        let done = self.on_own(|rt, c| {
            rt.block_on(stage::exchange(c, &record, wait))
                .map_err(|e| self.db_error(e))
        })?;
        lock(&self.staging.finished).retain(|r| r.staging != table);
        self.note_parent(&record.parent);
        Ok(PublishTimes {
            publish: started.elapsed(),
            analyze: Duration::ZERO,
            attempts: done.attempts,
            appended: match done.appended {
                true => vec![format!("{}.{}", record.parent, record.part)],
                false => Vec::new(),
            },
        })
    }

    /// Rows that could not be staged load in the publish: an exchange commits on its own, so
    /// every staging table's rows are appended instead, in `stream`'s transaction with them
    /// and with the removal of their records; the tables, unrecorded, are dropped after.
    fn switch_in(&self, stream: &mut MariaDbStream<'_>) -> Result<PublishTimes, DestinationError> {
        let records = lock(&self.staging.finished).clone();
        let started = Instant::now();
        let wait = *lock(&self.staging.lock_wait);
        let conn = self.stream_conn(stream)?;
        self.rt
            .block_on(stage::append_all(conn, &records, wait))
            .map_err(|e| self.db_error(e))?;
        let mut appended = Vec::new();
        for r in records {
            appended.push(format!("{}.{}", r.parent, r.part));
            self.note_parent(&r.parent);
            lock(&self.staging.begun).push(r.staging);
        }
        lock(&self.staging.finished).clear();
        Ok(PublishTimes {
            publish: started.elapsed(),
            analyze: Duration::ZERO,
            attempts: 1,
            appended,
        })
    }

    /// A table without secondary indexes loads directly under `auto`: measured at
    /// TPC-H SF1 (BENCHMARKS.md, "MariaDB: staged and exchanged, or direct"), staging it took
    /// 1.28x the time of a direct load, the exchanges' validation scans most of the
    /// difference; with secondary indexes, which staging builds after the rows, a direct load
    /// took 1.33x the time of a staged one.
    fn auto_loads_directly(&self, table: usize) -> Option<String> {
        let parts = lock(&self.staging.partitions);
        let t = parts.get(table)?.as_ref()?;
        (t.secondary_indexes == 0).then(|| {
            "it has no secondary index for a staged load to build after its rows, and on \
             MariaDB such a table measured faster loaded directly than staged and exchanged \
             (each EXCHANGE PARTITION reads the staging table to validate it); --strategy \
             stage stages it"
                .to_string()
        })
    }

    /// Also drops the staging tables whose stream lost its connection before finishing them
    /// (their rows were loaded again into another).
    fn gather_statistics(&self, _parallel: usize) -> Duration {
        let parents = std::mem::take(&mut *lock(&self.staging.parents));
        let orphans = std::mem::take(&mut *lock(&self.staging.begun));
        if let Err(e) = self.drop_staging(&orphans) {
            (self.warn)(format!(
                "could not drop the staging table(s) {} ({e}); the data is in. The next load \
                 of the same job drops them, or DROP TABLE them yourself",
                orphans.join(", ")
            ));
        }
        let started = Instant::now();
        let refused = self
            .on_own(|rt, c| {
                rt.block_on(stage::analyze(c, &parents))
                    .map_err(|e| self.db_error(e))
            })
            .unwrap_or_else(|e| vec![e.to_string()]);
        if !refused.is_empty() {
            (self.warn)(format!(
                "ANALYZE TABLE {} failed ({}); the data is in, but the optimizer's statistics \
                 are those from before the load until it is run again",
                parents.join(", "),
                refused.join("; ")
            ));
        }
        started.elapsed()
    }
}
