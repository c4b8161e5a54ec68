"""Issue 32 finding 7 (Python) and key sets in the client's own terms (its
errors' classes and messages, its scope objects). The edge rules R1-R16 are
testkit scenarios run against this client's drivers."""

from __future__ import annotations

import asyncio
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
