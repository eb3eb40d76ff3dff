"""What the server's TLS sockets write: a response's head with its body, nothing held while
the server waits, and no session tickets nobody will use."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path
from typing import Any

from webhook.server.tls import _HeadWithBody, build_context


class RecordingSocket:
    """Test double for the SSL socket under the mixin: records what reaches the wire."""

    def __init__(self) -> None:
        self.wire: list[bytes] = []
        self.events: list[str] = []

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.wire.append(bytes(data))
        self.events.append("send")

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self.events.append("recv")
        return b""

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self.events.append("recv")
        return 0

    def close(self) -> None:
        self.events.append("close")


class Sock(_HeadWithBody, RecordingSocket):
    pass


HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"


def test_head_and_body_leave_in_one_write():
    s = Sock()
    s.sendall(HEAD)
    assert s.wire == []
    s.sendall(b"{}")
    assert s.wire == [HEAD + b"{}"]


def test_a_head_without_body_is_sent_before_the_server_reads_or_closes():
    s = Sock()
    s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    s.recv(10)
    assert s.events == ["send", "recv"]  # the client gets its 100 Continue before we wait
    s.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    buf = bytearray(4)
    s.recv_into(buf)
    assert s.events[-2:] == ["send", "recv"]
    s.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    s.close()
    assert s.events[-2:] == ["send", "close"]
    assert s.wire[-1].startswith(b"HTTP/1.1 404")


def test_bodies_and_later_writes_pass_straight_through():
    s = Sock()
    s.sendall(b"part of a body")
    s.sendall(b"HTTP/1.1 looks like a head but is body text\r\n")  # no blank line: not a head
    assert s.wire == [b"part of a body", b"HTTP/1.1 looks like a head but is body text\r\n"]


def _exchange(server_ctx: ssl.SSLContext, ca: Path) -> ssl.SSLSession | None:
    """One byte each way over a real TLS 1.3 connection; the client's session after it."""
    a, b = socket.socketpair()
    client_ctx = ssl.create_default_context(cafile=str(ca))
    client_ctx.check_hostname = False

    def serve() -> None:
        with server_ctx.wrap_socket(b, server_side=True) as s:
            s.recv(1)
            s.sendall(b"y")

    t = threading.Thread(target=serve)
    t.start()
    with client_ctx.wrap_socket(a) as c:
        c.sendall(b"x")
        assert c.recv(1) == b"y"  # tickets, when sent, arrive before this byte
        session = c.session
    t.join()
    return session


def test_no_session_tickets_are_made_for_a_client_that_never_resumes(tmp_path):
    # The API server's webhook client keeps no TLS session cache: a ticket is work for nothing.
    from harness.servers import generate_certs

    generate_certs(tmp_path)
    cert, key, ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    session = _exchange(build_context(str(cert), str(key)), ca)
    assert session is not None and not session.has_ticket
    # the same exchange with OpenSSL's default does carry one: the check above can fail
    plain = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    plain.load_cert_chain(str(cert), str(key))
    session = _exchange(plain, ca)
    assert session is not None and session.has_ticket
