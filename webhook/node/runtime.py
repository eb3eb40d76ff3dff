"""The node's runtime settings that decide whether GPU device names go through CDI.

Two files matter. The NVIDIA runtime's ``config.toml``: ``nvidia-container-runtime.mode``
(``cdi`` turns a bare ``NVIDIA_VISIBLE_DEVICES=GPU-<uuid>`` into the CDI device
``<default-kind>=GPU-<uuid>``) and ``modes.cdi.default-kind``. And containerd's config, with
the drop-ins it imports: ``enable_cdi``, ``cdi_spec_dirs``, the default runtime, and the
runtime handlers whose binary is the NVIDIA runtime (``nvidia-container-runtime.cdi`` always
uses CDI, ``.legacy`` never does).
"""

from __future__ import annotations

import glob
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.api.inventory import DEFAULT_KIND, RuntimeInfo
from webhook.node.specdirs import DEFAULT_SPEC_DIRS

DEFAULT_MODE = "auto"
_TEMPLATE = re.compile(r"\{\{[^}]*\}\}")


class RuntimeConfigError(ValueError):
    pass


def _load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise RuntimeConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RuntimeConfigError(f"{path}: not valid TOML: {exc}") from exc


def _get(doc: Mapping[str, Any], *keys: str) -> Any:
    cur: Any = doc
    for k in keys:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(k)
    return cur


#: The toolkit's switch (top-level key of its config.toml; installer default true): when
#: false, NVIDIA_VISIBLE_DEVICES of an unprivileged container is ignored, in every mode.
ENVVAR_UNPRIVILEGED_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"


@dataclass(frozen=True)
class NvidiaConfig:
    mode: str = DEFAULT_MODE
    default_kind: str = DEFAULT_KIND
    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    accept_envvar_unprivileged: bool = True


def read_nvidia_config(path: str) -> NvidiaConfig:
    """An empty or absent key means the runtime's built-in default, as the toolkit does."""
    doc = _load_toml(path)
    mode = _get(doc, "nvidia-container-runtime", "mode") or DEFAULT_MODE
    kind = _get(doc, "nvidia-container-runtime", "modes", "cdi", "default-kind") or DEFAULT_KIND
    dirs = _get(doc, "nvidia-container-runtime", "modes", "cdi", "spec-dirs") or DEFAULT_SPEC_DIRS
    if not isinstance(mode, str) or not isinstance(kind, str):
        raise RuntimeConfigError(f"{path}: mode and default-kind must be strings")
    accept = doc.get(ENVVAR_UNPRIVILEGED_KEY, True)
    if not isinstance(accept, bool):
        raise RuntimeConfigError(f"{path}: {ENVVAR_UNPRIVILEGED_KEY} must be true or false")
    return NvidiaConfig(mode=mode, default_kind=kind, spec_dirs=tuple(str(d) for d in dirs),
                        accept_envvar_unprivileged=accept)


@dataclass(frozen=True)
class ContainerdConfig:
    cdi_enabled: bool
    spec_dirs: tuple[str, ...]
    #: handler name -> "cdi", "legacy" or "config" (follows the NVIDIA config's mode)
    nvidia_handlers: Mapping[str, str] = field(default_factory=dict)
    default_runtime: str | None = None
    #: whether containerd hosts NRI plugins (None: its version's default, not known here)
    nri_enabled: bool | None = None
    #: every runtime handler containerd's config defines, NVIDIA's or not
    runtimes: tuple[str, ...] = ()
    #: NVIDIA handler -> its ``container_annotations``: the patterns of the container
    #: annotations containerd passes on to that runtime (``nvidia-ctk`` writes
    #: ``cdi.k8s.io/*`` there, toolkit v1.20.2 ``cmd/nvidia-ctk-installer/container/runtime/
    #: containerd/containerd.go``, ``containerAnnotationsFromCDIPrefixes``)
    container_annotations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _cri_sections(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], int]:
    """(section holding enable_cdi, section holding containerd.runtimes, config version)."""
    version = doc.get("version", 1)
    found = doc.get("plugins")
    plugins: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    if version == 3:
        rt = plugins.get("io.containerd.cri.v1.runtime") or {}
        return rt, rt, 3
    cri = plugins.get("io.containerd.grpc.v1.cri") or plugins.get("cri") or {}
    return cri, cri, version if isinstance(version, int) else 1


def _merge(into: dict[str, Any], part: Mapping[str, Any]) -> None:
    """``part`` over ``into``, table by table; any other value replaces what was there."""
    for key, value in part.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def _merge_config(into: dict[str, Any], part: Mapping[str, Any]) -> None:
    """One imported file over the configuration so far, as containerd merges it. Before
    config version 3 (containerd 1.x) an imported plugin section replaces the whole section
    (``mergeConfig``: "Replace entire sections instead of merging map's values"); from
    containerd 2.x plugin sections are merged key by key like the rest."""
    plugins = part.get("plugins")
    version = part.get("version", into.get("version", 1))
    if isinstance(plugins, Mapping) and isinstance(version, int) and version < 3:
        part = dict(part)
        sections = dict(part.pop("plugins"))
        _merge(into, part)
        into.setdefault("plugins", {})
        if isinstance(into["plugins"], dict):
            into["plugins"].update(sections)
        return
    _merge(into, part)


def load_containerd_toml(path: str, host_root: str = "") -> dict[str, Any]:
    """containerd's configuration as containerd builds it: the file, then every file its
    ``imports`` name (globs, relative to the importing file, nested imports too), each merged
    over what came before (containerd's ``LoadConfig``). The GPU Operator and ``nvidia-ctk``
    put the NVIDIA runtime in such a drop-in (``/etc/containerd/conf.d/*.toml``): read alone,
    the main file would show runc as the default and no NVIDIA handler.

    ``host_root``: where the host's root is mounted when the agent runs in a container
    (``/host``); absolute import paths are read under it."""
    out: dict[str, Any] = {}
    pending, seen = [path], set()
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        part = _load_toml(current)
        imports = part.pop("imports", None) or []
        if not isinstance(imports, list):
            raise RuntimeConfigError(f"{current}: imports is not a list")
        for pattern in imports:
            if not isinstance(pattern, str):
                continue
            full = (host_root.rstrip("/") + pattern if os.path.isabs(pattern)
                    else os.path.join(os.path.dirname(current), pattern))
            if not glob.has_magic(full):
                pending.append(full)
                continue
            found = sorted(glob.glob(full))
            if not found and not os.path.isdir(os.path.dirname(full)):
                # No drop-in, or not where this process can see them: the two read alike,
                # and taking the second for the first would hide the NVIDIA runtime.
                raise RuntimeConfigError(
                    f"{current}: imports {pattern!r}: {os.path.dirname(full)} does not exist "
                    "here (is --host-root set to where the host's root is mounted?)")
            pending.extend(found)
        _merge_config(out, part)
    return out


def read_containerd_config(path: str, host_root: str = "") -> ContainerdConfig:
    doc = load_containerd_toml(path, host_root)
    cdi_section, rt_section, version = _cri_sections(doc)
    # containerd 2.x (config version 3) enables CDI by default; 1.7 (version 2) does not.
    enabled = cdi_section.get("enable_cdi", version >= 3)
    dirs = cdi_section.get("cdi_spec_dirs") or list(DEFAULT_SPEC_DIRS)
    runtimes = _get(rt_section, "containerd", "runtimes") or {}
    default = _get(rt_section, "containerd", "default_runtime_name")
    handlers: dict[str, str] = {}
    passed: dict[str, tuple[str, ...]] = {}
    for name, rt in runtimes.items():
        binary = _get(rt, "options", "BinaryName")
        if not isinstance(binary, str):
            continue
        base = os.path.basename(_TEMPLATE.sub("", binary))
        if base.startswith("nvidia-container-runtime"):
            suffix = base.removeprefix("nvidia-container-runtime")
            handlers[name] = {".cdi": "cdi", ".legacy": "legacy"}.get(suffix, "config")
            patterns = _get(rt, "container_annotations")
            passed[name] = tuple(p for p in patterns if isinstance(p, str)) \
                if isinstance(patterns, list) else ()
    return ContainerdConfig(cdi_enabled=bool(enabled), spec_dirs=tuple(str(d) for d in dirs),
                            nvidia_handlers=handlers,
                            default_runtime=default if isinstance(default, str) else None,
                            nri_enabled=_nri_enabled(doc, version),
                            runtimes=tuple(sorted(str(n) for n in runtimes)),
                            container_annotations=passed)


def _nri_enabled(doc: Mapping[str, Any], version: int) -> bool | None:
    """containerd's ``plugins."io.containerd.nri.v1.nri"``: 2.x hosts NRI plugins unless
    ``disable``d, 1.7 only when told to; ``disable_connections`` shuts out external plugins
    such as NVIDIA's. A version-2 file may be read by either, so without the key it says
    nothing."""
    section = _get(doc, "plugins", "io.containerd.nri.v1.nri")
    disable = section.get("disable") if isinstance(section, Mapping) else None
    if disable is True or (isinstance(section, Mapping)
                           and section.get("disable_connections") is True):
        return False  # (no external plugin, such as NVIDIA's, may connect)
    if disable is False:
        return True
    return True if version >= 3 else None


def runtime_info(nvidia: NvidiaConfig | None, containerd: ContainerdConfig | None,
                 source: str | None = None) -> RuntimeInfo:
    """Fold both configs into what admission needs: the effective mode per handler."""
    mode = nvidia.mode if nvidia else None
    handlers: dict[str, str] = {}
    if containerd is not None:
        for name, how in containerd.nvidia_handlers.items():
            handlers[name] = mode or DEFAULT_MODE if how == "config" else how
    return RuntimeInfo(
        mode=mode,
        default_kind=nvidia.default_kind if nvidia else None,
        containerd_cdi=containerd.cdi_enabled if containerd else None,
        spec_dirs=containerd.spec_dirs if containerd else (nvidia.spec_dirs if nvidia else ()),
        handlers=handlers,
        default_handler=containerd.default_runtime if containerd else None,
        source=source,
        accept_envvar_unprivileged=False if nvidia and not nvidia.accept_envvar_unprivileged
        else None,
        containerd_nri=False if containerd and containerd.nri_enabled is False else None,
        runtime_handlers=containerd.runtimes if containerd else None,
        # Only where containerd leaves CDI names to the runtime does it matter which
        # annotations reach it (``webhook.api.delivery.cdi_names_path``).
        handler_annotations=dict(containerd.container_annotations)
        if containerd and not containerd.cdi_enabled else None,
    )
