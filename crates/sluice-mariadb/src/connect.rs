//! Opening connections to the server a [`ConnInfo`] names, every wait bounded: a connection
//! attempt gives up after [`CONNECT_TIMEOUT`], and TCP keepalives notice a peer that vanished.

use crate::conninfo::ConnInfo;
use mysql_async::{Conn, Opts, OptsBuilder};
use std::time::Duration;

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a connection could not be opened. The message never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {target}: {reason}")]
    Failed { target: String, reason: String },
    #[error("cannot connect to {target}: no answer within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout { target: String },
}

/// The driver's options for `info`: TCP (or the socket it names), `LOAD DATA LOCAL` allowed
/// (the driver advertises it; sluice installs a handler per statement), keepalives on.
pub fn opts(info: &ConnInfo) -> Opts {
    let mut b = OptsBuilder::default()
        .ip_or_hostname(info.host.clone())
        .tcp_port(info.port)
        .user(Some(info.user.clone()))
        .pass(info.password.clone())
        .db_name(info.database.clone())
        .prefer_socket(false)
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .stmt_cache_size(32);
    if let Some(s) = &info.socket {
        b = b.socket(Some(s.clone()));
    }
    Opts::from(b)
}

/// One connection to `info`'s server.
pub async fn connect(info: &ConnInfo) -> Result<Conn, ConnectError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, Conn::new(opts(info))).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(ConnectError::Failed {
            target: info.to_string(),
            reason: scrub(&e.to_string(), info),
        }),
        Err(_) => Err(ConnectError::Timeout {
            target: info.to_string(),
        }),
    }
}

/// `message` with the password blotted out, should a driver or server ever echo it.
pub fn scrub(message: &str, info: &ConnInfo) -> String {
    match &info.password {
        Some(p) if !p.is_empty() => message.replace(p.as_str(), "********"),
        _ => message.to_string(),
    }
}
