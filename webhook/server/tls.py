"""A TLS server context that follows certificate files as they are rotated.

Each new connection is wrapped by ``ReloadingContext.wrap_socket`` with a cached context that
is rebuilt when the files change: new connections get the new certificate, connections
already open keep theirs, and no request in flight fails. A half-written pair (key not
matching cert) keeps the previous context until the files settle.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import threading
import time
from typing import Any

from cryptography import x509

log = logging.getLogger(__name__)

#: Forward-secret AEAD suites only for TLS 1.2; TLS 1.3 suites are fixed by OpenSSL.
CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
           "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
           "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")


#: A TLS handshake, and a request from its first byte to its last, must complete within these.
#: The API server sends each review in one go: legitimate requests take milliseconds. A
#: stalled handshake costs nothing to cut; a request that was cut comes back with a new TLS
#: handshake, the expensive part of a slow client, hence the longer request deadline.
HANDSHAKE_DEADLINE = 3.0
REQUEST_DEADLINE = 10.0


class _Deadlines:
    """Bounds how long one client can keep a connection busy without finishing a request.

    The handshake and each request (from its first byte to its last; a response resets the
    clock) get a hard deadline, after which the connection is dropped. Under gevent workers a
    slow connection costs only a greenlet while it lasts, but without a bound a stream of them
    would still fill the worker's connection pool; under gthread a slow request holds a
    thread. Idle keep-alive connections are not timed here (the worker's keepalive is).

    Mixed into whichever ``SSLSocket`` class the context builds: the stdlib's, or gevent's
    once a gevent worker has patched ``ssl`` (see ``deadline_socket_class``).
    """

    def do_handshake(self, *args: Any) -> None:
        self.settimeout(HANDSHAKE_DEADLINE)  # the stdlib applies it to the whole handshake
        try:
            super().do_handshake(*args)  # type: ignore[misc]
        finally:
            self.settimeout(None)


class _GeventDeadlines(_Deadlines):
    """gevent applies a socket timeout to each wait inside the handshake, so a client sending
    a byte a second would never trip it: bound the whole handshake instead."""

    def do_handshake(self, *args: Any) -> None:
        import gevent  # only reached once a gevent worker has built the context

        with gevent.Timeout(HANDSHAKE_DEADLINE, TimeoutError("TLS handshake too slow")):
            super().do_handshake(*args)

    def _arm(self) -> None:
        now = time.monotonic()
        start = self.__dict__.setdefault("_request_started", now)
        left = start + REQUEST_DEADLINE - now
        if left <= 0:
            raise TimeoutError("request not received within the deadline")
        self.settimeout(left)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(buflen, flags)  # type: ignore[misc]

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._arm()
        if nbytes is None:
            return super().recv_into(buffer, flags=flags)  # type: ignore[misc]
        return super().recv_into(buffer, nbytes, flags)  # type: ignore[misc]

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.__dict__.pop("_request_started", None)  # the request was read: clock off
        self.settimeout(None)
        super().sendall(data, flags)  # type: ignore[misc]


_DEADLINE_CLASSES: dict[type, type] = {}


def deadline_socket_class(base: type) -> type:
    """``base`` (an SSLSocket class) with the deadlines mixed in, made once per base."""
    if base not in _DEADLINE_CLASSES:
        mixin = _GeventDeadlines if base.__module__.startswith("gevent") else _Deadlines
        _DEADLINE_CLASSES[base] = type(f"Deadline{base.__name__}", (mixin, base), {})
    return _DEADLINE_CLASSES[base]


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def build_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    # ``ssl.SSLContext`` looked up now, not at import: in a gevent worker it is gevent's
    # cooperative class by the time the first context is built.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.sslsocket_class = deadline_socket_class(type(ctx).sslsocket_class)
    ctx.load_cert_chain(certfile=certfile, keyfile=keyfile)
    return ctx


class ReloadingContext:
    def __init__(self, certfile: str, keyfile: str, check_interval: float = 1.0) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._ids = (_identity(certfile), _identity(keyfile))
        self._ctx = build_context(certfile, keyfile)
        self._not_after = _not_after(certfile)
        self._next_check = time.monotonic() + check_interval
        self.reloads = 0
        self.last_error: str | None = None

    def get(self) -> ssl.SSLContext:
        if time.monotonic() >= self._next_check:
            self._maybe_reload()
        return self._ctx

    def wrap_socket(self, sock: Any, **kwargs: Any) -> ssl.SSLSocket:
        """What both worker classes call: gthread asks gunicorn's hook for a context per
        connection, gevent's server asks once and keeps it; handing them this object instead
        of a context gives every new connection the current certificate either way."""
        return self.get().wrap_socket(sock, **kwargs)

    def _maybe_reload(self) -> None:
        with self._lock:
            self._next_check = time.monotonic() + self.check_interval
            ids = (_identity(self.certfile), _identity(self.keyfile))
            if ids == self._ids:
                return
            try:
                ctx = build_context(self.certfile, self.keyfile)
                not_after = _not_after(self.certfile)
            except (OSError, ssl.SSLError, ValueError) as exc:
                # Mid-rotation: try again on the next check, keep serving the old pair.
                self.last_error = str(exc)
                log.warning("certificate files changed but do not load yet: %s", exc)
                return
            self._ids, self._ctx, self._not_after = ids, ctx, not_after
            self.reloads += 1
            self.last_error = None
            log.info("serving certificate reloaded (valid until %s)", not_after.isoformat())

    @property
    def not_after(self) -> dt.datetime:
        return self._not_after

    def ready(self) -> tuple[bool, str]:
        """Not ready when the certificate files are gone or what we serve has expired."""
        if not os.path.exists(self.certfile) or not os.path.exists(self.keyfile):
            return False, f"certificate: {self.certfile} or {self.keyfile} is missing"
        self.get()
        if self._not_after <= dt.datetime.now(dt.UTC):
            return False, f"certificate: expired at {self._not_after.isoformat()}"
        return True, "certificate ok"


def _not_after(certfile: str) -> dt.datetime:
    with open(certfile, "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc
