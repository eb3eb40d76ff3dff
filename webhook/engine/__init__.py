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
    "runtime_classes_of": "cluster", "DRA_KINDS": "cluster", "RESOURCE_KINDS": "cluster",
    "load_resources": "cluster", "claims_of": "cluster",
    # DRA, the GPU Operator's ClusterPolicy and HAMi's device-plugin DaemonSet
    "DeviceClass": "dra", "Slice": "dra", "mixed_resources": "allocation",
    "cluster_operator": "clusterpolicy", "hami_plugin_from": "hamiplugin",
    "HAMI_PLUGIN_SELECTOR": "hamiplugin",
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
    value = getattr(importlib.import_module(f"webhook.engine.{module}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # the same names, for type checkers (explicit re-exports)
    from webhook.engine.admit import Review as Review
    from webhook.engine.admit import Stage as Stage
    from webhook.engine.admit import Subject as Subject
    from webhook.engine.admit import decide as decide
    from webhook.engine.admit import decide_pod as decide_pod
    from webhook.engine.admit import handles as handles
    from webhook.engine.admit import review as review
    from webhook.engine.admit import review_pod as review_pod
    from webhook.engine.allocation import mixed_resources as mixed_resources
    from webhook.engine.cdi import NodeAssessment as NodeAssessment
    from webhook.engine.cdi import NodeState as NodeState
    from webhook.engine.cdi import fix_text as fix_text
    from webhook.engine.cdi import node_verdict as node_verdict
    from webhook.engine.cluster import DRA_KINDS as DRA_KINDS
    from webhook.engine.cluster import RESOURCE_KINDS as RESOURCE_KINDS
    from webhook.engine.cluster import ClusterView as ClusterView
    from webhook.engine.cluster import NodeInfo as NodeInfo
    from webhook.engine.cluster import claims_of as claims_of
    from webhook.engine.cluster import load_resources as load_resources
    from webhook.engine.cluster import runtime_classes_of as runtime_classes_of
    from webhook.engine.cluster import view_from_objects as view_from_objects
    from webhook.engine.clusterpolicy import cluster_operator as cluster_operator
    from webhook.engine.decision import MESSAGE_LIMIT as MESSAGE_LIMIT
    from webhook.engine.decision import Decision as Decision
    from webhook.engine.decision import NodeFinding as NodeFinding
    from webhook.engine.decision import Reason as Reason
    from webhook.engine.decision import allow as allow
    from webhook.engine.decision import clean_warning as clean_warning
    from webhook.engine.dra import DeviceClass as DeviceClass
    from webhook.engine.dra import Slice as Slice
    from webhook.engine.hamiplugin import HAMI_PLUGIN_SELECTOR as HAMI_PLUGIN_SELECTOR
    from webhook.engine.hamiplugin import hami_plugin_from as hami_plugin_from
    from webhook.engine.objects import clip as clip
    from webhook.engine.objects import describe as describe
    from webhook.engine.objects import meta_of as meta_of
    from webhook.engine.objects import name_of as name_of
    from webhook.engine.patch import encode_patch as encode_patch
    from webhook.engine.policy import Policy as Policy
    from webhook.engine.policy import PolicyError as PolicyError
    from webhook.engine.policy import load_policy_text as load_policy_text
    from webhook.engine.workloads import template_pod as template_pod
