"""A scripted fake Ticketing server for the failure paths (socket + threads).

The handler gets each decoded request with the connection and decides: reply
(any frame, even a wrong one), stay silent, or close."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

from ticketing import _wire


class FakeConn:
    def __init__(self, server: FakeServer, sock: socket.socket, index: int) -> None:
        self.server = server
        self.sock = sock
        self.index = index
        self.lock = threading.Lock()
        self.closed = False

    def send(self, data: bytes) -> None:
        with self.lock:
            if not self.closed:
                try:
                    self.sock.sendall(data)
                except OSError:
                    pass

    def reply(
        self, req: _wire.Request, status: int, code: int = 0, value: int = 0, queued: int = 0, payload: bytes = b""
    ) -> None:
        self.send(_wire.encode_response(status, code, queued, req.req_id, value, payload))

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


Handler = Callable[[FakeConn, _wire.Request], None]


class FakeServer:
    """Listens on 127.0.0.1:0. ``token`` (bytes) is checked like the real
    server; ``reject`` sends that REJECT code; ``bad_proof`` answers WELCOME
    with a wrong server proof (an impostor); ``max_inflight`` goes in WELCOME;
    ``accept_limit`` closes connections beyond that many at once."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        token: bytes = b"",
        reject: int | None = None,
        bad_proof: bool = False,
        max_inflight: int = 1024,
        refuse: bool = False,
    ) -> None:
        self.handler = handler or default_handler
        self.token = token
        self.reject = reject
        self.bad_proof = bad_proof
        self.max_inflight = max_inflight
        self.refuse = refuse
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.lsock.getsockname()[1]}"
        self.conns: list[FakeConn] = []
        self.requests: list[tuple[int, _wire.Request]] = []
        self.accepts: list[float] = []
        self.cv = threading.Condition()
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        import time

        while not self._stop:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            with self.cv:
                self.accepts.append(time.monotonic())
                self.cv.notify_all()
            if self.refuse:
                s.close()
                continue
            fc = FakeConn(self, s, len(self.conns))
            with self.cv:
                self.conns.append(fc)
            threading.Thread(target=self._serve, args=(fc,), daemon=True).start()

    def _recv_exact(self, s: socket.socket, n: int) -> bytes | None:
        b = b""
        while len(b) < n:
            d = s.recv(n - len(b))
            if not d:
                return None
            b += d
        return b

    def _serve(self, fc: FakeConn) -> None:
        s = fc.sock
        try:
            nonce = os.urandom(32)
            flags = _wire.HELLO_FLAG_TOKENS if self.token else 0
            fc.send(_wire.encode_hello(flags, nonce))
            raw = self._recv_exact(s, _wire.AUTH_LEN)
            if raw is None:
                return
            auth = _wire.decode_auth(raw)
            if self.reject is not None:
                fc.send(_wire.encode_welcome(_wire.WELCOME_REJECTED, self.reject, 0, bytes(32)))
                fc.close()
                return
            if self.token and not _wire.proof_equal(
                auth.proof, _wire.client_proof(self.token, auth.role, nonce, auth.nonce)
            ):
                fc.send(_wire.encode_welcome(_wire.WELCOME_REJECTED, _wire.CODE_AUTH_FAILED, 0, bytes(32)))
                fc.close()
                return
            proof = _wire.server_proof(self.token, auth.role, auth.nonce, nonce)
            if self.bad_proof:
                proof = bytes(32)
            fc.send(_wire.encode_welcome(_wire.WELCOME_ACCEPTED, 0, self.max_inflight, proof))
            buf = bytearray()
            while True:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
                while True:
                    req, n = _wire.decode_request(buf)
                    if req is None:
                        break
                    del buf[:n]
                    if req.op == _wire.OP_PING and req.arg == _wire.PING_FEATURES:
                        fc.reply(req, _wire.ST_PONG, value=1)  # as a 1.0 server: no feature bits
                        continue
                    with self.cv:
                        self.requests.append((fc.index, req))
                        self.cv.notify_all()
                    self.handler(fc, req)
        except OSError:
            pass
        finally:
            fc.close()

    def ops(self, op: int) -> list[_wire.Request]:
        with self.cv:
            return [r for _, r in self.requests if r.op == op]

    def wait_for(self, pred: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self.cv:
            return self.cv.wait_for(pred, timeout)

    def close(self) -> None:
        self._stop = True
        self.lsock.close()
        for c in list(self.conns):
            c.close()


def default_handler(fc: FakeConn, req: _wire.Request) -> None:
    """Grants every acquire (token 1000 + req_id), releases every release."""
    if req.op == _wire.OP_ACQUIRE:
        fc.reply(req, _wire.ST_GRANTED, value=1000 + req.req_id)
    elif req.op in (_wire.OP_RELEASE, _wire.OP_CANCEL):
        fc.reply(req, _wire.ST_RELEASED)
    elif req.op == _wire.OP_PING:
        fc.reply(req, _wire.ST_PONG, value=1)
