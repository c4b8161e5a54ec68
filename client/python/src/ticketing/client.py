"""The blocking client: ticketing.Client, thread-safe, one per process.

The protocol, the pool and the operations are _core's (shared with the
asyncio client); this front end provides threads and blocking waits:

* Each _Conn is one persistent connection to one address, kept by one
  thread: connect, handshake, then read responses until the connection
  fails, back off (0.1 s doubling to 3.2 s, jittered) and connect again,
  until close().
* Senders encode their frame into the connection's write buffer under its
  lock. The first sender that finds no writer active becomes the writer: it
  takes the whole buffer (the frames of every thread that queued meanwhile)
  and writes it with one send, until the buffer is empty.
* The reader decodes every complete response, matches it by req_id under
  the lock and completes the calls after unlocking; it never writes and
  never blocks on a caller.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from . import _core, _transport, _wire
from ._common import (
    DEFAULT_CONNECT_TIMEOUT,
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
    seconds,
)
from ._core import ENQ_OK, UP, Call, run_sync
from .errors import (
    Cancelled,
    ClientClosed,
    ConnectError,
    Indeterminate,
    LockTimeout,
    ProtocolError,
    TicketingError,
)

log = logging.getLogger("ticketing")

check_welcome = _core.check_welcome  # kept for importers of the old module layout


class _Conn(_core.ConnCore):
    def __init__(self, cl: Client, addr: str) -> None:
        super().__init__(addr)
        self.cl = cl
        self.mu = threading.Lock()
        self.tr: _transport.Transport | None = None
        self.hs_sock: socket.socket | None = None  # the socket being connected
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
                self.note_failed(cl, _core.connect_error(e))
                cl._notify()
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

            async def read_exact(n: int, what: str) -> bytes:
                return _recv_exact(tr, n, deadline, what)

            def write(b: bytes) -> None:
                tr.set_deadline(deadline)
                tr.send(b)

            w = run_sync(_core.handshake(read_exact, write, cl._token, cl._role))
            sock.settimeout(None)
            return tr, w
        except BaseException:
            sock.close()
            raise
        finally:
            with self.mu:
                self.hs_sock = None

    def _up(self, tr: _transport.Transport, w: _wire.Welcome) -> bool:
        with self.mu:
            if self.cl._closed:
                return False
            self.up_locked(w)
            self.tr = tr
            self.writing = False
        log.info("ticketing: connected to %s (max_inflight %d)", self.addr, w.max_inflight)
        self.cl._setup(self)
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
        with self.mu:
            if self.tr is not tr:
                return False
            done, perr, freed, unknown = self.match_locked(resps)
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
            if self.tr is not tr or self.state != UP:
                return
            self.tr = None
            calls = self.down_locked(cause)
            self.writing = False
        tr.close()
        cl = self.cl
        if not isinstance(cause, ClientClosed):
            cl._last_err = cause
        self.log_lost(cause, len(calls))
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

    def enqueue(self, c: Call) -> tuple[int, _transport.Transport | None]:
        """Queue c's frame. Returns the result and, when the caller became
        the writer, the transport it must flush."""
        with self.mu:
            e = self.admit_locked(c)
            if e != ENQ_OK:
                return e, None
            self.enqueue_locked(c)
            if self.writing:
                return ENQ_OK, None
            self.writing = True
            return ENQ_OK, self.tr

    def flush(self, tr: _transport.Transport) -> None:
        """Write the buffer to tr until it is empty (the caller is the writer).
        A connection the server has already closed is taken down first, so
        that its requests count as never written (retried, not Indeterminate).
        The check (a syscall: one more GIL hand-off per write) is made only
        when no written request awaits its answer: on a busy connection the
        reader meets the EOF next, and the requests in flight are lost anyway."""
        with self.mu:
            idle = len(self.pending) <= self.seq - self.taken  # every pending call is still unwritten
        if idle and _transport.peer_closed(tr.sock):
            self.kill(tr, ConnectionResetError("connection closed by the server"))
            return
        while True:
            with self.mu:
                if self.tr is not tr:
                    return  # killed; the writer flag is no longer ours
                if not self.wbuf:
                    self.writing = False
                    return
                buf = self.take_wbuf_locked()
            try:
                tr.send(buf)
            except (OSError, ssl.SSLError, ValueError) as e:
                self.kill(tr, e)
                return

    def abandon(self, c: Call, withdraw: bool = False) -> tuple[bool, _transport.Transport | None]:
        """The caller gives up on c. False when c was already answered (its
        waiter is or will be released). Otherwise the reader compensates a
        grant; a queued acquire is withdrawn with C on the same connection."""
        with self.mu:
            r = self.abandon_locked(c, _blocking_call(_wire.OP_CANCEL, c.key, c.req_id), withdraw)
            if r is None:
                return False, None
            if not r or self.writing:
                return True, None
            self.writing = True
            return True, self.tr

    def drop(self, c: Call) -> bool:
        with self.mu:
            return self.drop_locked(c)


def _blocking_call(op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> Call:
    c = Call(op, key, a1, a2, body)
    c.waiter = w = threading.Lock()
    w.acquire()
    return c


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


class Lease(LeaseBase):
    """A lock held through a blocking Client (see LeaseBase for the fields).

    ``release()`` releases it; a ``with`` block on it releases it at exit.
    Ownership is the token alone: any thread (or process, with
    ``Client.release(key, token)``) may release it."""

    __slots__ = ("_client",)

    def __init__(self, client: Client, key: bytes, token: int, deadline: float, lease_ms: int) -> None:
        super().__init__(key, token, deadline, lease_ms)
        self._client = client

    def release(self) -> bool:
        """Release the lock: True once the server answered O, False (and
        nothing sent) when this lease was already released. Raises NotHolder
        (the lease had ended) or Indeterminate (not confirmed within 5 s; the
        lease ends it)."""
        return self._client.release(self)

    def ending(self, margin: Duration = 0.0) -> threading.Event:
        """An Event set ``margin`` before the conservative local deadline, or
        at once when the lease is (or gets) released: stop the work when it is
        set (edge rule R12). Never raises after release."""
        m = 0.0 if margin == 0 else seconds(margin, "margin")
        ev = threading.Event()
        if self._released:
            ev.set()
            return ev
        t = threading.Timer(max(0.0, self.remaining() - m), ev.set)
        t.daemon = True

        def on_release() -> None:
            t.cancel()
            ev.set()

        self._ending.append(on_release)
        t.start()
        if self._released:  # released meanwhile
            on_release()
        return ev

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        _release_on_exit(self.release, et)


def _release_on_exit(release: Callable[[], object], et: type[BaseException] | None) -> None:
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


class Client(_core.ClientCore[_Conn]):
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
        answer_allowance: Duration = _core.DEFAULT_ANSWER_ALLOWANCE,
        label: str | None = None,
        app_name: str | None = None,
    ) -> None:
        self._configure(addrs, token, tls, server_name, connect_timeout, admin_token, answer_allowance, label, app_name)
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
        self._rr = itertools.count()
        self._reset_pool()
        self._releaser = _Releaser(self)
        self._releaser.thread.start()
        for cn in self._conns:
            cn.thread.start()

    # ---------------------------------------------- the core's front-end hooks

    def _new_endpoint(self, addr: str, n: int) -> _core.Endpoint[_Conn]:
        return _core.Endpoint(addr, [_Conn(self, addr) for _ in range(n)])

    def _start_conn(self, cn: _Conn) -> None:
        cn.thread.start()

    def _pool_lock(self) -> contextlib.AbstractContextManager[Any]:
        return self._mu

    def _leader_changed(self) -> None:
        self._wake_all()
        self._releaser.wake.set()

    def _wake(self, c: Call) -> None:
        c.waiter.release()

    def _release_completed(self, c: Call) -> None:
        self._releaser.completed(c)

    def _new_call(self, op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> Call:
        return _blocking_call(op, key, a1, a2, body)

    def _enqueue(self, cn: _Conn, c: Call) -> tuple[int, Any]:
        return cn.enqueue(c)

    def _push(self, cn: _Conn, c: Call) -> None:
        e, tr = cn.enqueue(c)
        if e == ENQ_OK and tr is not None:
            cn.flush(tr)

    def _compensate(self, key: bytes, token: int, body: bytes = b"", nkeys: int = 0) -> None:
        job = _Job(ReleaseState(key, token, body=body, nkeys=nkeys), compensation=True)
        if not self._releaser.submit(job):
            log.warning("ticketing: release queue full; an abandoned grant stays held until its lease ends")

    def _release_later(self, s: ReleaseState) -> None:
        if not self._releaser.submit(_Job(s)):
            log.warning("ticketing: release queue full; the lock stays held until its lease ends")

    # --------------------------------------------------------------- checks

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
                    if any(cn.state == UP for cn in self._conns):
                        return
                    cfg = self._config_error()
                    if cfg is not None:
                        raise cfg
                    d = deadline - time.monotonic()
                    if d <= 0:
                        raise self._connect_error()
                    self._cond.wait(d)
            finally:
                self._waiting -= 1

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

    # ------------------------------------------------------------ the waits

    def _flush_if_writer(self, cn: _Conn | None, tr: Any) -> None:
        if tr is not None and cn is not None:
            cn.flush(tr)

    async def _send(self, c: Call, give_up: float, slot_give_up: float, cancel: CancelToken | None) -> None:
        """Queue c, waiting for a connection (until give_up) or a free
        max_inflight slot (until slot_give_up). Raises ClientClosed,
        Cancelled, ConnectError, NoSlot."""
        if self._closed:
            raise ClientClosed("client closed")
        e, cn, tr = self._try_enqueue(c)
        if e == ENQ_OK:
            self._flush_if_writer(cn, tr)
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
                if e == ENQ_OK:
                    self._flush_if_writer(cn, tr)
                    return
                if self._closed:
                    raise ClientClosed("client closed")
                if cancel is not None and cancel.cancelled:
                    raise Cancelled("cancelled")
                d = self._wait_budget(c, e, give_up, slot_give_up)
                with self._cond:
                    if self._gen == g:
                        self._cond.wait(d)
                    g = self._gen
        finally:
            with self._cond:
                self._waiting -= 1
            if cb is not None and cancel is not None:
                cancel._remove(cb)

    async def _sleep_redirect(self, d: float, known: _core.Endpoint[_Conn] | None, st: ReleaseState | None) -> None:
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

    async def _wait_call(self, c: Call, cancel: CancelToken | None, due: float | None = None) -> bool:
        """Wait for c's answer. Returns False when the caller cancelled (the
        call was abandoned to the reader), True with the answer in c (or
        c.overdue: no answer by due, abandoned and withdrawn)."""
        cb: Callable[[], None] | None = None
        if cancel is not None:

            def on_cancel() -> None:
                self._cancel_call(c)

            if cancel._add(on_cancel):
                cb = on_cancel
            else:
                self._cancel_call(c)
        try:
            if due is None:
                c.waiter.acquire()
            elif not c.waiter.acquire(timeout=max(0.0, due - time.monotonic())):
                if self._cancel_call(c, withdraw=True):
                    c.overdue = True
                else:
                    c.waiter.acquire()  # answered meanwhile
        except BaseException:
            # interrupted (KeyboardInterrupt, ...): withdraw it like a cancel
            if not self._cancel_call(c):
                c.waiter.acquire()
                if c.granted():
                    self._compensate_call(c)
            raise
        finally:
            if cb is not None and cancel is not None:
                cancel._remove(cb)
        return bool(c.owner == OWNER_CALLER or c.overdue)

    def _cancel_call(self, c: Call, withdraw: bool = False) -> bool:
        cn = c.conn
        assert isinstance(cn, _Conn)
        ok, tr = cn.abandon(c, withdraw)
        if ok:
            c.waiter.release()
            if tr is not None:
                cn.flush(tr)
        return ok

    async def _wait_release(self, c: Call, s: ReleaseState) -> bool:
        cn = c.conn
        assert isinstance(cn, _Conn)
        try:
            got = c.waiter.acquire(timeout=max(0.0, s.deadline - time.monotonic()))
        except BaseException:
            if self._releaser.adopt(c, s):
                raise
            c.waiter.acquire()
            raise
        if not got:
            # the window is over and this attempt is unanswered: never wait longer
            if cn.drop(c):
                return False
            c.waiter.acquire()
        return True

    # ------------------------------------------------------------ operations

    def acquire(
        self,
        key: Key,
        *,
        lease: Duration,
        wait: Duration = 0,
        cancel: CancelToken | None = None,
        min_remaining: Duration | None = None,
    ) -> Lease:
        """Acquire the lock on key with a lease of ``lease``, waiting up to
        ``wait`` (0 = try once). Durations are float seconds or timedelta,
        rounded up to whole milliseconds.

        Raises LockTimeout (not acquired within wait), LockBusy (refused at
        once, never retried), Indeterminate (written but no definite answer:
        do not enter the critical section), Cancelled (``cancel`` fired: a
        queued acquire is withdrawn, a grant that won the race released),
        ConnectError, NoLeader, InvalidArgument (bad arguments, or the
        server's E with its code), ClientClosed, ProtocolError.

        ``min_remaining`` (R14): when less than that is left of the lease
        after the grant (a long queue ate it), the lock is released at once
        and InsufficientLease raised.

        Retried internally only when the request was never written or the
        answer was M, and only within the remaining wait. A written acquire
        unanswered by its wait plus ``answer_allowance`` (3 s) ends
        Indeterminate and is withdrawn (R2)."""
        kb = key_bytes(key)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        mr = None if min_remaining is None else millis(min_remaining, "min_remaining") / 1000
        self._check()
        token, deadline = run_sync(self._acquire(kb, lease_ms, wait_ms, cancel, mr))
        return Lease(self, kb, token, deadline, lease_ms)

    def acquire_set(
        self,
        keys: Sequence[Key],
        *,
        lease: Duration,
        wait: Duration = 0,
        cancel: CancelToken | None = None,
        min_remaining: Duration | None = None,
    ) -> Lease:
        """Acquire 2..16 distinct keys at once (protocol 1.1 key sets,
        docs/protocol.md §12.2): one lease, one wait, one fencing token for
        all of them, no deadlock whatever the order. Raises as acquire, and
        NotSupported when the server does not announce key sets. The Lease's
        ``keys`` lists them; ``release(lease)`` releases the whole set."""
        kbs = _core.set_keys(keys)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        mr = None if min_remaining is None else millis(min_remaining, "min_remaining") / 1000
        self._check()
        token, deadline = run_sync(self._acquire(kbs[0], lease_ms, wait_ms, cancel, mr, kbs))
        out = Lease(self, kbs[0], token, deadline, lease_ms)
        out.keys = tuple(k.decode("utf-8") for k in kbs)
        out._body = _wire.set_body(kbs)
        return out

    def release_set(self, keys: Sequence[Key], token: int) -> bool:
        """Release the set of keys acquired with token (X); True after O.
        Raises NotHolder when token does not hold exactly these keys."""
        kbs = _core.set_keys(keys)
        _core.release_args(kbs[0], token)  # the token's check
        self._check()
        run_sync(self._release(ReleaseState(kbs[0], token, body=_wire.set_body(kbs), nkeys=len(kbs))))
        return True

    def try_acquire(
        self, key: Key, *, lease: Duration, wait: Duration = 0, cancel: CancelToken | None = None
    ) -> Lease | None:
        """acquire, but "not acquired within the wait" is None, not
        LockTimeout (R13); wait 0 tries once."""
        try:
            return self.acquire(key, lease=lease, wait=wait, cancel=cancel)
        except LockTimeout:
            return None

    def lock(self, key: Key, *, lease: Duration, wait: Duration = 0, cancel: CancelToken | None = None) -> _Lock:
        """``with client.lock(key, lease=30, wait=10) as lease:`` acquires,
        runs the block and releases on normal and exceptional exit. A release
        failure after a normal exit raises (NotHolder: the lease had ended
        during the block); after a failing block it is logged and the block's
        exception propagates. The object may be used for one ``with`` after
        another (each acquires anew), not for two at once."""
        return _Lock(self, key, lease, wait, cancel)

    def release(self, lease: LeaseBase | Key, token: int | None = None) -> bool:
        """Release a lock: ``release(lease)`` or ``release(key, token)`` (from
        any process that knows the token). Returns True only when the server
        answered O; False, sending nothing, for a Lease already released
        (edge rule R6: releasing a lease object twice is a no-op). Raises
        NotHolder (the key is free or held under another token),
        Indeterminate (no confirmation within 5 s: the lease ends it),
        InvalidArgument, ClientClosed (nothing was sent)."""
        st, lease_obj = _core.release_state(lease, token)
        if lease_obj is not None and lease_obj._released:
            return False
        self._check()
        run_sync(self._release(st))
        if lease_obj is not None:
            lease_obj._mark_released()
        return True

    def ping(self) -> tuple[int, float]:
        """Round trip to a server: (its wall clock in µs since the epoch,
        the round-trip time in seconds)."""
        self._check()
        return run_sync(self._ping())

    def admin(self, cmd: str, **args: object) -> dict[str, object]:
        """An admin query (protocol.md §8), e.g. ``admin("status")`` or
        ``admin("locks", prefix="jobs/")``; most need ``admin_token``."""
        body, read_only = _core.admin_body(cmd, args)
        self._check()
        return run_sync(self._admin(body, read_only))


class _Lock:
    """The scope of Client.lock: each ``with`` acquires, exit releases."""

    __slots__ = ("_args", "_cancel", "_client", "_lease")

    def __init__(self, client: Client, key: Key, lease: Duration, wait: Duration, cancel: CancelToken | None) -> None:
        self._client = client
        self._args = (key, lease, wait)
        self._cancel = cancel
        self._lease: Lease | None = None

    def __enter__(self) -> Lease:
        if self._lease is not None:
            raise RuntimeError(
                "this client.lock(...) object is held by a with block that has not exited: "
                "call client.lock() again for a nested or concurrent scope"
            )
        key, lease, wait = self._args
        self._lease = self._client.acquire(key, lease=lease, wait=wait, cancel=self._cancel)
        return self._lease

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            _release_on_exit(lease.release, et)


class _Job:
    __slots__ = ("call", "compensation", "done", "next", "st")

    def __init__(self, st: ReleaseState, compensation: bool = False) -> None:
        self.st = st
        self.compensation = compensation
        self.next = 0.0
        self.call: Call | None = None
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
        self.done: list[Call] = []
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

    def adopt(self, c: Call, st: ReleaseState) -> bool:
        cn = c.conn
        assert isinstance(cn, _Conn)
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

    def completed(self, c: Call) -> None:
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
                assert isinstance(cj, _Job)
                cj.call = None
                if cj.done:
                    continue
                final, wait, err = cj.st.outcome(
                    c.fail, cl._closed, c.status, c.code, c.payload, cl._follow, c.conn.addr
                )
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
                    if c0 is not None and isinstance(c0.conn, _Conn):
                        c0.conn.drop(c0)
                    self._finish(j, j.st.give_up())
                    continue
                if j.call is None and now >= j.next:
                    c = _blocking_call(j.st.op, j.st.key, j.st.token, 0, j.st.body)
                    c.nkeys = j.st.nkeys
                    c.owner = OWNER_RELEASER
                    c.job = j
                    j.call = c  # before enqueue: the answer may come at once
                    e, cn, tr = cl._try_enqueue(c)
                    if e != ENQ_OK:
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
