"""The errors of the Ticketing client. Every error is a TicketingError."""

from __future__ import annotations

from . import _wire


class TicketingError(Exception):
    """Base class of every error the client raises.

    ``code`` is the protocol code (docs/protocol.md §4) when the server sent
    one, else None."""

    code: int | None
    _where = False  # the message already names the operation, key and server

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def code_name(self) -> str | None:
        return None if self.code is None else _wire.code_name(self.code)


class LockTimeout(TicketingError, TimeoutError):
    """The acquire was not granted within its wait (the server answered T,
    or wait 0 found the key held). The lock was not acquired. Also the
    builtin TimeoutError."""


class LockBusy(TicketingError):
    """The server refused the acquire at once (B): definitely not acquired
    and not queued. ``code`` says why: QUEUE_FULL, OVERLOADED,
    CLOCK_UNHEALTHY, SHUTTING_DOWN or NO_QUORUM. Never retried by the client."""

    code: int

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or f"busy ({_wire.code_name(code)}), not acquired", code)


class Indeterminate(TicketingError):
    """The request was written but no definite answer came back (the
    connection was lost, the client closed, or a cluster answered U). For an
    acquire: the lock may have been granted, so do NOT enter the critical
    section (its lease ends it at the latest). For a release: not confirmed;
    the lock may stay held until its lease ends."""


class InsufficientLease(TicketingError):
    """The acquire was granted, but less than its ``min_remaining`` was left
    of the lease (a long queue ate it; edge rule R14): the client released
    the lock at once. Do not start the work."""


class NotSupported(TicketingError):
    """The server does not announce the protocol 1.1 feature this call
    needs (key sets): nothing was sent."""


class NotHolder(TicketingError):
    """A release was answered N: the key is free or held under another token
    (the lease had ended)."""


class AuthError(TicketingError):
    """The server rejected the credentials (AUTH_FAILED, BAD_HANDSHAKE), or
    failed to prove the token (an impostor, or a server without this token)."""


class TLSError(TicketingError):
    """The TLS handshake or the certificate verification failed."""


class ConnectError(TicketingError, ConnectionError):
    """No connection to any server within the connect budget. Nothing was
    sent; the operation did not happen. Also the builtin ConnectionError."""


class NoLeader(ConnectError):
    """A cluster kept answering M (not the leader) beyond the hop limit within
    the wait; nothing was executed."""


class InvalidArgument(TicketingError, ValueError):
    """A bad key, lease or wait, found by the client before anything was sent
    (``code`` None), or an E answer of the server (``code`` set: BAD_KEY,
    BAD_LEASE, BAD_WAIT, NOT_PERMITTED, ...). Nothing changed."""


class ProtocolError(TicketingError):
    """The server broke the protocol (a malformed or unexpected frame); the
    connection was closed."""


class ClientClosed(TicketingError):
    """The client was closed."""


class Cancelled(TicketingError):
    """The operation was cancelled through its CancelToken (blocking API).
    A queued acquire was withdrawn; a grant that won the race is released by
    the client. The asyncio API raises asyncio.CancelledError instead."""


class ClosedIndeterminate(Indeterminate, ClientClosed):
    """The client was closed after the request was written: both closed and
    indeterminate (the lock may have been granted; its lease ends it)."""
