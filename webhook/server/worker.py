"""gunicorn's gevent worker, with a graceful stop that closes idle keep-alive connections at
once, as Go's ``http.Server.Shutdown`` does.

The API server keeps its connections to a webhook alive. gunicorn's gevent worker waits for
every connection's greenlet on a graceful stop, and a greenlet waiting for the next request on
an idle connection only ends when the client closes it or the keep-alive timeout passes: every
stop (a rollout, a scale-down, a node drain) took the whole ``graceful_timeout`` (25 s) before
the worker gave up. Here, on SIGTERM, connections waiting for a request that has not started
are closed; a request whose first byte has arrived is served to the end as before.
"""

from __future__ import annotations

import contextlib
import errno
import signal
from collections.abc import Iterator
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker as _GeventWorker


class GeventWorker(_GeventWorker):  # type: ignore[misc]  # gunicorn is untyped
    def init_process(self) -> None:
        self._sockets: dict[Any, Any] = {}  # greenlet -> its client socket
        self._waiting: set[Any] = set()  # greenlets waiting for their next request
        super().init_process()

    def init_signals(self) -> None:
        """gunicorn's handlers, then any stop signal that arrived while this worker was still
        booting (``held_stop_signals``, kept by the runner's post-fork hook)."""
        super().init_signals()
        for sig in held_stop_signals():
            (self.handle_exit if sig == signal.SIGTERM else self.handle_quit)(sig, None)

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        me = gevent.getcurrent()
        self._sockets[me] = client
        try:
            super().handle(listener, client, addr)
        finally:
            self._sockets.pop(me, None)

    @contextlib.contextmanager
    def timeout_ctx(self) -> Iterator[None]:
        """Wraps the keep-alive wait for the next request (gunicorn reads the request line and
        headers in it), so a stop can tell a connection between requests from a busy one."""
        me = gevent.getcurrent()
        self._waiting.add(me)
        try:
            with super().timeout_ctx():
                if not self.alive:  # stopping: do not start waiting on a connection
                    raise _closing()
                yield
        finally:
            self._waiting.discard(me)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        gevent.spawn(self._close_idle)  # out of the signal handler

    def handle_quit(self, sig: int, frame: Any) -> None:
        """SIGINT (Ctrl-C in the terminal reaches every process of the group) and SIGQUIT
        (the master's fast stop): stop as on SIGTERM. gunicorn's own quit calls
        ``sys.exit`` in a greenlet, which gevent reports as a ``SystemExit`` traceback on
        every Ctrl-C; a stop that closes idle connections at once is as quick, and finishes
        the reviews in flight (the master still kills what outlives its graceful timeout)."""
        self.cfg.worker_int(self)
        self.handle_exit(sig, frame)

    def _close_idle(self) -> None:
        for greenlet in list(self._waiting):
            # The TLS deadline socket notes when a request's first byte arrived
            # (webhook.server.tls); plain sockets (--insecure-http) never have one pending.
            sock = self._sockets.get(greenlet)
            started = getattr(sock, "__dict__", {}).get("_request_started")
            if started is None:
                greenlet.kill(_closing(), block=False)


#: Stop signals a worker received between its fork and its own handlers (``hold_stop_signals``).
_HELD: list[int] = []
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def hold_stop_signals() -> None:
    """In a newly forked worker, before it boots: keep the stop signals that arrive.

    A forked worker inherits the master's Python signal handlers until it installs its own,
    after importing and building the app (seconds on a busy node). The master's handler only
    queues the signal in the worker's copy of the master: a SIGTERM that came then (a
    rollout or Ctrl-C right after start) was lost, and the worker ran on until the master
    killed it at the graceful timeout, 25 s later. Kept here, it is acted on as soon as the
    worker's own handlers are in place."""
    _HELD.clear()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: _HELD.append(signum))


def held_stop_signals() -> list[int]:
    held, _HELD[:] = list(_HELD), []
    return held


def _closing() -> ConnectionResetError:
    # gunicorn logs a connection reset at debug level and closes the socket; any other
    # exception in a handler would be logged as an error with its traceback.
    return ConnectionResetError(errno.ECONNRESET, "server stopping: idle connection closed")
