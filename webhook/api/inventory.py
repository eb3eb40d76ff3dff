"""The node annotation ``gpupool.io/cdi-inventory``: what CDI devices a node can resolve.

The agent on each GPU node writes it; admission reads it from the node cache. The format is
documented in docs/cdi-inventory.md. Readers accept unknown fields so an agent one release
ahead of the webhook does not break admission; an unknown ``schemaVersion`` is an error.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.api.cdireaders import version_key
from webhook.api.pluginconfig import Settled
from webhook.api.ways import Learned, learned_from

INVENTORY_ANNOTATION = "gpupool.io/cdi-inventory"
#: The NVIDIA runtime's CDI default kind when its config.toml names none.
DEFAULT_KIND = "nvidia.com/gpu"
SCHEMA_VERSION = 1
_GPU_UUID = re.compile(r"^GPU-[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")
#: The GPU Operator's MIG resources (its mixed strategy): ``nvidia.com/mig-<profile>``.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
#: The NVIDIA device plugin's own resource; under its ``single`` MIG strategy it advertises
#: MIG devices under this name (k8s-device-plugin ``internal/lm/mig-strategy.go``).
PLUGIN_RESOURCE = "nvidia.com/gpu"
MIG_ID_PREFIX = "MIG-"
_SPEC_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


def is_mig_resource(resource: str, ids: tuple[str, ...] | list[str]) -> bool:
    """A resource whose registered devices are MIG devices: ``nvidia.com/mig-*`` (mixed
    strategy), or ``nvidia.com/gpu`` registered with MIG ids (single strategy)."""
    return resource.startswith(MIG_RESOURCE_PREFIX) or (
        resource == PLUGIN_RESOURCE and any(i.startswith(MIG_ID_PREFIX) for i in ids))
#: Annotation values are capped at 256 KiB for all annotations of an object together.
MAX_ANNOTATION_BYTES = 200 * 1024


class InventoryError(ValueError):
    pass


def is_gpu_uuid(name: str) -> bool:
    return bool(_GPU_UUID.match(name))


@dataclass(frozen=True)
class RuntimeInfo:
    """The NVIDIA runtime's and containerd's CDI settings as the agent read them.

    ``mode`` is ``nvidia-container-runtime.mode`` (None: no config found). Bare device names in
    ``NVIDIA_VISIBLE_DEVICES`` go through CDI only in ``cdi`` mode.
    """

    mode: str | None = None
    default_kind: str | None = None
    containerd_cdi: bool | None = None
    spec_dirs: tuple[str, ...] = ()
    #: containerd runtime handler -> the NVIDIA runtime mode it runs in
    handlers: Mapping[str, str] = field(default_factory=dict)
    default_handler: str | None = None
    source: str | None = None
    #: ``accept-nvidia-visible-devices-envvar-when-unprivileged`` (None: not read, or the
    #: toolkit's default, true; published only when false)
    accept_envvar_unprivileged: bool | None = None
    #: containerd hosts no NRI plugin (published only when false: its config disables NRI)
    containerd_nri: bool | None = None
    #: every runtime handler containerd's config defines, NVIDIA's or not (None: its config
    #: was not read). A container is created with its pod sandbox's handler, looked up in
    #: that config each time, so a handler dropped from it fails every restart there.
    runtime_handlers: tuple[str, ...] | None = None
    #: NVIDIA handler -> the container annotation patterns containerd passes to it
    #: (``container_annotations``); read only where containerd's CDI is off, where it decides
    #: whether the device plugin's ``cdi.k8s.io/`` annotations reach the runtime (None: not
    #: read)
    handler_annotations: Mapping[str, tuple[str, ...]] | None = None
    #: everything above as one string, worked out as it is made: nodes of one kind hold
    #: equal runtimes, which the view keeps once (``view.index``), looked up by it on every
    #: node update (a string keeps its hash; a tuple hashes again each time)
    content: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", repr((
            self.mode, self.default_kind, self.containerd_cdi, self.spec_dirs,
            sorted(self.handlers.items()), self.default_handler, self.source,
            self.accept_envvar_unprivileged, self.containerd_nri, self.runtime_handlers,
            None if self.handler_annotations is None
            else sorted(self.handler_annotations.items()))))

    def effective_mode(self, runtime_class: str | None) -> str | None:
        """The mode a pod's containers run in: its RuntimeClass's handler (named like the
        class, as the GPU Operator creates them), else containerd's default runtime, else the
        NVIDIA config's mode. None when unknown."""
        if runtime_class and runtime_class in self.handlers:
            return self.handlers[runtime_class]
        if not runtime_class and self.default_handler is not None \
                and self.default_handler in self.handlers:
            return self.handlers[self.default_handler]
        return self.mode

    def uses_cdi(self, runtime_class: str | None = None) -> bool | None:
        mode = self.effective_mode(runtime_class)
        return None if mode is None else mode == "cdi"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "defaultKind": self.default_kind,
                               "containerdCDI": self.containerd_cdi,
                               "specDirs": list(self.spec_dirs),
                               "handlers": dict(sorted(self.handlers.items())),
                               "defaultHandler": self.default_handler}
        if self.source:
            out["source"] = self.source
        if self.accept_envvar_unprivileged is False:  # the default (true) goes unsaid
            out["acceptEnvvarUnprivileged"] = False
        if self.containerd_nri is False:
            out["containerdNRI"] = False
        if self.runtime_handlers is not None:
            out["runtimeHandlers"] = list(self.runtime_handlers)
        if self.handler_annotations is not None:
            out["handlerAnnotations"] = {k: list(v) for k, v in
                                         sorted(self.handler_annotations.items())}
        return out


@dataclass(frozen=True)
class Inventory:
    kinds: Mapping[str, frozenset[str]]
    runtime: RuntimeInfo = field(default_factory=RuntimeInfo)
    errors: tuple[tuple[str, str], ...] = ()
    observed_at: str = ""
    schema_version: int = SCHEMA_VERSION
    #: The GPUs the NVIDIA driver lists on the node (empty: the agent could not read them).
    #: Added within schema version 1: readers that predate it ignore the field.
    gpus: tuple[str, ...] = ()
    #: Per delivery way (webhook.api.delivery), which of ``gpus`` resolve delivered that way
    #: under the default runtime handler; a way the agent could not judge is absent. Written
    #: for people and tools: admission works it out from ``kinds`` and ``runtime`` itself.
    resolves: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The MIG devices the device plugin registered, per ``nvidia.com/mig-*`` resource (and
    #: ``nvidia.com/gpu`` under the single strategy), as
    #: the kubelet lists them (None: not known). Added within schema version 1.
    mig: Mapping[str, tuple[str, ...]] | None = None
    #: The device-plugin containers the agent found running on the node, each with the
    #: strategy it settles on (``webhook.api.pluginconfig``); None: the agent did not look.
    #: Added within schema version 1.
    plugins: tuple[Settled, ...] | None = None
    #: The spec versions of the files that define devices, oldest first (empty: not
    #: known, an agent that predates the field). Added within schema version 1.
    spec_versions: tuple[str, ...] = ()
    #: For each of ``spec_versions`` but the newest, the devices a CDI library that reads
    #: spec versions up to it resolves (``webhook.api.cdireaders``). Added within schema
    #: version 1.
    readable_up_to: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)
    #: The newest spec version the node's containerd reads (its CDI library's), where the
    #: node's runtime version says (set from the Node, not published: None, every version)
    containerd_reads: str | None = None
    #: how its device plugin hands GPUs, as learned from ``plugins`` (worked out here, once:
    #: every node check and every node update asks it of each node it judges)
    learned: Learned = field(init=False, repr=False, compare=False)
    #: the devices containerd resolves there (``kinds`` unless its library reads fewer
    #: files: ``kinds_read_by``), worked out once, as ``learned``
    containerd_kinds: Mapping[str, frozenset[str]] = field(init=False, repr=False,
                                                            compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "learned", learned_from(self.plugins))
        object.__setattr__(self, "containerd_kinds", self.kinds_read_by(self.containerd_reads))

    def kinds_read_by(self, reads: str | None) -> Mapping[str, frozenset[str]]:
        """The devices a CDI library reading spec versions up to ``reads`` resolves here:
        those of the newest published version it reads; none where every file is newer.
        ``kinds`` where ``reads`` is None or the versions are not known."""
        if reads is None or not self.spec_versions:
            return self.kinds
        readable = [v for v in self.spec_versions if version_key(v) <= version_key(reads)]
        if not readable:
            return {}
        if readable[-1] == self.spec_versions[-1]:
            return self.kinds
        return self.readable_up_to.get(readable[-1], {})

    def read_by_containerd(self, reads: str) -> Inventory:
        """This inventory on a node whose containerd reads spec versions up to ``reads``:
        itself where every file is readable (the usual case: nothing to copy)."""
        if not self.spec_versions or \
                version_key(self.spec_versions[-1]) <= version_key(reads):
            return self
        return dataclasses.replace(self, containerd_reads=reads)

    def unreadable(self, kind: str, devices: Iterable[str]) -> tuple[str, ...]:
        """Of ``devices`` of ``kind``, those spec files define here but the node's
        containerd cannot read (``containerd_reads``)."""
        have, read = self.kinds.get(kind, frozenset()), self.containerd_kinds.get(kind, frozenset())
        return tuple(d for d in devices if d in have and d not in read)

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        """The node's GPUs: as the driver lists them, else the UUIDs its CDI specs name."""
        if self.gpus:
            return self.gpus
        return tuple(sorted({d for devs in self.kinds.values() for d in devs if is_gpu_uuid(d)}))

    def has(self, kind: str, device: str) -> bool:
        return device in self.kinds.get(kind, ())

    def to_json(self) -> dict[str, Any]:
        """The annotation document, ``observedAt`` included (``content`` is it without, to
        compare states)."""
        return {
            "schemaVersion": self.schema_version,
            "observedAt": self.observed_at,
            "runtime": self.runtime.to_json(),
            "kinds": {k: sorted(v) for k, v in sorted(self.kinds.items())},
            "errors": [{"path": p, "reason": r} for p, r in self.errors],
            # Only when known, so a node whose driver list is unreadable publishes what it
            # always did.
            **({"gpus": list(self.gpus)} if self.gpus else {}),
            **({"resolves": {k: list(v) for k, v in sorted(self.resolves.items())}}
               if self.resolves else {}),
            **({"mig": {k: list(v) for k, v in sorted(self.mig.items())}}
               if self.mig is not None else {}),
            **({"plugins": [p.to_json() for p in self.plugins]}
               if self.plugins is not None else {}),
            **({"specVersions": list(self.spec_versions)} if self.spec_versions else {}),
            **({"readableUpTo": {v: {k: sorted(d) for k, d in sorted(kinds.items())}
                                 for v, kinds in sorted(self.readable_up_to.items())}}
               if self.readable_up_to else {}),
        }

    def content(self) -> dict[str, Any]:
        doc = self.to_json()
        doc.pop("observedAt")
        return doc

    def dumps(self) -> str:
        text = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)
        if len(text) > MAX_ANNOTATION_BYTES:
            raise InventoryError(f"inventory is {len(text)} bytes, over the "
                                 f"{MAX_ANNOTATION_BYTES}-byte annotation budget")
        return text


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InventoryError(f"{what}: expected a list of strings")
    return tuple(value)


def _str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise InventoryError(f"{what}: expected an object of strings")
    return dict(value)


def _list_map(value: Any, what: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InventoryError(f"{what}: expected an object of string lists")
    return {k: _str_list(v, f"{what}.{k}") for k, v in value.items()}


def _opt(value: Any, kind: type, what: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise InventoryError(f"{what}: expected {kind.__name__}")
    return value


def _runtime(rt: Mapping[str, Any]) -> RuntimeInfo:
    return RuntimeInfo(
        mode=_opt(rt.get("mode"), str, "runtime.mode"),
        default_kind=_opt(rt.get("defaultKind"), str, "runtime.defaultKind"),
        containerd_cdi=_opt(rt.get("containerdCDI"), bool, "runtime.containerdCDI"),
        spec_dirs=_str_list(rt.get("specDirs"), "runtime.specDirs"),
        handlers=_str_map(rt.get("handlers"), "runtime.handlers"),
        default_handler=_opt(rt.get("defaultHandler"), str, "runtime.defaultHandler"),
        source=_opt(rt.get("source"), str, "runtime.source"),
        accept_envvar_unprivileged=_opt(rt.get("acceptEnvvarUnprivileged"), bool,
                                        "runtime.acceptEnvvarUnprivileged"),
        containerd_nri=_opt(rt.get("containerdNRI"), bool, "runtime.containerdNRI"),
        runtime_handlers=None if rt.get("runtimeHandlers") is None
        else _str_list(rt.get("runtimeHandlers"), "runtime.runtimeHandlers"),
        handler_annotations=None if rt.get("handlerAnnotations") is None
        else _list_map(rt.get("handlerAnnotations"), "runtime.handlerAnnotations"),
    )


def parse_inventory(text: str) -> Inventory:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InventoryError(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InventoryError("expected a JSON object")
    version = doc.get("schemaVersion")
    if version != SCHEMA_VERSION:
        raise InventoryError(f"schemaVersion {version!r} is not supported (want {SCHEMA_VERSION})")
    kinds_raw = doc.get("kinds", {})
    if not isinstance(kinds_raw, dict):
        raise InventoryError("kinds: expected an object of kind -> device names")
    kinds = {sys.intern(k): frozenset(_str_list(v, f"kinds[{k}]"))
             for k, v in kinds_raw.items()}
    rt = doc.get("runtime") or {}
    if not isinstance(rt, dict):
        raise InventoryError("runtime: expected an object")
    runtime = _runtime(rt)
    errors_raw = doc.get("errors") or []
    if not isinstance(errors_raw, list):
        raise InventoryError("errors: expected a list")
    errors = tuple((str(e.get("path", "")), str(e.get("reason", "")))
                   for e in errors_raw if isinstance(e, dict))
    observed = _opt(doc.get("observedAt", ""), str, "observedAt") or ""
    gpus = tuple(g for g in _str_list(doc.get("gpus") or [], "gpus") if is_gpu_uuid(g))
    resolves_raw = doc.get("resolves") or {}
    if not isinstance(resolves_raw, dict):
        raise InventoryError("resolves: expected an object of way -> GPU UUIDs")
    resolves = {str(k): _str_list(v, f"resolves[{k}]") for k, v in resolves_raw.items()}
    mig_raw = doc.get("mig")
    if mig_raw is not None and not isinstance(mig_raw, dict):
        raise InventoryError("mig: expected an object of resource -> device ids")
    mig = None if mig_raw is None else {
        str(k): _str_list(v, f"mig[{k}]") for k, v in mig_raw.items()}
    plugins_raw = doc.get("plugins")
    if plugins_raw is not None and not isinstance(plugins_raw, list):
        raise InventoryError("plugins: expected a list of device-plugin containers")
    try:
        plugins = None if plugins_raw is None else tuple(
            Settled.from_json(p) for p in plugins_raw)
    except ValueError as exc:
        raise InventoryError(f"plugins: {exc}") from exc
    versions = _str_list(doc.get("specVersions"), "specVersions")
    if not all(_SPEC_VERSION.match(v) for v in versions):
        raise InventoryError("specVersions: expected versions such as \"0.7.0\"")
    versions = tuple(sorted(set(versions), key=version_key))
    up_raw = doc.get("readableUpTo") or {}
    if not isinstance(up_raw, dict) or not all(k in versions and isinstance(v, dict)
                                               for k, v in up_raw.items()):
        raise InventoryError("readableUpTo: expected an object of specVersions -> kinds")
    up_to = {k: {sys.intern(kind): frozenset(_str_list(d, f"readableUpTo[{k}][{kind}]"))
                 for kind, d in v.items()} for k, v in up_raw.items()}
    return Inventory(kinds=kinds, runtime=runtime, errors=errors, observed_at=observed,
                     gpus=gpus, resolves=resolves, mig=mig, plugins=plugins,
                     spec_versions=versions, readable_up_to=up_to)
