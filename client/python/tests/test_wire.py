"""The codec against the golden vectors (read from client/wire/testdata/golden)
and a property test of the response decoder."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import GOLDEN
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketing import _wire as w

SN = bytes(range(32))
CN = bytes(range(0x20, 0x40))
TOK = b"s3cret"
T0 = 1700000000000 << 20


def load(name: str) -> bytes:
    text = (GOLDEN / name).read_text()
    hexdigits = re.sub(r"\s+", "", "".join(line.split("#", 1)[0] for line in text.splitlines()))
    return bytes.fromhex(hexdigits)


RESPONSES: dict[str, tuple[int, int, int, int, int, bytes]] = {
    "resp_granted.hex": (w.ST_GRANTED, 0, 0, 1, T0 + 1, b""),
    "resp_granted_queued.hex": (w.ST_GRANTED, 0, 625, 0xCAFEBABE, T0 + 7, b""),
    "resp_timeout.hex": (w.ST_TIMEOUT, 0, 0, 2, 0, b""),
    "resp_released.hex": (w.ST_RELEASED, 0, 0, 3, 0, b""),
    "resp_not_holder.hex": (w.ST_NOT_HOLDER, 0, 0, 4, 0, b""),
    "resp_busy_queue_full.hex": (w.ST_BUSY, 1, 0, 7, 0, b""),
    "resp_busy_overloaded.hex": (w.ST_BUSY, 2, 0, 8, 0, b""),
    "resp_busy_clock_unhealthy.hex": (w.ST_BUSY, 3, 0, 9, 0, b""),
    "resp_busy_shutting_down.hex": (w.ST_BUSY, 4, 0, 10, 0, b""),
    "resp_busy_no_quorum.hex": (w.ST_BUSY, 5, 0, 11, 0, b""),
    "resp_moved.hex": (w.ST_MOVED, 0, 0, 1, 13, b"10.0.0.2:7001"),
    "resp_moved_empty.hex": (w.ST_MOVED, 0, 0, 2, 0, b""),
    "resp_unknown.hex": (w.ST_UNKNOWN, 0, 0, 12, 0, b""),
    "resp_unknown_no_quorum.hex": (w.ST_UNKNOWN, 5, 0, 13, 0, b""),
    "resp_error.hex": (w.ST_ERROR, 21, 0, 14, 22, b"key is not valid UTF-8"),
    "resp_error_empty.hex": (w.ST_ERROR, 27, 0, 6, 0, b""),
    "resp_pong.hex": (w.ST_PONG, 0, 0, 5, 1700000000123456, b""),
    "resp_admin.hex": (w.ST_ADMIN, 0, 0, 6, 28, b'{"unix_us":1700000000123456}'),
}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_golden_response(name: str) -> None:
    b = load(name)
    resp, n = w.decode_response(b)
    assert n == len(b)
    assert resp == w.Response(*RESPONSES[name])
    st_, code, queued, rid, value, payload = RESPONSES[name]
    assert w.encode_response(st_, code, queued, rid, value, payload) == b


REQUESTS: dict[str, tuple[bytes, Any]] = {
    "req_acquire.hex": (w.encode_acquire(1, b"orders/42", 30000, 5000), (w.OP_ACQUIRE, 1, 30000, 5000, b"orders/42")),
    "req_acquire_try.hex": (w.encode_acquire(2, b"job", 3600000, 0), (w.OP_ACQUIRE, 2, 3600000, 0, b"job")),
    "req_acquire_utf8.hex": (
        w.encode_acquire(0xCAFEBABE, "clé/🔒".encode(), 1000, 900000),
        (w.OP_ACQUIRE, 0xCAFEBABE, 1000, 900000, "clé/🔒".encode()),
    ),
    "req_release.hex": (w.encode_release(3, b"orders/42", T0 + 5), (w.OP_RELEASE, 3, None, None, b"orders/42")),
    "req_cancel.hex": (w.encode_cancel(4, b"orders/42", 1), (w.OP_CANCEL, 4, 1, 0, b"orders/42")),
    "req_ping.hex": (w.encode_ping(5), (w.OP_PING, 5, 0, 0, b"")),
    "req_query.hex": (w.encode_query(6, b'{"cmd":"status"}'), (w.OP_QUERY, 6, 16, 0, b'{"cmd":"status"}')),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_golden_request(name: str) -> None:
    b = load(name)
    enc, (op, rid, hi, lo, key) = REQUESTS[name]
    assert enc == b
    req, n = w.decode_request(b)
    assert req is not None and n == len(b)
    assert (req.op, req.req_id, req.flags, req.key) == (op, rid, 0, key)
    if hi is not None:
        assert (req.arg >> 32, req.arg & 0xFFFFFFFF) == (hi, lo)
    if op == w.OP_RELEASE:
        assert req.arg == T0 + 5


def test_golden_streams_one_byte_at_a_time() -> None:
    stream = b"".join(load(n) for n in sorted(RESPONSES))
    dec = w.ResponseDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == [w.Response(*RESPONSES[n]) for n in sorted(RESPONSES)]
    assert dec.buffered == 0


PROOFS = {
    (1, TOK): ("d03723db0123b92b963ece17bd565e22a20c83111a3f85edf58dccaa35803c53", "e94c7d11336444c0ef61a5d49b4ee48cde23aa199140b5465cd814135bfd8d26"),  # noqa: E501
    (2, TOK): ("7e1eb206739883bc728c108b4949fcf9f9983df9a9ab03730a624fc254a95f32", "b29ef082dd676d4336b216087d8c278ecc41e2a8fb7c060011bfd50c0a7072c8"),  # noqa: E501
    (3, TOK): ("e166d8948c9a183155eb86ed1b7dd5ec38c62fb89f2110912a09089c0cb15c86", "524bc7767b892d1a8e8f2122060ee877a5f09f942c7d55205715bad828b298fe"),  # noqa: E501
    (1, b""): ("3f254cd489df59393fef2fc0274fe44ea1d52dd8e97baec56852bad0a97ce125", "cc68ef2a00058607dc4b12b6dfd1ff2134fbb33fb6a349b3ac299bdc32851538"),  # noqa: E501
}  # fmt: skip


@pytest.mark.parametrize(
    "name,role,token",
    [
        ("auth_client.hex", 1, TOK),
        ("auth_admin.hex", 2, TOK),
        ("auth_peer.hex", 3, TOK),
        ("auth_client_notoken.hex", 1, b""),
    ],
)
def test_golden_auth(name: str, role: int, token: bytes) -> None:
    b = load(name)
    a = w.decode_auth(b)
    assert (a.role, a.nonce) == (role, CN)
    proof = w.client_proof(token, role, SN, CN)
    assert proof.hex() == PROOFS[(role, token)][0] == a.proof.hex()
    assert w.encode_auth(role, CN, proof) == b


@pytest.mark.parametrize(
    "name,role,token,mi",
    [
        ("welcome_client.hex", 1, TOK, 1024),
        ("welcome_admin.hex", 2, TOK, 1024),
        ("welcome_peer.hex", 3, TOK, 1),
        ("welcome_client_notoken.hex", 1, b"", 1024),
    ],
)
def test_golden_welcome(name: str, role: int, token: bytes, mi: int) -> None:
    b = load(name)
    wl = w.decode_welcome(b)
    assert wl.accepted and wl.code == 0 and wl.max_inflight == mi
    proof = w.server_proof(token, role, CN, SN)
    assert proof.hex() == PROOFS[(role, token)][1] == wl.proof.hex()
    assert w.encode_welcome(w.WELCOME_ACCEPTED, 0, mi, proof) == b


@pytest.mark.parametrize(
    "name,code",
    [
        ("reject_overloaded.hex", 2),
        ("reject_shutting_down.hex", 4),
        ("reject_bad_handshake.hex", 10),
        ("reject_auth_failed.hex", 11),
    ],
)
def test_golden_reject(name: str, code: int) -> None:
    b = load(name)
    wl = w.decode_welcome(b)
    assert not wl.accepted and wl.code == code and wl.max_inflight == 0 and wl.proof == bytes(32)
    assert w.encode_welcome(w.WELCOME_REJECTED, code, 0, bytes(32)) == b


@pytest.mark.parametrize("name,flags", [("hello_flags0.hex", 0), ("hello_flags1.hex", 1)])
def test_golden_hello(name: str, flags: int) -> None:
    b = load(name)
    h = w.decode_hello(b)
    assert h == w.Hello(flags, SN)
    assert h.tokens_configured == bool(flags)
    assert w.encode_hello(flags, SN) == b


def test_every_golden_file_is_covered() -> None:
    names = {p.name for p in GOLDEN.glob("*.hex")}
    covered = set(RESPONSES) | set(REQUESTS)
    covered |= {"auth_client.hex", "auth_admin.hex", "auth_peer.hex", "auth_client_notoken.hex"}
    covered |= {"welcome_client.hex", "welcome_admin.hex", "welcome_peer.hex", "welcome_client_notoken.hex"}
    covered |= {
        "reject_overloaded.hex",
        "reject_shutting_down.hex",
        "reject_bad_handshake.hex",
        "reject_auth_failed.hex",
    }
    covered |= {"hello_flags0.hex", "hello_flags1.hex"}
    assert names == covered


def test_valid_key() -> None:
    assert w.valid_key(b"a")
    assert w.valid_key("clé/🔒".encode())
    assert w.valid_key(b"x" * 250)
    for bad in [
        b"",
        b"x" * 251,
        b"a\x00",
        b"\x7f",
        "a\u0085".encode(),
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\xf4\x90\x80\x80",
        b"\x80",
        b"\xe2\x82",
    ]:
        assert not w.valid_key(bad), bad


# ------------------------------------------------------------------ property

frames = st.builds(
    lambda s, code, q, rid, v, p: w.encode_response(s, code, q, rid, v, p if s in w.PAYLOAD_LIMIT else b""),
    st.sampled_from(sorted(w.STATUSES)),
    st.integers(0, 255),
    st.integers(0, 65535),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=255),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=20), st.lists(st.integers(1, 64), min_size=1, max_size=50))
def test_decoder_any_split(fr: list[bytes], cuts: list[int]) -> None:
    """Valid frames decode to the same responses however the stream is cut."""
    stream = b"".join(fr)
    whole = w.ResponseDecoder().feed(stream)
    assert len(whole) == len(fr)
    dec = w.ResponseDecoder()
    got: list[w.Response] = []
    i = 0
    k = 0
    while i < len(stream):
        n = cuts[k % len(cuts)]
        got += dec.feed(stream[i : i + n])
        i += n
        k += 1
    assert got == whole
    for r, f in zip(whole, fr, strict=True):
        assert w.encode_response(*r) == f


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2048))
def test_decoder_never_crashes(data: bytes) -> None:
    """Arbitrary bytes: responses, or a WireError; never another exception,
    and never more buffered than one frame's limit."""
    dec = w.ResponseDecoder()
    try:
        for r in dec.feed(data):
            assert r.status in w.STATUSES
            assert len(r.payload) <= w.PAYLOAD_LIMIT.get(r.status, 0)
    except w.WireError:
        return
    assert dec.buffered <= w.HEADER_LEN + w.MAX_ADMIN_REPLY
    assert dec.buffered < w.HEADER_LEN or w.response_frame_len(bytes(data[-dec.buffered :])) > dec.buffered


@given(st.binary(min_size=16, max_size=16))
def test_header_lengths_are_bounded(h: bytes) -> None:
    try:
        n = w.response_frame_len(h)
    except w.WireError:
        return
    assert w.HEADER_LEN <= n <= w.HEADER_LEN + w.MAX_ADMIN_REPLY


def load11(name: str) -> bytes:
    return load("v1_1/" + name)


def test_golden_v1_1_feature_ping_label_and_their_answers() -> None:
    assert w.encode_ping(9, w.PING_FEATURES) == load11("req_ping_features.hex")
    assert w.encode_label(0x0D, b"web-1/4242 go/1.1.0") == load11("req_label.hex")
    pong, n = w.decode_response(load11("resp_pong_features.hex"))
    assert pong is not None and n == 16 and pong.status == w.ST_PONG and pong.req_id == 9
    assert pong.queued == w.FEATURE_KEY_SETS | w.FEATURE_LABELS | w.FEATURE_TLS_HINT
    ok, _ = w.decode_response(load11("resp_label_ok.hex"))
    assert ok is not None and ok.status == w.ST_RELEASED and w.fits(w.OP_LABEL, ok.status)
    bad, _ = w.decode_response(load11("resp_error_bad_label.hex"))
    assert bad is not None and bad.status == w.ST_ERROR and w.code_name(bad.code) == "BAD_LABEL"
    rej = load11("reject_tls_required.hex")
    assert rej[0] == 0x45 and rej[1] == w.CODE_TLS_REQUIRED and len(rej) == w.HELLO_LEN


def test_labels_are_cut_at_a_character_boundary() -> None:
    assert w.cut_label("é" * 40) == ("é" * 32).encode()  # 64 bytes, never half a character
    assert len(w.cut_label("a" * 100)) == w.MAX_LABEL
    assert w.cut_label("a\nb") == b"a?b"


def test_golden_v1_1_key_sets() -> None:
    body = w.set_body([b"acct/17", b"acct/42"])
    assert w.encode_acquire_set(0x0A, 2, body, 30000, 5000) == load11("req_acquire_set.hex")
    assert w.encode_release_set(0x0B, 2, body, 0x18BCFE5680000009) == load11("req_release_set.hex")
    bad, _ = w.decode_response(load11("resp_error_bad_keyset.hex"))
    assert bad is not None and w.code_name(bad.code) == "BAD_KEYSET" and bad.payload == b"duplicate key in set"
    assert w.fits(w.OP_ACQUIRE_SET, w.ST_GRANTED) and w.fits(w.OP_RELEASE_SET, w.ST_NOT_HOLDER)
