"""Issue 32 findings 7 (Python) and the edge rules R6, R7, R15 in the
client's own terms (its errors' classes and messages, its scope objects)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest
from conftest import Server, start_server

import ticketing


def k(name: str) -> str:
    return f"py/findings/{name}/{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def short_lease_server() -> Iterator[Server]:
    s = start_server("--max-lease", "2s", "--max-wait", "3s")
    yield s
    s.stop()


def test_timeout_and_connect_errors_are_the_builtins(server: Server) -> None:
    assert issubclass(ticketing.LockTimeout, TimeoutError)
    assert issubclass(ticketing.ConnectError, ConnectionError)
    assert issubclass(ticketing.NoLeader, ConnectionError)
    key = k("builtin")
    with ticketing.Client(server.addr) as c, c.lock(key, lease=5):
        with pytest.raises(TimeoutError) as ei:
            c.acquire(key, lease=5, wait=0)
        assert isinstance(ei.value, ticketing.LockTimeout)
    with pytest.raises(ConnectionError):
        ticketing.Client("127.0.0.1:1", connect_timeout=0.5)


def test_lock_object_is_reusable_one_scope_at_a_time(server: Server) -> None:
    key = k("reuse")
    with ticketing.Client(server.addr) as c:
        scope = c.lock(key, lease=5, wait=1)
        with scope as first:
            pass
        with scope as second:  # used to raise AttributeError
            assert second.token > first.token
            with pytest.raises(RuntimeError, match="has not exited"), scope:
                pass
        assert first.released and second.released

        async def main() -> None:
            async with ticketing.AsyncClient(server.addr) as ac:
                s2 = ac.lock(key, lease=5, wait=1)
                async with s2 as a:
                    pass
                async with s2 as b:
                    assert b.token > a.token

        asyncio.run(main())


@pytest.mark.parametrize(
    "addr",
    [
        "http://127.0.0.1:7470",
        "https://locks:7470",
        "127.0.0.1:7470/",
        "tcp://[::1]:7470",
        "::1:7470",
        "host name:7470",
    ],
)
def test_an_address_that_is_not_host_port_is_refused_at_once(addr: str) -> None:
    # InvalidArgument (not ConnectError after the connect timeout): nothing was dialled
    with pytest.raises(ticketing.InvalidArgument, match=r"not host:port|bad host"):
        ticketing.Client(addr, connect_timeout=30)
    with pytest.raises(ticketing.InvalidArgument):
        ticketing.AsyncClient(addr)


def test_bad_lease_and_bad_wait_name_the_value_and_the_limit(short_lease_server: Server) -> None:
    with ticketing.Client(short_lease_server.addr) as c:
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("lease"), lease=5)
        e = ei.value
        assert e.code == 22 and e.code_name == "BAD_LEASE"
        assert "5000 ms" in str(e) and "--max-lease" in str(e), str(e)
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("wait"), lease=1, wait=10)
        assert ei.value.code == 23 and "10000 ms" in str(ei.value) and "--max-wait" in str(ei.value)


def test_errors_name_the_key_and_the_server_R15(server: Server) -> None:
    key = k("where")
    with ticketing.Client(server.addr) as c:
        lease = c.acquire(key, lease=5)
        with pytest.raises(ticketing.LockTimeout) as ei:
            c.acquire(key, lease=5)
        assert repr(key) in str(ei.value) and server.addr in str(ei.value)
        c.release(lease)
        with pytest.raises(ticketing.NotHolder) as en:
            c.release(key, lease.token)
        assert repr(key) in str(en.value) and server.addr in str(en.value)
        assert str(en.value).count("not the holder") == 1


def test_second_release_of_a_lease_is_a_noop_R6(server: Server) -> None:
    key = k("twice")
    with ticketing.Client(server.addr) as c:
        lease = c.acquire(key, lease=5)
        assert lease.release() is True
        assert lease.release() is False  # nothing sent, no NotHolder
        assert c.release(lease) is False
        with c.lock(key, lease=5) as l2:
            l2.release()  # early release; the scope's exit is then a no-op
        with pytest.raises(ticketing.NotHolder):
            c.release(key, l2.token)  # release(key, token) of a lock not held stays N


def test_closed_client_fails_at_once_with_closed_R7(server: Server) -> None:
    c = ticketing.Client(server.addr)
    lease = c.acquire(k("closed"), lease=5)
    c.close()
    for call in (lambda: c.acquire(k("x"), lease=1), lambda: c.release(lease), lambda: c.ping()):
        with pytest.raises(ticketing.ClientClosed) as ei:
            call()
        assert not isinstance(ei.value, ticketing.Indeterminate)

    async def main() -> None:
        ac = ticketing.AsyncClient(server.addr)
        await ac.connect()
        al = await ac.acquire(k("aclosed"), lease=5)
        await ac.close()
        with pytest.raises(ticketing.ClientClosed) as ei:
            await ac.release(al)
        assert not isinstance(ei.value, ticketing.Indeterminate)
        with pytest.raises(ticketing.ClientClosed):
            await ac.connect()

    asyncio.run(main())


def test_silent_server_ends_indeterminate_and_withdraws_R2() -> None:
    from fakeserver import FakeServer

    from ticketing import _wire as w

    f = FakeServer(lambda fc, r: None)  # answers nothing
    try:
        with ticketing.Client(f.addr, answer_allowance=0.4) as c:
            with pytest.raises(ticketing.Indeterminate, match="answer allowance"):
                c.acquire("silent", lease=5, wait=0.3)
            assert f.wait_for(lambda: len(f.ops(w.OP_CANCEL)) >= 1), "no C withdrew the unanswered acquire"

        async def main() -> None:
            async with ticketing.AsyncClient(f.addr, answer_allowance=0.4) as ac:
                with pytest.raises(ticketing.Indeterminate, match="answer allowance"):
                    await ac.acquire("silent2", lease=5, wait=0)

        asyncio.run(main())
        assert f.wait_for(lambda: len(f.ops(w.OP_CANCEL)) >= 2)
    finally:
        f.close()


def test_lease_ending_try_acquire_and_min_remaining_R12_R13_R14(server: Server) -> None:
    key = k("ending")
    with ticketing.Client(server.addr) as c:
        lease = c.acquire(key, lease=1.0)
        ev = lease.ending(0.5)
        assert ev.wait(5) and 0.2 < lease.remaining() <= 0.6
        assert c.try_acquire(key, lease=1, wait=0.1) is None  # R13: a value, not LockTimeout
        lease.release()
        assert lease.ending(0.5).is_set()  # after release: at once, never an error
        with pytest.raises(ticketing.InsufficientLease):  # R14
            c.acquire(key, lease=1, min_remaining=2)
        assert c.try_acquire(key, lease=1) is not None  # it was released at once


def test_connection_label_is_visible_in_locks(server: Server) -> None:
    key = k("label")
    with ticketing.Client(server.addr, app_name="billing") as c, c.lock(key, lease=5):
        with ticketing.Client(server.addr, admin_token="") as adm:
            rows = adm.admin("locks", prefix=key)["locks"]
        assert isinstance(rows, list) and rows
        holder = rows[0].get("holder") or {}
        assert isinstance(holder, dict)
        label = str(holder.get("label", ""))
        assert label.startswith("billing ") and f"/{os.getpid()} python/" in label, rows


def test_key_sets_one_token_all_or_nothing(server: Server) -> None:
    a, b = k("set-a"), k("set-b")
    with ticketing.Client(server.addr) as c, ticketing.Client(server.addr) as d:
        single = c.acquire(b, lease=10)
        with pytest.raises(ticketing.LockTimeout):
            d.acquire_set([a, b], lease=5, wait=0)  # b is held: not a, not b
        la = d.try_acquire(a, lease=1)  # a stayed free
        assert la is not None
        la.release()
        single.release()
        s = d.acquire_set([a, b], lease=5)
        assert s.keys == (a, b) and s.token > single.token
        with pytest.raises(ticketing.LockTimeout):
            c.acquire(a, lease=1)
        assert d.release(s) is True and d.release(s) is False
        with pytest.raises(ticketing.InvalidArgument, match="distinct"):
            d.acquire_set([a, a], lease=1)
        with pytest.raises(ticketing.InvalidArgument, match=r"2\.\.16"):
            d.acquire_set([a], lease=1)

        async def main() -> None:
            async with ticketing.AsyncClient(server.addr) as ac:
                sl = await ac.acquire_set([a, b], lease=5, wait=1)
                assert await ac.release_set([a, b], sl.token)

        asyncio.run(main())
