"""Where the running server gets its policy, and how it follows updates without a restart.

A ConfigMap volume update swaps a symlink, so the file is re-read when its identity (inode,
size, mtime through the link) changes. A bad update never replaces a good policy: the last
good one keeps serving, and the error is kept for logs, readiness detail and metrics.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from webhook.engine import Policy, PolicyError
from webhook.policyfile import default_policy, load_policy_file

log = logging.getLogger(__name__)


class PolicySource:
    def __init__(self, path: str | None = None, *, check_interval: float = 2.0,
                 on_change: Callable[[Policy], None] | None = None) -> None:
        self.path = path
        self.check_interval = check_interval
        self.on_change = on_change
        self.last_error: str | None = None
        self.reloads = 0
        self.failed_reloads = 0
        self._lock = threading.Lock()
        self._identity: tuple[int, int, int] | None = None
        self._next_check = 0.0
        if path is None:
            self._policy = default_policy()
        else:
            self._identity = self._stat()
            self._policy = load_policy_file(path)  # a bad policy at start is fatal: say so

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def start(self) -> None:
        """Check the file every ``check_interval`` in the background. Checking only when a
        request arrives would let an idle worker skip a good version and then, when a bad one
        follows, keep an older policy than its siblings."""
        if self.path is None:
            return

        def loop() -> None:
            while True:
                time.sleep(self.check_interval)
                try:
                    self.maybe_reload()
                except Exception:  # never let the watcher die; the next round retries
                    log.exception("policy check failed")

        threading.Thread(target=loop, name="policy-watch", daemon=True).start()

    @property
    def policy(self) -> Policy:
        """The current policy; re-checks the file at most every ``check_interval`` seconds."""
        if self.path is not None and time.monotonic() >= self._next_check:
            self.maybe_reload()
        return self._policy

    def maybe_reload(self) -> bool:
        with self._lock:
            self._next_check = time.monotonic() + self.check_interval
            identity = self._stat()
            if identity == self._identity:
                return False
            self._identity = identity
            try:
                new = load_policy_file(self.path)  # type: ignore[arg-type]
            except PolicyError as exc:
                self.failed_reloads += 1
                self.last_error = str(exc)
                log.error("policy update rejected, keeping the last good policy: %s", exc)
                return False
            self._policy = new
            self.last_error = None
            self.reloads += 1
            log.info("policy reloaded from %s", self.path)
        if self.on_change is not None:
            self.on_change(new)
        return True
