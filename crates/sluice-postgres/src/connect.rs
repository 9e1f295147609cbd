//! Opening connections, with TLS verified the way libpq's `sslmode` promises.
//!
//! `disable` speaks plain TCP; `prefer` and `require` encrypt without checking the certificate
//! (libpq's behaviour unless a root certificate is configured); `verify-ca` checks the chain
//! against `sslrootcert` but not the host name; `verify-full` checks both. `sslrootcert=system`
//! uses the operating system's trusted roots. TLS is rustls, so a fresh machine needs no
//! OpenSSL headers to build sluice.
//!
//! As libpq does, each listed host is tried in turn, each within `connect_timeout` for its
//! whole startup (TCP, TLS, authentication: tokio-postgres alone bounds only the TCP connect,
//! so a server that accepts and never answers would hang), and a server that does not meet
//! `target_session_attrs` is passed over. Every session is then made fit for a bulk load, as
//! pg_dump and pg_restore do: `statement_timeout`, `lock_timeout`,
//! `idle_in_transaction_session_timeout` and `idle_session_timeout` set by a role or database
//! would otherwise end a long COPY, or a stream waiting at the commit barrier. The server's
//! own keepalives are shortened (30 s idle, then 3 probes 10 s apart, and data unacknowledged
//! for 60 s ends the connection: `tcp_user_timeout`), where the server's are longer or the
//! system's: a client cut off from the server loses its sessions, and with them its locks
//! and a crew worker's claims, within about a minute, not two hours.

use crate::conninfo::{ConnInfo, HostSpec, SessionAttrs, SslMode};
use crate::onetrip::OneTrip;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{Client, NoTls};

/// Why a connection could not be opened; the message never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("TLS setup for {target}: {reason}")]
    Tls { target: String, reason: String },
    /// Every host failed; `reason` says why for each.
    #[error("cannot connect to {target}: {reason}")]
    Connect { target: String, reason: String },
}

/// An error and its causes, `a: b: c`: tokio-postgres keeps the useful part (which
/// certificate check failed, which address refused) in the source chain.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any certificate: `prefer` and `require` encrypt but do not authenticate the server.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the host name is not checked.
#[derive(Debug)]
struct VerifyChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for VerifyChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn root_store(info: &ConnInfo) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let path = match &info.sslrootcert {
        Some(p) if p.as_os_str() == "system" => {
            for cert in rustls_native_certs::load_native_certs().certs {
                roots.add(cert).map_err(|e| e.to_string())?;
            }
            return Ok(roots);
        }
        Some(p) => p.clone(),
        None => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
            .unwrap_or_default(),
    };
    if !path.exists() {
        return Err(format!(
            "root certificate file \"{}\" does not exist: give sslrootcert=PATH, or \
             sslrootcert=system for the system's trusted roots, or use sslmode=require",
            path.display()
        ));
    }
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| format!("cannot read \"{}\": {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("bad certificate in \"{}\": {e}", path.display()))?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

fn tls_config(info: &ConnInfo) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = match info.sslmode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(root_store(info)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| e.to_string())?;
            if info.sslmode == SslMode::VerifyFull {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(VerifyChainOnly(webpki)))
                    .with_no_client_auth()
            }
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// A connection, and which of the target's hosts it reached; `T` is what the caller's first
/// questions answered ([`connect_asking`]).
pub struct Connected<T = ()> {
    pub client: Client,
    pub host: usize,
    /// A second handle on its TCP socket (none over a Unix socket), for the kernel's
    /// figures on it (`TCP_INFO`). The socket closes once both handles are dropped.
    pub socket: Option<socket2::Socket>,
    /// The answers to the caller's first questions ([`connect_asking`]).
    pub first: T,
}

/// Connects and spawns the connection task on the current tokio runtime.
pub async fn connect(info: &ConnInfo) -> Result<Client, ConnectError> {
    connect_host(info).await.map(|c| c.client)
}

/// Connects to the first host that answers and suits `target_session_attrs`, libpq's way.
pub async fn connect_host(info: &ConnInfo) -> Result<Connected, ConnectError> {
    connect_asking(info, |_: &Client| Box::pin(async {})).await
}

/// [`connect_host`], with the caller's first questions (`ask`) sent right behind the session's
/// setup, in its round trip: across a long path, one round trip fewer for each connection. A
/// host refused for its session's attributes has its answers dropped with it.
pub async fn connect_asking<T>(
    info: &ConnInfo,
    ask: impl for<'c> Fn(&'c Client) -> futures_util::future::BoxFuture<'c, T>,
) -> Result<Connected<T>, ConnectError> {
    let target = info.to_string();
    let mut failures: Vec<String> = Vec::new();
    let mut tls = None;
    let passes: &[SessionAttrs] = if info.target_session_attrs == SessionAttrs::PreferStandby {
        &[SessionAttrs::Standby, SessionAttrs::Any]
    } else {
        std::slice::from_ref(&info.target_session_attrs)
    };
    for &attrs in passes {
        for (i, h) in info.hosts.iter().enumerate() {
            let attempt = async {
                let opened = open(info, h, &mut tls).await?;
                let (prepared, first) =
                    futures_util::join!(prepare_session(&opened.0, attrs), ask(&opened.0));
                prepared?;
                Ok::<_, String>((opened, first))
            };
            let bounded = async {
                match info.connect_timeout {
                    Some(secs) => tokio::time::timeout(Duration::from_secs(secs), attempt)
                        .await
                        .unwrap_or_else(|_| {
                            Err(format!(
                                "timeout expired after {secs} s (connect_timeout): the server \
                                 did not complete the startup"
                            ))
                        }),
                    None => attempt.await,
                }
            };
            // A load that has given its silent server up gives its new connections up too.
            let result = info
                .ends
                .cut(bounded, || {
                    Err("the server answers nothing: sluice gave the connection up".to_string())
                })
                .await;
            match result {
                Ok(((client, socket), first)) => {
                    return Ok(Connected {
                        client,
                        host: i,
                        socket,
                        first,
                    })
                }
                Err(reason) => failures.push(if info.hosts.len() > 1 {
                    format!("{}: {reason}", h.label())
                } else {
                    reason
                }),
            }
        }
    }
    Err(ConnectError::Connect {
        target,
        reason: failures.join("; "),
    })
}

/// Opens one host's connection, TLS as `sslmode` says. Over TCP the socket is sluice's own
/// (its buffers as `--socket-buffer` says, the kernel's autotuning otherwise), so that its
/// handle can be kept for `TCP_INFO`.
async fn open(
    info: &ConnInfo,
    h: &HostSpec,
    tls: &mut Option<tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<(Client, Option<socket2::Socket>), String> {
    let config = info.to_config(h);
    if !h.is_unix_socket() {
        return open_tcp(info, h, &config, tls).await;
    }
    let (client, conn) = config
        .connect(NoTls)
        .await
        .map_err(|e| startup_error(e, info, h))?;
    tokio::spawn(info.ends.end(conn));
    Ok((client, None))
}

/// The TLS connector, made on first use and kept for the command's other connections.
fn made_tls(
    info: &ConnInfo,
    tls: &mut Option<tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    if tls.is_none() {
        let config = tls_config(info).map_err(|reason| format!("TLS setup: {reason}"))?;
        *tls = Some(tokio_postgres_rustls::MakeRustlsConnect::new(config));
    }
    Ok(tls.clone().expect("set above"))
}

/// Opens one host's connection on a socket of our own, its buffers `info.socket_buffer` (see
/// [`crate::network`]); the protocol then runs on it as on tokio-postgres's own socket.
async fn open_tcp(
    info: &ConnInfo,
    h: &HostSpec,
    config: &tokio_postgres::Config,
    tls: &mut Option<tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<(Client, Option<socket2::Socket>), String> {
    let stream = crate::network::connect_tcp(h, info.socket_buffer, &info.liveness).await?;
    let socket = socket2::SockRef::from(&stream).try_clone().ok();
    if info.sslmode == SslMode::Disable {
        let (client, conn) = config
            .connect_raw(stream, NoTls)
            .await
            .map_err(|e| startup_error(e, info, h))?;
        tokio::spawn(info.ends.end(conn));
        return Ok((client, socket));
    }
    let mut make = made_tls(info, tls)?;
    let connector =
        <_ as tokio_postgres::tls::MakeTlsConnect<tokio::net::TcpStream>>::make_tls_connect(
            &mut make, &h.host,
        )
        .map_err(|e| format!("TLS setup: {e}"))?;
    let (client, conn) = config
        .connect_raw(stream, connector)
        .await
        .map_err(|e| startup_error(e, info, h))?;
    tokio::spawn(info.ends.end(conn));
    Ok((client, socket))
}

/// Words a startup failure. A peer that is not PostgreSQL (an HTTP server on the port)
/// makes tokio-postgres fail to decode its first message; say that rather than the decoder's
/// "bytes remaining on stream".
fn startup_error(e: tokio_postgres::Error, info: &ConnInfo, h: &HostSpec) -> String {
    let text = chain(&e);
    if e.as_db_error().is_none() && text.contains("password missing") {
        return no_password(info, h);
    }
    let garbled = [
        "bytes remaining on stream",
        "unexpected message",
        "invalid message length",
        "unknown authentication",
        "unexpected EOF",
        "invalid response",
        "unknown message tag",
    ];
    if e.as_db_error().is_none() && garbled.iter().any(|g| text.contains(g)) {
        return format!(
            "the other end did not answer like a PostgreSQL server (is something else \
             listening on this port?): {text}"
        );
    }
    text
}

/// The server asked for a password and none was given: psql's words, then every place a
/// password can come from (the library would say "invalid configuration: password missing").
fn no_password(info: &ConnInfo, h: &HostSpec) -> String {
    format!(
        "fe_sendauth: no password supplied: the server asks user \"{user}\" for a password, \
         and none was found. Give it in PGPASSWORD, or in a line \
         `{host}:{port}:{db}:{user}:PASSWORD` of ~/.pgpass (or of the file PGPASSFILE names; \
         mode 0600), or in the target (postgresql://{user}:PASSWORD@{host}:{port}/{db})",
        user = info.user,
        // The password file names a Unix socket's host `localhost`, as libpq looks it up.
        host = if h.is_unix_socket() {
            "localhost"
        } else {
            &h.host
        },
        port = h.port,
        db = info.dbname,
    )
}

/// Session settings for a bulk load, applied to every connection (see the module doc), and
/// the `target_session_attrs` check.
async fn prepare_session(client: &Client, attrs: SessionAttrs) -> Result<(), String> {
    let row = client
        .fetch_one(
            "SELECT count(set_config(p.name, CASE WHEN s.value = '0' OR p.setting = '0' \
                        THEN s.value ELSE least(p.setting::int, s.value::int)::text END, false)), \
                    pg_is_in_recovery(), current_setting('transaction_read_only') = 'on' \
             FROM (VALUES ('statement_timeout', '0'), ('lock_timeout', '0'), \
                    ('idle_in_transaction_session_timeout', '0'), ('idle_session_timeout', '0'), \
                    ('transaction_timeout', '0'), ('tcp_keepalives_idle', '30'), \
                    ('tcp_keepalives_interval', '10'), ('tcp_keepalives_count', '3'), \
                    ('tcp_user_timeout', '60000')) \
                AS s(name, value) JOIN pg_settings p ON p.name = s.name",
            &[],
        )
        .await
        .map_err(|e| format!("setting up the session: {}", chain(&e)))?;
    let (in_recovery, read_only): (bool, bool) = (row.get(1), row.get(2));
    if !attrs.accepts(in_recovery, read_only) {
        return Err(format!(
            "the server is {} and target_session_attrs is {}",
            match (in_recovery, read_only) {
                (true, _) => "a standby (in recovery)",
                (false, true) => "read-only",
                (false, false) => "a read-write primary",
            },
            attrs.as_str()
        ));
    }
    Ok(())
}
