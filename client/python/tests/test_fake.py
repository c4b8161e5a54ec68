"""Failure paths of the blocking client against a scripted fake server: only
what a real server does not produce and no testkit scenario covers (U
answers, a DUPLICATE_REQ_ID error, N after a lost release attempt, client-side
max_inflight, REJECT OVERLOADED, fork). Impostor, REJECT AUTH_FAILED, garbage,
B, dropped replies, M and its hop limit, cancel and its race, release retries,
backoff, two connections, bad input and close are testkit scenarios
(client/testkit/fakes.go, scenarios.go, edge.go) run against this client's
drivers (python, python-asyncio)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from fakeserver import FakeConn, FakeServer

import ticketing
from ticketing import _wire as w

BIG = (1 << 63) + 12345  # above 2^53


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    made: list[FakeServer] = []
    yield made
    for f in made:
        f.close()


def fake(fakes: list[FakeServer], *a: object, **kw: object) -> FakeServer:
    f = FakeServer(*a, **kw)  # type: ignore[arg-type]
    fakes.append(f)
    return f


def test_unknown_outcome_u_is_indeterminate(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: fc.reply(r, w.ST_UNKNOWN, code=w.CODE_NO_QUORUM))
    with ticketing.Client(f.addr) as c, pytest.raises(ticketing.Indeterminate):
        c.acquire("k", lease=1, wait=5)


def test_server_error_is_invalid_argument_with_code(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: fc.reply(r, w.ST_ERROR, code=w.CODE_BAD_LEASE, payload=b"lease too long"))
    with ticketing.Client(f.addr) as c:
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire("k", lease=1)
        assert ei.value.code == w.CODE_BAD_LEASE and "lease too long" in str(ei.value)


def test_duplicate_req_id_error_does_not_complete_the_request(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE:
            fc.reply(r, w.ST_ERROR, code=w.CODE_DUPLICATE_REQ_ID, payload=b"dup")
            fc.reply(r, w.ST_GRANTED, value=77)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        assert c.acquire("k", lease=1, wait=1).token == 77


def test_release_not_holder_after_a_lost_attempt_is_indeterminate(fakes: list[FakeServer]) -> None:
    n = {"r": 0}

    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_RELEASE:
            n["r"] += 1
            if n["r"] == 1:
                fc.close()
            else:
                fc.reply(r, w.ST_NOT_HOLDER)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        with pytest.raises(ticketing.Indeterminate):
            c.release("k", 9)
        with pytest.raises(ticketing.NotHolder):
            c.release("k", 9)


def test_max_inflight_waits_client_side(fakes: list[FakeServer]) -> None:
    held: list[tuple[FakeConn, w.Request]] = []

    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE and r.wait_ms > 0:
            held.append((fc, r))
        else:
            fc.reply(r, w.ST_RELEASED if r.op != w.OP_ACQUIRE else w.ST_GRANTED, value=1)

    f = fake(fakes, h, max_inflight=1)
    with ticketing.Client(f.addr) as c:
        errs: list[BaseException] = []

        def run() -> None:
            try:
                c.acquire("k", lease=1, wait=0.5)
            except BaseException as e:
                errs.append(e)

        ts = [threading.Thread(target=run) for _ in range(3)]
        for t in ts:
            t.start()
        time.sleep(1.5)
        # 2 connections x max_inflight 1: the third waits client-side and times out
        assert len(f.ops(w.OP_ACQUIRE)) == 2
        assert len(errs) == 1 and isinstance(errs[0], ticketing.LockTimeout)
    for t in ts:
        t.join(5)
    assert len(errs) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork_child_reconnects(fakes: list[FakeServer]) -> None:
    f = fake(fakes)
    with ticketing.Client(f.addr) as c:
        c.acquire("p", lease=1)
        assert f.wait_for(lambda: len(f.conns) == 2)
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                os.close(r)
                c.acquire("child", lease=1)
                code = 0
            finally:
                os.write(wfd, b"%d" % code)
                os._exit(code)
        os.close(wfd)
        _, status = os.waitpid(pid, 0)
        assert os.read(r, 10) == b"0" and status == 0
        os.close(r)
        # the child made connections of its own; the parent's still work
        assert len(f.conns) >= 3
        assert c.acquire("parent", lease=1).token > 0


def test_reject_overloaded_is_busy_and_garbage_hello_is_connect(fakes: list[FakeServer]) -> None:
    f = fake(fakes, reject=w.CODE_OVERLOADED)
    with pytest.raises(ticketing.LockBusy) as ei:
        ticketing.Client(f.addr, connect_timeout=0.5)
    assert ei.value.code == w.CODE_OVERLOADED
    import socket

    ls = socket.create_server(("127.0.0.1", 0))
    port = ls.getsockname()[1]

    def garbage() -> None:
        while True:
            try:
                s, _ = ls.accept()
            except OSError:
                return
            s.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(20))
            s.close()

    threading.Thread(target=garbage, daemon=True).start()
    try:
        with pytest.raises(ticketing.ConnectError) as ce:
            ticketing.Client(f"127.0.0.1:{port}", connect_timeout=0.5)
        assert "HELLO" in str(ce.value) or "not a ticketing" in str(ce.value)
    finally:
        ls.close()
