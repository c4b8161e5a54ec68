"""Testkit driver for the blocking Python client (shared/design/testkit.md).

Reads commands (JSON lines) on stdin, runs each in its own thread against the
one Client made by ``connect``, and writes each result as one JSON line on
stdout, in completion order. ``cancel`` uses the client's CancelToken."""

from __future__ import annotations

import json
import platform
import ssl
import sys
import threading
import time
from typing import Any

import ticketing

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error_result(cid: Any, e: BaseException) -> dict[str, Any]:
    kinds: list[tuple[type[BaseException], str]] = [
        (ticketing.ClientClosed, "closed"),
        (ticketing.LockTimeout, "timeout"),
        (ticketing.LockBusy, "busy"),
        (ticketing.Indeterminate, "indeterminate"),
        (ticketing.NotHolder, "not_holder"),
        (ticketing.InvalidArgument, "invalid"),
        (ticketing.AuthError, "auth"),
        (ticketing.TLSError, "tls"),
        (ticketing.ConnectError, "connect"),
        (ticketing.Cancelled, "cancelled"),
        (ticketing.ProtocolError, "protocol"),
        (ticketing.InsufficientLease, "insufficient_lease"),
        (_Unsupported, "unsupported"),
        (ticketing.NotSupported, "unsupported"),
    ]
    if isinstance(e, ticketing.NoLeader):
        # as the Go driver: no leader within the hop limit and the wait = busy NO_QUORUM
        return {"id": cid, "ok": False, "error": "busy", "code": 5, "message": str(e)}
    kind = "internal"
    for t, k in kinds:
        if isinstance(e, t):
            kind = k
            break
    r: dict[str, Any] = {"id": cid, "ok": False, "error": kind, "message": str(e) or type(e).__name__}
    code = getattr(e, "code", None)
    if isinstance(code, int):
        r["code"] = code
    return r


def make_tls(spec: dict[str, Any] | None) -> tuple[ssl.SSLContext | None, str | None]:
    if not spec:
        return None, None
    ctx = ssl.create_default_context(cafile=spec.get("ca") or None)
    if spec.get("cert"):
        ctx.load_cert_chain(spec["cert"], spec.get("key") or None)
    return ctx, spec.get("server_name") or None


class Driver:
    def __init__(self) -> None:
        self.client: ticketing.Client | None = None
        self.lock = threading.Lock()
        self.cancels: dict[int, ticketing.CancelToken] = {}
        self.threads: list[threading.Thread] = []
        self.control: threading.Thread | None = None
        self.leases: dict[str, ticketing.Lease] = {}  # by token: release_lease, lease_ending
        self.exiting = threading.Event()  # stdin ended: open scopes end (R10)

    def key(self, cmd: dict[str, Any]) -> str | bytes:
        if "key_hex" in cmd and cmd["key_hex"] is not None:
            return bytes.fromhex(cmd["key_hex"])
        return str(cmd["key"])

    def need(self) -> ticketing.Client:
        c = self.client
        if c is None:
            raise ticketing.ClientClosed("not connected")
        return c

    def run(self, cmd: dict[str, Any], after: threading.Thread | None) -> None:
        if after is not None:
            after.join()  # a connect or close sent before this command
        cid = cmd.get("id")
        name = cmd.get("cmd")
        try:
            res = getattr(self, "cmd_" + str(name))(cmd)
            out = {"id": cid, "ok": True}
            out.update(res)
            emit(out)
        except AttributeError as e:
            if name is None or not hasattr(self, "cmd_" + str(name)):
                emit({"id": cid, "ok": False, "error": "internal", "message": f"unknown cmd {name!r}"})
            else:
                emit(error_result(cid, e) | {"message": repr(e)})
        except BaseException as e:
            emit(error_result(cid, e))
        finally:
            with self.lock:
                self.cancels.pop(cid, None)  # type: ignore[arg-type]

    def cmd_connect(self, cmd: dict[str, Any]) -> dict[str, Any]:
        old, self.client = self.client, None
        if old is not None:
            old.close()
        ctx, server_name = make_tls(cmd.get("tls"))
        timeout_ms = cmd.get("connect_timeout_ms")
        allowance_ms = cmd.get("answer_allowance_ms")
        self.client = ticketing.Client(
            list(cmd["addrs"]),
            token=cmd.get("token") or None,
            tls=ctx,
            server_name=server_name,
            connect_timeout=(timeout_ms / 1000) if timeout_ms else 5.0,
            answer_allowance=allowance_ms / 1000 if allowance_ms else 3.0,
            label=cmd.get("label"),
        )
        return {}

    def cmd_acquire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        tok = self.cancels[cmd["id"]]
        mr = cmd.get("min_remaining_ms")
        lease = c.acquire(
            self.key(cmd),
            lease=_secs(cmd["lease_ms"]),
            wait=_secs(cmd.get("wait_ms", 0)),
            cancel=tok,
            min_remaining=None if mr is None else _secs(mr),
        )
        self.leases[str(lease.token)] = lease
        return {"token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    def cmd_try_acquire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        tok = self.cancels[cmd["id"]]
        k = self.key(cmd)
        lease = c.try_acquire(k, lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0)), cancel=tok)
        if lease is None:
            return {"acquired": False}
        self.leases[str(lease.token)] = lease
        return {"acquired": True, "token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    def lease_of(self, cmd: dict[str, Any]) -> ticketing.Lease:
        lease = self.leases.get(str(cmd["token"]))
        if lease is None:
            raise ticketing.InvalidArgument(f"no lease with token {cmd['token']} acquired by this driver")
        return lease

    def cmd_release_lease(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = self.lease_of(cmd)
        self.need()
        return {"already": not lease.release()}

    def cmd_lease_ending(self, cmd: dict[str, Any]) -> dict[str, Any]:
        lease = self.lease_of(cmd)
        lease.ending(_secs(cmd.get("margin_ms", 0))).wait()
        return {"remaining_ms": int(lease.remaining() * 1000)}

    def cmd_acquire_set(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        tok = self.cancels[cmd["id"]]
        keys = list(cmd["keys"])
        lease = c.acquire_set(keys, lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0)), cancel=tok)
        self.leases[str(lease.token)] = lease
        return {"token": str(lease.token), "deadline_in_ms": int(lease.remaining() * 1000)}

    def cmd_release_set(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.need().release_set(list(cmd["keys"]), int(cmd["token"]))
        return {}

    def cmd_release(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.need().release(self.key(cmd), int(cmd["token"]))
        return {}

    def cmd_with_lock(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.need()
        token = 0
        try:
            tok = self.cancels[cmd["id"]]
            scope = c.lock(self.key(cmd), lease=_secs(cmd["lease_ms"]), wait=_secs(cmd.get("wait_ms", 0)), cancel=tok)
            with scope as lease:
                token = lease.token
                self.exiting.wait(cmd.get("hold_ms", 0) / 1000)  # the program's exit ends the hold (R10)
                if cmd.get("fail"):
                    raise _Deliberate("with_lock failing on purpose")
        except _Deliberate:
            pass
        return {"token": str(token)}

    def cmd_cancel(self, cmd: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            tok = self.cancels.get(cmd["target"])
        if tok is not None:
            tok.cancel()
        return {}

    def cmd_close(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self.client
        if c is not None:
            c.close()
        return {}

    def cmd_info(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return {
            "language": "python",
            "client_version": ticketing.__version__,
            "runtime": f"{platform.python_implementation()} {platform.python_version()}",
        }

    def main(self) -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                cmd = json.loads(line)
            except ValueError as e:
                print(f"driver: bad line: {e}", file=sys.stderr)
                continue
            if cmd.get("cmd") in ("acquire", "try_acquire", "with_lock", "acquire_set"):
                with self.lock:
                    self.cancels[cmd.get("id")] = ticketing.CancelToken()
            # connect and close act on the one client: later commands start
            # after them (but stdin keeps being read)
            t = threading.Thread(target=self.run, args=(cmd, self.control), daemon=True)
            if cmd.get("cmd") in ("connect", "close"):
                self.control = t
            self.threads = [x for x in self.threads if x.is_alive()]
            self.threads.append(t)
            t.start()
        # EOF ends the program: open scopes end (their leases are released,
        # R10), pending acquires are withdrawn, then the client closes
        self.exiting.set()
        with self.lock:
            for tok in self.cancels.values():
                tok.cancel()
        deadline = time.monotonic() + 6
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        c = self.client
        if c is not None:
            c.close()


class _Deliberate(Exception):
    pass


class _Unsupported(Exception):
    """The client lacks the feature (testkit.md: error kind unsupported)."""


def _secs(ms: Any) -> float:
    """Milliseconds from the runner as seconds; the client checks the range."""
    return float(ms) / 1000 if isinstance(ms, (int, float)) and not isinstance(ms, bool) else ms


if __name__ == "__main__":
    Driver().main()
