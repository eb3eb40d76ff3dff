"""The audit log of rejections: one JSON line per denial, to stdout and/or a rotated file.

Several gunicorn workers, each with several threads, write at once. Each record is a single
``write(2)`` of one complete line to a descriptor opened with O_APPEND, done under an
``flock`` that also serialises rotation, so records are never interleaved, lost to a
rename, or written twice.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import tempfile
import threading
from typing import Any

from webhook.engine.decision import Decision
from webhook.engine.policy import Policy
from webhook.server.review import Request


def make_record(endpoint: str, req: Request, decision: Decision) -> dict[str, Any]:
    return {
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "uid": req.uid,
        "dryRun": req.dry_run,
        "endpoint": endpoint,
        "operation": req.operation,
        "namespace": req.namespace or "",
        "kind": req.kind,
        "name": req.obj_name,
        "owner": req.owner,
        "user": req.user,
        "groups": req.groups,
        "decision": "allowed" if decision.allowed else "denied",
        "pool": decision.pool or "",
        "reason": decision.reason,
        "message": decision.message,
        "nodes": [n.to_json() for n in decision.nodes],
        "patch": decision.patch if decision.allowed else [],
    }


class _Lock:
    """Exclusive across threads and worker processes. Each holder opens the lock file itself:
    flock on a descriptor inherited through fork would be shared, and exclude nothing."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.Lock()

    def __enter__(self) -> None:
        self._local.acquire()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o640)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._local.release()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _FileSink:
    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.lock = _Lock(path + ".lock")
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def write(self, line: bytes) -> None:
        with self.lock:
            self._follow_rotation()
            if self.max_bytes and os.fstat(self._fd).st_size + len(line) > self.max_bytes:
                self._rotate()
            _write_all(self._fd, line)

    def _follow_rotation(self) -> None:
        """Another process rotated the file: reopen so we write to the live one."""
        try:
            same = os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(self._fd)
            self._fd = self._open()

    def _rotate(self) -> None:
        for i in range(self.backups - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        if self.backups > 0:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.truncate(self.path, 0)
        os.close(self._fd)
        self._fd = self._open()

    def close(self) -> None:
        os.close(self._fd)


class AuditLog:
    def __init__(self, stdout: bool = True, file_sink: _FileSink | None = None) -> None:
        self.stdout = stdout
        self.file = file_sink
        self.written = 0
        # Workers share one stdout pipe, and writes over PIPE_BUF (4 KiB) to a pipe may
        # interleave: a lock file shared by the workers (named after their master) serialises
        # whole records.
        self.stdout_lock = _Lock(os.path.join(tempfile.gettempdir(),
                                              f"gpupool-audit-{os.getppid()}.lock"))

    @classmethod
    def from_config(cls, *, stdout: bool, path: str | None, max_bytes: int = 50 << 20,
                    backups: int = 5) -> AuditLog:
        return cls(stdout=stdout, file_sink=_FileSink(path, max_bytes, backups) if path else None)

    def wants(self, endpoint: str, decision: Decision, policy: Policy) -> bool:
        if not decision.allowed:
            return True
        return policy.audit_mutations and endpoint == "mutate" and bool(decision.patch)

    def record(self, endpoint: str, req: Request, decision: Decision, policy: Policy) -> None:
        if not self.wants(endpoint, decision, policy):
            return
        rec = {"audit": "gpupool", **make_record(endpoint, req, decision)}
        line = (json.dumps(rec, separators=(",", ":"), ensure_ascii=True) + "\n").encode()
        if self.stdout:
            with self.stdout_lock:
                _write_all(1, line)
        if self.file is not None:
            self.file.write(line)
        self.written += 1
