//! A private PostgreSQL cluster in a directory: sluice's embedded default and its test server.
//!
//! sluice finds PostgreSQL's server binaries (`pg_config --bindir`, then
//! `/usr/lib/postgresql/*/bin` newest first, then `PATH`), runs `initdb` into a directory,
//! and serves it on a free port on 127.0.0.1 only, over TCP alone: no Unix socket, so no system
//! path is touched and a deep directory does not hit the 107-byte socket path limit. PostgreSQL refuses to run as root, so when sluice runs as root the
//! server runs as the `postgres` user, which then owns the directory.
//!
//! Starting is idempotent: a running cluster is reused, and a `postmaster.pid` left by a crash
//! (`kill -9`) is recognised as stale and cleared before the server starts and recovers. The
//! port is kept in `sluice.port` so that the cluster keeps its URL across restarts.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The superuser and database of every private cluster.
pub const USER: &str = "sluice";
pub const DATABASE: &str = "sluice";

/// Why a cluster could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL's server binaries (initdb, pg_ctl, postgres) were not found in \
         `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH. Install them, for example \
         with `apt-get install postgresql` (Debian/Ubuntu), `dnf install postgresql-server` \
         (Fedora) or `brew install postgresql` (macOS), or give --target to use an existing \
         server."
    )]
    NoBinaries,
    #[error("running as root, but there is no `postgres` user to run the server as (PostgreSQL refuses to run as root): create one with `useradd --system postgres`")]
    NoPostgresUser,
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{0}")]
    Io(String),
}

fn io(context: &str, e: std::io::Error) -> ClusterError {
    ClusterError::Io(format!("{context}: {e}"))
}

/// The OS account the server runs as.
#[derive(Clone, Debug)]
struct RunAs {
    uid: u32,
    gid: u32,
}

fn postgres_account() -> Option<RunAs> {
    let name = std::ffi::CString::new("postgres").ok()?;
    // SAFETY: getpwnam receives a valid NUL-terminated string and returns static storage or
    // null; the fields are copied out immediately.
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return None;
        }
        Some(RunAs {
            uid: (*pw).pw_uid,
            gid: (*pw).pw_gid,
        })
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Finds the directory holding `initdb`, `pg_ctl` and `postgres`: `$SLUICE_PG_BIN` alone when
/// set (to choose a version), else `pg_config --bindir`, `/usr/lib/postgresql/*/bin` newest
/// first, then `PATH`.
pub fn find_bindir() -> Result<PathBuf, ClusterError> {
    let has_all = |d: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("SLUICE_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has_all(&dir) {
            Ok(dir)
        } else {
            Err(ClusterError::NoBinaries)
        };
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if has_all(&d) {
                return Ok(d);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.0));
    if let Some((_, d)) = versions.into_iter().find(|(_, d)| has_all(d)) {
        return Ok(d);
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(d) = std::env::split_paths(&path).find(|d| has_all(d)) {
            return Ok(d);
        }
    }
    Err(ClusterError::NoBinaries)
}

/// Server settings for a private cluster, written to `postgresql.auto.conf` at init: the one
/// list of bulk-load settings, used by `sluice pg`, `demo`, the tests and `bench`.
pub fn bulk_load_settings() -> Vec<(String, String)> {
    [
        ("shared_buffers", "1GB"),
        ("max_wal_size", "16GB"),
        ("checkpoint_timeout", "30min"),
        ("wal_level", "replica"),
        ("maintenance_work_mem", "1GB"),
        ("max_connections", "100"),
        // Two-phase commit of the streams (`sluice load --prepare`): one per stream and more.
        ("max_prepared_transactions", "64"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// [`bulk_load_settings`] with `wal_level = minimal` (no WAL for tables created in the
/// loading transaction), which needs `max_wal_senders = 0`.
pub fn minimal_wal_settings() -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = bulk_load_settings()
        .into_iter()
        .filter(|(k, _)| k != "wal_level")
        .collect();
    s.push(("wal_level".into(), "minimal".into()));
    s.push(("max_wal_senders".into(), "0".into()));
    s
}

/// A cluster directory and the binaries that serve it.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub dir: PathBuf,
    pub bindir: PathBuf,
    run_as: Option<RunAs>,
}

/// What `status` finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// No cluster in the directory.
    Absent,
    Stopped,
    Running {
        port: u16,
        pid: u32,
    },
}

impl Cluster {
    /// Describes the cluster at `dir` (which may not exist yet).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Cluster, ClusterError> {
        let bindir = find_bindir()?;
        let run_as = if is_root() {
            Some(postgres_account().ok_or(ClusterError::NoPostgresUser)?)
        } else {
            None
        };
        // Absolute, because the server's commands run with the cluster as working directory.
        let dir: PathBuf = dir.into();
        let dir =
            std::path::absolute(&dir).map_err(|e| io("resolving the cluster directory", e))?;
        Ok(Cluster {
            dir,
            bindir,
            run_as,
        })
    }

    /// Whether the server process runs as another account (`postgres`, when sluice is root).
    pub fn runs_as_postgres(&self) -> bool {
        self.run_as.is_some()
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bindir.join(program));
        if let Some(r) = &self.run_as {
            use std::os::unix::process::CommandExt;
            c.uid(r.uid).gid(r.gid);
            c.env("HOME", &self.dir);
            // The postgres account may not be allowed into the caller's working directory.
            c.current_dir(&self.dir);
        }
        c.env_remove("PGDATA");
        c
    }

    fn run(&self, what: &str, mut cmd: Command) -> Result<Output, ClusterError> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io(&format!("starting {what}"), e))?;
        if !out.status.success() {
            let mut detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if detail.is_empty() {
                detail = String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
            return Err(ClusterError::Command {
                what: what.to_string(),
                detail,
            });
        }
        Ok(out)
    }

    fn initialized(&self) -> bool {
        self.dir.join("PG_VERSION").is_file()
    }

    fn port_file(&self) -> PathBuf {
        self.dir.join("sluice.port")
    }

    /// The port this cluster listens on (chosen at init).
    pub fn port(&self) -> Option<u16> {
        fs::read_to_string(self.port_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The connection URL (no password: the cluster trusts local connections).
    pub fn url(&self) -> Option<String> {
        Some(format!(
            "postgresql://{USER}@127.0.0.1:{}/{DATABASE}?sslmode=disable",
            self.port()?
        ))
    }

    /// Creates the cluster if the directory holds none. `settings` go to
    /// `postgresql.auto.conf`; the rest is PostgreSQL's default.
    pub fn init(&self, settings: &[(String, String)]) -> Result<(), ClusterError> {
        if self.initialized() {
            return Ok(());
        }
        fs::create_dir_all(&self.dir).map_err(|e| io("creating the cluster directory", e))?;
        if let Some(r) = &self.run_as {
            // Let the postgres account reach and own the directory.
            chown(&self.dir, r)?;
            for parent in self.dir.ancestors().skip(1) {
                allow_traverse(parent);
            }
        }
        let result = self.init_inner(settings);
        if result.is_err() {
            // Leave nothing half-made: a failed initdb would make the next start fail too.
            let _ = fs::remove_dir_all(&self.dir);
        }
        result
    }

    fn init_inner(&self, settings: &[(String, String)]) -> Result<(), ClusterError> {
        let mut cmd = self.command("initdb");
        cmd.arg("-D").arg(&self.dir).args([
            "-U",
            USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        self.run("initdb", cmd)?;
        let port = free_port()?;
        let mut conf = String::from("# Written by sluice for a private bulk-loading cluster.\n");
        conf.push_str("listen_addresses = '127.0.0.1'\n");
        conf.push_str(&format!("port = {port}\n"));
        // TCP only: a Unix socket path is limited to 107 bytes, which a deep cluster directory
        // exceeds, and nothing here needs one (sluice and `sluice pg psql` use 127.0.0.1).
        conf.push_str("unix_socket_directories = ''\n");
        for (k, v) in settings {
            conf.push_str(&format!("{k} = '{v}'\n"));
        }
        let auto = self.dir.join("postgresql.auto.conf");
        let mut text = fs::read_to_string(&auto).unwrap_or_default();
        text.push_str(&conf);
        fs::write(&auto, text).map_err(|e| io("writing postgresql.auto.conf", e))?;
        fs::write(self.port_file(), format!("{port}\n")).map_err(|e| io("writing the port", e))?;
        if let Some(r) = &self.run_as {
            chown(&auto, r)?;
            chown(&self.port_file(), r)?;
        }
        Ok(())
    }

    /// The settings the cluster was initialised with, as `name = value` lines.
    pub fn settings_text(&self) -> String {
        let text = fs::read_to_string(self.dir.join("postgresql.auto.conf")).unwrap_or_default();
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Reads `postmaster.pid`: the postmaster's PID, when the file exists.
    pub fn pid_file_pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Whether `pid` is a live postgres server process.
    fn is_postgres_process(pid: u32) -> bool {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let comm = comm.trim();
        // A zombie is dead for our purposes.
        let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        (comm == "postgres" || comm == "postmaster") && !zombie
    }

    pub fn status(&self) -> Status {
        if !self.initialized() {
            return Status::Absent;
        }
        match (self.pid_file_pid(), self.port()) {
            (Some(pid), Some(port)) if Self::is_postgres_process(pid) => {
                Status::Running { port, pid }
            }
            _ => Status::Stopped,
        }
    }

    /// Starts the server unless it runs already; clears a stale `postmaster.pid` first.
    pub fn start(&self) -> Result<u16, ClusterError> {
        if let Status::Running { port, .. } = self.status() {
            return Ok(port);
        }
        if !self.initialized() {
            return Err(ClusterError::Io(format!(
                "no cluster in {}: run `sluice pg start` to create one",
                self.dir.display()
            )));
        }
        let pidfile = self.dir.join("postmaster.pid");
        if pidfile.exists() {
            // The postmaster is gone (crash, kill -9): wait for orphaned backends to exit so
            // the shared memory is released, then drop the stale lock.
            if let Some(pid) = self.pid_file_pid() {
                let deadline = Instant::now() + Duration::from_secs(10);
                while Self::is_postgres_process(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            let _ = fs::remove_file(&pidfile);
        }
        let log = self.dir.join("server.log");
        let start_command = || {
            let mut cmd = self.command("pg_ctl");
            cmd.arg("start")
                .arg("-w")
                .args(["-t", "120"])
                .arg("-D")
                .arg(&self.dir)
                .arg("-l")
                .arg(&log)
                .stdout(Stdio::null());
            cmd
        };
        let mut last = None;
        // Orphaned backends of a killed server can hold shared memory for a moment.
        for attempt in 0..5 {
            match self.run("pg_ctl start", start_command()) {
                Ok(_) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(500 * (attempt + 1)));
                }
            }
        }
        if let Some(ClusterError::Command { what, detail }) = last {
            let tail = fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(ClusterError::Command {
                what,
                detail: format!(
                    "{detail}\nserver log ({}):\n{}",
                    log.display(),
                    tail.join("\n")
                ),
            });
        } else if let Some(e) = last {
            return Err(e);
        }
        let port = self
            .port()
            .ok_or_else(|| ClusterError::Io("port file vanished".into()))?;
        self.ensure_database()?;
        Ok(port)
    }

    fn ensure_database(&self) -> Result<(), ClusterError> {
        let psql = self.bindir.join("psql");
        let port = self.port().unwrap_or(5432).to_string();
        let query = |sql: &str| {
            Command::new(&psql)
                .args(["-h", "127.0.0.1", "-p", &port, "-U", USER, "-d", "postgres"])
                .args(["-XAtqc", sql])
                .env_remove("PGPASSWORD")
                .stdin(Stdio::null())
                .output()
        };
        let out = query(&format!(
            "SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"
        ))
        .map_err(|e| io("running psql", e))?;
        if String::from_utf8_lossy(&out.stdout).trim() != "1" {
            let out =
                query(&format!("CREATE DATABASE {DATABASE}")).map_err(|e| io("running psql", e))?;
            if !out.status.success() {
                return Err(ClusterError::Command {
                    what: "CREATE DATABASE".into(),
                    detail: String::from_utf8_lossy(&out.stderr).into(),
                });
            }
        }
        Ok(())
    }

    /// Stops the server (fast shutdown) if it runs.
    pub fn stop(&self) -> Result<(), ClusterError> {
        if !matches!(self.status(), Status::Running { .. }) {
            return Ok(());
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("stop")
            .arg("-w")
            .args(["-m", "fast"])
            .arg("-D")
            .arg(&self.dir)
            .stdout(Stdio::null());
        self.run("pg_ctl stop", cmd).map(drop)
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`): no checkpoint, every
    /// connection cut; the next start recovers from the WAL. For tests of what survives it.
    pub fn stop_immediately(&self) -> Result<(), ClusterError> {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("stop")
            .arg("-w")
            .args(["-m", "immediate"])
            .arg("-D")
            .arg(&self.dir)
            .stdout(Stdio::null());
        self.run("pg_ctl stop -m immediate", cmd).map(drop)
    }

    /// Stops the server and deletes the directory.
    /// Whether the directory holds a cluster sluice made (so that removing it is safe).
    pub fn is_sluice_cluster(&self) -> bool {
        self.port_file().exists() || self.initialized()
    }

    pub fn destroy(&self) -> Result<(), ClusterError> {
        let _ = self.stop();
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).map_err(|e| io("removing the cluster", e))?;
        }
        Ok(())
    }
}

fn chown(path: &Path, r: &RunAs) -> Result<(), ClusterError> {
    std::os::unix::fs::chown(path, Some(r.uid), Some(r.gid))
        .map_err(|e| io(&format!("chown {}", path.display()), e))
}

/// Adds o+x to a directory so the postgres account can reach a cluster below it.
fn allow_traverse(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(dir) {
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o001));
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> Result<u16, ClusterError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("finding a free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| io("finding a free port", e))
}
