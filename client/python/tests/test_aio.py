"""The asyncio client's own behaviour (cancellation inside a scope, never
blocking the loop, new event loops and fork). Its failure paths and the real
server's scenarios are testkit scenarios run against the python-asyncio
driver."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from fakeserver import FakeServer

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
