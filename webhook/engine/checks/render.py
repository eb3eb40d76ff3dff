"""The one place a pod check's finding becomes words: the ``Decision`` it makes, its message
(it follows the pod's name) and the warning an allowed pod gets.

Checks return ``PodFinding`` data (``checks.findings``) and write no user-facing text; what
a finding says, and the fix it names, is here, one function per check. The messages name
the object (``Decision.about`` puts the pod's name before them), the nodes and the fix;
their reason codes come with the finding. The nodes' own notes, a line per node, and the
fixes node checks know are worded by ``wording.words``, which this module asks.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook.api import delivery
from webhook.api.said import Said, said
from webhook.engine.checks import allocation, cdi
from webhook.engine.checks.assessment import NodeAssessment
from webhook.engine.checks.cdi import Finding, Verdicts
from webhook.engine.checks.findings import Note, PodFinding
from webhook.engine.core.decision import (
    SHOW_DEVICES,
    SHOW_NODES,
    Decision,
    NodeFinding,
    Reason,
    allow,
    deny,
)
from webhook.engine.core.policy import Policy, Pool
from webhook.engine.stacks import dra, nri
from webhook.engine.view.cluster import ClusterView
from webhook.engine.wording.words import listed, words

#: Why no CDI check ran when the view holds no node at all.
NO_NODES = "gpupool knows no nodes"
#: Why no CDI check ran while the server's node watch has not listed nodes and namespaces.
NOT_SYNCED = "gpupool's node view has not synced yet"


def decision(f: PodFinding, policy: Policy, view: ClusterView | None) -> Decision:
    """The decision a finding makes: a denial naming it, or the pod allowed, routed, with
    its statement (where it makes one), its nodes and its warnings."""
    statement, warning = _TEXTS[f.check](f, policy, view)
    nodes = _NODES[f.check](f)
    if f.denies:
        return deny(f.reason, statement, of_subject=True, gpu=True, pool=f.pool,
                    nodes=nodes)._replace(unchecked=f.unchecked)
    return allow(Reason.ROUTED, gpu=True, pool=f.pool, message=statement,
                 of_subject=bool(statement), nodes=nodes,
                 warnings=(*(_NOTES[n.what](n) for n in f.notes), warning),
                 unchecked=f.unchecked)


# ------------------------------------------------------------------ device delivery (CDI)


def _cdi(f: PodFinding, policy: Policy, view: ClusterView | None) -> tuple[str, str]:
    if f.what == cdi.NO_VIEW:
        why = NO_NODES if f.unchecked == "no-nodes" else NOT_SYNCED
        if f.denies:
            return (f": CDI devices cannot be checked: {why} (onNoNodeView: deny); retry in "
                    "a moment, or see the webhook's /readyz?verbose", "")
        return f": CDI devices not checked: {why}", f"gpupool: CDI devices not checked: {why}"
    assert view is not None, "the CDI check judges nodes"
    return _cdi_texts(f.fact("finding"), f.fact("verdicts"), policy.by_name[f.pool], policy,
                      view, f.denies)


def _cdi_nodes(f: PodFinding) -> tuple[NodeFinding, ...]:
    """The judged nodes that would fail the pod, a line each with its own note."""
    if f.what == cdi.NO_VIEW:
        return ()
    return tuple(NodeFinding(c.node, c.missing, words(c.note))
                 for c in f.fact("verdicts").shown)


def _summary(checks: list[NodeAssessment]) -> str:
    """The failing nodes, as messages quote them."""
    parts = []
    for c in checks[:SHOW_NODES]:
        if c.missing and not c.missing[0].endswith("<any device>"):
            devs = ", ".join(c.missing[:SHOW_DEVICES])
            more = len(c.missing) - SHOW_DEVICES
            parts.append(f"{c.node} lacks {devs}{f' (+{more} more)' if more > 0 else ''}")
        else:
            parts.append(f"{c.node}: {words(c.note)}")
    if len(checks) > SHOW_NODES:
        parts.append(f"and {len(checks) - SHOW_NODES} more node(s)")
    return "; ".join(parts)


def fix_text(pool: Pool, checks: list[NodeAssessment], policy: Policy,
             view: ClusterView) -> str:
    """The fix to name for these failing nodes: one fix where they share it, else each
    fix with the nodes it is for. Every part names what is there: a RuntimeClass only where
    the cluster has it (when gpupool knows the cluster's classes: the GPU Operator deletes
    its own with NRI injection) and every such node's containerd runs its handler without
    CDI; a CDI kind only where one is known."""
    fixes: dict[str, list[str]] = {}
    for c in checks:
        fixes.setdefault(_fix_for(pool, c, policy, view), []).append(c.node)
    if len(fixes) == 1:
        return next(iter(fixes))
    parts = []
    for fix, nodes in fixes.items():
        parts.append(f"on {listed(nodes, SHOW_NODES)}: {fix}")
    return "; ".join(parts)


def _fix_for(pool: Pool, c: NodeAssessment, policy: Policy, view: ClusterView) -> str:
    """The fix for one failing node."""
    if c.fix is not None:
        return words(c.fix)
    # HAMi's chart sets its plugin's strategy from devicePlugin.deviceListStrategy.
    strategy = ("HAMi's chart value devicePlugin.deviceListStrategy=cdi-annotations"
                if policy.is_hami_pool(pool.name) else
                f"pool {pool.name}'s device plugin to DEVICE_LIST_STRATEGY=cdi-annotations")
    if c.note == delivery.UNPRIVILEGED_ENVVAR_IGNORED:
        return ("set accept-nvidia-visible-devices-envvar-when-unprivileged = true in the "
                f"NVIDIA runtime's config.toml on those nodes, or set {strategy} (a CDI "
                "strategy, whose devices containerd delivers to any container)")
    if c.undelivered and c.way == delivery.CDI_DEVICES:
        return words(said("delivery.cdiOffFix"))
    if c.undelivered:
        return ("make the NVIDIA runtime containerd's default runtime on those nodes, or set "
                f"{strategy} (a CDI strategy, which containerd and the GPU Operator's NRI "
                "plugin deliver under any handler)")
    kind = c.kind
    if (c.way or delivery.VISIBLE_DEVICES) == delivery.VISIBLE_DEVICES:
        vendor, _, cls = kind.partition("/")
        parts = []
        if vendor and cls:
            parts.append(f"define a CDI device per GPU UUID for kind {kind} on those nodes "
                         f"(e.g. nvidia-ctk cdi generate --vendor={vendor} --class={cls} "
                         f"--device-name-strategy=uuid "
                         f"--output=/var/run/cdi/{vendor}-{cls}-uuid.yaml)")
        legacy = _legacy_class(c.node, policy, view)
        if legacy:
            parts.append(f"run the pod with runtimeClassName {legacy}")
        parts.append(f"turn off the GPU Operator's CDI mode on pool {pool.name}'s nodes")
        return "; ".join([*parts[:-1], ("or " if len(parts) > 1 else "") + parts[-1]])
    spec = f"its {kind} CDI spec" if kind else "its CDI spec"
    return (f"make the device plugin on those nodes write {spec} for every GPU the node "
            f"has (DEVICE_LIST_STRATEGY cdi-annotations/cdi-cri; restart it after a GPU is "
            f"replaced)")


def _legacy_class(node_name: str, policy: Policy, view: ClusterView) -> str:
    """A RuntimeClass of the policy's non-CDI ones that this node can run: the cluster has
    it (where gpupool knows the cluster's classes) and the node's containerd runs its
    handler with the NVIDIA runtime in a mode that uses no CDI; "" where none."""
    classes = view.runtime_classes()
    node = view.node(node_name)
    handlers = node.inventory.runtime.handlers if node is not None and \
        node.inventory is not None else None
    for rc in policy.non_cdi_runtime_classes:
        if classes is not None and rc not in classes:
            continue
        handler = classes[rc] if classes is not None else rc
        if handlers is None or handlers.get(handler) in delivery.NON_CDI_MODES:
            return rc
    return ""


def _why(pool: Pool, missing: list[NodeAssessment]) -> str:
    """Why the CDI names are needed, from the nodes that lack some ("" where none names
    one: their own notes say what goes wrong)."""
    named = [c for c in missing if c.missing and (c.kind or c.way == nri.WAY)]
    if not named:
        return ""
    kind, mode, way = named[0].kind, named[0].mode, named[0].way or delivery.VISIBLE_DEVICES
    if named[0].note is not None and named[0].note.what == delivery.SPEC_TOO_NEW:
        return words(named[0].note)
    if way == nri.WAY:
        return (f"The GPU Operator's NRI plugin has containerd inject the CDI devices its "
                f"{nri.DOMAIN} annotations name, which containerd resolves from the node's "
                f"CDI specs")
    if way == delivery.CDI_DEVICES:
        return (f"Its device plugin hands containers CDI devices {kind}=GPU-<uuid>, which "
                f"containerd resolves from the node's CDI specs whatever the runtime's mode")
    if not mode:
        return ""
    return (f"The node runtime (mode {mode}, default kind {kind}) resolves "
            f"NVIDIA_VISIBLE_DEVICES=GPU-<uuid> as CDI devices {kind}=GPU-<uuid>")


def _cdi_texts(finding: Finding, s: Verdicts, pool: Pool, policy: Policy,
               view: ClusterView, denies: bool) -> tuple[str, str]:
    """What the CDI check's finding says (it follows the pod's name), and the warning an
    allowed pod gets."""
    name, count = pool.name, len(s.missing) + len(s.unknown)
    failing = _summary(s.missing + s.unknown)
    unfit = "; ".join(f"{n}: {words(why)}" for n, why in s.unfit[:SHOW_NODES])
    match finding:
        case Finding.NO_CANDIDATES:
            return (f": no node of pool {name} matches its nodeName, nodeSelector, "
                    f"affinity and tolerations; its CDI devices were not checked",
                    f"gpupool: no candidate node in pool {name} yet; CDI devices not checked")
        case Finding.NO_ALLOWED_GPU:
            return (f" asks for GPUs its HAMi annotations allow, but no candidate node in "
                    f"pool {name} has them: {unfit}", "")
        case Finding.NO_GPU_FIT:
            return (f": no node of pool {name} has the GPUs it asks for: {unfit}",
                    f"gpupool: no node in pool {name} has the GPUs this pod asks for yet")
        case Finding.STEERED_OUT:
            return (f": its node affinity leaves it no node of pool {name}: the nodes "
                    f"where its GPUs resolve are excluded, and {count} are steered off "
                    f"because they would fail it: {failing}",
                    f"gpupool: no node of pool {name} is left to this pod; it stays pending")
        case Finding.SOME_FAIL:
            return (f": {count} of {s.checked} candidate nodes may fail it: "
                    f"{failing}",
                    f"gpupool: {count} of {s.checked} candidate nodes lack CDI devices this "
                    f"pod needs; see gpupool doctor")
        case Finding.UNKNOWN:
            if denies:
                return (f": CDI inventory unknown on every candidate node of pool "
                        f"{name}: {_summary(s.unknown)}", "")
            names = ", ".join(c.node for c in s.unknown[:2]) + \
                (", ..." if len(s.unknown) > 2 else "")
            return (f": CDI devices not verified: {failing}",
                    f"gpupool: devices not verified on {len(s.unknown)} candidate node(s) "
                    f"({names}); see gpupool doctor")
        case Finding.NOT_DELIVERED if all(c.way == nri.WAY for c in s.missing):
            # Only what its annotations name is lost: its device plugin's GPUs still arrive
            # (a plugin finding that says more would have won on the node).
            return (f": on every candidate node of pool {name}, the devices its "
                    f"{nri.DOMAIN} annotations name would not reach its containers (the "
                    f"GPUs its device plugin hands would): {failing}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_DELIVERED if not all(c.undelivered for c in s.missing):
            return (f" would not get the GPUs its device plugin accounted for on any "
                    f"candidate node of pool {name}: {failing}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_DELIVERED:
            return (f" would start without its GPUs on every candidate node of pool "
                    f"{name}: {failing}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.NOT_ACCOUNTED:
            return (f" would get a GPU, but not the one its device plugin accounted for, "
                    f"on every candidate node of pool {name}: {failing}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.UNKNOWN_DEVICE:
            device = next((m for c in s.missing for m in c.missing), "")
            return (f" would fail on its node with '{device}: unknown device': the "
                    "legacy hook hands the names in its own NVIDIA_VISIBLE_DEVICES to "
                    "nvidia-container-cli, which knows no such GPU or MIG device there "
                    f"(UUID or index): {failing}. Fix: name the node's GPUs by UUID "
                    "or index, or remove NVIDIA_VISIBLE_DEVICES from the pod's GPU "
                    "containers so the device plugin's GPUs are used", "")
        case Finding.NOT_BOUND:
            return (f" would fail on its node: HAMi's device plugin serves every candidate "
                    f"node of pool {name} and allocates only for pods HAMi's scheduler "
                    f"bound ('no binding pod found on node'): {failing}. "
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")
        case Finding.MISSING:
            why = _why(pool, s.missing)
            return (f" would fail on its node with 'unresolvable CDI devices': no "
                    f"candidate node of pool {name} defines the CDI devices it needs: "
                    f"{failing}. {why + '. ' if why else ''}"
                    f"Fix: {fix_text(pool, s.missing, policy, view)}", "")


# ------------------------------------------------------------------ DRA allocation


def _shown(f: PodFinding) -> str:
    """The failing nodes, as messages quote them."""
    failing: tuple[tuple[str, Said | None], ...] = f.fact("failing")
    count: int = f.fact("count")
    return "; ".join(f"{node}: {words(why)}" for node, why in failing[:SHOW_NODES]) + \
        (f" (and {count - SHOW_NODES} more)" if count > SHOW_NODES else "")


def _dra_nodes(f: PodFinding) -> tuple[NodeFinding, ...]:
    """The nodes that decided, a line each: those that can allocate the pod's claims, the
    one where a selector fails, or those that cannot, each with why."""
    if f.what == "dra.allocatable":
        return tuple(NodeFinding(n, note="can allocate its DRA claims")
                     for n in f.fact("able_first"))
    if f.what == "dra.selectorFails":
        return (NodeFinding(f.fact("node"), note=f.fact("failure")),)
    if "failing" in f.facts:
        return tuple(NodeFinding(node, note=words(why)) for node, why in f.fact("failing"))
    return ()


def _dra(f: PodFinding, policy: Policy, view: ClusterView | None) -> tuple[str, str]:
    pool = f.pool
    match f.what:
        case "dra.adminAccessForbidden":
            return (f": {f.fact('request')} asks for adminAccess, but namespace "
                    f"{f.fact('namespace')} is not labelled {dra.ADMIN_ACCESS_LABEL}=true, so "
                    "the claim cannot be allocated (the API server refuses such claims). Fix: "
                    f"label the namespace {dra.ADMIN_ACCESS_LABEL}=true if it may, or drop "
                    "adminAccess", "")
        case "dra.classesUnknown":
            return ": DRA claims not checked (DeviceClasses not listed)", ""
        case "dra.classMissing":
            missing: tuple[str, ...] = f.fact("missing")
            return (f" asks for devices of DeviceClass {', '.join(missing)}, "
                    "which does not exist: its claims cannot be allocated until it is "
                    "created. Fix: install the DRA driver that provides it, or name a "
                    f"class that exists ({', '.join(f.fact('known')) or 'none'})",
                    f"gpupool: DeviceClass {missing[0]} does not exist; the pod stays "
                    "pending until it does")
        case "dra.selectorFails":
            node = f.fact("node")
            return (f": on node {node}, {f.fact('failure')}. The scheduler's DRA plugin "
                    "ends the pod's whole scheduling attempt at such an error, "
                    "whichever other node could serve it, so the pod is placed "
                    "nowhere while that device is there. Fix: guard the selector "
                    "(has(...), or test the device's driver or type first)",
                    f"gpupool: a DRA selector fails at run time on node {node}; the "
                    "pod stays pending")
        case "dra.noDevicesInPool":
            return (f": no node of pool {pool} that its placement allows "
                    "publishes DRA devices; its claims cannot be allocated there",
                    f"gpupool: no node of pool {pool} publishes DRA devices for "
                    "this pod")
        case "dra.allocatable":
            if not f.fact("able"):
                return "", ""
            return (f": {f.fact('able')} of {f.fact('total')} candidate node(s) of pool "
                    f"{pool} can allocate its DRA claims"
                    + ("; it waits for devices allocated claims hold" if f.fact("waits")
                       else ""), "")
        case "dra.doubt":
            return f": DRA claims not verified: {words(f.fact('doubt'))}; {_shown(f)}", ""
        case "dra.pinnedElsewhere":
            where: tuple[str, ...] = f.fact("where")
            failing: tuple[tuple[str, Said | None], ...] = f.fact("failing")
            count: int = f.fact("count")
            at = f"node(s) {listed(where, SHOW_NODES)}" if where else "no node gpupool knows"
            reach = listed([node for node, _ in failing], SHOW_NODES, total=count)
            return (f": {f.fact('source')} is allocated already, to devices its "
                    f"status.allocation.nodeSelector places on {at}, and no node the pod can "
                    f"reach ({reach}) matches it. The scheduler places a pod only where its "
                    "allocated claims' devices are, so it is never schedulable while that "
                    "allocation stands (not a wait for devices in use). Fix: let the pod "
                    "reach the node the claim is allocated on (its nodeSelector, affinity and "
                    "tolerations), or have the claim deallocated (every pod reserving it "
                    "gone) so it is allocated again where the pod can run",
                    "gpupool: an allocated claim pins this pod to nodes outside its "
                    "reach; it stays pending while that stands")
        case "dra.notDelivered":
            return (f" would start without its DRA devices on every candidate node of "
                    f"pool {pool}: {_shown(f)}. Fix: enable CDI in containerd on those "
                    "nodes (enable_cdi = true; the default from containerd 2.0)", "")
        case "dra.noDevices":
            return (f": no candidate node of pool {pool} publishes the devices "
                    f"its claims ask for: {_shown(f)}",
                    f"gpupool: no node in pool {pool} has the DRA devices this pod "
                    "asks for; it stays pending")
    raise AssertionError(f"no words for {f.what}")


def _unresolved(n: Note) -> str:
    return f"gpupool: {n.fact('ref')} not found yet; its devices were not checked"


def _classes_unknown(n: Note) -> str:
    return "gpupool: DeviceClasses unknown to gpupool; DRA claims not checked"


def _mixed(n: Note) -> str:
    return (f"gpupool: node {n.fact('node')} serves {n.fact('resource')} by device plugin "
            f"and by DeviceClass {n.fact('device_class')}; see gpupool doctor")


def _waits(n: Note) -> str:
    return (f"gpupool: this pod waits for devices in use on {n.fact('nodes')} "
            f"node(s) of pool {n.fact('pool')}: allocated claims hold what it needs")


def _doubt(n: Note) -> str:
    if n.fact("supported"):
        return "gpupool: DRA selectors could not be evaluated; claims not fully checked"
    return (f"gpupool: DRA claims not checked: Kubernetes {n.fact('release')}'s allocator "
            "is not one gpupool decides as")


# ------------------------------------------------------------------ user namespace


def _user_namespace(f: PodFinding, policy: Policy, view: ClusterView | None
                    ) -> tuple[str, str]:
    if not f.denies:
        # (a warning only: the pod's own finding stays its statement)
        return "", ("gpupool: hostUsers: false GPU pods fail under the NVIDIA toolkit's "
                    "hooks (#648)")
    return (" sets hostUsers: false (a user namespace): the NVIDIA Container "
            "Toolkit's hooks (nvidia-cdi-hook) run as the remapped user and fail, so its "
            "containers would not start on any GPU node (NVIDIA/nvidia-container-toolkit#648). "
            "Fix: drop hostUsers: false from GPU pods; set the policy's onUserNamespace: warn "
            "once your toolkit supports user namespaces", "")


#: each check's words, by the check's part of ``PodFinding.what``
_TEXTS: dict[str, Callable[[PodFinding, Policy, ClusterView | None], tuple[str, str]]] = {
    "cdi": _cdi, "dra": _dra, "userNamespace": _user_namespace,
}
#: each check's node lines (``Decision.nodes``)
_NODES: dict[str, Callable[[PodFinding], tuple[NodeFinding, ...]]] = {
    "cdi": _cdi_nodes, "dra": _dra_nodes, "userNamespace": lambda f: (),
}
_NOTES: dict[str, Callable[[Note], str]] = {
    allocation.UNRESOLVED: _unresolved, allocation.CLASSES_UNKNOWN: _classes_unknown,
    allocation.MIXED: _mixed, allocation.WAITS: _waits, allocation.DOUBT: _doubt,
}
