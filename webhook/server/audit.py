"""The audit log: one JSON line per denial (and per routing patch, when the policy sets
``audit.mutations``), to stdout and/or a rotated file.

Several gunicorn workers, each serving many connections, write at once. Each record is one
complete line written to a descriptor opened with O_APPEND under an ``flock`` that also
serialises rotation, so records are never interleaved, lost to a rename, or written twice.
Audit storage failing (a full disk, a directory gone read-only) never blocks or fails an
admission reply: the record still reaches the other sinks, the loss is counted, logged once
and shown in /readyz and /metrics, and the file resumes by itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from webhook.engine import MESSAGE_LIMIT, Decision, Policy, Reason, clip
from webhook.server import periodic
from webhook.server.review import Request

log = logging.getLogger(__name__)

#: The ``audit`` field of a gap marker: N records a worker could not write before this line.
GAP_MARKER = "gpupool-gap"
#: Groups kept per record: enough to tell who, bounded whatever the request carried.
MAX_GROUPS = 64
#: How often a failing sink tries again by itself, record or not.
RETRY_SECONDS = 5.0


def make_record(endpoint: str, req: Request, decision: Decision) -> dict[str, Any]:
    record: dict[str, Any] = {
        "time": _now(),
        "uid": req.uid,
        "dryRun": req.dry_run,
        "endpoint": endpoint,
        "operation": req.subject.operation,
        "namespace": req.subject.namespace or "",
        "kind": req.subject.kind,
        "name": clip(req.obj_name),
        "owner": clip(req.owner),
        "user": clip(req.subject.user),
        "groups": [clip(g) for g in req.groups[:MAX_GROUPS]],
        "decision": "allowed" if decision.allowed else "denied",
        "pool": decision.pool or "",
        "reason": decision.reason,
        "message": clip(decision.message, MESSAGE_LIMIT),
        "nodes": [n.to_json() for n in decision.nodes],
        "patch": decision.patch if decision.allowed else [],
    }
    if len(req.groups) > MAX_GROUPS:
        record["groupsOmitted"] = len(req.groups) - MAX_GROUPS
    return record


class _Lock:
    """Exclusive across threads and worker processes.

    The lock file lives in the temporary directory, never beside the log: the log's directory
    going read-only must not take the lock with it. Each process opens it itself (flock on a
    descriptor inherited through fork would be shared, and exclude nothing), and any failure
    to take it releases what was taken, so a failure never leaves the lock held.
    """

    def __init__(self, name: str) -> None:
        self.path = os.path.join(tempfile.gettempdir(), name)
        self._local = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    def __enter__(self) -> None:
        self._local.acquire()
        try:
            if self._fd is None or self._pid != os.getpid():
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                self._pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._local.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._local.release()


def _lock_name(kind: str, key: str) -> str:
    return f"gpupool-audit-{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.lock"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _line_boundary(fd: int) -> int:
    """The file's size, after cutting any unterminated tail: whatever left it (a cut-back that
    failed on a full disk, a worker killed mid-write), the next line must not be glued to it,
    so every line in the file stays a whole record or marker."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        chunk = os.pread(fd, min(end, 1 << 16), max(0, end - (1 << 16)))
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = end - len(chunk) + newline + 1
            break
        end -= len(chunk)
    log.warning("audit file: cut %d byte(s) of an unterminated line at its end", size - end)
    os.ftruncate(fd, end)
    return end


_FALLOC_FL_KEEP_SIZE = 0x01
_libc: Any = None


def _reserve(fd: int, start: int, size: int) -> bool:
    """Have the file system set aside the blocks for ``size`` bytes at ``start`` before a
    byte is written (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``: the file's size, and so
    what a reader sees, is unchanged). A line then lands whole or, refused here with
    ENOSPC, not at all: the free-space count (``_check_room``) alone cannot promise that,
    since the room it saw can be taken before the write, and a file's last page can take
    part of a line while the file system reports no free block. False where the file system
    cannot reserve (the count and the cut-back then stand alone)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                        ctypes.c_int64)
        except (OSError, AttributeError):
            _libc = False
    if not _libc or size <= 0:
        return False
    if _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, start, size) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err))


def _check_room(fd: int, size: int) -> None:
    """Refuse a write the file system cannot take whole. A write that tears on a full disk
    is cut back, but a cut-back can fail too, and until the next write repairs it the file
    would hold a torn line; not starting such a write keeps every line whole (a record, or
    a gap marker) with nothing to repair. The free space is read as an unprivileged writer
    gets it (``f_bavail``); a file system that reports none (some network ones) is trusted
    to tell at write time."""
    try:
        st = os.fstatvfs(fd)
    except OSError:
        return
    if st.f_blocks and st.f_bavail * st.f_frsize < size:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (fewer than {size} bytes "
                                    "free for the next line)")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SinkHealth:
    """Whether one sink is writing, and how many records it lost. Logs once per change of
    state, not once per record: a full disk under load must not flood the log too."""

    def __init__(self, name: str, on_change: Callable[[str, bool], None] | None = None,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.failing = False
        self.lost = 0  # records this process could not write, all time
        self.lost_in_outage = 0  # lost since the sink last wrote
        self.unmarked = 0  # lost and not yet counted by a gap marker in the file
        self.since = ""
        self.error = ""
        self._on_change = on_change
        self._on_lost = on_lost

    def ok(self) -> None:
        if self.failing:
            log.warning("audit %s: writing again (%d record(s) lost since %s)", self.name,
                        self.lost_in_outage, self.since)
            self.failing = False
            self.lost_in_outage = 0
            if self._on_change:
                self._on_change(self.name, False)

    def failed(self, exc: BaseException) -> None:
        self.lost += 1
        self.lost_in_outage += 1
        self.unmarked += 1
        if self._on_lost:
            self._on_lost(self.name)
        if not self.failing:
            self.failing, self.since, self.error = True, _now(), str(exc)
            log.error("audit %s: cannot write (%s); records are counted as lost and writing "
                      "resumes by itself once it can", self.name, exc)
            if self._on_change:
                self._on_change(self.name, True)

    def status(self, lost_total: float, failing_elsewhere: bool) -> tuple[bool, str]:
        """Readiness detail. The loss is the sum over every worker (``lost_total``, from the
        metrics), so /readyz and /metrics agree whichever worker answers."""
        lost = f"{lost_total:.0f} record(s) lost by all workers"
        if self.failing:
            return False, f"cannot write since {self.since} ({self.error}); {lost}"
        if failing_elsewhere:
            return False, f"cannot write in another worker; {lost}"
        return True, f"writing ({lost} earlier)" if lost_total else "writing"


class _Sink:
    """One destination of audit records. A failure to write is never raised: it is counted
    and logged by the sink's health, and the next record simply tries again."""

    health: SinkHealth
    lock: _Lock

    def write(self, line: bytes) -> None:
        try:
            with self.lock:
                self._write_locked(line)
        except OSError as exc:
            self._after_failure()
            self.health.failed(exc)
            return
        self.health.ok()

    def _write_locked(self, line: bytes) -> None:
        raise NotImplementedError

    def _after_failure(self) -> None:
        """Undo what a failed write leaves behind (nothing, unless a sink says otherwise)."""

    def close(self) -> None:
        """Finish on a worker's exit (nothing to finish, unless a sink says otherwise)."""


class FileSink(_Sink):
    """A size-rotated log file that only ever holds whole records.

    A write that fails part way (a full disk) is cut back to where it started; the descriptor
    is dropped and reopened on the next record, so a directory that went read-only, or a
    file removed under us, is picked up again by itself. The first record after a failure is
    preceded by a gap marker that says how many records this worker lost and since when,
    which ``gpupool audit`` reports."""

    def __init__(self, path: str, max_bytes: int, backups: int,
                 health: SinkHealth | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.health = health or SinkHealth("file")
        self.lock = _Lock(_lock_name("file", os.path.abspath(path)))
        self._fd: int | None = None

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)

    def _write_locked(self, line: bytes) -> None:
        fd = self._live_fd()
        # A gap marker goes out in the same write as the record after it: both land, or
        # neither does and the marker is simply due again with the next record.
        data = _gap_marker(self.health) + line if self.health.unmarked else line
        start = _line_boundary(fd)
        if self.max_bytes and start + len(data) > self.max_bytes:
            fd, start = self._rotate(), 0
        self._append(fd, data, start)
        self.health.unmarked = 0

    def _after_failure(self) -> None:
        self._drop_fd()  # reopened on the next record: a remounted volume is picked up

    def _write_marker(self) -> bool:
        """Write the gap marker owed, alone; False while the file still cannot take it. A
        failure here loses no record, so it is not counted as one."""
        try:
            with self.lock:
                self._write_locked(b"")
        except OSError:
            self._after_failure()
            return False
        return True

    def retry(self) -> None:
        """An idle worker gets no record to find out that the file is writable again: until
        this, its sink stayed failing (readiness and ``gpupool_audit_sink_failing`` said so)
        and its gap marker unwritten for as long as no denial reached it.

        A healthy idle worker lets go of a file no longer at its path (rotated by another
        worker, or on a volume unmounted and mounted again): its descriptor would otherwise
        keep the old file system alive, so a lazy unmount never finishes and a remount of
        the same device comes back as the old, read-only file system for every worker."""
        if self.health.failing:
            if self._write_marker():
                self.health.ok()
            return
        with contextlib.suppress(OSError), self.lock:
            if self._fd is not None and not self._still_at_path(self._fd):
                self._drop_fd()

    def _append(self, fd: int, data: bytes, start: int) -> None:
        """Write at the end (``start``, a line boundary), only when the file system has room
        for all of it; a write that fails part way all the same (the room taken meanwhile by
        someone else) is cut back to it."""
        _check_room(fd, len(data))
        _reserve(fd, start, len(data))
        try:
            _write_all(fd, data)
        except OSError:
            with contextlib.suppress(OSError):  # no half record for the next to be glued to
                os.ftruncate(fd, start)
            raise

    def _live_fd(self) -> int:
        """Our descriptor, reopened if we had none or another process rotated the file."""
        if self._fd is not None and not self._still_at_path(self._fd):
            self._drop_fd()
        if self._fd is None:
            self._fd = self._open()
        return self._fd

    def _still_at_path(self, fd: int) -> bool:
        """Whether the path still names the file ``fd`` holds. The device counts as much as
        the inode: a volume mounted again holds the same inode numbers on a new device."""
        try:
            at_path, held = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)

    def _drop_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _rotate(self) -> int:
        for i in range(self.backups - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        if self.backups > 0:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.truncate(self.path, 0)
        self._drop_fd()
        self._fd = self._open()
        return self._fd

    def close(self) -> None:
        """Mark what this worker lost and has not marked yet: an idle worker may never get
        another record to carry its gap marker, and the file must not undercount its loss."""
        if self.health.unmarked:
            self._write_marker()
        self._drop_fd()


class StdoutSink(_Sink):
    """Standard output, shared by the workers: writes over PIPE_BUF (4 KiB) to a pipe may
    interleave, so a lock shared by the workers (named after their master) serialises whole
    records."""

    def __init__(self, health: SinkHealth | None = None, fd: int = 1) -> None:
        self.fd = fd
        self.health = health or SinkHealth("stdout")
        self.lock = _Lock(_lock_name("stdout", str(os.getppid())))

    def _write_locked(self, line: bytes) -> None:
        _write_all(self.fd, line)


def _gap_marker(health: SinkHealth) -> bytes:
    rec = {"audit": GAP_MARKER, "time": _now(), "lost": health.unmarked,
           "since": health.since, "error": health.error, "pid": os.getpid()}
    return (json.dumps(rec, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


class AuditLog:
    """Every sink gets every record; a sink that fails never stops the others, and never
    the admission reply: ``record`` does not raise."""

    def __init__(self, sinks: list[_Sink]) -> None:
        self.sinks = sinks

    @classmethod
    def from_config(cls, *, stdout: bool, path: str | None, max_bytes: int = 50 << 20,
                    backups: int = 5, on_change: Callable[[str, bool], None] | None = None,
                    on_lost: Callable[[str], None] | None = None) -> AuditLog:
        sinks: list[_Sink] = []
        if stdout:
            sinks.append(StdoutSink(SinkHealth("stdout", on_change, on_lost)))
        if path:
            sinks.append(FileSink(path, max_bytes, backups,
                                  SinkHealth("file", on_change, on_lost)))
        return cls(sinks)

    def wants(self, endpoint: str, decision: Decision, policy: Policy) -> bool:
        if not decision.allowed or decision.reason in (Reason.REPAIRED, Reason.ACCESS_VOIDED):
            return True  # denials, and pods gpupool changed beyond routing them
        return policy.audit_mutations and endpoint == "mutate" and bool(decision.patch)

    def record(self, endpoint: str, req: Request, decision: Decision, policy: Policy) -> None:
        if not self.sinks or not self.wants(endpoint, decision, policy):
            return
        rec = {"audit": "gpupool", **make_record(endpoint, req, decision)}
        line = (json.dumps(rec, separators=(",", ":"), ensure_ascii=True) + "\n").encode()
        for sink in self.sinks:
            try:
                sink.write(line)
            except Exception:  # a bug in a sink must not cost the reply either
                log.exception("audit sink failed unexpectedly")

    def start_retrying(self, interval: float = RETRY_SECONDS) -> None:
        """Every ``interval`` seconds, let a failing file sink try again on its own (in the
        background, as the policy file is watched), so a worker that gets no record still
        notices the file is writable again and writes the gap marker it owes."""
        for sink in self.sinks:
            if isinstance(sink, FileSink):  # writing nothing to stdout would prove nothing
                periodic.every(interval, f"audit {sink.health.name} retry", sink.retry)

    def close(self) -> None:
        """On a worker's exit: each sink finishes what it owes; none raises."""
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("audit sink failed to close")
