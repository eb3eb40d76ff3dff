"""What each pod on a node holds: read from the kubelet's checkpoint
(``webhook.node.kubelet.held_devices``), published within its budget
(``webhook.api.held``), and written only when it changed (``agent.Publisher``). The
checkpoints here are built as the kubelet builds them: the allocate response protobuf-encoded
(k8s.io/kubelet ``deviceplugin/v1beta1`` ``ContainerAllocateResponse``) and base64 in the
JSON; ``tests/integration/test_kubelet_checkpoint.py`` reads ones the kubelet's own code
wrote."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from harness.layouts import UUIDS, write_layout
from webhook.api.held import MAX_BYTES, PLAIN_BYTES, Held, HeldDevices, HeldError, parse_held
from webhook.node.agent import Observer, Publisher
from webhook.node.kubelet import CheckpointError, alloc_response, held_devices


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (the lengths here stay below 128)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _entry(k: str, v: str) -> bytes:
    return _field(1, k.encode()) + _field(2, v.encode())


def response(envs: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             cdi: tuple[str, ...] = (), mounts: int = 0) -> bytes:
    out = b"".join(_field(1, _entry(k, v)) for k, v in (envs or {}).items())
    out += b"".join(_field(2, _field(1, b"/c") + _field(2, b"/h") + b"\x18\x01")
                    for _ in range(mounts))
    out += b"".join(_field(4, _entry(k, v)) for k, v in (annotations or {}).items())
    out += b"".join(_field(5, _field(1, n.encode())) for n in cdi)
    return out


def checkpoint(path, entries: list[dict]) -> str:
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": entries,
                                         "RegisteredDevices": {}}, "Checksum": 1}))
    return str(path)


def entry(uid: str, resp: bytes, resource: str = "nvidia.com/gpu",
          ids: tuple[str, ...] = (UUIDS[0],), container: str = "main") -> dict:
    return {"PodUID": uid, "ContainerName": container, "ResourceName": resource,
            "DeviceIDs": {"-1": list(ids)}, "AllocResp": base64.b64encode(resp).decode()}


def test_each_strategy_s_answer_is_read_as_the_runtime_gets_it(tmp_path):
    name = f"k8s.device-plugin.nvidia.com/gpu={UUIDS[1]}"
    path = checkpoint(tmp_path / "cp", [
        entry("u1", response(envs={"NVIDIA_VISIBLE_DEVICES": UUIDS[0], "CUDA_X": "1"},
                             mounts=2)),
        entry("u2", response(cdi=(name,)), ids=(UUIDS[1],)),
        entry("u3", response(annotations={"cdi.k8s.io/nvidia-device-plugin_ab": name,
                                          "other.io/x": "y"}), ids=(f"{UUIDS[1]}::3",)),
        entry("u4", response(mounts=1), resource="nvidia.com/mig-1g.10gb"),
        entry("u5", response(envs={"RDMA": "1"}), resource="rdma/hca")])
    held = held_devices(path)
    assert not held.error
    assert held.pods["u1"] == (Held("main", "nvidia.com/gpu", (UUIDS[0],), UUIDS[0]),)
    assert held.pods["u2"][0].cdi_names == (name,)
    assert held.pods["u3"][0].cdi_names == (name,) and held.pods["u3"][0].ids == (
        f"{UUIDS[1]}::3",)
    assert held.pods["u3"][0].annotations == {"cdi.k8s.io/nvidia-device-plugin_ab": name}
    assert held.pods["u4"][0].other  # device nodes or mounts only: not judged
    assert "u5" not in held.pods  # another vendor's resource that names no NVIDIA device


def test_no_checkpoint_holds_nothing_and_a_bad_one_is_an_error_for_the_node(tmp_path):
    assert held_devices(str(tmp_path / "absent")) == HeldDevices({})
    bad = held_devices(checkpoint(tmp_path / "cp", [
        entry("u1", response(envs={"NVIDIA_VISIBLE_DEVICES": UUIDS[0]})),
        {"PodUID": "u2", "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"-1": [UUIDS[1]]}, "AllocResp": base64.b64encode(b"\x0a\x7f").decode()}]))
    assert bad.pods == {} and "PodDeviceEntries[1]" in bad.error and "truncated" in bad.error
    (tmp_path / "junk").write_text("{not json")
    assert "not JSON" in held_devices(str(tmp_path / "junk")).error


@pytest.mark.parametrize("blob, why", [(b"\x0f", "wire type"), (b"\x0a\x05ab", "truncated"),
                                       (b"\x0a\x02\x0a\xff", "truncated")])
def test_answers_that_are_not_protobuf_are_refused(blob, why):
    with pytest.raises(CheckpointError, match=why):
        alloc_response(blob)


def _busy(pods: int, gpus_each: int, names: bool) -> HeldDevices:
    gpus = [f"GPU-{uuid.UUID(int=g)}" for g in range(8)]
    out = {}
    for p in range(pods):
        ids = tuple(f"{gpus[(p + k) % 8]}::{p % 10}" for k in range(gpus_each))
        plain = tuple(i.split("::")[0] for i in ids)
        out[str(uuid.UUID(int=p + 1000))] = (Held(
            "main", "nvidia.com/gpu", ids, ",".join(plain),
            tuple(f"k8s.device-plugin.nvidia.com/gpu={u}" for u in plain) if names else ()),)
    return HeldDevices(out, observed_at="2026-12-06T08:00:00Z")


def test_a_full_node_fits_its_budget_and_reads_back_whole():
    """110 pods on an 8-GPU node (the kubelet's default pod limit), each time-sliced: plain
    JSON while it is small, compressed when not, never over the budget, never a pod lost
    while it fits."""
    one = _busy(110, 1, names=False)
    text = one.dumps()
    assert len(text) <= PLAIN_BYTES and text.startswith("{") and '"pods"' in text
    assert parse_held(text).pods == one.pods
    full = _busy(110, 8, names=True)  # every pod on every GPU, handed both ways
    text = full.dumps()
    assert len(text) <= MAX_BYTES and '"gzip+base64"' in text
    back = parse_held(text)
    assert back.pods == full.pods and not back.left_out


def test_pods_beyond_the_budget_are_left_out_and_named():
    over = _busy(2000, 8, names=True)
    text = over.dumps()
    assert len(text) <= MAX_BYTES
    back = parse_held(text)
    assert back.left_out and set(back.left_out) | set(back.pods) == set(over.pods)


@pytest.mark.parametrize("text, why", [
    ("[]", "JSON object"), ('{"schemaVersion": 2}', "schemaVersion"),
    ('{"schemaVersion": 1, "pods": {"u": [{"container": 1}]}}', "container and resource"),
    ('{"schemaVersion": 1, "encoding": "gzip+base64", "data": "!!"}', "gzip"),
])
def test_an_unreadable_annotation_is_an_error(text, why):
    with pytest.raises(HeldError, match=why):
        parse_held(text)


class HeldClient:
    def __init__(self) -> None:
        self.value: str | None = None
        self.held: str | None = None
        self.writes: list[str] = []

    def get_state(self):
        return self.value, {}

    def set_state(self, value, labels):
        self.value = value
        self.writes.append("inventory")

    def get_held(self):
        return self.held

    def set_held(self, value):
        self.held = value
        self.writes.append("held")


def test_the_agent_writes_what_pods_hold_only_when_it_changes(tmp_path):
    paths = write_layout(tmp_path, "operator-management")
    cp = tmp_path / "kubelet_internal_checkpoint"
    checkpoint(cp, [entry("u1", response(envs={"NVIDIA_VISIBLE_DEVICES": UUIDS[0]}))])
    obs = Observer([str(paths["etc"]), str(paths["run"])], str(paths["config"]),
                   str(paths["containerd"]), driver_gpus_dir=None, kubelet_checkpoint=str(cp))
    client = HeldClient()
    pub = Publisher(client)
    assert pub.publish_held(obs.held())
    assert parse_held(client.held).pods["u1"][0].visible_devices == UUIDS[0]
    for _ in range(3):  # observedAt moves, nothing else: no write
        assert not pub.publish_held(obs.held())
    assert not Publisher(client).publish_held(obs.held())  # a restarted agent, too
    checkpoint(cp, [entry("u1", response(envs={"NVIDIA_VISIBLE_DEVICES": UUIDS[0]})),
                    entry("u2", response(envs={"NVIDIA_VISIBLE_DEVICES": UUIDS[1]}),
                          ids=(UUIDS[1],))])
    assert pub.publish_held(obs.held())  # a pod started
    assert client.writes == ["held", "held"]
    assert set(parse_held(client.held).pods) == {"u1", "u2"}
