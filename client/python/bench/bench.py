"""Acquire+release pairs through one client object against $TICKETING_ADDR
(token $TICKETING_TOKEN), $BENCH_SECONDS each: blocking client with 64
threads and 1 thread, asyncio client with 64 tasks and 1 task. Caller i
uses key bench/python/<i>. One BENCH line per configuration."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import ticketing

ADDR = os.environ["TICKETING_ADDR"]
TOKEN = os.environ.get("TICKETING_TOKEN") or None
SECONDS = float(os.environ.get("BENCH_SECONDS") or 5)


def report(api: str, callers: int, pairs: int, secs: float) -> None:
    line = {
        "lang": "python",
        "api": api,
        "callers": callers,
        "pairs": pairs,
        "seconds": round(secs, 3),
        "pairs_per_sec": round(pairs / secs, 1),
    }
    print("BENCH " + json.dumps(line, separators=(",", ":")), flush=True)


def bench_blocking(callers: int) -> None:
    with ticketing.Client(ADDR, token=TOKEN) as c:
        counts = [0] * callers
        start = threading.Event()
        end = 0.0

        def run(i: int) -> None:
            key = f"bench/python/{i}"
            start.wait()
            n = 0
            while time.monotonic() < end:
                c.acquire(key, lease=10, wait=5).release()
                n += 1
            counts[i] = n

        ts = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
        for t in ts:
            t.start()
        t0 = time.monotonic()
        end = t0 + SECONDS
        start.set()
        for t in ts:
            t.join()
        report("blocking", callers, sum(counts), time.monotonic() - t0)


async def bench_asyncio(callers: int) -> None:
    async with ticketing.AsyncClient(ADDR, token=TOKEN) as c:
        t0 = time.monotonic()
        end = t0 + SECONDS

        async def run(i: int) -> int:
            key = f"bench/python/{i}"
            n = 0
            while time.monotonic() < end:
                lease = await c.acquire(key, lease=10, wait=5)
                await lease.release()
                n += 1
            return n

        counts = await asyncio.gather(*(run(i) for i in range(callers)))
        report("asyncio", callers, sum(counts), time.monotonic() - t0)


def main() -> None:
    bench_blocking(64)
    bench_blocking(1)
    asyncio.run(bench_asyncio(64))
    asyncio.run(bench_asyncio(1))


if __name__ == "__main__":
    main()
