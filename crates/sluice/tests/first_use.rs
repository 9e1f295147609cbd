//! A newcomer's first loads: inputs checked before any server starts, exit
//! codes as the README's table says, errors that name the table a file went to, counts people
//! can read, and mapping fields by the header's names. The `sluice pg` and `demo` items are in
//! private_cluster.rs, the help text in main.rs's unit tests.

mod common;

use common::{db, sluice_cmd, stderr};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-i13-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unreadable_inputs_exit_1_before_any_server_starts() {
    let root = temp_dir("inputs");
    let pg_dir = root.join("pg");
    let load = |input: &str| {
        sluice_cmd()
            .args(["load", "--table", "t", "--pg-dir"])
            .arg(&pg_dir)
            .arg(input)
            .output()
            .unwrap()
    };
    let missing = root.join("missing.csv");
    let out = load(missing.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("private PostgreSQL"),
        "{}",
        stderr(&out)
    );
    let out = load(root.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("is a directory"), "{}", stderr(&out));
    // A FIFO is refused at once, not waited on for a writer that never comes.
    let fifo = root.join("pipe.csv");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = load(fifo.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
    // A pattern that matches nothing names itself.
    let out = load(root.join("*.nothing").to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no file matches"), "{}", stderr(&out));
    assert!(!pg_dir.exists(), "no cluster was created for nothing");
}

#[test]
fn the_private_cluster_notice_is_short() {
    let root = temp_dir("notice");
    let pg_dir = root.join("pg");
    let f = root.join("t.csv");
    std::fs::write(&f, b"1\n").unwrap();
    // The table does not exist: the load fails after the notice, which is what we look at.
    let out = sluice_cmd()
        .args(["load", "--table", "t", "--pg-dir"])
        .arg(&pg_dir)
        .arg(&f)
        .output()
        .unwrap();
    let err = stderr(&out);
    let notice = err
        .lines()
        .find(|l| l.contains("private PostgreSQL"))
        .unwrap_or_else(|| panic!("no notice: {err}"));
    let expected = format!(
        "sluice: using the private PostgreSQL in {}",
        pg_dir.display()
    );
    assert!(notice.starts_with(&expected), "{notice}");
    assert!(
        notice.len() <= expected.len() + 15,
        "{} characters: {notice}",
        notice.len()
    );
    let _ = sluice_cmd()
        .args(["pg", "destroy", "--pg-dir"])
        .arg(&pg_dir)
        .output();
}

#[test]
fn errors_name_the_table_a_file_name_chose() {
    let d = db("names_table");
    d.psql("CREATE TABLE orders (id int)");
    let f = d.file("orders.csv", b"1\nx\n");
    let out = d.sluice(&["load", "-q", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("orders.csv -> table orders, line 2"),
        "{}",
        stderr(&out)
    );
    let g = d.file("nosuch.csv", b"1\n");
    let out = d.sluice(&["load", "-q", g.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nosuch.csv -> table nosuch: table nosuch does not exist"),
        "{}",
        stderr(&out)
    );
    // With --table the user named it: no arrow.
    let out = d.sluice(&["load", "-q", "--table", "orders", f.to_str().unwrap()]);
    assert!(!stderr(&out).contains("->"), "{}", stderr(&out));
}

#[test]
fn summary_counts_have_thousands_separators_and_json_stays_plain() {
    let d = db("thousands");
    d.psql("CREATE TABLE t (id int)");
    let rows: String = (1..=12_345).map(|i| format!("{i}\n")).collect();
    let f = d.file("t.csv", rows.as_bytes());
    let json = d.dir.join("report.json");
    let out = d.sluice_ok(&[
        "load",
        "-q",
        "--table",
        "t",
        "--report-json",
        json.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert!(out.contains("12,345"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["total"]["rows"], 12_345);
    assert_eq!(report["strategy"], "direct");
}

#[test]
fn match_header_maps_fields_by_name_like_psql_header_match() {
    let d = db("match_header");
    d.psql(
        "CREATE TABLE people (id int, name text, born date, note text DEFAULT 'none'); \
         CREATE TABLE ref (LIKE people INCLUDING DEFAULTS)",
    );
    let f = d.file(
        "people.csv",
        b"name,id,born\nAda,1,1815-12-10\nAlan,2,1912-06-23\n",
    );
    d.sluice_ok(&[
        "load",
        "-q",
        "--table",
        "people",
        "--header",
        "--match-header",
        f.to_str().unwrap(),
    ]);
    // PostgreSQL's own HEADER MATCH, given the same column list.
    d.psql_copy("ref(name, id, born)", &f, "format csv, header match")
        .unwrap();
    d.assert_same_rows("people", "ref");
    // Case differences match when only one column fits; the header is data, not SQL.
    d.psql("TRUNCATE people");
    let g = d.file("people2.csv", b"Name,ID\nGrace,3\n");
    d.sluice_ok(&[
        "load",
        "-q",
        "--table",
        "people",
        "--header",
        "--match-header",
        g.to_str().unwrap(),
    ]);
    assert_eq!(
        d.psql("SELECT id, name, born IS NULL, note FROM people")
            .trim(),
        "3|Grace|t|none"
    );
    // A name that is no column, and files whose headers differ: usage errors.
    let bad = d.file("bad.csv", b"nom,id\nx,1\n");
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "people",
        "--header",
        "--match-header",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("names \"nom\""), "{}", stderr(&out));
    let out = d.sluice(&[
        "load",
        "-q",
        "--table",
        "people",
        "--header",
        "--match-header",
        f.to_str().unwrap(),
        g.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("have different headers"),
        "{}",
        stderr(&out)
    );
    // Without --header it is refused by the flags themselves.
    let out = d.sluice(&[
        "load",
        "--table",
        "people",
        "--match-header",
        f.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// Every command's failures leave with the README's exit codes (decided in main.rs alone).
#[test]
fn every_command_maps_failures_to_the_readme_exit_codes() {
    let root = temp_dir("codes");
    let code = |args: &[&str]| {
        let out = sluice_cmd().args(args).output().unwrap();
        (out.status.code(), stderr(&out))
    };
    // gen: a bad flag is usage; an output that cannot be written is a local failure.
    let (c, e) = code(&[
        "gen", "tpch", "--scale", "0.01", "--tables", "nope", "--out", "x",
    ]);
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("not a TPC-H table"), "{e}");
    let file = root.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = file.join("sub");
    let (c, e) = code(&[
        "gen",
        "tpch",
        "--scale",
        "0.01",
        "--tables",
        "nation",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(c, Some(1), "{e}");
    // ddl: tables that exist already are the user's call (usage), not a server failure.
    let d = db("codes_ddl");
    let ddl = |extra: &[&str]| {
        let mut c = sluice_cmd();
        c.args(["ddl", "tpch", "--create", "--target", &d.url])
            .args(extra);
        let out = c.output().unwrap();
        (out.status.code(), stderr(&out))
    };
    assert_eq!(ddl(&[]).0, Some(0));
    let (c, e) = ddl(&[]);
    assert_eq!(c, Some(2), "tables exist already: {e}");
    assert!(
        e.contains("already exist") && e.contains("--replace"),
        "{e}"
    );
    // A malformed target is usage for every command that connects.
    let out = sluice_cmd()
        .args([
            "ddl",
            "tpch",
            "--create",
            "--target",
            "postgresql://h:port/x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
