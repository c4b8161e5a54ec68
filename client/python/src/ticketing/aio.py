"""The asyncio client: ticketing.AsyncClient, native asyncio (no threads).

The same state machine as the blocking client and the Go client: one task
per connection (connect, handshake, read responses, back off and reconnect),
frames buffered and written once per loop iteration, responses matched by
req_id, a queued acquire whose task is cancelled withdrawn with C and a grant
that won the race released in the background. Nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import secrets
import ssl
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

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
    RELEASE_QUEUE_LEN,
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
from .client import check_welcome
from .errors import (
    AuthError,
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

_DOWN = 0
_UP = 1
_ENQ_OK = 0
_ENQ_DOWN = 1
_ENQ_FULL = 2


class _NoSlot(Exception):
    pass


class _ACall:
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
        "fut",
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
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, op: int, key: bytes, a1: int = 0, a2: int = 0) -> None:
        self.op = op
        self.key = key
        self.a1 = a1
        self.a2 = a2
        self.body = b""
        self.counts = False
        self.budget = 0.0  # set once the call waited for a connection: the end of its wait
        self.conn: _AConn | None = None
        self.req_id = 0
        self.seq = 0
        self.sent = 0.0
        self.pending = False
        self.owner = OWNER_CALLER
        self.status = 0
        self.code = 0
        self.queued = 0
        self.value = 0
        self.payload = b""
        self.fail = FAIL_NONE
        self.fail_err: BaseException | None = None
        self.fut: asyncio.Future[None] = loop.create_future()


class _AConn:
    def __init__(self, cl: AsyncClient, addr: str) -> None:
        self.cl = cl
        self.addr = addr
        self.host, self.port = split_addr(addr)
        self.state = _DOWN
        self.writer: asyncio.StreamWriter | None = None
        self.ever_up = False
        self.failures = 0
        self.max_inflight = 1
        self.inflight = 0
        self.pending: dict[int, _ACall] = {}
        self.next_id = 0
        self.wbuf = bytearray()
        self.seq = 0
        self.taken = 0
        self.flush_scheduled = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"ticketing-conn {self.addr}")

    async def _run(self) -> None:
        cl = self.cl
        attempt = 0
        try:
            while not cl._closed:
                if attempt:
                    await asyncio.sleep(reconnect_delay(attempt))
                    if cl._closed:
                        return
                try:
                    reader, writer, w = await asyncio.wait_for(self._connect(), cl._connect_timeout)
                except asyncio.CancelledError:
                    raise
                except BaseException as e:
                    if cl._closed:
                        return
                    self._failed(_connect_error(e))
                    attempt += 1
                    continue
                if cl._closed:
                    writer.close()
                    return
                self._up(writer, w)
                await self._read_loop(reader, writer)
                if cl._closed:
                    return
                attempt = 1
        finally:
            w0 = self.writer
            if w0 is not None:
                self.kill(w0, ClientClosed("client closed"))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, _wire.Welcome]:
        cl = self.cl
        if cl._tls is not None:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=cl._tls,
                server_hostname=cl._server_name or self.host,
                ssl_handshake_timeout=cl._connect_timeout,
                limit=_transport.READ_SIZE,
            )
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=_transport.READ_SIZE)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                _transport.set_socket_options(sock)
            try:
                hello = _wire.decode_hello(await reader.readexactly(_wire.HELLO_LEN))
            except _wire.WireError as e:
                raise ProtocolError(f"not a ticketing v1 server: {e}") from None
            nonce = secrets.token_bytes(_wire.NONCE_LEN)
            writer.write(
                _wire.encode_auth(cl._role, nonce, _wire.client_proof(cl._token, cl._role, hello.nonce, nonce))
            )
            try:
                w = _wire.decode_welcome(await reader.readexactly(_wire.WELCOME_LEN))
            except _wire.WireError as e:
                raise ProtocolError(f"bad WELCOME: {e}") from None
            check_welcome(w, hello, cl._token, cl._role, nonce)
            return reader, writer, w
        except BaseException:
            writer.close()
            raise

    def _failed(self, err: TicketingError) -> None:
        self.failures += 1
        n = self.failures
        self.cl._last_err = err
        lvl = logging.WARNING if n == 1 else logging.DEBUG
        if isinstance(err, AuthError):
            lvl = logging.ERROR
        log.log(lvl, "ticketing: connect to %s failed (attempt %d): %s", self.addr, n, err)
        self.cl._notify()

    def _up(self, writer: asyncio.StreamWriter, w: _wire.Welcome) -> None:
        self.state = _UP
        self.writer = writer
        self.ever_up = True
        self.failures = 0
        self.max_inflight = max(1, min(w.max_inflight, 1 << 30))
        self.inflight = 0
        self.next_id = 0
        self.seq = self.taken = 0
        self.wbuf = bytearray()
        self.flush_scheduled = False
        log.info("ticketing: connected to %s (max_inflight %d)", self.addr, w.max_inflight)
        self.cl._notify()

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = _wire.ResponseDecoder()
        while True:
            try:
                data = await reader.read(_transport.READ_SIZE)
            except asyncio.CancelledError:
                raise
            except (OSError, ssl.SSLError, ValueError) as e:
                self.kill(writer, e)
                return
            if not data:
                self.kill(writer, ConnectionResetError("connection closed by the server"))
                return
            try:
                resps = dec.feed(data)
            except _wire.WireError as e:
                self.kill(writer, ProtocolError(f"protocol violation by the server: {e}"))
                return
            if resps and not self._dispatch(writer, resps):
                return

    def _dispatch(self, writer: asyncio.StreamWriter, resps: list[_wire.Response]) -> bool:
        if self.writer is not writer:
            return False
        pending = self.pending
        cl = self.cl
        freed = False
        unknown = 0
        for r in resps:
            c = pending.get(r.req_id)
            if c is None or (r.status == _wire.ST_ERROR and r.code == _wire.CODE_DUPLICATE_REQ_ID):
                unknown += 1
                continue
            if not _wire.fits(c.op, r.status):
                self.kill(writer, ProtocolError(f"protocol violation: {chr(c.op)!r} answered with {chr(r.status)!r}"))
                return False
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
            cl._complete(c)
        if unknown:
            log.warning("ticketing: %d unexpected responses from %s ignored", unknown, self.addr)
        if freed:
            cl._notify()
        return True

    def kill(self, writer: asyncio.StreamWriter, cause: BaseException) -> None:
        if self.writer is not writer or self.state != _UP:
            return
        self.state = _DOWN
        self.writer = None
        calls = list(self.pending.values())
        self.pending = {}
        taken = self.taken
        for c in calls:
            c.pending = False
            c.fail = FAIL_LOST if c.seq < taken else FAIL_UNSENT
            c.fail_err = cause
        self.inflight = 0
        self.wbuf = bytearray()
        writer.close()
        cl = self.cl
        if not isinstance(cause, ClientClosed):
            cl._last_err = cause
            log.warning("ticketing: connection to %s lost (%d pending): %s", self.addr, len(calls), cause)
        for c in calls:
            cl._complete(c)
        cl._notify()

    def forget(self) -> None:
        """Forget this connection without its event loop (after fork, or
        when that loop is gone): close only this process's descriptor."""
        w = self.writer
        self.writer = None
        self.state = _DOWN
        if w is not None:
            sock = w.get_extra_info("socket")
            with contextlib.suppress(Exception):
                getattr(sock, "_sock", sock).close()

    def enqueue(self, c: _ACall) -> int:
        w = self.writer
        if self.state != _UP or w is None:
            return _ENQ_DOWN
        if len(self.wbuf) + w.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            return _ENQ_DOWN
        if c.counts and self.inflight >= self.max_inflight:
            return _ENQ_FULL
        self._enqueue(c, w)
        return _ENQ_OK

    def _enqueue(self, c: _ACall, w: asyncio.StreamWriter) -> None:
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
            c.sent = now = time.monotonic()
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
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush, w)

    def _flush(self, w: asyncio.StreamWriter) -> None:
        """Write every frame queued during this loop iteration at once."""
        self.flush_scheduled = False
        if self.writer is not w or not self.wbuf:
            return
        buf = bytes(self.wbuf)
        self.wbuf = bytearray()
        self.taken = self.seq
        try:
            if w.transport.is_closing():
                raise ConnectionResetError("transport closing")
            w.write(buf)
        except (OSError, RuntimeError) as e:
            self.kill(w, e)

    def abandon(self, c: _ACall) -> bool:
        """The awaiting task was cancelled: leave c to the reader (which
        compensates a grant) and withdraw a queued acquire with C."""
        if not c.pending or c.owner != OWNER_CALLER:
            return False
        c.owner = OWNER_ABANDONED
        w = self.writer
        if c.op == _wire.OP_ACQUIRE and c.counts and self.state == _UP and w is not None:
            cc = _ACall(asyncio.get_running_loop(), _wire.OP_CANCEL, c.key, c.req_id)
            cc.owner = OWNER_DROPPED
            self._enqueue(cc, w)
        return True

    def drop(self, c: _ACall) -> bool:
        if not c.pending:
            return False
        c.owner = OWNER_DROPPED
        return True

    def connecting(self) -> bool:
        return self.state == _DOWN and not self.ever_up and self.failures == 0


def _connect_error(e: BaseException) -> TicketingError:
    if isinstance(e, TicketingError):
        return e
    if isinstance(e, ssl.SSLError):
        return TLSError(f"TLS: {e}")
    if isinstance(e, asyncio.IncompleteReadError):
        return ConnectError("connection closed during the handshake")
    if isinstance(e, asyncio.TimeoutError):
        return ConnectError("connect timeout")
    return ConnectError(f"{type(e).__name__}: {e}")


class _AEndpoint:
    __slots__ = ("addr", "conns")

    def __init__(self, addr: str, conns: list[_AConn]) -> None:
        self.addr = addr
        self.conns = conns

    def connecting(self) -> bool:
        return any(cn.connecting() for cn in self.conns)


class AsyncLease(LeaseBase):
    """A lock held through an AsyncClient (see LeaseBase for the fields).
    ``await lease.release()``; ``async with lease:`` releases at exit."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncClient, key: bytes, token: int, deadline: float, lease_ms: int) -> None:
        super().__init__(key, token, deadline, lease_ms)
        self._client = client

    async def release(self) -> None:
        await self._client.release(self)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._client._release_at_exit(self, et)


class _AsyncLock:
    """``async with client.lock(...) as lease``: the release at exit is
    shielded from the cancellation of the body and goes on in the background
    when the exit itself is cancelled."""

    __slots__ = ("_args", "_client", "_lease")

    def __init__(self, client: AsyncClient, args: tuple[Key, Duration, Duration]) -> None:
        self._client = client
        self._args = args
        self._lease: AsyncLease | None = None

    async def __aenter__(self) -> AsyncLease:
        key, lease, wait = self._args
        self._lease = await self._client.acquire(key, lease=lease, wait=wait)
        return self._lease

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await self._client._release_at_exit(lease, et)


class AsyncClient:
    """The asyncio client: the same shape as Client.

    ``AsyncClient(addrs, token=..., tls=..., connect_timeout=5.0)`` does no
    I/O; ``await client.connect()`` (or ``async with AsyncClient(...) as
    client``) starts the connections and waits for the first one.
    Operations started before that connect on demand, within their budget.
    Bound to the event loop it first runs on."""

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
        self._started = False
        self._pid = os.getpid()
        self._conns: list[_AConn] = []
        self._bg: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop  # set by _ensure_started

    def _ensure_started(self) -> None:
        if self._closed:
            raise ClientClosed("client closed")
        loop = asyncio.get_running_loop()
        if self._started:
            if self._pid == os.getpid() and self._loop is loop:
                return
            # a child after fork, or a new event loop (the old one is gone):
            # drop the old connections without touching their loop
            for cn in self._conns:
                cn.forget()
            log.info("ticketing: %s; reconnecting", "fork detected" if self._pid != os.getpid() else "new event loop")
        self._pid = os.getpid()
        self._loop = loop
        self._started = True
        self._changed = asyncio.Event()
        self._leader: _AEndpoint | None = None
        self._rr = itertools.count()
        self._last_err: BaseException | None = None
        self._extra = 0
        self._bg = set()
        per = 2 if len(self._addrs) == 1 else 1
        self._eps = [self._new_endpoint(a, per) for a in self._addrs]
        self._by_addr = {ep.addr: ep for ep in self._eps}
        self._conns = [cn for ep in self._eps for cn in ep.conns]
        for cn in self._conns:
            cn.start()

    def _new_endpoint(self, addr: str, n: int) -> _AEndpoint:
        return _AEndpoint(addr, [_AConn(self, addr) for _ in range(n)])

    async def connect(self) -> None:
        """Start the connections and wait until one is up: ConnectError
        within connect_timeout, or AuthError / TLSError when every address
        refused."""
        self._ensure_started()
        deadline = time.monotonic() + self._connect_timeout
        while True:
            ev = self._changed
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
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), d)

    async def __aenter__(self) -> AsyncClient:
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close every connection and cancel the background work; calls in
        progress raise ClientClosed (ClosedIndeterminate when written)."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        if self._pid != os.getpid() or self._loop is not asyncio.get_running_loop():
            for cn in self._conns:
                cn.forget()  # their loop is gone (or belongs to the parent)
            return
        for cn in self._conns:
            w = cn.writer
            if w is not None:
                cn.kill(w, ClientClosed("client closed"))
        tasks = [cn.task for cn in self._conns if cn.task is not None] + list(self._bg)
        for t in tasks:
            t.cancel()
        self._notify()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

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
        ev = self._changed
        if getattr(ev, "_waiters", True):  # nobody waits: keep the event
            self._changed = asyncio.Event()
            ev.set()

    # ------------------------------------------------------ connection choice

    def _try_enqueue(self, c: _ACall) -> int:
        r = next(self._rr)
        res = _ENQ_DOWN
        ep = self._leader
        if ep is not None:
            conns = ep.conns
            n = len(conns)
            for i in range(n):
                e = conns[(r + i) % n].enqueue(c)
                if e == _ENQ_OK:
                    return e
                if e == _ENQ_FULL:
                    res = e
            if res == _ENQ_FULL or ep.connecting():
                return res
        conns = self._conns
        n = len(conns)
        for i in range(n):
            e = conns[(r + i) % n].enqueue(c)
            if e == _ENQ_OK:
                return e
            if e == _ENQ_FULL:
                res = e
        return res

    async def _send(self, c: _ACall, give_up: float, slot_give_up: float) -> None:
        if self._closed:
            raise ClientClosed("client closed")
        if self._try_enqueue(c) == _ENQ_OK:
            return
        c.budget = slot_give_up  # an acquire sent later carries only the wait left
        while True:
            ev = self._changed
            e = self._try_enqueue(c)
            if e == _ENQ_OK:
                return
            if self._closed:
                raise ClientClosed("client closed")
            d = (slot_give_up if e == _ENQ_FULL else give_up) - time.monotonic()
            if d <= 0:
                if e == _ENQ_FULL:
                    raise _NoSlot()
                raise self._connect_error()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), d)

    def _follow(self, addr: str) -> None:
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
                cn.start()
        if self._leader is not ep:
            self._leader = ep
            self._notify()

    def _complete(self, c: _ACall) -> None:
        o = c.owner
        if o == OWNER_CALLER:
            if not c.fut.done():
                c.fut.set_result(None)
        elif o == OWNER_ABANDONED and c.op == _wire.OP_ACQUIRE and c.fail == FAIL_NONE and c.status == _wire.ST_GRANTED:
            self._compensate(c.key, c.value)

    def _compensate(self, key: bytes, token: int) -> None:
        self._background_release(ReleaseState(key, token), compensation=True)

    def _background_release(self, st: ReleaseState, compensation: bool = False) -> None:
        if self._closed or len(self._bg) >= RELEASE_QUEUE_LEN:
            log.warning("ticketing: release queue full or client closed; the lock stays held until its lease ends")
            return
        t = self._loop.create_task(self._release_core(st))
        self._bg.add(t)

        def done(t: asyncio.Task[None]) -> None:
            self._bg.discard(t)
            if t.cancelled():
                return
            err = t.exception()
            if err is None and compensation:
                log.info("ticketing: released a grant that arrived after its acquire was cancelled")
            elif err is not None:
                log.warning("ticketing: background release failed: %s", err)

        t.add_done_callback(done)

    async def _sleep_redirect(self, d: float, known: _AEndpoint | None, st: ReleaseState) -> None:
        if d <= 0:
            return
        end = time.monotonic() + d
        while not self._closed:
            ev = self._changed
            if not st.woken:
                ld = self._leader
                if ld is not None and ld is not known:
                    st.woken = True
                    return
            rem = end - time.monotonic()
            if rem <= 0:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), rem)

    async def _wait_call(self, c: _ACall) -> None:
        try:
            await c.fut
        except asyncio.CancelledError:
            cn = c.conn
            abandoned = cn is not None and cn.abandon(c)
            if not abandoned and c.op == _wire.OP_ACQUIRE and c.fail == FAIL_NONE and c.status == _wire.ST_GRANTED:
                # answered meanwhile: a grant that won the race is released
                self._compensate(c.key, c.value)
            raise

    # ------------------------------------------------------------ operations

    async def acquire(self, key: Key, *, lease: Duration, wait: Duration = 0) -> AsyncLease:
        """Acquire the lock (see Client.acquire). Cancelling the awaiting task
        withdraws a queued acquire (C) and releases a grant that won the race;
        asyncio.CancelledError propagates."""
        kb = key_bytes(key)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        self._ensure_started()
        loop = self._loop
        start = time.monotonic()
        budget_end = start + wait_ms / 1000
        conn_give_up = max(start + self._connect_timeout, budget_end)
        moves = rounds = 0
        st: ReleaseState | None = None  # for its once-per-call "woken" flag
        while True:
            c = _ACall(loop, _wire.OP_ACQUIRE, kb, lease_ms, wait_ms)
            c.counts = wait_ms > 0
            try:
                await self._send(c, conn_give_up, budget_end)
            except _NoSlot:
                raise LockTimeout("not acquired: no free max_inflight slot within the wait") from None
            await self._wait_call(c)
            if c.fail != FAIL_NONE:
                if c.fail == FAIL_LOST:
                    if isinstance(c.fail_err, ClientClosed):
                        raise ClosedIndeterminate("client closed after the acquire was written (outcome unknown)")
                    raise Indeterminate(f"connection lost after the acquire was written: {c.fail_err}")
                if self._closed:
                    raise ClientClosed("client closed")
            else:
                s = c.status
                if s == _wire.ST_GRANTED:
                    deadline = c.sent + c.queued * _wire.QUEUED_UNIT + lease_ms / 1000
                    return AsyncLease(self, kb, c.value, deadline, lease_ms)
                if s == _wire.ST_TIMEOUT:
                    raise LockTimeout("timed out, not acquired")
                if s == _wire.ST_BUSY:
                    raise LockBusy(c.code)
                if s == _wire.ST_UNKNOWN:
                    raise Indeterminate("the cluster could not confirm the commit (U)", c.code or None)
                if s == _wire.ST_ERROR:
                    raise server_error(c.code, c.payload)
                addr = c.payload.decode("ascii", "replace")
                self._follow(addr)
                moves += 1
                if moves > MAX_MOVES:
                    rounds += 1
                    d = redirect_delay(rounds)
                    if wait_ms == 0 or budget_end - time.monotonic() <= d:
                        raise NoLeader(f"{moves} consecutive redirects (last to {addr!r})")
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

    async def try_acquire(self, key: Key, *, lease: Duration) -> AsyncLease | None:
        try:
            return await self.acquire(key, lease=lease, wait=0)
        except LockTimeout:
            return None

    def lock(self, key: Key, *, lease: Duration, wait: Duration = 0) -> _AsyncLock:
        """``async with client.lock(key, lease=30, wait=10) as lease:``"""
        return _AsyncLock(self, (key, lease, wait))

    async def _release_at_exit(self, lease: AsyncLease, et: type[BaseException] | None) -> None:
        task = self._loop.create_task(self.release(lease))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():  # goes on in the background, for at most 5 s
                self._bg.add(task)
                task.add_done_callback(_retrieve(self._bg))
            raise
        except TicketingError as e:
            if et is None:
                raise
            log.warning("ticketing: release after a failing block: %s", e)

    async def release(self, lease: LeaseBase | Key, token: int | None = None) -> None:
        """Release a lock (see Client.release): ``await release(lease)`` or
        ``await release(key, token)``. When the awaiting task is cancelled,
        the release goes on in the background (for at most 5 s)."""
        lease_obj: LeaseBase | None = None
        if isinstance(lease, LeaseBase):
            lease_obj = lease
            kb, tok = lease.key_bytes, lease.token
        else:
            kb = key_bytes(lease)
            if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= _wire.MAX_U64:
                raise InvalidArgument("token must be an int in 1..2^64-1")
            tok = token
        self._ensure_started()
        await self._release_core(ReleaseState(kb, tok))
        if lease_obj is not None:
            lease_obj._released = True

    async def _release_core(self, s: ReleaseState) -> None:
        loop = self._loop
        cause: BaseException | None = None
        while True:
            if time.monotonic() >= s.deadline:
                raise s.give_up(cause)
            c = _ACall(loop, _wire.OP_RELEASE, s.key, s.token)
            try:
                await self._send(c, s.deadline, s.deadline)
            except ClientClosed:
                raise ClosedIndeterminate("release not confirmed: the client closed") from None
            except (ConnectError, AuthError, TLSError, LockBusy, _NoSlot) as e:
                raise s.give_up(e) from None
            except asyncio.CancelledError:
                self._background_release(s)
                raise
            # the window ends at s.deadline: an unanswered attempt is dropped then
            timer = loop.call_later(max(0.0, s.deadline - time.monotonic()), _expire, c)
            try:
                await c.fut
            except asyncio.CancelledError:
                if c.pending or c.fail != FAIL_NONE or c.status in (_wire.ST_MOVED, _wire.ST_UNKNOWN):
                    if c.pending:
                        c.owner = OWNER_DROPPED
                        s.maybe = True
                    self._background_release(s)
                raise
            finally:
                timer.cancel()
            if c.owner == OWNER_DROPPED:
                raise s.give_up(cause)
            if c.fail != FAIL_NONE:
                cause = c.fail_err
            final, wait, err = s.outcome(c.fail, self._closed, c.status, c.code, c.payload, self._follow)
            if final:
                if err is not None:
                    raise err
                return
            await self._sleep_redirect(min(wait, s.deadline - time.monotonic() - 0.01), self._leader, s)

    async def ping(self) -> tuple[int, float]:
        """(server wall clock in µs since the epoch, round-trip seconds)."""
        self._ensure_started()
        give_up = time.monotonic() + self._connect_timeout
        while True:
            c = _ACall(self._loop, _wire.OP_PING, b"")
            await self._send(c, give_up, give_up)
            await self._wait_call(c)
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

    async def admin(self, cmd: str, **args: object) -> dict[str, object]:
        """An admin query (protocol.md §8); most need ``admin_token``."""
        body = json.dumps({**args, "cmd": cmd}).encode("utf-8")
        if not cmd or len(body) > _wire.MAX_ADMIN_BODY:
            raise InvalidArgument("bad admin command")
        self._ensure_started()
        give_up = time.monotonic() + self._connect_timeout
        read_only = cmd in ("status", "locks", "time", "members")
        moves = 0
        while True:
            c = _ACall(self._loop, _wire.OP_QUERY, b"")
            c.body = body
            await self._send(c, give_up, give_up)
            await self._wait_call(c)
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


def _expire(c: _ACall) -> None:
    """The release window ended with c unanswered: give it up."""
    if c.pending and c.owner == OWNER_CALLER:
        c.owner = OWNER_DROPPED
        if not c.fut.done():
            c.fut.set_result(None)


def _retrieve(bg: set[asyncio.Task[Any]]) -> Any:
    def done(t: asyncio.Task[Any]) -> None:
        bg.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("ticketing: background release failed: %s", t.exception())

    return done
