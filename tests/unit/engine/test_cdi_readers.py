"""A CDI spec newer than the node's containerd reads: containerd resolves CDI names with the
CDI library it was built with, which refuses a newer file whole (toolkit #1860, #1940: the
toolkit's 0.7.0 specs with ``additionalGids`` on containerd before 1.7.16), so the devices
only that file defines are missing there, at admission and at a restart. The NVIDIA runtime
in ``cdi`` mode resolves with its own library. What each library release reads is judged by
the real libraries in tests/integration/test_cdi_libraries.py."""

from __future__ import annotations

import json
from pathlib import Path

from harness.kit import gpu_pod, hold
from harness.layouts import UUIDS
from tests.plugincases import operator_learned
from tests.unit.engine.test_containerd_cdi_off import cdi_off
from tests.unit.engine.test_steering import agent_node, decide
from webhook.api import cdireaders
from webhook.api.inventory import parse_inventory
from webhook.engine import Outcome, view_from_objects
from webhook.engine.aftercare.podrisk import recheck
from webhook.engine.core.decision import Reason
from webhook.files.policyfile import default_policy

PLUGIN_SPEC = "k8s.device-plugin.nvidia.com-gpu.json"
PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"


def toolkit_0_7(run: Path) -> None:
    """The device plugin's per-GPU spec as a toolkit that adds ``additionalGids`` writes it:
    version 0.7.0, the first that knows the field."""
    spec = json.loads((run / PLUGIN_SPEC).read_text())
    spec["cdiVersion"] = "0.7.0"
    spec["containerEdits"]["additionalGids"] = [44]
    (run / PLUGIN_SPEC).write_text(json.dumps(spec))


def node(tmp_path: Path, runtime_version: str | None, strategy: str = "cdi-cri",
         **kw) -> dict:
    return agent_node(tmp_path / "op-1", "op-1", None, "device-plugin", register=False,
                      plugins=operator_learned(strategy, "op-1"), specs=toolkit_0_7,
                      runtime_version=runtime_version, **kw)


def test_each_containerd_release_reads_the_spec_versions_of_its_cdi_library():
    reads = {v: cdireaders.containerd_reader(v) for v in (
        "containerd://1.7.0", "containerd://1.7.13", "containerd://1.7.13-k3s1",
        "containerd://1.7.16", "containerd://v1.7.27", "containerd://2.0.0",
        "containerd://2.0.5", "containerd://2.2.1")}
    assert {v: r and r.reads for v, r in reads.items()} == {
        "containerd://1.7.0": "0.5.0", "containerd://1.7.13": "0.6.0",
        "containerd://1.7.13-k3s1": "0.6.0", "containerd://1.7.16": "0.7.0",
        "containerd://v1.7.27": "0.8.0", "containerd://2.0.0": "0.8.0",
        "containerd://2.0.5": "1.0.0", "containerd://2.2.1": "1.1.0"}
    # another runtime, a release before CDI, a value in no known form: no rule
    for other in ("cri-o://1.31.2", "containerd://1.6.33", "docker://27.1", "", None):
        assert cdireaders.containerd_reader(other) is None
    assert cdireaders.first_reading("0.7.0") == "1.7.16"


def test_the_agent_publishes_what_a_reader_of_each_older_version_resolves(tmp_path):
    n = node(tmp_path, None)
    inv = parse_inventory(n["metadata"]["annotations"]["gpupool.io/cdi-inventory"])
    # the management spec (0.5.0) and the plugin's (0.7.0): a reader of 0.5.0 or 0.6.0
    # resolves the management spec's device alone
    assert inv.spec_versions == ("0.5.0", "0.7.0")
    assert inv.readable_up_to == {"0.5.0": {"management.nvidia.com/gpu": frozenset({"all"})}}
    assert inv.kinds_read_by("0.6.0").get(PLUGIN_KIND) is None
    assert inv.kinds_read_by("0.7.0") == inv.kinds
    assert inv.kinds_read_by("0.1.0") == {}
    # and it reads back as published
    assert parse_inventory(inv.dumps()) == inv


def test_admission_denies_where_containerd_cannot_read_the_spec_and_names_the_upgrade(
        tmp_path):
    rv, _, _ = decide([node(tmp_path, "containerd://1.7.13")],
                      gpu_pod("p", limits={"nvidia.com/gpu": 1}))
    assert not rv.final.allowed and rv.final.reason == Reason.CDI_DEVICE_MISSING
    msg = rv.final.message
    assert "reads CDI specs up to version 0.6.0" in msg, msg
    assert f"{PLUGIN_KIND}={UUIDS[0]}" in msg and "op-1" in msg
    assert "Fix: upgrade containerd on those nodes to 1.7.16 or later" in msg, msg
    # the same node on a containerd whose library reads 0.7.0, or of no known release
    for version in ("containerd://1.7.16", "containerd://2.1.0", None):
        ok, _, _ = decide([node(tmp_path / version.replace("/", "_") if version else
                                tmp_path / "none", version)],
                          gpu_pod("p", limits={"nvidia.com/gpu": 1}))
        assert ok.final.allowed, (version, ok.final.message)


def test_where_the_nvidia_runtime_resolves_the_names_its_own_library_reads_the_spec(
        tmp_path):
    """containerd's CDI off: the annotations reach the NVIDIA runtime in cdi mode, which
    resolves them with the toolkit's library, whatever containerd's would read."""
    n = node(tmp_path, "containerd://1.7.13", strategy="cdi-annotations",
             containerd=cdi_off())
    rv, _, _ = decide([n], gpu_pod("p", limits={"nvidia.com/gpu": 1}))
    assert rv.final.allowed, rv.final.message


def test_a_running_pod_fails_its_restart_once_containerd_cannot_read_its_devices_spec(
        tmp_path):
    name = f"{PLUGIN_KIND}={UUIDS[0]}"
    policy = default_policy()
    for version, outcome in (("containerd://1.7.15", Outcome.FAILS_ON_RESTART),
                             ("containerd://1.7.18", Outcome.FINE)):
        n = hold(node(tmp_path / version[-6:], version), "u1", [UUIDS[0]], container="c",
                 cdi=[name])
        view = view_from_objects([n], policy, {"ml": {}})
        pod = gpu_pod("train", limits={"nvidia.com/gpu": 1})
        pod["metadata"].update(namespace="ml", uid="u1")
        pod["spec"]["nodeName"] = "op-1"
        pod["status"] = {"phase": "Running"}
        a = recheck(pod, view, policy)
        assert a.outcome is outcome, (version, a.message)
        if outcome is Outcome.FAILS_ON_RESTART:
            assert a.missing == (name,)
            assert "reads CDI specs up to version 0.6.0" in a.message, a.message
