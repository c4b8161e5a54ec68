"""The blocking client: ticketing.Client, thread-safe, one per process.

Connection design (a port of the Go client, client/conn.go):

* Each _Conn is one persistent connection to one address, kept by one
  thread: connect, handshake, then read responses until the connection
  fails, back off (0.1 s doubling to 3.2 s, jittered) and connect again,
  until close().
* Senders encode their frame into the connection's write buffer under its
  lock and register the call in its pending map under a fresh req_id. The
  first sender that finds no writer active becomes the writer: it takes the
  whole buffer (the frames of every thread that queued meanwhile) and
  writes it with one send, until the buffer is empty. The frame counters
  (seq, taken) tell which calls may have reached the socket ("lost" when
  the connection then dies) and which never did ("unsent": safe to retry).
* The reader decodes every complete response, matches it by req_id under
  the lock and completes the calls after unlocking; it never writes and
  never blocks on a caller.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import secrets
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

from . import _transport, _wire
from ._common import (
    DEFAULT_CONNECT_TIMEOUT,
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
    RELEASE_QUEUE_LEN,
    CancelToken,
    Duration,
    Key,
    LeaseBase,
    ReleaseState,
    key_bytes,
    millis,
    reconnect_delay,
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
    InvalidArgument,
    LockBusy,
    LockTimeout,
    NoLeader,
    ProtocolError,
    TicketingError,
    TLSError,
)

log = logging.getLogger("ticketing")
log.addHandler(logging.NullHandler())

_DOWN = 0
_UP = 1

_ENQ_OK = 0
_ENQ_DOWN = 1  # not connected (or its write buffer is over its bound)
_ENQ_FULL = 2  # connected, but all of max_inflight is in use


class _NoSlot(Exception):
    pass


class _Call:
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
        "op",
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
        self.conn: _Conn | None = None
        self.req_id = 0
        self.seq = 0
        self.sent = 0.0
        self.pending = False
        self.owner = OWNER_CALLER
        self.job: _Job | None = None
        self.status = 0
        self.code = 0
        self.queued = 0
        self.value = 0
        self.payload = b""
        self.fail = FAIL_NONE
        self.fail_err: BaseException | None = None
        self.waiter = threading.Lock()
        self.waiter.acquire()


class _Conn:
    def __init__(self, cl: Client, addr: str) -> None:
        self.cl = cl
        self.addr = addr
        self.host, self.port = split_addr(addr)
        self.mu = threading.Lock()
        self.state = _DOWN
        self.tr: _transport.Transport | None = None
        self.hs_sock: socket.socket | None = None  # the socket being connected
        self.ever_up = False
        self.failures = 0
        self.max_inflight = 1
        self.inflight = 0
        self.pending: dict[int, _Call] = {}
        self.next_id = 0
        self.wbuf = bytearray()
        self.seq = 0
        self.taken = 0
        self.writing = False
        self.thread = threading.Thread(target=self._run, name=f"ticketing-conn {addr}", daemon=True)

    # ------------------------------------------------------------ lifecycle

    def _run(self) -> None:
        cl = self.cl
        attempt = 0
        while not cl._closed:
            if attempt and cl._closing.wait(reconnect_delay(attempt)):
                return
            try:
                tr, w = self._connect()
            except BaseException as e:
                if cl._closed:
                    return
                self._failed(_connect_error(e))
                attempt += 1
                continue
            if not self._up(tr, w):
                tr.close()
                return
            self._read_loop(tr)
            if cl._closed:
                return
            attempt = 1

    def _connect(self) -> tuple[_transport.Transport, _wire.Welcome]:
        cl = self.cl
        deadline = time.monotonic() + cl._connect_timeout
        sock = socket.create_connection((self.host, self.port), timeout=cl._connect_timeout)
        with self.mu:
            self.hs_sock = sock
        try:
            if cl._closed:
                raise ClientClosed("client closed")
            _transport.set_socket_options(sock)
            tr: _transport.Transport
            if cl._tls is not None:
                tr = _transport.TLS(sock, cl._tls, cl._server_name or self.host)
                tr.handshake(deadline)
            else:
                tr = _transport.Plain(sock)
            w = _handshake(tr, deadline, cl._token, cl._role)
            sock.settimeout(None)
            return tr, w
        except BaseException:
            sock.close()
            raise
        finally:
            with self.mu:
                self.hs_sock = None

    def _failed(self, err: TicketingError) -> None:
        with self.mu:
            self.failures += 1
            n = self.failures
        self.cl._last_err = err
        lvl = logging.WARNING if n == 1 else logging.DEBUG
        if isinstance(err, AuthError):
            lvl = logging.ERROR
        log.log(lvl, "ticketing: connect to %s failed (attempt %d): %s", self.addr, n, err)
        self.cl._notify()

    def _up(self, tr: _transport.Transport, w: _wire.Welcome) -> bool:
        with self.mu:
            if self.cl._closed:
                return False
            self.state = _UP
            self.tr = tr
            self.ever_up = True
            self.failures = 0
            self.max_inflight = max(1, min(w.max_inflight, 1 << 30))
            self.inflight = 0
            self.next_id = 0
            self.seq = self.taken = 0
            self.wbuf = bytearray()
            self.writing = False
        log.info("ticketing: connected to %s (max_inflight %d)", self.addr, w.max_inflight)
        self.cl._notify()
        return True

    def _read_loop(self, tr: _transport.Transport) -> None:
        dec = _wire.ResponseDecoder()
        while True:
            try:
                data = tr.recv()
            except (OSError, ssl.SSLError, ValueError) as e:
                self.kill(tr, e)
                return
            if not data:
                self.kill(tr, ConnectionResetError("connection closed by the server"))
                return
            try:
                resps = dec.feed(data)
            except _wire.WireError as e:
                self.kill(tr, ProtocolError(f"protocol violation by the server: {e}"))
                return
            if resps and not self._dispatch(tr, resps):
                return

    def _dispatch(self, tr: _transport.Transport, resps: list[_wire.Response]) -> bool:
        done: list[_Call] = []
        perr: ProtocolError | None = None
        freed = False
        unknown = 0
        with self.mu:
            if self.tr is not tr:
                return False
            pending = self.pending
            for r in resps:
                c = pending.get(r.req_id)
                if c is None:
                    unknown += 1
                    continue
                if r.status == _wire.ST_ERROR and r.code == _wire.CODE_DUPLICATE_REQ_ID:
                    unknown += 1  # never complete an outstanding request with a code-25 E
                    continue
                if not _wire.fits(c.op, r.status):
                    perr = ProtocolError(f"protocol violation: {chr(c.op)!r} answered with {chr(r.status)!r}")
                    break
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
        if unknown:
            log.warning("ticketing: %d unexpected responses from %s ignored", unknown, self.addr)
        cl = self.cl
        for c in done:
            cl._complete(c)
        if freed:
            cl._notify()
        if perr is not None:
            self.kill(tr, perr)
            return False
        return True

    def kill(self, tr: _transport.Transport, cause: BaseException) -> None:
        """Take tr down (once) and complete every pending call as unsent or lost."""
        with self.mu:
            if self.tr is not tr or self.state != _UP:
                return
            self.state = _DOWN
            self.tr = None
            calls = list(self.pending.values())
            self.pending = {}
            taken = self.taken
            for c in calls:
                c.pending = False
                c.fail = FAIL_LOST if c.seq < taken else FAIL_UNSENT
                c.fail_err = cause
            self.inflight = 0
            self.wbuf = bytearray()
            self.writing = False
        tr.close()
        cl = self.cl
        if not isinstance(cause, ClientClosed):
            cl._last_err = cause
            log.warning("ticketing: connection to %s lost (%d pending): %s", self.addr, len(calls), cause)
        for c in calls:
            cl._complete(c)
        cl._notify()

    def shutdown(self) -> None:
        with self.mu:
            tr = self.tr
            hs = self.hs_sock
        if hs is not None:
            try:
                hs.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if tr is not None:
            self.kill(tr, ClientClosed("client closed"))

    def abandon_after_fork(self) -> None:
        tr = self.tr
        if tr is not None:
            try:
                tr.abandon()
            except OSError:
                pass

    # --------------------------------------------------------------- sending

    def enqueue(self, c: _Call) -> tuple[int, _transport.Transport | None]:
        """Queue c's frame under a fresh req_id. Returns the result and, when
        the caller became the writer, the transport it must flush."""
        with self.mu:
            if self.state != _UP or len(self.wbuf) > MAX_WRITE_BUFFER:
                return _ENQ_DOWN, None
            if c.counts and self.inflight >= self.max_inflight:
                return _ENQ_FULL, None
            self._enqueue_locked(c)
            if self.writing:
                return _ENQ_OK, None
            self.writing = True
            return _ENQ_OK, self.tr

    def _enqueue_locked(self, c: _Call) -> None:
        # req_id: the next one no outstanding request uses (protocol.md §2.1 check 3); never 0
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
        elif op == _wire.OP_RELEASE:
            self.wbuf += _wire.encode_release(rid, c.key, c.a1)
        elif op == _wire.OP_CANCEL:
            self.wbuf += _wire.encode_cancel(rid, c.key, c.a1)
        elif op == _wire.OP_PING:
            c.sent = time.monotonic()
            self.wbuf += _wire.encode_ping(rid)
        else:
            self.wbuf += _wire.encode_query(rid, c.body)

    def flush(self, tr: _transport.Transport) -> None:
        """Write the buffer to tr until it is empty (the caller is the writer)."""
        while True:
            with self.mu:
                if self.tr is not tr:
                    return  # killed; the writer flag is no longer ours
                if not self.wbuf:
                    self.writing = False
                    return
                buf = bytes(self.wbuf)
                self.wbuf = bytearray()
                self.taken = self.seq
            try:
                tr.send(buf)
            except (OSError, ssl.SSLError, ValueError) as e:
                self.kill(tr, e)
                return

    def abandon(self, c: _Call) -> tuple[bool, _transport.Transport | None]:
        """The caller gives up on c. False when c was already answered (its
        waiter is or will be released). Otherwise the reader compensates a
        grant; a queued acquire is withdrawn with C on the same connection."""
        with self.mu:
            if not c.pending or c.owner != OWNER_CALLER:
                return False, None
            c.owner = OWNER_ABANDONED
            if c.op != _wire.OP_ACQUIRE or not c.counts or self.state != _UP:
                return True, None
            cc = _Call(_wire.OP_CANCEL, c.key, c.req_id)
            cc.owner = OWNER_DROPPED
            self._enqueue_locked(cc)
            if self.writing:
                return True, None
            self.writing = True
            return True, self.tr

    def drop(self, c: _Call) -> bool:
        with self.mu:
            if not c.pending:
                return False
            c.owner = OWNER_DROPPED
            return True

    def connecting(self) -> bool:
        return self.state == _DOWN and not self.ever_up and self.failures == 0


def _recv_exact(tr: _transport.Transport, n: int, deadline: float, what: str) -> bytes:
    buf = b""
    while len(buf) < n:
        tr.set_deadline(deadline)
        data = tr.recv()
        if not data:
            raise ConnectError(f"connection closed while reading {what}")
        buf += data
    if len(buf) > n:
        raise ProtocolError(f"unexpected bytes after {what}")
    return buf


def _handshake(tr: _transport.Transport, deadline: float, token: bytes, role: int) -> _wire.Welcome:
    try:
        hello = _wire.decode_hello(_recv_exact(tr, _wire.HELLO_LEN, deadline, "HELLO"))
    except _wire.WireError as e:
        raise ProtocolError(f"not a ticketing v1 server: {e}") from None
    nonce = secrets.token_bytes(_wire.NONCE_LEN)
    proof = _wire.client_proof(token, role, hello.nonce, nonce)
    tr.set_deadline(deadline)
    tr.send(_wire.encode_auth(role, nonce, proof))
    try:
        w = _wire.decode_welcome(_recv_exact(tr, _wire.WELCOME_LEN, deadline, "WELCOME"))
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


def _connect_error(e: BaseException) -> TicketingError:
    if isinstance(e, TicketingError):
        return e
    if isinstance(e, ssl.SSLError):
        return TLSError(f"TLS: {e}")
    if isinstance(e, (OSError, TimeoutError)):
        return ConnectError(f"{type(e).__name__}: {e}")
    return ConnectError(f"{type(e).__name__}: {e}")


class _Endpoint:
    __slots__ = ("addr", "conns")

    def __init__(self, addr: str, conns: list[_Conn]) -> None:
        self.addr = addr
        self.conns = conns

    def connecting(self) -> bool:
        return any(cn.connecting() for cn in self.conns)


class Lease(LeaseBase):
    """A lock held through a blocking Client (see LeaseBase for the fields).

    ``release()`` releases it; a ``with`` block on it releases it at exit.
    Ownership is the token alone: any thread (or process, with
    ``Client.release(key, token)``) may release it."""

    __slots__ = ("_client",)

    def __init__(self, client: Client, key: bytes, token: int, deadline: float, lease_ms: int) -> None:
        super().__init__(key, token, deadline, lease_ms)
        self._client = client

    def release(self) -> None:
        """Release the lock; returns only when the server answered O. Raises
        NotHolder (the lease had ended) or Indeterminate (not confirmed within
        5 s; the lease ends it). Releasing again is allowed and retries."""
        self._client.release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        _release_on_exit(self.release, et)


def _release_on_exit(release: object, et: type[BaseException] | None) -> None:
    assert callable(release)
    if et is None:
        release()
        return
    try:
        release()
    except TicketingError as e:  # the body's exception wins; the lease is the safety net
        log.warning("ticketing: release after a failing block: %s", e)


_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cl in list(_clients):
        cl._fork_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client:
    """A thread-safe connection pool to one Ticketing server or cluster.

    ``Client(addrs, token=..., tls=..., connect_timeout=5.0)`` connects to
    every address ("host:port"; for a cluster any subset of its nodes) and
    returns once one connection is up (ConnectError / AuthError / TLSError
    otherwise). It keeps one connection per address in the background (two
    for a single address) and reconnects them with backoff until close().
    Share one Client between all threads of a process; after os.fork() a
    child's first call reconnects instead of using the parent's sockets.
    """

    def __init__(
        self,
        addrs: str | Sequence[str],
        *,
        token: str | None = None,
        tls: ssl.SSLContext | bool | None = None,
        server_name: str | None = None,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT,
        admin_token: str | None = None,
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
        self._role = _wire.ROLE_CLIENT
        self._token = (token or "").encode("utf-8")
        if admin_token is not None:
            self._role = _wire.ROLE_ADMIN
            self._token = admin_token.encode("utf-8")
        if tls is True:
            tls = ssl.create_default_context()
        self._tls: ssl.SSLContext | None = tls or None
        self._server_name = server_name
        self._closed = False
        self._fork_lock = threading.Lock()
        self._start()
        _clients.add(self)
        try:
            self._wait_first(time.monotonic() + self._connect_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        self._pid = os.getpid()
        self._mu = threading.Lock()  # changes of the pool
        self._cond = threading.Condition(threading.Lock())
        self._gen = 0
        self._waiting = 0
        self._closing = threading.Event()
        self._leader: _Endpoint | None = None
        self._rr = itertools.count()
        self._last_err: BaseException | None = None
        self._extra = 0
        per = 2 if len(self._addrs) == 1 else 1
        self._eps = [self._new_endpoint(a, per) for a in self._addrs]
        self._by_addr = {ep.addr: ep for ep in self._eps}
        self._conns = [cn for ep in self._eps for cn in ep.conns]
        self._releaser = _Releaser(self)
        self._releaser.thread.start()
        for cn in self._conns:
            cn.thread.start()

    def _new_endpoint(self, addr: str, n: int) -> _Endpoint:
        return _Endpoint(addr, [_Conn(self, addr) for _ in range(n)])

    def _check(self) -> None:
        if self._pid != os.getpid():
            with self._fork_lock:
                if self._pid != os.getpid():
                    self._reset_after_fork()
        if self._closed:
            raise ClientClosed("client closed")

    def _reset_after_fork(self) -> None:
        """In a child after fork: forget the parent's connections (closing
        only this process's descriptors) and connect anew."""
        for cn in self._conns:
            cn.abandon_after_fork()
        if self._closed:
            return
        log.info("ticketing: fork detected (pid %d); reconnecting", os.getpid())
        self._start()

    def _wait_first(self, deadline: float) -> None:
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    all_failed = True
                    for cn in self._conns:
                        if cn.state == _UP:
                            return
                        all_failed = all_failed and cn.failures > 0
                    if all_failed and isinstance(self._last_err, (AuthError, TLSError)):
                        raise self._connect_error()
                    d = deadline - time.monotonic()
                    if d <= 0:
                        raise self._connect_error()
                    self._cond.wait(d)
            finally:
                self._waiting -= 1

    def _connect_error(self) -> TicketingError:
        """No connection in time: the last connection error when it says why
        (AuthError, TLSError, LockBusy for a REJECT OVERLOADED/SHUTTING_DOWN,
        as the Go client's errors do), else ConnectError."""
        err = self._last_err
        if isinstance(err, LockBusy):
            return LockBusy(err.code, f"no connection to any server: {err}")
        if isinstance(err, (AuthError, TLSError)):
            return type(err)(f"no connection to any server: {err}", err.code)
        if err is not None:
            return ConnectError(f"no connection to any server: {err}")
        return ConnectError(f"no connection to any server within {self._connect_timeout:g} s")

    def _notify(self) -> None:
        if self._waiting:
            with self._cond:
                self._gen += 1
                self._cond.notify_all()

    def _wake_all(self) -> None:
        with self._cond:
            self._gen += 1
            self._cond.notify_all()

    # ---------------------------------------------------------------- close

    def close(self) -> None:
        """Close every connection and stop the background threads. Calls in
        progress raise ClientClosed (Indeterminate when their request was
        already written). Releases still being retried are abandoned (their
        leases end them). Idempotent."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        for cn in self._conns:
            cn.shutdown()
        self._wake_all()
        self._releaser.wake.set()
        me = threading.current_thread()
        end = time.monotonic() + 2.0
        for t in [cn.thread for cn in self._conns] + [self._releaser.thread]:
            if t is not me and t.is_alive():
                t.join(max(0.0, end - time.monotonic()))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------ connection choice

    def _try_enqueue(self, c: _Call) -> tuple[int, _Conn | None, _transport.Transport | None]:
        r = next(self._rr)
        res = _ENQ_DOWN
        ep = self._leader
        if ep is not None:
            conns = ep.conns
            n = len(conns)
            for i in range(n):
                cn = conns[(r + i) % n]
                e, tr = cn.enqueue(c)
                if e == _ENQ_OK:
                    return e, cn, tr
                if e == _ENQ_FULL:
                    res = _ENQ_FULL
            # the leader is up but full, or still connecting for the first
            # time: wait for it rather than ask a follower (which answers M)
            if res == _ENQ_FULL or ep.connecting():
                return res, None, None
        conns = self._conns
        n = len(conns)
        for i in range(n):
            cn = conns[(r + i) % n]
            e, tr = cn.enqueue(c)
            if e == _ENQ_OK:
                return e, cn, tr
            if e == _ENQ_FULL:
                res = _ENQ_FULL
        return res, None, None

    def _send(self, c: _Call, give_up: float, slot_give_up: float, cancel: CancelToken | None) -> None:
        """Queue c, waiting for a connection (until give_up) or a free
        max_inflight slot (until slot_give_up). Raises ClientClosed,
        Cancelled, ConnectError, _NoSlot."""
        if self._closed:
            raise ClientClosed("client closed")
        e, cn, tr = self._try_enqueue(c)
        if e == _ENQ_OK:
            if tr is not None and cn is not None:
                cn.flush(tr)
            return
        c.budget = slot_give_up  # an acquire sent later carries only the wait left
        cb = None
        if cancel is not None:
            cb = self._wake_all
            if not cancel._add(cb):
                raise Cancelled("cancelled")
        with self._cond:
            self._waiting += 1
            g = self._gen
        try:
            while True:
                e, cn, tr = self._try_enqueue(c)
                if e == _ENQ_OK:
                    if tr is not None and cn is not None:
                        cn.flush(tr)
                    return
                if self._closed:
                    raise ClientClosed("client closed")
                if cancel is not None and cancel.cancelled:
                    raise Cancelled("cancelled")
                d = (slot_give_up if e == _ENQ_FULL else give_up) - time.monotonic()
                if d <= 0:
                    if e == _ENQ_FULL:
                        raise _NoSlot()
                    raise self._connect_error()
                with self._cond:
                    if self._gen == g:
                        self._cond.wait(d)
                    g = self._gen
        finally:
            with self._cond:
                self._waiting -= 1
            if cb is not None and cancel is not None:
                cancel._remove(cb)

    def _follow(self, addr: str) -> None:
        """Remember the leader named by an M answer (protocol.md §7); an
        empty address forgets it. An unknown address gets a connection."""
        if not addr:
            self._leader = None
            return
        ep = self._by_addr.get(addr)
        if ep is not None:
            self._set_leader(ep)
            return
        try:
            split_addr(addr)
        except InvalidArgument:
            log.warning("ticketing: ignoring malformed leader address %r", addr)
            self._leader = None
            return
        with self._mu:
            ep = self._by_addr.get(addr)
            if ep is None:
                if self._closed or self._extra >= MAX_EXTRA_ENDPOINTS:
                    self._leader = None
                    return
                ep = self._new_endpoint(addr, 1)
                self._extra += 1
                by_addr = dict(self._by_addr)
                by_addr[addr] = ep
                self._eps = [*self._eps, ep]
                self._conns = self._conns + ep.conns
                self._by_addr = by_addr
                log.info("ticketing: following the leader to a new address %s", addr)
                for cn in ep.conns:
                    cn.thread.start()
        self._set_leader(ep)

    def _set_leader(self, ep: _Endpoint) -> None:
        if self._leader is not ep:
            self._leader = ep
            self._wake_all()
            self._releaser.wake.set()

    def _complete(self, c: _Call) -> None:
        o = c.owner
        if o == OWNER_CALLER:
            c.waiter.release()
        elif o == OWNER_ABANDONED:
            if c.op == _wire.OP_ACQUIRE and c.fail == FAIL_NONE and c.status == _wire.ST_GRANTED:
                # the caller gave up, but the grant won the race: release it ourselves
                self._compensate(c.key, c.value)
        elif o == OWNER_RELEASER:
            self._releaser.completed(c)

    def _compensate(self, key: bytes, token: int) -> None:
        job = _Job(ReleaseState(key, token), compensation=True)
        if not self._releaser.submit(job):
            log.warning("ticketing: release queue full; an abandoned grant stays held until its lease ends")

    def _sleep_redirect(self, d: float, known: _Endpoint | None, st: ReleaseState | None) -> None:
        """Sleep d, but return at once (once per call) when a leader other
        than known is learned meanwhile."""
        if d <= 0:
            return
        end = time.monotonic() + d
        with self._cond:
            self._waiting += 1
            try:
                while not self._closed:
                    if st is not None and not st.woken:
                        ld = self._leader
                        if ld is not None and ld is not known:
                            st.woken = True
                            return
                    rem = end - time.monotonic()
                    if rem <= 0:
                        return
                    self._cond.wait(rem)
            finally:
                self._waiting -= 1

    # ------------------------------------------------------------ operations

    def _wait_call(self, c: _Call, cancel: CancelToken | None) -> bool:
        """Wait for c's answer. Returns False when the caller cancelled (the
        call was abandoned to the reader), True with the answer in c."""
        cb: Callable[[], None] | None = None
        if cancel is not None:

            def on_cancel() -> None:
                self._cancel_call(c)

            if cancel._add(on_cancel):
                cb = on_cancel
            else:
                self._cancel_call(c)
        try:
            c.waiter.acquire()
        except BaseException:
            # interrupted (KeyboardInterrupt, ...): withdraw it like a cancel
            if not self._cancel_call(c):
                c.waiter.acquire()
                if c.op == _wire.OP_ACQUIRE and c.fail == FAIL_NONE and c.status == _wire.ST_GRANTED:
                    self._compensate(c.key, c.value)
            raise
        finally:
            if cb is not None and cancel is not None:
                cancel._remove(cb)
        return c.owner == OWNER_CALLER

    def _cancel_call(self, c: _Call) -> bool:
        cn = c.conn
        assert cn is not None
        ok, tr = cn.abandon(c)
        if ok:
            c.waiter.release()
            if tr is not None:
                cn.flush(tr)
        return ok

    def acquire(self, key: Key, *, lease: Duration, wait: Duration = 0, cancel: CancelToken | None = None) -> Lease:
        """Acquire the lock on key with a lease of ``lease``, waiting up to
        ``wait`` (0 = try once). Durations are float seconds or timedelta,
        rounded up to whole milliseconds.

        Raises LockTimeout (not acquired within wait), LockBusy (refused at
        once, never retried), Indeterminate (written but no definite answer:
        do not enter the critical section), Cancelled (``cancel`` fired: a
        queued acquire is withdrawn, a grant that won the race released),
        ConnectError, NoLeader, InvalidArgument (bad arguments, or the
        server's E with its code), ClientClosed, ProtocolError.

        Retried internally only when the request was never written or the
        answer was M, and only within the remaining wait."""
        kb = key_bytes(key)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        self._check()
        start = time.monotonic()
        budget_end = start + wait_ms / 1000
        conn_give_up = max(start + self._connect_timeout, budget_end)
        moves = rounds = 0
        st: ReleaseState | None = None  # for its once-per-call "woken" flag
        while True:
            if cancel is not None and cancel.cancelled:
                raise Cancelled("acquire cancelled")
            c = _Call(_wire.OP_ACQUIRE, kb, lease_ms, wait_ms)
            c.counts = wait_ms > 0
            try:
                self._send(c, conn_give_up, budget_end, cancel)
            except _NoSlot:
                raise LockTimeout("not acquired: no free max_inflight slot within the wait") from None
            if not self._wait_call(c, cancel):
                raise Cancelled("acquire cancelled")
            if cancel is not None and cancel.cancelled:
                if c.fail == FAIL_NONE and c.status == _wire.ST_GRANTED:
                    self._compensate(kb, c.value)
                raise Cancelled("acquire cancelled")
            if c.fail != FAIL_NONE:
                if c.fail == FAIL_LOST:
                    if isinstance(c.fail_err, ClientClosed):
                        raise ClosedIndeterminate("client closed after the acquire was written (outcome unknown)")
                    raise Indeterminate(f"connection lost after the acquire was written: {c.fail_err}")
                if self._closed:
                    raise ClientClosed("client closed")
                # never written: retry, on another connection if need be
            else:
                s = c.status
                if s == _wire.ST_GRANTED:
                    deadline = c.sent + c.queued * _wire.QUEUED_UNIT + lease_ms / 1000
                    return Lease(self, kb, c.value, deadline, lease_ms)
                if s == _wire.ST_TIMEOUT:
                    raise LockTimeout("timed out, not acquired")
                if s == _wire.ST_BUSY:
                    raise LockBusy(c.code)
                if s == _wire.ST_UNKNOWN:
                    raise Indeterminate("the cluster could not confirm the commit (U)", c.code or None)
                if s == _wire.ST_ERROR:
                    raise server_error(c.code, c.payload)
                # M: not the leader, not executed
                addr = c.payload.decode("ascii", "replace")
                self._follow(addr)
                moves += 1
                if moves > MAX_MOVES:
                    rounds += 1
                    d = redirect_delay(rounds)
                    if wait_ms == 0 or budget_end - time.monotonic() <= d:
                        raise NoLeader(f"{moves} consecutive redirects (last to {addr!r})")
                    st = st or ReleaseState(kb, 0)
                    self._sleep_redirect(d, self._leader, st)
                    if self._closed:
                        raise ClientClosed("client closed")
                    moves = 0
            if wait_ms > 0:
                rem = budget_end - time.monotonic()
                if rem < 0.001:
                    raise LockTimeout("timed out, not acquired")
                wait_ms = int(rem * 1000)

    def try_acquire(self, key: Key, *, lease: Duration) -> Lease | None:
        """One attempt (wait 0): the Lease, or None when the key is held."""
        try:
            return self.acquire(key, lease=lease, wait=0)
        except LockTimeout:
            return None

    @contextmanager
    def lock(
        self, key: Key, *, lease: Duration, wait: Duration = 0, cancel: CancelToken | None = None
    ) -> Iterator[Lease]:
        """``with client.lock(key, lease=30, wait=10) as lease:`` acquires,
        runs the block and releases on normal and exceptional exit. A release
        failure after a normal exit raises (NotHolder: the lease had ended
        during the block); after a failing block it is logged and the block's
        exception propagates."""
        lease_obj = self.acquire(key, lease=lease, wait=wait, cancel=cancel)
        try:
            yield lease_obj
        except BaseException:
            try:
                self.release(lease_obj)
            except TicketingError as e:
                log.warning("ticketing: release after a failing block: %s", e)
            raise
        self.release(lease_obj)

    def release(self, lease: LeaseBase | Key, token: int | None = None) -> None:
        """Release a lock: ``release(lease)`` or ``release(key, token)`` (from
        any process that knows the token). Returns only when the server
        answered O. Raises NotHolder (the key is free or held under another
        token), Indeterminate (no confirmation within 5 s, or the client
        closed: the lease ends it), InvalidArgument, ClientClosed."""
        lease_obj: LeaseBase | None = None
        if isinstance(lease, LeaseBase):
            lease_obj = lease
            kb, tok = lease.key_bytes, lease.token
        else:
            kb = key_bytes(lease)
            if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= _wire.MAX_U64:
                raise InvalidArgument("token must be an int in 1..2^64-1")
            tok = token
        self._check()
        s = ReleaseState(kb, tok)
        cause: BaseException | None = None
        while True:
            if time.monotonic() >= s.deadline:
                raise s.give_up(cause)
            c = _Call(_wire.OP_RELEASE, kb, tok)
            try:
                self._send(c, s.deadline, s.deadline, None)
            except ClientClosed:
                raise ClosedIndeterminate("release not confirmed: the client closed") from None
            except (ConnectError, AuthError, TLSError, LockBusy, _NoSlot) as e:
                raise s.give_up(e) from None
            try:
                got = c.waiter.acquire(timeout=max(0.0, s.deadline - time.monotonic()))
            except BaseException:
                if self._releaser.adopt(c, s):
                    raise
                c.waiter.acquire()
                raise
            if not got:
                # the window is over and this attempt is unanswered: never wait longer
                assert c.conn is not None
                if c.conn.drop(c):
                    raise s.give_up(cause)
                c.waiter.acquire()
            if c.fail != FAIL_NONE:
                cause = c.fail_err
            final, wait, err = s.outcome(c.fail, self._closed, c.status, c.code, c.payload, self._follow)
            if final:
                if err is not None:
                    raise err
                if lease_obj is not None:
                    lease_obj._released = True
                return
            known = self._leader
            self._sleep_redirect(min(wait, s.deadline - time.monotonic() - 0.01), known, s)

    def ping(self) -> tuple[int, float]:
        """Round trip to a server: (its wall clock in µs since the epoch,
        the round-trip time in seconds)."""
        self._check()
        give_up = time.monotonic() + self._connect_timeout
        while True:
            c = _Call(_wire.OP_PING, b"")
            self._send(c, give_up, give_up, None)
            self._wait_call(c, None)
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

    def admin(self, cmd: str, **args: object) -> dict[str, object]:
        """An admin query (protocol.md §8), e.g. ``admin("status")`` or
        ``admin("locks", prefix="jobs/")``; most need ``admin_token``."""
        body = json.dumps({**args, "cmd": cmd}).encode("utf-8")
        if not cmd or len(body) > _wire.MAX_ADMIN_BODY:
            raise InvalidArgument("bad admin command")
        self._check()
        give_up = time.monotonic() + self._connect_timeout
        moves = 0
        read_only = cmd in ("status", "locks", "time", "members")
        while True:
            c = _Call(_wire.OP_QUERY, b"", body=body)
            self._send(c, give_up, give_up, None)
            self._wait_call(c, None)
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


class _Job:
    __slots__ = ("call", "compensation", "done", "next", "st")

    def __init__(self, st: ReleaseState, compensation: bool = False) -> None:
        self.st = st
        self.compensation = compensation
        self.next = 0.0
        self.call: _Call | None = None
        self.done = False


class _Releaser:
    """Retries releases in the background (compensations, and releases whose
    caller stopped waiting) from a bounded queue, each for at most 5 s after
    it was requested. Its thread owns the jobs."""

    def __init__(self, cl: Client) -> None:
        self.cl = cl
        self.mu = threading.Lock()
        self.count = 0
        self.incoming: list[_Job] = []
        self.done: list[_Call] = []
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ticketing-releaser", daemon=True)

    def submit(self, j: _Job) -> bool:
        with self.mu:
            if self.count >= RELEASE_QUEUE_LEN or self.cl._closed:
                return False
            self.count += 1
            self.incoming.append(j)
        self.wake.set()
        return True

    def adopt(self, c: _Call, st: ReleaseState) -> bool:
        cn = c.conn
        assert cn is not None
        with cn.mu:
            if not c.pending:
                return False
            with self.mu:
                if self.count >= RELEASE_QUEUE_LEN or self.cl._closed:
                    c.owner = OWNER_DROPPED
                    return True
                self.count += 1
                j = _Job(st)
                j.call = c
                c.job = j
                c.owner = OWNER_RELEASER
                self.incoming.append(j)
        self.wake.set()
        return True

    def completed(self, c: _Call) -> None:
        with self.mu:
            self.done.append(c)
        self.wake.set()

    def _finish(self, j: _Job, err: TicketingError | None) -> None:
        j.done = True
        with self.mu:
            self.count -= 1
        if err is None and j.compensation:
            log.info("ticketing: released a grant that arrived after its acquire was cancelled")
        elif err is not None:
            log.warning("ticketing: background release failed: %s", err)

    def _run(self) -> None:
        cl = self.cl
        active: list[_Job] = []
        leader = cl._leader
        timeout: float | None = None
        while True:
            self.wake.wait(timeout)
            self.wake.clear()
            with self.mu:
                incoming, completed = self.incoming, self.done
                self.incoming, self.done = [], []
            active.extend(incoming)
            if cl._closed:
                for j in active:
                    if not j.done:
                        self._finish(j, Indeterminate("release not confirmed: the client closed"))
                return
            now = time.monotonic()
            ld = cl._leader
            if ld is not leader:
                leader = ld
                if ld is not None:  # a new leader: try the waiting jobs now (once each)
                    for j in active:
                        if j.call is None and not j.st.woken:
                            j.st.woken = True
                            j.next = now
            for c in completed:
                cj = c.job
                assert cj is not None
                cj.call = None
                if cj.done:
                    continue
                final, wait, err = cj.st.outcome(c.fail, cl._closed, c.status, c.code, c.payload, cl._follow)
                if final:
                    self._finish(cj, err)
                else:
                    cj.next = now + min(wait, cj.st.deadline - now - 0.01)
            wake_at: float | None = None
            keep: list[_Job] = []
            for j in active:
                if j.done:
                    continue
                if now >= j.st.deadline:
                    c0 = j.call
                    if c0 is not None and c0.conn is not None:
                        c0.conn.drop(c0)
                    self._finish(j, j.st.give_up())
                    continue
                if j.call is None and now >= j.next:
                    c = _Call(_wire.OP_RELEASE, j.st.key, j.st.token)
                    c.owner = OWNER_RELEASER
                    c.job = j
                    j.call = c  # before enqueue: the answer may come at once
                    e, cn, tr = cl._try_enqueue(c)
                    if e != _ENQ_OK:
                        j.call = None
                        j.next = now + 0.05
                    elif tr is not None and cn is not None:
                        cn.flush(tr)
                keep.append(j)
                t = j.st.deadline
                if j.call is None and j.next < t:
                    t = j.next
                if wake_at is None or t < wake_at:
                    wake_at = t
            active = keep
            timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
