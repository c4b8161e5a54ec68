"""The blocking client against the real server ($TICKETING_BIN serve)."""

from __future__ import annotations

import ssl
import threading
import time
import uuid

import pytest
from conftest import Server

import ticketing


def k(name: str) -> str:
    return f"py/{name}/{uuid.uuid4().hex[:8]}"


def queue_depth(srv: Server, key: str) -> int:
    with ticketing.Client(srv.addr, admin_token=srv.token or "") as adm:
        rep = adm.admin("locks", prefix=key)
        locks = rep["locks"]
        assert isinstance(locks, list)
        return sum(int(x["queue_depth"]) for x in locks if x["key"] == key)


def test_acquire_release_and_wait0(server: Server) -> None:
    key = k("basic")
    with ticketing.Client(server.addr) as c:
        lease = c.acquire(key, lease=5)
        assert lease.key == key and lease.token > 2**53
        assert 4.5 < lease.remaining() <= 5
        with pytest.raises(ticketing.LockTimeout):
            c.acquire(key, lease=5)
        assert c.try_acquire(key, lease=5) is None
        lease.release()
        assert lease.released
        assert lease.release() is False  # R6: a second release of the lease object is a no-op
        l2 = c.acquire(key, lease=5)
        assert l2.token > lease.token
        c.release(key, l2.token)  # by key and token, as another process would


def test_fifo_and_handoff(server: Server) -> None:
    key = k("fifo")
    with ticketing.Client(server.addr) as c:
        first = c.acquire(key, lease=10)
        got: list[tuple[int, int]] = []
        lock = threading.Lock()

        def waiter(i: int) -> None:
            lease = c.acquire(key, lease=10, wait=20)
            with lock:
                got.append((i, lease.token))
            lease.release()

        ts = []
        for i in range(5):
            t = threading.Thread(target=waiter, args=(i,))
            t.start()
            ts.append(t)
            deadline = time.monotonic() + 5
            while queue_depth(server, key) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
        first.release()
        for t in ts:
            t.join(20)
        assert [i for i, _ in got] == list(range(5))
        toks = [t for _, t in got]
        assert toks == sorted(toks) and toks[0] > first.token


def test_lease_expiry_hands_off(server: Server) -> None:
    key = k("expiry")
    with ticketing.Client(server.addr) as c:
        first = c.acquire(key, lease=0.3)
        t0 = time.monotonic()
        second = c.acquire(key, lease=5, wait=5)
        assert time.monotonic() - t0 >= 0.2
        assert second.token > first.token
        # the deadline after a queue wait counts the queued time
        assert second.deadline >= t0 + 5 + 0.2
        with pytest.raises(ticketing.NotHolder):
            first.release()
        second.release()


def test_cancel_withdraws_and_queue_drains(server: Server) -> None:
    key = k("cancel")
    with ticketing.Client(server.addr) as c:
        holder = c.acquire(key, lease=10)
        tok = ticketing.CancelToken()
        out: list[BaseException] = []

        def run() -> None:
            try:
                c.acquire(key, lease=5, wait=20, cancel=tok)
            except BaseException as e:
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 5
        while queue_depth(server, key) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert queue_depth(server, key) == 1
        tok.cancel()
        t.join(5)
        assert isinstance(out[0], ticketing.Cancelled)
        deadline = time.monotonic() + 5
        while queue_depth(server, key) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert queue_depth(server, key) == 0
        holder.release()
        # the key is free: the withdrawn acquire was never granted
        c.acquire(key, lease=1).release()


def test_hundred_in_flight(server: Server) -> None:
    key = k("many")
    with ticketing.Client(server.addr) as c:
        holder = c.acquire(key, lease=10)
        errs: list[BaseException] = []
        done: list[int] = []

        def run() -> None:
            try:
                lease = c.acquire(key, lease=5, wait=30)
                done.append(lease.token)
                lease.release()
            except BaseException as e:
                errs.append(e)

        ts = [threading.Thread(target=run) for _ in range(100)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 10
        while queue_depth(server, key) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue_depth(server, key) == 100
        holder.release()
        for t in ts:
            t.join(30)
        assert not errs and len(done) == 100 and len(set(done)) == 100


def test_with_lock(server: Server) -> None:
    key = k("with")
    with ticketing.Client(server.addr) as c:
        with c.lock(key, lease=5, wait=1) as lease:
            assert c.try_acquire(key, lease=1) is None
        assert lease.released
        with pytest.raises(ValueError), c.lock(key, lease=5) as lease:
            raise ValueError("x")
        assert lease.released
        c.acquire(key, lease=1).release()


def test_server_limits_come_back_typed(server: Server) -> None:
    with ticketing.Client(server.addr) as c:
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("limits"), lease=7200)  # above the default max_lease 1 h
        assert ei.value.code == 22
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("limits"), lease=1, wait=3600)  # above max_wait 15 min
        assert ei.value.code == 23


def test_token_auth(token_server: Server) -> None:
    with ticketing.Client(token_server.addr, token=token_server.token) as c:
        c.acquire(k("tok"), lease=1).release()
        srv_time, rtt = c.ping()
        assert srv_time > 1_600_000_000_000_000 and rtt >= 0
    with pytest.raises(ticketing.AuthError):
        ticketing.Client(token_server.addr, token="wrong", connect_timeout=2)
    with pytest.raises(ticketing.AuthError):
        ticketing.Client(token_server.addr, connect_timeout=2)


def test_tls(tls_server: Server) -> None:
    assert tls_server.ca
    ctx = ssl.create_default_context(cafile=tls_server.ca)
    with ticketing.Client(tls_server.addr, tls=ctx) as c:
        c.acquire(k("tls"), lease=1).release()
        assert c.ping()[0] > 0
    with pytest.raises(ticketing.TLSError):
        ticketing.Client(tls_server.addr, tls=ssl.create_default_context(), connect_timeout=2)
    with pytest.raises(ticketing.TLSError, match="requires TLS"):  # R5: the server's TLS_REQUIRED hint
        ticketing.Client(tls_server.addr, connect_timeout=5)  # plaintext to a TLS server


def test_mutual_tls(mtls_server: Server) -> None:
    f = mtls_server.extra
    ctx = ssl.create_default_context(cafile=f["ca"])
    ctx.load_cert_chain(f["client_cert"], f["client_key"])
    with ticketing.Client(mtls_server.addr, tls=ctx) as c:
        c.acquire(k("mtls"), lease=1).release()
    no_cert = ssl.create_default_context(cafile=f["ca"])
    with pytest.raises(ticketing.TLSError):
        ticketing.Client(mtls_server.addr, tls=no_cert, connect_timeout=2)
