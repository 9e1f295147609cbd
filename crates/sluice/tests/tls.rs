//! `sslmode` semantics against a real server with TLS: a CA made for the test signs a server
//! certificate for `localhost`; a role that may only connect over TLS proves that the
//! connection really is encrypted.

mod common;

use common::{db, pg, sluice_cmd, stderr};
use std::path::PathBuf;

struct Certs {
    ca: PathBuf,
    other_ca: PathBuf,
}

/// Turns TLS on in this test binary's cluster, once.
fn enable_tls() -> Certs {
    let dir = pg().root.join("tls");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_cert, ca_key) = common::test_authority("sluice test CA");
    let (other, _) = common::test_authority("another CA");
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
    let data = &pg().cluster.dir;
    std::fs::write(data.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(data.join("server.key"), key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let meta = std::fs::metadata(data).unwrap();
    use std::os::unix::fs::MetadataExt;
    for f in ["server.crt", "server.key"] {
        std::os::unix::fs::chown(data.join(f), Some(meta.uid()), Some(meta.gid())).unwrap();
    }
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca_cert.pem()).unwrap();
    let other_path = dir.join("other.crt");
    std::fs::write(&other_path, other.pem()).unwrap();
    // tlsuser may connect over TLS only.
    let hba = data.join("pg_hba.conf");
    let text = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!(
            "hostssl all tlsuser 127.0.0.1/32 trust\nhostssl all tlsuser ::1/128 trust\n\
             host all tlsuser 127.0.0.1/32 reject\nhost all tlsuser ::1/128 reject\n{text}"
        ),
    )
    .unwrap();
    let admin = db("tls_admin");
    admin.psql("ALTER SYSTEM SET ssl = on");
    admin.psql("SELECT pg_reload_conf()");
    // The reload is asynchronous: wait until new sessions see TLS enabled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while admin.psql("SHOW ssl").trim() != "on" {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not enable TLS"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    admin.psql("CREATE ROLE tlsuser LOGIN");
    Certs {
        ca: ca_path,
        other_ca: other_path,
    }
}

#[test]
fn sslmodes_encrypt_and_verify_as_libpq_does() {
    let certs = enable_tls();
    let d = db("tls");
    d.psql("CREATE TABLE t (a int); ALTER TABLE t OWNER TO tlsuser");
    let f = d.file("t.csv", b"1\n");
    let port = pg().port;
    let load_with = |host: &str, mode: &str, root: Option<&PathBuf>, extra: &[&str]| {
        let mut url = format!(
            "postgresql://tlsuser@{host}:{port}/{}?sslmode={mode}",
            d.name
        );
        if let Some(r) = root {
            url.push_str(&format!("&sslrootcert={}", r.display()));
        }
        sluice_cmd()
            .args(["load", "-q", f.to_str().unwrap(), "--target", &url])
            .args(extra)
            .output()
            .unwrap()
    };
    let load = |host: &str, mode: &str, root: Option<&PathBuf>| load_with(host, mode, root, &[]);
    // Without TLS the role is rejected: the rule really demands encryption.
    let out = load("127.0.0.1", "disable", None);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    // require: encrypted, certificate not checked.
    let out = load("127.0.0.1", "require", None);
    assert!(out.status.success(), "{}", stderr(&out));
    // prefer: encrypted when the server offers it.
    let out = load("127.0.0.1", "prefer", None);
    assert!(out.status.success(), "{}", stderr(&out));
    // verify-full: the right CA and the certificate's host name.
    let out = load("localhost", "verify-full", Some(&certs.ca));
    assert!(out.status.success(), "{}", stderr(&out));
    // verify-full with a host name the certificate does not name fails...
    let out = load("127.0.0.1", "verify-full", Some(&certs.ca));
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );
    // ...which verify-ca accepts, since it checks the chain only.
    let out = load("127.0.0.1", "verify-ca", Some(&certs.ca));
    assert!(out.status.success(), "{}", stderr(&out));
    // With a socket buffer set, the streams open their own sockets: TLS and its checks
    // are the same on them (`--socket-buffer`).
    let sized = ["--socket-buffer", "1M"];
    let out = load_with("127.0.0.1", "disable", None, &sized);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let out = load_with("127.0.0.1", "require", None, &sized);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = load_with("localhost", "verify-full", Some(&certs.ca), &sized);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = load_with("127.0.0.1", "verify-full", Some(&certs.ca), &sized);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    // Another CA fails both.
    let out = load("localhost", "verify-ca", Some(&certs.other_ca));
    assert_eq!(out.status.code(), Some(4));
    // A missing root certificate says what to do.
    let out = load(
        "localhost",
        "verify-full",
        Some(&PathBuf::from("/nonexistent/root.crt")),
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("sslrootcert"), "{}", stderr(&out));
    assert_eq!(
        d.count("t"),
        6,
        "require, prefer, verify-full and verify-ca loaded, and require and verify-full with \
         a socket buffer"
    );
}
