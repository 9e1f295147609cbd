//! The MariaDB/MySQL client's conventions for where to connect, so that a target that works
//! with `mariadb` works with sluice: a `mariadb://` or `mysql://` URI, then the `[client]`
//! section of `~/.my.cnf` (ignored when anyone may write it, as the client ignores it), then
//! the environment (`MYSQL_HOST`, `MYSQL_TCP_PORT`, `MYSQL_PWD`), then the defaults
//! (`localhost:3306`, the login name). That is the client's own order: an option file beats the
//! environment, the command line beats both.
//!
//! TLS follows the MySQL client's `--ssl-mode` (MySQL Shell's URIs take it as `ssl-mode=`):
//! `PREFERRED` by default (encrypted when the server offers it), `DISABLED`, `REQUIRED`
//! (encrypted, the server not authenticated) and `VERIFY_IDENTITY` (its certificate signed by
//! `ssl-ca`, or a well-known authority, and naming the host). `VERIFY_CA` is refused with a
//! message: the driver cannot check the authority without the name. An option file's
//! MariaDB spellings mean the same: `ssl` is `REQUIRED`, `skip-ssl` is `DISABLED`,
//! `ssl-verify-server-cert` is `VERIFY_IDENTITY`.
//!
//! The password is kept out of every rendering: [`ConnInfo`]'s `Display` and `Debug` never
//! show it, so no message, summary or report can print it by accident.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub database: Option<String>,
    /// A Unix socket to connect through instead of TCP.
    pub socket: Option<String>,
    pub ssl_mode: SslMode,
    /// The certificate authority file (PEM) `VERIFY_CA` and `VERIFY_IDENTITY` trust.
    pub ssl_ca: Option<PathBuf>,
    /// How long the server may answer nothing during a load before its waits (the streams'
    /// LOADs, a commit, a new connection) are given up as lost connections (`answer-timeout=`
    /// seconds in the URI; 0 for never).
    pub answer_timeout: Option<std::time::Duration>,
    /// What the user should know about how the target was found (`MYSQL_PWD` is insecure, an
    /// option file was ignored).
    pub warnings: Vec<String>,
}

impl fmt::Display for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mariadb://{}@{}:{}",
            self.user,
            host_for_uri(&self.host),
            self.port
        )?;
        if let Some(db) = &self.database {
            write!(f, "/{db}")?;
        }
        let mut query = Vec::new();
        if let Some(s) = &self.socket {
            query.push(format!("socket={s}"));
        }
        if self.ssl_mode != SslMode::Preferred {
            query.push(format!("ssl-mode={}", self.ssl_mode.name()));
        }
        if let Some(ca) = &self.ssl_ca {
            query.push(format!("ssl-ca={}", ca.display()));
        }
        if self.answer_timeout != Some(ANSWER_TIMEOUT) {
            let secs = self.answer_timeout.map_or(0, |t| t.as_secs());
            query.push(format!("answer-timeout={secs}"));
        }
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

/// The password is never printed, not even by `{:?}`.
impl fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnInfo({self})")
    }
}

fn host_for_uri(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// What the resolution reads besides the target string: the environment and the home
/// directory, so that tests can give their own.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
    /// Where `.my.cnf` is looked for.
    fn home(&self) -> Option<PathBuf>;
}

/// The process's own environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }
}

/// Why `VERIFY_CA` is refused rather than done differently from the client.
pub const VERIFY_CA_UNSUPPORTED: &str = "ssl-mode=VERIFY_CA is not supported yet: the driver \
     (mysql_async 0.37 with rustls) cannot check the certificate's authority without also \
     checking the host's name; use ssl-mode=VERIFY_IDENTITY and connect by the name the \
     certificate holds, or ssl-mode=REQUIRED to encrypt without authenticating the server";

/// `--ssl-mode`: whether the connection is encrypted, and how the server is authenticated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    Disabled,
    /// Encrypted where the server offers TLS, in the clear where it does not.
    #[default]
    Preferred,
    /// Encrypted, or no connection; any certificate.
    Required,
    /// Encrypted, the certificate signed by a trusted authority (`ssl-ca`).
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host connected to.
    VerifyIdentity,
}

impl SslMode {
    /// The client's spelling, any case, `_` or `-`.
    pub fn parse(s: &str) -> Result<SslMode, String> {
        match s.trim().to_ascii_uppercase().replace('-', "_").as_str() {
            "DISABLED" => Ok(SslMode::Disabled),
            "PREFERRED" => Ok(SslMode::Preferred),
            "REQUIRED" => Ok(SslMode::Required),
            "VERIFY_CA" => Ok(SslMode::VerifyCa),
            "VERIFY_IDENTITY" => Ok(SslMode::VerifyIdentity),
            _ => Err(format!(
                "ssl-mode {s:?} is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, \
                 VERIFY_IDENTITY"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }
}

/// The fields a source may set; later sources fill only what earlier ones left.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
struct Partial {
    host: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    password: Option<String>,
    database: Option<String>,
    socket: Option<String>,
    ssl_mode: Option<SslMode>,
    ssl_ca: Option<PathBuf>,
    answer_timeout: Option<u64>,
}

impl Partial {
    fn or(self, other: Partial) -> Partial {
        Partial {
            host: self.host.or(other.host),
            port: self.port.or(other.port),
            user: self.user.or(other.user),
            password: self.password.or(other.password),
            database: self.database.or(other.database),
            socket: self.socket.or(other.socket),
            ssl_mode: self.ssl_mode.or(other.ssl_mode),
            ssl_ca: self.ssl_ca.or(other.ssl_ca),
            answer_timeout: self.answer_timeout.or(other.answer_timeout),
        }
    }
}

/// How long the server may answer nothing during a load, by default: as long as the
/// PostgreSQL destination's `tcp_user_timeout` lets unacknowledged data wait.
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Whether a target string names a MariaDB/MySQL server.
pub fn is_mariadb_target(target: &str) -> bool {
    let lower = target.trim_start().to_ascii_lowercase();
    lower.starts_with("mariadb://") || lower.starts_with("mysql://")
}

impl ConnInfo {
    /// Resolves `target` (a `mariadb://` or `mysql://` URI) with the option file and the
    /// environment. A malformed URI or port is an error naming what is wrong (never the
    /// password).
    pub fn resolve(target: &str, env: &dyn Env) -> Result<ConnInfo, String> {
        let mut warnings = Vec::new();
        let uri = parse_uri(target)?;
        let file = match env.home() {
            Some(home) => read_option_file(&home.join(".my.cnf"), &mut warnings)?,
            None => Partial::default(),
        };
        let from_env = environment(env, &mut warnings)?;
        let p = uri.or(file).or(from_env);
        if p.ssl_mode == Some(SslMode::VerifyCa) {
            return Err(VERIFY_CA_UNSUPPORTED.into());
        }
        Ok(ConnInfo {
            host: p.host.unwrap_or_else(|| "localhost".into()),
            port: p.port.unwrap_or(3306),
            user: p
                .user
                .or_else(|| env.var("USER"))
                .unwrap_or_else(|| "root".into()),
            password: p.password,
            database: p.database,
            socket: p.socket,
            ssl_mode: p.ssl_mode.unwrap_or_default(),
            ssl_ca: p.ssl_ca,
            answer_timeout: match p.answer_timeout {
                Some(0) => None,
                Some(s) => Some(std::time::Duration::from_secs(s)),
                None => Some(ANSWER_TIMEOUT),
            },
            warnings,
        })
    }
}

/// `MYSQL_HOST`, `MYSQL_TCP_PORT`, `MYSQL_PWD` (with the client's warning), `MYSQL_UNIX_PORT`.
fn environment(env: &dyn Env, warnings: &mut Vec<String>) -> Result<Partial, String> {
    let port = match env.var("MYSQL_TCP_PORT") {
        Some(p) => Some(parse_port(&p).map_err(|e| format!("MYSQL_TCP_PORT: {e}"))?),
        None => None,
    };
    let password = env.var("MYSQL_PWD");
    if password.is_some() {
        warnings.push(
            "MYSQL_PWD is insecure (any user of this machine can read a process's environment); \
             put the password in the [client] section of ~/.my.cnf, readable by you alone"
                .into(),
        );
    }
    Ok(Partial {
        host: env.var("MYSQL_HOST"),
        port,
        password,
        socket: env.var("MYSQL_UNIX_PORT"),
        ..Partial::default()
    })
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("port {p:?} is not a number from 1 to 65535")),
    }
}

/// `mariadb://[user[:password]@]host[:port][/database][?socket=path&ssl-mode=M&ssl-ca=path]`;
/// an empty string gives
/// nothing (the other sources decide).
fn parse_uri(target: &str) -> Result<Partial, String> {
    let t = target.trim();
    if t.is_empty() {
        return Ok(Partial::default());
    }
    let rest = ["mariadb://", "mysql://"]
        .iter()
        .find_map(|s| {
            t.get(..s.len())
                .filter(|p| p.eq_ignore_ascii_case(s))
                .map(|_| &t[s.len()..])
        })
        .ok_or_else(|| "a MariaDB target starts with mariadb:// or mysql://".to_string())?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut p = Partial::default();
    if let Some(u) = userinfo {
        let (user, pass) = match u.split_once(':') {
            Some((u, pw)) => (u, Some(pw)),
            None => (u, None),
        };
        if !user.is_empty() {
            p.user = Some(percent_decode(user)?);
        }
        p.password = pass.map(percent_decode).transpose()?;
    }
    let (host, port) = split_host_port(hostport)?;
    p.host = host;
    p.port = port;
    if let Some(db) = path.filter(|d| !d.is_empty()) {
        p.database = Some(percent_decode(db)?);
    }
    for pair in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "socket" => p.socket = Some(percent_decode(v)?),
            "ssl-mode" | "ssl_mode" | "sslMode" => {
                p.ssl_mode = Some(SslMode::parse(&percent_decode(v)?)?)
            }
            "ssl-ca" | "ssl_ca" => p.ssl_ca = Some(PathBuf::from(percent_decode(v)?)),
            "answer-timeout" | "answer_timeout" => {
                p.answer_timeout = Some(v.parse().map_err(|_| {
                    format!("answer-timeout={v:?} is not a number of seconds (0 for never)")
                })?)
            }
            other => {
                return Err(format!(
                    "unknown URI parameter {other:?} (sluice knows socket=, ssl-mode=, ssl-ca= \
                     and answer-timeout=)"
                ))
            }
        }
    }
    Ok(p)
}

fn split_host_port(s: &str) -> Result<(Option<String>, Option<u16>), String> {
    if s.is_empty() {
        return Ok((None, None));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 host in brackets lacks its ]".to_string())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(parse_port(p)?),
            None if after.is_empty() => None,
            None => return Err(format!("unexpected {after:?} after the host")),
        };
        return Ok((Some(h.to_string()), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok(((!h.is_empty()).then(|| h.to_string()), Some(parse_port(p)?))),
        None => Ok((Some(s.to_string()), None)),
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a % in the URI is not followed by two hex digits".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URI decodes to invalid UTF-8".to_string())
}

/// The `[client]` (and `[client-mariadb]`) sections of an option file. A file anyone may
/// write is ignored with a warning, as the client does; a password in a file others may read
/// is used, with a warning.
fn read_option_file(path: &Path, warnings: &mut Vec<String>) -> Result<Partial, String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(Partial::default());
    };
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
    if mode & 0o002 != 0 {
        warnings.push(format!(
            "{} is ignored: anyone may write it (chmod 600 it)",
            path.display()
        ));
        return Ok(Partial::default());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let p = parse_option_text(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if p.password.is_some() && mode & 0o044 != 0 {
        warnings.push(format!(
            "{} holds a password and others may read it (chmod 600 it)",
            path.display()
        ));
    }
    Ok(p)
}

/// The client options of an option file's text: `[client]` and `[client-mariadb]` sections,
/// `key=value` lines (`_` and `-` alike, values optionally quoted), `#` and `;` comments.
fn parse_option_text(text: &str) -> Result<Partial, String> {
    let mut p = Partial::default();
    let mut in_client = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            let name = section.trim_end_matches(']').trim().to_ascii_lowercase();
            in_client = name == "client" || name == "client-mariadb";
            continue;
        }
        if !in_client {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), unquote(v.trim())),
            None => (line, String::new()),
        };
        match key.replace('_', "-").as_str() {
            "host" => p.host = Some(value),
            "port" => {
                p.port = Some(parse_port(&value).map_err(|e| format!("line {}: {e}", n + 1))?)
            }
            "user" => p.user = Some(value),
            "password" => p.password = Some(value),
            "database" => p.database = Some(value),
            "socket" => p.socket = Some(value),
            "ssl-mode" => {
                p.ssl_mode =
                    Some(SslMode::parse(&value).map_err(|e| format!("line {}: {e}", n + 1))?)
            }
            "ssl-ca" => p.ssl_ca = Some(PathBuf::from(value)),
            "ssl" if !matches!(value.as_str(), "0" | "OFF" | "off" | "FALSE" | "false") => {
                p.ssl_mode = p.ssl_mode.or(Some(SslMode::Required))
            }
            "ssl" | "skip-ssl" => p.ssl_mode = Some(SslMode::Disabled),
            "ssl-verify-server-cert" => p.ssl_mode = Some(SslMode::VerifyIdentity),
            _ => {}
        }
    }
    Ok(p)
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, &'static str>, Option<PathBuf>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| v.to_string())
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
    }

    fn env(vars: &[(&'static str, &'static str)]) -> FakeEnv {
        FakeEnv(vars.iter().copied().collect(), None)
    }

    #[test]
    fn uri_gives_every_part_and_hides_the_password() {
        let c = ConnInfo::resolve("mysql://bob:p%40ss@db.example:3307/shop", &env(&[])).unwrap();
        assert_eq!(c.user, "bob");
        assert_eq!(c.password.as_deref(), Some("p@ss"));
        assert_eq!((c.host.as_str(), c.port), ("db.example", 3307));
        assert_eq!(c.database.as_deref(), Some("shop"));
        assert_eq!(c.to_string(), "mariadb://bob@db.example:3307/shop");
        assert!(!format!("{c:?}").contains("p@ss"));
    }

    #[test]
    fn environment_fills_what_the_uri_leaves_and_warns_of_mysql_pwd() {
        let e = env(&[
            ("MYSQL_HOST", "h"),
            ("MYSQL_TCP_PORT", "3399"),
            ("MYSQL_PWD", "pw"),
            ("USER", "ann"),
        ]);
        let c = ConnInfo::resolve("mariadb:///db", &e).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str()),
            ("h", 3399, "ann")
        );
        assert_eq!(c.password.as_deref(), Some("pw"));
        assert!(c.warnings[0].contains("MYSQL_PWD is insecure"));
        let c = ConnInfo::resolve("mariadb://other:1/db", &e).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("other", 1));
    }

    #[test]
    fn bad_ports_and_schemes_are_named() {
        assert!(ConnInfo::resolve("mariadb://h:99999/d", &env(&[]))
            .unwrap_err()
            .contains("99999"));
        assert!(ConnInfo::resolve("postgres://h/d", &env(&[]))
            .unwrap_err()
            .contains("mariadb://"));
        assert!(ConnInfo::resolve("mariadb://h/d?sslmode=x", &env(&[]))
            .unwrap_err()
            .contains("sslmode"));
        assert!(
            ConnInfo::resolve("mariadb://h/d?ssl-mode=sometimes", &env(&[]))
                .unwrap_err()
                .contains("VERIFY_IDENTITY")
        );
    }

    #[test]
    fn answer_timeout_is_two_minutes_unless_the_uri_says_otherwise() {
        let c = ConnInfo::resolve("mariadb://h/d", &env(&[])).unwrap();
        assert_eq!(c.answer_timeout, Some(ANSWER_TIMEOUT));
        assert_eq!(c.to_string(), "mariadb://root@h:3306/d");
        let c = ConnInfo::resolve("mariadb://h/d?answer-timeout=30", &env(&[])).unwrap();
        assert_eq!(c.answer_timeout, Some(std::time::Duration::from_secs(30)));
        assert_eq!(c.to_string(), "mariadb://root@h:3306/d?answer-timeout=30");
        let c = ConnInfo::resolve("mariadb://h/d?answer-timeout=0", &env(&[])).unwrap();
        assert_eq!(c.answer_timeout, None);
        let bad = ConnInfo::resolve("mariadb://h/d?answer-timeout=soon", &env(&[]));
        assert!(bad.unwrap_err().contains("number of seconds"));
    }

    #[test]
    fn ssl_mode_is_the_clients_from_the_uri_or_the_option_file() {
        let c = ConnInfo::resolve("mariadb://h/d", &env(&[])).unwrap();
        assert_eq!((c.ssl_mode, c.ssl_ca.as_ref()), (SslMode::Preferred, None));
        let c = ConnInfo::resolve(
            "mysql://h/d?ssl-mode=verify_identity&ssl-ca=%2Fca.pem",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.ssl_mode, SslMode::VerifyIdentity);
        assert_eq!(c.ssl_ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            c.to_string(),
            "mariadb://root@h:3306/d?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem"
        );
        let refused = ConnInfo::resolve("mysql://h/d?ssl-mode=VERIFY_CA", &env(&[]));
        assert_eq!(refused.unwrap_err(), VERIFY_CA_UNSUPPORTED);
        let file = |text: &str| parse_option_text(text).unwrap().ssl_mode;
        assert_eq!(file("[client]\nssl\n"), Some(SslMode::Required));
        assert_eq!(file("[client]\nskip-ssl\n"), Some(SslMode::Disabled));
        assert_eq!(file("[client]\nssl=0\n"), Some(SslMode::Disabled));
        assert_eq!(
            file("[client]\nssl-verify-server-cert\n"),
            Some(SslMode::VerifyIdentity)
        );
        assert_eq!(
            file("[client]\nssl_mode=REQUIRED\n"),
            Some(SslMode::Required)
        );
    }

    #[test]
    fn option_file_client_section_beats_the_environment() {
        let p = parse_option_text(
            "[mysqld]\nport=1\n[client]\n# comment\nuser = carl\npassword=\"se cret\"\nport=3310\n\
             [client-mariadb]\nsocket=/run/m.sock\n[mysqldump]\nuser=x\n",
        )
        .unwrap();
        assert_eq!(p.user.as_deref(), Some("carl"));
        assert_eq!(p.password.as_deref(), Some("se cret"));
        assert_eq!(p.port, Some(3310));
        assert_eq!(p.socket.as_deref(), Some("/run/m.sock"));
    }

    #[test]
    fn world_writable_option_file_is_ignored() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-mycnf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(".my.cnf");
        std::fs::write(&f, "[client]\nuser=dora\npassword=x\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = FakeEnv(HashMap::new(), Some(dir.clone()));
        let c = ConnInfo::resolve("mariadb://h/d", &e).unwrap();
        assert_ne!(c.user, "dora");
        assert!(c.warnings[0].contains("anyone may write it"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = ConnInfo::resolve("mariadb://h/d", &e).unwrap();
        assert_eq!(c.user, "dora");
        assert!(c.warnings[0].contains("others may read it"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = ConnInfo::resolve("mariadb://h/d", &e).unwrap();
        assert!(c.warnings.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
