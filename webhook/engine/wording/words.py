"""The one place a ``Said`` becomes words: the note each node gets in a decision's
``nodes``, in doctor's rows and in a re-checked pod's answer, the fix a finding names,
routing's evidence and findings, a pod's admission messages and the answers about running
pods and nodes.

Whether GPUs resolve on a node (``webhook.api.delivery``), the node checks
(``checks.plugindevices``, ``checks.owndevices``, ``checks.nriannotations``), the NRI
plugin's model (``stacks.nri``), DRA allocation (``stacks.dra``, ``stacks.allocator``,
``checks.allocation``), routing (``placement.routing``), containers without a grant
(``access.grants``), the admission entry and a pod's stage (``admission``) and aftercare
(``aftercare.restart``, ``podrisk``, ``nodehazards``) answer with ``Said`` data and write
no text; ``words`` looks each up here by its ``what``. So one node's
note reads like every other's, and a sentence is changed in one place. ``checks.render``
builds the pod checks' decisions and asks this module for every ``Said`` they carry; a
``said(...)`` key without words here, or words nothing says, fails a test
(``tests/unit/engine/test_words.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from webhook.api import delivery
from webhook.api.held import VISIBLE_DEVICES
from webhook.api.inventory import PLUGIN_RESOURCE
from webhook.api.said import Said
from webhook.engine.core.decision import SHOW_DEVICES, SHOW_NODES
from webhook.engine.core.objects import clip
from webhook.engine.core.policy import HAMI_IGNORE_LABEL, HAMI_IGNORE_VALUE, POOL_LABEL
from webhook.engine.pod.podfacts import DEFAULT_SCHEDULER
from webhook.engine.stacks import clusterpolicy, hami, nri
from webhook.engine.stacks.releases import NEWEST, OLDEST, Release


def words(s: Said | None) -> str:
    """What ``s`` says, as the user reads it ("" for nothing said)."""
    if s is None:
        return ""
    return WORDS[s.what](s)


def known(what: str) -> bool:
    """Does the wording module word ``what``?"""
    return what in WORDS


def listed(names: Sequence[str], limit: int, total: int | None = None) -> str:
    """The first ``limit`` of ``names`` and how many more there are (of ``total``, where the
    names given are only the first of them), as every message lists nodes and devices."""
    more = (len(names) if total is None else total) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def _shown(names: tuple[str, ...]) -> str:
    """Device names as a restarted container's notes list them."""
    return listed(names, SHOW_DEVICES)


# ------------------------------------------------------------- delivery (webhook.api.delivery)


def _handed(s: Said) -> str:
    """Where an NVIDIA_VISIBLE_DEVICES value comes from: a restarted container's cached
    answer (``container``), or the pod."""
    return f"container {s.fact('container')} is handed back " \
           f"NVIDIA_VISIBLE_DEVICES={s.fact('value')}"


def _told(s: Said) -> str:
    if s.fact("container") is not None:
        return _handed(s)
    return (f"the pod sets NVIDIA_VISIBLE_DEVICES={s.fact('value')} itself, which overrides "
            "the device plugin's")


def _short(s: Said) -> str:
    if s.fact("container") is not None:
        return _handed(s)
    return f"the pod sets NVIDIA_VISIBLE_DEVICES={s.fact('value')} itself"


def _mode_without_specs(s: Said) -> str:
    mode = s.fact("mode")
    why = ("no CDI" if mode in delivery.NON_CDI_MODES
           else "the runtime generates a spec for the node's own GPUs")
    return f"runtime mode {mode}: {why}"


def _legacy_unchecked(s: Said) -> str:
    lead = f"{_handed(s)}, which names " if s.fact("container") is not None else \
        f"NVIDIA_VISIBLE_DEVICES={s.fact('value')}, set by the pod, names "
    return (lead + f"{', '.join(s.fact('names'))}: a PCI bus id, a MIG index or a MIG "
            "device the node's inventory does not list, which nvidia-container-cli resolves "
            "from the driver; not checked")


_DELIVERY: dict[str, Callable[[Said], str]] = {
    "delivery.byContainerd": lambda s: "resolved by containerd whatever the runtime mode",
    "delivery.specTooNew": lambda s: (
        f"containerd here reads CDI specs up to version {s.fact('reads')} (the CDI library "
        f"it is built with) and refuses a newer file whole: {_shown(s.fact('devices'))} "
        f"{'is' if len(s.fact('devices')) == 1 else 'are'} defined only in a spec of a "
        f"newer version (the node's newest: {s.fact('newest')})"),
    "delivery.specTooNewFix": lambda s: (
        (f"upgrade containerd on those nodes to {s.fact('upgrade')} or later, or "
         if s.fact('upgrade') else "")
        + f"have the toolkit write CDI specs of version {s.fact('reads')} or older there"),
    "delivery.otherDefaultHandler": lambda s: (
        f"containerd's default handler {s.fact('handler')} is not the NVIDIA runtime: "
        "NVIDIA_VISIBLE_DEVICES is ignored and the pod's containers start without their "
        "GPUs"),
    "delivery.envvarIgnored": lambda s: (
        "the NVIDIA runtime's accept-nvidia-visible-devices-envvar-when-unprivileged is "
        "false: an unprivileged container's NVIDIA_VISIBLE_DEVICES is ignored and it starts "
        "without its GPUs"),
    "delivery.modeUnknown": lambda s: "runtime mode unknown",
    "delivery.criDropped": lambda s: (
        "containerd's CDI is off (enable_cdi = false) and the device plugin hands its CDI "
        "names through the CRI (cdi-cri): containerd drops them and the pod's containers "
        "start without their GPUs"),
    "delivery.annotationsNotNvidia": lambda s: (
        f"containerd's CDI is off and handler {s.fact('handler')} is not the NVIDIA "
        "runtime: nothing resolves the device plugin's CDI annotations and the pod's "
        "containers start without their GPUs"),
    "delivery.annotationsNotPassed": lambda s: (
        f"containerd's CDI is off and its handler {s.fact('handler')} passes no cdi.k8s.io/ "
        "annotation to the NVIDIA runtime (container_annotations): the device plugin's CDI "
        "names never reach a resolver and the pod's containers start without their GPUs"),
    "delivery.annotationsIgnored": lambda s: (
        f"containerd's CDI is off and the NVIDIA runtime runs in {s.fact('mode')} mode, "
        "which ignores CDI annotations: the device plugin's CDI names are never resolved "
        "and the pod's containers start without their GPUs"),
    "delivery.cdiOffUnknown": lambda s: (
        "containerd's CDI is off: whether the device plugin's CDI names reach the NVIDIA "
        "runtime (its strategy, the handler's container_annotations) is not known here"),
    "hami.notBound": lambda s: (
        "HAMi's device plugin serves this node and allocates only for pods HAMi's scheduler "
        "bound: the kubelet's Allocate for this pod fails ('no binding pod found on node')"),
    "hami.notBoundFix": lambda s: (
        "keep HAMi's device plugin off those nodes (its DaemonSet's nodeSelector, "
        "devicePlugin.nvidiaNodeSelector in HAMi's chart) and run the pool's own device "
        "plugin there, or put those nodes in HAMi's pool"),
    "delivery.cdiOffFix": lambda s: (
        "turn containerd's CDI on on those nodes (enable_cdi = true in its CRI plugin, as "
        "the GPU Operator's toolkit writes it with CDI enabled), or have containerd pass "
        "cdi.k8s.io/* annotations to the NVIDIA runtime handler (container_annotations) "
        "with the runtime in cdi or auto mode and the device plugin in cdi-annotations"),
    "delivery.byRuntime": lambda s: (
        f"containerd's CDI is off: the NVIDIA runtime ({s.fact('mode')} mode) resolves the "
        "device plugin's CDI annotations from its spec dirs"),
    "delivery.modeWithoutSpecs": _mode_without_specs,
    "delivery.justInTime": lambda s: (
        f"default kind {delivery.JIT_KIND}: generated just in time, no spec file needed"),
    "own.noDevice": lambda s: f"{_told(s)}: its containers get no GPU",
    "own.overrides": _told,
    "legacy.noDevice": lambda s: (
        f"{_short(s)}: the legacy hook reads {s.fact('name')} as no GPU, so its containers "
        "get none"),
    "legacy.gpusUnknown": lambda s: (
        "the node's GPUs are not known (no driver list in its inventory): the names "
        + ("it is handed" if s.fact("container") is not None else "its pod sets")
        + " cannot be checked"),
    "legacy.unknownDevice": lambda s: (
        f"{_short(s)}: nvidia-container-cli fails the container with '{s.fact('name')}: "
        "unknown device' (not a GPU or MIG device of the node by UUID or index)"),
    "legacy.unchecked": _legacy_unchecked,
}


# ------------------------------------------------------------ the device plugin's GPUs


def _inferred(s: Said) -> str:
    kind = s.fact("kind")
    spec = f"a {kind} spec on the node" if s.fact("has_spec") else f"no {kind} spec on the node"
    fails, runs = ("UUIDs (envvar)", "CDI names") if s.fact("cdi_resolves") else \
        ("CDI names", "UUIDs (envvar)")
    shown = ", ".join(s.fact("missing")[:SHOW_DEVICES])
    why = s.fact("why") or ("the agent did not look at the node's device-plugin pods (it "
                            "runs with --no-plugin-pods, cannot reach the API server, or "
                            "predates the look)")
    return (f"how the device plugin hands GPUs is only inferred from {spec}: handed as "
            f"{runs} they resolve, handed as {fails} they do not"
            + (f" ({shown})" if shown else "")
            + f"; not learned from its pod: {why}; pin the pool's cdi.delivery in the "
              "policy, or let gpupool's agent read the plugin's pod")


def _mig_unchecked(s: Said) -> str:
    resources: tuple[str, ...] = s.fact("resources")
    why = ("gpupool's agent does not read the kubelet's device checkpoint there"
           if not s.fact("checkpoint_read")
           else f"the kubelet lists no {', '.join(resources)} device there")
    asks = "the pod asks for MIG devices" if resources != (PLUGIN_RESOURCE,) else \
        f"its device plugin runs the single MIG strategy, so {PLUGIN_RESOURCE} may be MIG " \
        "devices"
    return f"{asks}, whose CDI names cannot be checked: {why}"


_PLUGIN: dict[str, Callable[[Said], str]] = {
    "node.noInventory": lambda s: (
        s.fact("error") or "no CDI inventory published (is gpupool's agent running?)"),
    "plugin.nonCdiClass": lambda s: f"RuntimeClass {s.fact('runtime_class')} uses no CDI",
    "plugin.gpusUnknown": lambda s: (
        "no GPU UUIDs known (no driver list in the inventory, no "
        "hami.io/node-nvidia-register annotation)"),
    "plugin.onlyCordoned": lambda s: (
        f"only GPUs cordoned by {hami.CORDON_ANNOTATION} lack their CDI devices "
        f"({', '.join(s.fact('gpus')[:SHOW_DEVICES])}); HAMi's scheduler may still hand "
        "them out until it next re-registers the node's GPUs"),
    "plugin.inferred": _inferred,
    "mig.noMigKind": lambda s: (
        f"no CDI spec there defines any MIG device of kind {s.fact('kind')} (MIG-<uuid> or "
        "<gpu>:<mig>)"),
    "mig.unchecked": _mig_unchecked,
    "mig.modeUnknown": lambda s: (
        f"its device plugin runs the single MIG strategy, which hands {PLUGIN_RESOURCE} as "
        "MIG devices where the GPUs have MIG enabled and as whole GPUs where not, and "
        "neither the kubelet's device list (gpupool's agent does not read it there) nor the "
        "node's labels (nvidia.com/mig.capable, nvidia.com/gpu.product from GPU feature "
        "discovery, nvidia.com/mig.config from the MIG manager) say which"),
    "hamiMig.created": lambda s: (
        f"HAMi runs GPU(s) {', '.join(s.fact('gpus')[:SHOW_DEVICES])} in MIG mode: it "
        f"creates a MIG device when it allocates one, which no {s.fact('kind')} CDI spec on "
        "the node can define"),
    "hamiMig.fix": lambda s: (
        f"run HAMi's GPUs on {s.fact('node')} in hami-core mode, or hand GPUs through "
        f"NVIDIA_VISIBLE_DEVICES to a runtime that generates MIG devices just in time "
        f"(mode auto, or default kind {delivery.JIT_KIND})"),
}


# ------------------------------------------------------- the pod's own NVIDIA_VISIBLE_DEVICES


_OWN: dict[str, Callable[[Said], str]] = {
    "own.valueFrom": lambda s: (
        "a GPU container takes NVIDIA_VISIBLE_DEVICES from valueFrom, which replaces the "
        "device plugin's; its value cannot be known at admission (the plugin's own would "
        f"fail: {words(s.fact('plugin')) or ', '.join(s.fact('missing')[:2])})"),
    "own.fixCdiOff": lambda s: (
        "set NVIDIA_VISIBLE_DEVICES in the pod's GPU containers to devices the node's "
        "runtime resolves, or turn containerd's CDI on on those nodes (enable_cdi = true) "
        "so that the device plugin's CDI names reach the containers"),
    "own.fix": lambda s: (
        "remove NVIDIA_VISIBLE_DEVICES from the pod's GPU containers: the device plugin "
        "sets it"),
    "own.allResolve": lambda s: "every GPU container's own NVIDIA_VISIBLE_DEVICES resolves",
}


# ------------------------------------------------------ NRI annotations (stacks.nri)


_NRI: dict[str, Callable[[Said], str]] = {
    "nri.disabled": lambda s: (
        "containerd's NRI is disabled on the node: the GPU Operator's NRI plugin cannot "
        f"inject the devices the pod's {nri.DOMAIN} annotations name"),
    "nri.disabledFix": lambda s: (
        'enable NRI in containerd on those nodes (plugins."io.containerd.nri.v1.nri" '
        "disable = false)"),
    "nri.undefined": lambda s: (
        f"no CDI spec on the node defines {', '.join(s.fact('missing')[:3])}, named in "
        f"{nri.DOMAIN} annotations the GPU Operator's NRI plugin injects"),
    "nri.undefinedFix": lambda s: (
        f"correct the pod's {nri.DOMAIN} annotation to devices the node's CDI specs define "
        f"(the GPU Operator writes {nri.MANAGEMENT}=all), or define "
        f"{', '.join(s.fact('missing')[:3])} on those nodes"),
    "nri.dropped": lambda s: (
        f"the GPU Operator's NRI plugin drops {nri.MANAGEMENT} devices for namespace "
        f"{s.fact('namespace')} (allowed: {', '.join(s.fact('allowed')) or 'none known'}): "
        f"container(s) {', '.join(s.fact('containers'))} start without the devices their "
        f"{nri.DOMAIN} annotation names"),
    "nri.droppedFix": lambda s: (
        f"add namespace {s.fact('namespace')} to {nri.NAMESPACES_ENV} in the ClusterPolicy's "
        "spec.toolkit.env, or ask for GPUs through the device plugin instead of a "
        f"{nri.DOMAIN} annotation"),
    "nri.namespaceUnknown": lambda s: (
        "the GPU Operator's namespace is not known (its ClusterPolicy has no "
        f"status.namespace): whether its NRI plugin gives namespace {s.fact('namespace')} "
        f"{nri.MANAGEMENT} devices cannot be told"),
    "nri.covers": lambda s: (
        f"the GPU Operator's NRI plugin injects {s.fact('covered')} into every GPU container "
        f"(its {nri.DOMAIN} annotations), the GPU its device plugin accounted for among "
        "them"),
    "nri.misaccounted": lambda s: (
        "the GPUs its device plugin accounted for, handed in NVIDIA_VISIBLE_DEVICES, are not "
        f"delivered there, but the GPU Operator's NRI plugin injects what its {nri.DOMAIN} "
        f"annotations name ({', '.join(s.fact('named')[:3])}): its containers get a GPU, "
        "not the one accounted for, so two pods can share a GPU its device plugin believes "
        "is split"),
    "nri.misaccountedFix": lambda s: (
        f"drop the pod's {nri.DOMAIN} annotation and set HAMi's chart value "
        "devicePlugin.deviceListStrategy=cdi-annotations (a CDI strategy, which the NRI "
        "plugin delivers under any handler), or make the NVIDIA runtime containerd's "
        "default runtime on those nodes"),
}


# ----------------------------------------------- a restarted container (aftercare.restart)


def _not_read(s: Said) -> str:
    why = words(delivery.UNPRIVILEGED_ENVVAR_IGNORED) if s.fact("ignored") else \
        "its runtime handler there is not the NVIDIA runtime, which alone reads " \
        "NVIDIA_VISIBLE_DEVICES"
    return f"{_handed(s)}: {why}"


def _either_way(s: Said) -> str:
    runs, fails = ("UUIDs", "CDI names") if s.fact("uuids_resolve") else \
        ("CDI names", "UUIDs")
    return (f"handed as {runs} they resolve, handed as {fails} they do not "
            f"({words(s.fact('failing'))}); whether HAMi's device plugin handed them one way "
            "or the other when the pod started is in the kubelet's checkpoint alone (let "
            "gpupool's agent read it: --kubelet-checkpoint)")


#: where what a pod holds was read (``aftercare.restart.Basis``)
_BASIS = {
    "checkpoint": "as the kubelet cached it when the pod started (its checkpoint, published "
                  "by gpupool's agent)",
    "hami": f"as HAMi's scheduler recorded them ({hami.ALLOCATED_ANNOTATION})",
}


def _at(s: Said) -> str:
    """The pod, its node and what it holds there, as a restart answer opens."""
    held = s.fact("held")
    holds = f"it holds {_shown(held)}" if held else "it holds no device"
    return f"on node {s.fact('node')}: {holds}, {_BASIS[s.fact('basis')]}"


def _fails(s: Said) -> str:
    fix = words(s.fact("fix")) or (
        "restore a CDI spec that defines them, or delete the pod so that its replacement is "
        "allocated afresh on the node as it is now" if s.fact("missing") else
        "delete the pod so that its replacement is allocated afresh on the node as it is now")
    return (f"{s.fact('who')} fails on its next container start {_at(s)}; "
            f"{words(s.fact('note'))}; {fix}")


_RESTART: dict[str, Callable[[Said], str]] = {
    "restart.unreadable": lambda s: (
        f"{s.fact('who')} may fail on its next container start on node {s.fact('node')}: "
        f"what it holds there cannot be read: {words(s.fact('error'))}"),
    "restart.runs": lambda s: (
        f"{s.fact('who')} restarts with its devices {_at(s)}, and they resolve there"),
    "restart.mayFail": lambda s: (
        f"{s.fact('who')} may fail on its next container start {_at(s)}; "
        f"{words(s.fact('note'))}"),
    "restart.fails": _fails,
    "restart.handlerGone": lambda s: (
        f"containerd's config there no longer defines runtime handler {s.fact('handler')} "
        f"(RuntimeClass {s.fact('runtime_class')}), and containerd creates each container "
        "with its pod sandbox's handler: the container cannot be created"),
    "restart.handlerGoneFix": lambda s: (
        f"restore runtime handler {s.fact('handler')} in containerd's config on "
        f"{s.fact('node')}, or recreate the pod with a RuntimeClass whose handler the node "
        "has"),
    "restart.cdiMissing": lambda s: (
        f"container {s.fact('container')} is handed back CDI device(s) "
        f"{_shown(s.fact('missing'))}, which no CDI spec on the node defines now "
        "(containerd resolves them with the CDI library)"),
    "restart.deviceGone": lambda s: (
        f"it holds {_shown(s.fact('missing'))}, which the node no longer has (its driver "
        "does not list the GPU now, or its device plugin no longer registers the MIG "
        "device): a restarted container is handed it again and cannot get it, whatever a "
        "spec left from before still names"),
    "restart.notRead": _not_read,
    "restart.migJustInTime": lambda s: (
        f"{_handed(s)}: MIG device(s) {_shown(s.fact('missing'))}, which the runtime "
        "generates just in time if the driver still has them; the node's MIG devices are "
        "not all known here"),
    "restart.specMissing": lambda s: (
        f"{_handed(s)}, which the NVIDIA runtime (mode cdi) resolves as "
        f"{_shown(s.fact('missing'))}: no CDI spec on the node defines it now"),
    "restart.noSuchDevice": lambda s: (
        f"{_handed(s)}, but the node has no such device for the runtime to generate just in "
        f"time ({_shown(s.fact('missing'))})"),
    "held.notPublished": lambda s: (
        f"gpupool's agent on node {s.fact('node')} publishes no gpupool.io/held-devices (run "
        "it with --kubelet-checkpoint, the chart's agent.kubeletCheckpoint)"),
    "held.unreadable": lambda s: (
        f"node {s.fact('node')}'s gpupool.io/held-devices: {s.fact('error')}"),
    "held.checkpointUnreadable": lambda s: (
        f"the kubelet's checkpoint on node {s.fact('node')} cannot be read: "
        f"{s.fact('error')}"),
    "held.leftOut": lambda s: (
        f"node {s.fact('node')}'s gpupool.io/held-devices left this pod out: the node's pods "
        "hold more than its budget"),
    "held.nothing": lambda s: (
        f"the kubelet held nothing for it when gpupool's agent on node {s.fact('node')} last "
        f"published (at {s.fact('when') or 'an unknown time'}): the agent may not have "
        "caught up yet"),
    "restart.mountsOnly": lambda s: (
        f"container {s.fact('container')} is handed back device nodes or mounts only, which "
        "gpupool does not judge"),
    "restart.eitherWay": _either_way,
}


# ------------------------------------- a node's GPUs for the demand (placement.candidates)


def _none_allowed(s: Said) -> str:
    """Which of the pod's HAMi annotations ruled out which GPUs: a UUID the node does not
    have is named, as the likeliest mistake (a GPU replaced, a UUID copied from another
    node)."""
    gpus: tuple[str, ...] = s.fact("gpus")
    use: tuple[str, ...] = s.fact("use_uuids")
    said_by = []
    if use:
        absent = [u for u in use if u not in gpus]
        said_by.append(f"{hami.USE_UUID_ANNOTATION} asks for {listed(use, SHOW_DEVICES)}"
                       + (", none of them on this node" if len(absent) == len(use) else
                          f" ({listed(absent, SHOW_DEVICES)} not on this node)" if absent
                          else ""))
    for key, values in ((hami.NOUSE_UUID_ANNOTATION, s.fact("nouse_uuids")),
                        (hami.USE_TYPE_ANNOTATION, s.fact("use_types")),
                        (hami.NOUSE_TYPE_ANNOTATION, s.fact("nouse_types"))):
        if values:
            said_by.append(f"{key} says {listed(values, SHOW_DEVICES)}")
    return (f"none of its GPUs is allowed by the pod's HAMi annotations: "
            f"{'; '.join(said_by)}; the node has {listed(gpus, SHOW_DEVICES)}")


_FIT: dict[str, Callable[[Said], str]] = {
    "fit.noneAllowed": _none_allowed,
    "fit.tooFewGPUs": lambda s: (
        f"a container asks for {s.fact('asks')} GPUs, the node has {s.fact('has')} it may "
        "use"),
    "fit.tooFewAllocatable": lambda s: (
        f"the pod asks for {s.fact('asks')} {s.fact('resource')}, the node has "
        f"{s.fact('has')} allocatable"),
}


# ------------------------------------ DRA allocation (checks.allocation, stacks.allocator)


def release_note(release: Release) -> str:
    """One line for the log, ``doctor`` and DRA messages: empty where gpupool supports the
    release and decides DRA allocation as its allocator does."""
    dra = (f"gpupool does not decide DRA allocation as Kubernetes {release}'s allocator "
           f"does (it does for 1.{OLDEST} to 1.{NEWEST}): DRA pods are "
           "admitted with a warning, never denied, for their allocation")
    if release.supported:
        return ""
    side = "older than" if release.minor < OLDEST else "newer than"
    return (f"Kubernetes {release} is {side} the releases gpupool supports (1.{OLDEST} to "
            f"1.{NEWEST}); {dra}")


def _too_few(s: Said) -> str:
    amount: int = s.fact("amount")
    need = "at least one device" if amount == 0 else \
        f"{amount} device{'s' if amount > 1 else ''}"
    tainted = s.fact("tainted")
    return (f"{s.fact('source')} request {s.fact('request')} needs {need} of class "
            f"{s.fact('device_class')}"
            f"{' matching its selectors' if s.fact('selectors') else ''}; "
            f"{s.fact('found')} found"
            + (f", {tainted} more behind device taints it does not tolerate" if tainted
               else ""))


_DRA: dict[str, Callable[[Said], str]] = {
    # the allocator's own error, as it returns it
    "dra.error": lambda s: str(s.fact("error")),
    "dra.searchUnfinished": lambda s: (
        f"the allocation search was not finished ({s.fact('why')})"),
    "dra.searchTooDeep": lambda s: "the allocation search went too deep",
    "dra.noSet": lambda s: (
        "no set of devices there satisfies all its requests together (counts, selectors, "
        "taints, constraints, capacity, counters)"),
    "dra.noClass": lambda s: f"DeviceClass {s.fact('device_class')} does not exist",
    "dra.allTainted": lambda s: (
        f"{s.fact('source')} request {s.fact('request')} asks for all devices of class "
        f"{s.fact('device_class')}, and {s.fact('tainted')} of them are behind device "
        "taints it does not tolerate"),
    "dra.tooFew": _too_few,
    "dra.pinnedOff": lambda s: (
        f"{s.fact('source')} is allocated already, to devices this node cannot reach (its "
        "status.allocation.nodeSelector does not match it)"),
    "dra.releaseUnsupported": lambda s: release_note(s.fact("release")),
    "dra.cdiDisabled": lambda s: (
        "containerd has CDI disabled (enable_cdi = false): the DRA driver's CDI devices "
        "would not reach the container"),
}


# ------------------------------------------------ routing's evidence and findings (routing)


def _node_names(s: Said) -> str:
    nodes: tuple[str, ...] = s.fact("nodes")
    shown = ", ".join(clip(n) for n in nodes[:3]) + (" ..." if len(nodes) > 3 else "")
    return f"node affinity on metadata.name {shown} (nodes of pool {s.fact('pool')!r})"


def _no_single_pool(s: Said) -> str:
    parts = "; ".join(f"{', '.join(hits)} only in pool {pool!r}"
                      for pool, hits in s.fact("exclusive"))
    return f"the pod asks for things no single pool serves: {parts}"


_ROUTING: dict[str, Callable[[Said], str]] = {
    "evidence.label": lambda s: f"label {POOL_LABEL}={s.fact('pool')}",
    "evidence.nodeName": lambda s: (
        f"spec.nodeName {s.fact('node')} (a node of pool {s.fact('pool')!r})"),
    "evidence.nodeNames": _node_names,
    "evidence.nodeSelector": lambda s: f"nodeSelector {s.fact('key')}={s.fact('value')}",
    "evidence.nodeAffinity": lambda s: f"required node affinity on {s.fact('key')}",
    "evidence.namespace": lambda s: (
        f"namespace {clip(s.fact('namespace'))} label {POOL_LABEL}={s.fact('pool')}"),
    "evidence.servedOnly": lambda s: f"{s.fact('hit')} (served only by pool {s.fact('pool')!r})",
    "evidence.onlyServing": lambda s: (
        f"{s.fact('resource')} (served only in pool {s.fact('pool')!r}, through DeviceClass "
        f"{s.fact('device_class')}'s extendedResourceName)"),
    "evidence.defaultPool": lambda s: "the default pool",
    "evidence.firstAlternative": lambda s: (
        f"the first firstAvailable alternative a node of pool {s.fact('pool')!r} can "
        "allocate"),
    "route.conflict": lambda s: (
        f"{words(s.fact('source'))} puts the pod in pool {clip(s.fact('pool'))!r} but "
        f"{words(s.fact('bound'))} puts it in pool {clip(s.fact('bound_pool'))!r}; remove one "
        "of them or make them agree"),
    "route.unknownPool": lambda s: (
        f"label {POOL_LABEL}={clip(s.fact('label'))} names no pool; known pools: "
        f"{', '.join(s.fact('pools'))}"),
    "route.nodeUnknown": lambda s: (
        f"node {clip(s.fact('node'))} is not in gpupool's node cache; its pool was not "
        "checked"),
    "route.noPoolAdmitted": lambda s: (
        f"the pod's nodeSelector and required node affinity on {s.fact('key')} admit no node "
        f"of any pool ({', '.join(s.fact('pools'))})"),
    "route.notAdmitted": lambda s: (
        f"{words(s.fact('constraint'))} allows only pools {', '.join(s.fact('admitted'))} but "
        f"{words(s.fact('bound'))} puts the pod in pool {s.fact('bound_pool')!r}"),
    "route.namespaceNoPool": lambda s: (
        f"namespace {s.fact('namespace')} label {POOL_LABEL}={s.fact('pool')} names no pool; "
        "ignored"),
    "route.noSinglePool": _no_single_pool,
    "route.servedElsewhere": lambda s: (
        f"{', '.join(s.fact('hits'))} is served only by pool {s.fact('pool')!r}, but "
        f"{words(s.fact('bound'))} puts the pod in pool {s.fact('bound_pool')!r}; drop "
        f"{s.fact('hits')[0]} or move the pod to pool {s.fact('pool')!r}"),
}


# ------------------------------------------ a pod's admission stage (admission.pods)

HAMI_DRA_REWRITE = (
    ". HAMi-DRA's webhook rewrote this pod's GPU resources into ResourceClaims of its own "
    "DeviceClass (label hami.io/dra=true) after gpupool had routed it, so it can only run on "
    "HAMi's DRA nodes; keep HAMi-DRA's webhook to HAMi's namespaces "
    "(webhook.config.scope.excludedNamespaces in its chart) or label the pod "
    "gpupool.io/pool with HAMi's pool")
WEBHOOK_ORDER_FIX = ("name gpupool's MutatingWebhookConfiguration so it sorts before "
                     "hami-webhook and keep reinvocationPolicy: IfNeeded")


def _scheduler_cause(current: object, wanted: str) -> str:
    """Why a pod reached validation unrouted, as far as the object itself tells."""
    if not isinstance(current, str) or not current:
        return (f"it has no spec.schedulerName, so it is not routed as its pool requires "
                f"({wanted}). The API server sets one on every pod, so this review did not "
                "come through the API server's mutating webhooks: it was sent by hand or by "
                "another tool; send the pod to /mutate first, or create it through the API "
                "server")
    if current == DEFAULT_SCHEDULER:
        return (f"its schedulerName is still {DEFAULT_SCHEDULER}, not {wanted}: it is not "
                "routed as its pool requires. Either gpupool's mutating webhook did not run "
                "on it (check its rules, objectSelector, matchConditions and failurePolicy "
                "Ignore with gpupool down) or a later mutating webhook reset the field; "
                f"{WEBHOOK_ORDER_FIX}")
    return (f"its schedulerName is {clip(current)}, not {wanted}: another mutating "
            f"webhook changed it after gpupool; {WEBHOOK_ORDER_FIX}")


def _unknown_names(s: Said) -> str:
    """Each unknown name with the one it likely meant."""
    return ", ".join(u.resource + (f" (did you mean {u.likely}?)" if u.likely else "")
                     for u in s.fact("unknown"))


def _unknown_resource(s: Said) -> str:
    profiles = all(u.profile for u in s.fact("unknown"))
    what = "a MIG profile no node advertises" if profiles else \
        "a name that looks like a GPU resource but that no node, DeviceClass or policy serves"
    return (f" asks for {_unknown_names(s)}: {what}, so the scheduler would never place it. "
            "Fix: correct the resource name" + (
                " to a profile a node advertises (kubectl get nodes -o "
                "jsonpath='{.items[*].status.allocatable}')" if profiles else "")
            + "; or set the policy's onUnknownGPUResource: warn")


_POD: dict[str, Callable[[Said], str]] = {
    "pod.unknownResource": _unknown_resource,
    "pod.unknownResourceWarning": lambda s: (
        f"gpupool: no node serves {_unknown_names(s)}; the pod would wait forever"),
    "pod.claimNotFound": lambda s: (
        f"gpupool: {s.fact('ref')} not found; if it asks for GPUs, the pod is not routed to a "
        "GPU pool"),
    "pod.customScheduler": lambda s: (
        f" uses scheduler {clip(s.fact('scheduler'))}; gpupool leaves it alone"),
    "pod.notRouted": lambda s: (
        f"gpupool: scheduler {s.fact('scheduler')} is not a pool's; pod not routed to a GPU "
        "pool"),
    "pod.routeDenied": lambda s: (
        f": {words(s.fact('finding'))}" + (HAMI_DRA_REWRITE if s.fact("hami_dra") else "")),
    "pod.routed": lambda s: f" routed to pool {s.fact('pool')} (by {words(s.fact('source'))})",
    "pod.ignoreLabelRemoved": lambda s: (
        f"gpupool: label {HAMI_IGNORE_LABEL} removed: pool {s.fact('pool')} is HAMi's, whose "
        "webhook must see the pod"),
    "pod.schedulerReplaced": lambda s: (
        f"gpupool: schedulerName {s.fact('current')} replaced by {s.fact('scheduler')} for "
        f"pool {s.fact('pool')}"),
    "pod.repaired": lambda s: (
        f" routed to pool {s.fact('pool')} (by {words(s.fact('source'))}); runtimeClassName "
        f"{s.fact('runtime_class')} set: without it every candidate node would fail it with "
        "'unresolvable CDI devices' (cdi.repair)"),
    "pod.repairedWarning": lambda s: (
        f"gpupool: runtimeClassName {s.fact('runtime_class')} set: its GPUs' CDI devices are "
        "missing on every candidate node (cdi.repair)"),
    "pod.schedulerMismatch": lambda s: (
        f" is in pool {s.fact('pool')} (by {words(s.fact('source'))}) but "
        f"{_scheduler_cause(s.fact('current'), s.fact('wanted'))}"),
    "pod.affinityMismatch": lambda s: (
        f" is in pool {s.fact('pool')} but its node affinity also allows pools "
        f"{', '.join(s.fact('others')) or 'none'}: the gpupool mutating webhook did not run "
        "on it; check its webhook configuration (objectSelector, matchConditions, "
        "failurePolicy)"),
    "pod.stays": lambda s: f" stays in pool {s.fact('pool')}",
    "pod.hamiResourceOutsidePool": lambda s: (
        f" is in pool {s.fact('pool')} (by {words(s.fact('source'))}) but carries "
        f"{', '.join(s.fact('hits'))}, which only HAMi's pool {s.fact('hami_pool')} serves. "
        "If the pod did not ask for it, HAMi's webhook added it before gpupool labelled the "
        f"pod {HAMI_IGNORE_LABEL}={HAMI_IGNORE_VALUE}: {WEBHOOK_ORDER_FIX}; otherwise drop it "
        f"or label the pod gpupool.io/pool={s.fact('hami_pool')}"),
}


# --------------------------------------- containers without a GPU grant (access.grants)

_ACCESS_FIX = (f"ask for a GPU in those containers, set {VISIBLE_DEVICES}=void in them, drop the "
               f"{nri.DOMAIN} annotation, or run the pod in a namespace of "
               "access.exemptNamespaces (docs/security.md)")


def _exposed(s: Said) -> str:
    parts = []
    containers: tuple[tuple[str, str, int], ...] = s.fact("containers")
    if containers:
        names = ", ".join(name or f"{field}[{position}]" for name, field, position in containers)
        parts.append(f"container(s) {names} ask for no GPU, yet on node(s) "
                     f"{listed(s.fact('nodes'), SHOW_NODES)} the NVIDIA runtime would hand "
                     f"them GPUs from {VISIBLE_DEVICES} (set by the container or its image)")
    if s.fact("annotated"):
        parts.append(f"container(s) {', '.join(s.fact('annotated'))} ask for no GPU, yet the "
                     f"GPU Operator's NRI plugin would inject the devices its {nri.DOMAIN} "
                     f"annotations name on node(s) {listed(s.fact('nri_nodes'), SHOW_NODES)}")
    return "; ".join(parts)


def _voided(s: Said) -> str:
    statement = s.fact("statement")
    lead = f"{statement}; " if statement is not None else ": "
    return f"{lead}{VISIBLE_DEVICES}=void set: {words(s.fact('exposed'))}"


_ACCESS: dict[str, Callable[[Said], str]] = {
    "access.exposed": _exposed,
    "access.denied": lambda s: f": {words(s.fact('exposed'))}. Fix: {_ACCESS_FIX}",
    "access.warned": lambda s: (
        f"{s.fact('statement')}; {words(s.fact('exposed'))}" if s.fact("statement")
        else f": {words(s.fact('exposed'))}"),
    "access.warning": lambda s: (
        f"gpupool: {s.fact('count')} container(s) without a GPU grant could get GPUs here; "
        "see docs/security.md"),
    "access.undone": lambda s: (
        f": {words(s.fact('exposed'))}, and {VISIBLE_DEVICES}=void, which gpupool set, is not the "
        "value it ends with: a later mutating webhook changed it. Fix: " + _ACCESS_FIX),
    "access.voided": _voided,
    "access.voidedWarning": lambda s: (
        f"gpupool: {VISIBLE_DEVICES}=void set in {s.fact('count')} container(s) that ask for no "
        "GPU; see docs/security.md"),
}


# ------------------------------------ the admission entry and workloads (admission.admit)


_ADMIT: dict[str, Callable[[Said], str]] = {
    "admit.kindNotHandled": lambda s: (
        f"/{s.fact('stage')} does not handle {s.fact('kind')}; check the webhook "
        "configuration's rules"),
    "admit.kindNotHandledWarning": lambda s: (
        f"gpupool: /{s.fact('stage')} does not handle {s.fact('kind')}; allowed unchecked"),
    "admit.notChecked": lambda s: f"{s.fact('operation')} is not checked",
    "admit.podUpdate": lambda s: "pod updates cannot change routing",
    "admit.templateUnchanged": lambda s: "pod template unchanged",
    "workload.podsAdmitted": lambda s: ": pods would be admitted",
    "admit.forged": lambda s: (
        f" {'carries' if s.fact('creating') else 'would set'} {', '.join(s.fact('keys'))}, "
        f"which only HAMi's scheduler and device plugin write "
        f"({', '.join(s.fact('writers'))}): HAMi's device plugin hands a container the "
        "devices they name, whoever wrote them; "
        f"{s.fact('sender') or 'an unknown sender'} may not. Fix: remove those annotations "
        "(HAMi's scheduler writes them when it binds the pod), or add the writer's identity "
        "to access.schedulerIdentities if it is HAMi's"),
    "workload.podsDenied": lambda s: f": its pods would be denied: {s.fact('message')}",
    "workload.podsDeniedWarning": lambda s: (
        f"gpupool: pods of this {s.fact('kind')} would be denied ({s.fact('reason')}); see "
        "gpupool check"),
    "steering.tooMany": lambda s: (
        f"gpupool: {s.fact('count')} nodes of pool {s.fact('pool')} would fail this pod, too "
        "many to exclude by name; see gpupool doctor"),
}


# ------------------------------------------------ running pods and nodes (aftercare)


def _two_plugins(s: Said) -> str:
    gpus: tuple[str, ...] = s.fact("gpus")
    which = f"its GPUs ({listed(gpus, SHOW_DEVICES)})" if gpus else "its GPUs"
    return (f"node {s.fact('node')}: {' and '.join(s.fact('by'))} both hand out {which} as "
            "nvidia.com/gpu, so two pods can be given the same GPU; label the node "
            f"{clusterpolicy.DEPLOY_LABEL}=false to keep only HAMi's, or move it out of "
            "HAMi's pool")


_AFTERCARE: dict[str, Callable[[Said], str]] = {
    "risk.mayFail": lambda s: (
        f"pod {s.fact('namespace')}/{s.fact('name')} may fail on its next container start on "
        f"node {s.fact('node')}: {s.fact('doubt')}"),
    "risk.schedulerDown": lambda s: (
        f"pod {s.fact('namespace')}/{s.fact('name')} waits for scheduler "
        f"{s.fact('scheduler')}, which is not running ({s.fact('detail')}); start it, or the "
        "pod stays Pending"),
    "hazard.twoPlugins": _two_plugins,
    "hazard.pluginAndClass": lambda s: (
        f"{s.fact('resource')} is served here both by a device plugin and by DeviceClass "
        f"{s.fact('device_class')} (extendedResourceName): the scheduler counts the device "
        "plugin's GPUs and DRA's apart, so both can hand out the same GPU; remove the device "
        "plugin from this node or the class's extendedResourceName"),
}


WORDS: dict[str, Callable[[Said], str]] = {
    **_DELIVERY, **_PLUGIN, **_OWN, **_NRI, **_RESTART, **_FIT, **_DRA, **_ROUTING, **_POD,
    **_ACCESS, **_ADMIT, **_AFTERCARE}
