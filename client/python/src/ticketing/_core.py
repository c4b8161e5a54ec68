"""The protocol core both front ends share (client.py: threads; aio.py:
asyncio). Issue 32 finding 8: one copy of every rule, two thin front ends.

* Call: one request and its answer.
* ConnCore: the protocol state of one connection (req_id allocation, the
  write buffer and its frame counters, matching answers, taking the pending
  calls down with the connection).
* ClientCore: the pool (the known leader first, then round robin; M
  followed), the client's settings, and the operations themselves
  (acquire, release, ping, admin) written once as coroutines over a few
  waits that each front end provides: ``_send`` (queue a call, waiting for
  a connection or a slot), ``_wait_call``, ``_wait_release`` and
  ``_sleep_redirect``. The blocking front end's waits block and never
  suspend, so its operations run through run_sync (one coroutine.send).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from . import _wire
from ._common import (
    CLIENT_VERSION,
    FAIL_LOST,
    FAIL_NONE,
    FAIL_UNSENT,
    MAX_EXTRA_ENDPOINTS,
    MAX_MOVES,
    MAX_WRITE_BUFFER,
    OWNER_ABANDONED,
    OWNER_CALLER,
    OWNER_DROPPED,
    OWNER_RELEASER,
    CancelToken,
    Duration,
    Key,
    LeaseBase,
    ReleaseState,
    key_bytes,
    limit_hint,
    redirect_delay,
    seconds,
    server_error,
    split_addr,
)
from .errors import (
    AuthError,
    Cancelled,
    ClientClosed,
    ClosedIndeterminate,
    ConnectError,
    Indeterminate,
    InsufficientLease,
    InvalidArgument,
    LockBusy,
    LockTimeout,
    NoLeader,
    NotSupported,
    ProtocolError,
    TicketingError,
    TLSError,
)

log = logging.getLogger("ticketing")
log.addHandler(logging.NullHandler())

T = TypeVar("T")

DOWN = 0
UP = 1

ENQ_OK = 0
ENQ_DOWN = 1  # not connected (or its write buffer is over its bound)
ENQ_FULL = 2  # connected, but all of max_inflight is in use
ENQ_UNSUPPORTED = 3  # the server does not announce the call's feature (key sets)

ACQUIRES = (_wire.OP_ACQUIRE, _wire.OP_ACQUIRE_SET)
SET_OPS = (_wire.OP_ACQUIRE_SET, _wire.OP_RELEASE_SET)

READ_ONLY_ADMIN = ("status", "locks", "time", "members")

OWNER_SETUP = 4  # the connection's own setup (feature ping, label): handled by the core

CODE_TLS_REQUIRED = 12  # protocol.md §12.5
DEFAULT_ANSWER_ALLOWANCE = 3.0  # R2: one default in every client (the Go client's WithAnswerAllowance)
FIRST_CONNECT_GRACE = 1.0  # R1: a first connection may be waited for this long past a shorter wait


class NoSlot(Exception):
    """No free max_inflight slot within the wait."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a core operation whose waits all block (the blocking front end):
    it completes in one send."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("ticketing: a blocking operation suspended")


class Call:
    """One request and, once completed, its answer (or why it has none)."""

    __slots__ = (
        "a1",
        "a2",
        "body",
        "budget",
        "code",
        "conn",
        "counts",
        "fail",
        "fail_err",
        "job",
        "key",
        "nkeys",
        "op",
        "overdue",
        "owner",
        "payload",
        "pending",
        "queued",
        "req_id",
        "sent",
        "seq",
        "status",
        "value",
        "waiter",
    )

    def __init__(self, op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> None:
        self.op = op
        self.key = key
        self.a1 = a1  # A: lease_ms; R: token; C: target
        self.a2 = a2  # A: wait_ms
        self.body = body
        self.counts = False
        self.budget = 0.0  # set once the call waited for a connection: the end of its wait
        self.conn: Any = None  # the front end's connection (a ConnCore)
        self.req_id = 0
        self.seq = 0
        self.sent = 0.0
        self.pending = False
        self.owner = OWNER_CALLER
        self.overdue = False  # no answer within wait + the answer allowance (R2)
        self.nkeys = 0  # S/X: the number of keys in body
        self.job: Any = None  # the blocking releaser's job
        self.status = 0
        self.code = 0
        self.queued = 0
        self.value = 0
        self.payload = b""
        self.fail = FAIL_NONE
        self.fail_err: BaseException | None = None
        self.waiter: Any = None  # a locked threading.Lock, or an asyncio.Future

    def granted(self) -> bool:
        return self.fail == FAIL_NONE and self.op in ACQUIRES and self.status == _wire.ST_GRANTED


class ConnCore:
    """The protocol state of one connection. The blocking front end calls
    the *_locked methods under its connection lock; asyncio needs none."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.host, self.port = split_addr(addr)
        self.state = DOWN
        self.ever_up = False
        self.failures = 0
        self.max_inflight = 1
        self.inflight = 0
        self.pending: dict[int, Call] = {}
        self.next_id = 0
        self.wbuf = bytearray()
        self.seq = 0
        self.taken = 0
        self.cfg_err: TicketingError | None = None  # the last attempt failed auth or TLS (R4)
        self.features = 0  # protocol 1.1 feature bits the server announced (§12.1)
        self.features_known = False

    def note_failed(self, cl: ClientCore[Any], err: TicketingError) -> None:
        self.failures += 1  # written by this connection's own thread/task only
        n = self.failures
        cl._last_err = err
        self.cfg_err = err if isinstance(err, (AuthError, TLSError)) else None
        lvl = logging.WARNING if n == 1 else logging.DEBUG
        if isinstance(err, AuthError):
            lvl = logging.ERROR
        log.log(lvl, "ticketing: connect to %s failed (attempt %d): %s", self.addr, n, err)

    def up_locked(self, w: _wire.Welcome) -> None:
        self.cfg_err = None
        self.features = 0
        self.features_known = False
        self.state = UP
        self.ever_up = True
        self.failures = 0
        self.max_inflight = max(1, min(w.max_inflight, 1 << 30))
        self.inflight = 0
        self.next_id = 0
        self.seq = self.taken = 0
        self.wbuf = bytearray()

    def admit_locked(self, c: Call, backlog: int = 0) -> int:
        if self.state != UP or len(self.wbuf) + backlog > MAX_WRITE_BUFFER:
            return ENQ_DOWN
        if c.op in SET_OPS:
            if not self.features_known:
                return ENQ_DOWN  # wait for the feature pong (§12.1)
            if not self.features & _wire.FEATURE_KEY_SETS:
                return ENQ_UNSUPPORTED
        if c.counts and self.inflight >= self.max_inflight:
            return ENQ_FULL
        return ENQ_OK

    def enqueue_locked(self, c: Call) -> None:
        """Encode c into the write buffer under the next req_id no
        outstanding request uses (protocol.md §2.1 check 3; never 0)."""
        pending = self.pending
        rid = self.next_id
        while True:
            rid = (rid + 1) & 0xFFFFFFFF
            if rid and rid not in pending:
                break
        self.next_id = rid
        c.conn = self
        c.req_id = rid
        c.seq = self.seq
        c.pending = True
        self.seq += 1
        pending[rid] = c
        if c.counts:
            self.inflight += 1
        op = c.op
        if op == _wire.OP_ACQUIRE:
            c.sent = now = time.monotonic()  # t_send (protocol.md §5): before the frame can be written
            if c.a2 and c.budget:  # sent after waiting for a connection: only the wait left
                c.a2 = max(0, min(c.a2, int((c.budget - now) * 1000)))
            self.wbuf += _wire.encode_acquire(rid, c.key, c.a1, c.a2)
        elif op == _wire.OP_ACQUIRE_SET:
            c.sent = now = time.monotonic()
            if c.a2 and c.budget:
                c.a2 = max(0, min(c.a2, int((c.budget - now) * 1000)))
            self.wbuf += _wire.encode_acquire_set(rid, c.nkeys, c.body, c.a1, c.a2)
        elif op == _wire.OP_RELEASE_SET:
            self.wbuf += _wire.encode_release_set(rid, c.nkeys, c.body, c.a1)
        elif op == _wire.OP_RELEASE:
            self.wbuf += _wire.encode_release(rid, c.key, c.a1)
        elif op == _wire.OP_CANCEL:
            self.wbuf += _wire.encode_cancel(rid, c.key, c.a1)
        elif op == _wire.OP_PING:
            c.sent = time.monotonic()
            self.wbuf += _wire.encode_ping(rid, c.a1)
        elif op == _wire.OP_LABEL:
            self.wbuf += _wire.encode_label(rid, c.body)
        else:
            self.wbuf += _wire.encode_query(rid, c.body)

    def take_wbuf_locked(self) -> bytes:
        buf = bytes(self.wbuf)
        self.wbuf = bytearray()
        self.taken = self.seq
        return buf

    def match_locked(self, resps: list[_wire.Response]) -> tuple[list[Call], ProtocolError | None, bool, int]:
        """Match answers to pending calls: (completed, a protocol violation,
        whether a max_inflight slot was freed, how many matched nothing)."""
        done: list[Call] = []
        pending = self.pending
        freed = False
        unknown = 0
        for r in resps:
            c = pending.get(r.req_id)
            if c is None or (r.status == _wire.ST_ERROR and r.code == _wire.CODE_DUPLICATE_REQ_ID):
                unknown += 1  # never complete an outstanding request with a code-25 E
                continue
            if not _wire.fits(c.op, r.status):
                return (
                    done,
                    ProtocolError(f"protocol violation: {chr(c.op)!r} answered with {chr(r.status)!r}"),
                    freed,
                    unknown,
                )
            del pending[r.req_id]
            c.pending = False
            if c.counts:
                self.inflight -= 1
                freed = True
            c.status = r.status
            c.code = r.code
            c.queued = r.queued
            c.value = r.value
            c.payload = r.payload
            done.append(c)
        return done, None, freed, unknown

    def down_locked(self, cause: BaseException) -> list[Call]:
        """The connection is gone: every pending call fails as unsent (never
        handed to the socket) or lost (maybe executed)."""
        self.state = DOWN
        calls = list(self.pending.values())
        self.pending = {}
        taken = self.taken
        for c in calls:
            c.pending = False
            c.fail = FAIL_LOST if c.seq < taken else FAIL_UNSENT
            c.fail_err = cause
        self.inflight = 0
        self.wbuf = bytearray()
        return calls

    def abandon_locked(self, c: Call, cancel: Call, withdraw: bool = False) -> bool | None:
        """The caller gives up on c: None when c was already answered; else
        c is left to the reader (which compensates a grant), and True when a
        queued acquire (or, with withdraw, any acquire) must be withdrawn
        (cancel, a C, was queued)."""
        if not c.pending or c.owner != OWNER_CALLER:
            return None
        c.owner = OWNER_ABANDONED
        if c.op not in ACQUIRES or not (c.counts or withdraw) or self.state != UP:
            return False
        cancel.owner = OWNER_DROPPED
        self.enqueue_locked(cancel)
        return True

    def drop_locked(self, c: Call) -> bool:
        if not c.pending:
            return False
        c.owner = OWNER_DROPPED
        return True

    def connecting(self) -> bool:
        return self.state == DOWN and not self.ever_up and self.failures == 0

    def log_lost(self, cause: BaseException, n: int) -> None:
        if not isinstance(cause, ClientClosed):
            log.warning("ticketing: connection to %s lost (%d pending): %s", self.addr, n, cause)


C = TypeVar("C", bound=ConnCore)


class Endpoint(Generic[C]):
    __slots__ = ("addr", "conns")

    def __init__(self, addr: str, conns: list[C]) -> None:
        self.addr = addr
        self.conns = conns

    def connecting(self) -> bool:
        return any(cn.connecting() for cn in self.conns)


async def handshake(
    read_exact: Callable[[int, str], Awaitable[bytes]],
    write: Callable[[bytes], None],
    token: bytes,
    role: int,
) -> _wire.Welcome:
    """HELLO, AUTH, WELCOME (protocol.md §3) with the mutual proof."""
    first = await read_exact(_wire.HELLO_LEN, "HELLO")
    if first[0] == 0x45 and first[1] == CODE_TLS_REQUIRED:  # REJECT TLS_REQUIRED (protocol.md §12.4)
        raise TLSError(
            "the server requires TLS (it answered REJECT TLS_REQUIRED): connect with tls=", CODE_TLS_REQUIRED
        )
    try:
        hello = _wire.decode_hello(first)
    except _wire.WireError as e:
        raise ProtocolError(f"not a ticketing v1 server: {e}") from None
    nonce = secrets.token_bytes(_wire.NONCE_LEN)
    write(_wire.encode_auth(role, nonce, _wire.client_proof(token, role, hello.nonce, nonce)))
    try:
        w = _wire.decode_welcome(await read_exact(_wire.WELCOME_LEN, "WELCOME"))
    except _wire.WireError as e:
        raise ProtocolError(f"bad WELCOME: {e}") from None
    check_welcome(w, hello, token, role, nonce)
    return w


def check_welcome(w: _wire.Welcome, hello: _wire.Hello, token: bytes, role: int, nonce: bytes) -> None:
    if not w.accepted:
        name = _wire.code_name(w.code)
        if w.code in (_wire.CODE_AUTH_FAILED, _wire.CODE_BAD_HANDSHAKE):
            msg = f"handshake rejected ({name})"
            if w.code == _wire.CODE_AUTH_FAILED and not token and hello.tokens_configured:
                msg += " (the server requires a token and none is configured)"
            raise AuthError(msg, w.code)
        if w.code in (_wire.CODE_OVERLOADED, _wire.CODE_SHUTTING_DOWN):
            raise LockBusy(w.code, f"handshake rejected ({name})")
        raise ProtocolError(f"handshake rejected ({name})", w.code)
    if token:
        want = _wire.server_proof(token, role, nonce, hello.nonce)
        if not _wire.proof_equal(want, w.proof):
            raise AuthError("the server did not prove the token (an impostor, or a server without this token)")


def connect_error(e: BaseException) -> TicketingError:
    """A failed connection attempt as the error a caller sees."""
    if isinstance(e, TicketingError):
        return e
    if isinstance(e, ssl.SSLError):
        text = str(e).lower()
        if any(
            m in text
            for m in ("wrong_version_number", "wrong version number", "record layer", "packet length too long")
        ):
            # a plaintext HELLO ("TKTS...") where a TLS record was expected (R5)
            return TLSError(f"the server does not speak TLS (its first bytes are not a TLS record): {e}")
        return TLSError(f"TLS: {e}")
    if isinstance(e, asyncio.IncompleteReadError):
        return ConnectError("connection closed during the handshake")
    if isinstance(e, (asyncio.TimeoutError, socket.timeout)):
        return ConnectError("connect timeout")
    return ConnectError(f"{type(e).__name__}: {e}")


class ClientCore(Generic[C]):
    """What Client and AsyncClient share: settings, the pool, and the
    operations. Subclasses provide the waits and the connection type."""

    _closed: bool
    _leader: Endpoint[C] | None
    _eps: list[Endpoint[C]]
    _by_addr: dict[str, Endpoint[C]]
    _conns: list[C]
    _extra: int
    _rr: Any  # itertools.count
    _last_err: BaseException | None

    def _configure(
        self,
        addrs: str | Sequence[str],
        token: str | None,
        tls: ssl.SSLContext | bool | None,
        server_name: str | None,
        connect_timeout: Duration,
        admin_token: str | None,
        answer_allowance: Duration = DEFAULT_ANSWER_ALLOWANCE,
        label: str | None = None,
        app_name: str | None = None,
    ) -> None:
        if isinstance(addrs, str):
            addrs = [addrs]
        uniq: list[str] = []
        for a in addrs:
            split_addr(a)
            if a not in uniq:
                uniq.append(a)
        if not uniq:
            raise InvalidArgument("no server address")
        self._addrs = uniq
        self._connect_timeout = seconds(connect_timeout, "connect_timeout")
        self._answer_allowance = seconds(answer_allowance, "answer_allowance")
        self._role = _wire.ROLE_CLIENT
        self._token = (token or "").encode("utf-8")
        if admin_token is not None:
            self._role = _wire.ROLE_ADMIN
            self._token = admin_token.encode("utf-8")
        if tls is True:
            tls = ssl.create_default_context()
        self._tls: ssl.SSLContext | None = tls or None
        self._server_name = server_name
        if label is not None and not isinstance(label, str):
            raise InvalidArgument(f"label must be a str of at most {_wire.MAX_LABEL} bytes")
        if app_name is not None and not isinstance(app_name, str):
            raise InvalidArgument("app_name must be a str")
        self._label = label
        self._app_name = app_name
        self._closed = False
        self._pid = os.getpid()

    def _label_bytes(self) -> bytes:
        """The connection label (protocol.md §12.3): the user's, or
        ``[<app> ]<host>/<pid> python/<version>`` (the pid of now: a forked
        child labels its own connections)."""
        if self._label is not None:
            return _wire.cut_label(self._label)
        text = f"{socket.gethostname()}/{os.getpid()} python/{CLIENT_VERSION}"
        if self._app_name:
            text = f"{self._app_name} {text}"
        return _wire.cut_label(text)

    def _setup(self, cn: C) -> None:
        """A connection came up: ask for the server's features (§12.1); the
        answer sends the label when the server takes labels."""
        c = self._new_call(_wire.OP_PING, b"", _wire.PING_FEATURES)
        c.owner = OWNER_SETUP
        self._push(cn, c)

    def _push(self, cn: C, c: Call) -> None:
        """Queue c on cn now (and write it), or drop it when cn is down."""
        raise NotImplementedError

    def _setup_answered(self, c: Call) -> None:
        cn = c.conn
        if c.fail != FAIL_NONE or cn is None:
            return
        if c.op == _wire.OP_PING and c.status == _wire.ST_PONG:
            cn.features = c.queued
            cn.features_known = True
            self._leader_changed()  # calls waiting for the features go on
            if c.queued & _wire.FEATURE_LABELS:
                lb = self._label_bytes()
                if lb:
                    lc = self._new_call(_wire.OP_LABEL, b"", body=lb)
                    lc.owner = OWNER_SETUP
                    self._push(cn, lc)
        elif c.op == _wire.OP_LABEL and c.status == _wire.ST_ERROR:
            log.warning("ticketing: %s refused the connection label: %s", cn.addr, server_error(c.code, c.payload))

    def _reset_pool(self) -> None:
        self._leader = None
        self._last_err = None
        self._extra = 0
        per = 2 if len(self._addrs) == 1 else 1
        self._eps = [self._new_endpoint(a, per) for a in self._addrs]
        self._by_addr = {ep.addr: ep for ep in self._eps}
        self._conns = [cn for ep in self._eps for cn in ep.conns]

    # ----------------------------------------------------------- front end

    def _new_endpoint(self, addr: str, n: int) -> Endpoint[C]:
        raise NotImplementedError

    def _start_conn(self, cn: C) -> None:
        raise NotImplementedError

    def _pool_lock(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def _leader_changed(self) -> None:
        raise NotImplementedError

    def _wake(self, c: Call) -> None:
        """c's caller waits: wake it."""
        raise NotImplementedError

    def _release_completed(self, c: Call) -> None:
        """c belongs to a background release."""

    def _compensate(self, key: bytes, token: int, body: bytes = b"", nkeys: int = 0) -> None:
        raise NotImplementedError

    def _compensate_call(self, c: Call) -> None:
        """Release the grant of c, whose caller is gone."""
        self._compensate(c.key, c.value, c.body if c.nkeys else b"", c.nkeys)

    def _new_call(self, op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> Call:
        raise NotImplementedError

    def _enqueue(self, cn: C, c: Call) -> tuple[int, Any]:
        raise NotImplementedError

    async def _send(self, c: Call, give_up: float, slot_give_up: float, cancel: CancelToken | None) -> None:
        raise NotImplementedError

    async def _wait_call(self, c: Call, cancel: CancelToken | None, due: float | None = None) -> bool:
        """Wait for c's answer: False when cancelled (c abandoned). With due,
        an answer still missing then abandons c (withdrawn with C, a late
        grant released) and sets c.overdue."""
        raise NotImplementedError

    async def _wait_release(self, c: Call, s: ReleaseState) -> bool:
        raise NotImplementedError

    def _release_later(self, s: ReleaseState) -> None:
        raise NotImplementedError

    async def _sleep_redirect(self, d: float, known: Endpoint[C] | None, st: ReleaseState | None) -> None:
        raise NotImplementedError

    # ------------------------------------------------------ connection choice

    def _connect_error(self) -> TicketingError:
        """No connection in time: the last connection error when it says why
        (AuthError, TLSError, LockBusy for a REJECT OVERLOADED/SHUTTING_DOWN,
        as the Go client's errors do), else ConnectError."""
        err = self._last_err
        if isinstance(err, LockBusy):
            return LockBusy(err.code, f"no connection to {', '.join(self._addrs)}: {err}")
        if isinstance(err, (AuthError, TLSError)):
            return type(err)(f"no connection to {', '.join(self._addrs)}: {err}", err.code)
        if err is not None:
            return ConnectError(f"no connection to {', '.join(self._addrs)}: {err}")
        return ConnectError(f"no connection to {', '.join(self._addrs)} within {self._connect_timeout:g} s")

    def _config_error(self) -> TicketingError | None:
        """The error to fail waiting calls with at once (R4, R5): every
        connection's last attempt failed authentication or TLS."""
        conns = self._conns
        if conns and all(cn.cfg_err is not None for cn in conns):
            return self._connect_error()
        return None

    def _conn_limit(self, c: Call, give_up: float) -> float:
        """How long c may wait for a connection: an acquire until its wait's
        end (R1), or up to 1 s past it while a connection is still being
        opened for the first time."""
        if c.op in ACQUIRES and any(
            cn.connecting() or (c.op in SET_OPS and cn.state == UP and not cn.features_known) for cn in self._conns
        ):
            return give_up + FIRST_CONNECT_GRACE  # (a set also waits for the feature pong, §12.1)
        return give_up

    def _try_enqueue(self, c: Call) -> tuple[int, C | None, Any]:
        """Queue c without waiting: the known leader first, then round robin.
        (result, the connection, what its front end needs to flush)."""
        r = next(self._rr)
        ep = self._leader
        if ep is not None:
            got = self._enqueue_among(ep.conns, r, c)
            # the leader is up but full, or still connecting for the first
            # time: wait for it rather than ask a follower (which answers M)
            if got[0] in (ENQ_OK, ENQ_FULL) or ep.connecting():
                return got
        return self._enqueue_among(self._conns, r, c)

    def _enqueue_among(self, conns: list[C], r: int, c: Call) -> tuple[int, C | None, Any]:
        """Round robin over conns from r: the first that takes c, else why
        none did (FULL before UNSUPPORTED before DOWN)."""
        res = ENQ_DOWN
        n = len(conns)
        for i in range(n):
            cn = conns[(r + i) % n]
            e, x = self._enqueue(cn, c)
            if e == ENQ_OK:
                return e, cn, x
            if e == ENQ_FULL:
                res = ENQ_FULL
            elif e == ENQ_UNSUPPORTED and res == ENQ_DOWN:
                res = e
        return res, None, None

    def _wait_budget(self, c: Call, e: int, give_up: float, slot_give_up: float) -> float:
        """c could not be queued (e): the seconds it may still wait, or the
        error that ends it now (R4/R5 configuration errors, NotSupported,
        NoSlot, the connect error)."""
        if e != ENQ_FULL:
            cfg = self._config_error()
            if cfg is not None:  # R4/R5: a configuration error fails waiting calls at once
                raise cfg
        if e == ENQ_UNSUPPORTED:
            raise NotSupported("the server does not support key sets (protocol 1.1, KEY_SETS)")
        d = (slot_give_up if e == ENQ_FULL else self._conn_limit(c, give_up)) - time.monotonic()
        if d <= 0:
            if e == ENQ_FULL:
                raise NoSlot()
            raise self._connect_error()
        return d

    def _follow(self, addr: str) -> None:
        """Remember the leader named by an M answer (protocol.md §7); an
        empty address forgets it. An unknown address gets a connection."""
        if not addr:
            self._leader = None
            return
        ep = self._by_addr.get(addr)
        if ep is None:
            try:
                split_addr(addr)
            except InvalidArgument:
                log.warning("ticketing: ignoring malformed leader address %r", addr)
                self._leader = None
                return
            with self._pool_lock():
                ep = self._by_addr.get(addr)
                if ep is None:
                    if self._closed or self._extra >= MAX_EXTRA_ENDPOINTS:
                        self._leader = None
                        return
                    ep = self._new_endpoint(addr, 1)
                    self._extra += 1
                    self._eps = [*self._eps, ep]
                    self._conns = self._conns + ep.conns
                    self._by_addr = {**self._by_addr, addr: ep}
                    log.info("ticketing: following the leader to a new address %s", addr)
                    for cn in ep.conns:
                        self._start_conn(cn)
        if self._leader is not ep:
            self._leader = ep
            self._leader_changed()

    def _complete(self, c: Call) -> None:
        """Hand a finished call to its owner (never with a connection lock held)."""
        o = c.owner
        if o == OWNER_CALLER:
            self._wake(c)
        elif o == OWNER_ABANDONED:
            if c.granted():
                # the caller gave up, but the grant won the race: release it ourselves
                self._compensate_call(c)
        elif o == OWNER_RELEASER:
            self._release_completed(c)
        elif o == OWNER_SETUP:
            self._setup_answered(c)

    # ------------------------------------------------------------ operations

    async def _acquire(
        self,
        kb: bytes,
        lease_ms: int,
        wait_ms: int,
        cancel: CancelToken | None,
        min_remaining: float | None = None,
        keys: list[bytes] | None = None,
    ) -> tuple[int, float]:
        """(token, local deadline) of a granted acquire; retried only when
        its request was never written or answered M, within the wait. Every
        error names the key and the server (edge rule R15)."""
        what = (
            f"acquire {show_key(kb)}" if keys is None else f"acquire_set {[k.decode('utf-8', 'replace') for k in keys]}"
        )
        try:
            return await self._acquire_loop(kb, lease_ms, wait_ms, cancel, min_remaining, keys, what)
        except TicketingError as e:
            if e._where:
                raise
            raise where(e, what) from e.__cause__

    async def _acquire_loop(
        self,
        kb: bytes,
        lease_ms: int,
        wait_ms: int,
        cancel: CancelToken | None,
        min_remaining: float | None,
        keys: list[bytes] | None,
        what: str,
    ) -> tuple[int, float]:
        body = b"" if keys is None else _wire.set_body(keys)
        start = time.monotonic()
        budget_end = start + wait_ms / 1000
        conn_give_up = budget_end  # R1: the wait bounds the whole call, connecting included
        moves = rounds = 0
        st: ReleaseState | None = None  # for its once-per-call "woken" flag
        while True:
            if cancel is not None and cancel.cancelled:
                raise Cancelled("cancelled")
            if keys is None:
                c = self._new_call(_wire.OP_ACQUIRE, kb, lease_ms, wait_ms)
            else:
                c = self._new_call(_wire.OP_ACQUIRE_SET, kb, lease_ms, wait_ms, body)
                c.nkeys = len(keys)
            c.counts = wait_ms > 0
            try:
                await self._send(c, conn_give_up, budget_end, cancel)
            except NoSlot:
                raise LockTimeout("not acquired: no free max_inflight slot within the wait") from None
            # R2: no answer within its wait plus the answer allowance, counted from its write
            due = c.sent + c.a2 / 1000 + self._answer_allowance
            if not await self._wait_call(c, cancel, due):
                raise Cancelled("cancelled")
            at = f"{what} on {c.conn.addr}"
            if c.overdue:
                raise where(
                    Indeterminate(
                        f"no answer within {due - c.sent:.3g} s of the request's write (its wait "
                        f"{c.a2 / 1000:g} s + the answer allowance {self._answer_allowance:g} s); withdrawn"
                    ),
                    at,
                )
            if cancel is not None and cancel.cancelled:
                if c.granted():
                    self._compensate_call(c)
                raise Cancelled("cancelled")
            if c.fail != FAIL_NONE:
                if c.fail == FAIL_LOST:
                    if isinstance(c.fail_err, ClientClosed):
                        raise where(
                            ClosedIndeterminate("client closed after the acquire was written (outcome unknown)"), at
                        )
                    raise where(Indeterminate(f"connection lost after the acquire was written: {c.fail_err}"), at)
                if self._closed:
                    raise ClientClosed("client closed")
                # never written: retry, on another connection if need be
            else:
                s = c.status
                if s == _wire.ST_GRANTED:
                    deadline = c.sent + c.queued * _wire.QUEUED_UNIT + lease_ms / 1000
                    if min_remaining is not None:
                        left = deadline - time.monotonic()
                        if left < min_remaining:  # R14: released at once, the work not started
                            try:
                                await self._release(
                                    ReleaseState(kb, c.value, body=body, nkeys=len(keys) if keys else 0)
                                )
                            except TicketingError as e:  # the lease ends it
                                log.warning("ticketing: release of an insufficient lease failed: %s", e)
                            raise where(
                                InsufficientLease(
                                    f"granted with {max(left, 0.0) * 1000:.0f} ms of the lease left, below "
                                    f"min_remaining {min_remaining * 1000:.0f} ms; released"
                                ),
                                at,
                            )
                    return c.value, deadline
                if s == _wire.ST_TIMEOUT:
                    raise where(LockTimeout("timed out, not acquired"), at)
                if s == _wire.ST_BUSY:
                    raise where(LockBusy(c.code), at)
                if s == _wire.ST_UNKNOWN:
                    raise where(Indeterminate("the cluster could not confirm the commit (U)", c.code or None), at)
                if s == _wire.ST_ERROR:
                    raise where(server_error(c.code, c.payload, limit=limit_hint(c.code, lease_ms, c.a2)), at)
                # M: not the leader, not executed
                addr = c.payload.decode("ascii", "replace")
                self._follow(addr)
                moves += 1
                if moves > MAX_MOVES:
                    rounds += 1
                    d = redirect_delay(rounds)
                    if wait_ms == 0 or budget_end - time.monotonic() <= d:
                        raise where(NoLeader(f"{moves} consecutive redirects (last to {addr!r})"), at)
                    st = st or ReleaseState(kb, 0)
                    await self._sleep_redirect(d, self._leader, st)
                    if self._closed:
                        raise ClientClosed("client closed")
                    moves = 0
            if wait_ms > 0:
                rem = budget_end - time.monotonic()
                if rem < 0.001:
                    raise LockTimeout("timed out, not acquired")
                wait_ms = int(rem * 1000)

    async def _release(self, s: ReleaseState) -> None:
        """Returns once the server answered O; retried within the release
        window (client/release.go)."""
        cause: BaseException | None = None
        while True:
            if time.monotonic() >= s.deadline:
                raise s.give_up(cause)
            c = self._new_call(s.op, s.key, s.token, 0, s.body)
            c.nkeys = s.nkeys
            try:
                await self._send(c, s.deadline, s.deadline, None)
            except ClientClosed:
                if not s.maybe:  # nothing of this release reached the server (R7)
                    raise ClientClosed(f"{s.at()}: the client was closed (nothing was sent)") from None
                raise ClosedIndeterminate(f"{s.at()}: not confirmed: the client closed") from None
            except (ConnectError, AuthError, TLSError, LockBusy, NoSlot) as e:
                raise s.give_up(e) from None
            except BaseException:  # interrupted or cancelled: it goes on in the background
                self._release_later(s)
                raise
            if not await self._wait_release(c, s):
                raise s.give_up(cause)
            if c.fail != FAIL_NONE:
                cause = c.fail_err
            final, wait, err = s.outcome(c.fail, self._closed, c.status, c.code, c.payload, self._follow, c.conn.addr)
            if final:
                if err is not None:
                    raise err
                return
            await self._sleep_redirect(min(wait, s.deadline - time.monotonic() - 0.01), self._leader, s)

    async def _ping(self) -> tuple[int, float]:
        give_up = time.monotonic() + self._connect_timeout
        while True:
            c = self._new_call(_wire.OP_PING, b"")
            await self._send(c, give_up, give_up, None)
            await self._wait_call(c, None)
            now = time.monotonic()
            if c.fail != FAIL_NONE:
                if self._closed:
                    raise ClientClosed("client closed")
                if now > give_up:
                    raise ConnectError(f"ping: {c.fail_err}")
                continue
            if c.status == _wire.ST_PONG:
                return c.value, now - c.sent
            raise server_error(c.code, c.payload)

    async def _admin(self, body: bytes, read_only: bool) -> dict[str, object]:
        give_up = time.monotonic() + self._connect_timeout
        moves = 0
        while True:
            c = self._new_call(_wire.OP_QUERY, b"", body=body)
            await self._send(c, give_up, give_up, None)
            await self._wait_call(c, None)
            if c.fail == FAIL_LOST and not read_only:
                raise Indeterminate(f"connection lost after the query was written: {c.fail_err}")
            if c.fail != FAIL_NONE:
                if self._closed:
                    raise ClientClosed("client closed")
                if time.monotonic() > give_up:
                    raise ConnectError(f"admin: {c.fail_err}")
                continue
            if c.status == _wire.ST_ADMIN:
                out = json.loads(c.payload)
                if not isinstance(out, dict):
                    raise ProtocolError("admin reply is not a JSON object")
                return out
            if c.status == _wire.ST_MOVED:
                self._follow(c.payload.decode("ascii", "replace"))
                moves += 1
                if moves > MAX_MOVES:
                    raise NoLeader(f"{moves} consecutive redirects")
                continue
            raise server_error(c.code, c.payload)


def show_key(kb: bytes) -> str:
    return repr(kb.decode("utf-8", "replace"))


def where(e: TicketingError, at: str) -> TicketingError:
    """e with the operation, key and server in front of its message (R15);
    the same class and code."""
    msg = f"{at}: {e}"
    n = LockBusy(e.code, msg) if isinstance(e, LockBusy) else type(e)(msg, e.code)
    n._where = True
    return n


def admin_body(cmd: str, args: dict[str, object]) -> tuple[bytes, bool]:
    body = json.dumps({**args, "cmd": cmd}).encode("utf-8")
    if not cmd or len(body) > _wire.MAX_ADMIN_BODY:
        raise InvalidArgument("bad admin command")
    return body, cmd in READ_ONLY_ADMIN


def set_keys(keys: object) -> list[bytes]:
    """The keys of a set, checked before sending (protocol.md §12.2)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise InvalidArgument(f"keys must be a list of 2..{_wire.MAX_SET_KEYS} keys")
    kbs = [key_bytes(k) for k in keys]
    if not 2 <= len(kbs) <= _wire.MAX_SET_KEYS:
        raise InvalidArgument(f"keys must be 2..{_wire.MAX_SET_KEYS} keys (got {len(kbs)})")
    if len(set(kbs)) != len(kbs):
        raise InvalidArgument(f"keys must be distinct (1 of {len(kbs)} appears twice)")
    return kbs


def release_state(lease: LeaseBase | Key, token: int | None) -> tuple[ReleaseState, LeaseBase | None]:
    """release(lease) or release(key, token): its state and the lease."""
    if isinstance(lease, LeaseBase):
        n = len(lease.keys) if lease._body else 0
        return ReleaseState(lease.key_bytes, lease.token, body=lease._body, nkeys=n), lease
    kb, tok, _ = release_args(lease, token)
    return ReleaseState(kb, tok), None


def release_args(lease: LeaseBase | Key, token: int | None) -> tuple[bytes, int, LeaseBase | None]:
    """release(lease) or release(key, token): (key bytes, token, the lease)."""
    if isinstance(lease, LeaseBase):
        return lease.key_bytes, lease.token, lease
    kb = key_bytes(lease)
    if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= _wire.MAX_U64:
        raise InvalidArgument("token must be an int in 1..2^64-1")
    return kb, token, None
