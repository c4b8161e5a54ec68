use std::fmt;
use std::time::Duration;

use crate::error::Error;

/// Default bound of one connection attempt and of the wait for a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default answer allowance of an acquire (edge rule R2, docs/architecture.md
/// "Client library behaviour"): a written acquire unanswered this long past
/// its wait ends [`Error::Indeterminate`](crate::Error::Indeterminate) and is
/// withdrawn with `C`.
pub const DEFAULT_ANSWER_ALLOWANCE: Duration = Duration::from_secs(3);

/// Client configuration, made with [`Config::builder`].
///
/// ```
/// use std::time::Duration;
/// let cfg = ticketing::Config::builder()
///     .addr("127.0.0.1:7470")
///     .token("s3cret")
///     .connect_timeout(Duration::from_secs(2))
///     .build()
///     .unwrap();
/// assert_eq!(cfg.addrs(), ["127.0.0.1:7470"]);
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) addrs: Vec<String>,
    pub(crate) token: Vec<u8>,
    pub(crate) role: u8,
    pub(crate) connect_timeout: Duration,
    #[cfg(feature = "rustls")]
    pub(crate) tls: Option<crate::tls::TlsConfig>,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_cap: Duration,
    pub(crate) release_window: Duration,
    pub(crate) answer_allowance: Duration,
    /// The connection label sent to a 1.1 server (protocol.md §12.3); made by `build`.
    pub(crate) label: String,
    user_label: Option<String>,
    app_name: Option<String>,
    /// Callers write their own frames to a plain TCP socket (the blocking
    /// client: no hop to the runtime thread per request; conn.rs).
    pub(crate) direct_writes: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("addrs", &self.addrs)
            .field("token", &if self.token.is_empty() { "<none>" } else { "<redacted>" })
            .field("role", &self.role)
            .field("connect_timeout", &self.connect_timeout)
            .field("answer_allowance", &self.answer_allowance)
            .field("label", &self.label);
        #[cfg(feature = "rustls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

impl Config {
    /// A builder with the defaults: no token, no TLS, connect timeout 5 s.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            cfg: Config {
                addrs: Vec::new(),
                token: Vec::new(),
                role: 1,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                #[cfg(feature = "rustls")]
                tls: None,
                backoff_base: Duration::from_millis(100),
                backoff_cap: Duration::from_millis(3200),
                release_window: Duration::from_secs(5),
                answer_allowance: DEFAULT_ANSWER_ALLOWANCE,
                label: String::new(),
                user_label: None,
                app_name: None,
                direct_writes: false,
            },
        }
    }

    /// The server addresses.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The connection label the client sends (protocol.md §12.3): the one
    /// set with [`ConfigBuilder::label`], else `[<app> ]<host>/<pid>
    /// rust/<version>`; at most 64 bytes.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// Builds a [`Config`].
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    cfg: Config,
}

impl ConfigBuilder {
    /// Adds a server address `host:port` (for a cluster, any of its nodes).
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.cfg.addrs.push(addr.into());
        self
    }

    /// Adds several server addresses.
    pub fn addrs<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cfg.addrs.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// The client token. With a token the client also checks that the server
    /// proves it, and refuses an impostor with [`Error::Auth`]. Empty = none.
    pub fn token(mut self, token: impl AsRef<[u8]>) -> Self {
        self.cfg.token = token.as_ref().to_vec();
        self
    }

    /// Connect with role admin (protocol.md §1) using the admin token.
    pub fn admin_token(mut self, token: impl AsRef<[u8]>) -> Self {
        self.cfg.token = token.as_ref().to_vec();
        self.cfg.role = 2;
        self
    }

    /// Bounds one connection attempt (TCP, TLS and handshake), how long
    /// [`Client::connect`](crate::Client::connect) waits for the first
    /// connection, and how long an operation waits for one. Default 5 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.cfg.connect_timeout = d;
        self
    }

    /// How long past its wait an acquire that was written may stay
    /// unanswered (edge rule R2): counted from the write, so an acquire with
    /// wait `w` never takes longer than `w` + this against a silent (e.g.
    /// SIGSTOPped) server. It then ends [`Error::Indeterminate`](crate::Error::Indeterminate)
    /// (the lock may have been granted) and is withdrawn with `C`. Default
    /// [`DEFAULT_ANSWER_ALLOWANCE`] (3 s: long enough for a cluster commit
    /// under load). Zero keeps the default.
    pub fn answer_allowance(mut self, d: Duration) -> Self {
        self.cfg.answer_allowance = d;
        self
    }

    /// The whole connection label shown to operators in the admin `locks`
    /// (protocol.md §12.3; informational, never used for authorization):
    /// at most 64 bytes of UTF-8 without control characters (cut at a
    /// character boundary when longer). Empty: no label. Default: see
    /// [`Config::label`].
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.cfg.user_label = Some(label.into());
        self
    }

    /// An application name put before the default label:
    /// `<app> <host>/<pid> rust/<version>`.
    pub fn app_name(mut self, app: impl Into<String>) -> Self {
        self.cfg.app_name = Some(app.into());
        self
    }

    /// Enables TLS (1.2 or later).
    #[cfg(feature = "rustls")]
    pub fn tls(mut self, tls: crate::tls::TlsConfig) -> Self {
        self.cfg.tls = Some(tls);
        self
    }

    /// Reconnect backoff: first step and cap (defaults 100 ms and 3.2 s).
    #[doc(hidden)]
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.cfg.backoff_base = base;
        self.cfg.backoff_cap = cap;
        self
    }

    /// How long releases are retried (default 5 s).
    #[doc(hidden)]
    pub fn release_window(mut self, d: Duration) -> Self {
        self.cfg.release_window = d;
        self
    }

    /// Checks and returns the configuration.
    pub fn build(mut self) -> Result<Config, Error> {
        if self.cfg.addrs.is_empty() {
            return Err(Error::invalid("no server address"));
        }
        let mut uniq: Vec<String> = Vec::new();
        for a in &self.cfg.addrs {
            if split_host_port(a).is_none() {
                return Err(Error::invalid(format!("address {a:?} is not host:port")));
            }
            if !uniq.contains(a) {
                uniq.push(a.clone());
            }
        }
        self.cfg.addrs = uniq;
        if self.cfg.connect_timeout.is_zero() {
            self.cfg.connect_timeout = DEFAULT_CONNECT_TIMEOUT;
        }
        if self.cfg.answer_allowance.is_zero() {
            self.cfg.answer_allowance = DEFAULT_ANSWER_ALLOWANCE;
        }
        let label = match (&self.cfg.user_label, &self.cfg.app_name) {
            (Some(l), _) => l.clone(),
            (None, Some(app)) if !app.is_empty() => format!("{app} {}", default_label()),
            _ => default_label(),
        };
        if label.chars().any(|c| (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32))) {
            return Err(Error::invalid(format!(
                "label {label:?} must be 0..{} bytes of UTF-8 without control characters",
                crate::wire::MAX_LABEL_LEN
            )));
        }
        self.cfg.label = cut(label, crate::wire::MAX_LABEL_LEN);
        Ok(self.cfg)
    }
}

/// `<host>/<pid> rust/<version>` (protocol.md §12.3).
fn default_label() -> String {
    format!("{}/{} rust/{}", hostname(), std::process::id(), crate::VERSION)
}

fn hostname() -> String {
    let from_file = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .filter(|h| !h.is_empty() && !h.contains(char::is_control))
        .unwrap_or_else(|| "localhost".to_string())
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut n = max;
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
    }
    s
}

/// Splits `host:port` (IPv6 in brackets); `None` when malformed.
pub(crate) fn split_host_port(a: &str) -> Option<(&str, u16)> {
    let (host, port) = a.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = if let Some(h) = host.strip_prefix('[') {
        h.strip_suffix(']')?
    } else {
        if host.contains(':') {
            return None;
        }
        host
    };
    if host.is_empty() {
        return None;
    }
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let c = Config::builder().addr("a:1").build().unwrap();
        let want_tail = format!("/{} rust/{}", std::process::id(), crate::VERSION);
        assert!(c.label().ends_with(&want_tail), "{}", c.label());
        assert!(!c.label().contains(' ') || c.label().split(' ').count() == 2, "{}", c.label());
        let c = Config::builder().addr("a:1").app_name("billing").build().unwrap();
        assert!(
            c.label().starts_with("billing ") && c.label().ends_with(&want_tail),
            "{}",
            c.label()
        );
        let c = Config::builder().addr("a:1").label("mine").build().unwrap();
        assert_eq!(c.label(), "mine");
        // Cut at a character boundary to 64 bytes, never sent too long.
        let c = Config::builder().addr("a:1").label("é".repeat(40)).build().unwrap();
        assert_eq!(c.label(), "é".repeat(32));
        assert!(Config::builder().addr("a:1").label("a\x01b").build().is_err());
    }
}
