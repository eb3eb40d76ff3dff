"""A response's head goes out with its body, and nothing is held while the server waits."""

from __future__ import annotations

from typing import Any

from webhook.server.tls import _HeadWithBody


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
