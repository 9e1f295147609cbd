//! Test harness for MariaDB: one private server per test binary (`mariadb-install-db` in a temp
//! dir, `mariadbd` on a free port of 127.0.0.1, as `mysql` when the tests run as root, with the
//! bulk-load settings), a fresh database per test, and helpers to run sluice and the server's
//! own `LOAD DATA INFILE` side by side. Never a mock. The server is stopped and its directory
//! deleted when the test binary exits.

#![allow(dead_code)]

use sluice_mariadb::cluster::{bulk_load_settings, Cluster};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

pub struct Maria {
    pub cluster: Cluster,
    pub port: u16,
}

static MARIA: OnceLock<Maria> = OnceLock::new();

extern "C" fn stop_server() {
    if let Some(m) = MARIA.get() {
        m.cluster.destroy();
    }
}

/// The binary's shared server, started on first use.
pub fn maria() -> &'static Maria {
    MARIA.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("sluice-mariadb-test-{}", std::process::id()));
        let cluster = Cluster::new(&root).expect("a directory for the server");
        cluster.init().expect("mariadb-install-db");
        let mut settings = bulk_load_settings();
        // A test server: small memory.
        for (k, v) in settings.iter_mut() {
            match k.as_str() {
                "innodb_buffer_pool_size" => *v = "256M".into(),
                "innodb_log_file_size" => *v = "256M".into(),
                _ => {}
            }
        }
        // A fixed zone, so that a TIMESTAMP's range is exact whatever the machine's zone.
        settings.push(("default_time_zone".into(), "+00:00".into()));
        let port = cluster.start(&settings).expect("start the test server");
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe {
            libc::atexit(stop_server);
        }
        Maria { cluster, port }
    })
}

static DB_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh database for one test, with a directory the server may read (for its own
/// `LOAD DATA INFILE`).
pub struct MDb {
    pub name: String,
    /// `mariadb://sluice:PASSWORD@127.0.0.1:PORT/name`.
    pub url: String,
    pub dir: PathBuf,
}

pub fn mdb(test: &str) -> MDb {
    let m = maria();
    let name = format!(
        "{}_{}",
        test.to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        DB_SEQ.fetch_add(1, Ordering::SeqCst)
    );
    m.cluster
        .root_sql(&format!(
            "DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"
        ))
        .unwrap();
    let dir = m.cluster.dir.join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    MDb {
        url: m.cluster.url(&name).unwrap(),
        name,
        dir,
    }
}

impl MDb {
    /// Runs SQL as root in this database; the tab-separated rows it printed.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        maria()
            .cluster
            .root_sql(&format!("USE {}; {sql}", self.name))
            .map_err(|e| e.to_string())
    }

    pub fn count(&self, table: &str) -> u64 {
        self.sql(&format!("SELECT COUNT(*) FROM {table}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// The prepared XA transactions of this database (`XA RECOVER` lists the whole server's;
    /// sluice names each branch's qualifier after its database).
    pub fn prepared(&self) -> u64 {
        let listed = self.sql("XA RECOVER");
        let ours = listed.lines().filter(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let (Some(g), Some(b), Some(data)) = (f.get(1), f.get(2), f.get(3)) else {
                return false;
            };
            let (g, b): (usize, usize) = (g.parse().unwrap(), b.parse().unwrap());
            data.get(g..g + b) == Some(self.name.as_str())
        });
        ours.count() as u64
    }

    /// Asserts that two tables hold the same rows, duplicates counted.
    pub fn assert_same_rows(&self, a: &str, b: &str) {
        let diff = self.sql(&format!(
            "SELECT COUNT(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) x; \
             SELECT COUNT(*) FROM (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a}) y"
        ));
        assert_eq!(
            diff.split_whitespace().collect::<Vec<_>>(),
            ["0", "0"],
            "{a} and {b} differ"
        );
        assert_eq!(self.count(a), self.count(b), "row counts of {a} and {b}");
    }

    /// The server's own strict `LOAD DATA INFILE` (server-side, so not IGNORE) of `file`,
    /// fields separated by `delimiter`: the reference loader.
    pub fn server_load(&self, table: &str, file: &Path, delimiter: &str) -> Result<(), String> {
        self.try_sql(&format!(
            "LOAD DATA INFILE '{}' INTO TABLE {table} CHARACTER SET utf8mb4 \
             FIELDS TERMINATED BY '{delimiter}' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'",
            file.display()
        ))
        .map(drop)
    }

    /// `sluice load -q --target <this db> ARGS` with `env`, failing the test (a hang) after
    /// `secs` seconds.
    pub fn load(&self, args: &[&str], env: &[(&str, &str)], secs: u64) -> Output {
        let mut c = super::sluice_cmd();
        c.args(["load", "-q", "--target", &self.url]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        super::run_bounded(c, secs)
    }

    /// Writes a file in this test's directory.
    pub fn file(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// The password of the server's test user (to look for it in output).
    pub fn password(&self) -> &'static str {
        &maria().cluster.password
    }
}
