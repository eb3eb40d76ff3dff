"""Keeping a pod off the nodes where its GPUs would not resolve, at scheduling time.

Allowing a pod because one candidate node works still lets the scheduler pick a broken one.
So the mutating webhook adds a required node-affinity requirement, in every term, on the
labels gpupool's agent keeps on its node (``webhook.api.delivery.LABELS``): ``NotIn
["false"]`` for the pool's delivery way, which leaves nodes without the agent alone, or
``In ["true"]`` when the policy says ``requireInventory``. The labels follow the node: when
it breaks after admission, pods created afterwards avoid it; when it is fixed, they use it.

A label speaks for every GPU of a node under its default runtime, for unprivileged
containers. A pod that picks among a node's GPUs (HAMi's ``use-``/``nouse-`` annotations),
names a RuntimeClass or runs its GPU containers privileged is judged per node instead, and the
nodes that would fail it are excluded by name (``matchFields``).
"""

from __future__ import annotations

from webhook.api import delivery
from webhook.api.said import said
from webhook.engine.checks.assessment import node_fact
from webhook.engine.checks.cdi import verdicts
from webhook.engine.core.policy import Policy
from webhook.engine.placement import candidates as cand
from webhook.engine.pod.affinity import Requirement
from webhook.engine.pod.nodereach import NAME_FIELD
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks.clusterpolicy import runs_operator_plugin
from webhook.engine.view.cluster import ClusterView
from webhook.engine.wording.words import words

#: More nodes than this to exclude by name and the requirement is left off (with a warning):
#: a pod object is no place for a node list the size of a cluster.
MAX_EXCLUDED_NAMES = 100


def label_requirement(way: delivery.Way, policy: Policy) -> Requirement:
    if policy.require_inventory:
        return ("matchExpressions", {"key": delivery.LABELS[way], "operator": "In",
                                     "values": ["true"]})
    return ("matchExpressions", {"key": delivery.LABELS[way], "operator": "NotIn",
                                 "values": ["false"]})


def _judged_by_name(facts: PodFacts, pool_name: str, view: ClusterView | None,
                    policy: Policy) -> bool:
    """Must the pod be steered node by node? The agent's label says whether every GPU of the
    node resolves the pool's way under the default handler, and nothing more: not which
    GPUs a pod narrows to, another RuntimeClass, a privileged container, MIG devices (the
    kubelet's, under either of the plugin's MIG strategies, or those HAMi creates on a GPU
    it runs in MIG mode), devices a pod names
    itself (in NVIDIA_VISIBLE_DEVICES, or in annotations for the NRI plugin), or a way the
    plugins' own configuration declares (the detected label knows only the disk), nor
    whether CDI names reach a resolver under another handler where containerd's CDI is off."""
    way = policy.by_name[pool_name].cdi.delivery
    hami_pool = policy.is_hami_pool(pool_name)
    rc = facts.runtime_class
    if cand.narrows(facts, hami_pool) or (rc and way != delivery.CDI_DEVICES) \
            or facts.privileged_gpus or facts.asks_mig or facts.own_visible_devices \
            or facts.own_visible_unknown:
        return True
    if view is None:
        return False
    if rc and view.has_containerd_cdi_off():
        return True
    return (bool(facts.nri_requests) and view.operator_nri() is not None) \
        or _cluster_steers(pool_name, policy, view)


def cluster_steers_by_name(pool_name: str, view: ClusterView, policy: Policy) -> bool:
    """Does this cluster make every GPU pod of the pool be steered node by node, whatever the
    pod? A way the plugins' own configuration declares, and MIG devices on some node, are
    beyond what the agent's label says. (The routing policy compiled for the API server
    leaves such a pool's pods to the webhook: ``native.routing``.)"""
    return _cluster_steers(pool_name, policy, view)


def _cluster_steers(pool_name: str, policy: Policy, view: ClusterView) -> bool:
    hami_pool = policy.is_hami_pool(pool_name)
    return (policy.by_name[pool_name].cdi.delivery is delivery.DETECT
            and (view.operator_way() is not None or view.knows_hami_plugins())
            and view.until_any_change(("declared beyond the labels", pool_name,
                                       policy.cache_key),
                                      _declared_beyond_labels, pool_name, policy, view)) \
        or view.has_hami_mig(pool_name, policy) \
        or (not hami_pool and view.has_single_strategy_mig()) \
        or (not hami_pool and view.until_any_change(
            ("HAMi's plugin in the pool", pool_name, policy.cache_key),
            _hami_plugin_in_pool, pool_name, policy, view))


def _hami_plugin_in_pool(pool_name: str, policy: Policy, view: ClusterView) -> bool:
    """Does HAMi's device plugin serve a node of this pool (not HAMi's)? It allocates only
    for pods HAMi's scheduler bound (``checks.hamibinding``), which the steering label does
    not say. Kept until the view changes: a review asks it for its pool."""
    return any(node_fact(n, "HAMi's device plugin", view)
               for n in view.pool_nodes(policy, pool_name))


def _declared_beyond_labels(pool_name: str, policy: Policy, view: ClusterView) -> bool:
    """Does the cluster's own configuration (the GPU Operator's ClusterPolicy, HAMi's
    device-plugin DaemonSet) declare how the device plugin hands GPUs on a node of the pool
    whose agent did not learn it from the plugin's pod? That node is judged by the
    declaration (``assessment.declared_way``) while its steering label speaks of the disk
    alone, so the pool's pods are steered node by node. Where every agent learned the way
    from the plugin's pod (the chart lets it read them), its label already follows that way
    (``delivery.detected_way``), as the node's judgement does: the label steers, and the
    API server can route the pool's plain pods (``native.routing``). Kept until the view
    changes: a review asks it for its pool."""
    operator = view.operator_way() is not None
    for node in view.pool_nodes(policy, pool_name):
        inv = node.inventory
        if inv is None or delivery.learned_way(inv).way is not None:
            continue
        if (operator and runs_operator_plugin(node.labels)) \
                or view.hami_way(node.labels) is not None:
            return True
    return False


def requirements(facts: PodFacts, pool_name: str, view: ClusterView | None,
                 policy: Policy) -> tuple[list[Requirement], list[str]]:
    """The requirements to add to every required term, and warnings."""
    pool = policy.by_name[pool_name]
    if not pool.cdi.checked or not pool.cdi.steer or not facts.is_gpu_pod:
        # (A pod whose GPUs all come through DRA claims gets no device-plugin GPU: the
        # labels say nothing about its devices, and the scheduler's DRA plugin picks nodes.)
        return [], []
    rc = facts.runtime_class
    way = pool.cdi.delivery
    if rc and way == delivery.VISIBLE_DEVICES and rc in policy.non_cdi_runtime_classes \
            and facts.privileged_gpus:
        return [], []
    if not _judged_by_name(facts, pool_name, view, policy):
        return [label_requirement(way, policy)], []
    if view is None or len(view) == 0:
        return [], []
    s = verdicts(facts, pool_name, view, policy)
    bad = s.every_failing_node if policy.require_inventory else s.can_fail
    if not bad:
        return [], []
    if len(bad) > MAX_EXCLUDED_NAMES:
        return [], [words(said("steering.tooMany", count=len(bad), pool=pool_name))]
    return [("matchFields", {"key": NAME_FIELD, "operator": "NotIn", "values": list(bad)})], []
