//! The verdict's advice as a user reads it after a real load: it names an index, a trigger or a
//! check only when the loaded table has one. Each load is made server-bound on purpose (the
//! server sleeps 20 ms every 200 rows: seconds of server time against a fraction of a second of
//! conversion), once through a column default, which is none of the three, and once through
//! each of them. Real PostgreSQL; nothing here is timed.

mod common;

use common::{db, stderr, Db};

/// A function that sleeps 20 ms every 200th call: a column default, a check or an index
/// expression that costs the server time without the client's.
const SLOW: &str = "CREATE SEQUENCE tick; \
    CREATE FUNCTION slow(x int) RETURNS int LANGUAGE sql VOLATILE AS $$ \
      SELECT CASE WHEN nextval('tick') % 200 = 0 THEN (SELECT x FROM pg_sleep(0.02)) ELSE x END $$";

/// Loads 30,000 rows into `t (a, s)` and returns the verdict's advice.
fn advice(d: &Db) -> String {
    let rows: String = (0..30_000).map(|i| format!("{i},row {i}\n")).collect();
    let f = d.file("t.csv", rows.as_bytes());
    let json = d.dir.join("report.json");
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "t",
        "--columns",
        "a,s",
        "--jobs",
        "1",
        "--report-json",
        json.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = &r["verdict"];
    assert_eq!(v["kind"], "server-bound", "{v}");
    let next = v["next_step"].as_str().unwrap().to_string();
    assert!(
        stdout.contains(&next[..40]),
        "the summary shows it:\n{stdout}"
    );
    next
}

fn table(name: &str, sql: &str) -> Db {
    let d = db(name);
    d.psql(SLOW);
    d.psql(sql);
    d
}

#[test]
fn advice_names_only_the_indexes_triggers_and_checks_the_table_has() {
    // Plain: the sleep is in a column default.
    let plain = table(
        "verdict_plain",
        "CREATE TABLE t (a int, s text, d int DEFAULT slow(0))",
    );
    let next = advice(&plain);
    assert!(next.contains("no index, trigger or check"), "{next}");

    let trigger = table(
        "verdict_trigger_only",
        "CREATE TABLE t (a int, s text); \
         CREATE FUNCTION t_slow() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM slow(0); RETURN NEW; END $$; \
         CREATE TRIGGER t_slow BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION t_slow()",
    );
    let next = advice(&trigger);
    assert!(next.contains("triggers on t (t_slow)"), "{next}");
    assert!(!next.contains("index") && !next.contains("check"), "{next}");

    let check = table(
        "verdict_check_only",
        "CREATE TABLE t (a int, s text, CONSTRAINT t_slow_check CHECK (slow(a) >= 0))",
    );
    let next = advice(&check);
    assert!(next.contains("checks on t (t_slow_check)"), "{next}");
    assert!(!next.contains("trigger"), "{next}");
    assert!(!next.contains("indexes on"), "{next}");

    // An expression index calls only immutable functions: the default sleeps, the index is
    // what the advice must name.
    let index = table(
        "verdict_index_only",
        "CREATE TABLE t (a int, s text, d int DEFAULT slow(0)); CREATE INDEX t_a ON t (a)",
    );
    let next = advice(&index);
    assert!(next.contains("indexes on t (t_a)"), "{next}");
    assert!(
        !next.contains("trigger") && !next.contains("check"),
        "{next}"
    );
}
