from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

GOLDEN = HERE.parent.parent / "wire" / "testdata" / "golden"


@dataclass
class Server:
    addr: str
    proc: subprocess.Popen[bytes]
    token: str | None = None
    ca: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def server_bin() -> str:
    b = os.environ.get("TICKETING_BIN") or str(HERE.parent.parent.parent / "bin" / "ticketing")
    if not os.access(b, os.X_OK):
        pytest.fail(f"server binary {b} missing: set TICKETING_BIN")
    return b


def start_server(*args: str, token: str | None = None, tmp: str | None = None) -> Server:
    cmd = [server_bin(), "serve", "--listen", "127.0.0.1:0", *args]
    if token:
        assert tmp
        tf = os.path.join(tmp, "token")
        with open(tf, "w") as f:
            f.write(token)
        cmd += ["--token-file", tf]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    addr = None
    lines: list[str] = []
    for raw in proc.stderr:
        line = raw.decode(errors="replace")
        lines.append(line)
        m = re.search(r"msg=serving addr=(\S+)", line)
        if m:
            addr = m.group(1)
            break
    if addr is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("server did not start: " + "".join(lines))
    stderr = proc.stderr
    threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
    return Server(addr, proc, token)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = start_server()
    yield s
    s.stop()


def free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def cluster() -> Iterator[list[Server]]:
    """A fresh 3-node cluster (client ports from the OS; peer ports from the OS, reserved just before)."""
    peers = ",".join(f"n{i + 1}=127.0.0.1:{p}" for i, p in enumerate(free_ports(3)))
    nodes: list[Server] = []
    try:
        for pp in peers.split(","):
            nid, paddr = pp.split("=")
            raft = ["--raft-heartbeat-timeout", "100ms", "--raft-election-timeout", "100ms"]
            raft += ["--raft-leader-lease-timeout", "100ms"]
            nodes.append(start_server("--node-id", nid, "--peer-listen", paddr, "--peers", peers, "--bootstrap", *raft))
            nodes[-1].extra["id"] = nid
        yield nodes
    finally:
        for s in nodes:
            s.stop()
