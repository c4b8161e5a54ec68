"""Byte transports under a connection: plain TCP, or TLS through memory BIOs
so that one reader thread and one writer thread can use the connection at
the same time (an ssl.SSLSocket must not be read and written concurrently)."""

from __future__ import annotations

import socket
import ssl
import threading
import time

READ_SIZE = 64 << 10


def set_socket_options(sock: socket.socket) -> None:
    """TCP_NODELAY and keepalive like the server's (15 s idle, 5 s, 3 probes)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15)
        if hasattr(socket, "TCP_KEEPINTVL"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
        if hasattr(socket, "TCP_KEEPCNT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError:
        pass


_PEEK = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_DONTWAIT", 0)


def peer_closed(sock: socket.socket) -> bool:
    """True when the peer has closed the connection and nothing is left to
    read (a non-blocking peek sees EOF): a request written now could never be
    answered, and must not be reported as maybe executed."""
    if not _PEEK:
        return False
    try:
        return sock.recv(1, _PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _remaining(deadline: float) -> float:
    d = deadline - time.monotonic()
    if d <= 0:
        raise TimeoutError("connect timeout")
    return d


class Plain:
    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def handshake(self, deadline: float) -> None:
        pass

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes:
        return self.sock.recv(READ_SIZE)

    def set_deadline(self, deadline: float | None) -> None:
        self.sock.settimeout(None if deadline is None else _remaining(deadline))

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def abandon(self) -> None:
        """Close this process's descriptor only (after fork: never shut down
        the parent's connection)."""
        self.sock.close()


class TLS:
    __slots__ = ("inc", "lock", "obj", "out", "send_lock", "sock")

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, server_hostname: str | None) -> None:
        self.sock = sock
        self.inc = ssl.MemoryBIO()
        self.out = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_side=False, server_hostname=server_hostname)
        self.lock = threading.Lock()  # the SSLObject
        self.send_lock = threading.Lock()  # order of encrypted bytes on the socket

    def set_deadline(self, deadline: float | None) -> None:
        self.sock.settimeout(None if deadline is None else _remaining(deadline))

    def handshake(self, deadline: float) -> None:
        while True:
            try:
                self.obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                self.sock.settimeout(_remaining(deadline))
                data = self.sock.recv(READ_SIZE)
                if not data:
                    raise ssl.SSLEOFError("EOF during the TLS handshake") from None
                self.inc.write(data)

    def _flush(self) -> None:
        data = self.out.read()
        if data:
            self.sock.sendall(data)

    def send(self, data: bytes) -> None:
        with self.send_lock:
            with self.lock:
                self.obj.write(data)
                out = self.out.read()
            self.sock.sendall(out)

    def recv(self) -> bytes:
        while True:
            data: bytes | None
            with self.lock:
                try:
                    data = self.obj.read(READ_SIZE)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
                pending_out = self.out.pending
            if pending_out and self.send_lock.acquire(blocking=False):
                # post-handshake messages (key update, alerts); a writer in
                # progress flushes them otherwise
                try:
                    with self.lock:
                        out = self.out.read()
                    if out:
                        self.sock.sendall(out)
                finally:
                    self.send_lock.release()
            if data is not None:
                return data
            raw = self.sock.recv(READ_SIZE)
            if not raw:
                return b""
            with self.lock:
                self.inc.write(raw)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def abandon(self) -> None:
        self.sock.close()


Transport = Plain | TLS
