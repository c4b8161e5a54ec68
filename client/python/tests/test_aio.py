"""The asyncio client: failure paths against the fake server, and the real server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from conftest import Server
from fakeserver import FakeConn, FakeServer

import ticketing
from ticketing import _wire as w

T = TypeVar("T")
BIG = (1 << 64) - 2


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    made: list[FakeServer] = []
    yield made
    for f in made:
        f.close()


def fake(fakes: list[FakeServer], *a: Any, **kw: Any) -> FakeServer:
    f = FakeServer(*a, **kw)
    fakes.append(f)
    return f


def test_basic_and_big_token(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE:
            fc.reply(r, w.ST_GRANTED, value=BIG, queued=10)
        else:
            fc.reply(r, w.ST_RELEASED)

    f = fake(fakes, h)

    async def main() -> None:
        async with ticketing.AsyncClient(f.addr) as c:
            t0 = time.monotonic()
            lease = await c.acquire("k", lease=1, wait=1)
            assert lease.token == BIG
            assert lease.deadline >= t0 + 1 + 10 * 0.016 - 0.001
            await lease.release()
            assert lease.released
        assert f.ops(w.OP_RELEASE)[0].arg == BIG
        assert len(f.conns) == 2

    run(main())


def test_impostor_and_reject(fakes: list[FakeServer]) -> None:
    imp = fake(fakes, token=b"s3cret", bad_proof=True)
    rej = fake(fakes, reject=w.CODE_AUTH_FAILED)

    async def main() -> None:
        with pytest.raises(ticketing.AuthError):
            async with ticketing.AsyncClient(imp.addr, token="s3cret", connect_timeout=3):
                pass
        with pytest.raises(ticketing.AuthError):
            async with ticketing.AsyncClient(rej.addr, token="x", connect_timeout=3):
                pass

    run(main())


def test_busy_and_dropped_reply(fakes: list[FakeServer]) -> None:
    busy = fake(fakes, lambda fc, r: fc.reply(r, w.ST_BUSY, code=w.CODE_OVERLOADED))
    drop = fake(fakes, lambda fc, r: fc.close())

    async def main() -> None:
        async with ticketing.AsyncClient(busy.addr) as c:
            with pytest.raises(ticketing.LockBusy) as ei:
                await c.acquire("k", lease=1, wait=5)
            assert ei.value.code == w.CODE_OVERLOADED
        async with ticketing.AsyncClient(drop.addr) as c:
            with pytest.raises(ticketing.Indeterminate):
                await c.acquire("k", lease=1, wait=5)
        await asyncio.sleep(0.2)
        assert len(busy.ops(w.OP_ACQUIRE)) == 1 and len(drop.ops(w.OP_ACQUIRE)) == 1

    run(main())


def test_moved_followed(fakes: list[FakeServer]) -> None:
    leader = fake(fakes)
    follower = fake(fakes, lambda fc, r: fc.reply(r, w.ST_MOVED, payload=leader.addr.encode()))
    loop_srv = fake(fakes, lambda fc, r: fc.reply(r, w.ST_MOVED))

    async def main() -> None:
        async with ticketing.AsyncClient(follower.addr) as c:
            lease = await c.acquire("k", lease=1, wait=2)
            await lease.release()
        assert len(leader.ops(w.OP_ACQUIRE)) == 1 and len(leader.ops(w.OP_RELEASE)) == 1
        async with ticketing.AsyncClient(loop_srv.addr) as c:
            with pytest.raises(ticketing.NoLeader):
                await c.acquire("k", lease=1)
        assert len(loop_srv.ops(w.OP_ACQUIRE)) == 4

    run(main())


def test_cancel_sends_c_and_compensates(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_CANCEL:
            if r.key == b"race":  # the grant won the race: G, then N for the cancel
                fc.send(w.encode_response(w.ST_GRANTED, 0, 0, r.target, 99))
                fc.reply(r, w.ST_NOT_HOLDER)
            else:
                fc.send(w.encode_response(w.ST_TIMEOUT, 0, 0, r.target, 0))
                fc.reply(r, w.ST_RELEASED)
        elif r.op == w.OP_RELEASE:
            fc.reply(r, w.ST_RELEASED)

    f = fake(fakes, h)

    async def main() -> None:
        async with ticketing.AsyncClient(f.addr) as c:
            for key in ("queued", "race"):
                t = asyncio.create_task(c.acquire(key, lease=5, wait=30))
                await asyncio.sleep(0.2)
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
            for _ in range(100):
                if len(f.ops(w.OP_RELEASE)) == 1:
                    break
                await asyncio.sleep(0.05)
        cancels = f.ops(w.OP_CANCEL)
        acqs = f.ops(w.OP_ACQUIRE)
        assert [x.key for x in cancels] == [b"queued", b"race"]
        assert [x.target for x in cancels] == [a.req_id for a in acqs]
        rel = f.ops(w.OP_RELEASE)
        assert len(rel) == 1 and rel[0].arg == 99 and rel[0].key == b"race"

    run(main())


def test_release_in_async_with_survives_cancellation(fakes: list[FakeServer]) -> None:
    f = fake(fakes)

    async def main() -> None:
        async with ticketing.AsyncClient(f.addr) as c:
            entered = asyncio.Event()

            async def body() -> None:
                async with c.lock("k", lease=5):
                    entered.set()
                    await asyncio.sleep(30)

            t = asyncio.create_task(body())
            await entered.wait()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert len(f.ops(w.OP_RELEASE)) == 1
            with pytest.raises(ZeroDivisionError):
                async with c.lock("k", lease=5):
                    1 / 0  # noqa: B018
            assert len(f.ops(w.OP_RELEASE)) == 2

    run(main())


def test_never_blocks_the_loop(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: None)  # never answers

    async def main() -> None:
        async with ticketing.AsyncClient(f.addr) as c:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tt = asyncio.create_task(ticker())
            with pytest.raises(ticketing.Indeterminate):
                await c.release("k", 5)  # 5 s of unanswered attempts
            tt.cancel()
            assert ticks > 100

    run(main())


def test_close_fails_pending(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: None)

    async def main() -> None:
        c = ticketing.AsyncClient(f.addr)
        await c.connect()
        t = asyncio.create_task(c.acquire("k", lease=1, wait=30))
        await asyncio.sleep(0.2)
        await c.close()
        with pytest.raises(ticketing.ClientClosed):
            await t
        with pytest.raises(ticketing.ClientClosed):
            await c.acquire("k", lease=1)

    run(main())


def test_bad_input(fakes: list[FakeServer]) -> None:
    f = fake(fakes)

    async def main() -> None:
        async with ticketing.AsyncClient(f.addr) as c:
            for kw in ({"key": "", "lease": 1}, {"key": "k", "lease": 0}, {"key": "k", "lease": 1, "wait": -1}):
                with pytest.raises(ticketing.InvalidArgument):
                    await c.acquire(**kw)  # type: ignore[arg-type]
        assert f.ops(w.OP_ACQUIRE) == []

    run(main())


# ----------------------------------------------------------------- real server


def test_real_server(server: Server) -> None:
    key = f"py/aio/{uuid.uuid4().hex[:8]}"

    async def depth(adm: ticketing.AsyncClient) -> int:
        rep = await adm.admin("locks", prefix=key)
        locks = rep["locks"]
        assert isinstance(locks, list)
        return sum(int(x["queue_depth"]) for x in locks if x["key"] == key)

    async def main() -> None:
        async with (
            ticketing.AsyncClient(server.addr) as c,
            ticketing.AsyncClient(server.addr, admin_token="") as adm,
        ):
            holder = await c.acquire(key, lease=10)
            assert await c.try_acquire(key, lease=1) is None
            waiters = [asyncio.create_task(c.acquire(key, lease=5, wait=20)) for _ in range(50)]
            for _ in range(100):
                if await depth(adm) == 50:
                    break
                await asyncio.sleep(0.05)
            assert await depth(adm) == 50
            for t in waiters[25:]:
                t.cancel()
            await asyncio.gather(*waiters[25:], return_exceptions=True)
            for _ in range(100):
                if await depth(adm) == 25:
                    break
                await asyncio.sleep(0.05)
            assert await depth(adm) == 25
            await holder.release()
            toks = []
            for fut in asyncio.as_completed(waiters[:25]):
                lease = await fut
                toks.append(lease.token)
                await lease.release()
            assert toks == sorted(toks) and toks[0] > holder.token
            async with c.lock(key, lease=5, wait=1) as lease:
                assert lease.remaining() > 4
            assert lease.released

    run(main())


def test_real_server_tls(tls_server: Server) -> None:
    import ssl

    assert tls_server.ca
    ctx = ssl.create_default_context(cafile=tls_server.ca)

    async def main() -> None:
        async with ticketing.AsyncClient(tls_server.addr, tls=ctx) as c:
            lease = await c.acquire(f"py/aio-tls/{uuid.uuid4().hex[:8]}", lease=1)
            await lease.release()
        with pytest.raises(ticketing.TLSError):
            async with ticketing.AsyncClient(tls_server.addr, tls=True, connect_timeout=2):
                pass

    run(main())


def test_real_server_token(token_server: Server) -> None:
    async def main() -> None:
        async with ticketing.AsyncClient(token_server.addr, token=token_server.token) as c:
            assert (await c.ping())[0] > 0
        with pytest.raises(ticketing.AuthError):
            async with ticketing.AsyncClient(token_server.addr, token="nope", connect_timeout=2):
                pass

    run(main())


def test_new_event_loop_and_fork_reconnect(fakes: list[FakeServer]) -> None:
    import os

    f = fake(fakes)
    c = ticketing.AsyncClient(f.addr)

    async def use() -> int:
        lease = await c.acquire("k", lease=1, wait=1)
        await lease.release()
        return lease.token

    assert run(use()) > 0
    assert run(use()) > 0  # a second asyncio.run: a new loop, new connections
    assert f.wait_for(lambda: len(f.conns) >= 4)
    if hasattr(os, "fork"):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if run(use()) > 0 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert status == 0
    assert run(use()) > 0
    asyncio.run(c.close())
