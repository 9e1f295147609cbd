//! A full disk is not a bad row: the server's conditions (insufficient resources, I/O and
//! internal errors) end a load with exit 5 and the next step, never blame a line, never become
//! rejects; a row's faults (data exceptions, integrity violations, a trigger's RAISE, an
//! over-long index key) are bad rows naming their line; transient aborts are retried. Each
//! class of the README's table is raised for real: by a trigger, a tablespace on a small
//! tmpfs (root only), `temp_file_limit` during a staged index build. Real PostgreSQL.

mod common;

use common::{assert_has, db, stderr, Db};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `n` rows `id,text` from id `first`, each with about `width` bytes of text.
fn rows(first: u64, n: u64, width: usize) -> Vec<u8> {
    let pad = "x".repeat(width);
    let mut out = Vec::new();
    for i in first..first + n {
        out.extend_from_slice(format!("{i},{i}{pad}\n").as_bytes());
    }
    out
}

/// Loads `files` into `table`, quiet, two streams: (exit code, stderr).
fn load(d: &Db, table: &str, files: &[&Path], extra: &[&str]) -> (i32, String) {
    let mut args = vec!["--table", table, "--jobs", "2"];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = d.load(&args, &[], 300);
    (out.status.code().unwrap_or(-1), stderr(&out))
}

/// A message that blames no input line.
fn blames_no_line(err: &str) {
    assert!(
        !err.contains(", line ") && !err.contains("bad row"),
        "a server condition blamed a row:\n{err}"
    );
}

/// Whether the rejects file holds nothing (or was not written).
fn no_rejects(path: &Path) -> bool {
    std::fs::metadata(path).map_or(true, |m| m.len() == 0)
}

/// Table `tr` whose trigger raises the SQLSTATE in table `code` for the row `raise`; a
/// file of 1,000 rows with that row on line 500.
fn raising_table(d: &Db) -> PathBuf {
    d.psql(
        "CREATE TABLE code (state text); INSERT INTO code VALUES ('P0001'); \
         CREATE SEQUENCE once; \
         CREATE TABLE tr (id int, v text); \
         CREATE FUNCTION raise_it() RETURNS trigger LANGUAGE plpgsql AS $$ \
         DECLARE s text; BEGIN \
           SELECT state INTO s FROM code; \
           IF NEW.v = 'raise' AND (s <> '40001' OR nextval('once') = 1) THEN \
             RAISE EXCEPTION 'raised %', s USING ERRCODE = s; \
           END IF; RETURN NEW; END $$; \
         CREATE TRIGGER raise_it BEFORE INSERT ON tr FOR EACH ROW EXECUTE FUNCTION raise_it()",
    );
    let mut text = String::new();
    for i in 1..=1000 {
        let v = if i == 500 {
            "raise".to_string()
        } else {
            format!("v{i}")
        };
        text.push_str(&format!("{i},{v}\n"));
    }
    d.file("tr.csv", text.as_bytes())
}

/// Each class of the table, raised by a trigger on line 500: its exit code and words.
#[test]
fn each_sqlstate_class_has_its_kind_and_exit_code() {
    let d = db("conditions_classes");
    let file = raising_table(&d);
    let cases: [(&str, i32, &[&str]); 9] = [
        ("22023", 3, &["line 500", "raised 22023"]),
        ("23514", 3, &["line 500", "raised 23514"]),
        ("P0001", 3, &["line 500", "raised P0001"]),
        ("54000", 3, &["line 500", "raised 54000"]),
        (
            "53100",
            5,
            &["disk for tablespace", "is full", "no row is at fault"],
        ),
        ("53200", 5, &["ran out of memory", "no row is at fault"]),
        ("53300", 5, &["no free connection slot"]),
        ("58030", 5, &["I/O or system error", "server's log"]),
        ("XX000", 5, &["failed internally", "server's log"]),
    ];
    for (state, code, words) in cases {
        d.psql(&format!("UPDATE code SET state = '{state}'"));
        let (got, err) = load(&d, "tr", &[&file], &["--restart"]);
        assert_eq!(got, code, "{state}:\n{err}");
        assert_has(&err, words);
        if code == 5 {
            blames_no_line(&err);
            assert_has(&err, &["nothing was committed"]);
        }
        assert_eq!(d.count("tr"), 0, "{state}");
    }
    // Under --max-errors, a row's fault is a reject; the server's condition is not.
    let rejects = d.dir.join("r.csv");
    let r = rejects.to_str().unwrap();
    d.psql("UPDATE code SET state = '53100'");
    let (got, err) = load(&d, "tr", &[&file], &["--max-errors", "10%", "--rejects", r]);
    assert_eq!(got, 5, "{err}");
    blames_no_line(&err);
    assert!(no_rejects(&rejects), "a server condition became a reject");
    d.psql("UPDATE code SET state = '22023'");
    let (got, err) = load(
        &d,
        "tr",
        &[&file],
        &["--restart", "--max-errors", "10%", "--rejects", r],
    );
    assert_eq!(got, 6, "{err}");
    assert_eq!(d.count("tr"), 999);
    assert!(std::fs::read_to_string(&rejects).unwrap().contains("raise"));
}

/// A serialization failure passes: the stream's work runs again on a new connection within
/// `--retries`; with none left, exit 5 saying what aborted it.
#[test]
fn a_serialization_failure_is_retried_and_says_so() {
    let d = db("conditions_transient");
    let file = raising_table(&d);
    d.psql("UPDATE code SET state = '40001'");
    let (got, err) = load(&d, "tr", &[&file], &["--retries", "0"]);
    assert_eq!(got, 5, "{err}");
    assert_has(
        &err,
        &["aborted by the server", "raised 40001", "--retries 0"],
    );
    blames_no_line(&err);
    assert_eq!(d.count("tr"), 0);
    // The sequence has moved on: the trigger raises once, the retry loads every row.
    d.psql("SELECT setval('once', 1, false)");
    let (got, err) = load(&d, "tr", &[&file], &["--retries", "2"]);
    assert_eq!(got, 0, "{err}");
    assert_has(&err, &["aborted by the server", "retry 1 of 2"]);
    assert_eq!(d.count("tr"), 1000);
    assert_eq!(d.count("(SELECT DISTINCT id FROM tr) x"), 1000);
}

/// An index key over the btree's limit is one value's fault: a bad row naming its line.
#[test]
fn an_over_long_index_key_is_a_bad_row() {
    let d = db("conditions_long_key");
    d.psql("CREATE TABLE k (v text PRIMARY KEY)");
    // Pseudo-random letters, so that compression cannot bring the key under the limit.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let long: String = (0..6000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect();
    let file = d.file("k.csv", format!("a\n{long}\nc\n").as_bytes());
    let (got, err) = load(&d, "k", &[&file], &[]);
    assert_eq!(got, 3, "{err}");
    assert_has(&err, &["line 2", "index row size"]);
    let rejects = d.dir.join("k.rejects");
    let (got, err) = load(
        &d,
        "k",
        &[&file],
        &["--max-errors", "1", "--rejects", rejects.to_str().unwrap()],
    );
    assert_eq!(got, 6, "{err}");
    assert_eq!(d.count("k"), 2);
}

/// `temp_file_limit` stops the stage strategy's index build: exit 5 naming the setting.
#[test]
fn temp_file_limit_during_a_staged_index_build_is_the_servers_condition() {
    let d = db("conditions_temp_limit");
    d.psql(&format!(
        "CREATE TABLE p (id bigint NOT NULL, v text) PARTITION BY RANGE (id); \
         CREATE TABLE p0 PARTITION OF p FOR VALUES FROM (0) TO (1000000); \
         CREATE INDEX ON p (v); \
         ALTER DATABASE {} SET maintenance_work_mem = '1MB'; \
         ALTER DATABASE {} SET temp_file_limit = '64kB'",
        d.name, d.name
    ));
    let file = d.file("p0.csv", &rows(0, 100_000, 40));
    let (got, err) = load(&d, "p", &[&file], &["--strategy", "stage"]);
    assert_eq!(got, 5, "{err}");
    assert_has(&err, &["temp_file_limit", "ALTER ROLE"]);
    blames_no_line(&err);
    assert_eq!(d.count("p"), 0);
}

/// A tmpfs of `megabytes` mounted for the test server's tablespace, unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    /// `None`, having said why, where this process may not mount (not root).
    fn mount(dir: PathBuf, megabytes: u32) -> Option<SmallDisk> {
        std::fs::create_dir_all(&dir).unwrap();
        let ids = |flag: &str| {
            let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
            Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let (Some(uid), Some(gid)) = (ids("-u"), ids("-g")) else {
            eprintln!("SKIPPED: no `postgres` user to own the small disk");
            return None;
        };
        let opts = format!("size={megabytes}m,uid={uid},gid={gid},mode=0700");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(&dir)
            .status();
        match mounted {
            Ok(s) if s.success() => Some(SmallDisk { dir }),
            _ => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here (root is needed): the full-disk test \
                     did not run"
                );
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// A table in a tablespace on a 40 MB disk, loaded with more than that: exit 5 naming the
/// disk and the tablespace, no line blamed, nothing visible, no reject under --max-errors;
/// moved to a disk with room, the same command loads every row exactly once.
#[test]
fn a_full_disk_is_the_servers_condition_and_the_same_command_finishes_after() {
    let d = db("conditions_disk");
    let Some(disk) = SmallDisk::mount(d.dir.join("small"), 40) else {
        return;
    };
    d.psql(&format!(
        "CREATE TABLESPACE small_{} LOCATION '{}'",
        d.name,
        disk.dir.display()
    ));
    d.psql(&format!(
        "CREATE TABLE t (id bigint, v text) TABLESPACE small_{}",
        d.name
    ));
    let a = d.file("a.csv", &rows(0, 300_000, 100));
    let b = d.file("b.csv", &rows(300_000, 300_000, 100));
    let (got, err) = load(&d, "t", &[&a, &b], &[]);
    assert_eq!(got, 5, "{err}");
    assert_has(
        &err,
        &[
            &format!("disk for tablespace \"small_{}\" is full", d.name),
            "SET TABLESPACE",
            "nothing was committed",
        ],
    );
    blames_no_line(&err);
    assert_eq!(d.count("t"), 0);
    let rejects = d.dir.join("r.csv");
    let (got, err) = load(
        &d,
        "t",
        &[&a, &b],
        &[
            "--max-errors",
            "10%",
            "--rejects",
            rejects.to_str().unwrap(),
        ],
    );
    assert_eq!(got, 5, "{err}");
    blames_no_line(&err);
    assert!(no_rejects(&rejects), "a full disk became rejects");
    assert_eq!(d.count("t"), 0);
    d.psql("ALTER TABLE t SET TABLESPACE pg_default");
    let (got, err) = load(&d, "t", &[&a, &b], &[]);
    assert_eq!(got, 0, "{err}");
    assert_eq!(d.count("t"), 600_000);
    assert_eq!(d.count("(SELECT DISTINCT id FROM t) x"), 600_000);
    d.psql(&format!("DROP TABLE t; DROP TABLESPACE small_{}", d.name));
}
