"""Argument checks and the lease handle."""

from __future__ import annotations

import datetime
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ticketing
from ticketing import _common as c
from ticketing import _wire as w


def test_millis() -> None:
    assert c.millis(1.1, "x") == 1100
    assert c.millis(0.0001, "x") == 1  # rounded up
    assert c.millis(3, "x") == 3000
    assert c.millis(datetime.timedelta(microseconds=1500), "x") == 2
    assert c.millis(datetime.timedelta(hours=1), "x") == 3_600_000
    assert c.millis(0, "x") == 0
    assert c.millis(w.MAX_U32 / 1000, "x") == w.MAX_U32
    for bad in (-1, -0.001, float("inf"), float("nan"), True, "1", None, datetime.timedelta(seconds=-1)):
        with pytest.raises(ticketing.InvalidArgument):
            c.millis(bad, "x")  # type: ignore[arg-type]
    with pytest.raises(ticketing.InvalidArgument):
        c.millis(0, "lease", minimum=1)
    with pytest.raises(ticketing.InvalidArgument):
        c.millis(w.MAX_U32 / 1000 + 0.001, "x")


@given(st.floats(min_value=0, max_value=4_000_000, allow_nan=False))
def test_millis_never_rounds_down(s: float) -> None:
    ms = c.millis(s, "x")
    assert ms * 1000 >= round(s * 1_000_000)


def test_keys() -> None:
    assert c.key_bytes("clé") == "clé".encode()
    assert c.key_bytes(b"raw") == b"raw"
    for bad in ("", "x" * 251, "\x00", "\ud800", b"\xff", 5):
        with pytest.raises(ticketing.InvalidArgument):
            c.key_bytes(bad)  # type: ignore[arg-type]


def test_addresses() -> None:
    assert c.split_addr("127.0.0.1:7470") == ("127.0.0.1", 7470)
    assert c.split_addr("[::1]:7470") == ("::1", 7470)
    for bad in ("nohost", ":1", "h:", "h:0", "h:70000", "h:x"):
        with pytest.raises(ticketing.InvalidArgument):
            c.split_addr(bad)


def test_backoff_schedule() -> None:
    assert [c.backoff_step(0.1, 3.2, n) for n in range(1, 9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2, 3.2]
    for n in range(1, 10):
        d = c.reconnect_delay(n)
        step = c.backoff_step(0.1, 3.2, n)
        assert 0 <= d <= step  # full jitter (R16)


def test_lease_handle() -> None:
    lease = c.LeaseBase(b"k", 2**63 + 1, time.monotonic() + 10, 10_000)
    assert lease.key == "k" and lease.token == 2**63 + 1
    assert 9 < lease.remaining() <= 10
    assert not lease.expired() and lease.expired(margin=11) and lease.expired(datetime.timedelta(seconds=11))
    assert not lease.released
    assert "token=9223372036854775809" in repr(lease)


def test_cancel_token() -> None:
    tok = ticketing.CancelToken()
    hits: list[int] = []
    assert tok._add(lambda: hits.append(1))
    tok.cancel()
    tok.cancel()
    assert tok.cancelled and hits == [1]
    assert not tok._add(lambda: hits.append(2))
