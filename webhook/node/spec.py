"""CDI spec files, parsed and validated as the container runtime's CDI library does.

gpupool only needs the device names, but it must agree with the runtime on *which files
count*: a spec the runtime rejects defines no devices, so a node whose only per-UUID spec is
invalid is as broken as one without it. Hence strict parsing: unknown fields, bad names,
empty device edits, duplicate devices and features newer than the declared ``cdiVersion``
all reject the whole file, with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.api.cdireaders import version_key
from webhook.api.yamltext import LOADER, yaml_error

#: Released spec versions (a leading 'v' is accepted, as upstream does).
VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
            "1.0.0", "1.1.0")
_VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_HOOKS = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart",
          "poststop"}
_UINT32 = (0, 2**32 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class CDIError(ValueError):
    """A spec file the runtime would refuse; the message says why."""


@dataclass(frozen=True)
class Spec:
    path: str
    version: str
    kind: str
    devices: tuple[str, ...]

    def qualified(self, device: str) -> str:
        return f"{self.kind}={device}"


def valid_vendor(name: str) -> bool:
    return bool(_VENDOR.match(name))


def valid_class(name: str) -> bool:
    return bool(_VENDOR.match(name))


def valid_device_name(name: str) -> bool:
    return bool(_DEVICE.match(name))


def parse_qualified(name: str) -> tuple[str, str]:
    """'vendor/class=device' -> (kind, device), or CDIError."""
    kind, sep, device = name.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not sep or not slash or not valid_vendor(vendor) or not valid_class(cls) \
            or not valid_device_name(device):
        raise CDIError(f"{name!r} is not a qualified CDI device name (vendor/class=name)")
    return kind, device


# ------------------------------------------------------------------ structural checks


class _Checker:
    """Walks the document, rejecting unknown fields and wrong types, noting version needs."""

    def __init__(self) -> None:
        self.needs: dict[str, str] = {}  # feature -> minimum version

    def need(self, version: str, feature: str) -> None:
        self.needs.setdefault(feature, version)

    def obj(self, value: Any, where: str, fields: Mapping[str, Any], required: tuple[str, ...] = ()
            ) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise CDIError(f"{where}: expected an object")
        for key in value:
            if key not in fields:
                raise CDIError(f"{where}: unknown field {key!r}")
        for key in required:
            if key not in value:
                raise CDIError(f"{where}: missing required field {key!r}")
        for key, check in fields.items():
            if key in value and check is not None:
                check(value[key], f"{where}.{key}")
        return value

    def string(self, value: Any, where: str) -> None:
        if not isinstance(value, str):
            raise CDIError(f"{where}: expected a string")

    def strings(self, value: Any, where: str) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CDIError(f"{where}: expected a list of strings")

    def integer(self, bounds: tuple[int, int]) -> Any:
        def check(value: Any, where: str) -> None:
            if isinstance(value, bool) or not isinstance(value, int) \
                    or not bounds[0] <= value <= bounds[1]:
                raise CDIError(f"{where}: expected an integer in [{bounds[0]}, {bounds[1]}]")
        return check

    def annotations(self, value: Any, where: str) -> None:
        if not isinstance(value, Mapping):
            raise CDIError(f"{where}: expected a map of strings")
        for k, v in value.items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise CDIError(f"{where}: expected a map of non-empty strings to strings")
        if value:
            self.need("0.6.0", "annotations")

    def list_of(self, item: Any) -> Any:
        def check(value: Any, where: str) -> None:
            if not isinstance(value, list):
                raise CDIError(f"{where}: expected a list")
            for i, v in enumerate(value):
                item(v, f"{where}[{i}]")
        return check

    def env(self, value: Any, where: str) -> None:
        self.strings(value, where)
        for i, e in enumerate(value):
            if "=" not in e or e.startswith("="):
                raise CDIError(f"{where}[{i}]: {e!r} is not KEY=VALUE")

    def device_node(self, value: Any, where: str) -> None:
        self.obj(value, where, {
            "path": self.string, "hostPath": self.string, "permissions": self.string,
            "type": self.string, "major": self.integer(_INT64), "minor": self.integer(_INT64),
            "fileMode": self.integer(_UINT32), "uid": self.integer(_UINT32),
            "gid": self.integer(_UINT32)}, ("path",))
        if not value["path"]:
            raise CDIError(f"{where}.path: must not be empty")
        if value.get("type", "") not in ("", "b", "c", "u", "p"):
            raise CDIError(f"{where}.type: {value['type']!r} is not one of b, c, u, p")
        if set(value.get("permissions", "")) - set("rwm"):
            raise CDIError(f"{where}.permissions: {value['permissions']!r} is not made of r, w, m")
        if value.get("hostPath"):
            self.need("0.5.0", "deviceNodes.hostPath")

    def mount(self, value: Any, where: str) -> None:
        self.obj(value, where, {"hostPath": self.string, "containerPath": self.string,
                                "options": self.strings, "type": self.string},
                 ("hostPath", "containerPath"))
        if not value["hostPath"] or not value["containerPath"]:
            raise CDIError(f"{where}: hostPath and containerPath must not be empty")
        if value.get("type"):
            self.need("0.4.0", "mounts.type")

    def hook(self, value: Any, where: str) -> None:
        self.obj(value, where, {"hookName": self.string, "path": self.string,
                                "args": self.strings, "env": self.env,
                                "timeout": self.integer(_UINT32)}, ("hookName", "path"))
        if value["hookName"] not in _HOOKS:
            raise CDIError(f"{where}.hookName: {value['hookName']!r} is not an OCI hook")
        if not value["path"]:
            raise CDIError(f"{where}.path: must not be empty")

    def net_device(self, value: Any, where: str) -> None:
        self.obj(value, where, {"hostInterfaceName": self.string, "name": self.string},
                 ("hostInterfaceName", "name"))
        if not value["hostInterfaceName"] or not value["name"]:
            raise CDIError(f"{where}: hostInterfaceName and name must not be empty")
        self.need("1.1.0", "netDevices")

    def intel_rdt(self, value: Any, where: str) -> None:
        self.obj(value, where, {"closID": self.string, "l3CacheSchema": self.string,
                                "memBwSchema": self.string, "schemata": self.strings,
                                "enableMonitoring": self.boolean})
        self.need("0.7.0", "intelRdt")
        if "schemata" in value or "enableMonitoring" in value:
            self.need("1.1.0", "intelRdt.schemata/enableMonitoring")

    def boolean(self, value: Any, where: str) -> None:
        if not isinstance(value, bool):
            raise CDIError(f"{where}: expected true or false")

    def gids(self, value: Any, where: str) -> None:
        self.list_of(self.integer(_UINT32))(value, where)
        if value:
            self.need("0.7.0", "additionalGids")

    def edits(self, value: Any, where: str) -> bool:
        """Validate containerEdits; returns True when they edit something."""
        self.obj(value, where, {
            "env": self.env, "deviceNodes": self.list_of(self.device_node),
            "netDevices": self.list_of(self.net_device), "mounts": self.list_of(self.mount),
            "hooks": self.list_of(self.hook), "intelRdt": self.intel_rdt,
            "additionalGids": self.gids})
        return any(value.get(k) for k in ("env", "deviceNodes", "netDevices", "mounts", "hooks",
                                          "intelRdt", "additionalGids"))


def _decode(text: str) -> Any:
    """JSON specs (the device plugin's) through the JSON decoder, YAML through libyaml's
    safe loader: a node with hundreds of GPUs rescans in milliseconds."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    return yaml.load(text, Loader=LOADER)  # LOADER is a safe loader


def parse_spec(text: str, path: str = "<spec>") -> Spec:
    """Parse one spec file's text (YAML or JSON); raise CDIError with the reason."""
    if not text.strip():
        raise CDIError("empty file")
    try:
        doc = _decode(text)
    except (yaml.YAMLError, ValueError) as exc:
        raise CDIError(f"not valid YAML/JSON: {yaml_error(exc)}") from exc
    return validate_spec(doc, path)


def validate_spec(doc: Any, path: str = "<spec>") -> Spec:
    c = _Checker()
    if not isinstance(doc, Mapping):
        raise CDIError("expected a CDI spec object")
    c.obj(doc, "spec", {"cdiVersion": None, "kind": None, "devices": None,
                        "containerEdits": None, "annotations": c.annotations},
          ("cdiVersion", "kind", "devices"))
    version = doc["cdiVersion"]
    if not isinstance(version, str):
        raise CDIError("cdiVersion: expected a string")
    plain = version[1:] if version.startswith("v") else version
    if plain not in VERSIONS:
        raise CDIError(f"cdiVersion: invalid version {version!r} "
                       f"(known: {', '.join(VERSIONS)})")
    kind = doc["kind"]
    if not isinstance(kind, str):
        raise CDIError("kind: expected a string")
    vendor, slash, cls = kind.partition("/")
    if not slash:
        raise CDIError(f"kind: {kind!r} is not vendor/class")
    if not valid_vendor(vendor):
        raise CDIError(f"kind: invalid vendor {vendor!r}")
    if not valid_class(cls):
        raise CDIError(f"kind: invalid class {cls!r}")
    if "." in cls:
        c.need("0.6.0", "a '.' in the class name")
    if "containerEdits" in doc:
        c.edits(doc["containerEdits"], "containerEdits")
    devices = doc["devices"]
    if not isinstance(devices, list):
        raise CDIError("devices: expected a list")
    if not devices:
        raise CDIError("invalid spec, no devices")
    names: list[str] = []
    for i, dev in enumerate(devices):
        where = f"devices[{i}]"
        c.obj(dev, where, {"name": c.string, "annotations": c.annotations,
                           "containerEdits": None}, ("name", "containerEdits"))
        name = dev["name"]
        if not valid_device_name(name):
            raise CDIError(f"{where}.name: invalid device name {name!r}")
        if not name[0].isalpha():
            c.need("0.5.0", "device names not starting with a letter")
        if name in names:
            raise CDIError(f"invalid spec, multiple device {name!r}")
        names.append(name)
        if not c.edits(dev["containerEdits"], f"{where}.containerEdits"):
            raise CDIError(f"{where}: invalid device, empty device edits")
    for feature, minimum in c.needs.items():
        if version_key(minimum) > version_key(plain):
            raise CDIError(f"cdiVersion {version} is too old for {feature} "
                           f"(the spec version must be at least {minimum})")
    return Spec(path=path, version=plain, kind=kind, devices=tuple(names))
