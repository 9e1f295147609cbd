//! Opening connections to the server a [`ConnInfo`] names, every wait bounded: a connection
//! attempt gives up after [`CONNECT_TIMEOUT`], and TCP keepalives notice a peer that vanished.
//! TLS is as `ssl-mode` says ([`SslMode`]); `PREFERRED` connects again in the clear when the
//! server offers no TLS, as the client does.

use crate::conninfo::{ConnInfo, SslMode};
use mysql_async::{Conn, DriverError, Error, Opts, OptsBuilder, SslOpts};
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
/// (the driver advertises it; sluice installs a handler per statement), keepalives on, TLS as
/// `ssl-mode` says.
pub fn opts(info: &ConnInfo) -> Opts {
    opts_tls(info, tls(info))
}

/// The driver's TLS options for `ssl-mode`: none when disabled; any certificate for
/// `PREFERRED` and `REQUIRED` (encrypted, not authenticated); the `ssl-ca` file (or the
/// well-known authorities) for `VERIFY_CA`, with the host's name checked for `VERIFY_IDENTITY`.
fn tls(info: &ConnInfo) -> Option<SslOpts> {
    let roots = || {
        let ca = info.ssl_ca.clone().map(Into::into);
        SslOpts::default().with_root_certs(ca.into_iter().collect())
    };
    match info.ssl_mode {
        SslMode::Disabled => None,
        // A Unix socket never leaves this machine: the client encrypts it only when told to.
        SslMode::Preferred if info.socket.is_some() => None,
        SslMode::Preferred | SslMode::Required => Some(
            SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        ),
        SslMode::VerifyCa => Some(roots().with_danger_skip_domain_validation(true)),
        SslMode::VerifyIdentity => Some(roots()),
    }
}

fn opts_tls(info: &ConnInfo, tls: Option<SslOpts>) -> Opts {
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
    Opts::from(b.ssl_opts(tls))
}

/// One connection to `info`'s server.
pub async fn connect(info: &ConnInfo) -> Result<Conn, ConnectError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, open(info)).await {
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

/// Connects with TLS as `ssl-mode` says; under `PREFERRED`, in the clear when the server
/// offers no TLS.
async fn open(info: &ConnInfo) -> Result<Conn, Error> {
    match Conn::new(opts(info)).await {
        Err(Error::Driver(DriverError::NoClientSslFlagFromServer))
            if info.ssl_mode == SslMode::Preferred =>
        {
            Conn::new(opts_tls(info, None)).await
        }
        other => other,
    }
}

/// `message` with the password blotted out, should a driver or server ever echo it.
pub fn scrub(message: &str, info: &ConnInfo) -> String {
    match &info.password {
        Some(p) if p.len() >= SHORT => message.replace(p.as_str(), "********"),
        Some(p) if !p.is_empty() => mask_words(message, p),
        _ => message.to_string(),
    }
}

/// Passwords shorter than this are masked only where they stand as a word of their own: a
/// `p` masked inside every word would garble the message it protects.
const SHORT: usize = 4;

/// `message` with every whole-word occurrence of `word` masked.
fn mask_words(message: &str, word: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        let alone = !before.is_some_and(is_word) && !after.is_some_and(is_word);
        out.push_str(&rest[..at]);
        out.push_str(if alone { "********" } else { word });
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::mask_words;

    #[test]
    fn a_short_password_is_masked_only_as_a_word() {
        assert_eq!(
            mask_words("the capability 'p' (p) and p", "p"),
            "the capability '********' (********) and ********"
        );
    }
}
