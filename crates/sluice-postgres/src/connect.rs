//! Opening connections, with TLS verified the way libpq's `sslmode` promises.
//!
//! `disable` speaks plain TCP; `prefer` and `require` encrypt without checking the certificate
//! (libpq's behaviour unless a root certificate is configured); `verify-ca` checks the chain
//! against `sslrootcert` but not the host name; `verify-full` checks both. `sslrootcert=system`
//! uses the operating system's trusted roots. TLS is rustls, so a fresh machine needs no
//! OpenSSL headers to build sluice.

use crate::conninfo::{ConnInfo, SslMode};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_postgres::{Client, NoTls};

/// Why a connection could not be opened; the message never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("TLS setup for {target}: {reason}")]
    Tls { target: String, reason: String },
    #[error("cannot connect to {target}: {}", chain(source))]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
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

/// Connects and spawns the connection task on the current tokio runtime.
pub async fn connect(info: &ConnInfo) -> Result<Client, ConnectError> {
    let config = info.to_config();
    let target = info.to_string();
    let wrap = |source| ConnectError::Connect {
        target: target.clone(),
        source,
    };
    if info.sslmode == SslMode::Disable || info.is_unix_socket() {
        let (client, conn) = config.connect(NoTls).await.map_err(wrap)?;
        tokio::spawn(conn);
        return Ok(client);
    }
    let tls = tls_config(info).map_err(|reason| ConnectError::Tls {
        target: target.clone(),
        reason,
    })?;
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
    let (client, conn) = config.connect(tls).await.map_err(wrap)?;
    tokio::spawn(conn);
    Ok(client)
}
