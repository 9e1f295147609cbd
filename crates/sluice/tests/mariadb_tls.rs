//! TLS to MariaDB as the MySQL client's `--ssl-mode` has it, against a private server of this
//! binary's own that holds a certificate for `localhost` signed by a test authority and
//! refuses any connection in the clear (`require_secure_transport`).

mod common;

use common::sluice_cmd;
use sluice_mariadb::cluster::{bulk_load_settings, Cluster};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The server, its authority's certificate, and another authority's.
struct Secure {
    cluster: Cluster,
    ca: PathBuf,
    other_ca: PathBuf,
}

static SECURE: OnceLock<Secure> = OnceLock::new();

extern "C" fn stop_server() {
    if let Some(s) = SECURE.get() {
        s.cluster.stop();
        s.cluster.destroy();
    }
}

/// Writes `text` to `dir/name`, readable by the server's user.
fn write_for_server(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        let meta = std::fs::metadata(dir).unwrap();
        use std::os::unix::fs::MetadataExt;
        std::os::unix::fs::chown(&path, Some(meta.uid()), Some(meta.gid())).unwrap();
    }
    path
}

fn secure() -> &'static Secure {
    SECURE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("sluice-mariadb-tls-{}", std::process::id()));
        let cluster = Cluster::new(&root).expect("a directory for the server");
        cluster.init().expect("mariadb-install-db");
        let (ca_cert, ca_key) = common::test_authority("sluice test CA");
        let (other, _) = common::test_authority("another CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        let crt = write_for_server(&root, "server.crt", &cert.pem());
        let pem = write_for_server(&root, "server.key", &key.serialize_pem());
        let ca = write_for_server(&root, "ca.crt", &ca_cert.pem());
        let other_ca = write_for_server(&root, "other.crt", &other.pem());
        let mut settings = bulk_load_settings();
        for (k, v) in settings.iter_mut() {
            if k == "innodb_buffer_pool_size" || k == "innodb_log_file_size" {
                *v = "64M".into();
            }
        }
        for (k, v) in [
            ("ssl-cert", crt.display().to_string()),
            ("ssl-key", pem.display().to_string()),
            ("ssl-ca", ca.display().to_string()),
            ("require-secure-transport", "ON".to_string()),
        ] {
            settings.push((k.to_string(), v));
        }
        cluster.start(&settings).expect("start the TLS server");
        cluster
            .root_sql("CREATE DATABASE tls; CREATE TABLE tls.t (id INT, s VARCHAR(20))")
            .unwrap();
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(stop_server) };
        Secure {
            cluster,
            ca,
            other_ca,
        }
    })
}

/// `sluice load` of three rows into `tls.t` at the server's URL, with `host` for the address
/// and `query` after it; its output.
fn load(host: &str, query: &str) -> std::process::Output {
    let s = secure();
    let url = s
        .cluster
        .url("tls")
        .unwrap()
        .replace("@127.0.0.1:", &format!("@{host}:"));
    let file = s.cluster.dir.join("rows.tsv");
    std::fs::write(&file, "1\tone\n2\ttwo\n3\tthree\n").unwrap();
    sluice_cmd()
        .args(["load", "-q", "--table", "t", "--format", "text", "--target"])
        .arg(format!("{url}{query}"))
        .arg(&file)
        .output()
        .unwrap()
}

fn printed(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ssl_modes_encrypt_and_verify_as_the_mysql_client_does() {
    let s = secure();
    let (ca, other) = (s.ca.display().to_string(), s.other_ca.display().to_string());
    let count = || {
        let rows = s.cluster.root_sql("SELECT COUNT(*) FROM tls.t").unwrap();
        rows.trim().to_string()
    };
    // Encrypted, and the server is satisfied: the default, and REQUIRED.
    for query in ["", "?ssl-mode=REQUIRED"] {
        let out = load("127.0.0.1", query);
        assert!(out.status.success(), "{query}: {}", printed(&out));
    }
    // The certificate checked against the authority that signed it, and the host it names.
    let query = format!("?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}");
    let out = load("localhost", &query);
    assert!(out.status.success(), "localhost{query}: {}", printed(&out));
    assert_eq!(count(), "9");
    // Refused: in the clear; another authority; an address the certificate does not name.
    let refused = [
        ("127.0.0.1", "?ssl-mode=DISABLED".to_string()),
        (
            "localhost",
            format!("?ssl-mode=VERIFY_IDENTITY&ssl-ca={other}"),
        ),
        (
            "127.0.0.1",
            format!("?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        ),
    ];
    for (host, query) in &refused {
        let out = load(host, query);
        let said = printed(&out);
        assert_eq!(out.status.code(), Some(4), "{host}{query}: {said}");
        assert!(said.contains("cannot connect"), "{said}");
        assert!(
            !said.contains(&s.cluster.url("tls").unwrap()),
            "password shown"
        );
    }
    assert_eq!(count(), "9", "a refused load loaded nothing");
    // VERIFY_CA is refused before connecting, saying what to use instead.
    let out = load("127.0.0.1", &format!("?ssl-mode=VERIFY_CA&ssl-ca={ca}"));
    assert_eq!(out.status.code(), Some(2), "{}", printed(&out));
    assert!(
        printed(&out).contains("VERIFY_IDENTITY"),
        "{}",
        printed(&out)
    );
}
