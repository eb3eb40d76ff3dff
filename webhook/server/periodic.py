"""Work a worker repeats in the background, whatever requests it gets: an idle worker must
still notice a changed file or a disk that has room again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def every(interval: float, what: str, fn: Callable[[], object]) -> None:
    """Call ``fn`` every ``interval`` seconds in a daemon thread (a greenlet under gevent's
    workers). A call that raises is logged and the next one comes as usual: the loop never
    dies with one bad round."""

    def loop() -> None:
        while True:
            time.sleep(interval)
            try:
                fn()
            except Exception:
                log.exception("%s failed; tried again in %g s", what, interval)

    threading.Thread(target=loop, name=what, daemon=True).start()
