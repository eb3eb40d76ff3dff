"""The real container stack as a test oracle: would this container be created on this node?

Two real programs, built from their Go modules by ``tests/oracle/build.sh`` and cached outside
the tree:

- ``nvidia-container-runtime`` (nvidia-container-toolkit v1.20.2), driven as containerd drives
  it: an OCI bundle whose process env holds what the device plugin hands the container
  (``NVIDIA_VISIBLE_DEVICES``), the node's ``config.toml`` (mode, default kind, spec dirs)
  found through ``XDG_CONFIG_HOME``, and a stub low-level runtime in place of runc. ``create``
  then resolves CDI devices exactly as on a node, with the runtime's own error text;
- ``cdi-inject``, a small program on the CDI library (v1.1.2): ``NewCache`` on the node's
  spec dirs and ``InjectDevices``, which is what containerd runs for a device plugin's CDI
  names (``cdi-annotations``, ``cdi-cri``) whatever the NVIDIA runtime's mode;
- ``nri-inject``: NVIDIA's NRI plugin (the toolkit's
  ``cmd/nvidia-ctk-installer/container/runtime/nri``) registered over a real socket with
  containerd/nri's runtime side (the adaptation containerd hosts plugins with), one
  ``CreateContainer`` round trip, and the plugin's adjustment applied with NRI's spec
  generator and the CDI library as containerd v2.2 applies it. Only containerd itself is
  missing: what it would pass the plugin (the pod's namespace and annotations, the
  container's name) is given on the command line.

This machine has no GPU, so the node's spec files are copied with every device node's host
path pointed at ``/dev/null``: names and kinds, which decide resolution, are untouched; only
the final stat of a real device file is spared.

Where the real programs cannot answer here, the rule used instead is named in the verdict:
``auto`` mode (and a config with no mode) sends bare GPU UUIDs to ``jit-cdi``, a spec generated
from NVML at container creation; without a driver it cannot run, so a UUID is taken to
resolve exactly when the node has that GPU (domain.md, "Runtime behaviour checked").
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.gobuild import built
from harness.kit import ROOT

BUILD = ROOT / "tests" / "oracle" / "build.sh"
STUB_RUNTIME = ("#!/bin/sh\n"
                "# Stands in for runc: the question ends where runc would start.\n"
                "exit 0\n")


def binaries() -> Path:
    return built(BUILD, "the runtime oracle (nvidia-container-runtime, CDI library)")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    error: str = ""
    by: str = "nvidia-container-runtime"  # or "cdi library", or the rule used instead
    spec: dict[str, Any] | None = None  # the OCI spec after the runtime modified it

    @property
    def devices(self) -> list[Any]:
        """The device nodes the runtime put in the container (none: it starts without its
        GPU, even where creation succeeds)."""
        return list(((self.spec or {}).get("linux") or {}).get("devices") or [])


def _point_devices_at_null(doc: Any) -> Any:
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k == "deviceNodes" and isinstance(v, list):
                out[k] = [{**d, "hostPath": "/dev/null"} if isinstance(d, dict) else d
                          for d in v]
            else:
                out[k] = _point_devices_at_null(v)
        return out
    if isinstance(doc, list):
        return [_point_devices_at_null(x) for x in doc]
    return doc


class OracleNode:
    """One node as the oracle sees it: its spec dirs (copied, in priority order), its
    runtime config, and the GPUs (and MIG devices) it really has."""

    def __init__(self, root: Path, spec_dirs: list[Path], config_toml: Path | None,
                 gpus: tuple[str, ...] = ()) -> None:
        self.root = root
        self.gpus = gpus
        self.spec_dirs = []
        for i, src in enumerate(spec_dirs):
            dst = root / f"cdi{i}"
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()) if src.is_dir() else []:
                if f.is_file() and f.suffix in (".json", ".yaml"):
                    text = f.read_text(errors="replace")
                    try:
                        doc = yaml.safe_load(text)
                    except yaml.YAMLError:
                        doc = None  # broken files are copied as they are: they must stay broken
                    if isinstance(doc, dict):
                        text = yaml.safe_dump(_point_devices_at_null(doc), sort_keys=False)
                    (dst / (f.stem + ".yaml")).write_text(text)
            self.spec_dirs.append(dst)
        cfg = tomllib.loads(config_toml.read_text()) if config_toml else {}
        rt = cfg.get("nvidia-container-runtime", {})
        self.mode: str | None = rt.get("mode")
        self.default_kind: str | None = rt.get("modes", {}).get("cdi", {}).get("default-kind")
        stub = root / "stub-runc"
        stub.write_text(STUB_RUNTIME)
        stub.chmod(0o755)
        xdg = root / "xdg" / "nvidia-container-runtime"
        xdg.mkdir(parents=True, exist_ok=True)
        # The toolkit's switch for unprivileged containers' NVIDIA_VISIBLE_DEVICES, a
        # top-level key (before any table).
        accept = cfg.get("accept-nvidia-visible-devices-envvar-when-unprivileged", True)
        lines = [f"accept-nvidia-visible-devices-envvar-when-unprivileged = "
                 f"{str(bool(accept)).lower()}",
                 "[nvidia-container-runtime]", 'log-level = "info"',
                 f"runtimes = [{json.dumps(str(stub))}]"]
        if self.mode:
            lines.append(f"mode = {json.dumps(self.mode)}")
        lines += ["[nvidia-container-runtime.modes.cdi]",
                  f"spec-dirs = {json.dumps([str(d) for d in self.spec_dirs])}",
                  'annotation-prefixes = ["cdi.k8s.io/"]']
        if self.default_kind:
            lines.append(f"default-kind = {json.dumps(self.default_kind)}")
        (xdg / "config.toml").write_text("\n".join(lines) + "\n")
        self._n = 0

    def create(self, visible_devices: str, annotations: dict[str, str] | None = None
               ) -> Verdict:
        """A container whose device plugin set NVIDIA_VISIBLE_DEVICES (envvar strategy), or
        which set it itself; ``annotations``: the CDI annotations containerd passed on (its
        CDI off), which the runtime reads before any variable in ``cdi`` and ``auto`` mode."""
        jit = "runtime.nvidia.com/gpu"
        jit_kind = self.mode == "cdi" and self.default_kind == jit
        wanted = [n.partition("=")[2] if n.startswith(jit + "=") and jit_kind else n
                  for n in visible_devices.split(",")]
        if not annotations and (self.mode in (None, "auto") or jit_kind) and \
                all("=" not in n and n not in ("", "void", "none") for n in wanted):
            # Both generate the spec just in time from the driver (toolkit v1.20.2
            # internal/modifier/cdi.go, newJitCDIModifier), which needs NVML: not here. It
            # knows the node's GPUs (and MIG devices) by UUID, by index, and "all".
            whole = [g for g in self.gpus if g.startswith("GPU-")]
            missing = [u for u in wanted if u not in self.gpus and u != "all"
                       and not (u.isdigit() and int(u) < len(whole))]
            return Verdict(not missing, f"no GPU {', '.join(missing)} on the node" if missing
                           else "", by="rule: jit-cdi resolves the GPUs the node has")
        return self._runtime_create({"linux": {}, "annotations": annotations or {}, "process": {
            "args": ["sh"], "cwd": "/",
            "env": ["PATH=/usr/bin", f"NVIDIA_VISIBLE_DEVICES={visible_devices}"]}})

    def legacy(self, visible_devices: str, annotations: dict[str, str] | None = None
               ) -> Verdict:
        """A container in the runtime's ``legacy`` mode: the runtime creates it with its
        prestart hook, and at start the real ``nvidia-container-runtime-hook`` reads the
        bundle and runs ``nvidia-container-cli configure``, here a recorder that keeps the
        arguments it was given. Which devices the cli then mounts needs the driver: that last
        step follows libnvidia-container's ``src/cli/common.c`` (``select_devices``,
        commit 1aea987): ``all``; a whole GPU UUID, PCI bus id or index of the node's GPUs; a
        whole MIG UUID or ``<gpu>:<mig>`` index; anything else fails the container with
        "unknown device". ``devices`` afterwards are those it mounts."""
        created = self._runtime_create({"linux": {}, "annotations": annotations or {},
                                        "process": {
            "args": ["sh"], "cwd": "/",
            "env": ["PATH=/usr/bin", f"NVIDIA_VISIBLE_DEVICES={visible_devices}"]}})
        if not created.ok:
            return created
        self._n += 1
        bundle = self.root / f"hooked{self._n}"
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps(created.spec))
        recorded = bundle / "cli-args"
        cli = bundle / "nvidia-container-cli"
        cli.write_text(f"#!/bin/sh\n# Records what the hook asks of the cli.\n"
                       f"printf '%s\\n' \"$@\" > {recorded}\n")
        cli.chmod(0o755)
        xdg = bundle / "xdg" / "nvidia-container-runtime"
        xdg.mkdir(parents=True)
        base = (self.root / "xdg" / "nvidia-container-runtime" / "config.toml").read_text()
        head = base.split("[nvidia-container-runtime]")[0]  # the top-level keys
        (xdg / "config.toml").write_text(
            head + f"[nvidia-container-cli]\npath = {json.dumps(str(cli))}\n"
                   '[nvidia-container-runtime]\nmode = "legacy"\n')
        state = {"ociVersion": "1.0.2", "id": f"ctr{self._n}", "status": "created",
                 "pid": os.getpid(), "bundle": str(bundle)}
        r = subprocess.run([str(binaries() / "nvidia-container-runtime-hook"), "prestart"],
                           input=json.dumps(state), capture_output=True, text=True,
                           timeout=60, cwd=bundle,
                           env={**os.environ, "XDG_CONFIG_HOME": str(bundle / "xdg")})
        by = "nvidia-container-runtime-hook + libnvidia-container select_devices"
        if r.returncode:
            return Verdict(False, (r.stderr + r.stdout).strip(), by=by)
        if not recorded.exists():  # not a GPU container to the hook: nothing mounted
            return Verdict(True, "the hook ran no nvidia-container-cli", by=by,
                           spec={"linux": {"devices": []}})
        args = recorded.read_text().splitlines()
        wanted = next((a.split("=", 1)[1] for a in args if a.startswith("--device=")), "")
        ok, mounted, error = _select_devices(wanted, self.gpus)
        return Verdict(ok, error, by=by,
                       spec={"linux": {"devices": [{"path": d} for d in mounted]}})

    def _runtime_create(self, spec: dict[str, Any]) -> Verdict:
        """``nvidia-container-runtime create`` on a bundle of ``spec``, as containerd runs it
        (the node's config.toml through XDG_CONFIG_HOME), with the spec it left."""
        self._n += 1
        bundle = self.root / f"bundle{self._n}"
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps(
            {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, **spec}))
        r = subprocess.run([str(binaries() / "nvidia-container-runtime"), "create", "--bundle",
                            str(bundle), f"ctr{self._n}"], capture_output=True, text=True,
                           timeout=60, env={**os.environ,
                                            "XDG_CONFIG_HOME": str(self.root / "xdg")})
        after = json.loads((bundle / "config.json").read_text())
        return Verdict(r.returncode == 0, (r.stderr + r.stdout).strip(), spec=after)

    def nri(self, namespace: str, annotations: dict[str, str], container: str,
            allowed: tuple[str, ...]) -> Verdict:
        """A container of a pod whose ``nvidia.cdi.k8s.io`` annotations the GPU Operator's NRI
        plugin reads, on a node where the plugin allows management devices to ``allowed``
        namespaces. Created with no device at all is a verdict too: ``devices`` is empty."""
        args = [str(binaries() / "nri-inject"), "--namespace", namespace,
                "--container", container]
        for d in self.spec_dirs:
            args += ["--spec-dir", str(d)]
        for ns in allowed:
            args += ["--allow", ns]
        for k, v in annotations.items():
            args += ["--annotation", f"{k}={v}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise RuntimeError(f"nri-inject failed: {r.stderr.strip()[-500:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        spec = {"linux": {"devices": [{"path": p} for p in out.get("devices") or []]}}
        return Verdict(out["ok"], out.get("error") or "; ".join(out.get("log") or []),
                       by="nvidia nri plugin + cdi library", spec=spec)

    def inject(self, *names: str, env: tuple[str, ...] = ()) -> Verdict:
        """A container a device plugin's CDI strategy handed these fully qualified names, as
        containerd injects them (its own ``env`` first, the specs' edits applied over it).
        ``spec`` holds the process env and device nodes the injection left."""
        args = [str(binaries() / "cdi-inject")]
        for d in self.spec_dirs:
            args += ["--spec-dir", str(d)]
        for e in env:
            args += ["--env", e]
        r = subprocess.run([*args, *names], capture_output=True, text=True, timeout=60)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        spec = {"process": {"env": out.get("env") or []},
                "linux": {"devices": [{"path": p} for p in out.get("devices") or []]}}
        return Verdict(out["ok"], out.get("error", ""), by="cdi library", spec=spec)

    def create_injected(self, injected: Verdict, annotations: dict[str, str]) -> Verdict:
        """The NVIDIA runtime's create on the bundle containerd hands it after ``inject``:
        the injected env and device nodes, and the pod's CDI annotations (the
        ``cdi-annotations`` strategy; none for ``cdi-cri``). ``devices`` afterwards are the
        injected ones plus any the runtime added."""
        assert injected.spec is not None
        return self._runtime_create({
            "annotations": annotations,
            "linux": {"devices": [{"path": d["path"], "type": "c", "major": 1, "minor": 3}
                                  for d in injected.devices]},
            "process": {"args": ["sh"], "cwd": "/",
                        "env": ["PATH=/usr/bin", *injected.spec["process"]["env"]]}})


def _select_devices(devs: str, node: tuple[str, ...]) -> tuple[bool, list[str], str]:
    """libnvidia-container ``src/cli/common.c`` ``select_devices`` (commit 1aea987), on a
    node whose driver lists ``node`` (its GPUs, ``GPU-``, then its MIG devices, ``MIG-``):
    (created, the devices it mounts, its error). A name that is not ``all``, a whole GPU
    UUID (compared case-insensitively), a GPU index, or a whole MIG UUID is "unknown device".
    (PCI bus ids and ``<gpu>:<mig>`` indices need the driver's numbering: not generated.)"""
    gpus = [g for g in node if g.upper().startswith("GPU-")]
    migs = [g for g in node if g.upper().startswith("MIG-")]
    mounted: list[str] = []
    for dev in devs.split(","):
        if dev == "":
            continue  # "Allow extra commas between device strings."
        if dev.lower() == "all":
            return True, [*gpus, *migs], ""
        hit = next((g for g in gpus if dev.upper().startswith("GPU-") and len(dev) > 4
                    and g.lower() == dev.lower()), None)
        if hit is None and dev.isdigit() and int(dev) < len(gpus):
            hit = gpus[int(dev)]
        if hit is None:
            hit = next((m for m in migs if dev.upper().startswith("MIG-") and len(dev) > 4
                        and m.lower() == dev.lower()), None)
        if hit is None:
            return False, [], f"nvidia-container-cli: device error: {dev}: unknown device"
        if hit not in mounted:
            mounted.append(hit)
    return True, mounted, ""
