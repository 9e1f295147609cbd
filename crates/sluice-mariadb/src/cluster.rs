//! A private MariaDB server in a directory, for tests (and, later, `sluice demo`): the same
//! idea as the PostgreSQL destination's private cluster. `mariadb-install-db` makes the data
//! directory, `mariadbd` serves it on a free port of 127.0.0.1 (as the `mysql` user when run
//! as root, which the server requires), with the bulk-load settings of [`bulk_load_settings`]
//! (the one list, `bulk-load.cnf`). A user with a password is made for the tests, so that the
//! password conventions are exercised for real.
//!
//! Every wait is bounded: the server must answer within [`START_WAIT`], and stopping it ends
//! with SIGKILL if a clean shutdown takes longer than [`STOP_WAIT`].

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the server may take to accept connections.
pub const START_WAIT: Duration = Duration::from_secs(60);
/// How long a clean shutdown may take before the server is killed.
pub const STOP_WAIT: Duration = Duration::from_secs(30);

/// Why the private server could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "MariaDB's server is not installed ({0}); run scripts/ensure-mariadb.sh or install the \
         mariadb-server and mariadb-client packages"
    )]
    NotInstalled(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Failed(String),
}

fn io(what: &str, source: std::io::Error) -> ClusterError {
    ClusterError::Io {
        what: what.to_string(),
        source,
    }
}

/// The server settings for bulk loading (`mariadbd --name=value`), from the one list in
/// `bulk-load.cnf` (which says why each is there; `bench/mariadb-local` reads the same file).
pub fn bulk_load_settings() -> Vec<(String, String)> {
    parse_settings(BULK_LOAD_CNF)
}

/// The one list of bulk-load settings, as an option file.
pub const BULK_LOAD_CNF: &str = include_str!("bulk-load.cnf");

/// `name = value` and bare `name` lines of an option file (sections and comments skipped).
fn parse_settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| match l.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (l.to_string(), String::new()),
        })
        .collect()
}

/// The user and password the private server's loads connect with.
pub const USER: &str = "sluice";

/// A private server: its directory, and the process while it runs.
pub struct Cluster {
    pub dir: PathBuf,
    /// The password of [`USER`] (made up per server, so that tests can look for it in output).
    pub password: String,
    child: Mutex<Option<Child>>,
    port: Mutex<Option<u16>>,
}

/// A MariaDB program, from `PATH` or `/usr/sbin` (where Debian puts the server).
pub fn program(name: &str) -> Result<PathBuf, ClusterError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| ClusterError::NotInstalled(format!("no {name}")))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Cluster {
    /// A server to be made in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Cluster, ClusterError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| io("creating the server's directory", e))?;
        let password = format!("pw-{}-{}", std::process::id(), nanos() % 1_000_000_007);
        Ok(Cluster {
            dir,
            password,
            child: Mutex::new(None),
            port: Mutex::new(None),
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("mariadb.sock")
    }

    /// The port it listens on, once started.
    pub fn port(&self) -> Option<u16> {
        *self.port.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `mariadb://sluice:PASSWORD@127.0.0.1:PORT/DB`.
    pub fn url(&self, database: &str) -> Option<String> {
        Some(format!(
            "mariadb://{USER}:{}@127.0.0.1:{}/{database}",
            self.password,
            self.port()?
        ))
    }

    /// Whether the data directory was made already (by an earlier [`Cluster::init`]).
    pub fn initialized(&self) -> bool {
        self.data().join("mysql").is_dir()
    }

    /// Makes the data directory (`mariadb-install-db`), owned by `mysql` when root.
    pub fn init(&self) -> Result<(), ClusterError> {
        let install = program("mariadb-install-db")?;
        if is_root() {
            chown_mysql(&self.dir)?;
        }
        let mut cmd = Command::new(install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data().display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            // Passed on to the bootstrap server, whose temporary tables another server starting
            // up in a shared `/tmp` would delete (see [`Cluster::temp`]).
            .arg(format!("--tmpdir={}", self.temp()?.display()));
        if is_root() {
            cmd.arg("--user=mysql");
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io("running mariadb-install-db", e))?;
        if !out.status.success() {
            return Err(ClusterError::Failed(format!(
                "mariadb-install-db failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Starts the server with `settings` on a free port, waits until it answers, and makes
    /// [`USER`] with every privilege. Returns the port.
    pub fn start(&self, settings: &[(String, String)]) -> Result<u16, ClusterError> {
        let server = program("mariadbd")?;
        let port = free_port()?;
        let mut cmd = Command::new(server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data().display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mariadb.pid").display()
            ))
            .arg(format!("--log-error={}", self.log().display()))
            .arg(format!("--secure-file-priv={}", self.dir.display()))
            .arg(format!("--tmpdir={}", self.temp()?.display()));
        if is_root() {
            cmd.arg("--user=mysql");
        }
        for (k, v) in settings {
            match v.is_empty() {
                true => cmd.arg(format!("--{k}")),
                false => cmd.arg(format!("--{k}={v}")),
            };
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io("starting mariadbd", e))?;
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        *self.port.lock().unwrap_or_else(|e| e.into_inner()) = Some(port);
        self.wait_ready()?;
        self.root_sql(&format!(
            "CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{pw}'; \
             ALTER USER '{USER}'@'%' IDENTIFIED BY '{pw}'; \
             GRANT ALL ON *.* TO '{USER}'@'%' WITH GRANT OPTION;",
            pw = self.password
        ))?;
        Ok(port)
    }

    /// The server's own temporary directory: a server starting up deletes every `#sql*` file
    /// of its tmpdir, which in a shared `/tmp` are another running server's temporary tables.
    fn temp(&self) -> Result<PathBuf, ClusterError> {
        let dir = self.dir.join("tmp");
        std::fs::create_dir_all(&dir).map_err(|e| io("creating the server's tmpdir", e))?;
        if is_root() {
            chown_mysql(&dir)?;
        }
        Ok(dir)
    }

    /// The server's error log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("mariadb.err")
    }

    fn wait_ready(&self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + START_WAIT;
        loop {
            if self.root_sql("SELECT 1").is_ok() {
                return Ok(());
            }
            if let Some(c) = self
                .child
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(ClusterError::Failed(format!(
                        "mariadbd exited ({status}) before accepting connections: {}",
                        tail(&self.log())
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(ClusterError::Failed(format!(
                    "mariadbd did not accept connections within {} s: {}",
                    START_WAIT.as_secs(),
                    tail(&self.log())
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs SQL as the server's root through its socket, with the `mariadb` client.
    pub fn root_sql(&self, sql: &str) -> Result<String, ClusterError> {
        let client = program("mariadb")?;
        let out = Command::new(client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "--batch", "--skip-column-names", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io("running mariadb", e))?;
        if !out.status.success() {
            return Err(ClusterError::Failed(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the server: a clean shutdown, then SIGKILL after [`STOP_WAIT`].
    pub fn stop(&self) {
        let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        // SAFETY: sending SIGTERM to the child this struct started.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the server and deletes its directory.
    pub fn destroy(&self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

fn chown_mysql(dir: &Path) -> Result<(), ClusterError> {
    let out = Command::new("chown")
        .args(["-R", "mysql:mysql"])
        .arg(dir)
        .output()
        .map_err(|e| io("chown mysql", e))?;
    if !out.status.success() {
        return Err(ClusterError::Failed(format!(
            "cannot give {} to the mysql user: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

fn nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> Result<u16, ClusterError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("finding a free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| io("finding a free port", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_list_of_bulk_settings_parses() {
        let s = bulk_load_settings();
        assert!(s.contains(&("innodb_flush_log_at_trx_commit".into(), "2".into())));
        assert!(s.contains(&("skip_log_bin".into(), String::new())));
        assert!(s.contains(&("local_infile".into(), "1".into())));
    }
}
