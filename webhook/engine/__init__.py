"""The policy engine: objects, a cluster view and a policy in, decisions out. Pure: no I/O.

What shells (the admission server, the CLI, the node view's loaders) may use is declared
here, and only here: ``tests/unit/test_layers.py`` fails when a module outside the engine
imports one of its modules directly. Every decision goes through ``admit`` (``decide``,
``review``), so offline and online answers cannot drift; ``doctor`` asks the same
per-node question the decision asks (``node_verdict``). Nothing in this package imports
Flask, gunicorn, the Kubernetes client, the file system or another gpupool layer except
``webhook.api`` (the formats shared with the node agent).

Names load on first use (PEP 562): a CLI command that needs one helper does not pay for
importing the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: name -> the engine module that defines it
_SURFACE = {
    # the one entry into decisions
    "Stage": "admit", "Subject": "admit", "Review": "admit", "decide": "admit",
    "decide_pod": "admit", "handles": "admit", "review": "admit", "review_pod": "admit",
    # what a decision is
    "Decision": "decision", "NodeFinding": "decision", "Reason": "decision",
    "allow": "decision", "clean_warning": "decision", "MESSAGE_LIMIT": "decision",
    # the cluster as the engine sees it
    "ClusterView": "cluster", "NodeInfo": "cluster", "view_from_objects": "cluster",
    # the policy
    "Policy": "policy", "PolicyError": "policy", "load_policy_text": "policy",
    # per node, for doctor
    "NodeState": "cdi", "NodeAssessment": "cdi", "node_verdict": "cdi", "fix_text": "cdi",
    # naming objects in messages and records
    "clip": "objects", "describe": "objects", "meta_of": "objects", "name_of": "objects",
    "template_pod": "workloads",
    # JSON patches as the API server takes them
    "encode_patch": "patch",
}

__all__ = sorted(_SURFACE)


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module 'webhook.engine' has no attribute {name!r}")
    attr = "encode" if name == "encode_patch" else name
    value = getattr(importlib.import_module(f"webhook.engine.{module}"), attr)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from webhook.engine.admit import (
        Review,
        Stage,
        Subject,
        decide,
        decide_pod,
        handles,
        review,
        review_pod,
    )
    from webhook.engine.cdi import NodeAssessment, NodeState, fix_text, node_verdict
    from webhook.engine.cluster import ClusterView, NodeInfo, view_from_objects
    from webhook.engine.decision import (
        MESSAGE_LIMIT,
        Decision,
        NodeFinding,
        Reason,
        allow,
        clean_warning,
    )
    from webhook.engine.objects import clip, describe, meta_of, name_of
    from webhook.engine.patch import encode as encode_patch
    from webhook.engine.policy import Policy, PolicyError, load_policy_text
    from webhook.engine.workloads import template_pod
