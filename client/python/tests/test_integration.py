"""The blocking client against the real server ($TICKETING_BIN serve): what is
its own. Acquire, wait 0, FIFO, expiry, cancel, 100 in flight, the scoped form,
tokens and TLS are testkit scenarios run against this client's drivers."""

from __future__ import annotations

import uuid

import pytest
from conftest import Server

import ticketing


def k(name: str) -> str:
    return f"py/{name}/{uuid.uuid4().hex[:8]}"


def queue_depth(srv: Server, key: str) -> int:
    with ticketing.Client(srv.addr, admin_token=srv.token or "") as adm:
        rep = adm.admin("locks", prefix=key)
        locks = rep["locks"]
        assert isinstance(locks, list)
        return sum(int(x["queue_depth"]) for x in locks if x["key"] == key)


def test_server_limits_come_back_typed(server: Server) -> None:
    with ticketing.Client(server.addr) as c:
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("limits"), lease=7200)  # above the default max_lease 1 h
        assert ei.value.code == 22
        with pytest.raises(ticketing.InvalidArgument) as ei:
            c.acquire(k("limits"), lease=1, wait=3600)  # above max_wait 15 min
        assert ei.value.code == 23
