"""The node agent over the three real layouts, half-written and replaced files, and
publishing only on change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from harness.layouts import UUIDS, per_uuid_spec, write_layout
from webhook.api.inventory import parse_inventory
from webhook.node.agent import Observer, Publisher, run


def observer_for(paths, **kw) -> Observer:
    return Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                    str(paths["containerd"]), **kw)


@pytest.mark.parametrize("layout,kinds,default_kind", [
    ("operator-management", {"management.nvidia.com/gpu": ["all"]}, "management.nvidia.com/gpu"),
    ("device-plugin", {"management.nvidia.com/gpu": ["all"],
                       "k8s.device-plugin.nvidia.com/gpu": sorted(UUIDS)},
     "management.nvidia.com/gpu"),
    ("nvidia-ctk", {"nvidia.com/gpu": sorted(["0", "1", "all", *UUIDS])}, "nvidia.com/gpu"),
])
def test_agent_once_print_over_real_layouts(tmp_path, layout, kinds, default_kind):
    paths = write_layout(tmp_path, layout)
    r = subprocess.run([sys.executable, "-m", "webhook", "agent", "--once", "--print",
                        "--cdi-dir", str(paths["etc"]), "--cdi-dir", str(paths["run"]),
                        "--runtime-config", str(paths["config"]),
                        "--containerd-config", str(paths["containerd"])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    inv = parse_inventory(r.stdout.strip())
    assert {k: sorted(v) for k, v in inv.kinds.items()} == kinds
    assert inv.runtime.mode == "cdi" and inv.runtime.default_kind == default_kind
    assert inv.errors == () and inv.observed_at.endswith("Z")
    assert json.loads(r.stdout)["schemaVersion"] == 1


def test_broken_file_reported_and_scan_goes_on(tmp_path):
    paths = write_layout(tmp_path, "device-plugin")
    (paths["run"] / "garbage.yaml").write_text("cdiVersion: [\n")
    (paths["run"] / "ignored.yml").write_text("not even looked at")
    inv = observer_for(paths, settle_seconds=0).observe()
    assert "k8s.device-plugin.nvidia.com/gpu" in inv.kinds
    (path, reason), = inv.errors
    assert path.endswith("garbage.yaml") and "not valid YAML" in reason


def test_later_directory_wins_and_same_directory_conflicts_drop(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    (paths["etc"] / "a.yaml").write_text(per_uuid_spec("vendor.com/dev", UUIDS[:1]))
    (paths["run"] / "b.yaml").write_text(per_uuid_spec("vendor.com/dev", UUIDS[:1]))
    (paths["run"] / "c1.yaml").write_text(per_uuid_spec("other.com/dev", UUIDS))
    (paths["run"] / "c2.yaml").write_text(per_uuid_spec("other.com/dev", UUIDS[1:]))
    inv = observer_for(paths).observe()
    assert inv.kinds["vendor.com/dev"] == {UUIDS[0]}  # defined in both dirs: no conflict
    assert inv.kinds["other.com/dev"] == {UUIDS[0]}  # UUIDS[1] conflicts within one dir
    assert sum("conflicting device other.com/dev" in r for _, r in inv.errors) == 2


def test_half_written_file_keeps_last_good_state(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    spec = paths["run"] / "management.nvidia.com-gpu-uuid.yaml"
    spec.write_text(per_uuid_spec())
    obs = observer_for(paths, settle_seconds=30)
    assert obs.observe().kinds["management.nvidia.com/gpu"] == {"all", *UUIDS}
    spec.write_text(per_uuid_spec()[:60])  # a writer mid-way through the file
    inv = obs.observe()
    assert inv.kinds["management.nvidia.com/gpu"] == {"all", *UUIDS}
    assert obs.pending and inv.errors == ()
    # Still broken once it has settled: reported, and its devices are gone, as for the runtime.
    old = time.time() - 60
    os.utime(spec, (old, old))
    inv = obs.observe()
    assert inv.kinds["management.nvidia.com/gpu"] == {"all"}
    assert inv.errors and inv.errors[0][0] == str(spec)


class RecordingNodeClient:
    """Test double for the Node API: records writes; can fail the first N calls."""

    def __init__(self, fail: int = 0) -> None:
        self.value: str | None = None
        self.labels: dict[str, str | None] = {}
        self.writes: list[str] = []
        self.fail = fail
        self.lock = threading.Lock()

    def get_state(self):
        if self.fail:
            self.fail -= 1
            raise ConnectionError("apiserver unavailable")
        return self.value, {k: v for k, v in self.labels.items() if v is not None}

    def set_state(self, value, labels):
        with self.lock:
            self.value = value
            self.labels.update(labels)
            self.writes.append(value)


def test_publish_only_on_change_and_retry_with_backoff(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    client = RecordingNodeClient(fail=2)
    sleeps: list[float] = []
    pub = Publisher(client, sleep=sleeps.append)
    obs = observer_for(paths)
    assert pub.publish(obs.observe())
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.5  # backed off, then succeeded
    for _ in range(5):
        assert not pub.publish(obs.observe())  # observedAt changes, content does not
    assert len(client.writes) == 1
    # A restarted agent finds its own annotation already current: still no write.
    fresh = Publisher(client)
    assert not fresh.publish(obs.observe()) and len(client.writes) == 1


def test_steering_labels_published_with_the_inventory_and_flip_when_fixed(tmp_path):
    from harness.layouts import fake_driver

    paths = write_layout(tmp_path, "operator-management")
    client = RecordingNodeClient()
    obs = observer_for(paths, driver_gpus_dir=str(fake_driver(tmp_path / "drv")))
    pub = Publisher(client)
    assert pub.publish(obs.observe())
    assert client.labels == {"resolve.gpupool.io/detected": "false",
                             "resolve.gpupool.io/visible-devices": "false",
                             "resolve.gpupool.io/cdi-devices": "false"}
    broken = parse_inventory(client.value)
    assert broken.resolves == {"visibleDevices": (), "cdiDevices": ()}
    (paths["run"] / "per-uuid.yaml").write_text(per_uuid_spec(uuids=UUIDS[:1]))
    assert pub.publish(obs.observe())  # a partial spec: one GPU resolves, the node is unready
    assert parse_inventory(client.value).resolves["visibleDevices"] == UUIDS[:1]
    assert client.labels["resolve.gpupool.io/visible-devices"] == "false"
    (paths["run"] / "per-uuid.yaml").write_text(per_uuid_spec())
    assert pub.publish(obs.observe())
    assert client.labels["resolve.gpupool.io/detected"] == "true"
    assert client.labels["resolve.gpupool.io/visible-devices"] == "true"
    # An agent that finds the annotation current but its labels missing (an upgrade from a
    # release without them) writes once.
    client.labels.clear()
    assert Publisher(client).publish(obs.observe()) and len(client.writes) == 4
    # Without the driver's list the node's GPUs are unknown: the labels are removed, not
    # left claiming what is no longer known.
    blind = observer_for(paths, driver_gpus_dir=str(tmp_path / "absent"))
    assert pub.publish(blind.observe())
    assert {k: v for k, v in client.labels.items() if v is not None} == {}


def test_watched_directory_replaced_file_republishes(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    client = RecordingNodeClient()
    stop = threading.Event()
    obs = observer_for(paths, settle_seconds=1)
    t = threading.Thread(target=run, args=(obs, Publisher(client)),
                         kwargs={"poll_interval": 30, "stop": stop}, daemon=True)
    t.start()
    try:
        _wait(lambda: len(client.writes) == 1)
        # Replace the management spec atomically, as a tool writing a temp file and renaming.
        tmp = paths["run"] / ".tmp-spec"
        tmp.write_text(per_uuid_spec())
        os.replace(tmp, paths["run"] / "management.nvidia.com-gpu.yaml")
        _wait(lambda: len(client.writes) == 2, timeout=10)  # well before the 30s poll
        inv = parse_inventory(client.value)
        assert inv.kinds["management.nvidia.com/gpu"] == set(UUIDS)
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()


def _wait(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)
