"""A bound pod whose containers have not started yet (the kubelet holds nothing for it, so
its first start asks the device plugin afresh) while its node changes under it; the scan
says whether that start fails, and the real nvidia-container-runtime (tests/runtime_oracle.py)
creates the container on that node to judge it: "fails" exactly when the runtime refuses a
GPU HAMi can hand the pod there, naming the same CDI devices. Started pods, judged by what
the kubelet cached for them, are tests/integration/test_restart_corpus.py's."""

from __future__ import annotations

import copy

import jsonpatch

from harness.layouts import UUIDS
from tests.runtime_oracle import OracleNode
from tests.unit.engine.test_steering import agent_node, hami_pod
from webhook.engine import NodeInfo, Outcome, Stage, Subject, decide, view_from_objects
from webhook.files.policyfile import default_policy
from webhook.scan.scanner import Scanner

#: The node's life: what it runs at each step (layout, per-UUID spec, runtime mode).
STEPS = [("operator-management", True, None),   # CDI with a per-UUID spec: runs
         ("operator-management", False, None),  # the spec regenerated without them
         ("nvidia-ctk", False, None),           # nvidia-ctk's spec: names every UUID
         ("operator-management", False, "legacy"),  # CDI mode off
         # a device-plugin spec beside HAMi's registration, nothing saying how HAMi's plugin
         # hands GPUs: gpupool can only infer it, so it says "may fail"; the runtime, given
         # HAMi's default envvar, refuses
         ("device-plugin", False, None),
         ("operator-management", True, None)]   # mended


def test_the_scan_and_the_real_runtime_agree_as_the_node_changes(tmp_path):
    policy = default_policy()
    first = agent_node(tmp_path / "initial", "hami-1", "hami", STEPS[0][0], per_uuid=STEPS[0][1])
    view = view_from_objects([first], policy)
    pod = hami_pod()
    pod["metadata"].update(name="train", namespace="ml", uid="uid-train")
    m = decide(Stage.MUTATE, Subject(kind="Pod", object=pod, namespace="ml"), view, policy)
    pod = jsonpatch.apply_patch(copy.deepcopy(pod), m.patch)
    pod["spec"]["nodeName"] = "hami-1"
    scanner = Scanner(view, policy)
    scanner.pods_listed([pod])
    seen = []
    for i, (layout, per_uuid, mode) in enumerate(STEPS):
        root = tmp_path / str(i)
        # (where the layout is the device plugin's, its pod is not read: the step that
        # leaves the way to inference; elsewhere the agent learns HAMi's envvar from it)
        node = agent_node(root, "hami-1", "hami", layout, per_uuid=per_uuid, mode=mode,
                          **({"plugins": None} if layout == "device-plugin" else {}))
        view.upsert_node(NodeInfo.from_object(node))
        scanner.sync()
        answer = scanner.answer_of("uid-train").answer
        base = root / "hami-1"
        oracle = OracleNode(root / "oracle", [base / "etc/cdi", base / "var/run/cdi"],
                            base / "config/config.toml", gpus=UUIDS)
        # HAMi's plugin hands any of the node's GPUs by UUID (envvar): each is a restart
        refused = {u: v.error for u in UUIDS if not (v := oracle.create(u)).ok}
        seen.append((layout, per_uuid, mode, answer.outcome))
        # never "fine" where the runtime refuses, never "fails" where it runs
        assert (answer.outcome is Outcome.FINE) <= (not refused), (layout, answer, refused)
        assert (answer.outcome is Outcome.FAILS_ON_RESTART) <= bool(refused), (layout, answer)
        if answer.outcome is Outcome.MAY_FAIL_ON_RESTART:
            assert "only inferred" in answer.message and refused
            continue
        if refused:
            assert answer.reason == "CDIDeviceMissing"
            for uuid, error in refused.items():
                device = f"management.nvidia.com/gpu={uuid}"
                assert device in error and device in answer.missing, (error, answer.missing)
        else:
            assert answer.outcome is Outcome.FINE
    # the node's life had both answers in it
    assert {o for *_, o in seen} == {Outcome.FINE, Outcome.FAILS_ON_RESTART,
                                     Outcome.MAY_FAIL_ON_RESTART}
