"""Containers without a GPU grant, kept from the GPUs a node would hand them anyway.

A container's GPU grant is what it asks the schedulers for: a GPU resource of the policy
(a device plugin's, or an extended resource a DeviceClass backs) or a DRA claim. Two ways
hand GPUs to a container that asks for none:

- ``NVIDIA_VISIBLE_DEVICES``. The NVIDIA runtime reads it from the container's environment,
  its own or its image's (the ``nvidia/cuda`` images set ``ENV NVIDIA_VISIBLE_DEVICES=all``),
  and hands those GPUs over, in every mode (nvidia-container-toolkit v1.20.2
  ``internal/config/image/cuda_image.go``, ``VisibleDevices``), unless its
  ``accept-nvidia-visible-devices-envvar-when-unprivileged`` is false and the container is
  unprivileged. Only the NVIDIA runtime reads it: a node whose containerd runs the pod under
  another handler (runc, as with the GPU Operator's NRI injection) hands nothing. Admission
  cannot see what an image sets, so the answer is to set ``void`` in the container: the
  kubelet puts the pod's variables after the image's, and the runtime keeps the last of a
  name (toolkit v1.20.2 ``internal/config/image/builder.go``, ``WithEnv``).
- The GPU Operator's NRI plugin injects the CDI devices a pod's ``nvidia.cdi.k8s.io``
  annotations name, into the container they name (``webhook.engine.stacks.nri``); only its
  management devices are kept to allowed namespaces. Annotations gpupool cannot void: such a
  pod is denied (or warned). A user's ``cdi.k8s.io/`` pod annotation reaches no container:
  the kubelet hands containerd only the device plugin's annotations in the container's
  config (Kubernetes ``pkg/kubelet/kuberuntime/kuberuntime_container.go``,
  ``generateContainerConfig``), which is where containerd's CRI reads CDI annotations
  (containerd v2.2 ``internal/cri/server/container_create_linux.go``, ``WithCDI(config.
  Annotations, ...)``).

Pods that cannot reach a node that would hand them GPUs are untouched, and so are the pods of
``access.exemptNamespaces``. Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple

from webhook.api import delivery
from webhook.api.said import Said, said
from webhook.engine.core import patch
from webhook.engine.core.policy import Policy, Ungranted
from webhook.engine.pod.podfacts import PodFacts
from webhook.engine.stacks import nri
from webhook.engine.view.cluster import ClusterView
from webhook.engine.view.nodes import NodeInfo

VARIABLE = "NVIDIA_VISIBLE_DEVICES"
VOID = "void"
#: Extended resources a DeviceClass backs (KEP-5004): a grant like any GPU resource.
_DRA_EXTENDED = "deviceclass.resource.kubernetes.io/"
_FIELDS = ("initContainers", "containers")


class Ungrantee(NamedTuple):
    """A container that asks for no GPU: where it is in the pod, and what it sets."""

    field: str  # initContainers | containers
    position: int
    name: str
    privileged: bool
    #: its own NVIDIA_VISIBLE_DEVICES already asks for nothing (the last of the name)
    voided: bool


class Exposure(NamedTuple):
    """Ungranted containers, and the nodes the pod can reach that would hand them GPUs."""

    containers: tuple[Ungrantee, ...]
    nodes: tuple[str, ...]
    #: containers an ``nvidia.cdi.k8s.io`` annotation hands devices to, and the nodes
    annotated: tuple[str, ...] = ()
    nri_nodes: tuple[str, ...] = ()


def _asks_gpu(c: dict[str, Any], policy: Policy) -> bool:
    res = c.get("resources")
    if not isinstance(res, dict):
        return False
    if res.get("claims"):
        return True
    for key in ("limits", "requests"):
        asked = res.get(key)
        if isinstance(asked, dict) and any(
                isinstance(r, str) and (policy.is_gpu_resource(r) or r.startswith(_DRA_EXTENDED))
                for r in asked):
            return True
    return False


def _privileged(c: dict[str, Any]) -> bool:
    sc = c.get("securityContext")
    if not isinstance(sc, dict):
        return False
    caps = sc.get("capabilities")
    added = caps.get("add") if isinstance(caps, dict) else None
    # the toolkit's sense of privileged: CAP_SYS_ADMIN (internal/config/image/privileged.go)
    return sc.get("privileged") is True or (isinstance(added, list) and any(
        a in ("SYS_ADMIN", "CAP_SYS_ADMIN", "ALL") for a in added))


def _voided(c: dict[str, Any]) -> bool:
    env = c.get("env")
    if not isinstance(env, list):
        return False
    last: Any = None
    for e in env:
        if isinstance(e, dict) and e.get("name") == VARIABLE:
            last = e
    return isinstance(last, dict) and "valueFrom" not in last and \
        str(last.get("value") or "").strip() in delivery.NO_DEVICES


def ungranted(facts: PodFacts, policy: Policy) -> tuple[Ungrantee, ...]:
    """The pod's init and regular containers that ask for no GPU."""
    out = []
    for field in _FIELDS:
        items = facts.spec.get(field)
        if not isinstance(items, list):
            continue
        for i, c in enumerate(items):
            if isinstance(c, dict) and not _asks_gpu(c, policy):
                out.append(Ungrantee(field, i, str(c.get("name") or ""), _privileged(c),
                                     _voided(c)))
    return tuple(out)


def _hands_by_variable(node: NodeInfo, handler: str | None, privileged: bool,
                       policy: Policy) -> bool:
    """Would this node's NVIDIA runtime hand a container GPUs from its variable? A GPU node
    without an inventory is taken to run the toolkit as installed (it honours it)."""
    if not node.is_gpu_node(policy):
        return False
    inv = node.inventory
    if inv is None:
        return True
    rt = inv.runtime
    h = handler if handler is not None else rt.default_handler
    if h is not None and h not in rt.handlers:
        return False  # runc or another runtime: the variable reaches nothing
    return not delivery.envvar_ignored(inv, privileged)


def _reach(facts: PodFacts, view: ClusterView, policy: Policy
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nodes the pod can reach whose runtime would hand its containers GPUs from the
    variable: (for unprivileged containers, for privileged ones; the second holds the
    first). A fold per placement and RuntimeClass (``ClusterView.fold``): built once, then
    kept current node by node, so a node change costs that node, not a rescan; every pod
    that shares the placement (a workload's, and nearly every pod that names none) shares
    it."""
    handler = view.handler_of(facts.runtime_class)
    placement = facts.placement

    def per_node(n: NodeInfo) -> bool | None:
        """None: out of reach, or no GPU from the variable; False: for any container;
        True: for privileged ones only."""
        if not n.is_gpu_node(policy) or not placement.reaches(n):
            return None
        if _hands_by_variable(n, handler, False, policy):
            return False
        return True if _hands_by_variable(n, handler, True, policy) else None

    fold = view.fold(("access", policy.cache_key, handler, placement.key), per_node,
                     view.nodes)
    split: tuple[tuple[str, ...], tuple[str, ...]] = fold.derive(_split)
    return split


def _split(values: dict[str, bool]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    everyone = tuple(sorted(values))
    return tuple(n for n in everyone if not values[n]), everyone


def _annotated(facts: PodFacts, view: ClusterView, names: frozenset[str]
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Ungranted containers the NRI plugin would hand devices (their annotation names some
    it does not drop for the pod's namespace), and the reachable nodes where it runs."""
    plugin = view.operator_nri()
    if plugin is None or not facts.nri_requests:
        return (), ()
    hit = []
    for container, value in facts.nri_requests:
        if container not in names or not value.strip():
            continue
        if nri.MANAGEMENT in value and plugin.allows_management(facts.namespace) is False \
                and all(nri.MANAGEMENT in n for n in value.split(",")):
            continue  # dropped: the plugin injects none of a disallowed namespace's names
        hit.append(container)
    if not hit:
        return (), ()
    placement = facts.placement

    def per_node(n: NodeInfo) -> bool | None:
        return True if nri.runs_on(n.labels) and placement.reaches(n) else None

    nodes: tuple[str, ...] = view.fold(("access-nri", placement.key), per_node,
                                       view.nodes).derive(_sorted_names)
    return (tuple(hit), nodes) if nodes else ((), ())


def _sorted_names(values: dict[str, bool]) -> tuple[str, ...]:
    return tuple(sorted(values))


def exposure(facts: PodFacts, view: ClusterView | None, policy: Policy) -> Exposure | None:
    """What gpupool must do about this pod's containers without a grant; None: nothing (no
    such container, an exempt namespace, ``access.ungranted: off``, or no node it can reach
    would hand them a GPU)."""
    access = policy.access
    if access.ungranted is Ungranted.OFF or view is None \
            or facts.namespace in access.exempt_namespaces:
        return None
    containers: tuple[Ungrantee, ...] | None = None
    if facts.is_gpu_pod:
        if len(facts.containers) == 1:
            return None  # its one container asks for the GPU (nearly every GPU pod)
        # (its containers first: a GPU pod's are nearly always all granted)
        containers = ungranted(facts, policy)
        if not containers:
            return None
    reach, reach_privileged = _reach(facts, view, policy)
    if not reach_privileged and not (facts.nri_requests and view.operator_nri() is not None):
        return None  # (nearly every pod of a cluster whose GPU nodes are tainted)
    if containers is None:
        containers = ungranted(facts, policy)
    if not containers:
        return None
    exposed = [c for c in containers if not c.voided and (reach or c.privileged)]
    nodes = reach_privileged if any(c.privileged for c in exposed) else reach
    annotated, nri_nodes = _annotated(facts, view, frozenset(c.name for c in containers))
    if not exposed and not annotated:
        return None
    return Exposure(tuple(exposed), nodes if exposed else (), annotated, nri_nodes)


def void_ops(facts: PodFacts, e: Exposure) -> list[patch.Op]:
    """``NVIDIA_VISIBLE_DEVICES=void`` appended to each exposed container's env, last, so it
    is the value the runtime keeps (idempotent: one already voided is left alone)."""
    ops = []
    entry = {"name": VARIABLE, "value": VOID}
    for c in e.containers:
        item = facts.spec[c.field][c.position]
        env = item.get("env")
        if isinstance(env, list):
            ops.append(patch.add(patch.pointer("spec", c.field, c.position, "env", "-"), entry))
        else:
            op = patch.replace if "env" in item else patch.add
            ops.append(op(patch.pointer("spec", c.field, c.position, "env"), [entry]))
    return ops


class Outcome(StrEnum):
    """What the policy makes of containers without a grant that could get GPUs."""

    DENIED = "denied"  # ``deny``, or ``void`` where annotations inject what no void stops
    WARNED = "warned"  # ``warn``
    UNDONE = "undone"  # ``void``, undone by a later mutating webhook (seen at validation)
    VOIDED = "voided"  # ``void``: the variable set to void in each such container


class Finding(NamedTuple):
    """The access rule's answer, as data: the admission stage joins it to the decision so
    far (``admission.pods``) and ``wording`` words it."""

    outcome: Outcome
    #: the exposed containers and the nodes that would hand them GPUs (``access.exposed``)
    exposed: Said
    #: the containers the warning counts
    counted: int
    #: what voiding them takes (``VOIDED``)
    ops: tuple[patch.Op, ...] = ()


def finding(facts: PodFacts, e: Exposure, policy: Policy, stage_mutates: bool) -> Finding:
    """The pod's answer for its ungranted containers: with ``void`` the variable set (the
    mutating stage), ``deny``'s denial, ``warn``'s warning."""
    mode = policy.access.ungranted
    exposed = said("access.exposed",
                   containers=tuple((c.name, c.field, c.position) for c in e.containers),
                   nodes=e.nodes, annotated=e.annotated, nri_nodes=e.nri_nodes)
    if mode is Ungranted.DENY or (mode is Ungranted.VOID and e.annotated):
        return Finding(Outcome.DENIED, exposed, len(e.containers) + len(e.annotated))
    if mode is Ungranted.WARN:
        return Finding(Outcome.WARNED, exposed, len(e.containers) + len(e.annotated))
    if not stage_mutates:
        # validation sees the pod after every mutating webhook: a variable left unvoided
        # there was undone after gpupool set it
        return Finding(Outcome.UNDONE, exposed, len(e.containers))
    return Finding(Outcome.VOIDED, exposed, len(e.containers), tuple(void_ops(facts, e)))
