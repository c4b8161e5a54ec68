use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::wire::Code;

/// What went wrong: [`Error::kind`].
///
/// | kind | meaning | the lock |
/// |---|---|---|
/// | `Timeout` | `T`: the wait elapsed (or wait 0 on a held key) | not acquired |
/// | `Busy(code)` | `B`: refused at once, never retried | not acquired, not queued |
/// | `Indeterminate` | sent, no definite answer (connection lost, `U`) | maybe granted: do **not** enter the critical section |
/// | `NotHolder` | `N` on release: the key is free or held under another token | not yours |
/// | `Auth(code)` | REJECT AUTH_FAILED / BAD_HANDSHAKE, or the server failed its proof | nothing sent |
/// | `Tls` | TLS handshake or certificate verification failed, the server requires TLS, or it does not speak TLS | nothing sent |
/// | `Connect` | no connection within the wait (an acquire) or the connect timeout | nothing sent |
/// | `Invalid` | a bad argument (checked before sending) or an `E` answer | nothing changed |
/// | `Protocol` | the server broke the protocol | connection dropped |
/// | `NoLeader` | a cluster kept answering `M` within the wait | not executed |
/// | `InsufficientLease` | granted with less than the acquire's `min_remaining` left (edge rule R14) | released by the client |
/// | `Unsupported` | the server does not announce the feature (protocol.md §12.1) | nothing sent |
/// | `Cancelled` | the operation was cancelled | withdrawn / compensated |
/// | `Closed` | the client was closed (or the process forked) | — |
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not acquired within the wait.
    Timeout,
    /// The server answered `B` with this code (QUEUE_FULL, OVERLOADED,
    /// CLOCK_UNHEALTHY, SHUTTING_DOWN, NO_QUORUM). Definitely not acquired.
    Busy(Code),
    /// The request was written but no definite answer came back. For an
    /// acquire the lock may have been granted (its lease ends it); for a
    /// release it may still be held until its lease ends.
    Indeterminate,
    /// A release was answered `N`.
    NotHolder,
    /// The handshake was rejected (with the REJECT code AUTH_FAILED or
    /// BAD_HANDSHAKE), or the server could not prove the token (an impostor:
    /// `None`).
    Auth(Option<Code>),
    /// TLS failed (handshake or certificate verification; the server
    /// requires TLS; the server does not speak TLS), with the cause.
    Tls(String),
    /// No connection could be established in time, with the last cause.
    Connect(String),
    /// A bad argument, or the server's `E` answer with its code.
    Invalid(Invalid),
    /// The server broke the protocol.
    Protocol(String),
    /// A cluster answered `M` more often than the client follows.
    NoLeader,
    /// The lock was granted with less than the acquire's minimum working
    /// time left (this much); the client released it (edge rule R14).
    InsufficientLease(Duration),
    /// The server does not support the feature (protocol 1.1, §12.1).
    Unsupported(String),
    /// The operation was cancelled.
    Cancelled,
    /// The client is closed.
    Closed,
}

/// The detail of [`ErrorKind::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The server's code for an `E` answer (`BAD_KEY`, `BAD_LEASE`, …);
    /// `None` for the client's own argument checks.
    pub code: Option<Code>,
    /// What was wrong.
    pub message: String,
}

/// Every error the client returns: its [`ErrorKind`], where it happened
/// (the operation, the key and the server address, edge rule R15) and the
/// underlying I/O or TLS error as [`std::error::Error::source`].
///
/// ```
/// # fn demo(r: Result<ticketing::Lease, ticketing::Error>) {
/// use ticketing::ErrorKind;
/// match r {
///     Ok(lease) => drop(lease),
///     Err(e) if *e.kind() == ErrorKind::Timeout => println!("held by someone else"),
///     Err(e) if *e.kind() == ErrorKind::Indeterminate => println!("unknown: do not enter: {e}"),
///     Err(e) => println!("{e}"),
/// }
/// # }
/// ```
///
/// Two errors compare equal when their kinds do (`err == ErrorKind::Timeout`
/// works too).
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    at: Option<Box<Where>>,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

#[derive(Clone, Debug)]
struct Where {
    op: &'static str,
    key: String,
    addr: String,
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Error {
        Error {
            kind,
            at: None,
            source: None,
        }
    }
}

impl Error {
    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        ErrorKind::Invalid(Invalid {
            code: None,
            message: msg.into(),
        })
        .into()
    }

    pub(crate) fn with_source(mut self, e: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>) -> Error {
        if self.source.is_none() {
            self.source = e;
        }
        self
    }

    /// Names where the error happened (kept when already set).
    pub(crate) fn at(mut self, op: &'static str, key: &[u8], addr: &str) -> Error {
        if self.at.is_none() {
            self.at = Some(Box::new(Where {
                op,
                key: String::from_utf8_lossy(key).into_owned(),
                addr: addr.to_string(),
            }));
        }
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The key of the lock call that failed, if any.
    pub fn key(&self) -> Option<&str> {
        self.at.as_ref().map(|w| w.key.as_str())
    }

    /// The server address the call was sent to or waited for (several,
    /// comma separated, when no connection was up), if known.
    pub fn addr(&self) -> Option<&str> {
        self.at.as_ref().map(|w| w.addr.as_str()).filter(|a| !a.is_empty())
    }

    /// The protocol code the server sent with this error, if any.
    pub fn code(&self) -> Option<Code> {
        match &self.kind {
            ErrorKind::Busy(c) | ErrorKind::Auth(Some(c)) => Some(*c),
            ErrorKind::Invalid(i) => i.code,
            _ => None,
        }
    }
}

impl PartialEq for Error {
    fn eq(&self, o: &Error) -> bool {
        self.kind == o.kind
    }
}

impl Eq for Error {}

impl PartialEq<ErrorKind> for Error {
    fn eq(&self, o: &ErrorKind) -> bool {
        self.kind == *o
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind);
        if let Some(w) = &self.at {
            d.field("op", &w.op).field("key", &w.key).field("addr", &w.addr);
        }
        if let Some(s) = &self.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Timeout => f.write_str("ticketing: timed out, not acquired"),
            ErrorKind::Busy(c) => write!(f, "ticketing: busy ({c}), not acquired"),
            ErrorKind::Indeterminate => f.write_str("ticketing: outcome unknown (the request was sent, no definite answer came)"),
            ErrorKind::NotHolder => f.write_str("ticketing: not the holder"),
            ErrorKind::Auth(Some(c)) => write!(f, "ticketing: authentication failed: handshake rejected ({c})"),
            ErrorKind::Auth(None) => f.write_str("ticketing: authentication failed: the server did not prove the token (an impostor?)"),
            ErrorKind::Tls(m) => write!(f, "ticketing: TLS: {m}"),
            ErrorKind::Connect(m) => write!(f, "ticketing: cannot connect: {m}"),
            ErrorKind::Invalid(Invalid { code: Some(c), message }) => write!(f, "ticketing: invalid ({c}): {message}"),
            ErrorKind::Invalid(Invalid { code: None, message }) => write!(f, "ticketing: invalid argument: {message}"),
            ErrorKind::Protocol(m) => write!(f, "ticketing: protocol violation by the server: {m}"),
            ErrorKind::NoLeader => f.write_str("ticketing: no leader (too many consecutive redirects)"),
            ErrorKind::InsufficientLease(d) => write!(
                f,
                "ticketing: insufficient lease: granted with {} ms left, below the minimum working time (released)",
                d.as_millis()
            ),
            ErrorKind::Unsupported(m) => write!(f, "ticketing: not supported by this server: {m}"),
            ErrorKind::Cancelled => f.write_str("ticketing: cancelled"),
            ErrorKind::Closed => f.write_str("ticketing: client closed"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(w) = &self.at {
            if w.addr.is_empty() {
                write!(f, "{} {:?}: ", w.op, w.key)?;
            } else {
                write!(f, "{} {:?} at {}: ", w.op, w.key, w.addr)?;
            }
        }
        fmt::Display::fmt(&self.kind, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn where_and_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::from(ErrorKind::Connect("dial a:1: refused".into()))
            .with_source(Some(Arc::new(io)))
            .at("acquire", b"k", "127.0.0.1:7470");
        assert_eq!(
            e.to_string(),
            "acquire \"k\" at 127.0.0.1:7470: ticketing: cannot connect: dial a:1: refused"
        );
        assert_eq!(e.key(), Some("k"));
        assert_eq!(e.addr(), Some("127.0.0.1:7470"));
        let src = e.source().expect("the io error is the source");
        assert_eq!(
            src.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(e, ErrorKind::Connect("dial a:1: refused".into()));
    }

    #[test]
    fn busy_names_its_code_once() {
        let e = Error::from(ErrorKind::Busy(Code::QUEUE_FULL)).at("acquire", b"where/busy", "h:1");
        let s = e.to_string();
        assert_eq!(s.matches("QUEUE_FULL").count(), 1, "{s}");
        assert!(s.contains("where/busy") && s.contains("h:1"), "{s}");
    }
}
