"""How a GPU device plugin hands out GPUs, learned from the pod that runs it on a node.

NVIDIA's device plugin settles its device-list strategy once, at start-up
(k8s-device-plugin v0.19.3 ``api/config/v1/config.go``, ``NewConfig``): the config file
that ``--config-file`` or ``CONFIG_FILE`` names first; ``--device-list-strategy`` or
``DEVICE_LIST_STRATEGY`` over it whenever either is set (``flags.go``, ``updateFromCLIFlag``:
``c.IsSet``); else the flag's default, ``envvar`` (``cmd/nvidia-device-plugin/main.go``).
A strategy it does not know, a config file it cannot open or parse, or a config version other
than ``v1`` stops it before it registers a GPU. HAMi's plugin loads its configuration through
the same ``NewConfig`` (HAMi v2.10 ``cmd/device-plugin/nvidia/main.go``, ``loadConfig``).
``tests/pluginjudge`` runs that code itself, and the suite holds this module to its answers.

Neither the cluster's objects nor the node's disk say this for every setup (the standalone
chart keeps the strategy in a ConfigMap's config file, which its ``config-manager`` picks by
node label; other tools deploy the plugin under other labels). The pod scheduled on the node
says it, whoever deployed it. Pure: the caller reads ConfigMaps.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

STRATEGIES = frozenset({"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"})
DEFAULT_STRATEGY = "envvar"
PLUGIN_COMMAND = "nvidia-device-plugin"
#: NVIDIA's image, whose entrypoint is the plugin (its config-manager runs from it too)
PLUGIN_IMAGE = "k8s-device-plugin"
CONFIG_MANAGER = "config-manager"
#: config-manager's defaults (k8s-device-plugin v0.19.3 ``cmd/config-manager/main.go``)
CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: the plugin's MIG strategies (``--mig-strategy``/``MIG_STRATEGY``, default none; any other
#: value stops it: main.go ``validateFlags``)
MIG_NONE, MIG_SINGLE, MIG_MIXED = "none", "single", "mixed"
_MIG_STRATEGIES = frozenset({MIG_NONE, MIG_SINGLE, MIG_MIXED})
_MIG_FLAG, _MIG_ENV = "mig-strategy", "MIG_STRATEGY"
_STRATEGY_FLAG, _STRATEGY_ENV = "device-list-strategy", "DEVICE_LIST_STRATEGY"
_CONFIG_FLAG, _CONFIG_ENV = "config-file", "CONFIG_FILE"
#: The plugin's flags that take no value (its main.go ``BoolFlag``s; HAMi's adds its own).
_BOOL_FLAGS = frozenset({"fail-on-init-error", "pass-device-specs", "gdrcopy-enabled",
                         "gds-enabled", "mofed-enabled", "imex-required",
                         "disable-core-limit", "help", "h", "version", "v"})
_SHELLS = frozenset({"sh", "bash", "ash", "dash"})

#: ``(namespace, name)`` -> the ConfigMap's data; None: it cannot be read.
ConfigMaps = Callable[[str, str], Mapping[str, str] | None]


class Unknown(Exception):
    """What cannot be known from the pod: the reason, for the user."""


class _NeverStarts(Unknown):
    """What stops the plugin at start-up, whatever its flags say: no GPU is registered."""


@dataclass(frozen=True)
class Settled:
    """One device-plugin container's strategy, and where it came from. ``strategies`` is
    None when it cannot be known; ``unknown`` then says why."""

    pod: str  # namespace/name
    container: str
    strategies: tuple[str, ...] | None
    source: str = ""
    unknown: str = ""
    #: how it registers MIG devices (``none``, ``single``: as ``nvidia.com/gpu``, ``mixed``;
    #: "": not known, though its device-list strategy is)
    mig_strategy: str = "none"
    #: who deployed it (``deployed_by``): the GPU Operator, NVIDIA's chart, HAMi's chart;
    #: "" where its pod does not say
    deployed_by: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "container": self.container}
        if self.deployed_by:
            out["deployedBy"] = self.deployed_by
        if self.strategies is not None:
            out["strategies"] = list(self.strategies)
            out["source"] = self.source
            if self.mig_strategy != MIG_NONE:
                out["migStrategy"] = self.mig_strategy or "unknown"
        else:
            out["unknown"] = self.unknown
        return out

    @classmethod
    def from_json(cls, doc: Any) -> Settled:
        if not isinstance(doc, Mapping):
            raise ValueError("expected an object")
        raw = doc.get("strategies")
        if raw is not None and not (isinstance(raw, list)
                                    and all(isinstance(s, str) for s in raw)):
            raise ValueError("strategies: expected a list of strings")
        return cls(str(doc.get("pod", "")), str(doc.get("container", "")),
                   None if raw is None else tuple(raw), str(doc.get("source", "")),
                   str(doc.get("unknown", "")) if raw is None else "",
                   _mig_from_json(doc.get("migStrategy")), str(doc.get("deployedBy") or ""))

    def describe(self) -> str:
        mig = "" if self.mig_strategy == MIG_NONE else \
            f", MIG strategy {self.mig_strategy or 'unknown'}"
        who = f"{self.pod} ({self.container}" + \
            (f", deployed by {self.deployed_by})" if self.deployed_by else ")")
        if self.strategies is None:
            return f"{who}: unknown, {self.unknown}"
        return f"{who}: {','.join(self.strategies)} ({self.source}){mig}"


def _mig_from_json(raw: Any) -> str:
    if raw is None:
        return MIG_NONE
    return "" if raw == "unknown" else str(raw)


def _argv(c: Mapping[str, Any]) -> list[str]:
    return [a for a in (*_strings(c.get("command")), *_strings(c.get("args")))]


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _is(argv0: str, command: str) -> bool:
    return posixpath.basename(argv0) == command


def _image_is_plugin(c: Mapping[str, Any]) -> bool:
    repo = str(c.get("image") or "").split("@")[0].rsplit(":", 1)[0]
    return posixpath.basename(repo) == PLUGIN_IMAGE


def is_plugin(c: Mapping[str, Any]) -> bool:
    """Does this container run NVIDIA's device plugin (or HAMi's) by its own command, or
    as NVIDIA's image run with its entrypoint? (A shell's script: ``runs_plugin``.)"""
    command = _strings(c.get("command"))
    if command:
        return _is(command[0], PLUGIN_COMMAND)
    args = _strings(c.get("args"))
    return (_image_is_plugin(c) and not (args and _is(args[0], CONFIG_MANAGER))) or \
        bool(args and _is(args[0], PLUGIN_COMMAND))


def runs_plugin(pod: Mapping[str, Any], c: Mapping[str, Any],
                config_maps: ConfigMaps) -> bool:
    """Does this container run the device plugin, whatever its command? A shell runs it
    when its script does: the GPU Operator starts it as ``/bin/sh -c /bin/entrypoint.sh``,
    a script from its ConfigMap ``nvidia-device-plugin-entrypoint`` that waits for the
    driver and then execs ``nvidia-device-plugin`` (gpu-operator v26.3.0
    ``assets/state-device-plugin/0400_configmap.yaml``, ``0500_daemonset.yaml``). A script
    gpupool cannot read runs it when NVIDIA's plugin image does (its strategy is then
    unknown, with the reason)."""
    if not _is_shell(_argv(c)):
        return is_plugin(c)
    try:
        script = _script(pod, c, config_maps)
    except Unknown:
        return _image_is_plugin(c)
    return _invocation(script) is not None


def plugin_containers(pod: Mapping[str, Any], config_maps: ConfigMaps | None = None
                      ) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    cms = config_maps or _no_config_maps
    return [c for c in spec.get("containers") or ()
            if isinstance(c, Mapping) and runs_plugin(pod, c, cms)]


#: What deployed a plugin, told by the labels its deployer puts on the pod: the GPU
#: Operator's DaemonSet template (gpu-operator ``assets/state-device-plugin/
#: 0500_daemonset.yaml``), HAMi's chart (v2.10 ``templates/device-plugin/
#: daemonsetnvidia.yaml``) and NVIDIA's own chart (k8s-device-plugin
#: ``deployments/helm/nvidia-device-plugin/templates/_helpers.tpl``, its selector labels).
#: (who deployed HAMi's plugin, as ``deployed_by`` says it: what ``hamiplugin`` looks for)
HAMI_CHART = "HAMi's chart"
_DEPLOYERS = (("app", "nvidia-device-plugin-daemonset", "the GPU Operator"),
              ("app.kubernetes.io/component", "hami-device-plugin", HAMI_CHART),
              ("app.kubernetes.io/name", "nvidia-device-plugin",
               "NVIDIA's device-plugin chart"))


def deployed_by(pod: Mapping[str, Any]) -> str:
    """Who deployed this plugin pod, for ``doctor``; else the DaemonSet that owns it; ""
    where neither says."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    assert isinstance(labels, Mapping)
    for key, value, who in _DEPLOYERS:
        if labels.get(key) == value:
            return who
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("kind") == "DaemonSet":
            return f"DaemonSet {ref.get('name', '')}"
    return ""


def _is_shell(argv: Sequence[str]) -> bool:
    return bool(argv) and posixpath.basename(argv[0]) in _SHELLS


#: Files a plugin's entrypoint may source (``. FILE``) that cannot set its strategy, config
#: file or MIG strategy: the GPU Operator's ``driver-ready``, which its validator writes with
#: the driver's paths alone (gpu-operator v26.3.0 ``cmd/nvidia-validator/main.go``, lines
#: 917-921: IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT, DRIVER_ROOT_CTR_PATH, NVIDIA_DEV_ROOT,
#: DEV_ROOT_CTR_PATH), and ``feature-flags.env``, which the v26.7.0 entrypoint writes itself
#: (GDRCOPY_ENABLED, GDS_ENABLED, MOFED_ENABLED).
_KNOWN_SOURCED = frozenset({"/run/nvidia/validations/driver-ready", "./feature-flags.env",
                            "feature-flags.env"})
#: The settings a script could change on the plugin's way (the variables it reads).
_WATCHED = re.compile(r"\b(DEVICE_LIST_STRATEGY|CONFIG_FILE|MIG_STRATEGY)\b")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_COMMANDS = re.compile(r"\n|;|&&|\|\|")


def _script(pod: Mapping[str, Any], c: Mapping[str, Any], config_maps: ConfigMaps) -> str:
    """The script a shell container runs: ``sh -c STRING`` runs STRING, which may name a
    script file (the GPU Operator's ``/bin/entrypoint.sh``, mounted from a ConfigMap);
    ``sh FILE`` runs FILE. Raises ``Unknown`` where the file cannot be read."""
    rest = _argv(c)[1:]
    if rest and rest[0] == "-c":
        inline = rest[1] if len(rest) > 1 else ""
        try:
            words = shlex.split(inline, comments=True)
        except ValueError:
            return inline
        if len(words) != 1 or not words[0].startswith("/") or _is(words[0], PLUGIN_COMMAND):
            return inline
        path = words[0]
    elif rest and not rest[0].startswith("-"):
        path = rest[0]
    else:
        return ""
    found = _mount_for(c, posixpath.normpath(path))
    vol = _volume(pod, str(found[0].get("name"))) if found else {}
    if found is None or not isinstance(vol.get("configMap"), Mapping):
        raise Unknown(f"its entrypoint script {path} is in the image or on a volume gpupool "
                      "does not read")
    text = _config_map_file(_namespace(pod), vol, found[1], config_maps,
                            "its entrypoint script")
    if text is None:
        raise Unknown(f"its entrypoint script {path} is not in its ConfigMap "
                      f"{_namespace(pod)}/{vol['configMap'].get('name', '')}")
    return text


def _invocation(script: str) -> list[str] | None:
    """The arguments a script starts the plugin with (after its command), None where it
    does not start it: the first command whose word, after ``exec`` and variable
    assignments, is ``nvidia-device-plugin``."""
    for command in _COMMANDS.split(script):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        while words and (words[0] == "exec" or _ASSIGNMENT.match(words[0])):
            words = words[1:]
        if words and _is(words[0], PLUGIN_COMMAND):
            return words[1:]
    return None


def _script_args(script: str) -> list[str]:
    """The plugin's arguments from its script; raises ``Unknown`` where the script may set
    what the plugin reads in ways gpupool does not follow: a variable it reads, a sourced
    file gpupool does not know, an argument from a shell expansion."""
    args = _invocation(script) or []
    for command in _COMMANDS.split(script):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        if len(words) >= 2 and words[0] in (".", "source") and words[1] not in _KNOWN_SOURCED:
            raise Unknown(f"the plugin's entrypoint script sources {words[1]}, which may set "
                          "its strategy")
        started = _invocation(command)
        before = words if started is None else words[:len(words) - len(started) - 1]
        if _WATCHED.search(" ".join(before)):
            raise Unknown("the plugin is started by a shell script that sets its strategy, "
                          "config file or MIG strategy")
    if any("$" in a or "`" in a for a in args):
        raise Unknown("the plugin's arguments in its entrypoint script come from shell "
                      "expansions")
    return args


def _flags(c: Mapping[str, Any], script: str | None = None) -> dict[str, list[str]]:
    """The plugin's flags as Go's flag package reads them (urfave/cli v2 parses with it):
    ``-name``/``--name``, ``=value`` or the next argument, up to ``--`` or the first
    argument that is not a flag; a repeated slice flag adds up. ``script``: what a shell
    container runs (``_script``; None: its inline text alone)."""
    argv = _argv(c)
    if _is_shell(argv):
        if script is None:
            rest = argv[1:]
            script = (rest[1] if len(rest) > 1 else "") if rest[:1] == ["-c"] \
                else " ".join(rest)
        argv = _script_args(script)
    elif argv and (_is(argv[0], PLUGIN_COMMAND) or _strings(c.get("command"))):
        argv = argv[1:]
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--" or not a.startswith("-") or a == "-":
            break
        name = a.lstrip("-")
        value: str | None = None
        if "=" in name:
            name, value = name.split("=", 1)
        elif name not in _BOOL_FLAGS and i + 1 < len(argv):
            i += 1
            value = argv[i]
        if value is not None:
            out.setdefault(name, []).append(value)
        i += 1
    return out


def _literal(entry: Mapping[str, Any], what: str) -> str:
    """An ``env`` entry's value; one from ``valueFrom`` cannot be known here."""
    if entry.get("valueFrom") is not None:
        raise Unknown(f"{what} comes from valueFrom")
    return str(entry.get("value") or "")


def _env(c: Mapping[str, Any], name: str, pod_ns: str, config_maps: ConfigMaps
         ) -> str | None:
    """A variable as the kubelet sets it: ``env`` over ``envFrom``, the last of a name."""
    found: str | None = None
    for e in c.get("env") or ():
        if isinstance(e, Mapping) and e.get("name") == name:
            found = _literal(e, name)
    if found is not None:
        return found
    for src in c.get("envFrom") or ():
        if not isinstance(src, Mapping):
            continue
        prefix = str(src.get("prefix") or "")
        if not name.startswith(prefix):
            continue
        ref = src.get("configMapRef")
        if isinstance(ref, Mapping):
            data = config_maps(pod_ns, str(ref.get("name") or ""))
            if data is None:
                raise Unknown(f"envFrom ConfigMap {pod_ns}/{ref.get('name')} cannot be read")
            if name[len(prefix):] in data:
                found = str(data[name[len(prefix):]])
        elif src.get("secretRef") is not None:
            raise Unknown(f"envFrom a Secret may set {name}")
    return found


def _split(values: Sequence[str]) -> tuple[str, ...]:
    # urfave/cli's StringSlice: each value split on commas, each part trimmed
    return tuple(p.strip() for v in values for p in v.split(","))


def _mount_for(c: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], str] | None:
    """The container's volume mount that holds ``path``, and the path inside the volume."""
    best: tuple[Mapping[str, Any], str] | None = None
    best_len = -1
    for m in c.get("volumeMounts") or ():
        if not isinstance(m, Mapping):
            continue
        at = posixpath.normpath(str(m.get("mountPath") or "/"))
        sub = str(m.get("subPath") or "")
        if path == at:
            rel = sub
        elif path.startswith(at.rstrip("/") + "/") and not sub:
            rel = path[len(at.rstrip("/")) + 1:]
        elif path.startswith(at.rstrip("/") + "/"):
            rel = posixpath.join(sub, path[len(at.rstrip("/")) + 1:])
        else:
            continue
        if len(at) > best_len:
            best, best_len = (m, rel), len(at)
    return best


def _volume(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    for v in spec.get("volumes") or ():
        if isinstance(v, Mapping) and v.get("name") == name:
            return v
    return {}


def _config_map_file(ns: str, vol: Mapping[str, Any], rel: str, config_maps: ConfigMaps,
                     what: str = "its config file") -> str | None:
    """The text of ``rel`` in a ConfigMap volume (None: no such file)."""
    cm = vol["configMap"]
    name = str(cm.get("name") or "")
    data = config_maps(ns, name)
    if data is None:
        raise Unknown(f"{what} comes from ConfigMap {ns}/{name}, which cannot be read")
    items = cm.get("items")
    if isinstance(items, list):
        key = next((str(i.get("key")) for i in items
                    if isinstance(i, Mapping) and i.get("path") == rel), None)
        return None if key is None else data.get(key)
    return data.get(rel)


def _written_by_config_manager(pod: Mapping[str, Any], vol_name: str, rel: str,
                               labels: Mapping[str, str], config_maps: ConfigMaps) -> str:
    """The config file NVIDIA's config-manager writes into a shared volume: one of the
    ConfigMap's configs, picked by the node's label, else its default, else its fallbacks
    (k8s-device-plugin v0.19.3 ``cmd/config-manager/main.go``, ``updateConfigName``)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    ns = _namespace(pod)
    for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        if not isinstance(c, Mapping):
            continue
        argv = _argv(c)
        if not argv or not _is(argv[0], CONFIG_MANAGER):
            continue
        env = {str(e.get("name")): e for e in c.get("env") or () if isinstance(e, Mapping)}

        def value(name: str, default: str = "", env: dict[str, Any] = env) -> str:
            e = env.get(name)
            return default if e is None else _literal(e, f"config-manager's {name}")

        dst = value("CONFIG_FILE_DST")
        mount = _mount_for(c, posixpath.normpath(dst)) if dst else None
        if mount is None or mount[0].get("name") != vol_name or mount[1] != rel:
            continue
        src = _mount_for(c, posixpath.normpath(value("CONFIG_FILE_SRCDIR")) + "/x")
        src_vol = _volume(pod, str(src[0].get("name"))) if src else {}
        if not isinstance(src_vol.get("configMap"), Mapping):
            raise Unknown("config-manager reads its configs from a volume that is not a "
                           "ConfigMap")
        cm_name = str(src_vol["configMap"].get("name") or "")
        data = config_maps(ns, cm_name)
        if data is None:
            raise Unknown(f"its configs come from ConfigMap {ns}/{cm_name}, which cannot "
                           "be read")
        files = {k for k in data if not k.startswith("..")}
        chosen = labels.get(value("NODE_LABEL", CONFIG_LABEL), "")
        if not chosen:
            chosen = value("DEFAULT_CONFIG")
        if chosen:
            if chosen not in files:
                raise _NeverStarts(f"config-manager is told to use config {chosen!r}, which "
                               f"ConfigMap {ns}/{cm_name} does not hold: the plugin never "
                               "starts")
            return data[chosen]
        for fallback in _split([value("FALLBACK_STRATEGIES")]):
            if fallback == "named" and "default" in files:
                return data["default"]
            if fallback == "single" and len(files) == 1:
                return data[next(iter(files))]
            if fallback == "empty":
                return ""
        raise _NeverStarts(f"config-manager finds no config to use in ConfigMap {ns}/{cm_name}: "
                       "the plugin never starts")
    raise Unknown(f"its config file is on volume {vol_name!r}, which nothing gpupool reads "
                   "writes")


def _namespace(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return str(meta.get("namespace") or "default")


def _config_text(pod: Mapping[str, Any], c: Mapping[str, Any], path: str,
                 labels: Mapping[str, str], config_maps: ConfigMaps) -> str | None:
    """The text of the plugin's config file as it will find it (None: no such file)."""
    path = posixpath.normpath(path if path.startswith("/") else "/" + path)
    found = _mount_for(c, path)
    if found is None:
        raise Unknown(f"its config file {path} is in the image, which gpupool cannot read")
    mount, rel = found
    vol = _volume(pod, str(mount.get("name")))
    if isinstance(vol.get("configMap"), Mapping):
        return _config_map_file(_namespace(pod), vol, rel, config_maps)
    if "emptyDir" in vol:
        return _written_by_config_manager(pod, str(mount.get("name")), rel, labels,
                                          config_maps)
    raise Unknown(f"its config file {path} is on a volume gpupool does not read "
                   f"({', '.join(k for k in vol if k != 'name') or 'none'})")


def _config_flags(text: str, path: str) -> Mapping[str, Any]:
    """The ``flags`` of the plugin's config file (``api/config/v1`` ``parseConfigFrom``)."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise _NeverStarts(f"its config file {path} does not parse, so the plugin never starts "
                       f"({str(exc).splitlines()[0]})") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise _NeverStarts(f"its config file {path} is not a mapping, so the plugin never starts")
    version = doc.get("version") or "v1"
    if version != "v1":
        raise Unknown(f"its config file {path} has version {version!r}, so the plugin never "
                       "starts")
    flags = doc.get("flags")
    return flags if isinstance(flags, Mapping) else {}


def _configured_strategies(flags: Mapping[str, Any], path: str) -> tuple[str, ...] | None:
    plugin = flags.get("plugin")
    raw = plugin.get("deviceListStrategy") if isinstance(plugin, Mapping) else None
    if raw is None:
        return None
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return tuple(raw)
    raise _NeverStarts(f"its config file {path} sets deviceListStrategy to {raw!r}, so the "
                       "plugin never starts")


def settle(pod: Mapping[str, Any], c: Mapping[str, Any], labels: Mapping[str, str],
           config_maps: ConfigMaps) -> Settled:
    """The strategy one device-plugin container runs with, on a node with these labels."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    who, name = f"{_namespace(pod)}/{meta.get('name', '')}", str(c.get("name") or "")
    by = deployed_by(pod)
    try:
        strategies, source, mig = _settle(pod, c, labels, config_maps)
    except Unknown as exc:
        return Settled(who, name, None, unknown=str(exc), deployed_by=by)
    bad = sorted(set(strategies) - STRATEGIES)
    if bad:
        return Settled(who, name, None, unknown=f"{source} names strategy {bad[0]!r}, which "
                                               "the plugin refuses: it never starts",
                       deployed_by=by)
    return Settled(who, name, strategies, source, mig_strategy=mig, deployed_by=by)


def _no_config_maps(namespace: str, name: str) -> Mapping[str, str] | None:
    return None


def given_strategy(c: Mapping[str, Any], namespace: str = "",
                   config_maps: ConfigMaps = _no_config_maps, script: str | None = None
                   ) -> tuple[tuple[str, ...], str] | None:
    """The strategy a container's own flags or variables set (the flag over the variable),
    and which; None where neither does (its config file, or the default, decides). Raises
    ``Unknown`` where the variable comes from what cannot be read. ``script``: what a
    shell container runs, read from its ConfigMap (``_script``)."""
    flags = _flags(c, script)
    if flags.get(_STRATEGY_FLAG):
        return _split(flags[_STRATEGY_FLAG]), f"flag --{_STRATEGY_FLAG}"
    env = _env(c, _STRATEGY_ENV, namespace, config_maps)
    if env is not None:
        return _split([env]), f"variable {_STRATEGY_ENV}"
    return None


def _settle(pod: Mapping[str, Any], c: Mapping[str, Any], labels: Mapping[str, str],
            config_maps: ConfigMaps) -> tuple[tuple[str, ...], str, str]:
    """(strategies, where they came from, MIG strategy: "" when only that is unknown)."""
    script = _script(pod, c, config_maps) if _is_shell(_argv(c)) else None
    flags = _flags(c, script)
    ns = _namespace(pod)
    given = given_strategy(c, ns, config_maps, script)
    mig = flags[_MIG_FLAG][-1] if flags.get(_MIG_FLAG) else _env(c, _MIG_ENV, ns, config_maps)
    path = flags[_CONFIG_FLAG][-1] if flags.get(_CONFIG_FLAG) else \
        _env(c, _CONFIG_ENV, ns, config_maps)
    configured: Mapping[str, Any] | None = {}
    if path:
        # The file is read first, and a file the plugin cannot load stops it whatever its
        # flags say; what only gpupool cannot read gives way to a flag that is set.
        try:
            text = _config_text(pod, c, path, labels, config_maps)
            if text is None:
                raise _NeverStarts(f"its config file {path} does not exist, so the plugin "
                                   "never starts")
            configured = _config_flags(text, path)
        except _NeverStarts:
            raise
        except Unknown:
            if given is None:
                raise
            configured = None
    if mig is None:
        mig = "" if configured is None else str(configured.get("migStrategy") or MIG_NONE)
    if mig and mig not in _MIG_STRATEGIES:
        raise _NeverStarts(f"its MIG strategy {mig!r} is unknown to the plugin, so it never "
                           "starts")
    if given is not None:
        return given[0], given[1], mig
    found = _configured_strategies(configured or {}, path or "")
    if found is not None:
        return found, f"config file {path}", mig
    return (DEFAULT_STRATEGY,), "the plugin's default", mig


def settle_pods(pods: Sequence[Mapping[str, Any]], labels: Mapping[str, str],
                config_maps: ConfigMaps) -> tuple[Settled, ...]:
    """Every device-plugin container among a node's pods (pods that have finished or are
    being deleted run nothing)."""
    out = []
    for pod in pods:
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        assert isinstance(status, Mapping) and isinstance(meta, Mapping)
        if status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            continue
        out += [settle(pod, c, labels, config_maps)
                for c in plugin_containers(pod, config_maps)]
    return tuple(sorted(out, key=lambda s: (s.pod, s.container)))
