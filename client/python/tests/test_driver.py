"""The testkit drivers (blocking and asyncio) against the real server."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Server

TESTKIT = Path(__file__).resolve().parent.parent / "testkit"


class Driver:
    def __init__(self, name: str) -> None:
        self.p = subprocess.Popen(
            [str(TESTKIT / name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.results: dict[int, dict[str, Any]] = {}

    def send(self, **cmd: Any) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def result(self, cid: int) -> dict[str, Any]:
        assert self.p.stdout is not None
        while cid not in self.results:
            line = self.p.stdout.readline()
            assert line, "driver exited"
            r = json.loads(line)
            assert r["id"] not in self.results, "answered twice"
            self.results[r["id"]] = r
        return self.results[cid]

    def close(self) -> int:
        assert self.p.stdin is not None
        self.p.stdin.close()
        return self.p.wait(15)


@pytest.mark.parametrize("name", ["driver", "driver-asyncio"])
def test_driver(server: Server, name: str) -> None:
    key = f"py/driver/{uuid.uuid4().hex[:8]}"
    d = Driver(name)
    try:
        d.send(id=1, cmd="info")
        assert d.result(1)["language"] == {"driver": "python", "driver-asyncio": "python-asyncio"}[name]
        d.send(id=2, cmd="connect", addrs=[server.addr], token=None, tls=None)
        assert d.result(2) == {"id": 2, "ok": True}
        d.send(id=3, cmd="acquire", key=key, lease_ms=5000, wait_ms=0)
        r3 = d.result(3)
        assert r3["ok"] and int(r3["token"]) > 2**53 and 4000 < r3["deadline_in_ms"] <= 5000
        d.send(id=4, cmd="acquire", key=key, lease_ms=5000, wait_ms=0)
        assert d.result(4)["error"] == "timeout"
        d.send(id=5, cmd="acquire", key=key, lease_ms=5000, wait_ms=20000)
        time.sleep(0.3)
        d.send(id=6, cmd="cancel", target=5)
        assert d.result(6)["ok"]
        assert d.result(5)["error"] == "cancelled"
        d.send(id=7, cmd="release", key=key, token=r3["token"])
        assert d.result(7)["ok"]
        d.send(id=8, cmd="release", key=key, token=r3["token"])
        assert d.result(8)["error"] == "not_holder"
        d.send(id=9, cmd="with_lock", key=key, lease_ms=5000, wait_ms=1000, hold_ms=50, fail=True)
        assert d.result(9)["ok"]
        d.send(id=10, cmd="acquire", key_hex="ff", lease_ms=1000, wait_ms=0)
        assert d.result(10)["error"] == "invalid"
        d.send(id=11, cmd="acquire", key=key, lease_ms=5000, wait_ms=0)
        assert d.result(11)["ok"]  # with_lock released
        d.send(id=12, cmd="acquire", key=key, lease_ms=5000, wait_ms=20000)
        time.sleep(0.3)
        d.send(id=13, cmd="close")
        assert d.result(13)["ok"]
        assert d.result(12)["error"] in ("closed", "indeterminate")
    finally:
        assert d.close() == 0
