"""Files that change under a running server, followed by one rule: the serving certificate
pair (rotated by cert-manager or ``gpupool certs renew``) and the policy (a ConfigMap).

A file is read again when its identity (inode, size, mtime, through symlinks) changes: a
ConfigMap volume update swaps a symlink, a rotation rewrites the files. A version that does
not load never replaces the last good one; it is logged once and kept as ``last_error`` for
readiness and metrics, and the next change is tried again (a pair caught mid-rotation
settles when its second file lands).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from webhook.server import periodic

log = logging.getLogger(__name__)

T = TypeVar("T")
Identity = tuple[int, int, int] | None


def identity(path: str) -> Identity:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class Watched(Generic[T]):
    """A value loaded from files, loaded again when they change, checked at most every
    ``interval`` seconds when read (and by ``start``'s thread, if started). The first load
    is not guarded: a value that cannot be loaded at start is the caller's error to report.
    """

    def __init__(self, what: str, paths: Sequence[str], load: Callable[[], T], *,
                 interval: float, errors: tuple[type[BaseException], ...],
                 on_change: Callable[[T], None] | None = None) -> None:
        self.what = what
        self.paths = tuple(paths)
        self.interval = interval
        self.reloads = 0
        self.failed_reloads = 0
        self.last_error: str | None = None
        self._load = load
        self._errors = errors
        self._on_change = on_change
        self._lock = threading.Lock()
        self._ids = self._identities()
        self._value = load()
        self._next_check = time.monotonic() + interval

    def _identities(self) -> tuple[Identity, ...]:
        return tuple(identity(p) for p in self.paths)

    @property
    def value(self) -> T:
        if time.monotonic() >= self._next_check:
            self.check()
        return self._value

    def check(self) -> bool:
        """Load again if the files changed; True when a new value replaced the old one."""
        with self._lock:
            self._next_check = time.monotonic() + self.interval
            ids = self._identities()
            if ids == self._ids:
                return False
            self._ids = ids
            try:
                new = self._load()
            except self._errors as exc:
                self.failed_reloads += 1
                self.last_error = str(exc)
                log.error("%s changed but does not load; keeping the last good one: %s",
                          self.what, exc)
                return False
            self._value = new
            self.reloads += 1
            self.last_error = None
        if self._on_change is not None:
            self._on_change(new)
        return True

    def start(self) -> None:
        """Check in the background too. Checking only when read would let an idle worker
        skip a good version and then, when a bad one follows, keep an older value than its
        siblings."""

        periodic.every(self.interval, f"watch {self.what}", self.check)
