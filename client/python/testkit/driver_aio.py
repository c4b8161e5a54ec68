"""Testkit driver for the asyncio Python client (shared/design/testkit.md).

The same lines as testkit/driver.py, run as tasks on one event loop against
one AsyncClient; ``cancel`` cancels the target's task."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from typing import Any

from driver import _Deliberate, _secs, emit, error_result, make_tls

import ticketing


class AioDriver:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.client: ticketing.AsyncClient | None = None
        self.tasks: dict[Any, asyncio.Task[None]] = {}
        self.control: asyncio.Task[None] | None = None
        self.leases: dict[str, ticketing.AsyncLease] = {}
        self.scopes: set[asyncio.Task[None]] = set()  # with_lock tasks: they end by themselves at exit
        self.exiting = asyncio.Event()  # stdin ended: open scopes end (R10)

    def key(self, cmd: dict[str, Any]) -> str | bytes:
        if cmd.get("key_hex") is not None:
            return bytes.fromhex(cmd["key_hex"])
        return str(cmd["key"])

    def need(self) -> ticketing.AsyncClient:
        if self.client is None:
            raise ticketing.ClientClosed("not connected")
        return self.client

    def dispatch(self, cmd: dict[str, Any]) -> None:
        after = self.control
        t = self.loop.create_task(self.run(cmd, after))
        if cmd.get("cmd") in ("connect", "close"):
            self.control = t
        cid = cmd.get("id")
        self.tasks[cid] = t
        if cmd.get("cmd") == "with_lock":
            self.scopes.add(t)
            t.add_done_callback(self.scopes.discard)
        t.add_done_callback(lambda _t: self.tasks.pop(cid, None))

    async def run(self, cmd: dict[str, Any], after: asyncio.Task[None] | None) -> None:
        if after is not None:
            await asyncio.wait([after])
        cid = cmd.get("id")
        name = str(cmd.get("cmd"))
        fn = getattr(self, "cmd_" + name, None)
        if fn is None:
            emit({"id": cid, "ok": False, "error": "internal", "message": f"unknown cmd {name!r}"})
            return
        try:
            res = await fn(cmd)
            emit({"id": cid, "ok": True, **res})
        except asyncio.CancelledError:
            emit({"id": cid, "ok": False, "error": "cancelled", "message": "cancelled"})
        except BaseException as e:
            emit(error_result(cid, e))

    async def cmd_connect(self, cmd: dict[str, Any]) -> dict[str, Any]:
        old, self.client = self.client, None
        if old is not None:
            await old.close()
        ctx, server_name = make_tls(cmd.get("tls"))
        timeout_ms = cmd.get("connect_timeout_ms")
        allowance_ms = cmd.get("answer_allowance_ms")
        c = ticketing.AsyncClient(
            list(cmd["addrs"]),
            token=cmd.get("token") or None,
            tls=ctx,
            server_name=server_name,
            connect_timeout=(timeout_ms / 1000) if timeout_ms else 5.0,
            answer_allowance=allowance_ms / 1000 if allowance_ms else 3.0,
            label=cmd.get("label"),
        )
        try:
            await c.connect()
        except BaseException:
            await c.close()
            raise
        self.client = c
        return {}

    async def cmd_acquire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        mr = cmd.get("min_remaining_ms")
        lease = await self.need().acquire(
            self.key(cmd),
            lease=_secs(cmd["lease_ms"]),
            wait=_secs(cmd.get("wait_ms", 0)),
            min_remaining=None if mr is None else _secs(mr),
        )
        self.leases[str(lease.token)] = lease
        return {"token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    async def cmd_try_acquire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = await self.need().try_acquire(
            self.key(cmd), lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0))
        )
        if lease is None:
            return {"acquired": False}
        self.leases[str(lease.token)] = lease
        return {"acquired": True, "token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    def lease_of(self, cmd: dict[str, Any]) -> ticketing.AsyncLease:
        lease = self.leases.get(str(cmd["token"]))
        if lease is None:
            raise ticketing.InvalidArgument(f"no lease with token {cmd['token']} acquired by this driver")
        return lease

    async def cmd_release_lease(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = self.lease_of(cmd)
        self.need()
        return {"already": not await lease.release()}

    async def cmd_lease_ending(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = self.lease_of(cmd)
        await lease.ending(_secs(cmd.get("margin_ms", 0))).wait()
        return {"remaining_ms": int(lease.remaining() * 1000)}

    async def cmd_acquire_set(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = await self.need().acquire_set(
            list(cmd["keys"]), lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0))
        )
        self.leases[str(lease.token)] = lease
        return {"token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    async def cmd_release_set(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.need().release_set(list(cmd["keys"]), int(cmd["token"]))
        return {}

    async def cmd_release(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.need().release(self.key(cmd), int(cmd["token"]))
        return {}

    async def cmd_with_lock(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        token = 0
        try:
            async with c.lock(self.key(cmd), lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0))) as lease:
                token = lease.token
                with contextlib.suppress(asyncio.TimeoutError):  # the program's exit ends the hold (R10)
                    await asyncio.wait_for(self.exiting.wait(), cmd.get("hold_ms", 0) / 1000)
                if cmd.get("fail"):
                    raise _Deliberate("with_lock failing on purpose")
        except _Deliberate:
            pass
        return {"token": str(token)}

    async def cmd_cancel(self, cmd: dict[str, Any]) -> dict[str, Any]:
        t = self.tasks.get(cmd["target"])
        if t is not None:
            t.cancel()
        return {}

    async def cmd_close(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if self.client is not None:
            await self.client.close()
        return {}

    async def cmd_info(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import platform

        return {
            "language": "python-asyncio",
            "client_version": ticketing.__version__,
            "runtime": f"{platform.python_implementation()} {platform.python_version()} asyncio",
        }


async def main() -> None:
    loop = asyncio.get_running_loop()
    d = AioDriver(loop)
    eof = asyncio.Event()

    def reader() -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                cmd = json.loads(line)
            except ValueError as e:
                print(f"driver: bad line: {e}", file=sys.stderr)
                continue
            loop.call_soon_threadsafe(d.dispatch, cmd)
        loop.call_soon_threadsafe(eof.set)

    threading.Thread(target=reader, daemon=True).start()
    await eof.wait()
    # EOF ends the program: open scopes end (R10), pending acquires are
    # cancelled (withdrawn), then the client closes
    d.exiting.set()
    pending = [t for t in d.tasks.values() if not t.done()]
    for t in pending:
        if t is not d.control and t not in d.scopes:
            t.cancel()
    if pending:
        await asyncio.wait(pending, timeout=6)
    if d.client is not None:
        await d.client.close()


if __name__ == "__main__":
    asyncio.run(main())
