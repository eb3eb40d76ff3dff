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

#: name -> the engine module that defines it: the surface, listed here alone (the
#: ``TYPE_CHECKING`` block at the end, for type checkers, is written from it)
_SURFACE = {
    # the one entry into decisions
    "Stage": "admission.admit", "Subject": "admission.admit", "Review": "admission.admit",
    "decide": "admission.admit", "decide_pod": "admission.admit",
    "handles": "admission.admit", "review": "admission.admit", "review_pod": "admission.admit",
    # routing compiled for the API server (a MutatingAdmissionPolicy)
    "RoutingFacts": "native.routing", "routing_facts": "native.routing",
    "compile_policy": "native.routing",
    "webhook_condition": "native.routing",
    "claimable_pools": "native.routing", "why_left": "native.routing",
    "EXCLUDED_NAMESPACES": "native.routing", "CONDITION": "native.routing",
    "DIGEST_ANNOTATION": "native.routing", "ROUTING_NAME": "native.routing",
    # proving it on the API server before it routes real pods
    "canary_binding": "native.canary", "canary_pods": "native.canary",
    "disagreement": "native.canary", "CANARY_BINDING": "native.canary",
    "CANARY_LABEL": "native.canary", "as_webhook_routes": "native.canary",
    # what a decision is
    "Decision": "core.decision", "NodeFinding": "core.decision", "Reason": "core.decision",
    "allow": "core.decision", "clean_warning": "core.decision",
    "MESSAGE_LIMIT": "core.decision", "WARNING_LIMIT": "core.decision",
    # the cluster as the engine sees it
    "ClusterView": "view.cluster", "NodeInfo": "view.nodes",
    "view_from_objects": "view.cluster", "runtime_classes_of": "view.cluster",
    "DRA_KINDS": "view.cluster", "RESOURCE_KINDS": "view.cluster",
    "load_resources": "view.cluster", "claims_of": "view.cluster",
    # DRA, the GPU Operator's ClusterPolicy and HAMi's device-plugin DaemonSet
    "DeviceClass": "stacks.dra", "Slice": "stacks.dra", "mixed_resources": "checks.allocation",
    "allocation_on_nodes": "checks.allocation",
    "cluster_operator": "stacks.clusterpolicy", "hami_plugin_from": "stacks.hamiplugin",
    "HAMI_PLUGIN_SELECTOR": "stacks.hamiplugin",
    # the Kubernetes release whose allocator decides
    "Release": "stacks.releases", "parse_release": "stacks.releases",
    "release_from_version": "stacks.releases", "release_note": "wording.words",
    "SUPPORTED_RELEASES": "stacks.releases", "NEWEST_RELEASE": "stacks.releases",
    # the policy
    "Policy": "core.policy", "PolicyError": "core.policy", "load_policy_text": "core.policy",
    "parse_policy": "core.policy",
    # per node, for doctor
    "NodeState": "checks.assessment", "NodeAssessment": "checks.assessment",
    "enforce_declarations": "checks.assessment",
    "node_verdict": "checks.cdi", "fix_text": "checks.render", "words": "wording.words",
    # naming objects in messages and records
    "clip": "core.objects", "describe": "core.objects", "meta_of": "core.objects",
    "name_of": "core.objects", "template_pod": "admission.workloads",
    # JSON patches as the API server takes them
    "encode_patch": "core.patch",
    # what a pod names in its containers' resources (the scan's look before deciding)
    "resource_names": "core.resources",
    # after admission: pods re-checked as the cluster changes, nodes whose GPUs go out twice
    "recheck": "aftercare.podrisk", "finished": "aftercare.podrisk",
    "Outcome": "aftercare.podrisk",
    "PodAnswer": "aftercare.podrisk",
    "SchedulerState": "aftercare.podrisk", "NodeHazard": "aftercare.nodehazards",
    "advertised_twice": "aftercare.nodehazards",
    # a pod read as the engine reads it, for judges that compare it with the real stack
    "annotation_requests": "stacks.nri", "without_steering": "pod.affinity",
    "selector_verdict": "stacks.cel", "glob_regex": "native.routing",
}

__all__ = sorted(_SURFACE)


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module 'webhook.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"webhook.engine.{module}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # written by python -m tests.engine_surface from _SURFACE
    from webhook.engine.admission.admit import Review as Review
    from webhook.engine.admission.admit import Stage as Stage
    from webhook.engine.admission.admit import Subject as Subject
    from webhook.engine.admission.admit import decide as decide
    from webhook.engine.admission.admit import decide_pod as decide_pod
    from webhook.engine.admission.admit import handles as handles
    from webhook.engine.admission.admit import review as review
    from webhook.engine.admission.admit import review_pod as review_pod
    from webhook.engine.admission.workloads import template_pod as template_pod
    from webhook.engine.aftercare.nodehazards import NodeHazard as NodeHazard
    from webhook.engine.aftercare.nodehazards import advertised_twice as advertised_twice
    from webhook.engine.aftercare.podrisk import Outcome as Outcome
    from webhook.engine.aftercare.podrisk import PodAnswer as PodAnswer
    from webhook.engine.aftercare.podrisk import SchedulerState as SchedulerState
    from webhook.engine.aftercare.podrisk import finished as finished
    from webhook.engine.aftercare.podrisk import recheck as recheck
    from webhook.engine.checks.allocation import allocation_on_nodes as allocation_on_nodes
    from webhook.engine.checks.allocation import mixed_resources as mixed_resources
    from webhook.engine.checks.assessment import NodeAssessment as NodeAssessment
    from webhook.engine.checks.assessment import NodeState as NodeState
    from webhook.engine.checks.assessment import enforce_declarations as enforce_declarations
    from webhook.engine.checks.cdi import node_verdict as node_verdict
    from webhook.engine.checks.render import fix_text as fix_text
    from webhook.engine.core.decision import MESSAGE_LIMIT as MESSAGE_LIMIT
    from webhook.engine.core.decision import WARNING_LIMIT as WARNING_LIMIT
    from webhook.engine.core.decision import Decision as Decision
    from webhook.engine.core.decision import NodeFinding as NodeFinding
    from webhook.engine.core.decision import Reason as Reason
    from webhook.engine.core.decision import allow as allow
    from webhook.engine.core.decision import clean_warning as clean_warning
    from webhook.engine.core.objects import clip as clip
    from webhook.engine.core.objects import describe as describe
    from webhook.engine.core.objects import meta_of as meta_of
    from webhook.engine.core.objects import name_of as name_of
    from webhook.engine.core.patch import encode_patch as encode_patch
    from webhook.engine.core.policy import Policy as Policy
    from webhook.engine.core.policy import PolicyError as PolicyError
    from webhook.engine.core.policy import load_policy_text as load_policy_text
    from webhook.engine.core.policy import parse_policy as parse_policy
    from webhook.engine.core.resources import resource_names as resource_names
    from webhook.engine.native.canary import CANARY_BINDING as CANARY_BINDING
    from webhook.engine.native.canary import CANARY_LABEL as CANARY_LABEL
    from webhook.engine.native.canary import as_webhook_routes as as_webhook_routes
    from webhook.engine.native.canary import canary_binding as canary_binding
    from webhook.engine.native.canary import canary_pods as canary_pods
    from webhook.engine.native.canary import disagreement as disagreement
    from webhook.engine.native.routing import CONDITION as CONDITION
    from webhook.engine.native.routing import DIGEST_ANNOTATION as DIGEST_ANNOTATION
    from webhook.engine.native.routing import EXCLUDED_NAMESPACES as EXCLUDED_NAMESPACES
    from webhook.engine.native.routing import ROUTING_NAME as ROUTING_NAME
    from webhook.engine.native.routing import RoutingFacts as RoutingFacts
    from webhook.engine.native.routing import claimable_pools as claimable_pools
    from webhook.engine.native.routing import compile_policy as compile_policy
    from webhook.engine.native.routing import glob_regex as glob_regex
    from webhook.engine.native.routing import routing_facts as routing_facts
    from webhook.engine.native.routing import webhook_condition as webhook_condition
    from webhook.engine.native.routing import why_left as why_left
    from webhook.engine.pod.affinity import without_steering as without_steering
    from webhook.engine.stacks.cel import selector_verdict as selector_verdict
    from webhook.engine.stacks.clusterpolicy import cluster_operator as cluster_operator
    from webhook.engine.stacks.dra import DeviceClass as DeviceClass
    from webhook.engine.stacks.dra import Slice as Slice
    from webhook.engine.stacks.hamiplugin import HAMI_PLUGIN_SELECTOR as HAMI_PLUGIN_SELECTOR
    from webhook.engine.stacks.hamiplugin import hami_plugin_from as hami_plugin_from
    from webhook.engine.stacks.nri import annotation_requests as annotation_requests
    from webhook.engine.stacks.releases import NEWEST_RELEASE as NEWEST_RELEASE
    from webhook.engine.stacks.releases import SUPPORTED_RELEASES as SUPPORTED_RELEASES
    from webhook.engine.stacks.releases import Release as Release
    from webhook.engine.stacks.releases import parse_release as parse_release
    from webhook.engine.stacks.releases import release_from_version as release_from_version
    from webhook.engine.view.cluster import DRA_KINDS as DRA_KINDS
    from webhook.engine.view.cluster import RESOURCE_KINDS as RESOURCE_KINDS
    from webhook.engine.view.cluster import ClusterView as ClusterView
    from webhook.engine.view.cluster import claims_of as claims_of
    from webhook.engine.view.cluster import load_resources as load_resources
    from webhook.engine.view.cluster import runtime_classes_of as runtime_classes_of
    from webhook.engine.view.cluster import view_from_objects as view_from_objects
    from webhook.engine.view.nodes import NodeInfo as NodeInfo
    from webhook.engine.wording.words import release_note as release_note
    from webhook.engine.wording.words import words as words
