//! The target's scheme chooses the destination, here and nowhere else: `mariadb://` and
//! `mysql://` (in `--target` or `DATABASE_URL`) open MariaDB; `postgresql://`, `postgres://`
//! and key=value strings (or none: libpq's variables, else the private cluster) open
//! PostgreSQL. Every command that loads or reads a ledger (`load`, `jobs`,
//! `probe`) opens its destination through [`open`], and reaches it through [`Opened`]: a
//! command written once works on every destination.

use crate::failure::Failure;
use crate::target;
use sluice_core::destination::{Ledger, Staging};
use sluice_engine::events::Host;
use sluice_engine::report::Report;
use sluice_engine::LoadSpec;
use sluice_mariadb::destination::MariaDbDestination;
use sluice_postgres::destination::{OpenError, PgDestination};
use sluice_postgres::network::{Sizing, SocketBuffer};
use std::path::PathBuf;
use std::sync::Arc;

/// An open destination, of whichever database the target named.
pub enum Opened {
    Postgres(Box<PgDestination>),
    MariaDb(Box<MariaDbDestination>),
}

/// Something a command does with a destination whose type it need not know.
pub trait WithDestination<R> {
    fn call<D: Ledger>(self, dest: &mut D) -> R;
}

impl Opened {
    /// Loads `spec`, staging where the destination can.
    pub fn load(&mut self, spec: &LoadSpec, host: &dyn Host) -> Result<Report, Failure> {
        match self {
            Opened::Postgres(d) => load_staging(spec, &mut **d, host),
            Opened::MariaDb(d) => load_staging(spec, &mut **d, host),
        }
    }

    /// Sets the socket buffers of the load's streams (`--socket-buffer`).
    pub fn size_sockets(&mut self, choice: SocketBuffer) -> Result<Sizing, Failure> {
        match self {
            Opened::Postgres(d) => d.size_sockets(choice).map_err(Failure::server),
            Opened::MariaDb(_) => match choice {
                SocketBuffer::Size(_) => Err(Failure::Usage(
                    "--socket-buffer SIZE is not on MariaDB yet: leave it at auto or off".into(),
                )),
                _ => Ok(Sizing {
                    streams: 1,
                    buffer: None,
                    why: "sized only on PostgreSQL so far".into(),
                }),
            },
        }
    }

    /// Runs `f` on the destination.
    pub fn with<R>(&mut self, f: impl WithDestination<R>) -> R {
        match self {
            Opened::Postgres(d) => f.call(&mut **d),
            Opened::MariaDb(d) => f.call(&mut **d),
        }
    }
}

/// Loads `spec` into a destination that can stage, with the publish's lock wait.
fn load_staging<D: Ledger + Staging>(
    spec: &LoadSpec,
    dest: &mut D,
    host: &dyn Host,
) -> Result<Report, Failure> {
    if let Some(w) = spec.lock_wait {
        dest.set_lock_wait(w);
    }
    sluice_engine::load::load_staging(spec, dest, host)
}

/// Opens the destination a command names (`--target`, else the environment, else the
/// private cluster). Every later connection goes to the server the first one reached.
pub fn open(target: Option<&str>, pg_dir: Option<PathBuf>, quiet: bool) -> Result<Opened, Failure> {
    if let Some(t) = target::mariadb_target(target) {
        let info = target::resolve_mariadb(&t).map_err(|e| Failure::Usage(format!("{e:#}")))?;
        return Ok(Opened::MariaDb(Box::new(open_mariadb(&info)?)));
    }
    let target = target::resolve(target, pg_dir, quiet).map_err(|e| {
        match e.downcast_ref::<target::BadTarget>() {
            Some(_) => Failure::Usage(format!("{e:#}")),
            None => Failure::Connect(format!("{e:#}")),
        }
    })?;
    Ok(Opened::Postgres(Box::new(open_postgres(&target.info)?)))
}

/// Where a destination says what failed after the data was in: standard error, whatever `-q`
/// says.
fn warnings_on_stderr() -> Arc<dyn Fn(String) + Send + Sync> {
    Arc::new(|w| eprintln!("\nwarning: {w}"))
}

/// Opens PostgreSQL at a resolved connection.
pub fn open_postgres(info: &sluice_postgres::conninfo::ConnInfo) -> Result<PgDestination, Failure> {
    PgDestination::open(info, warnings_on_stderr()).map_err(|e| match e {
        OpenError::Server(m) => Failure::server(m),
        OpenError::Unsupported(m) => Failure::Usage(m),
        OpenError::Runtime(e) => Failure::Local(format!("cannot start the runtime: {e}")),
        other => Failure::Connect(other.to_string()),
    })
}

/// Opens MariaDB at a resolved connection.
pub fn open_mariadb(
    info: &sluice_mariadb::conninfo::ConnInfo,
) -> Result<MariaDbDestination, Failure> {
    use sluice_mariadb::destination::OpenError;
    MariaDbDestination::open(info, warnings_on_stderr()).map_err(|e| match e {
        OpenError::Server(m) => Failure::server(m),
        OpenError::Runtime(e) => Failure::Local(format!("cannot start the runtime: {e}")),
        other => Failure::Connect(other.to_string()),
    })
}
