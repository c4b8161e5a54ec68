"""Testkit driver for the asyncio Python client (shared/design/testkit.md).

The same lines as testkit/driver.py, run as tasks on one event loop against
one AsyncClient; ``cancel`` cancels the target's task."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from driver import _Deliberate, emit, error_result, make_tls

import ticketing


class AioDriver:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.client: ticketing.AsyncClient | None = None
        self.tasks: dict[Any, asyncio.Task[None]] = {}
        self.control: asyncio.Task[None] | None = None

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
        c = ticketing.AsyncClient(
            list(cmd["addrs"]),
            token=cmd.get("token") or None,
            tls=ctx,
            server_name=server_name,
            connect_timeout=(timeout_ms / 1000) if timeout_ms else 5.0,
        )
        try:
            await c.connect()
        except BaseException:
            await c.close()
            raise
        self.client = c
        return {}

    async def cmd_acquire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = await self.need().acquire(
            self.key(cmd), lease=cmd["lease_ms"] / 1000, wait=cmd.get("wait_ms", 0) / 1000
        )
        return {"token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    async def cmd_release(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.need().release(self.key(cmd), int(cmd["token"]))
        return {}

    async def cmd_with_lock(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        token = 0
        try:
            async with c.lock(self.key(cmd), lease=cmd["lease_ms"] / 1000, wait=cmd.get("wait_ms", 0) / 1000) as lease:
                token = lease.token
                await asyncio.sleep(cmd.get("hold_ms", 0) / 1000)
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
    if d.client is not None:
        await d.client.close()
    pending = [t for t in d.tasks.values() if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=6)


if __name__ == "__main__":
    asyncio.run(main())
