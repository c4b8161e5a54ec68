"""The blocking and asyncio clients against a real 3-node cluster: M followed
to the leader (an address learned from M), and a leader failover."""

from __future__ import annotations

import asyncio
import time

from conftest import Server

import ticketing


def leader_of(nodes: list[Server], timeout: float = 20) -> Server:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in nodes:
            if s.proc.poll() is not None:
                continue
            try:
                with ticketing.Client(s.addr, admin_token="", connect_timeout=1) as adm:
                    if adm.admin("status").get("role") == "leader":
                        return s
            except ticketing.TicketingError:
                pass
        time.sleep(0.1)
    raise AssertionError("no leader")


def test_cluster_follow_and_failover(cluster: list[Server]) -> None:
    leader = leader_of(cluster)
    followers = [s for s in cluster if s is not leader]
    # only followers given: the client learns the leader's address from M
    with ticketing.Client([s.addr for s in followers]) as c:
        lease = c.acquire("py/cluster/a", lease=5, wait=5)
        lease.release()
    with ticketing.Client([s.addr for s in cluster]) as c:
        first = c.acquire("py/cluster/b", lease=5, wait=5)
        first.release()
        leader.proc.kill()
        leader.proc.wait()
        ok = 0
        deadline = time.monotonic() + 20
        last: BaseException | None = None
        while ok < 20 and time.monotonic() < deadline:
            try:
                lease = c.acquire("py/cluster/b", lease=5, wait=5)
                assert lease.token > first.token
                lease.release()
                ok += 1
            except (ticketing.Indeterminate, ticketing.LockBusy, ticketing.ConnectError, ticketing.LockTimeout) as e:
                last = e
                time.sleep(0.05)
        assert ok == 20, last

    async def main() -> None:
        async with ticketing.AsyncClient([s.addr for s in followers]) as ac:
            lease = await ac.acquire("py/cluster/c", lease=5, wait=10)
            await lease.release()

    asyncio.run(asyncio.wait_for(main(), 30))
