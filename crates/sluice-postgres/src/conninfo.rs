//! Connection parameters with libpq's conventions, so that sluice connects wherever psql does.
//!
//! A target is a URI (`postgresql://user@h1:5433,h2/db?sslmode=require`) or a `key=value`
//! string, with libpq's multi-host lists (`host=h1,h2 port=5433,5432`), tried in order under
//! `target_session_attrs`. Whatever it leaves out comes from the environment (`PGHOST`,
//! `PGHOSTADDR`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`, `PGSSLMODE`, `PGSSLROOTCERT`,
//! `PGAPPNAME`, `PGCONNECT_TIMEOUT`, `PGOPTIONS`, `PGTARGETSESSIONATTRS`, `PGCLIENTENCODING`)
//! and then libpq's defaults.
//!
//! The session is the one psql would get: `options`/`PGOPTIONS` is sent as is, and the
//! variables libpq turns into session settings (`PGTZ`, `PGDATESTYLE`, `PGGEQO`) are added
//! after it, so they win as they do in libpq. A client encoding other than UTF-8 is refused:
//! the server would convert text from it, and sluice reads input as UTF-8. A missing password is looked up in `~/.pgpass` (or
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

/// Seconds a host's startup may take when the target sets no `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: u64 = 60;

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

/// libpq's `target_session_attrs`: which of the listed servers is acceptable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionAttrs {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
    PreferStandby,
}

impl SessionAttrs {
    fn parse(s: &str) -> Result<SessionAttrs, String> {
        Ok(match s {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            other => {
                return Err(format!(
                    "invalid target_session_attrs `{other}`: expected any, read-write, read-only,                      primary, standby or prefer-standby"
                ))
            }
        })
    }

    /// Whether a server in this state is acceptable (`prefer-standby` accepts a standby on
    /// its first pass; the caller makes a second pass accepting any).
    pub fn accepts(self, in_recovery: bool, read_only: bool) -> bool {
        match self {
            SessionAttrs::Any => true,
            SessionAttrs::ReadWrite => !read_only,
            SessionAttrs::ReadOnly => read_only,
            SessionAttrs::Primary => !in_recovery,
            SessionAttrs::Standby | SessionAttrs::PreferStandby => in_recovery,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::Primary => "primary",
            SessionAttrs::Standby => "standby",
            SessionAttrs::PreferStandby => "prefer-standby",
        }
    }
}

/// How a dead server or network is noticed, in libpq's terms. psql keeps the operating
/// system's defaults (the first keepalive after two hours); a bulk load that must never hang
/// detects a vanished peer within about a minute instead: keepalives after 30 s idle, every
/// 10 s, 3 unanswered probes, and `tcp_user_timeout` 120 s for data the peer never
/// acknowledges. `keepalives`, `keepalives_idle`, `keepalives_interval`, `keepalives_count`
/// and `tcp_user_timeout` (milliseconds, 0 for the system's) in the target override them.
/// `tcp_user_timeout` also bounds a server whose kernel acknowledges while it answers nothing
/// ([`crate::silence`]; 0 keeps waiting there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    pub keepalives: bool,
    pub idle_secs: u64,
    pub interval_secs: u64,
    pub count: u32,
    pub tcp_user_timeout_ms: u64,
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness {
            keepalives: true,
            idle_secs: 30,
            interval_secs: 10,
            count: 3,
            tcp_user_timeout_ms: 120_000,
        }
    }
}

impl Liveness {
    fn from_params(params: &BTreeMap<String, String>) -> Result<Liveness, String> {
        let mut l = Liveness::default();
        let num = |k: &str| -> Result<Option<u64>, String> {
            params
                .get(k)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("invalid {k} `{v}`: expected a whole number"))
                })
                .transpose()
        };
        if let Some(k) = num("keepalives")? {
            l.keepalives = k != 0;
        }
        if let Some(v) = num("keepalives_idle")? {
            l.idle_secs = v.max(1);
        }
        if let Some(v) = num("keepalives_interval")? {
            l.interval_secs = v.max(1);
        }
        if let Some(v) = num("keepalives_count")? {
            l.count = v.clamp(1, 255) as u32;
        }
        if let Some(v) = num("tcp_user_timeout")? {
            l.tcp_user_timeout_ms = v;
        }
        Ok(l)
    }
}

/// One server of a (possibly multi-host) target.
#[derive(Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// Host name, IP address or Unix socket directory (an absolute path).
    pub host: String,
    /// `hostaddr`: the address to connect to without a name lookup.
    pub hostaddr: Option<String>,
    pub port: u16,
    /// The password for this host from the password file, when none was given.
    pgpass: Option<String>,
}

impl HostSpec {
    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/') && self.hostaddr.is_none()
    }

    /// Whether the server is on this machine: a Unix socket, or an address (or a name that
    /// resolves only to addresses) of the loopback interface.
    pub fn is_local(&self) -> bool {
        use std::net::{IpAddr, ToSocketAddrs};
        if self.is_unix_socket() {
            return true;
        }
        let host = self.hostaddr.as_deref().unwrap_or(&self.host);
        if let Ok(ip) = host.parse::<IpAddr>() {
            return ip.is_loopback();
        }
        match (host, self.port).to_socket_addrs() {
            Ok(addrs) => {
                let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                !ips.is_empty() && ips.iter().all(IpAddr::is_loopback)
            }
            Err(_) => false,
        }
    }

    /// `host:port`, for messages.
    pub fn label(&self) -> String {
        let host = self.hostaddr.as_deref().unwrap_or(&self.host);
        if host.contains(':') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Resolved connection parameters.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The servers to try, in order (libpq's `host`/`hostaddr`/`port` lists).
    pub hosts: Vec<HostSpec>,
    pub user: String,
    pub dbname: String,
    password: Option<String>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub application_name: String,
    /// Seconds allowed for each host's whole startup (TCP, TLS, authentication); `None`
    /// waits forever (`connect_timeout=0`, as in libpq). Without `connect_timeout`, sluice
    /// allows [`DEFAULT_CONNECT_TIMEOUT`] where libpq would wait forever: a load never hangs
    /// on a server that accepts and does not answer.
    pub connect_timeout: Option<u64>,
    /// The startup `options` string: `PGOPTIONS`, then `-c` settings from `PGTZ`,
    /// `PGDATESTYLE` and `PGGEQO`.
    pub options: Option<String>,
    pub target_session_attrs: SessionAttrs,
    /// TCP keepalives and the unacknowledged-data timeout: how long a vanished server or
    /// network can keep a stream waiting (see [`Liveness`]).
    pub liveness: Liveness,
    /// The kernel socket buffer each connection asks for (`SO_SNDBUF` and `SO_RCVBUF`), in
    /// bytes as the kernel counts them; `None` leaves the kernel's autotuning (see
    /// [`crate::network`]). Not part of libpq's conventions: `sluice load --socket-buffer`.
    pub socket_buffer: Option<usize>,
    /// Warnings met while resolving (an unsafe `.pgpass`), for the caller to print.
    pub warnings: Vec<String>,
    /// What ends the connections when a load gives its silent server up
    /// ([`crate::silence`]); nothing, outside a load. Not part of what the target is.
    pub ends: crate::silence::Ends,
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
        let sockets: Vec<&HostSpec> = self.hosts.iter().filter(|h| h.is_unix_socket()).collect();
        let authority: Vec<String> = if sockets.is_empty() {
            self.hosts
                .iter()
                .map(|h| {
                    if h.host.contains(':') {
                        format!("[{}]:{}", h.host, h.port)
                    } else {
                        format!("{}:{}", h.host, h.port)
                    }
                })
                .collect()
        } else {
            vec![format!(":{}", self.hosts[0].port)]
        };
        write!(
            f,
            "postgresql://{}{pw}@{}/{}",
            pct_encode(&self.user),
            authority.join(","),
            pct_encode(&self.dbname)
        )?;
        if !sockets.is_empty() {
            let hosts: Vec<&str> = self.hosts.iter().map(|h| h.host.as_str()).collect();
            write!(f, "?host={}", pct_encode(&hosts.join(",")))?;
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
            ("hostaddr", "PGHOSTADDR"),
            ("port", "PGPORT"),
            ("user", "PGUSER"),
            ("dbname", "PGDATABASE"),
            ("password", "PGPASSWORD"),
            ("sslmode", "PGSSLMODE"),
            ("sslrootcert", "PGSSLROOTCERT"),
            ("application_name", "PGAPPNAME"),
            ("connect_timeout", "PGCONNECT_TIMEOUT"),
            ("passfile", "PGPASSFILE"),
            ("options", "PGOPTIONS"),
            ("target_session_attrs", "PGTARGETSESSIONATTRS"),
            ("client_encoding", "PGCLIENTENCODING"),
        ];
        let mut source: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, var) in from_env {
            if !params.contains_key(key) {
                if let Some(v) = env.var(var) {
                    params.insert(key.to_string(), v);
                    source.insert(key, var);
                }
            }
        }
        let hosts = host_list(&params)?;
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
            None => Some(DEFAULT_CONNECT_TIMEOUT),
            Some(t) => match t.trim().parse::<i64>() {
                // libpq: zero or negative waits forever; 1 second is raised to 2.
                Ok(n) if n <= 0 => None,
                Ok(n) => Some(n.max(2) as u64),
                Err(_) => return Err(format!("invalid connect_timeout `{t}`: expected seconds")),
            },
        };
        if let Some(enc) = params.get("client_encoding") {
            check_client_encoding(enc, source.get("client_encoding").copied())?;
        }
        let target_session_attrs = match params.get("target_session_attrs") {
            Some(a) => SessionAttrs::parse(a)?,
            None => SessionAttrs::Any,
        };
        let mut options = params.get("options").cloned().unwrap_or_default();
        // libpq sends these as startup settings, which the server applies after `options`.
        for (var, setting) in [
            ("PGDATESTYLE", "datestyle"),
            ("PGTZ", "timezone"),
            ("PGGEQO", "geqo"),
        ] {
            if let Some(v) = env.var(var).filter(|v| !v.eq_ignore_ascii_case("default")) {
                if !options.is_empty() {
                    options.push(' ');
                }
                options.push_str(&format!("-c {setting}={}", escape_option(&v)));
            }
        }
        let mut info = ConnInfo {
            hosts,
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
            options: (!options.is_empty()).then_some(options),
            target_session_attrs,
            liveness: Liveness::from_params(&params)?,
            socket_buffer: None,
            warnings: Vec::new(),
            ends: crate::silence::Ends::default(),
        };
        if info.password.is_none() {
            let passfile = params
                .get("passfile")
                .map(PathBuf::from)
                .or_else(|| env.home().map(|h| h.join(".pgpass")));
            if let Some(path) = passfile {
                info.lookup_pgpass(&path);
            }
        }
        Ok(info)
    }

    /// The same target with only host `i`: every connection of a load goes where the first did.
    pub fn pinned(&self, i: usize) -> ConnInfo {
        let mut c = self.clone();
        c.hosts = vec![self.hosts[i].clone()];
        c.target_session_attrs = SessionAttrs::Any;
        c
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Replaces the password (tests, and the private cluster which needs none).
    pub fn with_password(mut self, password: Option<String>) -> ConnInfo {
        self.password = password;
        self
    }

    /// Whether the server runs on this machine, which shares its cores with sluice.
    pub fn is_local(&self) -> bool {
        self.hosts.iter().all(|h| {
            let host = h.hostaddr.as_deref().unwrap_or(&h.host);
            h.is_unix_socket() || matches!(host, "localhost" | "::1") || host.starts_with("127.")
        })
    }

    /// Reads `~/.pgpass` (`host:port:db:user:password` lines, `*` wildcards, `\` escapes)
    /// for each host, as libpq does for each host it tries.
    fn lookup_pgpass(&mut self, path: &Path) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if !meta.is_file() {
            return;
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
                return;
            }
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        for i in 0..self.hosts.len() {
            let h = &self.hosts[i];
            let host = if h.is_unix_socket() {
                "localhost".to_string()
            } else {
                h.host.clone()
            };
            let wanted = [
                host,
                h.port.to_string(),
                self.dbname.clone(),
                self.user.clone(),
            ];
            self.hosts[i].pgpass = pgpass_entry(&text, &wanted);
        }
    }

    /// The password to send to `host`: the given one, else its password-file entry.
    pub fn password_for<'a>(&'a self, host: &'a HostSpec) -> Option<&'a str> {
        self.password.as_deref().or(host.pgpass.as_deref())
    }

    /// The tokio-postgres configuration for one host, without TLS (set up by
    /// [`crate::connect`]) and without a connect timeout (the caller bounds the whole startup).
    pub fn to_config(&self, h: &HostSpec) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        if h.is_unix_socket() {
            c.host_path(&h.host);
        } else {
            c.host(&h.host);
        }
        if let Some(addr) = h.hostaddr.as_ref().and_then(|a| a.parse().ok()) {
            c.hostaddr(addr);
        }
        c.port(h.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(&self.application_name);
        if let Some(o) = &self.options {
            c.options(o);
        }
        if let Some(pw) = self.password_for(h) {
            c.password(pw);
        }
        let l = self.liveness;
        c.keepalives(l.keepalives);
        if l.keepalives {
            c.keepalives_idle(std::time::Duration::from_secs(l.idle_secs))
                .keepalives_interval(std::time::Duration::from_secs(l.interval_secs))
                .keepalives_retries(l.count);
        }
        if l.tcp_user_timeout_ms > 0 {
            c.tcp_user_timeout(std::time::Duration::from_millis(l.tcp_user_timeout_ms));
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

/// The password of the first password-file line matching `wanted` (host, port, db, user).
fn pgpass_entry(text: &str, wanted: &[String; 4]) -> Option<String> {
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
            .zip(wanted)
            .all(|(f, w)| f == "*" || f == w);
        if matches {
            return Some(fields[4].clone());
        }
    }
    None
}

/// Escapes a value for the startup `options` string, which the server splits on white space
/// with backslash escapes.
fn escape_option(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if c == '\\' || c.is_whitespace() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Accepts the client encodings that mean "the input is UTF-8" and refuses the others: the
/// server would convert text from them, and sluice reads and validates input as UTF-8.
fn check_client_encoding(enc: &str, var: Option<&str>) -> Result<(), String> {
    let norm: String = enc
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    if matches!(norm.as_str(), "UTF8" | "UNICODE" | "SQLASCII" | "AUTO") {
        return Ok(());
    }
    let from = var.map_or("client_encoding".to_string(), |v| v.to_string());
    Err(format!(
        "client encoding `{enc}` (from {from}) is not supported: sluice reads its input as UTF-8 \
         and does not convert from other encodings. Convert the file first (iconv -f {enc} -t \
         UTF-8) and unset {from}, or set it to UTF8"
    ))
}

/// Splits libpq's comma-separated `host`, `hostaddr` and `port` lists into servers: one port
/// serves every host, otherwise the lists must be as long as each other.
fn host_list(params: &BTreeMap<String, String>) -> Result<Vec<HostSpec>, String> {
    let split = |k: &str| -> Option<Vec<String>> {
        params
            .get(k)
            .map(|v| v.split(',').map(|x| x.trim().to_string()).collect())
    };
    let hostaddrs = split("hostaddr");
    let hosts = match (split("host"), &hostaddrs) {
        (Some(h), _) => h,
        (None, Some(a)) => a.clone(),
        (None, None) => vec![String::new()],
    };
    let n = hosts.len();
    if let Some(a) = &hostaddrs {
        if a.len() != n {
            return Err(format!(
                "could not match {} host addresses to {n} host names",
                a.len()
            ));
        }
    }
    let ports: Vec<u16> = match split("port") {
        None => vec![5432; n],
        Some(p) => {
            let parsed = p
                .iter()
                .map(|x| {
                    if x.is_empty() {
                        return Ok(5432);
                    }
                    x.parse::<u16>().ok().filter(|&v| v > 0).ok_or_else(|| {
                        format!("invalid port `{x}`: expected a number from 1 to 65535")
                    })
                })
                .collect::<Result<Vec<u16>, String>>()?;
            match parsed.len() {
                1 => vec![parsed[0]; n],
                k if k == n => parsed,
                k => return Err(format!("could not match {k} port numbers to {n} hosts")),
            }
        }
    };
    let default = default_host();
    Ok(hosts
        .into_iter()
        .zip(ports)
        .enumerate()
        .map(|(i, (host, port))| HostSpec {
            host: if host.is_empty() {
                default.clone()
            } else {
                host
            },
            hostaddr: hostaddrs
                .as_ref()
                .map(|a| a[i].clone())
                .filter(|a| !a.is_empty()),
            port,
            pgpass: None,
        })
        .collect())
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
    "client_encoding",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
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
    // libpq's multi-host form: `h1:5433,[::1]:5434,h3`.
    if !hostport.is_empty() {
        let (mut hosts, mut ports) = (Vec::new(), Vec::new());
        for hp in hostport.split(',') {
            let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
                let (h, after) = v6
                    .split_once(']')
                    .ok_or("unterminated [ in the connection URI's host")?;
                (h.to_string(), after.strip_prefix(':').unwrap_or(after))
            } else {
                match hp.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), p),
                    None => (hp.to_string(), ""),
                }
            };
            hosts.push(pct_decode(&host)?);
            ports.push(port.to_string());
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            params.insert("host".into(), hosts.join(","));
        }
        if ports.iter().any(|p| !p.is_empty()) {
            params.insert("port".into(), ports.join(","));
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
    fn a_server_on_this_machine_is_local_and_one_across_a_network_is_not() {
        let local = |url: &str| {
            let c = ConnInfo::resolve(url, &env(&[])).unwrap();
            c.hosts.iter().all(HostSpec::is_local)
        };
        assert!(local("postgresql://127.0.0.1:5432/d"));
        assert!(local("postgresql://[::1]:5432/d"));
        assert!(local("postgresql:///d?host=%2Ftmp%2Fsock"));
        assert!(local("postgresql://localhost/d"));
        assert!(!local("postgresql://10.97.1.1:5432/d"));
        assert!(!local("postgresql://db.example/d?hostaddr=192.0.2.7"));
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
        assert_eq!(c.hosts[0].host, "db.example");
        assert_eq!(c.hosts[0].port, 6543);
        assert_eq!(c.dbname, "my db");
        assert_eq!(c.sslmode, SslMode::Require);
        assert_eq!(c.application_name, "x");
    }

    #[test]
    fn ipv6_and_socket_hosts() {
        let c = ConnInfo::resolve("postgresql://[::1]:5433/d", &env(&[])).unwrap();
        assert_eq!((c.hosts[0].host.as_str(), c.hosts[0].port), ("::1", 5433));
        let c = ConnInfo::resolve("postgresql:///d?host=%2Ftmp%2Fsock", &env(&[])).unwrap();
        assert_eq!(c.hosts[0].host, "/tmp/sock");
        assert!(c.hosts[0].is_unix_socket());
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
            (
                c.hosts[0].host.as_str(),
                c.hosts[0].port,
                c.user.as_str(),
                c.dbname.as_str()
            ),
            ("envhost", 7777, "envuser", "x")
        );
        assert_eq!(c.password(), Some("pw"));
        // The target wins over the environment.
        let c = ConnInfo::resolve("postgresql://u@h/d", &e).unwrap();
        assert_eq!((c.user.as_str(), c.hosts[0].host.as_str()), ("u", "h"));
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
        let pw = |c: &ConnInfo, i: usize| c.password_for(&c.hosts[i]).map(str::to_string);
        let c = ConnInfo::resolve("host=h user=u dbname=d", &e).unwrap();
        assert_eq!(pw(&c, 0).as_deref(), Some("se:cret"));
        let c = ConnInfo::resolve("host=zz user=u", &e).unwrap();
        assert_eq!(pw(&c, 0).as_deref(), Some("fallback"));
        // Each host of a list has its own entry, as libpq looks one up per host.
        let c = ConnInfo::resolve("host=zz,h user=u dbname=d", &e).unwrap();
        assert_eq!(pw(&c, 0).as_deref(), Some("fallback"));
        assert_eq!(pw(&c, 1).as_deref(), Some("se:cret"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = ConnInfo::resolve("host=h user=u dbname=d", &e).unwrap();
        assert_eq!(pw(&c, 0), None);
        assert!(
            c.warnings[0].contains("group or world access"),
            "{:?}",
            c.warnings
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn hosts(c: &ConnInfo) -> Vec<(String, u16)> {
        c.hosts.iter().map(|h| (h.host.clone(), h.port)).collect()
    }

    #[test]
    fn multi_host_uri_and_keyword_lists() {
        let c = ConnInfo::resolve("postgresql://u@h1:5433,h2:5432/db", &env(&[])).unwrap();
        assert_eq!(hosts(&c), [("h1".into(), 5433), ("h2".into(), 5432)]);
        assert_eq!(c.to_string(), "postgresql://u@h1:5433,h2:5432/db");
        let c = ConnInfo::resolve("postgresql://u@h1,[::1]:7,h3/db", &env(&[])).unwrap();
        assert_eq!(
            hosts(&c),
            [("h1".into(), 5432), ("::1".into(), 7), ("h3".into(), 5432)]
        );
        let c = ConnInfo::resolve("host=h1,h2 port=5432", &env(&[])).unwrap();
        assert_eq!(hosts(&c), [("h1".into(), 5432), ("h2".into(), 5432)]);
        let c = ConnInfo::resolve("host=h1,h2 port=1,2", &env(&[])).unwrap();
        assert_eq!(hosts(&c), [("h1".into(), 1), ("h2".into(), 2)]);
        let e = ConnInfo::resolve("host=h1,h2,h3 port=1,2", &env(&[])).unwrap_err();
        assert!(
            e.contains("could not match 2 port numbers to 3 hosts"),
            "{e}"
        );
        let c = ConnInfo::resolve("host=a,b target_session_attrs=read-write", &env(&[])).unwrap();
        assert_eq!(c.target_session_attrs, SessionAttrs::ReadWrite);
        assert_eq!(c.pinned(1).hosts.len(), 1);
        assert_eq!(c.pinned(1).hosts[0].host, "b");
        assert!(ConnInfo::resolve("host=a target_session_attrs=fast", &env(&[])).is_err());
    }

    #[test]
    fn bad_ports_are_usage_errors() {
        let e = ConnInfo::resolve("postgresql://u@h:abc/db", &env(&[])).unwrap_err();
        assert!(e.contains("invalid port `abc`"), "{e}");
        assert!(ConnInfo::resolve("port=0", &env(&[])).is_err());
    }

    #[test]
    fn session_variables_become_startup_options() {
        let e = env(&[
            ("PGOPTIONS", "-c search_path=s1"),
            ("PGTZ", "Asia/Kolkata"),
            ("PGDATESTYLE", "SQL, DMY"),
        ]);
        let c = ConnInfo::resolve("host=h", &e).unwrap();
        assert_eq!(
            c.options.as_deref(),
            Some("-c search_path=s1 -c datestyle=SQL,\\ DMY -c timezone=Asia/Kolkata")
        );
        let c = ConnInfo::resolve("host=h options='-c geqo=off'", &env(&[("PGTZ", "default")]))
            .unwrap();
        assert_eq!(c.options.as_deref(), Some("-c geqo=off"));
    }

    #[test]
    fn client_encodings_other_than_utf8_are_refused() {
        for ok in ["UTF8", "utf-8", "unicode", "SQL_ASCII"] {
            ConnInfo::resolve("host=h", &env(&[("PGCLIENTENCODING", ok)])).unwrap();
        }
        let e = ConnInfo::resolve("host=h", &env(&[("PGCLIENTENCODING", "LATIN1")])).unwrap_err();
        assert!(
            e.contains("LATIN1") && e.contains("PGCLIENTENCODING"),
            "{e}"
        );
        assert!(ConnInfo::resolve("client_encoding=WIN1252", &env(&[])).is_err());
    }

    #[test]
    fn liveness_defaults_and_overrides() {
        let c = ConnInfo::resolve("host=h", &env(&[])).unwrap();
        assert_eq!(c.liveness, Liveness::default());
        let c = ConnInfo::resolve(
            "host=h keepalives_idle=5 keepalives_interval=2 keepalives_count=9 \
             tcp_user_timeout=0",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(
            (
                c.liveness.idle_secs,
                c.liveness.interval_secs,
                c.liveness.count,
                c.liveness.tcp_user_timeout_ms
            ),
            (5, 2, 9, 0)
        );
        let c = ConnInfo::resolve("postgresql://h/d?keepalives=0", &env(&[])).unwrap();
        assert!(!c.liveness.keepalives);
        assert!(ConnInfo::resolve("host=h keepalives_idle=soon", &env(&[])).is_err());
    }

    #[test]
    fn connect_timeout_follows_libpq() {
        let t = |v: &str| {
            ConnInfo::resolve(&format!("host=h connect_timeout={v}"), &env(&[]))
                .unwrap()
                .connect_timeout
        };
        assert_eq!(
            (t("0"), t("-3"), t("1"), t("10")),
            (None, None, Some(2), Some(10))
        );
        // Unset: bounded all the same.
        let c = ConnInfo::resolve("host=h", &env(&[])).unwrap();
        assert_eq!(c.connect_timeout, Some(DEFAULT_CONNECT_TIMEOUT));
    }
}
