"""A TLS server context that follows certificate files as they are rotated.

Each new connection is wrapped by ``ReloadingContext.wrap_socket`` with a cached context that
is rebuilt when the files change (``webhook.server.filewatch``): new connections get the new
certificate, connections already open keep theirs, and no request in flight fails. A
half-written pair (key not matching cert) keeps the previous context until the files settle.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography import x509

from webhook.server.filewatch import Watched

if TYPE_CHECKING:  # a mixin: the class it is mixed into is an SSLSocket
    _SocketBase = ssl.SSLSocket
else:
    _SocketBase = object

log = logging.getLogger(__name__)

#: Forward-secret AEAD suites only for TLS 1.2; TLS 1.3 suites are fixed by OpenSSL.
CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
           "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
           "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")


#: A TLS handshake, and a request from its first byte to its last, must complete within these.
#: The API server sends each review in one go: legitimate requests take milliseconds. A
#: stalled handshake costs nothing to cut; a request that was cut comes back with a new TLS
#: handshake, the expensive part of a slow client, hence the longer request deadline.
@dataclass(frozen=True)
class Deadlines:
    """``gpupool serve --handshake-deadline/--request-deadline``; carried by the socket class
    each context builds, so two contexts in one process may differ."""

    handshake: float = 3.0
    request: float = 10.0


class _DroppedLog:
    """One log line per burst of dropped slow clients, not one per connection: a stream of
    them must not flood the log (the count of what was summed is in the next line)."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.counts: dict[str, int] = {}
        self._next = 0.0

    def note(self, stage: str, deadlines: Deadlines) -> None:
        self.counts[stage] = self.counts.get(stage, 0) + 1
        now = time.monotonic()
        if now >= self._next:
            summary = ", ".join(f"{n} in {stage}" for stage, n in sorted(self.counts.items()))
            log.warning("dropped slow client connection(s): %s (deadlines: handshake %.0fs, "
                        "request %.0fs from its first byte); further drops are summed for %.0fs",
                        summary, deadlines.handshake, deadlines.request, self.every)
            self.counts.clear()
            self._next = now + self.every


DROPPED = _DroppedLog()


def _cut(stage: str, deadlines: Deadlines) -> ConnectionResetError:
    DROPPED.note(stage, deadlines)
    # ECONNRESET: the worker closes the connection without a traceback of its own.
    return ConnectionResetError(errno.ECONNRESET, f"slow client: {stage} over its deadline")


class _Deadlines(_SocketBase):
    """Bounds how long one client can keep a connection busy without finishing a request.

    The handshake and each request (from its first byte to its last; a response resets the
    clock) get a hard deadline, after which the connection is dropped. Under gevent workers a
    slow connection costs only a greenlet while it lasts, but without a bound a stream of them
    would still fill the worker's connection pool; under gthread a slow request holds a
    thread. Waiting for a request's first byte is not timed here: the worker's keep-alive
    timeout bounds an idle connection.

    Mixed into whichever ``SSLSocket`` class the context builds: the stdlib's, or gevent's
    once a gevent worker has patched ``ssl`` (see ``deadline_socket_class``).
    """

    #: set on each class ``deadline_socket_class`` makes
    deadlines: Deadlines = Deadlines()

    def do_handshake(self, *args: Any) -> None:
        self.settimeout(self.deadlines.handshake)  # the stdlib applies it to the whole handshake
        try:
            super().do_handshake(*args)
        except TimeoutError:
            raise _cut("handshake", self.deadlines) from None
        finally:
            self.settimeout(None)

    def _before_read(self) -> bool:
        """Arm the request deadline; False while no byte of a request has arrived."""
        start = self.__dict__.get("_request_started")
        if start is None:
            self.settimeout(None)
            return False
        left = start + self.deadlines.request - time.monotonic()
        if left <= 0:
            raise _cut("request", self.deadlines)
        self.settimeout(left)
        return True

    def _after_read(self, started: bool, got: int) -> None:
        if not started and got:
            self.__dict__["_request_started"] = time.monotonic()

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        started = self._before_read()
        try:
            data = super().recv(buflen, flags)
        except TimeoutError:
            raise _cut("request", self.deadlines) from None
        self._after_read(started, len(data))
        return data

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        started = self._before_read()
        try:
            if nbytes is None:
                got = super().recv_into(buffer, flags=flags)
            else:
                got = super().recv_into(buffer, nbytes, flags)
        except TimeoutError:
            raise _cut("request", self.deadlines) from None
        self._after_read(started, got)
        return got

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.__dict__.pop("_request_started", None)  # the request was read: clock off
        self.settimeout(None)
        super().sendall(data, flags)


class _HeadWithBody(_SocketBase):
    """Sends a response's head together with its body: one TLS record and one write where
    gunicorn makes two (it writes the status line and headers, then the body).

    A head is held until the next write and then sent with it; anything that could wait on
    the peer (a read, a close) sends what is held first, so nothing is ever held while the
    server waits. Half the records also means half the decryption work for the API server,
    which calls on every pod create."""

    def _flush(self) -> None:
        held = self.__dict__.pop("_held", None)
        if held:
            super().sendall(held)

    def sendall(self, data: Any, flags: int = 0) -> None:
        held = self.__dict__.pop("_held", None)
        if held is not None:
            data = held + bytes(data)
        elif data[:7] == b"HTTP/1." and data[-4:] == b"\r\n\r\n":
            self.__dict__["_held"] = bytes(data)
            return
        super().sendall(data, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._flush()
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._flush()
        if nbytes is None:
            return super().recv_into(buffer, flags=flags)
        return super().recv_into(buffer, nbytes, flags)

    def unwrap(self) -> Any:
        self._flush()
        return super().unwrap()

    def shutdown(self, how: int) -> None:
        with contextlib.suppress(OSError):  # the peer is gone: nothing left to say to it
            self._flush()
        super().shutdown(how)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._flush()
        super().close()


class _GeventDeadlines(_Deadlines):
    """gevent applies a socket timeout to each wait inside the handshake, so a client sending
    a byte a second would never trip it: bound the whole handshake instead."""

    def do_handshake(self, *args: Any) -> None:
        import gevent  # only reached once a gevent worker has built the context

        # The TimeoutError it raises is turned into the cut by _Deadlines.do_handshake.
        with gevent.Timeout(self.deadlines.handshake, TimeoutError):
            super().do_handshake(*args)


_DEADLINE_CLASSES: dict[tuple[type, Deadlines], type] = {}


def deadline_socket_class(base: type, deadlines: Deadlines) -> type:
    """``base`` (an SSLSocket class) with these deadlines mixed in, made once per pair."""
    key = (base, deadlines)
    if key not in _DEADLINE_CLASSES:
        mixin = _GeventDeadlines if base.__module__.startswith("gevent") else _Deadlines
        _DEADLINE_CLASSES[key] = type(f"Deadline{base.__name__}", (mixin, _HeadWithBody, base),
                                      {"deadlines": deadlines})
    return _DEADLINE_CLASSES[key]


def build_context(certfile: str, keyfile: str, deadlines: Deadlines = Deadlines()
                  ) -> ssl.SSLContext:
    # ``ssl.SSLContext`` looked up now, not at import: in a gevent worker it is gevent's
    # cooperative class by the time the first context is built.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    # No TLS 1.3 session tickets: the API server's webhook client keeps no session cache
    # (client-go's transport sets none), so each ticket would be made, encrypted and sent on
    # every new connection for nothing; under load the API server opens many.
    ctx.num_tickets = 0
    ctx.sslsocket_class = deadline_socket_class(type(ctx).sslsocket_class, deadlines)
    ctx.load_cert_chain(certfile=certfile, keyfile=keyfile)
    return ctx


@dataclass(frozen=True)
class _Served:
    context: ssl.SSLContext
    not_after: dt.datetime


class ReloadingContext:
    """The serving context, rebuilt when the certificate pair changes
    (``webhook.server.filewatch``)."""

    def __init__(self, certfile: str, keyfile: str, check_interval: float = 1.0,
                 deadlines: Deadlines = Deadlines()) -> None:
        self.certfile = certfile
        self.keyfile = keyfile

        def load(paths: Sequence[str]) -> _Served:
            cert, key = paths
            return _Served(build_context(cert, key, deadlines), _not_after(cert))

        def changed(served: _Served) -> None:
            log.info("serving certificate reloaded (valid until %s)",
                     served.not_after.isoformat())

        self._watch = Watched("certificate pair", [certfile, keyfile], load,
                              interval=check_interval,
                              errors=(OSError, ssl.SSLError, ValueError), on_change=changed)

    @property
    def reloads(self) -> int:
        return self._watch.reloads

    @property
    def last_error(self) -> str | None:
        return self._watch.last_error

    @property
    def serving_kept(self) -> bool:
        """The files on disk do not load and the last good copy serves."""
        return self._watch.serving_kept

    def get(self) -> ssl.SSLContext:
        return self._watch.value.context

    def wrap_socket(self, sock: Any, **kwargs: Any) -> ssl.SSLSocket:
        """What both worker classes call: gthread asks gunicorn's hook for a context per
        connection, gevent's server asks once and keeps it; handing them this object instead
        of a context gives every new connection the current certificate either way."""
        # The handshake then happens in the worker's own connection handler, whose error
        # handling covers it (gevent's server would otherwise do it, and print tracebacks).
        kwargs["do_handshake_on_connect"] = False
        return self.get().wrap_socket(sock, **kwargs)

    @property
    def not_after(self) -> dt.datetime:
        return self._watch.value.not_after

    def ready(self) -> tuple[bool, str]:
        """Not ready when the certificate files are gone or what we serve has expired."""
        if not os.path.exists(self.certfile) or not os.path.exists(self.keyfile):
            return False, f"{self.certfile} or {self.keyfile} is missing"
        not_after = self.not_after
        if not_after <= dt.datetime.now(dt.UTC):
            return False, f"expired at {not_after.isoformat()}"
        return True, f"expires {not_after.isoformat()}"

    def files_load(self) -> tuple[bool, str]:
        """Whether the pair on disk loads. Failing here is not critical: the last good pair
        still serves, and taking every replica out of the Service would block pod creation
        (each replica reads the same Secret)."""
        self._watch.value  # noqa: B018 - reading runs the periodic check
        error = self._watch.last_error
        if error:
            return False, (f"{self.certfile} / {self.keyfile} do not load ({error}); serving "
                           f"the last good pair, which expires {self.not_after.isoformat()}")
        return True, f"{self.certfile} / {self.keyfile} load"


def _not_after(certfile: str) -> dt.datetime:
    with open(certfile, "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc
