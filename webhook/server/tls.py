"""A TLS server context that follows certificate files as they are rotated.

gunicorn's gthread worker asks its ``ssl_context`` hook for a context on every accepted
connection. Handing back a cached context that is rebuilt when the files change gives hot
rotation for free: new connections get the new certificate, connections already open keep
theirs, and no request in flight fails. A half-written pair (key not matching cert) keeps the
previous context until the files settle.
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
#: The API server sends each review in one go: legitimate requests take milliseconds.
HANDSHAKE_DEADLINE = 3.0
REQUEST_DEADLINE = 3.0


class DeadlineSSLSocket(ssl.SSLSocket):
    """Bounds how long one client can hold a worker thread.

    gthread hands a connection to a thread once data arrives and the thread then blocks
    until the request is complete: a client trickling a byte a second would hold the thread
    forever, and a handful of them would starve the server. Here the handshake and each
    request (from its first byte to its last; a response resets the clock) get a hard
    deadline, after which the connection is dropped. Idle keep-alive connections cost no
    thread at all: gunicorn parks them in its poller.
    """

    def do_handshake(self, block: bool = False) -> None:
        self.settimeout(HANDSHAKE_DEADLINE)  # CPython applies it to the whole handshake
        try:
            super().do_handshake(block)
        finally:
            self.settimeout(None)

    def _arm(self) -> None:
        now = time.monotonic()
        start = self.__dict__.setdefault("_request_started", now)
        left = start + REQUEST_DEADLINE - now
        if left <= 0:
            raise TimeoutError("request not received within the deadline")
        self.settimeout(left)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)  # type: ignore[arg-type]

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.__dict__.pop("_request_started", None)  # the request was read: clock off
        self.settimeout(None)
        super().sendall(data, flags)


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def build_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.sslsocket_class = DeadlineSSLSocket
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
