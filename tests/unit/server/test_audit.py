"""The audit file holds only whole lines, whatever a failed write leaves behind."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

from webhook.server import audit
from webhook.server.audit import FileSink, SinkHealth


def _record(uid: str, pad: int = 200) -> bytes:
    return (json.dumps({"audit": "gpupool", "uid": uid, "pad": "x" * pad}) + "\n").encode()


def _full_disk(fd: int, data: bytes) -> int:
    """A test double of ``os.write`` on a full disk."""
    raise OSError(errno.ENOSPC, "No space left on device")


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # raises if torn


def test_a_gap_marker_is_never_glued_to_a_tail_a_failed_write_left(tmp_path, monkeypatch):
    """A disk that fills mid-record and then also refuses the cut-back (ftruncate) leaves half
    a record at the end of the file. The next write must start on a fresh line: the marker and
    the record after it are whole, and the half record is gone."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))

    real_write, real_ftruncate = os.write, os.ftruncate

    def half_then_full(fd: int, data) -> int:  # a test double of a filling disk
        if len(data) > 100:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    def refuse(fd: int, length: int) -> None:  # a test double of a cut-back that fails
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(audit.os, "write", half_then_full)
    monkeypatch.setattr(audit.os, "ftruncate", refuse)
    sink.write(_record("lost"))
    assert sink.health.failing and sink.health.unmarked == 1
    assert not path.read_bytes().endswith(b"\n")  # the tear the next write must not keep

    monkeypatch.setattr(audit.os, "write", real_write)
    monkeypatch.setattr(audit.os, "ftruncate", real_ftruncate)
    sink.write(_record("after"))
    lines = _lines(path)
    assert [r.get("uid") for r in lines] == ["before", None, "after"]
    assert lines[1]["audit"] == audit.GAP_MARKER and lines[1]["lost"] == 1
    assert not sink.health.failing and sink.health.unmarked == 0


def test_a_marker_is_written_only_with_the_record_after_it(tmp_path, monkeypatch):
    """While the disk stays full the marker is not written alone: it is due again, with the
    next record, and counts every record lost until then."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))
    real_write = os.write
    calls = []

    def full(fd: int, data) -> int:  # a test double of a full disk
        calls.append(bytes(data))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(audit.os, "write", full)
    for i in range(3):
        sink.write(_record(f"lost-{i}"))
    assert len(calls) == 3
    assert all(c.startswith(b'{"audit":"gpupool-gap"') for c in calls[1:])  # marker + record
    assert all(c.count(b"\n") == 2 for c in calls[1:])
    monkeypatch.setattr(audit.os, "write", real_write)
    sink.write(_record("after"))
    lines = _lines(path)
    assert [r.get("uid") for r in lines] == ["before", None, "after"]
    assert lines[1]["lost"] == 3


def test_a_tail_left_by_a_killed_writer_is_cut_before_the_next_line(tmp_path):
    path = tmp_path / "audit.log"
    path.write_bytes(_record("whole") + b'{"audit":"gpupool","uid":"kil')
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("next", pad=70_000))  # longer than one read-back chunk
    assert [r["uid"] for r in _lines(path)] == ["whole", "next"]


def test_a_worker_that_lost_records_marks_them_when_it_closes(tmp_path, monkeypatch):
    """A worker that gets no record after the disk frees up still owes the file its gap
    marker: closing writes it alone, so the file never undercounts what was lost."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))
    real_write = os.write

    monkeypatch.setattr(audit.os, "write", _full_disk)
    sink.write(_record("lost-0"))
    sink.write(_record("lost-1"))
    sink.close()  # still full: the marker cannot be written and closing does not raise
    monkeypatch.setattr(audit.os, "write", real_write)
    sink.close()
    lines = _lines(path)
    assert [r.get("uid") for r in lines] == ["before", None]
    assert lines[1]["audit"] == audit.GAP_MARKER and lines[1]["lost"] == 2
    assert sink.health.unmarked == 0
    sink.close()  # nothing owed: nothing written
    assert len(_lines(path)) == 2


def test_a_failing_file_sink_recovers_by_itself_without_a_record(tmp_path, monkeypatch):
    """An idle worker gets no record to find out that the disk has room again: retrying
    writes the gap marker it owes alone and ends the failing state, while a retry that still
    fails loses no record and counts none."""
    path = tmp_path / "audit.log"
    changes: list[tuple[str, bool]] = []
    sink = FileSink(str(path), max_bytes=0, backups=0,
                    health=SinkHealth("file", on_change=lambda n, f: changes.append((n, f))))
    sink.write(_record("before"))
    real_write = os.write

    monkeypatch.setattr(audit.os, "write", _full_disk)
    sink.write(_record("lost-0"))
    sink.retry()  # still full
    assert sink.health.failing and sink.health.lost == 1 and sink.health.unmarked == 1
    monkeypatch.setattr(audit.os, "write", real_write)
    sink.retry()
    assert not sink.health.failing and sink.health.unmarked == 0
    assert changes == [("file", True), ("file", False)]
    lines = _lines(path)
    assert [r.get("uid") for r in lines] == ["before", None]
    assert lines[1]["audit"] == audit.GAP_MARKER and lines[1]["lost"] == 1
    sink.retry()  # not failing: nothing to write
    assert len(_lines(path)) == 2


def _holds(path: Path) -> bool:
    """Whether this process has ``path``'s file open (deleted or not)."""
    target = os.stat(path)
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def test_an_idle_healthy_sink_lets_go_of_a_file_no_longer_at_its_path(tmp_path):
    """A worker that wrote once and then got no record must not keep the old file open for
    ever: on a volume unmounted lazily that descriptor keeps the old (read-only) file
    system alive, and mounting the device again brings that one back for every worker."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))
    moved = tmp_path / "audit.log.old"
    os.rename(path, moved)
    assert _holds(moved)
    sink.retry()
    assert not _holds(moved), "the idle sink still holds the file that left its path"
    sink.write(_record("after"))
    assert [r["uid"] for r in _lines(path)] == ["after"]
    assert [r["uid"] for r in _lines(moved)] == ["before"]
    sink.retry()  # the file at the path is its own: kept
    assert _holds(path)
    sink.close()


def test_the_same_inode_on_another_device_is_another_file(tmp_path, monkeypatch):
    """A volume mounted again holds the same inode numbers on a new device: the sink must
    not keep writing to the old one (read-only there, so each record would be lost)."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))
    real_stat = os.stat

    def remounted(p, *args, **kwargs):
        st = real_stat(p, *args, **kwargs)
        if str(p) != str(path):
            return st
        fields = list(st)
        fields[2] += 1  # st_dev
        return os.stat_result(fields)

    monkeypatch.setattr(audit.os, "stat", remounted)
    sink.retry()
    monkeypatch.setattr(audit.os, "stat", real_stat)
    assert not _holds(path)
    sink.close()


def test_the_audit_log_retries_its_failing_sinks_in_the_background(tmp_path, monkeypatch):
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    log = audit.AuditLog([audit.StdoutSink(fd=os.open(os.devnull, os.O_WRONLY)), sink])
    real_write = os.write

    monkeypatch.setattr(audit.os, "write", _full_disk)
    sink.write(_record("lost-0"))
    monkeypatch.setattr(audit.os, "write", real_write)
    log.start_retrying(interval=0.02)
    deadline = time.monotonic() + 10
    while sink.health.failing:
        assert time.monotonic() < deadline, "the failing sink was not retried"
        time.sleep(0.02)
    assert _lines(path)[-1]["lost"] == 1


def test_no_write_starts_that_the_file_system_cannot_take_whole(tmp_path, monkeypatch):
    """With less room than a line needs, nothing is written at all (no partial line to cut
    back, so none to leave behind if the cut-back failed too); the loss is owed to the next
    marker, which goes out whole with the first record that fits."""
    path = tmp_path / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(_record("before"))
    real_statvfs = os.fstatvfs
    room = {"bytes": 100}

    def small_disk(fd: int) -> os.statvfs_result:  # a test double of a nearly full disk
        st = real_statvfs(fd)
        fields = list(st)
        fields[4] = room["bytes"] // st.f_frsize  # f_bavail, in fragments
        return os.statvfs_result(fields)

    monkeypatch.setattr(audit.os, "fstatvfs", small_disk)
    written = path.read_bytes()
    sink.write(_record("lost-1"))
    sink.write(_record("lost-2"))
    assert path.read_bytes() == written  # not one byte of either
    assert sink.health.failing and sink.health.unmarked == 2
    assert "fewer than" in sink.health.error
    room["bytes"] = 1 << 20
    sink.write(_record("after"))
    lines = _lines(path)
    assert [r.get("uid") for r in lines] == ["before", None, "after"]
    assert lines[1]["lost"] == 2 and not sink.health.failing
