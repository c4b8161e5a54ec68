"""What the blocking and the asyncio client share: argument checks, the
lease handle's data, backoff schedules, the release state machine."""

from __future__ import annotations

import datetime
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Union

from . import _wire
from .errors import ClientClosed, ClosedIndeterminate, Indeterminate, InvalidArgument, NotHolder, TicketingError

Duration = Union[float, int, datetime.timedelta]
"""A duration: float (or int) seconds, or a datetime.timedelta."""

Key = Union[str, bytes]
"""A key: a str (encoded as UTF-8) or raw bytes."""

CLIENT_VERSION = "0.1.0"

# Fixed parameters of the client behaviour (architecture.md, "Client library
# behaviour"); the same as the Go client's (client/options.go).
DEFAULT_CONNECT_TIMEOUT = 5.0
BACKOFF_BASE = 0.1  # first reconnect step
BACKOFF_CAP = 3.2
REDIRECT_BACKOFF_BASE = 0.025
REDIRECT_BACKOFF_CAP = 0.2
RELEASE_WINDOW = 5.0  # releases are retried until this long after they were requested
RELEASE_QUEUE_LEN = 4096  # bound of the background release queue
MAX_MOVES = 3  # consecutive M answers followed before backing off (protocol.md §7)
MAX_EXTRA_ENDPOINTS = 32  # addresses learned from M answers
MAX_WRITE_BUFFER = 4 << 20  # unsent bytes above which a connection takes no new requests

# Call owners: who consumes a call's completion.
OWNER_CALLER = 0
OWNER_ABANDONED = 1  # nobody waits: a grant is compensated
OWNER_RELEASER = 2
OWNER_DROPPED = 3  # nobody, nothing to do

# Why a call ended without an answer.
FAIL_NONE = 0
FAIL_UNSENT = 1  # never handed to the socket: not executed, safe to retry
FAIL_LOST = 2  # handed to the socket, no answer: maybe executed


def key_bytes(key: Key) -> bytes:
    """The key's bytes, checked as the server would (protocol.md §2.1)."""
    if isinstance(key, str):
        try:
            b = key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument("key must be 1..250 bytes of valid UTF-8 (it contains a lone surrogate)") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        b = bytes(key)
    else:
        raise InvalidArgument(f"key must be str or bytes, not {type(key).__name__}")
    if not _wire.valid_key(b):
        raise InvalidArgument("key must be 1..250 bytes of UTF-8 without control characters")
    return b


def millis(d: Duration, what: str, *, minimum: int = 0) -> int:
    """d in whole milliseconds, rounded up; InvalidArgument when it is not a
    duration, negative, below minimum or beyond the protocol's u32."""
    if isinstance(d, datetime.timedelta):
        secs = d.total_seconds()
        # exact for microsecond resolution
        us = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
        ms = -((-us) // 1000)
    elif isinstance(d, bool) or not isinstance(d, (int, float)):
        raise InvalidArgument(f"{what} must be seconds (float) or a datetime.timedelta, not {type(d).__name__}")
    else:
        secs = float(d)
        if math.isnan(secs) or math.isinf(secs):
            raise InvalidArgument(f"{what} must be a finite duration of 0..{_wire.MAX_U32} ms")
        if isinstance(d, float):
            us = round(d * 1_000_000)  # to the microsecond, then up to the millisecond
            ms = -((-us) // 1000)
        else:
            ms = d * 1000
    if secs < 0 or ms < 0:
        raise InvalidArgument(f"{what} must be {minimum}..{_wire.MAX_U32} ms, not negative (got {d!r})")
    if ms < minimum:
        raise InvalidArgument(f"{what} must be at least {minimum} ms (at most {_wire.MAX_U32} ms; got {d!r})")
    if ms > _wire.MAX_U32:
        raise InvalidArgument(f"{what} must be at most {_wire.MAX_U32} ms (got {ms} ms)")
    return int(ms)


def seconds(d: Duration, what: str) -> float:
    if isinstance(d, datetime.timedelta):
        s = d.total_seconds()
    elif isinstance(d, bool) or not isinstance(d, (int, float)):
        raise InvalidArgument(f"{what} must be seconds (float) or a datetime.timedelta")
    else:
        s = float(d)
    if math.isnan(s) or s <= 0 or math.isinf(s):
        raise InvalidArgument(f"{what} must be a positive duration")
    return s


def split_addr(addr: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' → (host, port)."""
    if not isinstance(addr, str):
        raise InvalidArgument(f"address must be a str 'host:port', not {type(addr).__name__}")
    if "://" in addr or "/" in addr:
        raise InvalidArgument(
            f"address {addr!r} is not host:port: give the server's address without a scheme or path, "
            "e.g. '127.0.0.1:7470' (Ticketing speaks its own protocol, not HTTP)"
        )
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"address {addr!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise InvalidArgument(f"address {addr!r} is not host:port (an IPv6 address goes in brackets: '[::1]:7470')")
    if not host or any(ch.isspace() for ch in host):
        raise InvalidArgument(f"address {addr!r}: bad host")
    p = int(port)
    if not 0 < p < 65536:
        raise InvalidArgument(f"address {addr!r}: bad port")
    return host, p


def backoff_step(base: float, ceiling: float, n: int) -> float:
    """The step before attempt n >= 1: base, 2*base, ... capped at ceiling."""
    d = base
    for _ in range(1, n):
        if d >= ceiling:
            break
        d *= 2
    return min(d, ceiling)


def jitter(step: float) -> float:
    """A delay drawn uniformly from [0, step]: full jitter (edge rule R16)."""
    return random.random() * step


def reconnect_delay(n: int) -> float:
    return jitter(backoff_step(BACKOFF_BASE, BACKOFF_CAP, n))


def redirect_delay(n: int) -> float:
    return jitter(backoff_step(REDIRECT_BACKOFF_BASE, REDIRECT_BACKOFF_CAP, n))


class CancelToken:
    """Cancels blocking operations from another thread.

    Pass it as ``cancel=`` to Client.acquire or Client.lock; ``cancel()``
    makes the waiting call raise Cancelled: a queued acquire is withdrawn
    (C) and a grant that won the race is released by the client itself.
    A token can be shared by many calls; once cancelled it stays cancelled."""

    __slots__ = ("_callbacks", "_cancelled", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            cb()

    def _add(self, cb: Callable[[], None]) -> bool:
        """Register cb; False (not registered) when already cancelled."""
        with self._lock:
            if self._cancelled:
                return False
            self._callbacks.append(cb)
            return True

    def _remove(self, cb: Callable[[], None]) -> None:
        with self._lock:
            try:
                self._callbacks.remove(cb)
            except ValueError:
                pass


class LeaseBase:
    """A granted lock: its key, fencing token and conservative local deadline.

    ``token`` is the fencing token (an exact u64, strictly greater than every
    token issued before it): pass it to every resource the lock protects,
    which must reject a token lower than the highest it has seen, with the
    check and the write in one transaction.

    ``deadline`` is in time.monotonic() seconds: the local time just before
    the acquire was written, plus the time the server says it waited in the
    queue, plus the lease. The server's lease cannot end before it (keep a
    small margin for clock rate differences); past it the lock may belong to
    someone else."""

    __slots__ = ("_body", "_ending", "_released", "deadline", "key", "key_bytes", "keys", "lease_ms", "token")

    def __init__(self, key: bytes, token: int, deadline: float, lease_ms: int) -> None:
        self.key_bytes = key
        self.key = key.decode("utf-8")
        self.token = token
        self.deadline = deadline
        self.lease_ms = lease_ms
        self._released = False
        self._ending: list[Callable[[], None]] = []  # fired once released (R12)
        self.keys: tuple[str, ...] = (self.key,)  # every key of a key set (protocol 1.1), else (key,)
        self._body = b""  # a key set's X body

    def remaining(self) -> float:
        """Seconds until the local deadline (negative once past it)."""
        return self.deadline - time.monotonic()

    def expired(self, margin: Duration = 0.0) -> bool:
        """True when less than margin (seconds) is left before the deadline:
        the lock must then be considered lost (or about to be)."""
        m = margin.total_seconds() if isinstance(margin, datetime.timedelta) else float(margin)
        return self.remaining() <= m

    @property
    def released(self) -> bool:
        """True once the server confirmed the release (O)."""
        return self._released

    def _mark_released(self) -> None:
        self._released = True
        fire, self._ending = self._ending, []
        for f in fire:
            f()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} key={self.key!r} token={self.token} "
            f"remaining={self.remaining():.3f}s released={self._released}>"
        )


class ReleaseState:
    """Interprets the answers to one release's attempts (client/release.go)."""

    __slots__ = ("body", "deadline", "key", "maybe", "moves", "nkeys", "retries", "token", "woken")

    def __init__(
        self, key: bytes, token: int, window: float = RELEASE_WINDOW, body: bytes = b"", nkeys: int = 0
    ) -> None:
        self.key = key  # a set's first key
        self.body = body  # a set's keys (X body), else b""
        self.nkeys = nkeys  # the keys of a set, 0 for one key
        self.token = token
        self.deadline = time.monotonic() + window
        self.maybe = False  # an earlier attempt may have been executed
        self.moves = 0
        self.retries = 0
        self.woken = False

    def outcome(
        self,
        fail: int,
        closed: bool,
        status: int,
        code: int,
        payload: bytes,
        follow: Callable[[str], None],
        addr: str = "",
    ) -> tuple[bool, float, TicketingError | None]:
        """(final, wait before the next try, error or None for O); errors
        name the key and the server that answered (R15)."""
        at = self.at(addr)
        if fail != FAIL_NONE:
            if closed:
                if fail == FAIL_UNSENT and not self.maybe:  # nothing reached the server (R7)
                    return True, 0.0, ClientClosed(f"{at}: the client was closed (nothing was sent)")
                return True, 0.0, ClosedIndeterminate(f"{at}: not confirmed: the client closed")
            if fail == FAIL_UNSENT:
                return False, 0.0, None
            self.maybe = True
            self.retries += 1
            return False, redirect_delay(self.retries), None
        if status == _wire.ST_RELEASED:
            return True, 0.0, None
        if status == _wire.ST_NOT_HOLDER:
            if self.maybe:
                return (
                    True,
                    0.0,
                    Indeterminate(
                        f"{at}: the token no longer holds the key; an earlier unconfirmed attempt may have released it"
                    ),
                )
            return True, 0.0, NotHolder(f"{at}: not the holder: the key is free or held under another token")
        if status == _wire.ST_MOVED:
            follow(payload.decode("ascii", "replace"))
            self.moves += 1
            if self.moves > MAX_MOVES:
                self.moves = 0
                self.retries += 1
                return False, redirect_delay(self.retries), None
            return False, 0.0, None
        if status == _wire.ST_UNKNOWN:
            self.maybe = True
            self.retries += 1
            return False, redirect_delay(self.retries), None
        return True, 0.0, server_error(code, payload, what=at)

    @property
    def op(self) -> int:
        return _wire.OP_RELEASE_SET if self.nkeys else _wire.OP_RELEASE

    def at(self, addr: str = "") -> str:
        k = repr(self.key.decode("utf-8", "replace"))
        if self.nkeys:
            k = f"the set of {self.nkeys} keys from {k}"
        return f"release {k} on {addr}" if addr else f"release {k}"

    def give_up(self, cause: BaseException | None = None) -> Indeterminate:
        msg = f"{self.at()}: not confirmed within {RELEASE_WINDOW:g} s"
        if cause is not None:
            msg += f": {cause}"
        return Indeterminate(msg)


def server_error(code: int, payload: bytes, what: str = "", limit: str = "") -> InvalidArgument:
    """The server's E answer: what was asked, the server's message and,
    for BAD_LEASE / BAD_WAIT, the value sent and the limit that refused it."""
    msg = payload.decode("utf-8", "replace")
    name = _wire.code_name(code)
    text = f"server error {name}: {msg}" if msg else f"server error {name}"
    if limit:
        text += f" ({limit})"
    return InvalidArgument(f"{what}: {text}" if what else text, code)


def limit_hint(code: int, lease_ms: int, wait_ms: int) -> str:
    """Why the server refused a lease or a wait: the value and the limit."""
    if code == _wire.CODE_BAD_LEASE:
        return (
            f"lease {lease_ms} ms is above the server's maximum lease "
            "(ticketing serve --max-lease, default 1h; the lease must be 1 ms..max-lease)"
        )
    if code == _wire.CODE_BAD_WAIT:
        return (
            f"wait {wait_ms} ms is above the server's maximum wait "
            "(ticketing serve --max-wait, default 15m; the wait must be 0..max-wait)"
        )
    return ""
