"""Which pod HAMi's device plugin allocates for on a node, answered by HAMi's own code:
``hami-allocate`` (tests/hamiallocate) runs HAMi v2.10.0's ``util.GetPendingPod``, the first
step of its plugin's ``Allocate``, against a fake API server holding the node and its pods.
A pod it does not find fails its Allocate, and the kubelet rejects the pod."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

from harness.gobuild import built
from harness.kit import ROOT

BUILD = ROOT / "tests" / "hamiallocate" / "build.sh"
#: What HAMi's scheduler extender writes on a pod it filters and binds to a node (HAMi
#: v2.10.0 ``pkg/scheduler/scheduler.go``: ``hami.io/vgpu-node`` at filter, ``bind-phase``
#: allocating and ``bind-time`` at Bind).
NODE_ANNOTATION = "hami.io/vgpu-node"
BOUND = {"hami.io/bind-phase": "allocating", "hami.io/bind-time": "1765000000"}

_answers: dict[str, dict[str, str]] = {}


def as_bound(pod: dict[str, Any], node: str, by_hami: bool) -> dict[str, Any]:
    """The pod as it stands when the kubelet allocates for it: bound to ``node``, Pending,
    carrying what HAMi's scheduler wrote where it bound it."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Pending"}
    if by_hami:
        ann = out["metadata"].setdefault("annotations", {})
        ann.update({NODE_ANNOTATION: node, **BOUND})
    return out


def allocates(pod: dict[str, Any], node: str) -> dict[str, str]:
    """HAMi's plugin's answer for ``pod`` (as ``as_bound`` leaves it) on ``node``:
    ``{"pod": "ns/name"}`` or ``{"error": ...}``."""
    question = json.dumps({"node": {"metadata": {"name": node}}, "pods": [pod]},
                          sort_keys=True)
    if question not in _answers:
        exe = built(BUILD, "hami-allocate") / "hami-allocate"
        r = subprocess.run([str(exe)], input=question + "\n", capture_output=True, text=True,
                           timeout=120, check=True)
        _answers[question] = json.loads(r.stdout.strip().splitlines()[-1])
    return _answers[question]
