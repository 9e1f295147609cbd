//! The engine's own logic against an in-memory destination (`memory/`): all or nothing across
//! streams, the requeue after a lost connection, a transient abort retried, a server condition
//! never taken for a bad row, rejects isolation on the client and the server, resume after a
//! failed commit, both commit protocols (back to back, prepared with the decision in the
//! ledger), a stop at every fault point followed by the same load, and the rerun decisions
//! after a truncate and a rewrite. No server: milliseconds each. The real-server suites of the
//! `sluice` crate test the same behaviours through PostgreSQL.

mod memory;

use memory::{Faults, Memory, Store};
use sluice_core::destination::PublishModel;
use sluice_engine::events::{Event, Host};
use sluice_engine::failure::{Failure, ServerKind};
use sluice_engine::rejects::Threshold;
use sluice_engine::report::Report;
use sluice_engine::spec::{Jobs, LoadSpec, PrepareChoice};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rows `id,v` with `v` = `v<id>`, except the ids in `odd`, whose `v` is given.
fn csv(from: u32, to: u32, odd: &[(u32, &str)]) -> String {
    (from..to)
        .map(|i| {
            let v = odd
                .iter()
                .find(|(k, _)| *k == i)
                .map_or(format!("v{i}"), |(_, v)| v.to_string());
            format!("{i},{v}\n")
        })
        .collect()
}

/// A test's own directory of input files.
struct Inputs {
    dir: PathBuf,
}

impl Inputs {
    fn new(test: &str) -> Inputs {
        let dir = std::env::temp_dir().join(format!("sluice-engine-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Inputs { dir }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Inputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two files of 2,000 rows each into table `t`, cut into small chunks, two streams, no pause
/// before a reconnection.
fn spec(files: Vec<String>) -> LoadSpec {
    let mut s = LoadSpec::new(files);
    s.table = Some("t".into());
    s.jobs = Jobs::Fixed(2);
    s.chunk_size = Some(8 << 10);
    s.retry_pause = Duration::from_millis(1);
    s.prepare = PrepareChoice::Off;
    s
}

fn two_files(inputs: &Inputs, odd: &[(u32, &str)]) -> Vec<String> {
    vec![
        inputs.file("a.csv", &csv(0, 2000, odd)),
        inputs.file("b.csv", &csv(2000, 4000, odd)),
    ]
}

/// A host that keeps what it hears, and stops the "process" (a panic the test catches, which
/// drops every stream as a kill would) at the named point, or only looks there (as a pause
/// would).
#[derive(Default)]
struct Listener {
    heard: Mutex<Vec<String>>,
    stop_at: Option<&'static str>,
    look_at: Option<&'static str>,
    /// A point where the "process" lingers, as a slow disk would make it.
    linger_at: Option<(&'static str, Duration)>,
}

impl Host for Listener {
    fn event(&self, event: Event<'_>) {
        let line = match event {
            Event::Info(m) => format!("info: {m}"),
            Event::Notice(m) => format!("notice: {m}"),
            Event::Warning(m) => format!("warning: {m}"),
            Event::Point(p) if Some(p) == self.stop_at => panic!("stopped at {p}"),
            Event::Point(p) if Some(p) == self.look_at => format!("looked at {p}"),
            Event::Point(p) if self.linger_at.is_some_and(|(at, _)| at == p) => {
                std::thread::sleep(self.linger_at.map_or(Duration::ZERO, |(_, d)| d));
                format!("lingered at {p}")
            }
            _ => return,
        };
        self.heard.lock().unwrap().push(line);
    }

    fn stops_at(&self, point: &str) -> bool {
        [self.stop_at, self.look_at].contains(&Some(point))
    }
}

impl Listener {
    fn heard(&self, words: &str) -> bool {
        self.heard.lock().unwrap().iter().any(|l| l.contains(words))
    }
}

/// One "process": a connection to the store, a load, and what it said.
fn run(store: &Arc<Store>, spec: &LoadSpec, slots: u32) -> (Result<Report, Failure>, Listener) {
    let host = Listener::default();
    let result = run_with(store, spec, slots, &host);
    (result, host)
}

/// The same, heard by `host`.
fn run_with(
    store: &Arc<Store>,
    spec: &LoadSpec,
    slots: u32,
    host: &Listener,
) -> Result<Report, Failure> {
    let mut dest = Memory::connect(store);
    dest.prepare_slots = slots;
    sluice_engine::load::load(spec, &mut dest, host)
}

/// The same, stopped at `point`: whatever it left is what a kill leaves.
fn killed_at(store: &Arc<Store>, spec: &LoadSpec, slots: u32, point: &'static str) {
    let host = Listener {
        stop_at: Some(point),
        ..Listener::default()
    };
    let store = store.clone();
    let spec = spec.clone();
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut dest = Memory::connect(&store);
        dest.prepare_slots = slots;
        sluice_engine::load::load(&spec, &mut dest, &host)
    }));
    assert!(stopped.is_err(), "the load passed {point} without stopping");
}

fn table() -> Arc<Store> {
    let store = Store::new();
    store.create("t", &["id", "v"]);
    store
}

/// Every id of `from..to` exactly once.
fn exactly_once(store: &Store, from: u32, to: u32) {
    let mut ids: Vec<u32> = store
        .rows("t")
        .iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (from..to).collect::<Vec<_>>());
}

#[test]
fn a_refused_row_in_one_stream_leaves_nothing_of_any_stream() {
    let inputs = Inputs::new("all_or_nothing");
    let store = table();
    store.arm(Faults {
        refuse: Some("BAD".into()),
        ..Faults::default()
    });
    let files = two_files(&inputs, &[(3500, "BAD")]);
    let (result, _) = run(&store, &spec(files), 0);
    let Err(Failure::Input(e)) = result else {
        panic!("expected a bad row, got {result:?}")
    };
    assert!(e.file.ends_with("b.csv"), "{e}");
    assert_eq!(e.line, Some(1501), "{e}");
    assert_eq!(store.count("t"), 0);
}

/// A connection lost while the ledger is opened fails the load before any row: going on
/// without the ledger would leave the same command nothing to resume, and it would load every
/// row again. (A role that may not keep a ledger loads without one, and says so.)
#[test]
fn a_connection_lost_while_opening_the_ledger_loads_nothing_and_says_run_again() {
    let inputs = Inputs::new("ledger_lost");
    let store = table();
    store.arm(Faults {
        ledger_lost: true,
        ..Faults::default()
    });
    let files = two_files(&inputs, &[]);
    let (result, host) = run(&store, &spec(files.clone()), 0);
    let Err(f @ Failure::Server(_)) = result else {
        panic!("the load went on without its ledger, or failed otherwise: {result:?}")
    };
    let said = f.to_string();
    assert!(said.contains("opening the resume ledger"), "{said}");
    assert!(
        said.contains("Nothing was loaded: run the same command again"),
        "{said}"
    );
    assert!(!host.heard("keeps no resume ledger"));
    assert_eq!(store.count("t"), 0);
    store.arm(Faults::default());
    let (result, _) = run(&store, &spec(files), 0);
    result.unwrap();
    exactly_once(&store, 0, 4000);
}

#[test]
fn a_lost_connection_requeues_the_streams_work_and_loads_it_once() {
    let inputs = Inputs::new("lost");
    let store = table();
    store.arm(Faults {
        lose_at: Some(("v2500".into(), 2)),
        ..Faults::default()
    });
    let files = two_files(&inputs, &[]);
    let (result, host) = run(&store, &spec(files), 0);
    result.unwrap();
    let lost = host
        .heard
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("lost its connection"))
        .count();
    assert_eq!(lost, 2, "each loss is said");
    assert!(host.heard("retry 1 of 5"));
    exactly_once(&store, 0, 4000);
}

/// Where writers of a table contend, a stream takes a table no other stream loads first: the
/// queue counts who loads which table, and a lost connection puts its units back and its
/// table free. Every row of both tables still loads once.
#[test]
fn with_contended_tables_a_lost_connection_still_loads_every_row_once() {
    let inputs = Inputs::new("contend");
    let store = Store::new();
    store.create("a", &["id", "v"]);
    store.create("b", &["id", "v"]);
    store.arm(Faults {
        lose_at: Some(("v2500".into(), 2)),
        ..Faults::default()
    });
    let mut s = spec(two_files(&inputs, &[]));
    s.table = None;
    let host = Listener::default();
    let mut dest = Memory::connect(&store);
    dest.contend = true;
    sluice_engine::load::load(&s, &mut dest, &host).unwrap();
    assert!(host.heard("retry 1 of 5"));
    let ids = |t: &str| -> Vec<u32> {
        let mut ids: Vec<u32> = store
            .rows(t)
            .iter()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap())
            .collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids("a"), (0..2000).collect::<Vec<_>>());
    assert_eq!(ids("b"), (2000..4000).collect::<Vec<_>>());
}

#[test]
fn a_transient_abort_is_retried_and_past_the_retries_is_the_servers() {
    let inputs = Inputs::new("transient");
    let store = table();
    let files = two_files(&inputs, &[]);
    store.arm(Faults {
        abort_at: Some(("v100".into(), 1)),
        ..Faults::default()
    });
    let (result, host) = run(&store, &spec(files.clone()), 0);
    result.unwrap();
    assert!(host.heard("had its transaction aborted by the server"));
    exactly_once(&store, 0, 4000);
    // Past --retries: exit 5's kind, not a bad row.
    let store = table();
    store.arm(Faults {
        abort_at: Some(("v100".into(), 9)),
        ..Faults::default()
    });
    let mut s = spec(files);
    s.retries = 1;
    let (result, _) = run(&store, &s, 0);
    assert!(matches!(result, Err(Failure::Server(_))), "{result:?}");
    assert_eq!(store.count("t"), 0);
}

#[test]
fn a_server_condition_is_never_a_bad_row_nor_a_reject() {
    let inputs = Inputs::new("condition");
    let store = table();
    store.arm(Faults {
        full_at: Some("v3000".into()),
        ..Faults::default()
    });
    let mut s = spec(two_files(&inputs, &[]));
    s.max_errors = Some(Threshold::Share(0.1));
    let (result, _) = run(&store, &s, 0);
    match result {
        Err(Failure::Server(f)) => {
            assert_eq!(f.kind, ServerKind::Condition);
            assert!(f.message.contains("nothing was committed"), "{}", f.message);
        }
        other => panic!("expected the server's condition, got {other:?}"),
    }
    assert_eq!(store.count("t"), 0);
}

#[test]
fn isolation_rejects_exactly_the_refused_rows_on_client_and_server() {
    let inputs = Inputs::new("isolate");
    let store = table();
    store.arm(Faults {
        refuse: Some("BAD".into()),
        ..Faults::default()
    });
    let odd = [
        (10, "BAD"),
        (11, "BAD"),
        (1999, "CLIENT-BAD"),
        (2000, "BAD"),
        (3999, "BAD"),
    ];
    let mut s = spec(two_files(&inputs, &odd));
    s.max_errors = Some(Threshold::Count(5));
    let (result, _) = run(&store, &s, 0);
    let report = result.unwrap();
    let rejected = report.rejected.expect("rejects counted");
    assert_eq!(rejected.rows, 5);
    assert_eq!(rejected.by_cause.get("check_violation"), Some(&4));
    assert_eq!(rejected.by_cause.get("invalid_value"), Some(&1));
    let ids: Vec<String> = store
        .rows("t")
        .iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    assert_eq!(ids.len(), 3995);
    for (bad, _) in odd {
        assert!(!ids.contains(&bad.to_string()), "{bad} was loaded");
    }
    // One more than allowed: nothing at all.
    let store = table();
    store.arm(Faults {
        refuse: Some("BAD".into()),
        ..Faults::default()
    });
    s.max_errors = Some(Threshold::Count(4));
    s.restart = true;
    let (result, _) = run(&store, &s, 0);
    assert!(matches!(result, Err(Failure::Input(_))), "{result:?}");
    assert_eq!(store.count("t"), 0);
}

#[test]
fn a_commit_lost_between_streams_is_completed_by_the_same_load() {
    let inputs = Inputs::new("commit");
    let store = table();
    store.arm(Faults {
        fail_commit: Some(1),
        ..Faults::default()
    });
    let s = spec(two_files(&inputs, &[]));
    let (result, _) = run(&store, &s, 0);
    match result {
        Err(Failure::Server(f)) => assert_eq!(f.kind, ServerKind::Commit, "{}", f.message),
        other => panic!("expected a failed commit, got {other:?}"),
    }
    let first = store.count("t");
    assert!(first > 0 && first < 4000, "one stream committed: {first}");
    let (result, host) = run(&store, &s, 0);
    result.unwrap();
    assert!(host.heard("resuming job 1"));
    exactly_once(&store, 0, 4000);
}

#[test]
fn a_stop_at_any_point_then_the_same_load_is_exactly_once_both_commit_protocols() {
    for slots in [0, 8] {
        // (Points inside the streams' threads, "copied" among them, stop a thread, not the
        // process: the real-server kill test covers them.)
        for point in ["planned", "prepared", "decided", "commit", "finished"] {
            if slots == 0 && matches!(point, "prepared" | "decided") {
                continue;
            }
            let inputs = Inputs::new(&format!("kill_{slots}_{point}"));
            let store = table();
            let mut s = spec(two_files(&inputs, &[]));
            s.prepare = PrepareChoice::Auto;
            killed_at(&store, &s, slots, point);
            let (result, host) = run(&store, &s, slots);
            result.unwrap_or_else(|e| panic!("after a stop at {point} ({slots} slots): {e}"));
            if point == "planned" {
                // Direct streams commit at the end: the resume says nothing was kept, and why.
                assert!(host.heard("Nothing of the interrupted run was kept"));
            }
            exactly_once(&store, 0, 4000);
            assert_eq!(store.prepared(), 0, "{point}: nothing stays prepared");
            // And again: nothing more.
            let (result, host) = run(&store, &s, slots);
            result.unwrap();
            assert!(host.heard("nothing to load"), "{point}");
            exactly_once(&store, 0, 4000);
        }
    }
}

#[test]
fn a_decided_prepared_commit_is_finished_by_a_restart_and_by_forget() {
    let inputs = Inputs::new("settle");
    let store = table();
    let mut s = spec(two_files(&inputs, &[]));
    s.prepare = PrepareChoice::On;
    killed_at(&store, &s, 8, "commit");
    assert_eq!(store.prepared(), 1);
    let mut restart = s.clone();
    restart.restart = true;
    let (result, host) = run(&store, &restart, 8);
    result.unwrap();
    assert!(host.heard("as it had decided"));
    assert_eq!((store.count("t"), store.prepared()), (8000, 0));
    // Forgotten after a stop at the commit: the decided half commits, nothing stays prepared.
    let store = table();
    killed_at(&store, &s, 8, "commit");
    let dest = Memory::connect(&store);
    sluice_engine::ledger::forget(&dest, 1).unwrap();
    assert_eq!((store.count("t"), store.prepared()), (4000, 0));
    // Without slots, --prepare on is the user's mistake, said before anything loads.
    let store = table();
    let (result, _) = run(&store, &s, 0);
    assert!(matches!(result, Err(Failure::Usage(_))), "{result:?}");
}

/// The prepared streams commit together, one call (one round trip on a server), unless the
/// host stops between two commits: then the first commits alone, the point comes, and the rest.
#[test]
fn prepared_streams_commit_together_unless_the_host_stops_between_them() {
    let inputs = Inputs::new("together");
    let mut s = spec(two_files(&inputs, &[]));
    s.prepare = PrepareChoice::On;
    let store = table();
    run(&store, &s, 8).0.unwrap();
    assert_eq!(store.lock().commit_batches, [2]);
    exactly_once(&store, 0, 4000);
    let store = table();
    let host = Listener {
        look_at: Some("commit"),
        ..Listener::default()
    };
    run_with(&store, &s, 8, &host).unwrap();
    assert!(host.heard("looked at commit"));
    assert_eq!(store.lock().commit_batches, [1, 1]);
    exactly_once(&store, 0, 4000);
}

/// The second of the commits sent together is lost: the load fails naming that stream, with
/// the first's rows committed; the same command commits the rest, exactly once.
#[test]
fn a_commit_lost_inside_the_batch_is_named_and_completed_by_the_same_load() {
    let inputs = Inputs::new("batch_lost");
    let mut s = spec(two_files(&inputs, &[]));
    s.prepare = PrepareChoice::On;
    let store = table();
    store.arm(Faults {
        fail_prepared_commit: Some(1),
        ..Faults::default()
    });
    match run(&store, &s, 8).0 {
        Err(Failure::Server(f)) => {
            assert_eq!(f.kind, ServerKind::Lost, "{}", f.message);
            assert!(
                f.message.contains("committing prepared stream 2 of 2"),
                "{}",
                f.message
            );
        }
        other => panic!("expected a lost commit, got {other:?}"),
    }
    assert_eq!(store.lock().commit_batches, [2]);
    let first = store.count("t");
    assert!(first > 0 && first < 4000, "one stream committed: {first}");
    assert_eq!(store.prepared(), 1);
    let (result, host) = run(&store, &s, 8);
    result.unwrap();
    assert!(host.heard("as it had decided"), "{:?}", host.heard.lock());
    exactly_once(&store, 0, 4000);
    assert_eq!(store.prepared(), 0);
}

/// The decision to commit reached the ledger, but its answer was lost: the load reads it back
/// and commits, rather than roll back what the ledger says is committed.
#[test]
fn a_decision_whose_answer_was_lost_is_carried_out() {
    let inputs = Inputs::new("decision_lost");
    let store = table();
    store.arm(Faults {
        decision_answer_lost: true,
        ..Faults::default()
    });
    let mut s = spec(two_files(&inputs, &[]));
    s.prepare = PrepareChoice::On;
    let (result, _) = run(&store, &s, 8);
    result.unwrap();
    exactly_once(&store, 0, 4000);
    assert_eq!(store.prepared(), 0);
}

#[test]
fn a_rerun_reloads_a_truncated_table_and_skips_a_rewritten_one_saying_why() {
    let inputs = Inputs::new("rerun");
    let store = table();
    let s = spec(two_files(&inputs, &[]));
    run(&store, &s, 0).0.unwrap();
    store.truncate("t");
    let (result, host) = run(&store, &s, 0);
    result.unwrap();
    assert!(host.heard("t is empty, although job 1 loaded 4,000 rows"));
    exactly_once(&store, 0, 4000);
    store.rewrite("t");
    let (result, host) = run(&store, &s, 0);
    let report = result.unwrap();
    assert!(host.heard("notice: nothing to load"));
    assert!(host.heard("t was rewritten"));
    assert_eq!(report.skipped.len(), 2);
    exactly_once(&store, 0, 4000);
    // A table dropped and created again is new and empty: loaded again.
    store.create("t", &["id", "v"]);
    let (result, host) = run(&store, &s, 0);
    result.unwrap();
    assert!(host.heard("dropped and created again"));
    exactly_once(&store, 0, 4000);
}

/// Table `p`, partitioned by ranges of `id` into `p0`, `p1`, `p2` (2,000 keys each), and one
/// aligned file per partition.
fn partitioned(inputs: &Inputs) -> (Arc<Store>, LoadSpec) {
    let store = Store::new();
    store.create_partitioned(
        "p",
        &["id", "v"],
        &[("p0", 0, 2000), ("p1", 2000, 4000), ("p2", 4000, 6000)],
    );
    let files = (0..3)
        .map(|k| inputs.file(&format!("p{k}.csv"), &csv(k * 2000, (k + 1) * 2000, &[])))
        .collect();
    let mut s = spec(files);
    s.table = Some("p".into());
    s.strategy = sluice_engine::spec::StrategyChoice::Stage;
    (store, s)
}

/// A staged load into a destination publishing by `model`, stopped at `stop_at` if given
/// (then `None`).
fn staged(
    store: &Arc<Store>,
    spec: &LoadSpec,
    model: PublishModel,
    stop_at: Option<&'static str>,
) -> Option<(Result<Report, Failure>, Listener)> {
    let host = Listener {
        stop_at,
        ..Listener::default()
    };
    let (store, spec) = (store.clone(), spec.clone());
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut dest = Memory::connect(&store);
        dest.publish = model;
        let result = sluice_engine::load::load_staging(&spec, &mut dest, &host);
        (result, host)
    }))
    .ok()
}

/// Every key of `0..n` in `p`, once.
fn every_key_once(store: &Store, n: u32) {
    let mut ids: Vec<u32> = store
        .rows("p")
        .iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
}

#[test]
fn both_publish_models_publish_every_staged_row_once() {
    for model in [PublishModel::OneTransaction, PublishModel::PerPartition] {
        let inputs = Inputs::new(&format!("publish_{model:?}"));
        let (store, s) = partitioned(&inputs);
        let (result, host) = staged(&store, &s, model, None).unwrap();
        let report = result.unwrap();
        assert_eq!(report.strategy, "stage", "{model:?}");
        let said = match model {
            PublishModel::OneTransaction => "in one transaction",
            PublishModel::PerPartition => "one partition at a time",
        };
        assert!(host.heard(said), "{model:?}");
        every_key_once(&store, 6000);
        assert_eq!(store.staging_tables(), 0);
    }
}

#[test]
fn a_publish_in_one_transaction_stopped_inside_shows_nothing_and_the_rerun_reuses_the_tables() {
    let inputs = Inputs::new("publish_once_stopped");
    let (store, s) = partitioned(&inputs);
    let model = PublishModel::OneTransaction;
    assert!(staged(&store, &s, model, Some("publish")).is_none());
    assert_eq!(
        store.count("p"),
        0,
        "nothing visible before the publish commits"
    );
    assert_eq!(
        store.staging_tables(),
        3,
        "the finished staging tables wait for the job"
    );
    let (result, host) = staged(&store, &s, model, None).unwrap();
    result.unwrap();
    assert!(host.heard("they are published with this run's, not loaded again"));
    // The resume counts them as kept, not as work to do.
    assert!(host.heard("more (6,000 rows) in staging tables an earlier run finished"));
    assert!(host.heard(", 0 to go"));
    every_key_once(&store, 6000);
    assert_eq!(store.staging_tables(), 0);
}

#[test]
fn a_publish_per_partition_stopped_between_steps_is_finished_by_the_rerun() {
    let inputs = Inputs::new("publish_each_stopped");
    let (store, s) = partitioned(&inputs);
    let model = PublishModel::PerPartition;
    assert!(staged(&store, &s, model, Some("switched")).is_none());
    assert_eq!(store.count("p"), 2000, "one step took, and stays");
    assert_eq!(store.staging_tables(), 2);
    let (result, _) = staged(&store, &s, model, None).unwrap();
    result.unwrap();
    every_key_once(&store, 6000);
    assert_eq!(store.staging_tables(), 0);
}

/// A destination that publishes one partition at a time stages only a load with a ledger (the
/// next run of the job finishes a publish cut off halfway): without one, `auto` loads directly
/// and says why, and `--strategy stage` is refused with the reason.
#[test]
fn a_publish_per_partition_needs_the_ledger() {
    let inputs = Inputs::new("publish_each_no_ledger");
    let (store, mut s) = partitioned(&inputs);
    store.arm(Faults {
        ledger_refused: true,
        ..Faults::default()
    });
    let model = PublishModel::PerPartition;
    let (result, _) = staged(&store, &s, model, None).unwrap();
    let Err(Failure::Usage(why)) = result else {
        panic!("--strategy stage without a ledger was not refused");
    };
    assert!(why.contains("needs the resume ledger"), "{why}");
    assert_eq!(store.count("p"), 0);
    s.strategy = sluice_engine::spec::StrategyChoice::Auto;
    let (result, host) = staged(&store, &s, model, None).unwrap();
    let report = result.unwrap();
    assert_eq!(report.strategy, "direct");
    assert!(!report.fallbacks.is_empty());
    assert!(report
        .fallbacks
        .iter()
        .all(|f| f.reason.contains("needs the resume ledger")));
    assert!(host.heard("keeps no resume ledger"));
    every_key_once(&store, 6000);
    assert_eq!(store.staging_tables(), 0);
}

/// A per-partition destination with rows that could not be staged (a file crossing into
/// another partition only in its middle, found during the load): those rows could fail after
/// some partitions were switched in, so every staging table is appended in the one
/// transaction that loads them; a bad row among them leaves nothing visible.
#[test]
fn a_publish_per_partition_with_late_rows_goes_in_one_transaction() {
    let inputs = Inputs::new("publish_each_late_rows");
    for bad in [true, false] {
        let store = Store::new();
        store.create_partitioned(
            "p",
            &["id", "v"],
            &[("p0", 0, 2000), ("p1", 2000, 4000), ("p2", 4000, 6000)],
        );
        let stray = if bad { "refused" } else { "v100" };
        let p0: String = csv(0, 2000, &[])
            .lines()
            .filter(|l| *l != "100,v100")
            .map(|l| format!("{l}\n"))
            .collect();
        let p2 = format!(
            "{}100,{stray}\n{}",
            csv(4000, 5000, &[]),
            csv(5000, 6000, &[])
        );
        let files = vec![
            inputs.file(&format!("a{bad}.csv"), &p0),
            inputs.file(&format!("b{bad}.csv"), &csv(2000, 4000, &[])),
            inputs.file(&format!("c{bad}.csv"), &p2),
        ];
        let mut s = spec(files);
        s.table = Some("p".into());
        s.strategy = sluice_engine::spec::StrategyChoice::Stage;
        store.arm(Faults {
            refuse: Some("refused".into()),
            refuse_unstaged_only: true,
            ..Faults::default()
        });
        let (result, host) = staged(&store, &s, PublishModel::PerPartition, None).unwrap();
        assert!(host.heard("appear at once or not at all"), "bad: {bad}");
        match bad {
            true => {
                assert!(result.is_err());
                assert_eq!(store.count("p"), 0, "nothing visible after a late bad row");
            }
            false => {
                result.unwrap();
                every_key_once(&store, 6000);
            }
        }
    }
}

/// A destination where staging a table measured slower than loading it directly: `auto` loads
/// it directly and says why; `--strategy stage` still stages it.
#[test]
fn auto_loads_directly_where_the_destination_measured_staging_slower() {
    let inputs = Inputs::new("auto_direct");
    let (store, mut s) = partitioned(&inputs);
    let load = |s: &LoadSpec| {
        let host = Listener::default();
        let mut dest = Memory::connect(&store);
        dest.auto_direct = Some("staging measured slower here".into());
        let report = sluice_engine::load::load_staging(s, &mut dest, &host).unwrap();
        (report, host)
    };
    s.strategy = sluice_engine::spec::StrategyChoice::Auto;
    let (report, _) = load(&s);
    assert_eq!(report.strategy, "direct");
    assert!(!report.fallbacks.is_empty());
    assert!(report
        .fallbacks
        .iter()
        .all(|f| f.reason.contains("staging measured slower here")));
    every_key_once(&store, 6000);
    store.truncate("p");
    s.strategy = sluice_engine::spec::StrategyChoice::Stage;
    s.restart = true;
    let (report, _) = load(&s);
    assert_eq!(report.strategy, "stage");
    every_key_once(&store, 6000);
}

/// Files cut elsewhere than the partitions' bounds: their rows are routed to their partitions
/// on the client and staged, every key once; a connection lost while a partition loads from
/// the spill loads it again from the spill; a stop at each point of a routed load, then the
/// same load, is exactly once, and no spill stays.
#[test]
fn misaligned_files_are_routed_and_survive_a_lost_connection_and_a_stop_anywhere() {
    let inputs = Inputs::new("routed");
    let spill = inputs.dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let setup = || {
        let store = Store::new();
        store.create_partitioned(
            "p",
            &["id", "v"],
            &[("p0", 0, 2000), ("p1", 2000, 4000), ("p2", 4000, 6000)],
        );
        let cuts = [0, 1000, 3000, 5000, 6000];
        let files = cuts
            .windows(2)
            .map(|w| inputs.file(&format!("m{}.csv", w[0]), &csv(w[0], w[1], &[])))
            .collect();
        let mut s = spec(files);
        s.table = Some("p".into());
        s.temp_dir = Some(spill.clone());
        (store, s)
    };
    let (store, s) = setup();
    store.arm(Faults {
        lose_at: Some(("v2500".into(), 1)),
        ..Faults::default()
    });
    let (result, host) = staged(&store, &s, PublishModel::OneTransaction, None).unwrap();
    let report = result.unwrap();
    assert_eq!(report.strategy, "stage");
    assert!(host.heard("lost its connection"));
    let routed = &report.steps.as_ref().unwrap().routed;
    assert_eq!(routed.len(), 1);
    let rows: Vec<u64> = routed[0].partitions.iter().map(|p| p.1).collect();
    assert_eq!(rows, vec![2000, 2000, 2000]);
    // Two files hold rows of two partitions each (how many chunks share them depends on the
    // chunk size).
    assert!(routed[0].crossed > 0 && routed[0].crossed <= 2000);
    every_key_once(&store, 6000);
    assert_eq!(store.staging_tables(), 0);
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0);
    // A stop at "routed" is in a stream's thread: it stops the load (a real kill: the
    // real-server test); at "publish", the process.
    for point in ["routed", "publish"] {
        let (store, s) = setup();
        let stopped = staged(&store, &s, PublishModel::OneTransaction, Some(point));
        assert!(stopped.is_none_or(|(r, _)| r.is_err()), "{point}");
        assert_eq!(store.count("p"), 0, "visible after a stop at {point}");
        let (result, _) = staged(&store, &s, PublishModel::OneTransaction, None).unwrap();
        result.unwrap();
        every_key_once(&store, 6000);
        assert_eq!(store.staging_tables(), 0, "after a stop at {point}");
    }
}

/// Many small files share loads (one per run of small chunks of a table): every row once, a
/// refused row named by its own file and line, a lost connection redone whole.
#[test]
fn many_small_files_share_loads_and_keep_their_own_positions() {
    let inputs = Inputs::new("small_files");
    let files: Vec<String> = (0..200)
        .map(|f| inputs.file(&format!("f{f:03}.csv"), &csv(f * 10, f * 10 + 10, &[])))
        .collect();
    let store = table();
    run(&store, &spec(files.clone()), 0).0.unwrap();
    exactly_once(&store, 0, 2000);
    // A refused row in file 123, its 4th line.
    let store = table();
    store.arm(Faults {
        refuse: Some("v1233".into()),
        ..Faults::default()
    });
    let (result, _) = run(&store, &spec(files.clone()), 0);
    let Err(Failure::Input(e)) = result else {
        panic!("expected a bad row, got {result:?}")
    };
    assert!(e.file.ends_with("f123.csv"), "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    assert_eq!(store.count("t"), 0);
    // A lost connection in the middle of a shared load: redone, every row once.
    let store = table();
    store.arm(Faults {
        lose_at: Some(("v1555".into(), 1)),
        ..Faults::default()
    });
    let (result, host) = run(&store, &spec(files), 0);
    result.unwrap();
    assert!(host.heard("lost its connection"));
    exactly_once(&store, 0, 2000);
}

/// Chunks too big to share a load: a stream's load goes on from one into the next it takes
/// (one load's two round trips for all of them, not two a chunk), and still names a bad row's
/// file and line, leaves nothing of a refused load, and loads every row once after a lost
/// connection.
#[test]
fn a_streams_load_goes_on_into_its_next_chunks_and_stays_exactly_once() {
    let inputs = Inputs::new("goes_on");
    // Four files of 30,000 rows (about 390 kB each: each its own chunk, and none small).
    let files: Vec<String> = (0..4u32)
        .map(|f| inputs.file(&format!("f{f}.csv"), &csv(f * 30000, (f + 1) * 30000, &[])))
        .collect();
    let mut one = spec(files.clone());
    one.jobs = Jobs::Fixed(1);
    one.chunk_size = Some(1 << 20);
    let store = table();
    let report = run(&store, &one, 0).0.unwrap();
    exactly_once(&store, 0, 120_000);
    let s = &report.streams[0];
    assert_eq!((s.chunks.len(), s.timing.round_trips), (4, 2), "{s:?}");
    // A row the server refuses in the third file, by its record or (as a foreign key checked
    // at the end of a load is) by its key alone: named there, and nothing stays.
    for by_key in [false, true] {
        let store = table();
        store.arm(Faults {
            refuse: Some("v60010".into()),
            refuse_by_key: by_key,
            ..Faults::default()
        });
        let (result, _) = run(&store, &one, 0);
        let Err(Failure::Input(e)) = result else {
            panic!("expected a bad row, got {result:?}")
        };
        assert!(e.file.ends_with("f2.csv"), "{e}");
        assert_eq!(e.line, Some(11), "{e}");
        assert_eq!(store.count("t"), 0);
    }
    // Each chunk's span is its own, not the whole load's.
    let chunks = &report.streams[0].chunks;
    assert!(chunks[0].end < chunks[3].end, "{chunks:?}");
    // A connection lost in the third file's rows, once the load went on into it (one stream)
    // and while two streams load: every row once, and the report counts each row once.
    for jobs in [1, 2] {
        let store = table();
        store.arm(Faults {
            lose_at: Some(("v75000".into(), 1)),
            ..Faults::default()
        });
        let mut s = one.clone();
        s.jobs = Jobs::Fixed(jobs);
        let (result, host) = run(&store, &s, 0);
        let report = result.unwrap();
        assert!(host.heard("lost its connection"));
        exactly_once(&store, 0, 120_000);
        assert_eq!(report.total.rows, 120_000);
    }
}

/// The ledger is opened while the inputs are checked, and what its open made is committed only
/// once the inputs and the plan hold: a load whose inputs or plan fail leaves no ledger made,
/// as one that opened it after them. Where the inputs were checked before the load, or the
/// destination cannot hold the open uncommitted, it opens after the plan, as before.
#[test]
fn the_ledger_opens_while_the_inputs_are_checked_and_stays_unmade_when_they_fail() {
    let inputs = Inputs::new("ledger_while_checking");
    let files = two_files(&inputs, &[]);
    let false_gz = inputs.file("c.csv.gz", "4000,v4000\n");
    // The check lingers, so that it still runs when the tables are described.
    let slow = || Listener {
        linger_at: Some(("checking", Duration::from_millis(200))),
        ..Listener::default()
    };
    let load = |store: &Arc<Store>, spec: &LoadSpec, holds: bool| {
        let host = slow();
        let mut dest = Memory::connect(store);
        dest.holds_ledger = holds;
        let result = sluice_engine::load::load(spec, &mut dest, &host);
        assert!(
            host.heard("lingered at checking"),
            "the check ran in the load"
        );
        let opens = std::mem::take(&mut store.lock().ledger_opens);
        (result, opens)
    };

    let store = table();
    let mut bad = files.clone();
    bad.push(false_gz);
    let (result, opens) = load(&store, &spec(bad), true);
    assert!(result.is_err(), "a .gz that is not gzip fails the check");
    assert_eq!(opens, ["held", "dropped"]);
    assert_eq!(store.count("t"), 0);

    let mut unknown_column = spec(files.clone());
    unknown_column.columns = Some("id,nope".into());
    let (result, opens) = load(&store, &unknown_column, true);
    assert!(matches!(result, Err(Failure::Usage(_))), "{result:?}");
    assert_eq!(
        opens,
        ["held", "dropped"],
        "a plan that fails makes no ledger"
    );

    let (result, opens) = load(&store, &spec(files.clone()), false);
    result.unwrap();
    assert_eq!(
        opens,
        ["opened"],
        "a destination that cannot hold it opens it later"
    );
    store.truncate("t");

    let checked = spec(files.clone());
    sluice_engine::load::check_inputs(&checked).unwrap();
    assert!(checked.checked.is_filled());
    let mut dest = Memory::connect(&store);
    dest.holds_ledger = true;
    sluice_engine::load::load(&checked, &mut dest, &Listener::default()).unwrap();
    assert_eq!(
        store.lock().ledger_opens,
        ["opened"],
        "checked before: opened after the plan"
    );
    store.lock().ledger_opens.clear();
    store.truncate("t");

    let (result, opens) = load(&store, &spec(files.clone()), true);
    result.unwrap();
    assert_eq!(opens, ["held", "kept"]);
    assert_eq!(store.count("t"), 4000);
}

/// A check that outlasts the hold's bound finds the ledger committed, so that other loads do
/// not wait on it, and opened again after the plan (what it holds may have changed since);
/// when it fails, the ledger stays made, as after a plan that failed.
#[test]
fn a_check_longer_than_the_hold_finds_the_ledger_committed() {
    let inputs = Inputs::new("ledger_hold_bound");
    let files = two_files(&inputs, &[]);
    let load = |store: &Arc<Store>, spec: &LoadSpec| {
        let host = Listener {
            linger_at: Some(("checking", Duration::from_millis(1300))),
            ..Listener::default()
        };
        let mut dest = Memory::connect(store);
        dest.holds_ledger = true;
        let result = sluice_engine::load::load(spec, &mut dest, &host);
        let opens = std::mem::take(&mut store.lock().ledger_opens);
        (result, opens)
    };
    let store = table();
    let mut bad = files.clone();
    bad.push(inputs.file("c.csv.gz", "4000,v4000\n"));
    let (result, opens) = load(&store, &spec(bad));
    assert!(result.is_err(), "a .gz that is not gzip fails the check");
    assert_eq!(opens, ["held", "kept"]);
    let (result, opens) = load(&store, &spec(files));
    result.unwrap();
    assert_eq!(opens, ["held", "kept", "opened"]);
    assert_eq!(store.count("t"), 4000);
}
