"""The asyncio client: ticketing.AsyncClient, native asyncio (no threads).

The protocol, the pool and the operations are _core's (shared with the
blocking client); this front end provides tasks and awaitable waits: one
task per connection (connect, handshake, read responses, back off and
reconnect), frames buffered and written once per loop iteration, a queued
acquire whose task is cancelled withdrawn with C and a grant that won the
race released in the background. Nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from . import _core, _transport, _wire
from ._common import (
    DEFAULT_CONNECT_TIMEOUT,
    FAIL_NONE,
    OWNER_CALLER,
    OWNER_DROPPED,
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
from ._core import ENQ_OK, UP, Call
from .errors import (
    ClientClosed,
    LockTimeout,
    ProtocolError,
    TicketingError,
)

log = logging.getLogger("ticketing")


class _AConn(_core.ConnCore):
    def __init__(self, cl: AsyncClient, addr: str) -> None:
        super().__init__(addr)
        self.cl = cl
        self.writer: asyncio.StreamWriter | None = None
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
                    self.note_failed(cl, _core.connect_error(e))
                    cl._notify()
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

            async def read_exact(n: int, what: str) -> bytes:
                return await reader.readexactly(n)

            w = await _core.handshake(read_exact, writer.write, cl._token, cl._role)
            return reader, writer, w
        except BaseException:
            writer.close()
            raise

    def _up(self, writer: asyncio.StreamWriter, w: _wire.Welcome) -> None:
        self.up_locked(w)
        self.writer = writer
        self.flush_scheduled = False
        log.info("ticketing: connected to %s (max_inflight %d)", self.addr, w.max_inflight)
        self.cl._setup(self)
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
        done, perr, freed, unknown = self.match_locked(resps)
        cl = self.cl
        for c in done:
            cl._complete(c)
        if unknown:
            log.warning("ticketing: %d unexpected responses from %s ignored", unknown, self.addr)
        if perr is not None:
            self.kill(writer, perr)
            return False
        if freed:
            cl._notify()
        return True

    def kill(self, writer: asyncio.StreamWriter, cause: BaseException) -> None:
        if self.writer is not writer or self.state != UP:
            return
        self.writer = None
        calls = self.down_locked(cause)
        writer.close()
        cl = self.cl
        if not isinstance(cause, ClientClosed):
            cl._last_err = cause
        self.log_lost(cause, len(calls))
        for c in calls:
            cl._complete(c)
        cl._notify()

    def forget(self) -> None:
        """Forget this connection without its event loop (after fork, or
        when that loop is gone): close only this process's descriptor."""
        w = self.writer
        self.writer = None
        self.state = _core.DOWN
        if w is not None:
            sock = w.get_extra_info("socket")
            with contextlib.suppress(Exception):
                getattr(sock, "_sock", sock).close()

    def enqueue(self, c: Call) -> int:
        w = self.writer
        if w is None:
            return _core.ENQ_DOWN
        e = self.admit_locked(c, w.transport.get_write_buffer_size())
        if e == ENQ_OK:
            self.enqueue_locked(c)
            self._schedule(w)
        return e

    def _schedule(self, w: asyncio.StreamWriter) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush, w)

    def _flush(self, w: asyncio.StreamWriter) -> None:
        """Write every frame queued during this loop iteration at once."""
        self.flush_scheduled = False
        if self.writer is not w or not self.wbuf:
            return
        buf = self.take_wbuf_locked()
        try:
            if w.transport.is_closing():
                raise ConnectionResetError("transport closing")
            w.write(buf)
        except (OSError, RuntimeError) as e:
            self.kill(w, e)

    def abandon(self, c: Call, withdraw: bool = False) -> bool:
        """The awaiting task was cancelled: leave c to the reader (which
        compensates a grant) and withdraw a queued acquire with C."""
        r = self.abandon_locked(c, _async_call(_wire.OP_CANCEL, c.key, c.req_id), withdraw)
        if r is None:
            return False
        if r and self.writer is not None:
            self._schedule(self.writer)
        return True


def _async_call(op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> Call:
    c = Call(op, key, a1, a2, body)
    c.waiter = asyncio.get_running_loop().create_future()
    return c


class AsyncLease(LeaseBase):
    """A lock held through an AsyncClient (see LeaseBase for the fields).
    ``await lease.release()``; ``async with lease:`` releases at exit."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncClient, key: bytes, token: int, deadline: float, lease_ms: int) -> None:
        super().__init__(key, token, deadline, lease_ms)
        self._client = client

    async def release(self) -> bool:
        """True once the server answered O; False when already released."""
        return await self._client.release(self)

    def ending(self, margin: Duration = 0.0) -> asyncio.Event:
        """An asyncio.Event set ``margin`` before the conservative local
        deadline, or at once when the lease is (or gets) released (edge rule
        R12); ``await lease.ending(1.0).wait()``. Call it on the client's loop."""
        m = 0.0 if margin == 0 else seconds(margin, "margin")
        ev = asyncio.Event()
        if self._released:
            ev.set()
            return ev
        h = asyncio.get_running_loop().call_later(max(0.0, self.remaining() - m), ev.set)

        def on_release() -> None:
            h.cancel()
            ev.set()

        self._ending.append(on_release)
        return ev

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
        if self._lease is not None:
            raise RuntimeError(
                "this client.lock(...) object is held by an async with block that has not exited: "
                "call client.lock() again for a nested or concurrent scope"
            )
        key, lease, wait = self._args
        self._lease = await self._client.acquire(key, lease=lease, wait=wait)
        return self._lease

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await self._client._release_at_exit(lease, et)


class AsyncClient(_core.ClientCore[_AConn]):
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
        answer_allowance: Duration = _core.DEFAULT_ANSWER_ALLOWANCE,
        label: str | None = None,
        app_name: str | None = None,
    ) -> None:
        self._configure(addrs, token, tls, server_name, connect_timeout, admin_token, answer_allowance, label, app_name)
        self._started = False
        self._conns = []
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
        self._rr = itertools.count()
        self._bg = set()
        self._reset_pool()
        for cn in self._conns:
            cn.start()

    # ---------------------------------------------- the core's front-end hooks

    def _new_endpoint(self, addr: str, n: int) -> _core.Endpoint[_AConn]:
        return _core.Endpoint(addr, [_AConn(self, addr) for _ in range(n)])

    def _start_conn(self, cn: _AConn) -> None:
        cn.start()

    def _leader_changed(self) -> None:
        self._notify()

    def _wake(self, c: Call) -> None:
        if not c.waiter.done():
            c.waiter.set_result(None)

    def _new_call(self, op: int, key: bytes, a1: int = 0, a2: int = 0, body: bytes = b"") -> Call:
        return _async_call(op, key, a1, a2, body)

    def _enqueue(self, cn: _AConn, c: Call) -> tuple[int, Any]:
        return cn.enqueue(c), None

    def _push(self, cn: _AConn, c: Call) -> None:
        cn.enqueue(c)

    def _compensate(self, key: bytes, token: int, body: bytes = b"", nkeys: int = 0) -> None:
        self._background_release(ReleaseState(key, token, body=body, nkeys=nkeys), compensation=True)

    def _release_later(self, s: ReleaseState) -> None:
        self._background_release(s)

    def _background_release(self, st: ReleaseState, compensation: bool = False) -> None:
        if self._closed or len(self._bg) >= RELEASE_QUEUE_LEN:
            log.warning("ticketing: release queue full or client closed; the lock stays held until its lease ends")
            return
        t = self._loop.create_task(self._release(st))
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

    # -------------------------------------------------------------- connect

    async def connect(self) -> None:
        """Start the connections and wait until one is up: ConnectError
        within connect_timeout, or AuthError / TLSError when every address
        refused."""
        self._ensure_started()
        deadline = time.monotonic() + self._connect_timeout
        while True:
            ev = self._changed
            if any(cn.state == UP for cn in self._conns):
                return
            cfg = self._config_error()
            if cfg is not None:
                raise cfg
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

    def _notify(self) -> None:
        ev = self._changed
        if getattr(ev, "_waiters", True):  # nobody waits: keep the event
            self._changed = asyncio.Event()
            ev.set()

    # ------------------------------------------------------------ the waits

    async def _send(self, c: Call, give_up: float, slot_give_up: float, cancel: CancelToken | None) -> None:
        if self._closed:
            raise ClientClosed("client closed")
        if self._try_enqueue(c)[0] == ENQ_OK:
            return
        c.budget = slot_give_up  # an acquire sent later carries only the wait left
        while True:
            ev = self._changed
            e = self._try_enqueue(c)[0]
            if e == ENQ_OK:
                return
            if self._closed:
                raise ClientClosed("client closed")
            d = self._wait_budget(c, e, give_up, slot_give_up)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), d)

    async def _sleep_redirect(self, d: float, known: _core.Endpoint[_AConn] | None, st: ReleaseState | None) -> None:
        if d <= 0:
            return
        end = time.monotonic() + d
        while not self._closed:
            ev = self._changed
            if st is not None and not st.woken:
                ld = self._leader
                if ld is not None and ld is not known:
                    st.woken = True
                    return
            rem = end - time.monotonic()
            if rem <= 0:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), rem)

    async def _wait_call(self, c: Call, cancel: CancelToken | None, due: float | None = None) -> bool:
        timer = None if due is None else self._loop.call_later(max(0.0, due - time.monotonic()), self._overdue, c)
        try:
            await c.waiter
        except asyncio.CancelledError:
            cn = c.conn
            abandoned = isinstance(cn, _AConn) and cn.abandon(c)
            if not abandoned and c.granted():
                # answered meanwhile: a grant that won the race is released
                self._compensate_call(c)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return True

    def _overdue(self, c: Call) -> None:
        """R2: no answer by its wait plus the answer allowance: abandon it (a
        C withdraws it, a late grant is released) and wake its caller."""
        cn = c.conn
        if isinstance(cn, _AConn) and cn.abandon(c, withdraw=True):
            c.overdue = True
            if not c.waiter.done():
                c.waiter.set_result(None)

    async def _wait_release(self, c: Call, s: ReleaseState) -> bool:
        # the window ends at s.deadline: an unanswered attempt is dropped then
        timer = self._loop.call_later(max(0.0, s.deadline - time.monotonic()), _expire, c)
        try:
            await c.waiter
        except asyncio.CancelledError:
            if c.pending or c.fail != FAIL_NONE or c.status in (_wire.ST_MOVED, _wire.ST_UNKNOWN):
                if c.pending:
                    c.owner = OWNER_DROPPED
                    s.maybe = True
                self._background_release(s)
            raise
        finally:
            timer.cancel()
        return bool(c.owner != OWNER_DROPPED)

    # ------------------------------------------------------------ operations

    async def acquire(
        self, key: Key, *, lease: Duration, wait: Duration = 0, min_remaining: Duration | None = None
    ) -> AsyncLease:
        """Acquire the lock (see Client.acquire). Cancelling the awaiting task
        withdraws a queued acquire (C) and releases a grant that won the race;
        asyncio.CancelledError propagates."""
        kb = key_bytes(key)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        mr = None if min_remaining is None else millis(min_remaining, "min_remaining") / 1000
        self._ensure_started()
        token, deadline = await self._acquire(kb, lease_ms, wait_ms, None, mr)
        return AsyncLease(self, kb, token, deadline, lease_ms)

    async def acquire_set(
        self, keys: Sequence[Key], *, lease: Duration, wait: Duration = 0, min_remaining: Duration | None = None
    ) -> AsyncLease:
        """Acquire 2..16 distinct keys at once (see Client.acquire_set)."""
        kbs = _core.set_keys(keys)
        lease_ms = millis(lease, "lease", minimum=1)
        wait_ms = millis(wait, "wait")
        mr = None if min_remaining is None else millis(min_remaining, "min_remaining") / 1000
        self._ensure_started()
        token, deadline = await self._acquire(kbs[0], lease_ms, wait_ms, None, mr, kbs)
        out = AsyncLease(self, kbs[0], token, deadline, lease_ms)
        out.keys = tuple(k.decode("utf-8") for k in kbs)
        out._body = _wire.set_body(kbs)
        return out

    async def release_set(self, keys: Sequence[Key], token: int) -> bool:
        """Release the set of keys acquired with token (see Client.release_set)."""
        kbs = _core.set_keys(keys)
        _core.release_args(kbs[0], token)
        self._ensure_started()
        await self._release(ReleaseState(kbs[0], token, body=_wire.set_body(kbs), nkeys=len(kbs)))
        return True

    async def try_acquire(self, key: Key, *, lease: Duration, wait: Duration = 0) -> AsyncLease | None:
        """acquire, but "not acquired within the wait" is None (R13)."""
        try:
            return await self.acquire(key, lease=lease, wait=wait)
        except LockTimeout:
            return None

    def lock(self, key: Key, *, lease: Duration, wait: Duration = 0) -> _AsyncLock:
        """``async with client.lock(key, lease=30, wait=10) as lease:``"""
        return _AsyncLock(self, (key, lease, wait))

    async def _release_at_exit(self, lease: AsyncLease, et: type[BaseException] | None) -> None:
        task: asyncio.Task[bool] = self._loop.create_task(self.release(lease))
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

    async def release(self, lease: LeaseBase | Key, token: int | None = None) -> bool:
        """Release a lock (see Client.release): ``await release(lease)`` or
        ``await release(key, token)``; False for a lease already released.
        When the awaiting task is cancelled, the release goes on in the
        background (for at most 5 s)."""
        st, lease_obj = _core.release_state(lease, token)
        if lease_obj is not None and lease_obj._released:
            return False
        self._ensure_started()
        await self._release(st)
        if lease_obj is not None:
            lease_obj._mark_released()
        return True

    async def ping(self) -> tuple[int, float]:
        """(server wall clock in µs since the epoch, round-trip seconds)."""
        self._ensure_started()
        return await self._ping()

    async def admin(self, cmd: str, **args: object) -> dict[str, object]:
        """An admin query (protocol.md §8); most need ``admin_token``."""
        body, read_only = _core.admin_body(cmd, args)
        self._ensure_started()
        return await self._admin(body, read_only)


def _expire(c: Call) -> None:
    """The release window ended with c unanswered: give it up."""
    if c.pending and c.owner == OWNER_CALLER:
        c.owner = OWNER_DROPPED
        if not c.waiter.done():
            c.waiter.set_result(None)


def _retrieve(bg: set[asyncio.Task[Any]]) -> Any:
    def done(t: asyncio.Task[Any]) -> None:
        bg.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("ticketing: background release failed: %s", t.exception())

    return done
