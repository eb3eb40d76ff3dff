"""Files that change under a running server, followed by one rule: the serving certificate
pair (rotated by cert-manager or ``gpupool certs renew``) and the policy (a ConfigMap).

A file is read again when its identity (inode, size, mtime, through symlinks) changes: a
ConfigMap volume update swaps a symlink, a rotation rewrites the files. A version that does
not load never replaces the last good one; it is logged once and kept as ``last_error`` for
readiness and metrics, and the next change is tried again (a pair caught mid-rotation
settles when its second file lands).

The last good version also outlives the process that loaded it. Every replica reads the same
ConfigMap and Secret, so one bad apply followed by any worker restart (an OOM kill, a
rollout) would otherwise leave a worker that cannot boot, and gunicorn then stops the whole
server: with ``failurePolicy: Fail`` that blocks GPU pods cluster-wide. So each version is
loaded from a copy of its bytes (``KeptCopies``), and the copy that loaded is kept in the
server's state directory, where a worker booting later falls back to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
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


#: Where ``gpupool serve`` keeps the last good copies; set by the master before the workers
#: fork (the chart points it into the pod's emptyDir, so a container restart finds them too).
STATE_DIR_ENV = "GPUPOOL_STATE_DIR"

Loader = Callable[[Sequence[str]], T]


class KeptCopies:
    """The last version of each followed set of files that loaded, copied into ``root``.

    A version is loaded from a snapshot of its bytes, never from the files themselves, so the
    copy kept is exactly what loaded even when the files change between the read and the
    copy. Each kept version is a directory named by its content's hash behind a symlink
    swapped atomically, so a worker booting while another promotes reads one whole version.
    Without a root (the CLI, unit tests) files are loaded in place and nothing is kept.
    """

    def __init__(self, root: str | None) -> None:
        self.root = root

    @classmethod
    def from_env(cls) -> KeptCopies:
        return cls(os.environ.get(STATE_DIR_ENV) or None)

    def slot(self, what: str, paths: Sequence[str]) -> str:
        """The name a set of files is kept under: what it is and where it is read from, so a
        server started later with another ``--policy`` never falls back to this one's."""
        digest = hashlib.sha256("\0".join(os.path.abspath(p) for p in paths).encode())
        return f"{''.join(c if c.isalnum() else '-' for c in what)}-{digest.hexdigest()[:12]}"

    def kept(self, what: str, paths: Sequence[str]) -> list[str] | None:
        """The kept copies of ``paths`` (same order), or None when none was kept."""
        if self.root is None:
            return None
        base = os.path.join(self.root, self.slot(what, paths))
        copies = [os.path.join(base, str(i)) for i in range(len(paths))]
        return copies if all(os.path.isfile(c) for c in copies) else None

    def load(self, what: str, paths: Sequence[str], load: Loader[T]) -> T:
        """Load a snapshot of ``paths``; keep it if it loads. Raises what ``load`` raises,
        and OSError when a file cannot be read. A state directory that cannot take the
        snapshot costs the fallback, never the load: the files are then read in place."""
        if self.root is None:
            return load(paths)
        contents = []
        try:
            for path in paths:
                with open(path, "rb") as fh:
                    contents.append(fh.read())
        except OSError:
            return load(paths)  # the loader's own words for a file it cannot read
        stage = self._stage(what, contents)
        if stage is None:
            return load(paths)
        try:
            value = load([os.path.join(stage, str(i)) for i in range(len(paths))])
            digest = hashlib.sha256(b"".join(hashlib.sha256(c).digest() for c in contents))
            self._promote(what, paths, stage, digest.hexdigest()[:16])
        finally:
            shutil.rmtree(stage, ignore_errors=True)  # gone already when it was promoted
        return value

    def _stage(self, what: str, contents: Sequence[bytes]) -> str | None:
        assert self.root is not None
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            stage = tempfile.mkdtemp(prefix=".stage-", dir=self.root)
        except OSError as exc:
            log.warning("%s: no last good copy can be kept in %s: %s", what, self.root, exc)
            return None
        try:
            for i, data in enumerate(contents):
                # 0600: the serving key is among these files
                fd = os.open(os.path.join(stage, str(i)), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             0o600)
                with os.fdopen(fd, "wb") as dst:
                    dst.write(data)
        except OSError as exc:
            shutil.rmtree(stage, ignore_errors=True)
            log.warning("%s: no last good copy can be kept in %s: %s", what, self.root, exc)
            return None
        return stage

    def _promote(self, what: str, paths: Sequence[str], stage: str, digest: str) -> None:
        """Make ``stage`` the kept version. Best effort: a state directory that is full or
        read-only costs the fallback, never the load that just succeeded."""
        assert self.root is not None
        slot = self.slot(what, paths)
        try:
            version = os.path.join(self.root, f".{slot}-{digest}")
            if not os.path.isdir(version):
                try:
                    os.rename(stage, version)
                except OSError:
                    if not os.path.isdir(version):  # else: another worker kept the same bytes
                        raise
            link = os.path.join(self.root, f".{slot}.link.{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.symlink(os.path.basename(version), link)
            os.replace(link, os.path.join(self.root, slot))
            self._prune(slot, keep={os.path.basename(version)})
        except OSError as exc:
            log.warning("%s loaded but its last good copy could not be kept in %s: %s",
                        what, self.root, exc)

    def _prune(self, slot: str, keep: set[str]) -> None:
        """Versions older than the last two go; the previous stays for a worker that was
        just reading it. Every worker prunes after it promotes, often at the same moment
        (each follows the same file): a version another worker removed meanwhile is simply
        gone, never an error that would cost this worker the load it just made."""
        assert self.root is not None
        prefix = f".{slot}-"
        versions: list[tuple[int, str]] = []
        for entry in os.scandir(self.root):
            if entry.name.startswith(prefix) and entry.name not in keep:
                try:
                    versions.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
                except FileNotFoundError:
                    continue
        for _, path in sorted(versions)[:-1]:
            shutil.rmtree(path, ignore_errors=True)


def load_or_kept(kept: KeptCopies, what: str, paths: Sequence[str], load: Loader[T],
                 errors: tuple[type[BaseException], ...]) -> tuple[T, str | None]:
    """The files loaded (and kept), or, when they do not load, the last good copy with the
    reason it serves instead. With no copy kept, the files' error is raised: the caller's to
    report (``serve`` at first start: one line, exit 2)."""
    caught: tuple[type[BaseException], ...] = (*errors, OSError)
    try:
        return kept.load(what, paths, load), None
    except caught as exc:
        copies = kept.kept(what, paths)
        if copies is None:
            raise
        value = load(copies)  # it loaded once: an error now is a bug, and is raised
        log.error("%s does not load; serving the last good copy kept in %s until it is "
                  "fixed: %s", what, kept.root, exc)
        return value, f"{exc}; serving the last good copy kept in {kept.root}"


class Watched(Generic[T]):
    """A value loaded from files, loaded again when they change, checked at most every
    ``interval`` seconds when read (and by ``start``'s thread, if started).

    ``load`` is given the paths to read: copies of the files (``KeptCopies``). When the files
    do not load at start but a last good copy was kept, the copy serves and ``last_error``
    and ``serving_kept`` say so; with no copy the error is the caller's to report.
    """

    def __init__(self, what: str, paths: Sequence[str], load: Loader[T], *,
                 interval: float, errors: tuple[type[BaseException], ...],
                 on_change: Callable[[T], None] | None = None,
                 kept: KeptCopies | None = None) -> None:
        self.what = what
        self.paths = tuple(paths)
        self.interval = interval
        self.reloads = 0
        self.failed_reloads = 0
        self.last_error: str | None = None
        #: True while the value is a copy kept from before: the files on disk do not load
        self.serving_kept = False
        self._load = load
        # A file that cannot be read (gone mid-rotation, unreadable) is a version that does
        # not load, whatever ``load`` raises itself.
        self._errors: tuple[type[BaseException], ...] = (*errors, OSError)
        self._on_change = on_change
        self._kept = kept if kept is not None else KeptCopies.from_env()
        self._lock = threading.Lock()
        self._ids = self._identities()
        self._value = self._first_load()
        self._next_check = time.monotonic() + interval

    def _first_load(self) -> T:
        value, error = load_or_kept(self._kept, self.what, self.paths, self._load,
                                    self._errors)
        if error is not None:
            self.serving_kept = True
            self.failed_reloads += 1
            self.last_error = error
        return value

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
                new = self._kept.load(self.what, self.paths, self._load)
            except self._errors as exc:
                self.failed_reloads += 1
                self.last_error = str(exc)
                log.error("%s changed but does not load; keeping the last good one: %s",
                          self.what, exc)
                return False
            self._value = new
            self.reloads += 1
            self.last_error = None
            self.serving_kept = False
        if self._on_change is not None:
            self._on_change(new)
        return True

    def start(self) -> None:
        """Check in the background too. Checking only when read would let an idle worker
        skip a good version and then, when a bad one follows, keep an older value than its
        siblings."""

        periodic.every(self.interval, f"watch {self.what}", self.check)
