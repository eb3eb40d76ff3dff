"""Audit storage failing under a running server, on real file systems: an ext4 volume that
the kernel turns read-only on an error (``errors=remount-ro``, triggered through
``/sys/fs/ext4/<dev>/trigger_fs_error``; open descriptors then fail with EROFS, as on a node
whose disk reports an error), and a tiny tmpfs filled to the last byte. Mounting needs root,
which this machine's developers and CI have; elsewhere these tests skip, and say why. Where
loop devices are missing, a read-only tmpfs mounted over the directory stands in for the
ext4 error (the log's path then resolves to a read-only file system).

What must hold: every admission is answered at once whatever the disk does, the record still
reaches stdout, the file holds only whole records, the loss is counted (metrics, /readyz, gap
markers that ``gpupool audit`` reports), and writing resumes by itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from harness.kit import IN_CI, body, gpu_pod, wait_until
from harness.servers import start_server, stop_server
from webhook.server.audit import RETRY_SECONDS


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def tmpfs(tmp_path):
    """A fresh tmpfs of a given size; unmounted afterwards."""
    mounted: list[Path] = []

    def make(size: str) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        try:
            _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point))
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            if IN_CI:
                raise
            pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


class ReadOnlyFault:
    """A directory that can be made read-only under a running writer, and healed again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.point = root / "audit"
        self.point.mkdir()
        self.image = root / "audit.ext4"
        self.ext4 = True
        try:
            subprocess.run(["truncate", "-s", "16M", str(self.image)], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True,
                           capture_output=True, timeout=60)
            self._mount_image()
        except (subprocess.CalledProcessError, FileNotFoundError):
            self.ext4 = False
            _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(self.point))

    @property
    def log_dir(self) -> Path:
        """Where the log goes: on the volume, in a directory of its own, so that while the
        volume is unmounted the path names nothing (rather than the empty, writable mount
        point underneath, where a worker would write on and the file would never see it)."""
        return self.point / "logs" if self.ext4 else self.point

    def _mount_image(self) -> None:
        _mount("-o", "loop,errors=remount-ro", str(self.image), str(self.point))
        self.log_dir.mkdir(exist_ok=True)

    def break_(self) -> None:
        if self.ext4:
            # An emergency read-only drops what the page cache had not written back yet, as
            # on a real node; flush first so the records written before are there to check.
            subprocess.run(["sync", "-f", str(self.point)], check=True, timeout=30)
            dev = next(line.split()[0] for line in Path("/proc/mounts").read_text().splitlines()
                       if line.split()[1] == str(self.point))
            Path(f"/sys/fs/ext4/{Path(dev).name}/trigger_fs_error").write_text("gpupool test\n")
        else:
            _mount("-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(self.point))

    def heal(self) -> None:
        """As an operator would: unmount, check the volume once nothing holds it, mount it
        again. A lazy unmount finishes only when the last open file on it is closed; until
        then the loop device stays attached, and mounting the image again would reuse it and
        bring back the same read-only file system. So a server that keeps the old log open
        (an idle worker that never failed) fails the heal, with the holder named."""
        subprocess.run(["umount", "-l", str(self.point)], check=True, timeout=30)
        if not self.ext4:
            return
        deadline = time.monotonic() + 4 * RETRY_SECONDS
        while attached := subprocess.run(["losetup", "-j", str(self.image)], check=True,
                                         capture_output=True, text=True).stdout.strip():
            if time.monotonic() > deadline:
                raise AssertionError(f"the unmounted volume is still held open ({attached}): "
                                     "a worker kept the old audit file")
            time.sleep(0.2)
        subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, timeout=60)
        self._mount_image()

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.point)], capture_output=True, timeout=30)


@pytest.fixture
def readonly_fault(tmp_path):
    try:
        fault = ReadOnlyFault(tmp_path)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        if IN_CI:
            raise
        pytest.skip(f"cannot mount here (needs root): {exc}")
    yield fault
    fault.close()


def _denied_pod() -> dict:
    pod = gpu_pod("audit-fault")
    pod["metadata"]["labels"] = {"gpupool.io/pool": "no-such-pool"}
    return pod


def _deny(srv, uid: str) -> None:
    r = srv.post("mutate", body(_denied_pod(), uid=uid))  # 10 s client timeout
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["uid"] == uid and resp["allowed"] is False


def _allow(srv) -> None:
    r = srv.post("mutate", body(gpu_pod(), uid=str(uuid.uuid4())))
    assert r.status_code == 200 and r.json()["response"]["allowed"] is True


def _metric(srv, name: str, sink: str) -> float:
    text = requests.get(f"{srv.url}/metrics", verify=srv.ca, timeout=10).text
    m = re.search(rf'^{name}\{{sink="{sink}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _file_lines(path: Path) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]  # raises on a torn line: whole records only


def _uids(path: Path) -> list[str]:
    return [r["uid"] for r in _file_lines(path) if r.get("audit") == "gpupool"]


def _lost_by_markers(path: Path) -> int:
    return sum(r["lost"] for r in _file_lines(path) if r.get("audit") == "gpupool-gap")



def _recover(srv, audit: Path, tag: str) -> list[str]:
    """After the fault is healed: every worker finds the file writable again by itself, with
    no record sent (an idle worker used to stay failing until a denial reached it), and the
    records after that are written as before."""
    deadline = time.monotonic() + 12 * RETRY_SECONDS
    while _metric(srv, "gpupool_audit_sink_failing", "file") != 0:
        if time.monotonic() > deadline:  # what each worker says, to tell why
            ready = requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=10).text
            raise AssertionError(f"a worker's audit file sink did not recover:\n{ready}\n"
                                 f"{srv.log.read_text()[-4000:]}")
        time.sleep(0.5)
    sent = [f"{tag}-{i}" for i in range(5)]
    for uid in sent:
        _deny(srv, uid)
    return sent


def test_audit_directory_going_read_only_never_blocks_and_recovers(readonly_fault):
    audit = readonly_fault.log_dir / "audit.log"
    # A second replica on the same volume that writes once and then stays idle: it never
    # fails, and must still let go of the old file once the volume is unmounted.
    idle = start_server(readonly_fault.root / "idle", "--audit-file", str(audit), workers=1)
    srv = start_server(readonly_fault.root / "srv", "--audit-file", str(audit), workers=2,
                       audit_stdout=True)
    try:
        _deny(idle, "idle-before")
        for i in range(3):
            _deny(srv, f"before-{i}")
        readonly_fault.break_()
        during = [f"during-{i}" for i in range(20)]
        t0 = time.monotonic()
        for uid in during:
            _deny(srv, uid)
            _allow(srv)
        elapsed = time.monotonic() - t0
        health = requests.get(f"{srv.url}/healthz", verify=srv.ca, timeout=5)
        ready = requests.get(f"{srv.url}/readyz?verbose", verify=srv.ca, timeout=5)
        assert health.status_code == 200
        # "cannot write since <when> (<error>)" from a worker that failed, "cannot write in
        # another worker" from one whose requests all came before or after the fault
        assert ready.status_code == 200 and "[-]audit-file failed: cannot write " in ready.text
        assert f"{len(during)} record(s) lost by all workers" in ready.text
        assert _metric(srv, "gpupool_audit_records_lost_total", "file") == len(during)
        assert _metric(srv, "gpupool_audit_sink_failing", "file") == 1
        assert _metric(srv, "gpupool_audit_records_lost_total", "stdout") == 0
        assert elapsed < 20, f"40 reviews took {elapsed:.1f}s with the audit dir read-only"

        readonly_fault.heal()
        after = _recover(srv, audit, "after")
        assert _metric(srv, "gpupool_audit_sink_failing", "file") == 0
    finally:
        stop_server(srv)
        stop_server(idle)
    uids = _uids(audit)
    assert uids[:4] == ["idle-before", *(f"before-{i}" for i in range(3))]
    assert not set(during) & set(uids)  # none reached the read-only file...
    assert _lost_by_markers(audit) == len(during)  # ...and the file says so
    assert set(after) <= set(uids)  # nothing after recovery is lost
    log = srv.log.read_text()
    for uid in during:  # stdout had every record all along
        assert f'"uid":"{uid}"' in log
    # One log line per change of state and worker, not one per record.
    assert 1 <= log.count("audit file: cannot write") <= 2
    assert 1 <= log.count("audit file: writing again") <= 2
    assert "Traceback" not in log

    r = subprocess.run([sys.executable, "-m", "webhook", "audit", "--file", str(audit)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert f"{len(uids)} record(s)" in r.stdout
    assert "record(s) lost by worker" in r.stderr


def _fill(filler: Path, leave: int = 0) -> None:
    """Fill the file system ``filler`` is on to the last byte, then free ``leave`` bytes."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(filler.stat().st_size - leave, 0))


def test_full_audit_disk_keeps_whole_records_and_loses_nothing_after(tmpfs):
    fs = tmpfs("64k")
    audit = fs / "audit.log"
    srv = start_server(fs.parent / "srv", "--audit-file", str(audit), workers=2,
                       audit_stdout=True)
    filler = fs / "filler"
    try:
        _deny(srv, "first")
        record_size = audit.stat().st_size
        # Fill the disk, then free less than a record: the next write tears part way.
        _fill(filler, leave=4096)
        assert 4096 // record_size >= 1  # some records fit whole, then one tears
        full = [f"full-{i}" for i in range(3 * 8192 // record_size)]  # over what is free
        for uid in full:
            _deny(srv, uid)
        assert _metric(srv, "gpupool_audit_sink_failing", "file") == 1
        lost_counted = _metric(srv, "gpupool_audit_records_lost_total", "file")
        filler.unlink()
        after = _recover(srv, audit, "after")
    finally:
        stop_server(srv)
    uids = _uids(audit)  # parses every line: a torn record would raise here
    written_while_full = [u for u in full if u in uids]
    missing = [u for u in full if u not in uids]
    assert missing, "the disk never filled: the test did not test anything"
    assert len(missing) == lost_counted == _lost_by_markers(audit)
    assert set(after) <= set(uids)
    assert uids[0] == "first" and len(set(uids)) == len(uids)  # each record once
    assert written_while_full == full[:len(written_while_full)]  # loss only at the end
    log = srv.log.read_text()
    assert all(f'"uid":"{uid}"' in log for uid in full)  # stdout had them all
    assert "No space left on device" in log


def test_loss_a_worker_never_wrote_after_is_marked_when_it_stops(tmpfs):
    """Records lost on a full disk are marked in the file even when no record follows them
    in that worker: each worker writes what it owes as it stops, so the file's markers and
    the metric agree whichever worker the requests happened to reach."""
    fs = tmpfs("64k")
    audit = fs / "audit.log"
    srv = start_server(fs.parent / "srv", "--audit-file", str(audit), workers=2,
                       audit_stdout=False)
    try:
        _deny(srv, "first")
        record_size = audit.stat().st_size
        _fill(fs / "filler")
        sent = [f"full-{i}" for i in range(2 * 4096 // record_size)]  # past the last page
        for uid in sent:
            _deny(srv, uid)
        lost_counted = _metric(srv, "gpupool_audit_records_lost_total", "file")
        (fs / "filler").unlink()
    finally:
        stop_server(srv)
    uids = _uids(audit)
    lost = [u for u in sent if u not in uids]
    assert lost, "the disk never filled: the test did not test anything"
    assert len(lost) == lost_counted == _lost_by_markers(audit)


def test_filling_and_freeing_the_disk_under_load_leaves_no_torn_line(tmpfs):
    """The operator's way: denials keep coming from several clients while the audit volume
    fills up (to the last byte, or with a little room left, less than a line) and is freed
    again, three times. No line of any kind is torn (records and gap markers alike: every
    line parses), and every denial sent is either in the file or counted by a gap marker,
    whichever worker took it."""
    fs = tmpfs("1m")
    audit = fs / "audit.log"
    srv = start_server(fs.parent / "srv", "--audit-file", str(audit), workers=2,
                       audit_stdout=False)
    sent: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(n: int) -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            uid = f"c{n}-{i}"
            try:
                _deny(srv, uid)
            except BaseException as exc:
                errors.append(exc)
                return
            sent.append(uid)
            i += 1
            time.sleep(0.03)  # paced: the log itself must not fill the volume

    clients = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    try:
        for t in clients:
            t.start()
        for leave in (0, 300, 1500):  # full, then less than one line of room, then a few
            sent_before = len(sent)
            wait_until(lambda n=sent_before: len(sent) >= n + 10, "denials written while free")
            lost_before = _metric(srv, "gpupool_audit_records_lost_total", "file")
            _fill(fs / "filler", leave=leave)
            wait_until(lambda n=lost_before: _metric(
                srv, "gpupool_audit_records_lost_total", "file") >= n + 5,
                "denials lost while full")
            (fs / "filler").unlink()
        stop.set()
        for t in clients:
            t.join(30)
        _recover(srv, audit, "after")
        lost_counted = _metric(srv, "gpupool_audit_records_lost_total", "file")
    finally:
        stop.set()
        stop_server(srv)
    assert not errors, errors[:3]
    lines = audit.read_text().splitlines()
    torn = [line for line in lines if not line.startswith("{") or not line.endswith("}")]
    assert not torn, torn[:3]
    records = [json.loads(line) for line in lines]
    uids = [r["uid"] for r in records if r.get("audit") == "gpupool"]
    markers = sum(r["lost"] for r in records if r.get("audit") == "gpupool-gap")
    assert len(set(uids)) == len(uids)  # each record once
    assert lost_counted > 0, "the disk never filled: the test did not test anything"
    assert markers == lost_counted
    assert len(set(uids) & set(sent)) + markers == len(sent)  # each kept or accounted for
    assert "Traceback" not in srv.log.read_text()


def _fill_to_the_byte(filler: Path) -> None:
    """Fill as a user's filler does: 64 KiB writes until the file system refuses one, then
    4 KiB, then single bytes, so every byte a write can still take is taken."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_a_disk_filled_to_the_last_byte_never_leaves_a_torn_gap_marker(tmpfs):
    """Issue 46, item 7, in its exact sequence: an 8 MiB tmpfs filled to the last byte
    (64 KiB writes until ENOSPC, then 4 KiB, then single bytes), 20 denials through two
    workers, the filler removed, 10 denials more. The free-space check sees no free block,
    yet the audit file's last page can still take part of a line: whole or absent must hold
    for gap markers as for records, and every record after recovery is there."""
    fs = tmpfs("8m")
    audit = fs / "audit.log"
    srv = start_server(fs.parent / "srv", "--audit-file", str(audit), workers=2,
                       audit_stdout=False)
    try:
        _deny(srv, "first")
        _fill_to_the_byte(fs / "filler")
        full = [f"full-{i}" for i in range(20)]
        for uid in full:
            _deny(srv, uid)
        lost_counted = _metric(srv, "gpupool_audit_records_lost_total", "file")
        (fs / "filler").unlink()
        after = [f"after-{i}" for i in range(10)]
        for uid in after:
            _deny(srv, uid)
    finally:
        stop_server(srv)
    lines = audit.read_text().splitlines()
    torn = [line for line in lines if not line.startswith("{") or not line.endswith("}")]
    assert not torn, torn[:3]
    uids = _uids(audit)
    assert set(after) <= set(uids), [u for u in after if u not in uids]
    assert lost_counted > 0, "the disk never filled: the test did not test anything"
    assert len([u for u in full if u not in uids]) == lost_counted == _lost_by_markers(audit)


def test_a_line_the_last_page_cannot_take_whole_is_not_started(tmpfs, monkeypatch):
    """On a real tmpfs filled to the last byte, the audit file's last page still has room
    for part of a line. Even where the free-space count is wrong (a test double says there
    is room, as when it is taken between the count and the write) and the cut-back fails
    too (a double), no byte of the line is written: the file system is asked to reserve the
    line's blocks first, and refuses."""
    from webhook.server import audit as audit_mod
    from webhook.server.audit import FileSink, SinkHealth

    fs = tmpfs("1m")
    path = fs / "audit.log"
    sink = FileSink(str(path), max_bytes=0, backups=0, health=SinkHealth("file"))
    sink.write(b'{"audit":"gpupool","uid":"before"}\n')
    _fill_to_the_byte(fs / "filler")
    real = os.fstatvfs

    def roomy(fd: int) -> os.statvfs_result:  # test double: the count says there is room
        fields = list(real(fd))
        fields[4] = 1 << 20
        return os.statvfs_result(fields)

    def no_cut_back(fd: int, length: int) -> None:  # test double: the cut-back fails
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(audit_mod.os, "fstatvfs", roomy)
    monkeypatch.setattr(audit_mod.os, "ftruncate", no_cut_back)
    before = path.read_bytes()
    line = b'{"audit":"gpupool","uid":"' + b"x" * 8000 + b'"}\n'  # past the last page
    sink.write(line)
    assert sink.health.failing and sink.health.unmarked == 1
    assert path.read_bytes() == before  # not one byte of it
    monkeypatch.undo()
    (fs / "filler").unlink()
    sink.write(b'{"audit":"gpupool","uid":"after"}\n')
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r.get("uid") for r in records] == ["before", None, "after"]
    assert records[1]["lost"] == 1
