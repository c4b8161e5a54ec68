"""Failure paths of the blocking client against a scripted fake server."""

from __future__ import annotations

import datetime
import itertools
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


def test_two_connections_for_one_address(fakes: list[FakeServer]) -> None:
    f = fake(fakes)
    with ticketing.Client(f.addr):
        assert f.wait_for(lambda: len(f.conns) == 2)
        time.sleep(0.2)
        assert len(f.conns) == 2


def test_impostor_server_is_refused(fakes: list[FakeServer]) -> None:
    f = fake(fakes, token=b"s3cret", bad_proof=True)
    with pytest.raises(ticketing.AuthError):
        ticketing.Client(f.addr, token="s3cret", connect_timeout=3)


def test_reject_auth_failed(fakes: list[FakeServer]) -> None:
    f = fake(fakes, token=b"other")
    with pytest.raises(ticketing.AuthError) as ei:
        ticketing.Client(f.addr, token="s3cret", connect_timeout=3)
    assert "AUTH_FAILED" in str(ei.value)


def test_connect_error_when_nothing_listens() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    t0 = time.monotonic()
    with pytest.raises(ticketing.ConnectError):
        ticketing.Client(f"127.0.0.1:{port}", connect_timeout=0.5)
    assert time.monotonic() - t0 < 5


def test_big_token_exact_and_deadline_uses_queued(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, req: w.Request) -> None:
        if req.op == w.OP_ACQUIRE:
            fc.reply(req, w.ST_GRANTED, value=BIG, queued=625)
        else:
            fc.reply(req, w.ST_RELEASED)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        t0 = time.monotonic()
        lease = c.acquire("k", lease=datetime.timedelta(seconds=2), wait=30)
        assert lease.token == BIG
        # send time + 625 x 16 ms + lease
        assert t0 + 12.0 - 0.01 <= lease.deadline <= time.monotonic() + 12.0
        lease.release()
        assert lease.released
        rel = f.ops(w.OP_RELEASE)
        assert rel[0].arg == BIG and rel[0].key == b"k"


def test_busy_is_returned_at_once_never_retried(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: fc.reply(r, w.ST_BUSY, code=w.CODE_QUEUE_FULL))
    with ticketing.Client(f.addr) as c:
        with pytest.raises(ticketing.LockBusy) as ei:
            c.acquire("k", lease=1, wait=10)
        assert ei.value.code == w.CODE_QUEUE_FULL
        time.sleep(0.2)
        assert len(f.ops(w.OP_ACQUIRE)) == 1


def test_dropped_reply_is_indeterminate_never_retried(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: fc.close())
    with ticketing.Client(f.addr) as c:
        with pytest.raises(ticketing.Indeterminate):
            c.acquire("k", lease=1, wait=5)
        time.sleep(0.3)
        assert len(f.ops(w.OP_ACQUIRE)) == 1


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


def test_bad_input_checked_before_sending(fakes: list[FakeServer]) -> None:
    f = fake(fakes)
    with ticketing.Client(f.addr) as c:
        bad: list[dict[str, object]] = [
            {"key": "", "lease": 1},
            {"key": "x" * 251, "lease": 1},
            {"key": "a\nb", "lease": 1},
            {"key": b"\xff", "lease": 1},
            {"key": "k", "lease": 0},
            {"key": "k", "lease": -1},
            {"key": "k", "lease": 1, "wait": -0.5},
            {"key": "k", "lease": 2**32 / 1000 + 1},
            {"key": "k", "lease": datetime.timedelta(days=100)},
            {"key": "k", "lease": float("nan")},
            {"key": "k", "lease": "1"},
        ]
        for kw in bad:
            with pytest.raises(ticketing.InvalidArgument):
                c.acquire(**kw)  # type: ignore[arg-type]
        with pytest.raises(ticketing.InvalidArgument):
            c.release("k", 0)
        with pytest.raises(ticketing.InvalidArgument):
            c.release("k", 2**64)
        time.sleep(0.1)
        assert f.ops(w.OP_ACQUIRE) == [] and f.ops(w.OP_RELEASE) == []


def test_moved_is_followed_to_the_leader(fakes: list[FakeServer]) -> None:
    leader = fake(fakes)
    follower = fake(fakes, lambda fc, r: fc.reply(r, w.ST_MOVED, payload=leader.addr.encode()))
    with ticketing.Client(follower.addr) as c:
        lease = c.acquire("k", lease=1, wait=2)
        assert lease.token > 1000
        assert len(follower.ops(w.OP_ACQUIRE)) == 1 and len(leader.ops(w.OP_ACQUIRE)) == 1
        lease.release()  # goes to the known leader directly
        assert len(leader.ops(w.OP_RELEASE)) == 1 and follower.ops(w.OP_RELEASE) == []


def test_moved_hop_limit(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: fc.reply(r, w.ST_MOVED, payload=b""))
    with ticketing.Client(f.addr) as c:
        with pytest.raises(ticketing.NoLeader):
            c.acquire("k", lease=1, wait=0)
        assert len(f.ops(w.OP_ACQUIRE)) == 4  # the first try and 3 hops
        t0 = time.monotonic()
        # with a wait: backs off between rounds of hops, within the wait
        with pytest.raises((ticketing.NoLeader, ticketing.LockTimeout)):
            c.acquire("k", lease=1, wait=0.5)
        assert time.monotonic() - t0 < 3


def test_cancel_withdraws_queued_acquire(fakes: list[FakeServer]) -> None:
    queued: dict[int, FakeConn] = {}

    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE and r.wait_ms == 0:
            fc.reply(r, w.ST_GRANTED, value=3)
        elif r.op == w.OP_ACQUIRE:
            queued[r.req_id] = fc  # stays queued
        elif r.op == w.OP_CANCEL:
            fc.send(w.encode_response(w.ST_TIMEOUT, 0, 0, r.target, 0))
            fc.reply(r, w.ST_RELEASED)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        tok = ticketing.CancelToken()
        out: list[BaseException] = []

        def run() -> None:
            try:
                c.acquire("q", lease=1, wait=30, cancel=tok)
            except BaseException as e:
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert f.wait_for(lambda: len(f.ops(w.OP_ACQUIRE)) == 1)
        tok.cancel()
        t.join(5)
        assert isinstance(out[0], ticketing.Cancelled)
        assert f.wait_for(lambda: len(f.ops(w.OP_CANCEL)) == 1)
        a, cc = f.ops(w.OP_ACQUIRE)[0], f.ops(w.OP_CANCEL)[0]
        assert cc.target == a.req_id and cc.key == b"q"
        time.sleep(0.2)
        assert f.ops(w.OP_RELEASE) == []
        # the connection is still usable
        assert c.acquire("other", lease=1).token > 0


def test_cancel_compensates_a_grant_that_won_the_race(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE:
            pass  # answered when the cancel comes: G first, then N for the cancel
        elif r.op == w.OP_CANCEL:
            fc.send(w.encode_response(w.ST_GRANTED, 0, 0, r.target, BIG))
            fc.reply(r, w.ST_NOT_HOLDER)
        elif r.op == w.OP_RELEASE:
            fc.reply(r, w.ST_RELEASED)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        tok = ticketing.CancelToken()
        out: list[BaseException] = []

        def run() -> None:
            try:
                c.acquire("race", lease=5, wait=30, cancel=tok)
            except BaseException as e:
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert f.wait_for(lambda: len(f.ops(w.OP_ACQUIRE)) == 1)
        tok.cancel()
        t.join(5)
        assert isinstance(out[0], ticketing.Cancelled)
        assert f.wait_for(lambda: len(f.ops(w.OP_RELEASE)) == 1)
        r = f.ops(w.OP_RELEASE)[0]
        assert r.arg == BIG and r.key == b"race"


def test_duplicate_req_id_error_does_not_complete_the_request(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE:
            fc.reply(r, w.ST_ERROR, code=w.CODE_DUPLICATE_REQ_ID, payload=b"dup")
            fc.reply(r, w.ST_GRANTED, value=77)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        assert c.acquire("k", lease=1, wait=1).token == 77


def test_protocol_violation_ends_the_connection(fakes: list[FakeServer]) -> None:
    def h(fc: FakeConn, r: w.Request) -> None:
        fc.send(bytes([0x99]) + bytes(15))

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c, pytest.raises(ticketing.Indeterminate):
        c.acquire("k", lease=1, wait=1)


def test_release_retried_after_a_lost_connection(fakes: list[FakeServer]) -> None:
    n = {"r": 0}

    def h(fc: FakeConn, r: w.Request) -> None:
        if r.op == w.OP_ACQUIRE:
            fc.reply(r, w.ST_GRANTED, value=5)
        elif r.op == w.OP_RELEASE:
            n["r"] += 1
            if n["r"] == 1:
                fc.close()  # the first attempt is lost
            else:
                fc.reply(r, w.ST_RELEASED)

    f = fake(fakes, h)
    with ticketing.Client(f.addr) as c:
        lease = c.acquire("k", lease=1)
        lease.release()
        assert lease.released and n["r"] == 2


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


def test_release_never_answered_gives_up_after_5s(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: None)
    with ticketing.Client(f.addr) as c:
        t0 = time.monotonic()
        with pytest.raises(ticketing.Indeterminate):
            c.release("k", 9)
        el = time.monotonic() - t0
        assert 4.5 <= el <= 8


def test_reconnect_backoff_grows(fakes: list[FakeServer]) -> None:
    f = fake(fakes)
    c = ticketing.Client(f.addr)
    try:
        f.refuse = True
        for fc in list(f.conns):
            fc.close()
        assert f.wait_for(lambda: len(f.accepts) >= 2 + 8, timeout=20)
        ts = f.accepts[2:]
        gaps = [b - a for a, b in itertools.pairwise(ts)]
        # two connections back off independently: 0.05..0.1, 0.1..0.2, 0.2..0.4, ...
        assert max(gaps) < 3.3
        assert ts[-1] - ts[0] > 0.3
        # the client object survives: service resumes once the server does
        f.refuse = False
        assert c.acquire("k", lease=1, wait=8).token > 0
    finally:
        c.close()


def test_close_fails_pending_calls(fakes: list[FakeServer]) -> None:
    f = fake(fakes, lambda fc, r: None)
    c = ticketing.Client(f.addr)
    out: list[BaseException] = []

    def run() -> None:
        try:
            c.acquire("k", lease=1, wait=30)
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert f.wait_for(lambda: len(f.ops(w.OP_ACQUIRE)) == 1)
    c.close()
    t.join(5)
    assert isinstance(out[0], ticketing.ClientClosed)
    with pytest.raises(ticketing.ClientClosed):
        c.acquire("k", lease=1)


def test_lock_context_releases_on_failure(fakes: list[FakeServer]) -> None:
    f = fake(fakes)
    with ticketing.Client(f.addr) as c:
        with pytest.raises(RuntimeError), c.lock("k", lease=1) as lease:
            assert lease.token > 0
            raise RuntimeError("boom")
        assert len(f.ops(w.OP_RELEASE)) == 1
        with c.lock("k", lease=1):
            pass
        assert len(f.ops(w.OP_RELEASE)) == 2


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
