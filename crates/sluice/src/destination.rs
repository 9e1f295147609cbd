//! The target's scheme chooses the destination, here and nowhere else: `postgresql://`,
//! `postgres://` and key=value strings (or none: libpq's variables, else the private
//! cluster) open PostgreSQL. Every command that loads or reads a ledger (`load`, `jobs`,
//! `probe`) opens its destination through [`open`], and reaches it through [`Opened`]: a
//! command written once works on every destination.

use crate::failure::Failure;
use crate::target;
use sluice_core::destination::{Ledger, Staging};
use sluice_engine::events::Host;
use sluice_engine::report::Report;
use sluice_engine::LoadSpec;
use sluice_postgres::destination::{OpenError, PgDestination};
use sluice_postgres::network::{Sizing, SocketBuffer};
use std::path::PathBuf;
use std::sync::Arc;

/// An open destination, of whichever database the target named.
pub enum Opened {
    Postgres(Box<PgDestination>),
}

/// Something a command does with a destination whose type it need not know.
pub trait WithDestination<R> {
    fn call<D: Ledger + Staging>(self, dest: &mut D) -> R;
}

impl Opened {
    /// Loads `spec`, staging where the destination can.
    pub fn load(&mut self, spec: &LoadSpec, host: &dyn Host) -> Result<Report, Failure> {
        struct Load<'a>(&'a LoadSpec, &'a dyn Host);
        impl WithDestination<Result<Report, Failure>> for Load<'_> {
            fn call<D: Ledger + Staging>(self, dest: &mut D) -> Result<Report, Failure> {
                if let Some(w) = self.0.lock_wait {
                    dest.set_lock_wait(w);
                }
                sluice_engine::load::load_staging(self.0, dest, self.1)
            }
        }
        self.with(Load(spec, host))
    }

    /// Sets the socket buffers of the load's streams (`--socket-buffer`).
    pub fn size_sockets(&mut self, choice: SocketBuffer) -> Result<Sizing, Failure> {
        match self {
            Opened::Postgres(d) => d.size_sockets(choice).map_err(Failure::server),
        }
    }

    /// Runs `f` on the destination.
    pub fn with<R>(&mut self, f: impl WithDestination<R>) -> R {
        match self {
            Opened::Postgres(d) => f.call(&mut **d),
        }
    }
}

/// Opens the destination a command names (`--target`, else the environment, else the
/// private cluster). Every later connection goes to the server the first one reached.
pub fn open(target: Option<&str>, pg_dir: Option<PathBuf>, quiet: bool) -> Result<Opened, Failure> {
    let target = target::resolve(target, pg_dir, quiet).map_err(|e| {
        match e.downcast_ref::<target::BadTarget>() {
            Some(_) => Failure::Usage(format!("{e:#}")),
            None => Failure::Connect(format!("{e:#}")),
        }
    })?;
    Ok(Opened::Postgres(Box::new(open_postgres(&target.info)?)))
}

/// Opens PostgreSQL at a resolved connection.
pub fn open_postgres(info: &sluice_postgres::conninfo::ConnInfo) -> Result<PgDestination, Failure> {
    let warn: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|w| eprintln!("\nwarning: {w}"));
    PgDestination::open(info, warn).map_err(|e| match e {
        OpenError::Server(m) => Failure::server(m),
        OpenError::Unsupported(m) => Failure::Usage(m),
        OpenError::Runtime(e) => Failure::Local(format!("cannot start the runtime: {e}")),
        other => Failure::Connect(other.to_string()),
    })
}
