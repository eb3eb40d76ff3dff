"""Where the running server gets its policy, and how it follows updates without a restart.

The file is followed as ``webhook.server.filewatch`` follows files: a bad update never
replaces a good policy, the last good one keeps serving, and the error is kept for logs,
readiness detail and metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from webhook.engine import Policy, PolicyError
from webhook.files.policyfile import default_policy, load_policy_file
from webhook.server.filewatch import Watched

log = logging.getLogger(__name__)


class PolicySource:
    """The policy the server decides with: the built-in one, or a file followed as it
    changes (``webhook.server.filewatch``)."""

    def __init__(self, path: str | None = None, *, check_interval: float = 2.0,
                 on_change: Callable[[Policy], None] | None = None,
                 fixed: Policy | None = None) -> None:
        """``path``: a file to follow; otherwise ``fixed``, or the built-in policy."""
        self.path = path
        self._watch: Watched[Policy] | None = None
        self._fixed: Policy | None = None
        if path is None:
            self._fixed = fixed or default_policy()
        else:
            def changed(policy: Policy) -> None:
                log.info("policy reloaded from %s", path)
                if on_change is not None:
                    on_change(policy)

            # A bad policy at start falls back to the last good copy the server kept; with
            # none, load_policy_file raises and serve says so.
            self._watch = Watched("policy", [path],
                                  lambda paths: load_policy_file(paths[0], name=path),
                                  interval=check_interval, errors=(PolicyError,),
                                  on_change=changed)

    @property
    def policy(self) -> Policy:
        """The current policy; re-checks the file at most every ``check_interval`` seconds."""
        if self._watch is not None:
            return self._watch.value
        assert self._fixed is not None  # no file: a fixed or the built-in policy
        return self._fixed

    @property
    def last_error(self) -> str | None:
        return self._watch.last_error if self._watch is not None else None

    @property
    def serving_kept(self) -> bool:
        """The policy file does not load and the last good copy serves."""
        return self._watch.serving_kept if self._watch is not None else False

    @property
    def reloads(self) -> int:
        return self._watch.reloads if self._watch is not None else 0

    @property
    def failed_reloads(self) -> int:
        return self._watch.failed_reloads if self._watch is not None else 0

    def maybe_reload(self) -> bool:
        return self._watch.check() if self._watch is not None else False

    def start(self) -> None:
        """Follow the file in the background (``Watched.start``)."""
        if self._watch is not None:
            self._watch.start()
