"""The Ticketing v1 wire codec (docs/protocol.md): frames, constants, proofs.

Every integer is unsigned big-endian. Decoders read fixed offsets and check
framing only; they never trust a length beyond the protocol's limits, so
nothing from the network can grow a buffer without bound.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from typing import NamedTuple

HELLO_LEN = 40
AUTH_LEN = 72
WELCOME_LEN = 40
HEADER_LEN = 16
NONCE_LEN = 32
PROOF_LEN = 32

MAX_KEY_LEN = 250
MAX_ADMIN_BODY = 65536
MAX_MOVED_PAYLOAD = 255
MAX_ERROR_PAYLOAD = 1024
MAX_ADMIN_REPLY = 16 << 20
MAX_U32 = 0xFFFFFFFF
MAX_U64 = 0xFFFFFFFFFFFFFFFF

VERSION = 1
HELLO_FLAG_TOKENS = 0x01
QUEUED_UNIT = 0.016  # seconds per unit of the G header's queued field

HELLO_MAGIC = b"TKTS"

# Protocol 1.1 (protocol.md §12)
OP_LABEL = 0x4C  # 'L'
OP_ACQUIRE_SET = 0x53  # 'S' (§12.2)
OP_RELEASE_SET = 0x58  # 'X'
MAX_SET_KEYS = 16
PING_FEATURES = 1  # a ping's arg asking for the feature bits (§12.1)
FEATURE_KEY_SETS = 0x0001
FEATURE_LABELS = 0x0002
FEATURE_TLS_HINT = 0x0004
MAX_LABEL = 64
CODE_TLS_REQUIRED = 12
CODE_BAD_KEYSET = 29
CODE_BAD_LABEL = 30
AUTH_MAGIC = b"TKTC"

ROLE_CLIENT = 1
ROLE_ADMIN = 2
ROLE_PEER = 3

OP_ACQUIRE = 0x41  # 'A'
OP_RELEASE = 0x52  # 'R'
OP_CANCEL = 0x43  # 'C'
OP_PING = 0x50  # 'P'
OP_QUERY = 0x51  # 'Q'
OPS = frozenset((OP_ACQUIRE, OP_RELEASE, OP_CANCEL, OP_PING, OP_QUERY))

ST_GRANTED = 0x47  # 'G'
ST_TIMEOUT = 0x54  # 'T'
ST_BUSY = 0x42  # 'B'
ST_RELEASED = 0x4F  # 'O'
ST_NOT_HOLDER = 0x4E  # 'N'
ST_MOVED = 0x4D  # 'M'
ST_UNKNOWN = 0x55  # 'U'
ST_ERROR = 0x45  # 'E'
ST_PONG = 0x50  # 'P'
ST_ADMIN = 0x4A  # 'J'
STATUSES = frozenset(
    (
        ST_GRANTED,
        ST_TIMEOUT,
        ST_BUSY,
        ST_RELEASED,
        ST_NOT_HOLDER,
        ST_MOVED,
        ST_UNKNOWN,
        ST_ERROR,
        ST_PONG,
        ST_ADMIN,
    )
)
# The most payload each status may carry (the others carry none).
PAYLOAD_LIMIT = {
    ST_MOVED: MAX_MOVED_PAYLOAD,
    ST_ERROR: MAX_ERROR_PAYLOAD,
    ST_ADMIN: MAX_ADMIN_REPLY,
}

WELCOME_ACCEPTED = 0x4B  # 'K'
WELCOME_REJECTED = 0x45  # 'E'

CODE_NONE = 0
CODE_QUEUE_FULL = 1
CODE_OVERLOADED = 2
CODE_CLOCK_UNHEALTHY = 3
CODE_SHUTTING_DOWN = 4
CODE_NO_QUORUM = 5
CODE_BAD_HANDSHAKE = 10
CODE_AUTH_FAILED = 11
CODE_BAD_OP = 20
CODE_BAD_KEY = 21
CODE_BAD_LEASE = 22
CODE_BAD_WAIT = 23
CODE_BAD_FLAGS = 24
CODE_DUPLICATE_REQ_ID = 25
CODE_BAD_ADMIN = 26
CODE_NOT_PERMITTED = 27
CODE_INTERNAL = 28

CODE_NAMES = {
    0: "NONE",
    1: "QUEUE_FULL",
    2: "OVERLOADED",
    3: "CLOCK_UNHEALTHY",
    4: "SHUTTING_DOWN",
    5: "NO_QUORUM",
    10: "BAD_HANDSHAKE",
    11: "AUTH_FAILED",
    20: "BAD_OP",
    21: "BAD_KEY",
    22: "BAD_LEASE",
    23: "BAD_WAIT",
    24: "BAD_FLAGS",
    25: "DUPLICATE_REQ_ID",
    26: "BAD_ADMIN",
    27: "NOT_PERMITTED",
    28: "INTERNAL",
    12: "TLS_REQUIRED",
    29: "BAD_KEYSET",
    30: "BAD_LABEL",
}


def code_name(code: int) -> str:
    return CODE_NAMES.get(code, f"CODE_{code}")


class WireError(Exception):
    """A frame that breaks the protocol (the connection must end)."""


_HDR = struct.Struct(">BBHIQ")
_ACQ = struct.Struct(">BBHIII")
_HELLO = struct.Struct(">4sBBH32s")
_AUTH = struct.Struct(">4sBBH32s32s")
_WELCOME = struct.Struct(">BBHI32s")


# ---------------------------------------------------------------- requests


def encode_acquire(req_id: int, key: bytes, lease_ms: int, wait_ms: int) -> bytes:
    return _ACQ.pack(OP_ACQUIRE, len(key), 0, req_id, lease_ms, wait_ms) + key


def encode_release(req_id: int, key: bytes, token: int) -> bytes:
    return _HDR.pack(OP_RELEASE, len(key), 0, req_id, token) + key


def encode_cancel(req_id: int, key: bytes, target: int) -> bytes:
    return _ACQ.pack(OP_CANCEL, len(key), 0, req_id, target, 0) + key


def encode_ping(req_id: int, arg: int = 0) -> bytes:
    """P; arg PING_FEATURES asks a 1.1 server for its feature bits (§12.1)."""
    return _HDR.pack(OP_PING, 0, 0, req_id, arg)


def set_body(keys: list[bytes]) -> bytes:
    """The body of S and X: each key as key_len (u8) and its bytes (§12.2)."""
    return b"".join(bytes((len(k),)) + k for k in keys)


def encode_acquire_set(req_id: int, count: int, body: bytes, lease_ms: int, wait_ms: int) -> bytes:
    return _ACQ.pack(OP_ACQUIRE_SET, count, len(body), req_id, lease_ms, wait_ms) + body


def encode_release_set(req_id: int, count: int, body: bytes, token: int) -> bytes:
    return _HDR.pack(OP_RELEASE_SET, count, len(body), req_id, token) + body


def encode_label(req_id: int, label: bytes) -> bytes:
    """L: the connection's label, 0..64 bytes of UTF-8 (protocol.md §12.3)."""
    return _HDR.pack(OP_LABEL, len(label), 0, req_id, 0) + label


def cut_label(label: str) -> bytes:
    """label as UTF-8, cut at a character boundary to at most MAX_LABEL
    bytes, control characters replaced by '?' (never sent invalid)."""
    b = "".join("?" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in label).encode("utf-8", "replace")
    if len(b) <= MAX_LABEL:
        return b
    return b[:MAX_LABEL].decode("utf-8", "ignore").encode("utf-8")


def encode_query(req_id: int, body: bytes) -> bytes:
    return _ACQ.pack(OP_QUERY, 0, 0, req_id, len(body), 0) + body


class Request(NamedTuple):
    """A decoded request (used by tests and fake servers)."""

    op: int
    flags: int
    req_id: int
    arg: int  # the 8 argument bytes as a u64
    key: bytes  # the key (A R C P) or the body (Q)

    @property
    def lease_ms(self) -> int:
        return self.arg >> 32

    @property
    def wait_ms(self) -> int:
        return self.arg & MAX_U32

    @property
    def target(self) -> int:
        return self.arg >> 32


def decode_request(buf: bytes | bytearray | memoryview, off: int = 0) -> tuple[Request | None, int]:
    """Decode one request at buf[off:]; (None, 0) while it is incomplete."""
    if len(buf) - off < HEADER_LEN:
        return None, 0
    op, key_len, flags, req_id, arg = _HDR.unpack_from(buf, off)
    if op not in OPS:
        raise WireError(f"unknown op 0x{op:02x}")
    if op == OP_QUERY:
        n = arg >> 32
        if n > MAX_ADMIN_BODY:
            raise WireError("admin body too large")
    else:
        n = key_len
    if len(buf) - off < HEADER_LEN + n:
        return None, 0
    body = bytes(buf[off + HEADER_LEN : off + HEADER_LEN + n])
    return Request(op, flags, req_id, arg, body), HEADER_LEN + n


# --------------------------------------------------------------- responses


class Response(NamedTuple):
    status: int
    code: int
    queued: int
    req_id: int
    value: int
    payload: bytes


def encode_response(status: int, code: int, queued: int, req_id: int, value: int, payload: bytes = b"") -> bytes:
    if payload or status in PAYLOAD_LIMIT:
        value = len(payload)
    return _HDR.pack(status, code, queued, req_id, value) + payload


def response_frame_len(buf: bytes | bytearray | memoryview, off: int = 0) -> int:
    """The length of the response starting at buf[off:], as far as its header
    tells (HEADER_LEN while the header is incomplete). Raises WireError for an
    unknown status or a payload over its limit."""
    if len(buf) - off < HEADER_LEN:
        return HEADER_LEN
    status = buf[off]
    if status not in STATUSES:
        raise WireError(f"unknown response status 0x{status:02x}")
    limit = PAYLOAD_LIMIT.get(status)
    if limit is None:
        return HEADER_LEN
    value: int = struct.unpack_from(">Q", buf, off + 8)[0]
    if value > limit:
        raise WireError(f"payload of {value} bytes over the limit {limit} for status {chr(status)!r}")
    return HEADER_LEN + value


def decode_response(buf: bytes | bytearray | memoryview, off: int = 0) -> tuple[Response | None, int]:
    """Decode one response at buf[off:]: (response, length), or (None, 0)
    while it is incomplete. Raises WireError on an unknown status or a
    payload over its status's limit."""
    n = response_frame_len(buf, off)
    if len(buf) - off < n:
        return None, 0
    status, code, queued, req_id, value = _HDR.unpack_from(buf, off)
    payload = bytes(buf[off + HEADER_LEN : off + n]) if n > HEADER_LEN else b""
    return Response(status, code, queued, req_id, value, payload), n


class ResponseDecoder:
    """A streaming decoder: feed bytes as they arrive, get complete responses.

    Memory is bounded: it never holds more than one incomplete frame, which
    is at most HEADER_LEN + MAX_ADMIN_REPLY bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Response]:
        buf = self._buf
        buf += data
        out: list[Response] = []
        off = 0
        n = len(buf)
        while n - off >= HEADER_LEN:
            resp, m = decode_response(buf, off)
            if resp is None:
                break
            out.append(resp)
            off += m
        if off:
            del buf[:off]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)


# --------------------------------------------------------------- handshake


class Hello(NamedTuple):
    flags: int
    nonce: bytes

    @property
    def tokens_configured(self) -> bool:
        return bool(self.flags & HELLO_FLAG_TOKENS)


class Auth(NamedTuple):
    role: int
    nonce: bytes
    proof: bytes


class Welcome(NamedTuple):
    status: int
    code: int
    max_inflight: int
    proof: bytes

    @property
    def accepted(self) -> bool:
        return self.status == WELCOME_ACCEPTED


def encode_hello(flags: int, nonce: bytes) -> bytes:
    return _HELLO.pack(HELLO_MAGIC, VERSION, flags, 0, nonce)


def decode_hello(b: bytes) -> Hello:
    if len(b) != HELLO_LEN:
        raise WireError("HELLO must be 40 bytes")
    magic, version, flags, reserved, nonce = _HELLO.unpack(b)
    if magic != HELLO_MAGIC:
        raise WireError("bad HELLO magic (not a ticketing server)")
    if version != VERSION:
        raise WireError(f"unsupported protocol version {version}")
    if flags & ~HELLO_FLAG_TOKENS or reserved:
        raise WireError("bad HELLO flags or reserved bytes")
    return Hello(flags, nonce)


def encode_auth(role: int, nonce: bytes, proof: bytes) -> bytes:
    return _AUTH.pack(AUTH_MAGIC, VERSION, role, 0, nonce, proof)


def decode_auth(b: bytes) -> Auth:
    if len(b) != AUTH_LEN:
        raise WireError("AUTH must be 72 bytes")
    magic, version, role, reserved, nonce, proof = _AUTH.unpack(b)
    if magic != AUTH_MAGIC or version != VERSION or role not in (1, 2, 3) or reserved:
        raise WireError("bad AUTH")
    return Auth(role, nonce, proof)


def encode_welcome(status: int, code: int, max_inflight: int, proof: bytes) -> bytes:
    return _WELCOME.pack(status, code, 0, max_inflight, proof)


def decode_welcome(b: bytes) -> Welcome:
    if len(b) != WELCOME_LEN:
        raise WireError("WELCOME must be 40 bytes")
    status, code, _reserved, max_inflight, proof = _WELCOME.unpack(b)
    if status not in (WELCOME_ACCEPTED, WELCOME_REJECTED):
        raise WireError(f"bad WELCOME status 0x{status:02x}")
    return Welcome(status, code, max_inflight, proof)


def client_proof(token: bytes, role: int, server_nonce: bytes, client_nonce: bytes) -> bytes:
    msg = b"ticketing-v1-client" + bytes((role,)) + server_nonce + client_nonce
    return hmac.new(token, msg, hashlib.sha256).digest()


def server_proof(token: bytes, role: int, client_nonce: bytes, server_nonce: bytes) -> bytes:
    msg = b"ticketing-v1-server" + bytes((role,)) + client_nonce + server_nonce
    return hmac.new(token, msg, hashlib.sha256).digest()


def proof_equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def fits(op: int, status: int) -> bool:
    """Whether status is a possible answer to op (protocol.md §3)."""
    if status == ST_ERROR:
        return True
    if op in (OP_ACQUIRE, OP_ACQUIRE_SET):
        return status in (ST_GRANTED, ST_TIMEOUT, ST_BUSY, ST_MOVED, ST_UNKNOWN)
    if op in (OP_RELEASE, OP_CANCEL, OP_RELEASE_SET):
        return status in (ST_RELEASED, ST_NOT_HOLDER, ST_MOVED, ST_UNKNOWN)
    if op == OP_PING:
        return status == ST_PONG
    if op == OP_LABEL:
        return status == ST_RELEASED
    if op == OP_QUERY:
        return status in (ST_ADMIN, ST_MOVED)
    return False


# -------------------------------------------------------------------- keys

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def valid_key(key: bytes) -> bool:
    """protocol.md §2.1 check 5: 1..250 bytes of valid UTF-8 (RFC 3629) with
    no control characters (U+0000-U+001F, U+007F-U+009F)."""
    if not 0 < len(key) <= MAX_KEY_LEN:
        return False
    try:
        s = key.decode("utf-8")  # strict: no surrogates, overlongs or > U+10FFFF
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(s) is None
