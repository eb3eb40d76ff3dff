"""How a GPU reaches a container on a node, and whether the node's GPUs resolve that way.

Two ways exist, and which one a node uses is a property of its device plugin (NVIDIA's or
HAMi's), not of the runtime:

- ``visibleDevices``: the plugin's ``envvar`` strategy puts GPU UUIDs in
  ``NVIDIA_VISIBLE_DEVICES``. The NVIDIA runtime then decides: in ``cdi`` mode each UUID becomes
  the CDI device ``<default-kind>=<uuid>``, which some spec must define; in ``auto`` mode (and
  with no mode set) bare UUIDs go to a spec generated just in time from the driver, so the
  GPUs the node has resolve; ``legacy`` and ``csv`` modes never use CDI.
- ``cdiDevices``: the plugin's ``cdi-annotations``/``cdi-cri`` strategies hand containerd fully
  qualified names (``k8s.device-plugin.nvidia.com/gpu=<uuid>``). containerd resolves them with
  the CDI library whatever the NVIDIA runtime's mode, so the RuntimeClass does not matter;
  where containerd's CDI is off, who resolves them, if anyone, is ``cdi_names_path``'s.

The agent publishes one node label per way (and one for the way it detects) computed here; the
engine checks candidate nodes with the same functions, so the two can never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from webhook.api.cdireaders import first_reading
from webhook.api.inventory import DEFAULT_KIND, Inventory
from webhook.api.said import Said, said
from webhook.api.ways import CDI_DEVICES as CDI_DEVICES
from webhook.api.ways import CDI_STRATEGIES as CDI_STRATEGIES
from webhook.api.ways import DETECT as DETECT
from webhook.api.ways import NONE as NONE
from webhook.api.ways import VISIBLE_DEVICES as VISIBLE_DEVICES
from webhook.api.ways import WAYS as WAYS
from webhook.api.ways import Learned as Learned
from webhook.api.ways import Way as Way
from webhook.api.ways import strategy_way as strategy_way

#: The kind the NVIDIA and HAMi device plugins' CDI specs use.
DEVICE_PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"
#: Why an unprivileged container's GPUs never arrive where the toolkit's switch is off.
UNPRIVILEGED_ENVVAR_IGNORED = said("delivery.envvarIgnored")
#: The kind the NVIDIA runtime resolves without any spec file, for the node's own GPUs (by
#: UUID or index): it generates the spec just in time (toolkit 1.15+). containerd's CDI
#: library does not, so a device plugin's CDI names of this kind are still looked up.
JIT_KIND = "runtime.nvidia.com/gpu"
#: Runtime modes in which NVIDIA_VISIBLE_DEVICES never goes through CDI.
NON_CDI_MODES = ("legacy", "csv")
#: The node's inventory does not say the NVIDIA runtime's mode.
MODE_UNKNOWN = said("delivery.modeUnknown")
_BY_CONTAINERD = said("delivery.byContainerd")
_JUST_IN_TIME = said("delivery.justInTime")

#: Steering labels the agent keeps on its own node: "true" when every GPU the node has
#: resolves when delivered that way, "false" when one does not, absent when unknown.
LABEL_PREFIX = "resolve.gpupool.io/"
LABELS = {DETECT: LABEL_PREFIX + "detected", VISIBLE_DEVICES: LABEL_PREFIX + "visible-devices",
          CDI_DEVICES: LABEL_PREFIX + "cdi-devices"}


@dataclass(frozen=True)
class Resolution:
    """Whether a set of GPUs resolves on one node delivered one way."""

    way: str
    ok: bool | None  # None: cannot tell (runtime mode unknown)
    missing: tuple[str, ...] = ()  # qualified CDI names no spec defines
    mode: str | None = None
    kind: str = ""
    #: what decided, for the node's note (``webhook.engine.wording.words`` words it)
    note: Said | None = None
    #: The GPUs never reach the container: it starts without them (``ok`` is False)
    undelivered: bool = False
    #: the fix the node needs, where the way it fails has one of its own
    fix: Said | None = None


def learned_way(inv: Inventory) -> Learned:
    """How the node's device plugin hands GPUs, as the agent learned it (``Inventory``
    works it out as it is made: every node check and every node update asks it)."""
    return inv.learned


def learned_single_mig(inv: Inventory) -> bool:
    """Does a device plugin on the node run the ``single`` MIG strategy, as learned from its
    pod? Its ``nvidia.com/gpu`` devices are then MIG devices wherever MIG is enabled
    (k8s-device-plugin ``internal/lm/mig-strategy.go``)."""
    return any(p.mig_strategy == "single" for p in inv.plugins or ()
               if p.strategies is not None)


def detected_way(inv: Inventory, device_kind: str = DEVICE_PLUGIN_KIND) -> str:
    """The way the node's device plugin hands GPUs, as the agent learned it from the
    plugin's pod; where that is not known, inferred from the disk: a node whose device
    plugin writes its CDI spec hands out CDI names, otherwise UUIDs.

    The inference cannot see a plugin set to a CDI strategy whose spec is missing
    altogether, nor a spec left behind by an earlier setup: the engine holds an inferred way
    as doubt (``checks.plugindevices``)."""
    learned = learned_way(inv).way
    if learned is not None:
        return learned
    return CDI_DEVICES if inv.kinds.get(device_kind) else VISIBLE_DEVICES


def envvar_ignored(inv: Inventory, privileged: bool) -> bool:
    """Does the NVIDIA runtime on this node ignore the container's NVIDIA_VISIBLE_DEVICES
    (its accept-nvidia-visible-devices-envvar-when-unprivileged is false, and the container
    is not privileged)?"""
    return inv.runtime.accept_envvar_unprivileged is False and not privileged


def resolve(inv: Inventory, way: str, gpus: Iterable[str], runtime_class: str | None = None,
            device_kind: str = DEVICE_PLUGIN_KIND, privileged: bool = False) -> Resolution:
    """Would these GPUs, delivered ``way`` (detect: the node's own), resolve on this node?
    ``privileged``: every container that gets them is privileged (the toolkit's sense:
    CAP_SYS_ADMIN), which matters where unprivileged containers' NVIDIA_VISIBLE_DEVICES is
    ignored."""
    if way == DETECT:
        way = detected_way(inv, device_kind)
    if way == CDI_DEVICES:
        path, why = cdi_names_path(inv, runtime_class)
        have = names_resolved(inv, path).get(device_kind, frozenset())
        missing = tuple(f"{device_kind}={u}" for u in gpus if u not in have)
        fix = None
        if missing and path is NamesPath.CONTAINERD:
            why, fix = unreadable_note(inv, device_kind, gpus) or (why, None)
        if path is NamesPath.DROPPED:
            return Resolution(way, False, undelivered=True, note=why)
        if path is NamesPath.UNKNOWN and not missing:
            return Resolution(way, None, kind=device_kind, note=why)
        return Resolution(way, not missing, missing, kind=device_kind, note=why, fix=fix)
    default = inv.runtime.default_handler
    if not runtime_class and default is not None and default not in inv.runtime.handlers:
        # Only the NVIDIA runtime reads NVIDIA_VISIBLE_DEVICES; under containerd's default
        # handler when that is another runtime (runc, where the GPU Operator injects devices
        # through NRI) the variable is ignored and the container runs without a GPU. (A
        # RuntimeClass naming a handler the inventory does not list may not exist at all:
        # that is judged as before.)
        return Resolution(way, False, undelivered=True,
                          note=said("delivery.otherDefaultHandler", handler=default))
    if envvar_ignored(inv, privileged):
        # The toolkit reads NVIDIA_VISIBLE_DEVICES of an unprivileged container (no
        # CAP_SYS_ADMIN) only when this is true (nvidia-container-toolkit v1.20.2,
        # internal/config/image/cuda_image.go VisibleDevices, privileged.go IsPrivileged), in
        # every mode, CDI included; tests/integration/test_runtime_oracle.py sees the real
        # runtime create such a container without any device.
        return Resolution(way, False, undelivered=True, note=UNPRIVILEGED_ENVVAR_IGNORED)
    mode = inv.runtime.effective_mode(runtime_class)
    if mode is None:
        return Resolution(way, None, mode=mode, note=MODE_UNKNOWN)
    if mode != "cdi":
        return Resolution(way, True, mode=mode, note=said("delivery.modeWithoutSpecs",
                                                          mode=mode))
    kind = inv.runtime.default_kind or DEFAULT_KIND
    if kind == JIT_KIND:
        # Names of this kind are not looked up in spec files: the runtime generates them just
        # in time for the node's own GPUs (nvidia-container-toolkit v1.20.2,
        # internal/modifier/cdi.go: newCDIModifier -> newJitCDIModifier).
        return Resolution(way, True, mode=mode, kind=kind, note=_JUST_IN_TIME)
    have = inv.kinds.get(kind, frozenset())
    missing = tuple(f"{kind}={u}" for u in gpus if u not in have)
    return Resolution(way, not missing, missing, mode=mode, kind=kind)


class NamesPath(StrEnum):
    """Who resolves a device plugin's CDI names (``cdi_names_path``)."""

    CONTAINERD = "containerd"  # containerd's CDI library, whatever the runtime does
    RUNTIME = "runtime"  # the NVIDIA runtime's own CDI library, from the annotations
    DROPPED = "dropped"  # nobody: the container gets its variables alone
    UNKNOWN = "unknown"  # one of the above; what decides is not known here


#: The annotation key NVIDIA's device plugin (and HAMi's fork of it) hands CDI names under
#: (k8s-device-plugin v0.19.3 ``internal/plugin/server.go``, ``getCDIDeviceAnnotations``:
#: ``nvidia-device-plugin_<response id>`` under ``cdi.k8s.io/``): what a handler's
#: ``container_annotations`` must let through.
PLUGIN_ANNOTATION_KEY = "cdi.k8s.io/nvidia-device-plugin_0"
#: Runtime modes in which the NVIDIA runtime resolves a container's CDI annotations: ``cdi``,
#: and ``auto``, which turns to ``cdi`` when every device asked for is a fully qualified CDI
#: name, and annotations are asked for before any variable (toolkit v1.20.2
#: ``internal/info/auto.go`` ``ResolveRuntimeMode``, ``internal/config/image/cuda_image.go``
#: ``VisibleDevices``). In every other mode they are dropped before anything reads them
#: (``internal/runtime/runtime_factory.go``, ``initRuntimeModeAndImage``).
ANNOTATION_MODES = ("cdi", "auto")


def hands_annotations(inv: Inventory) -> bool | None:
    """Does the node's device plugin hand its CDI names as ``cdi.k8s.io/`` annotations
    (``cdi-annotations``, alone or with ``cdi-cri``)? None: its strategy is not known."""
    known = [p.strategies for p in inv.plugins or () if p.strategies is not None]
    if not known:
        return None
    return any("cdi-annotations" in s for s in known)


def passes_annotation(patterns: Iterable[str], key: str) -> bool:
    """containerd's ``GetPassthroughAnnotations``: a container annotation reaches the
    runtime when one of the handler's patterns matches its key with Go's ``path.Match``
    (``*`` and ``?`` never cross a ``/``)."""
    for pattern in patterns:
        regex = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                        for c in pattern)
        if re.fullmatch(regex, key):
            return True
    return False


def cdi_names_path(inv: Inventory, runtime_class: str | None,
                   annotations: bool | Literal["learned"] | None = "learned",
                   key: str = PLUGIN_ANNOTATION_KEY) -> tuple[NamesPath, Said]:
    """Who resolves the CDI names a device plugin hands a container on this node, and why.

    With CDI on (or containerd's config not read), containerd resolves the ``cdi-cri``
    names and the ``cdi.k8s.io/`` annotations alike. With ``enable_cdi = false``
    (containerd 1.7's default) containerd applies neither (containerd v1.7
    ``pkg/cri/server/container_create_linux.go``: CDI devices only ``if
    c.config.EnableCDI``): ``cdi-cri`` names are lost; annotations reach the runtime only
    when the handler's ``container_annotations`` pass them, and only the NVIDIA runtime in
    ``cdi`` or ``auto`` mode resolves them (``ANNOTATION_MODES``). Where nobody resolves them
    the container starts with its variables alone: the plugin's, or its own
    ``NVIDIA_VISIBLE_DEVICES`` (``checks.owndevices``). ``annotations``: whether the names
    come as annotations (None: not known; "learned": as the node's plugin hands them,
    ``hands_annotations``)."""
    rt = inv.runtime
    if containerd_resolves(inv):
        return NamesPath.CONTAINERD, _BY_CONTAINERD
    if annotations == "learned":
        annotations = hands_annotations(inv)
    if annotations is False:
        return NamesPath.DROPPED, said("delivery.criDropped")
    handler = runtime_class or rt.default_handler
    if handler is None or rt.handler_annotations is None:
        return NamesPath.UNKNOWN, said("delivery.cdiOffUnknown")
    if handler not in rt.handlers:
        return NamesPath.DROPPED, said("delivery.annotationsNotNvidia", handler=handler)
    if not passes_annotation(rt.handler_annotations.get(handler, ()), key):
        return NamesPath.DROPPED, said("delivery.annotationsNotPassed", handler=handler)
    mode = rt.effective_mode(runtime_class)
    if mode is None:
        return NamesPath.UNKNOWN, MODE_UNKNOWN
    if mode not in ANNOTATION_MODES:
        return NamesPath.DROPPED, said("delivery.annotationsIgnored", mode=mode)
    if annotations is None:
        return NamesPath.UNKNOWN, said("delivery.cdiOffUnknown")
    return NamesPath.RUNTIME, said("delivery.byRuntime", mode=mode)


def containerd_resolves(inv: Inventory) -> bool:
    """Does containerd resolve the CDI names a container is handed here? With its CDI on,
    or its config not read; with ``enable_cdi = false`` it applies none
    (``cdi_names_path``)."""
    return inv.runtime.containerd_cdi is not False


def names_resolved(inv: Inventory, path: NamesPath) -> Mapping[str, frozenset[str]]:
    """The CDI devices whoever resolves the names (``path``) finds on the node: containerd
    reads the spec files its own CDI library can parse (``Inventory.containerd_kinds``,
    ``webhook.api.cdireaders``); the NVIDIA runtime's library reads every released
    version."""
    return inv.containerd_kinds if path is NamesPath.CONTAINERD else inv.kinds


#: The key of the note on devices containerd cannot read (``unreadable_note``)
SPEC_TOO_NEW = "delivery.specTooNew"


def unreadable_note(inv: Inventory, kind: str, devices: Iterable[str]
                    ) -> tuple[Said, Said] | None:
    """Why containerd cannot resolve devices a spec file defines (the file's version is
    newer than its CDI library reads), and the fix. None where that is not why."""
    unreadable = inv.unreadable(kind, devices)
    if not unreadable:
        return None
    newest = inv.spec_versions[-1]
    facts = {"reads": inv.containerd_reads, "upgrade": first_reading(newest)}
    return (said("delivery.specTooNew", newest=newest,
                 devices=tuple(f"{kind}={d}" for d in unreadable), **facts),
            said("delivery.specTooNewFix", **facts))


#: What an NVIDIA_VISIBLE_DEVICES value asks for no device at all (the toolkit's ``void``,
#: ``none`` and the empty value).
NO_DEVICES = ("", "void", "none")


def resolve_own(inv: Inventory, value: str, handler: str | None, gpus: tuple[str, ...],
                privileged: bool = False, container: str | None = None
                ) -> Resolution | None:
    """A container that sets NVIDIA_VISIBLE_DEVICES itself: the kubelet puts the container's
    own variables after the device plugin's (Kubernetes ``kubelet_pods.go``,
    ``GenerateRunContainerOptions``) and the NVIDIA runtime keeps the last of a name
    (toolkit v1.20.2 ``internal/config/image/builder.go`` ``WithEnv``), so its value, not
    the plugin's UUIDs, is what the runtime resolves. None: the runtime does not read it
    here (another handler, or ignored for an unprivileged container). ``gpus``: the node's.
    ``container``: the container the value is handed back to, when it comes from a
    restarted container's cached answer rather than the pod (``aftercare.restart``); the
    notes say which.

    Fully qualified names skip the default kind (and make ``auto`` mode use CDI:
    ``OnlyFullyQualifiedCDIDevices``); bare names in ``auto`` mode, like the just-in-time
    kind, name the node's own GPUs, by UUID or index, or ``all``; ``void``/``none`` ask for
    nothing (``undelivered``). The legacy hook's handling of other names is not modelled:
    doubt."""
    rt = inv.runtime
    if handler is not None and handler not in rt.handlers:
        return None
    if handler is None and rt.default_handler is not None \
            and rt.default_handler not in rt.handlers:
        return None
    if envvar_ignored(inv, privileged):
        return None
    names = [n.strip() for n in value.split(",")]
    if all(n in NO_DEVICES for n in names):
        return Resolution(VISIBLE_DEVICES, False, undelivered=True,
                          note=said("own.noDevice", value=value, container=container))
    qualified = all("=" in n for n in names)
    mode = rt.effective_mode(handler)
    if mode is None:
        return Resolution(VISIBLE_DEVICES, None, note=MODE_UNKNOWN)
    if mode in NON_CDI_MODES:
        return _legacy_hook(inv, value, names, gpus, mode, container)
    kind = rt.default_kind or DEFAULT_KIND
    if mode != "cdi" and not qualified:
        kind = JIT_KIND  # auto mode: generated just in time for the node's own GPUs
    wanted = [n.partition("=")[::2] if "=" in n else (kind, n) for n in names]
    missing = tuple(f"{k}={d}" for k, d in wanted if not _defined(inv, k, d, gpus))
    return Resolution(VISIBLE_DEVICES, not missing, missing, mode=mode, kind=kind,
                      note=said("own.overrides", value=value, container=container))


_MIG_INDEX = re.compile(r"^[0-9]+:[0-9]+$")
_PCI_BUS_ID = re.compile(r"^[0-9a-fA-F]+:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.0$")


def _legacy_hook(inv: Inventory, value: str, names: list[str], gpus: tuple[str, ...],
                 mode: str, container: str | None = None) -> Resolution:
    """NVIDIA_VISIBLE_DEVICES as the legacy hook reads it, and as ``nvidia-container-cli``
    selects the devices it names.

    The hook (toolkit v1.20.2 ``internal/config/image/devices.go``, ``NewVisibleDevices``)
    takes the first of ``all``, ``none``, ``void`` or an empty name as the whole answer: all
    GPUs, or none. Otherwise it passes the names to ``nvidia-container-cli --device=``,
    which (libnvidia-container ``src/cli/common.c``, ``select_devices``) takes each as a
    whole GPU UUID (``GPU-``, case-insensitive, whole), a PCI bus id, an index below the
    GPU count, a whole MIG UUID (``MIG-``) or a MIG index ``<gpu>:<mig>``, and fails the
    container with ``<name>: unknown device`` on anything else. The driver lists the
    node's GPUs (the inventory's ``gpus``), the kubelet's checkpoint the MIG devices the
    plugin registered; a PCI bus id, a MIG index, or a MIG UUID where no MIG device is
    known cannot be told here: doubt. Empty names between commas are dropped first
    (``devicesFromEnvvars``)."""
    names = [n for n in names if n]
    for n in names:
        if n == "all":
            return Resolution(VISIBLE_DEVICES, True, mode=mode)
        if n in NO_DEVICES:
            return Resolution(VISIBLE_DEVICES, False, undelivered=True, mode=mode,
                              note=said("legacy.noDevice", value=value, container=container,
                                        name=n))
    known_gpus = {g.lower() for g in gpus}
    migs = {m.lower() for ids in (inv.mig or {}).values() for m in ids}
    unknown, doubt = [], []
    for n in names:
        low = n.lower()
        if low.startswith("gpu-") and len(n) > 4:
            if low in known_gpus:
                continue
        elif n.isdigit():
            if int(n) < len(gpus):
                continue
        elif low.startswith("mig-") and len(n) > 4:
            if low in migs:
                continue
            if not migs:
                doubt.append(n)
                continue
        elif _MIG_INDEX.match(n) or _PCI_BUS_ID.match(n):
            doubt.append(n)
            continue
        unknown.append(n)
    if not gpus:
        return Resolution(VISIBLE_DEVICES, None, mode=mode,
                          note=said("legacy.gpusUnknown", value=value, container=container))
    if unknown:
        return Resolution(VISIBLE_DEVICES, False, tuple(unknown), mode=mode,
                          note=said("legacy.unknownDevice", value=value, container=container,
                                    name=unknown[0]))
    if doubt:
        return Resolution(VISIBLE_DEVICES, None, mode=mode,
                          note=said("legacy.unchecked", value=value, container=container,
                                    names=tuple(doubt[:3])))
    return Resolution(VISIBLE_DEVICES, True, mode=mode)


def _defined(inv: Inventory, kind: str, device: str, gpus: tuple[str, ...]) -> bool:
    if kind == JIT_KIND:  # generated for the node's own GPUs
        return device == "all" or device in gpus or (device.isdigit()
                                                     and int(device) < len(gpus))
    return inv.has(kind, device)


def steering_labels(inv: Inventory, gpus: tuple[str, ...],
                    device_kind: str = DEVICE_PLUGIN_KIND) -> dict[str, str]:
    """The labels the agent sets on its node (default runtime handler, every GPU it has).

    No GPUs known means nothing to say: the labels are left off rather than claim "true"."""
    if not gpus:
        return {}
    out = {}
    for way, key in LABELS.items():
        r = resolve(inv, way, gpus, None, device_kind)
        if r.ok is not None:
            out[key] = "true" if r.ok else "false"
    return out


def resolving_gpus(inv: Inventory, gpus: tuple[str, ...],
                   device_kind: str = DEVICE_PLUGIN_KIND) -> dict[str, tuple[str, ...]]:
    """Per way, which of the node's GPUs resolve (the inventory's ``resolves`` field)."""
    out: dict[str, tuple[str, ...]] = {}
    for way in (VISIBLE_DEVICES, CDI_DEVICES):
        if gpus and resolve(inv, way, (), None, device_kind).ok is not None:
            out[way] = tuple(u for u in gpus if resolve(inv, way, (u,), None, device_kind).ok)
    return out
