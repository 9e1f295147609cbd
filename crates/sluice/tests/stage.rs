//! The `stage` strategy (staging tables switched into partitions, indexes after, one
//! publish), against a real PostgreSQL: it loads what `direct` and `psql \copy` load, its
//! ATTACH does not scan, a killed load leaves nothing visible and the next run publishes what
//! it staged (or drops it, when it cannot), bad rows and unstageable inputs are named, and
//! hostile names survive the switch.

mod common;

use common::{
    assert_has, db, gen_tpch, pg, rows, run_bounded, sluice_cmd, stderr, tpch_ddl, wait_until, Db,
};
use std::process::Output;

fn load(d: &Db, args: &[&str], env: &[(&str, &str)]) -> Output {
    d.load(args, env, 120)
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "sluice failed ({:?}):\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Staging tables left in sluice's schema.
fn leftovers(d: &Db) -> u64 {
    d.psql(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'sluice_stage' AND c.relkind = 'r'",
    )
    .trim()
    .parse()
    .unwrap()
}

/// `t (id int, v text)` partitioned by id into [MINVALUE,1000), [1000,2000), [2000,MAXVALUE).
fn three_partitions(d: &Db, keys: bool) {
    let pk = if keys { ", PRIMARY KEY (id)" } else { "" };
    d.psql(&format!(
        "CREATE TABLE t (id int NOT NULL, v text{pk}) PARTITION BY RANGE (id); \
         CREATE TABLE t_1 PARTITION OF t FOR VALUES FROM (MINVALUE) TO (1000); \
         CREATE TABLE t_2 PARTITION OF t FOR VALUES FROM (1000) TO (2000); \
         CREATE TABLE t_3 PARTITION OF t FOR VALUES FROM (2000) TO (MAXVALUE)"
    ));
}

#[test]
fn stage_equals_direct_and_psql_on_tpch_sf01_partitioned() {
    let d = db("stage_tpch");
    let data = d.dir.join("sf01");
    let paths = gen_tpch(&data, "0.1", "4");
    let ddl = tpch_ddl;
    let partitioned = ddl(&["--partitions", "4", "--scale", "0.1", "--keys"]);
    let plain = ddl(&[]);
    for (schema, sql) in [("st", &partitioned), ("di", &partitioned), ("ps", &plain)] {
        d.psql(&format!(
            "CREATE SCHEMA {schema}; SET search_path = {schema}; {sql}"
        ));
    }
    let files: Vec<String> = paths
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    let args = |strategy: &'static str| -> Vec<String> {
        let mut a = vec![
            "--jobs".to_string(),
            "2".into(),
            "--strategy".into(),
            strategy.into(),
        ];
        a.extend(files.iter().cloned());
        a
    };
    let staged_args = args("stage");
    let staged: Vec<&str> = staged_args.iter().map(String::as_str).collect();
    let summary = ok(&load(&d, &staged, &[("PGOPTIONS", "-c search_path=st")]));
    assert_has(
        &summary,
        &[
            "strategy: stage+direct (staged: ",
            "customer, lineitem, orders, part, partsupp, supplier)",
            "24 staging tables",
            "publish",
        ],
    );
    let direct_args = args("direct");
    let direct: Vec<&str> = direct_args.iter().map(String::as_str).collect();
    ok(&load(&d, &direct, &[("PGOPTIONS", "-c search_path=di")]));
    d.psql_copy_tbl("ps", &paths);
    for t in sluice_tpch_tables() {
        d.assert_same_rows(&format!("st.{t}"), &format!("ps.{t}"));
        d.assert_same_rows(&format!("di.{t}"), &format!("ps.{t}"));
    }
    assert_eq!(leftovers(&d), 0, "staging tables left behind");
    // Switched-in partitions carry the parent's key under the old partition's index name,
    // no staging CHECK, and statistics; FREEZE set the visibility map.
    assert_eq!(
        d.psql(
            "SELECT string_agg(i.indexrelid::regclass::text, ',' ORDER BY 1) FROM pg_index i \
             WHERE i.indrelid = 'st.lineitem_p2'::regclass"
        )
        .trim(),
        "st.lineitem_p2_pkey"
    );
    assert_eq!(
        d.psql(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'st.lineitem_p2'::regclass \
             AND contype = 'c'"
        )
        .trim(),
        "0"
    );
    let (visible, pages) = {
        let r = d.psql(
            "SELECT relallvisible, relpages FROM pg_class WHERE oid = 'st.orders_p3'::regclass",
        );
        let v: Vec<i64> = r.trim().split('|').map(|x| x.parse().unwrap()).collect();
        (v[0], v[1])
    };
    assert!(
        pages > 0 && visible == pages,
        "{visible} of {pages} pages all-visible"
    );
}

fn sluice_tpch_tables() -> [&'static str; 8] {
    [
        "lineitem", "orders", "partsupp", "part", "customer", "supplier", "nation", "region",
    ]
}

#[test]
fn attach_proves_the_bound_without_a_scan() {
    let d = db("stage_noscan");
    three_partitions(&d, true);
    d.psql(&format!(
        "ALTER DATABASE {} SET log_min_messages = debug1",
        d.name
    ));
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1900).as_bytes());
    let out = ok(&load(
        &d,
        &[
            "--table",
            "t",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
        &[("PGOPTIONS", "-c client_min_messages=debug1")],
    ));
    assert_has(&out, &["strategy: stage (staged: t)", "2 staging tables"]);
    assert_eq!(d.count("t"), 1799);
    let log = std::fs::read_to_string(pg().cluster.dir.join("server.log")).unwrap();
    for p in ["t_1", "t_2"] {
        assert_has(
            &log,
            &[&format!(
                "partition constraint for table \"{p}\" is implied by existing constraints"
            )],
        );
    }
}

/// Each job of the ledger: its state, and the rows its chunk records hold.
fn jobs(d: &Db) -> String {
    d.psql(
        "SELECT string_agg(j.id || ' ' || j.state || ' ' || coalesce((SELECT sum(rows) \
                FROM sluice_ledger.job_chunks c WHERE c.job = j.id), 0), ', ' ORDER BY j.id) \
         FROM sluice_ledger.jobs j",
    )
    .trim()
    .to_string()
}

#[test]
fn a_killed_load_leaves_nothing_visible_and_the_next_run_publishes_what_it_staged() {
    let d = db("stage_kill");
    three_partitions(&d, false);
    let small = d.file("small.csv", rows(1, 900).as_bytes());
    // Big enough that the small partition's staging table commits long before this one.
    let big = d.file("big.csv", rows(2000, 3_000_000).as_bytes());
    let args = [
        "load",
        "-q",
        "--target",
        &d.url,
        "--table",
        "t",
        "--jobs",
        "2",
        "--strategy",
        "stage",
        small.to_str().unwrap(),
        big.to_str().unwrap(),
    ];
    let mut child = sluice_cmd().args(args).spawn().unwrap();
    wait_until("no staging table committed", 60, || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the load ended before a staging table committed"
        );
        leftovers(&d) > 0
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(d.count("t"), 0, "rows are visible before the publish");
    // The killed load's sessions end when the server sees their sockets close.
    killed_sessions_end(&d);
    // The small file's, at least; the big one's too if it committed before the kill.
    let left = leftovers(&d);
    assert!(left >= 1);
    let staged_rows = if left == 1 { "899" } else { "2,998,899" };
    let mut again = sluice_cmd();
    again.args(args);
    let out = run_bounded(again, 120);
    ok(&out);
    // Published as they were, with their chunks' ledger rows: not loaded a second time.
    assert_has(
        &stderr(&out),
        &[
            &format!("{left} staging table(s) that an earlier run of job 1 committed"),
            &format!("({staged_rows} rows): they are published with this run's, not loaded again"),
        ],
    );
    assert_eq!(d.count("t"), 899 + 2_998_000);
    assert_eq!(
        d.psql("SELECT count(DISTINCT id) FROM t").trim(),
        (899 + 2_998_000).to_string()
    );
    assert_eq!(leftovers(&d), 0);
    assert_eq!(jobs(&d), "1 finished 2998899");
}

/// Kills a two-file stage load into `t` inside its publish transaction: both staging tables
/// are committed, nothing is visible.
fn kill_in_publish(d: &Db, args: &[&str]) {
    let out = load(d, args, &[("SLUICE_KILL_AT", "publish")]);
    assert_eq!(out.status.code(), None, "not killed: {}", stderr(&out));
    assert_eq!(d.count("t"), 0);
    assert_eq!(leftovers(d), 2);
    killed_sessions_end(d);
}

/// Waits until the server has seen a killed load's sockets close (its sessions, and the
/// advisory lock that says the job runs, end then).
fn killed_sessions_end(d: &Db) {
    wait_until("the killed load's sessions stayed", 30, || {
        d.psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
             AND pid <> pg_backend_pid()",
            d.name
        ))
        .trim()
            == "0"
    });
}

#[test]
fn staging_tables_wait_for_their_job_and_go_when_it_cannot_use_them() {
    let d = db("stage_reuse");
    three_partitions(&d, false);
    d.psql(
        "CREATE TABLE u (id int NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE u_1 PARTITION OF u FOR VALUES FROM (MINVALUE) TO (MAXVALUE)",
    );
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1900).as_bytes());
    let c = d.file("c.csv", rows(1, 10).as_bytes());
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = ["--table", "t", "--jobs", "2", "--strategy", "stage", a, b];
    kill_in_publish(&d, &args);
    // The ledger shows what waits in them, beside what the job committed (nothing).
    assert_has(
        &d.sluice_ok(&["jobs"]),
        &["interrupted", "0/2 (+2 staged)", "0 (+1,799 staged)"],
    );
    // Another job's load leaves them to the job that made them, and says so.
    let out = load(&d, &["--table", "u", c.to_str().unwrap()], &[]);
    ok(&out);
    assert_has(
        &stderr(&out),
        &[
            "left 2 staging table(s) in place for the job that made them",
            "of job 1 (`sluice jobs`), not yet published",
        ],
    );
    assert_eq!(leftovers(&d), 2);
    assert_eq!(d.count("u"), 9);
    // One of them lost its statistics (as if the run had died between its commit and its
    // ANALYZE): the publish must not count on them.
    d.psql(
        "DELETE FROM pg_statistic WHERE starelid = (SELECT c.oid FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'sluice_stage' \
         ORDER BY c.relname LIMIT 1)",
    );
    // The same command publishes them: this run loads no row itself.
    let out = load(&d, &args, &[]);
    let summary = ok(&out);
    assert_has(
        &stderr(&out),
        &["2 staging table(s) that an earlier run of job 1 committed hold 2 chunk(s) (1,799 rows)"],
    );
    assert_has(
        &summary,
        &[
            "strategy: stage",
            "published as they were (1,799 rows, not loaded again)",
        ],
    );
    assert_eq!(d.count("t"), 1799);
    assert_eq!(leftovers(&d), 0);
    assert_eq!(jobs(&d), "1 finished 1799, 2 finished 9");
    assert_eq!(
        d.psql(
            "SELECT string_agg(DISTINCT tablename::text, ',') FROM pg_stats \
             WHERE schemaname = 'public' AND tablename IN ('t', 't_1', 't_2')"
        )
        .trim(),
        "t,t_1,t_2",
        "a partition or the parent has no statistics"
    );

    // The table changed between the runs (an index on the parent): the staging tables no
    // longer fit, so they go and their rows load again.
    d.psql("TRUNCATE t");
    let restart: Vec<&str> = args.iter().copied().chain(["--restart"]).collect();
    kill_in_publish(&d, &restart);
    d.psql("CREATE INDEX t_v ON t (v)");
    let out = load(&d, &args, &[]);
    ok(&out);
    assert_has(
        &stderr(&out),
        &[
            "dropped 2 staging table(s)",
            "this job's, but the table's columns, CHECK constraints or indexes changed since",
        ],
    );
    assert_eq!(d.count("t"), 1799);
    assert_eq!(
        d.psql("SELECT count(*) FROM pg_indexes WHERE tablename IN ('t_1', 't_2')")
            .trim(),
        "2"
    );
    assert_eq!(jobs(&d), "1 finished 1799, 2 finished 9, 3 finished 1799");

    // --restart abandons the job: its staging tables can never be published, and go.
    d.psql("TRUNCATE t");
    kill_in_publish(&d, &restart);
    let out = load(&d, &restart, &[]);
    ok(&out);
    assert_has(&stderr(&out), &["dropped 2 staging table(s)"]);
    assert_eq!(d.count("t"), 1799);
    assert_eq!(leftovers(&d), 0);
    assert_eq!(
        jobs(&d),
        "1 finished 1799, 2 finished 9, 3 finished 1799, 4 abandoned 0, 5 finished 1799"
    );

    // Forgetting an interrupted job drops what it staged.
    d.psql("TRUNCATE t");
    kill_in_publish(&d, &restart);
    let forgot = d.sluice_ok(&["jobs", "forget", "6"]);
    assert_has(&forgot, &["forgot job 6", "dropped 2 staging table(s)"]);
    assert_eq!(leftovers(&d), 0);
    assert_eq!(d.count("t"), 0);
}

/// A ledger dropped and made again numbers its jobs from 1 again: a staging table of the old
/// job 1 is not the new job 1's, even for files of the same names and sizes.
#[test]
fn a_staging_table_of_a_dropped_ledger_is_never_published() {
    let d = db("stage_reledger");
    three_partitions(&d, false);
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1900).as_bytes());
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = ["--table", "t", "--jobs", "2", "--strategy", "stage", a, b];
    kill_in_publish(&d, &args);
    d.psql("DROP SCHEMA sluice_ledger CASCADE");
    // New rows, same sizes: the old staging tables' chunks look like the new job's.
    let new =
        |from: u32, to: u32| -> String { (from..to).map(|i| format!("{i},new {i}\n")).collect() };
    std::fs::write(a, new(1, 900)).unwrap();
    std::fs::write(b, new(1000, 1900)).unwrap();
    let out = load(&d, &args, &[]);
    ok(&out);
    assert_has(&stderr(&out), &["dropped 2 staging table(s)"]);
    assert_eq!(d.count("t"), 1799);
    assert_eq!(
        d.psql("SELECT count(*) FROM t WHERE v LIKE 'new %'").trim(),
        "1799"
    );
    assert_eq!(leftovers(&d), 0);
}

#[test]
fn a_bad_row_in_a_staged_file_fails_the_load_and_leaves_nothing() {
    let d = db("stage_bad");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let mut bad = rows(1000, 1500);
    bad.push_str("1500,fine\nnot a number,oops\n");
    let b = d.file("b.csv", bad.as_bytes());
    let out = load(
        &d,
        &[
            "--table",
            "t",
            "--jobs",
            "2",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(&stderr(&out), &["b.csv", "line 502", "not a number"]);
    assert_eq!(d.count("t"), 0);
    assert_eq!(leftovers(&d), 0, "a failed load left staging tables");
}

#[test]
fn a_first_row_in_no_partition_is_a_bad_row() {
    let d = db("stage_nopart");
    d.psql(
        "CREATE TABLE t (id int NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE t_1 PARTITION OF t FOR VALUES FROM (1) TO (1000)",
    );
    let f = d.file("far.csv", b"5000,far away\n");
    let out = load(&d, &["--table", "t", f.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            "far.csv",
            "line 1",
            "id = 5000 belongs to no partition of \"public\".\"t\"",
        ],
    );
    assert_eq!(d.count("t"), 0);
}

#[test]
fn a_file_that_spans_partitions_is_redone_directly_and_said_so() {
    let d = db("stage_span");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    // Starts and ends in t_2, with rows of t_3 in the middle: its first and last rows do not
    // show the span (files that show it are routed on the client: `rows_across_bounds_...`).
    let mut spanning = rows(1000, 1500);
    spanning.push_str(&rows(2100, 2200));
    spanning.push_str(&rows(1500, 1900));
    let span = d.file("span.csv", spanning.as_bytes());
    let c = d.file("c.csv", rows(2600, 2700).as_bytes());
    let out = ok(&load(
        &d,
        &[
            "--table",
            "t",
            "--jobs",
            "2",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            span.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
        &[],
    ));
    assert_has(
        &out,
        &[
            "strategy: stage+direct",
            "direct: ",
            "span.csv (table t): a row after its first belongs to another partition than \"public\".\"t_2\"",
        ],
    );
    assert_eq!(d.count("t"), 899 + 1000 + 100);
    assert_eq!(d.psql("SELECT count(DISTINCT id) FROM t").trim(), "1999");
    assert_eq!(d.count("t_3"), 100 + 100);
    assert_eq!(leftovers(&d), 0);
}

#[test]
fn a_partition_with_rows_is_loaded_directly_and_said_so() {
    let d = db("stage_nonempty");
    three_partitions(&d, false);
    d.psql("INSERT INTO t VALUES (1500, 'already here')");
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1100).as_bytes());
    // --strategy stage: the other file staged, this one in the publish. (`auto` loads such a
    // table direct, in parallel: `auto_loads_a_table_with_a_file_across_bounds_...`.)
    let out = ok(&load(
        &d,
        &[
            "--table",
            "t",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
        &[],
    ));
    assert_has(
        &out,
        &[
            "b.csv (table t): partition \"public\".\"t_2\" is not empty",
            "staged: t",
        ],
    );
    assert_eq!(d.count("t"), 899 + 100 + 1);
    // A table sluice cannot route goes direct too, with the reason.
    d.psql(
        "CREATE TABLE h (id int, v text) PARTITION BY HASH ((id + 1)); \
         CREATE TABLE h_0 PARTITION OF h FOR VALUES WITH (MODULUS 1, REMAINDER 0)",
    );
    let out = ok(&load(&d, &["--table", "h", a.to_str().unwrap()], &[]));
    assert_has(&out, &["its partition key is an expression"]);
    assert_eq!(d.count("h"), 899);
    // --strategy stage with nothing to stage is a usage error.
    d.psql("CREATE TABLE plain (id int, v text)");
    let out = load(
        &d,
        &[
            "--table",
            "plain",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_has(&stderr(&out), &["--strategy stage: no input can be staged"]);
    assert_eq!(d.count("plain"), 0);
}

#[test]
fn hostile_schema_table_and_partition_names_survive_the_switch() {
    let d = db("stage_names");
    d.psql(
        "CREATE SCHEMA \"My Schema\"; \
         CREATE TABLE \"My Schema\".\"Line \"\"Items\"\"\" (\"Key Col\" bigint NOT NULL, \
            \"välue\" text, PRIMARY KEY (\"Key Col\")) PARTITION BY RANGE (\"Key Col\"); \
         CREATE TABLE \"My Schema\".\"p 1 ü\" PARTITION OF \"My Schema\".\"Line \"\"Items\"\"\" \
            FOR VALUES FROM (MINVALUE) TO (1000); \
         CREATE TABLE \"My Schema\".\"p \"\"2\"\"\" PARTITION OF \"My Schema\".\"Line \"\"Items\"\"\" \
            FOR VALUES FROM (1000) TO (2000); \
         CREATE TABLE \"My Schema\".\"p\\'3\nx\" PARTITION OF \"My Schema\".\"Line \"\"Items\"\"\" \
            FOR VALUES FROM (2000) TO (MAXVALUE)",
    );
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1900).as_bytes());
    let c = d.file("c.csv", rows(2000, 2100).as_bytes());
    let args = [
        "--table",
        "\"My Schema\".\"Line \"\"Items\"\"\"",
        "--jobs",
        "2",
        "--strategy",
        "stage",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        c.to_str().unwrap(),
    ];
    // Backslashes are escapes in this session's string literals: the staging tables' comments
    // (which name the partitions) must still be what sluice wrote.
    let session = ("PGOPTIONS", "-c standard_conforming_strings=off");
    let out = load(&d, &args, &[session, ("SLUICE_KILL_AT", "publish")]);
    assert_eq!(out.status.code(), None, "not killed: {}", stderr(&out));
    assert_eq!(leftovers(&d), 3);
    let out = load(&d, &args, &[session]);
    let summary = ok(&out);
    assert_has(
        &summary,
        &["published as they were (1,899 rows, not loaded again)"],
    );
    assert_eq!(d.count("\"My Schema\".\"p 1 ü\""), 899);
    assert_eq!(d.count("\"My Schema\".\"p \"\"2\"\"\""), 900);
    assert_eq!(d.count("\"My Schema\".\"p\\'3\nx\""), 100);
    assert_eq!(
        d.psql(
            "SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = '\"My Schema\".\"Line \"\"Items\"\"\"'::regclass"
        )
        .trim(),
        "p \"2\",p 1 ü,p\\'3\nx"
    );
    assert_eq!(leftovers(&d), 0);
}

#[test]
fn a_duplicate_key_found_by_the_index_build_names_both_rows() {
    let d = db("stage_dup");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let mut dup = rows(1000, 1500);
    dup.push_str("1200,again\n");
    let b = d.file("b.csv", dup.as_bytes());
    let out = load(
        &d,
        &[
            "--table",
            "t",
            "--jobs",
            "2",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            "b.csv",
            "line 501",
            "(id)=(1200)",
            "the same key is in",
            "line 201",
        ],
    );
    assert_eq!(d.count("t"), 0);
    assert_eq!(leftovers(&d), 0);
}

/// A role that may insert into a partitioned table but does not own it loads as it always
/// could: directly, with the reason in the summary (auto never turns a load that direct can do
/// into a failure).
#[test]
fn a_role_that_may_only_insert_loads_directly() {
    let d = db("stage_role");
    three_partitions(&d, false);
    d.psql(&format!(
        "DROP ROLE IF EXISTS stage_loader; CREATE ROLE stage_loader LOGIN; \
         GRANT CONNECT ON DATABASE {} TO stage_loader; \
         GRANT USAGE ON SCHEMA public TO stage_loader; GRANT INSERT ON t TO stage_loader; \
         REVOKE CREATE ON DATABASE {} FROM PUBLIC",
        d.name, d.name
    ));
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let url = d.url.replace("sluice@", "stage_loader@");
    let mut c = sluice_cmd();
    c.args(["load", "-q", "--target", &url, "--table", "t"])
        .arg(&a);
    let out = run_bounded(c, 60);
    let summary = ok(&out);
    assert_has(
        &summary,
        &["a.csv (table t): table \"public\".\"t\": the loading role does not own it"],
    );
    assert_eq!(d.count("t"), 899);
    assert_eq!(leftovers(&d), 0);
}

/// A file redone outside its staging table loads in the publish transaction: a key it shares
/// with a staged file fails the whole load with both rows named, and no row of it is visible
/// (the direct streams of other tables roll back too).
#[test]
fn a_redone_file_that_repeats_a_staged_key_leaves_nothing_visible() {
    let d = db("stage_redo_dup");
    three_partitions(&d, true);
    d.psql("CREATE TABLE other (id int, v text)");
    let a = d.file("t.a.csv", rows(1, 900).as_bytes());
    // Starts in t_2, then a row of t_1 that a.csv also holds.
    let mut span = rows(1000, 1100);
    span.push_str("5,again\n");
    let span = d.file("t.span.csv", span.as_bytes());
    let other = d.file("other.csv", rows(1, 100).as_bytes());
    let out = load(
        &d,
        &[
            "--jobs",
            "2",
            a.to_str().unwrap(),
            span.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_has(&err, &["span.csv", "(id)=(5)"]);
    assert_eq!(d.count("t"), 0, "{err}");
    assert_eq!(d.count("other"), 0, "{err}");
    assert_eq!(leftovers(&d), 0);
}

/// Each partition's statistics are gathered once: a staged one by its stream (after its
/// commit, so that autovacuum does not redo it), one loaded otherwise by its parent's ANALYZE, which also adds the parent's own (inherited) statistics
/// without analyzing the staged partitions a second time.
#[test]
fn statistics_are_gathered_once_per_partition_and_for_the_parent() {
    let d = db("stage_stats");
    three_partitions(&d, false);
    d.psql("INSERT INTO t VALUES (2000, 'already here')");
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1700).as_bytes());
    let c = d.file("c.csv", rows(2001, 2300).as_bytes());
    let out = ok(&load(
        &d,
        &[
            "--table",
            "t",
            "--jobs",
            "2",
            "--strategy",
            "stage",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
        &[],
    ));
    assert_has(&out, &["partition \"public\".\"t_3\" is not empty"]);
    let counts = d.psql(
        "SELECT string_agg(relname || '=' || analyze_count, ' ' ORDER BY relname) \
         FROM pg_stat_user_tables WHERE relname IN ('t', 't_1', 't_2', 't_3')",
    );
    assert_eq!(counts.trim(), "t=1 t_1=1 t_2=1 t_3=1");
    // The staged partitions were analyzed after their rows were counted, so autovacuum has
    // nothing to analyze again.
    let pending = d.psql(
        "SELECT string_agg(relname || '=' || n_mod_since_analyze, ' ' ORDER BY relname) \
         FROM pg_stat_user_tables WHERE relname IN ('t_1', 't_2')",
    );
    assert_eq!(pending.trim(), "t_1=0 t_2=0");
    // The statistics describe the published rows: the partitions' own and the parent's.
    let tuples = d.psql(
        "SELECT string_agg(relname || '=' || reltuples::bigint, ' ' ORDER BY relname) \
         FROM pg_class WHERE relname IN ('t_1', 't_2', 't_3')",
    );
    assert_eq!(tuples.trim(), "t_1=899 t_2=700 t_3=300");
    let inherited = d.psql(
        "SELECT string_agg(attname || '=' || n_distinct, ' ' ORDER BY attname) FROM pg_stats \
         WHERE schemaname = 'public' AND tablename = 't' AND inherited",
    );
    assert_eq!(inherited.trim(), "id=-1 v=-1");
    assert_eq!(leftovers(&d), 0);
}

/// A reader that keeps the table open in its transaction holds off the publish's ACCESS
/// EXCLUSIVE lock. Every attempt waits at most `--lock-wait-timeout`; after the last one the
/// load fails, publishes nothing and names the reader. Once the reader is gone, the same
/// command loads every row once.
#[test]
fn a_reader_holding_the_table_bounds_the_publish_and_is_named() {
    let d = db("stage_reader");
    three_partitions(&d, false);
    let a = d.file("a.csv", rows(1, 900).as_bytes());
    let b = d.file("b.csv", rows(1000, 1900).as_bytes());
    let reader = d.open_session("the_reader", "BEGIN; SELECT count(*) FROM t;");
    wait_until("the reader never took its lock", 30, || {
        d.psql(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'the_reader' AND l.relation = 't'::regclass",
        )
        .trim()
            != "0"
    });
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = [
        "--table",
        "t",
        "--jobs",
        "2",
        "--strategy",
        "stage",
        "--lock-wait-timeout",
        "200ms",
        a,
        b,
    ];
    // Five waits of 0.2 s and pauses of 0.02, 0.04, 0.08 and 0.16 s, with the load around
    // them: a run still going after 60 s (the default waits alone are 65 s) fails the test.
    let out = d.load(&args, &[], 60);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            "could not lock the tables in 5 attempts of 200 ms each",
            "nothing was published",
            "the_reader",
            "--lock-wait-timeout",
        ],
    );
    assert_eq!(d.count("t"), 0, "rows are visible after a failed publish");
    // The job resumes: its finished staging tables wait for that, out of the readers' way.
    assert_has(
        &stderr(&out),
        &[
            "kept the 2 staging table(s) this load finished",
            "Run the same command again",
        ],
    );
    assert_eq!(leftovers(&d), 2);

    assert!(reader.end().success());
    let summary = ok(&load(&d, &args, &[]));
    assert_has(
        &summary,
        &["published as they were (1,799 rows, not loaded again)"],
    );
    assert_eq!(d.count("t"), 899 + 900);
    assert_eq!(
        d.psql("SELECT count(DISTINCT id) FROM t").trim(),
        (899 + 900).to_string()
    );
    assert_eq!(leftovers(&d), 0);
}

/// `auto` with `--temp-dir` under the test's directory: the spill is looked at after the load.
fn routed_load(d: &Db, files: &[&std::path::Path], extra: &[&str]) -> (Output, std::path::PathBuf) {
    let spill = d.dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut args = vec![
        "--table",
        "t",
        "--jobs",
        "2",
        "--temp-dir",
        spill.to_str().unwrap(),
    ];
    args.extend(extra);
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    (load(d, &args, &[]), spill)
}

/// The spill directory holds nothing after a load, whichever way it ended.
fn spill_is_gone(spill: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(spill).unwrap().flatten().collect();
    assert!(left.is_empty(), "the spill stayed: {left:?}");
}

/// `t` loaded directly into a plain table `t_direct` of the same columns from the same files,
/// and compared row for row with what the routed load left.
fn equals_direct(d: &Db, files: &[&std::path::Path]) {
    d.psql("CREATE TABLE t_direct (id int NOT NULL, v text)");
    let mut args = vec!["--table", "t_direct", "--strategy", "direct"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    ok(&load(d, &args, &[]));
    let differ = d.psql(
        "SELECT count(*) FROM ((TABLE t EXCEPT ALL TABLE t_direct) \
         UNION ALL (TABLE t_direct EXCEPT ALL TABLE t)) x",
    );
    assert_eq!(differ.trim(), "0", "the routed load differs from direct");
}

/// Files cut elsewhere than the partitions' bounds (another generator's parts, daily files into
/// ranges): `auto` sees from each file's first and last rows that some cross a bound, and
/// routes the table's rows to their partitions on the client: every partition staged, nothing
/// direct, the rows equal to a direct load's, and the spill gone.
#[test]
fn rows_across_bounds_are_routed_on_the_client_and_equal_direct() {
    let d = db("stage_routed_misaligned");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 950).as_bytes());
    let b = d.file("b.csv", rows(950, 1900).as_bytes());
    let c = d.file("c.csv", rows(1900, 2700).as_bytes());
    let files = [a.as_path(), b.as_path(), c.as_path()];
    let (out, spill) = routed_load(&d, &files, &[]);
    let out = ok(&out);
    assert!(out.contains("strategy: stage (staged: t)"), "{out}");
    assert!(!out.contains("direct: "), "{out}");
    assert_has(
        &out,
        &[
            "routed: 2,699 rows of t to 3 partition(s) on the client",
            "\"public\".\"t_1\" 999, \"public\".\"t_2\" 1,000, \"public\".\"t_3\" 700",
            "150 outside their chunk's main partition",
            "in unnamed files under",
        ],
    );
    assert_eq!(d.count("t_1"), 999);
    assert_eq!(d.count("t_3"), 700);
    spill_is_gone(&spill);
    assert_eq!(leftovers(&d), 0);
    // The ledger counts every chunk once.
    assert_eq!(jobs(&d), "1 finished 2699");
    equals_direct(&d, &files);
}

/// Rows shuffled across every partition, in every file: each goes to its own partition.
#[test]
fn shuffled_rows_are_routed_to_their_partitions() {
    let d = db("stage_routed_shuffled");
    three_partitions(&d, true);
    // A fixed permutation of 1..=3000 (3001 is prime, 7 generates a full cycle mod it... any
    // stride coprime to 3000 will do).
    let ids: Vec<u32> = (0..3000u32).map(|k| (k * 7 + 11) % 3000 + 1).collect();
    let mut files = Vec::new();
    for (n, part) in ids.chunks(1000).enumerate() {
        let body: String = part.iter().map(|i| format!("{i},row {i}\n")).collect();
        files.push(d.file(&format!("s{n}.csv"), body.as_bytes()));
    }
    let paths: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let (out, spill) = routed_load(&d, &paths, &[]);
    let out = ok(&out);
    assert_has(&out, &["strategy: stage", "routed: 3,000 rows of t"]);
    assert!(!out.contains("direct: "), "{out}");
    assert_eq!(d.count("t_1"), 999);
    assert_eq!(d.count("t_2"), 1000);
    assert_eq!(d.count("t_3"), 1001);
    spill_is_gone(&spill);
    equals_direct(&d, &paths);
}

/// A routed row whose key is in no partition is a bad row, named by file, line and value;
/// nothing is visible and the spill is gone.
#[test]
fn a_routed_row_in_no_partition_is_a_bad_row() {
    let d = db("stage_routed_nopart");
    d.psql(
        "CREATE TABLE t (id int NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE t_1 PARTITION OF t FOR VALUES FROM (1) TO (1000); \
         CREATE TABLE t_2 PARTITION OF t FOR VALUES FROM (1000) TO (2000)",
    );
    let a = d.file("a.csv", rows(1, 950).as_bytes());
    let mut far = rows(950, 1200);
    far.push_str("7000,far away\n");
    far.push_str(&rows(1200, 1300));
    let b = d.file("b.csv", far.as_bytes());
    let (out, spill) = routed_load(&d, &[&a, &b], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            "b.csv",
            "line 251",
            "id = 7000 belongs to no partition of \"public\".\"t\"",
        ],
    );
    assert_eq!(d.count("t"), 0);
    assert_eq!(leftovers(&d), 0);
    spill_is_gone(&spill);
}

/// A spill that would not fit in --temp-dir: the table loads direct, in parallel, and the
/// summary says why. The directory is a 64 KiB tmpfs (needs root to mount; said and skipped
/// otherwise).
#[test]
fn a_spill_that_cannot_fit_loads_direct_and_says_why() {
    let d = db("stage_routed_nospace");
    three_partitions(&d, true);
    let spill = d.dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mounted = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tmpfs",
            spill.to_str().unwrap(),
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED a_spill_that_cannot_fit_loads_direct_and_says_why: cannot mount a tmpfs (not root)");
        return;
    }
    let a = d.file("a.csv", rows(1, 9500).as_bytes());
    let b = d.file("b.csv", rows(9500, 19000).as_bytes());
    let (out, _) = routed_load(&d, &[&a, &b], &[]);
    let _ = std::process::Command::new("umount").arg(&spill).status();
    let out = ok(&out);
    assert_has(
        &out,
        &[
            "not routed on the client: routing its rows on the client would spill about",
            "(give --temp-dir a directory with room)",
            "the whole table loads direct, in parallel streams",
        ],
    );
    assert_eq!(d.count("t"), 18999);
    assert_eq!(d.psql("SELECT count(DISTINCT id) FROM t").trim(), "18999");
}

/// kill -9 while rows are being routed, and again inside the publish: the same command then
/// loads every row exactly once, and no spill or staging table stays.
#[test]
fn a_killed_routed_load_completes_exactly_once() {
    let d = db("stage_routed_kill");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 1500).as_bytes());
    let b = d.file("b.csv", rows(1500, 2700).as_bytes());
    let spill = d.dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let args = [
        "--table",
        "t",
        "--jobs",
        "2",
        "--chunk-size",
        "8k",
        "--temp-dir",
        spill.to_str().unwrap(),
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ];
    for point in ["routed", "publish"] {
        let out = load(&d, &args, &[("SLUICE_KILL_AT", point)]);
        assert_eq!(
            out.status.code(),
            None,
            "not killed at {point}: {}",
            stderr(&out)
        );
        assert_eq!(d.count("t"), 0, "rows visible after a kill at {point}");
    }
    let out = ok(&load(&d, &args, &[]));
    assert_has(&out, &["routed: 2,699 rows of t"]);
    assert_eq!(d.count("t"), 2699);
    assert_eq!(d.psql("SELECT count(DISTINCT id) FROM t").trim(), "2699");
    assert_eq!(leftovers(&d), 0);
    spill_is_gone(&spill);
    assert_eq!(jobs(&d), "1 finished 2699");
}

/// Each row of `table` with the suffix of its partition's name (after the table's own name),
/// for comparing two tables of the same layout partition by partition.
fn rows_by_partition(d: &Db, table: &str) -> String {
    d.psql(&format!(
        "SELECT string_agg(substr(tableoid::regclass::text, {}) || ':' || coalesce(id::text, 'NULL') \
         || ':' || v, ',' ORDER BY id, v) FROM {table}",
        table.len() + 1
    ))
}

/// Hash and list partitioning route too: PostgreSQL's own hash of integer keys (negative keys,
/// keys past 32 bits, partitions of different moduli) and lists of values with NULL. Every row
/// lands in the partition `psql \copy` puts it in.
#[test]
fn hash_and_list_partitions_are_routed_as_the_server_routes() {
    let d = db("stage_routed_hash_list");
    let layout = |name: &str| {
        format!(
            "CREATE TABLE {name} (id bigint, v text) PARTITION BY HASH (id); \
             CREATE TABLE {name}_a PARTITION OF {name} FOR VALUES WITH (MODULUS 2, REMAINDER 0); \
             CREATE TABLE {name}_b PARTITION OF {name} FOR VALUES WITH (MODULUS 4, REMAINDER 1); \
             CREATE TABLE {name}_c PARTITION OF {name} FOR VALUES WITH (MODULUS 4, REMAINDER 3);"
        )
    };
    d.psql(&(layout("h") + &layout("href")));
    let keys: Vec<i64> = (-300..300)
        .chain((0..300).map(|k| 5_000_000_000 + k * 7919))
        .chain([i64::MIN, i64::MAX, i32::MIN as i64, i32::MAX as i64])
        .collect();
    // `table` loaded by sluice from `body`, and `{table}ref` by psql: each row in the same
    // partition.
    let routed_like_psql = |table: &str, body: &str, rows: &str| {
        let f = d.file(&format!("{table}.csv"), body.as_bytes());
        let out = ok(&load(&d, &["--table", table, f.to_str().unwrap()], &[]));
        let routed = format!("routed: {rows} rows of {table} to 3 partition(s)");
        assert_has(&out, &["strategy: stage", &routed]);
        d.psql_copy(&format!("{table}ref"), &f, "format csv")
            .unwrap();
        let reference = rows_by_partition(&d, &format!("{table}ref"));
        assert_eq!(rows_by_partition(&d, table), reference);
    };
    let mut body: String = keys.iter().map(|k| format!("{k},h {k}\n")).collect();
    // A NULL key: PostgreSQL hashes it to 0, the partition of remainder 0.
    body.push_str(",h null\n");
    routed_like_psql("h", &body, "905");
    assert_eq!(d.count("h_a") + d.count("h_b") + d.count("h_c"), 905);

    // Lists, NULL among the values of one of them.
    let list = |name: &str| {
        let evens: Vec<String> = (2..=300).step_by(2).map(|k| k.to_string()).collect();
        let odds: Vec<String> = (1..300).step_by(2).map(|k| k.to_string()).collect();
        format!(
            "CREATE TABLE {name} (id int, v text) PARTITION BY LIST (id); \
             CREATE TABLE {name}_even PARTITION OF {name} FOR VALUES IN ({}); \
             CREATE TABLE {name}_odd PARTITION OF {name} FOR VALUES IN ({}); \
             CREATE TABLE {name}_none PARTITION OF {name} FOR VALUES IN (NULL, 0);",
            evens.join(","),
            odds.join(",")
        )
    };
    d.psql(&(list("l") + &list("lref")));
    let mut body: String = (0..=300).rev().map(|k| format!("{k},l {k}\n")).collect();
    body.push_str(",l null\n");
    routed_like_psql("l", &body, "302");
    assert_eq!(d.count("l_none"), 2);
    assert_eq!(leftovers(&d), 0);
}

/// SF0.1 `lineitem` as real data arrives: its rows shuffled into 4 files, and cut into 4 files
/// elsewhere than the partitions' bounds (a few thousand rows before each, as `tpchgen-cli`
/// cuts its parts). `auto` stages both, nothing direct, and the table equals a direct load of
/// the same files into a plain table, row for row.
#[test]
fn tpch_lineitem_shuffled_or_cut_elsewhere_stages_equal_to_direct() {
    let d = db("stage_routed_tpch");
    let data = d.dir.join("sf01");
    let paths = gen_tpch(&data, "0.1", "1");
    let lineitem = paths
        .iter()
        .find(|p| common::tpch_table(p) == "lineitem")
        .unwrap();
    let text = std::fs::read_to_string(lineitem).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let cut = |dir: &str, lines: &[&str], at: &[usize]| -> Vec<std::path::PathBuf> {
        let dir = d.dir.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        at.windows(2)
            .enumerate()
            .map(|(k, w)| {
                let p = dir.join(format!("lineitem.{}.tbl", k + 1));
                let mut body = lines[w[0]..w[1]].join("\n");
                body.push('\n');
                std::fs::write(&p, body).unwrap();
                p
            })
            .collect()
    };
    // Cut 3,000 rows before each quarter (the partitions hold a quarter of the orders each).
    let early = cut(
        "early",
        &lines,
        &[0, n / 4 - 3000, n / 2 - 3000, 3 * n / 4 - 3000, n],
    );
    // A fixed shuffle (an LCG's Fisher-Yates).
    let mut seed: u64 = 33;
    for i in (1..n).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lines.swap(i, (seed >> 33) as usize % (i + 1));
    }
    let shuffled = cut("shuffled", &lines, &[0, n / 4, n / 2, 3 * n / 4, n]);
    let partitioned = tpch_ddl(&["--partitions", "4", "--scale", "0.1", "--keys"]);
    let plain = tpch_ddl(&[]);
    for (name, files) in [("early", &early), ("shuffled", &shuffled)] {
        d.psql(&format!(
            "CREATE SCHEMA st_{name}; SET search_path = st_{name}; {partitioned} \
             CREATE SCHEMA di_{name}; SET search_path = di_{name}; {plain}"
        ));
        let load_into = |schema: &str, strategy: &str| {
            let table = format!("{schema}.lineitem");
            let mut args = vec!["--table", &table, "--jobs", "2", "--strategy", strategy];
            args.extend(files.iter().map(|f| f.to_str().unwrap()));
            ok(&load(&d, &args, &[]))
        };
        let out = load_into(&format!("st_{name}"), "auto");
        assert_has(
            &out,
            &["strategy: stage", "routed: 600,572 rows of lineitem"],
        );
        assert!(!out.contains("direct: "), "{name}: {out}");
        load_into(&format!("di_{name}"), "direct");
        let differ = d.psql(&format!(
            "SELECT count(*) FROM ((TABLE st_{name}.lineitem EXCEPT ALL TABLE di_{name}.lineitem) \
             UNION ALL (TABLE di_{name}.lineitem EXCEPT ALL TABLE st_{name}.lineitem)) x"
        ));
        assert_eq!(
            differ.trim(),
            "0",
            "{name}: the routed load differs from direct"
        );
        assert_eq!(d.count(&format!("st_{name}.lineitem")), n as u64);
    }
    assert_eq!(leftovers(&d), 0);
}

/// Ctrl-C while rows are being routed: nothing visible, the spill gone, and the same command
/// then loads every row once.
#[test]
fn ctrl_c_during_routing_leaves_no_spill() {
    let d = db("stage_routed_sigint");
    three_partitions(&d, false);
    // 2,000,000 rows whose files cross the bounds: routing takes a while.
    let big: String = (0..2_000_000u32)
        .map(|i| format!("{},row {i}\n", i % 3000))
        .collect();
    let a = d.file("a.csv", big.as_bytes());
    let spill = d.dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let args = [
        "load",
        "-q",
        "--target",
        &d.url,
        "--table",
        "t",
        "--temp-dir",
        spill.to_str().unwrap(),
        a.to_str().unwrap(),
    ];
    let child = sluice_cmd().args(args).spawn().unwrap();
    // The spill files have no names: the process's descriptors show them.
    let fds = format!("/proc/{}/fd", child.id());
    wait_until("no spill file was opened", 60, || {
        std::fs::read_dir(&fds).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.starts_with(&spill)))
        })
    });
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    spill_is_gone(&spill);
    assert_eq!(d.count("t"), 0);
    let mut again = sluice_cmd();
    again.args(args);
    ok(&run_bounded(again, 300));
    assert_eq!(d.count("t"), 2_000_000);
    spill_is_gone(&spill);
}

/// 300 partitions, one spill file each: under a soft open-file limit of 200 sluice raises it
/// (to what the hard limit allows) and routes; under a hard limit of 300 it cannot, and the
/// table loads direct, in parallel, saying why.
#[test]
fn many_partitions_raise_the_open_file_limit_or_load_direct_saying_why() {
    use std::os::unix::process::CommandExt;
    let d = db("stage_routed_files");
    let mut sql = String::from("CREATE TABLE t (id int NOT NULL, v text) PARTITION BY RANGE (id);");
    for p in 0..300 {
        sql.push_str(&format!(
            "CREATE TABLE t_{p} PARTITION OF t FOR VALUES FROM ({}) TO ({});",
            p * 100,
            (p + 1) * 100
        ));
    }
    d.psql(&sql);
    // Every file holds keys of every partition.
    let body = |from: u32| -> String {
        (0..15_000u32)
            .map(|k| format!("{},row\n", (k * 7 + from) % 30_000))
            .collect()
    };
    let a = d.file("a.csv", body(0).as_bytes());
    let b = d.file("b.csv", body(1).as_bytes());
    let limited = |soft: u64, hard: u64| {
        let mut c = sluice_cmd();
        c.args(["load", "--target", &d.url, "--table", "t", "--jobs", "2"])
            .arg(&a)
            .arg(&b);
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            c.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                match libc::setrlimit(libc::RLIMIT_NOFILE, &l) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
        ok(&run_bounded(c, 300))
    };
    let out = limited(200, 4096);
    assert_has(
        &out,
        &[
            "strategy: stage",
            "routed: 30,000 rows of t to 300 partition(s)",
        ],
    );
    let sum: u64 = (0..15_000u64)
        .flat_map(|k| [(k * 7) % 30_000, (k * 7 + 1) % 30_000])
        .sum();
    assert_eq!(d.count("t"), 30_000);
    assert_eq!(d.psql("SELECT sum(id) FROM t").trim(), sum.to_string());
    d.psql("TRUNCATE t");
    let out = limited(300, 300);
    assert_has(
        &out,
        &["not routed on the client: routing needs a spill file per partition open at once (300)"],
    );
    assert!(!out.contains("strategy: stage"), "{out}");
    assert_eq!(d.count("t"), 30_000);
}

/// A partitioned table referenced by another table of the same load is not staged (the
/// child's checks must see its rows as they load, and staged rows appear only at the
/// publish): it loads direct, on the child's stream, saying why, and both tables are whole.
#[test]
fn a_parent_that_another_loaded_table_references_loads_direct() {
    let d = db("stage_routed_fk");
    d.psql(
        "CREATE TABLE pa (id int PRIMARY KEY, v text) PARTITION BY RANGE (id); \
         CREATE TABLE pa_1 PARTITION OF pa FOR VALUES FROM (0) TO (1000); \
         CREATE TABLE pa_2 PARTITION OF pa FOR VALUES FROM (1000) TO (2000); \
         CREATE TABLE cb (pa_id int REFERENCES pa, w text)",
    );
    let pa = d.file("pa.csv", rows(0, 2000).as_bytes());
    let cb = d.file("cb.csv", rows(0, 2000).as_bytes());
    let out = ok(&load(
        &d,
        &[pa.to_str().unwrap(), cb.to_str().unwrap()],
        &[],
    ));
    assert_has(
        &out,
        &["pa.csv (table pa): table \"public\".\"pa\": foreign keys tie it to other tables"],
    );
    assert_eq!((d.count("pa"), d.count("cb")), (2000, 2000));
}

/// Text COPY (`--wire text`) routes keys as the encoder reads them, spaces around included.
#[test]
fn text_wire_keys_with_spaces_are_routed() {
    let d = db("stage_routed_text");
    three_partitions(&d, false);
    let body: String = (0..3000).map(|i| format!(" {i} ,row {i}\n")).collect();
    let f = d.file("spaced.csv", body.as_bytes());
    let out = ok(&load(
        &d,
        &["--table", "t", "--wire", "text", f.to_str().unwrap()],
        &[],
    ));
    assert_has(&out, &["routed: 3,000 rows of t to 3 partition(s)"]);
    assert_eq!(
        (d.count("t_1"), d.count("t_2"), d.count("t_3")),
        (1000, 1000, 1000)
    );
}

/// A key two files hold, routed to one partition from both: the staging table's index build
/// refuses it, and the error names both rows by file and line (the rows are found in the
/// table's files, since a routed partition's rows come from all of them). Nothing is visible,
/// and no staging table stays.
#[test]
fn a_duplicate_key_across_routed_files_names_both_rows() {
    let d = db("stage_routed_dup");
    three_partitions(&d, true);
    let a = d.file("a.csv", rows(1, 1500).as_bytes());
    let mut b = rows(1500, 2700);
    b.push_str("1200,again\n");
    let b = d.file("b.csv", b.as_bytes());
    let (out, spill) = routed_load(&d, &[&a, &b], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_has(
        &stderr(&out),
        &["(id)=(1200)", "a.csv", "line 1200", "b.csv", "line 1201"],
    );
    assert_eq!(d.count("t"), 0);
    assert_eq!(leftovers(&d), 0);
    spill_is_gone(&spill);
}

/// Standard input into a partitioned table: planning must not read it (it is read once, by
/// the load), so every row arrives, direct, and the summary says why.
#[test]
fn standard_input_into_a_partitioned_table_loads_every_row() {
    use std::io::Write;
    let d = db("stage_stdin");
    three_partitions(&d, true);
    let mut c = sluice_cmd();
    c.args([
        "load", "--target", &d.url, "--table", "t", "--format", "csv", "-",
    ])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(rows(1, 2700).as_bytes()).unwrap();
    drop(pipe);
    let out = ok(&child.wait_with_output().unwrap());
    assert_has(&out, &["direct: - (table t): standard input is read once"]);
    assert_eq!(d.count("t"), 2699);
}
