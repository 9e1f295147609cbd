//! Which server a command talks to: the one named by `--target` or the environment, or else
//! sluice's own private cluster, started on demand.

use sluice_mariadb::conninfo::is_mariadb_target;
use sluice_postgres::cluster::{bulk_load_settings, Cluster, Status};
use sluice_postgres::conninfo::{ConnInfo, ProcessEnv};
use std::path::PathBuf;

/// The private cluster's directory: `--pg-dir`, `$SLUICE_PG_DIR`, else under the user's data
/// directory (`/var/lib/sluice/pg` for root, whose home the `postgres` account cannot enter).
pub fn default_pg_dir(given: Option<PathBuf>) -> PathBuf {
    if let Some(d) = given {
        return d;
    }
    if let Some(d) = std::env::var_os("SLUICE_PG_DIR") {
        return PathBuf::from(d);
    }
    builtin_pg_dir()
}

/// Where the private cluster lives when neither `--pg-dir` nor `$SLUICE_PG_DIR` says: where a
/// `sluice pg` typed in a fresh shell looks.
pub fn builtin_pg_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/sluice/pg");
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("sluice/pg")
}

/// Whether the environment names a server (so the private cluster is not used).
fn environment_names_server() -> bool {
    ["PGHOST", "PGDATABASE", "DATABASE_URL", "PGSERVICE"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
}

/// Whether resolving this target may start a server: the private cluster, when it does not
/// run now. A load checks its inputs before anything that may (a mistyped file name never
/// starts a server), and otherwise while its first connection describes the tables.
pub fn may_start_server(target: Option<&str>, pg_dir: Option<PathBuf>) -> bool {
    let explicit =
        target.is_some() || std::env::var_os("DATABASE_URL").is_some_and(|v| !v.is_empty());
    if explicit || environment_names_server() {
        return false;
    }
    Cluster::new(default_pg_dir(pg_dir))
        .map_or(true, |c| !matches!(c.status(), Status::Running { .. }))
}

/// A target string or environment that does not parse (a usage error, not a failure to
/// connect).
#[derive(Debug, thiserror::Error)]
#[error("bad connection target: {0}")]
pub struct BadTarget(pub String);

/// Where a command connects.
pub struct Target {
    pub info: ConnInfo,
}

/// Resolves `--target`, then the environment, then the private cluster (started if needed).
pub fn resolve(
    target: Option<&str>,
    pg_dir: Option<PathBuf>,
    quiet: bool,
) -> anyhow::Result<Target> {
    let explicit = target
        .map(str::to_string)
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()));
    if explicit.as_deref().is_some_and(is_mariadb_target) {
        return Err(BadTarget(
            "this command is not on MariaDB yet (`sluice load` and `sluice jobs` are): it \
             takes a PostgreSQL target"
                .into(),
        )
        .into());
    }
    if explicit.is_some() || environment_names_server() {
        let info =
            ConnInfo::resolve(explicit.as_deref().unwrap_or(""), &ProcessEnv).map_err(BadTarget)?;
        for w in &info.warnings {
            eprintln!("warning: {w}");
        }
        return Ok(Target { info });
    }
    let dir = default_pg_dir(pg_dir);
    let cluster = Cluster::new(&dir)?;
    cluster.init(&bulk_load_settings())?;
    let port = cluster.start()?;
    if !quiet {
        eprintln!(
            "sluice: using the private PostgreSQL in {} (port {port})",
            dir.display()
        );
    }
    let url = cluster
        .url()
        .ok_or_else(|| anyhow::anyhow!("the private cluster has no port"))?;
    let info = ConnInfo::resolve(&url, &ProcessEnv).map_err(|e| anyhow::anyhow!(e))?;
    Ok(Target { info })
}

/// The MariaDB target a command names, if it names one: `--target`, else `DATABASE_URL`, when
/// it starts with `mariadb://` or `mysql://`.
pub fn mariadb_target(target: Option<&str>) -> Option<String> {
    let explicit = target
        .map(str::to_string)
        .or_else(|| std::env::var("DATABASE_URL").ok().filter(|v| !v.is_empty()))?;
    is_mariadb_target(&explicit).then_some(explicit)
}

/// Resolves a MariaDB target with the client's conventions (`~/.my.cnf`, `MYSQL_*`), printing
/// what the user should know about how (never the password).
pub fn resolve_mariadb(target: &str) -> anyhow::Result<sluice_mariadb::conninfo::ConnInfo> {
    let info =
        sluice_mariadb::conninfo::ConnInfo::resolve(target, &sluice_mariadb::conninfo::ProcessEnv)
            .map_err(BadTarget)?;
    for w in &info.warnings {
        eprintln!("warning: {w}");
    }
    Ok(info)
}
