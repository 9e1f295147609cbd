//! Connection parameters with libpq's conventions, so that sluice connects wherever psql does.
//!
//! A target is a URI (`postgresql://user@host:5432/db?sslmode=require`) or a `key=value`
//! string. Whatever it leaves out comes from the environment (`PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGPASSWORD`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`)
//! and then libpq's defaults. A missing password is looked up in `~/.pgpass` (or
//! `PGPASSFILE`), which is ignored with a warning when group or others can read it, exactly as
//! libpq does. The password never leaves this module in printable form: [`ConnInfo`]'s
//! `Display` and `Debug` redact it.
//!
//! tokio-postgres parses neither environment variables nor `.pgpass`, and knows no
//! `verify-ca`/`verify-full`, so parsing lives here and [`ConnInfo::to_config`] hands
//! tokio-postgres only what it understands; TLS verification is set up in [`crate::connect`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "invalid sslmode `{other}`: expected disable, allow, prefer, require, \
                     verify-ca or verify-full"
                ))
            }
        })
    }
}

/// Resolved connection parameters.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// Host names, IP addresses or Unix socket directories (absolute paths).
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
    password: Option<String>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub application_name: String,
    pub connect_timeout: Option<u64>,
    /// Warnings met while resolving (an unsafe `.pgpass`), for the caller to print.
    pub warnings: Vec<String>,
}

impl fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnInfo({self})")
    }
}

impl fmt::Display for ConnInfo {
    /// A URI with the password redacted: safe for logs and reports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pw = if self.password.is_some() { ":***" } else { "" };
        let host = if self.host.starts_with('/') {
            String::new()
        } else if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(
            f,
            "postgresql://{}{pw}@{host}:{}/{}",
            pct_encode(&self.user),
            self.port,
            pct_encode(&self.dbname)
        )?;
        if self.host.starts_with('/') {
            write!(f, "?host={}", pct_encode(&self.host))?;
        }
        Ok(())
    }
}

/// The environment sluice reads, injectable for tests.
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
    fn os_user(&self) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }
    fn os_user(&self) -> Option<String> {
        std::env::var("USER")
            .ok()
            .or_else(|| std::env::var("LOGNAME").ok())
            .or_else(|| {
                // SAFETY: geteuid has no preconditions; getpwuid returns a pointer to static
                // storage or null, and we copy the name out before any other libc call.
                unsafe {
                    let pw = libc::getpwuid(libc::geteuid());
                    if pw.is_null() {
                        return None;
                    }
                    let name = std::ffi::CStr::from_ptr((*pw).pw_name);
                    Some(name.to_string_lossy().into_owned())
                }
            })
    }
}

impl ConnInfo {
    /// Resolves a target string (URI or `key=value`, or empty) against the environment.
    pub fn resolve(target: &str, env: &dyn Env) -> Result<ConnInfo, String> {
        let mut params = parse_target(target)?;
        let from_env = [
            ("host", "PGHOST"),
            ("port", "PGPORT"),
            ("user", "PGUSER"),
            ("dbname", "PGDATABASE"),
            ("password", "PGPASSWORD"),
            ("sslmode", "PGSSLMODE"),
            ("sslrootcert", "PGSSLROOTCERT"),
            ("application_name", "PGAPPNAME"),
            ("connect_timeout", "PGCONNECT_TIMEOUT"),
            ("passfile", "PGPASSFILE"),
        ];
        for (key, var) in from_env {
            if !params.contains_key(key) {
                if let Some(v) = env.var(var) {
                    params.insert(key.to_string(), v);
                }
            }
        }
        if let Some(addr) = params.get("hostaddr").cloned() {
            params.entry("host".into()).or_insert(addr);
        }
        let host = params.get("host").cloned().unwrap_or_else(default_host);
        // Only the first of several hosts is used; multi-host failover is not supported yet.
        let host = host.split(',').next().unwrap_or_default().to_string();
        let port = match params.get("port") {
            None => 5432,
            Some(p) => p
                .split(',')
                .next()
                .unwrap_or_default()
                .parse()
                .map_err(|_| format!("invalid port `{p}`: expected a number from 1 to 65535"))?,
        };
        let user = match params.get("user") {
            Some(u) => u.clone(),
            None => env
                .os_user()
                .ok_or("no user name: set PGUSER or give user= in the target")?,
        };
        let dbname = params
            .get("dbname")
            .cloned()
            .unwrap_or_else(|| user.clone());
        let sslmode = match params.get("sslmode") {
            Some(m) => SslMode::parse(m)?,
            None => SslMode::Prefer,
        };
        let sslrootcert = params.get("sslrootcert").map(PathBuf::from);
        let connect_timeout = match params.get("connect_timeout") {
            None => None,
            Some(t) => Some(
                t.parse()
                    .map_err(|_| format!("invalid connect_timeout `{t}`: expected seconds"))?,
            ),
        };
        let mut info = ConnInfo {
            host,
            port,
            user,
            dbname,
            password: params.get("password").cloned(),
            sslmode,
            sslrootcert,
            application_name: params
                .get("application_name")
                .cloned()
                .unwrap_or_else(|| "sluice".into()),
            connect_timeout,
            warnings: Vec::new(),
        };
        if info.password.is_none() {
            let passfile = params
                .get("passfile")
                .map(PathBuf::from)
                .or_else(|| env.home().map(|h| h.join(".pgpass")));
            if let Some(path) = passfile {
                info.password = info.lookup_pgpass(&path);
            }
        }
        Ok(info)
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Replaces the password (tests, and the private cluster which needs none).
    pub fn with_password(mut self, password: Option<String>) -> ConnInfo {
        self.password = password;
        self
    }

    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// Whether the server runs on this machine, which shares its cores with sluice.
    pub fn is_local(&self) -> bool {
        self.is_unix_socket()
            || matches!(self.host.as_str(), "localhost" | "::1")
            || self.host.starts_with("127.")
    }

    /// Reads `~/.pgpass`: `host:port:db:user:password` lines, `*` wildcards, `\` escapes.
    fn lookup_pgpass(&mut self, path: &Path) -> Option<String> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                self.warnings.push(format!(
                    "password file \"{}\" has group or world access; permissions should be \
                     u=rw (0600) or less: ignoring it",
                    path.display()
                ));
                return None;
            }
        }
        let text = std::fs::read_to_string(path).ok()?;
        let host = if self.is_unix_socket() {
            "localhost".to_string()
        } else {
            self.host.clone()
        };
        let wanted = [
            host,
            self.port.to_string(),
            self.dbname.clone(),
            self.user.clone(),
        ];
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let fields = split_pgpass_line(line);
            if fields.len() < 5 {
                continue;
            }
            let matches = fields[..4]
                .iter()
                .zip(&wanted)
                .all(|(f, w)| f == "*" || f == w);
            if matches {
                return Some(fields[4].clone());
            }
        }
        None
    }

    /// The tokio-postgres configuration, without TLS (set up by [`crate::connect`]).
    pub fn to_config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        if self.is_unix_socket() {
            c.host_path(&self.host);
        } else {
            c.host(&self.host);
        }
        c.port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(&self.application_name);
        if let Some(pw) = &self.password {
            c.password(pw);
        }
        if let Some(t) = self.connect_timeout {
            c.connect_timeout(std::time::Duration::from_secs(t));
        }
        c.ssl_mode(match self.sslmode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        c
    }
}

fn default_host() -> String {
    // Debian's libpq puts the socket in /var/run/postgresql; vanilla builds use /tmp.
    for dir in ["/var/run/postgresql", "/tmp"] {
        if Path::new(dir).join(".s.PGSQL.5432").exists() {
            return dir.to_string();
        }
    }
    "localhost".to_string()
}

fn split_pgpass_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c)
                }
            }
        }
    }
    fields
}

fn pct_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn pct_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid percent-encoding in the connection URI".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the connection URI decodes to invalid UTF-8".into())
}

const KNOWN_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "application_name",
    "connect_timeout",
    "options",
    "target_session_attrs",
];

/// Parses a URI or `key=value` string into libpq keywords.
pub fn parse_target(target: &str) -> Result<BTreeMap<String, String>, String> {
    let t = target.trim();
    let params = if t.starts_with("postgresql://") || t.starts_with("postgres://") {
        parse_uri(t)?
    } else {
        parse_keyword_value(t)?
    };
    for k in params.keys() {
        if !KNOWN_KEYS.contains(&k.as_str()) {
            return Err(format!("unknown connection option `{k}`"));
        }
    }
    Ok(params)
}

fn parse_uri(uri: &str) -> Result<BTreeMap<String, String>, String> {
    let rest = uri.split_once("://").map(|x| x.1).unwrap_or_default();
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut params = BTreeMap::new();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hp)) => {
            let (user, pw) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                params.insert("user".into(), pct_decode(user)?);
            }
            if let Some(pw) = pw {
                params.insert("password".into(), pct_decode(pw)?);
            }
            hp
        }
        None => authority,
    };
    if !hostport.is_empty() {
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or("unterminated [ in the connection URI's host")?;
            (h.to_string(), after.strip_prefix(':').map(str::to_string))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p.to_string())),
                None => (hostport.to_string(), None),
            }
        };
        if !host.is_empty() {
            params.insert("host".into(), pct_decode(&host)?);
        }
        if let Some(p) = port.filter(|p| !p.is_empty()) {
            params.insert("port".into(), p);
        }
    }
    if let Some(db) = path.filter(|p| !p.is_empty()) {
        params.insert("dbname".into(), pct_decode(db)?);
    }
    if let Some(q) = query {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("connection URI parameter `{pair}` has no value"))?;
            params.insert(pct_decode(k)?, pct_decode(v)?);
        }
    }
    Ok(params)
}

fn parse_keyword_value(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut params = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!(
                "missing \"=\" after \"{key}\" in the connection string (expected a URI \
                 postgresql://... or key=value pairs)"
            ));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err("unterminated quoted string in the connection string".into())
                    }
                    Some('\\') => {
                        if let Some(c) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        value.push(n);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        params.insert(key, value);
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, String>, Option<PathBuf>);
    impl Env for FakeEnv {
        fn var(&self, key: &str) -> Option<String> {
            self.0.get(key).cloned()
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
        fn os_user(&self) -> Option<String> {
            Some("osuser".into())
        }
    }

    fn env(vars: &[(&'static str, &str)]) -> FakeEnv {
        FakeEnv(
            vars.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            None,
        )
    }

    #[test]
    fn uri_form() {
        let c = ConnInfo::resolve(
            "postgresql://al%40ce:s%3Acret@db.example:6543/my%20db?sslmode=require&application_name=x",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.user, "al@ce");
        assert_eq!(c.password(), Some("s:cret"));
        assert_eq!(c.host, "db.example");
        assert_eq!(c.port, 6543);
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.sslmode, SslMode::Require);
        assert_eq!(c.application_name, "x");
    }

    #[test]
    fn ipv6_and_socket_hosts() {
        let c = ConnInfo::resolve("postgresql://[::1]:5433/d", &env(&[])).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::1", 5433));
        let c = ConnInfo::resolve("postgresql:///d?host=%2Ftmp%2Fsock", &env(&[])).unwrap();
        assert_eq!(c.host, "/tmp/sock");
        assert!(c.is_unix_socket());
    }

    #[test]
    fn keyword_value_form() {
        let c = ConnInfo::resolve(
            "host=h port=1 dbname='a b' user=u password='it\\'s' sslmode=verify-full",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.dbname, "a b");
        assert_eq!(c.password(), Some("it's"));
        assert_eq!(c.sslmode, SslMode::VerifyFull);
        assert!(ConnInfo::resolve("host", &env(&[])).is_err());
        assert!(ConnInfo::resolve("bogus=1", &env(&[])).is_err());
        assert!(ConnInfo::resolve("sslmode=sometimes", &env(&[])).is_err());
    }

    #[test]
    fn environment_fills_gaps() {
        let e = env(&[
            ("PGHOST", "envhost"),
            ("PGPORT", "7777"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "pw"),
        ]);
        let c = ConnInfo::resolve("dbname=x", &e).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str(), c.dbname.as_str()),
            ("envhost", 7777, "envuser", "x")
        );
        assert_eq!(c.password(), Some("pw"));
        // The target wins over the environment.
        let c = ConnInfo::resolve("postgresql://u@h/d", &e).unwrap();
        assert_eq!((c.user.as_str(), c.host.as_str()), ("u", "h"));
        // Defaults: the OS user, and a database named after the user.
        let c = ConnInfo::resolve("host=h", &env(&[])).unwrap();
        assert_eq!((c.user.as_str(), c.dbname.as_str()), ("osuser", "osuser"));
    }

    #[test]
    fn password_is_never_displayed() {
        let c = ConnInfo::resolve("postgresql://u:hunter2@h/d", &env(&[])).unwrap();
        assert!(!c.to_string().contains("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(c.to_string(), "postgresql://u:***@h:5432/d");
    }

    #[test]
    fn pgpass_lookup_and_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".pgpass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:nope\nh:5432:*:u:se\\:cret\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = FakeEnv(HashMap::new(), Some(dir.clone()));
        let c = ConnInfo::resolve("host=h user=u dbname=d", &e).unwrap();
        assert_eq!(c.password(), Some("se:cret"));
        let c = ConnInfo::resolve("host=zz user=u", &e).unwrap();
        assert_eq!(c.password(), Some("fallback"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = ConnInfo::resolve("host=h user=u dbname=d", &e).unwrap();
        assert_eq!(c.password(), None);
        assert!(
            c.warnings[0].contains("group or world access"),
            "{:?}",
            c.warnings
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
