use std::fmt;

use crate::wire::Code;

/// Every error the client returns.
///
/// | variant | meaning | the lock |
/// |---|---|---|
/// | `Timeout` | `T`: the wait elapsed (or wait 0 on a held key) | not acquired |
/// | `Busy(code)` | `B`: refused at once, never retried | not acquired, not queued |
/// | `Indeterminate` | sent, no definite answer (connection lost, `U`) | maybe granted: do **not** enter the critical section |
/// | `NotHolder` | `N` on release: the key is free or held under another token | not yours |
/// | `Auth(code)` | REJECT AUTH_FAILED / BAD_HANDSHAKE, or the server failed its proof | nothing sent |
/// | `Tls` | TLS handshake or certificate verification failed | nothing sent |
/// | `Connect` | no connection within the connect budget | nothing sent |
/// | `Invalid` | a bad argument (checked before sending) or an `E` answer | nothing changed |
/// | `Protocol` | the server broke the protocol | connection dropped |
/// | `NoLeader` | a cluster kept answering `M` within the wait | not executed |
/// | `Cancelled` | the operation was cancelled | withdrawn / compensated |
/// | `Closed` | the client was closed (or the process forked) | — |
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
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
    /// TLS failed (handshake or certificate verification), with the cause.
    Tls(String),
    /// No connection could be established in time, with the last cause.
    Connect(String),
    /// A bad argument, or the server's `E` answer with its code.
    Invalid(Invalid),
    /// The server broke the protocol.
    Protocol(String),
    /// A cluster answered `M` more often than the client follows.
    NoLeader,
    /// The operation was cancelled.
    Cancelled,
    /// The client is closed.
    Closed,
}

/// The detail of [`Error::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The server's code for an `E` answer (`BAD_KEY`, `BAD_LEASE`, …);
    /// `None` for the client's own argument checks.
    pub code: Option<Code>,
    /// What was wrong.
    pub message: String,
}

impl Error {
    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        Error::Invalid(Invalid {
            code: None,
            message: msg.into(),
        })
    }

    /// The protocol code the server sent with this error, if any.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Busy(c) | Error::Auth(Some(c)) => Some(*c),
            Error::Invalid(i) => i.code,
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout => f.write_str("ticketing: timed out, not acquired"),
            Error::Busy(c) => write!(f, "ticketing: busy ({c}), not acquired"),
            Error::Indeterminate => f.write_str("ticketing: outcome unknown (the request was sent, no definite answer came)"),
            Error::NotHolder => f.write_str("ticketing: not the holder"),
            Error::Auth(Some(c)) => write!(f, "ticketing: authentication failed: handshake rejected ({c})"),
            Error::Auth(None) => f.write_str("ticketing: authentication failed: the server did not prove the token (an impostor?)"),
            Error::Tls(m) => write!(f, "ticketing: TLS: {m}"),
            Error::Connect(m) => write!(f, "ticketing: cannot connect: {m}"),
            Error::Invalid(Invalid { code: Some(c), message }) => write!(f, "ticketing: invalid ({c}): {message}"),
            Error::Invalid(Invalid { code: None, message }) => write!(f, "ticketing: invalid argument: {message}"),
            Error::Protocol(m) => write!(f, "ticketing: protocol violation by the server: {m}"),
            Error::NoLeader => f.write_str("ticketing: no leader (too many consecutive redirects)"),
            Error::Cancelled => f.write_str("ticketing: cancelled"),
            Error::Closed => f.write_str("ticketing: client closed"),
        }
    }
}

impl std::error::Error for Error {}
