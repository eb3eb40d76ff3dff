"""Pod creation under load through a real API server, with and without the webhooks:

    python -m bench.e2e_load [--quick | --calls [--placement split] | --routing] [--rounds N]
                             [--writers N[,N...]]
                             [--apiserver-profiles DIR] [--kube-bin DIR]
                             [--out bench/results/e2e-load.json]

The suite's real programs: kube-apiserver with etcd, kube-controller-manager, kwok keeping the
nodes Ready; nodes whose CDI inventories a real `gpupool agent` published. Four
configurations, switched in place and interleaved round by round:

- ``none``: no webhook;
- ``hami``: HAMi's webhook alone (v2.10.0, built as the suite builds it, registered by its
  chart, logging at the chart's -v=4);
- ``gpupool``: gpupool alone, two replicas (two gunicorn masters, two workers each, sharing one
  port through SO_REUSEPORT, so the kernel spreads connections between them as a Service
  spreads them between pods), its webhooks rendered from manifests/;
- ``gpupool+hami``: gpupool in front of HAMi's webhook, as gpupool is meant to run.

N concurrent creators (10, 50, 200) create a fixed number of pods, a third HAMi GPU pods, a
third GPU Operator pods, a third without GPUs, all of which every configuration admits. The
client's create latency (p50, p99) and rate are reported beside the API server's own
``apiserver_admission_webhook_admission_duration_seconds``, with ratios to ``none`` and to
``hami`` taken round by round. Beside them, what each batch cost: CPU per created pod for
every component (API server, etcd, each webhook, the load generator) and the TCP connections
the machine accepted per pod (the API server opens new ones to an HTTP/1.1 webhook once more
calls are in flight than it keeps idle).

Two placements, interleaved with the rest: ``shared``, every process on every core; and
``split``, the control plane and the load generator on one core and the webhooks on the
other, as in a cluster where webhook pods run on worker nodes and what they burn is not taken
from the API server. Then a burst: 1,000 creations from 64 writers with gpupool in front of
HAMi. A component that does not start is named and the run exits 2; at the end the run checks
that no process it started is left.

``--calls`` runs the decomposition instead: none, HAMi, gpupool, gpupool's mutating webhook
without its validating ones, and stand-ins that do the least a webhook can: bench/floor (Go)
registered once as gpupool's webhooks are and once as HAMi's is, which shows what each
pattern of calls costs whatever serves it, and bench/baseline.py (gpupool's serving stack,
no decision) registered as gpupool's are, on shared cores unless ``--placement split``.
``--apiserver-profiles`` adds where the API
server's CPU goes, and ``--kube-bin`` runs another release's kube-apiserver
(``tests/tools/build-kube-apiserver.sh`` builds one) in place of the suite's.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
import yaml

from bench import machine
from bench.publish import publish
from harness.procs import stat_fields

if TYPE_CHECKING:
    from harness.hami import TlsProgram

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("none", "hami", "gpupool", "gpupool+hami", "gpupool-policy")
#: ``--calls`` only: gpupool's mutating webhook without its validating ones. A decomposition,
#: not an installation (the validating call is what checks the final object): beside
#: ``gpupool`` it shows what the second call per GPU pod costs.
MUTATING_ONLY = "gpupool-mutating"
#: ``--routing`` (and the full scenario): gpupool with routing in the API server, as
#: ``--routing-mode auto`` installs it on 1.36 and newer: the compiled MutatingAdmissionPolicy
#: routes the GPU pods it claims, and only validation calls gpupool for them
#: (docs/install.md, "Routing in the API server")
POLICY = "gpupool-policy"
#: ``--calls`` only: stand-in webhooks that do the least a webhook can (parse the review, add
#: STAND_IN_ANNOTATION, allow), each registered as gpupool's webhooks are (two calls per GPU
#: pod, gpupool's matchConditions) or as HAMi's is (one call for every pod); configuration:
#: (server, registered as). ``floor`` is bench/floor, in Go: what a pattern of calls costs
#: whatever serves it, a floor no implementation of that pattern goes below. ``baseline`` is
#: bench/baseline.py on gpupool's own serving stack (gunicorn, gevent workers, TLS, two
#: replicas of two workers): what that stack costs before gpupool decides anything.
STAND_INS: dict[str, tuple[str, str]] = {
    "floor:gpupool": ("floor", "gpupool"),
    "floor:hami": ("floor", "hami"),
    "baseline:gpupool": ("baseline", "gpupool"),
}
#: what a stand-in's mutation adds (bench/floor/main.go, bench/baseline.py --mark)
STAND_IN_ANNOTATION = "stand-in.example.com/seen"


def stand_in_domain(server: str) -> str:
    """Where the names of a stand-in's webhooks end (gpupool's end in gpupool.io)."""
    return f"{server}.example.com"


STAND_IN_SERVERS = tuple(dict.fromkeys(server for server, _ in STAND_INS.values()))
#: every webhook server the scenario runs, and where the names of its webhooks end
DOMAINS = {"gpupool": "gpupool.io", "hami": "hami.io",
           **{server: stand_in_domain(server) for server in STAND_IN_SERVERS}}


PLACEMENTS = ("shared", "split")
NAMESPACE = "load"


class StartError(RuntimeError):
    """A component of the rig did not start; the message names it."""


def _component(name: str, fn: Any) -> Any:
    try:
        return fn()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # pytest's outcomes from the Go builds are BaseException
        raise StartError(f"{name} did not start: {str(exc).strip()[-1500:]}") from exc


class Rig:
    """Everything the scenario starts, kept for switching configurations and for the final
    check that nothing it started outlives it."""

    def __init__(self, tmp: Path, *, profiling: bool = False,
                 kube_bin: Path | None = None, stand_ins: frozenset[str] = frozenset()
                 ) -> None:
        self.tmp = tmp
        self.stand_ins = stand_ins  # the servers of STAND_INS this run needs
        self.stand_in_cfgs: dict[str, list[dict[str, Any]]] = {}
        self.floor: TlsProgram | None = None
        self.baselines: list[subprocess.Popen[bytes]] = []
        self.profiling = profiling
        self.kube_bin = kube_bin
        self.replicas: list[subprocess.Popen[bytes]] = []
        self.cores: set[int] = set()

    # ------------------------------------------------------------------ start
    def start(self) -> Rig:
        from harness import helm as helmtool
        from harness import install
        from harness.controlplane import ControlPlane, binaries
        from harness.gobuild import built
        from harness.hami import HamiWebhook
        from harness.servers import free_port

        k8s = _component("the Kubernetes control plane build", binaries)
        if self.kube_bin is not None:
            k8s = _component(f"the programs in {self.kube_bin}",
                             lambda: overlay(k8s, self.kube_bin, self.tmp / "bin"))
        kwok = _component("the kwok build", lambda: built(ROOT / "tests/tools/build-kwok.sh",
                                                           "kwok"))
        helm = _component("the helm build", helmtool.binary)
        self.cp = _component("kube-apiserver and etcd",
                             lambda: ControlPlane(self.tmp / "cp", k8s,
                                                  profiling=self.profiling).start())
        _component("kube-controller-manager", self.cp.start_controller_manager)
        _component("kwok", lambda: self.cp.start_kwok(kwok))
        self.objs = _component("gpupool's manifests", lambda: install.prepare(self.cp, self.tmp))
        _component("the nodes and their agents", self._nodes)
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        for i in range(2):
            self.replicas.append(_component(f"gpupool replica {i + 1}",
                                            lambda i=i: self._replica(port, i)))
        certs = self.tmp / "certs"
        self.hami = _component("HAMi's webhook", lambda: HamiWebhook(
            certs / "tls.crt", certs / "tls.key", self.tmp / "hami.log").start(verbosity=4))
        self.hami_cfg = self.hami.configuration(helm, (certs / "caBundle").read_text().strip(),
                                                self.tmp)
        if self.stand_ins:
            self._stand_ins(certs)
        self.cp.kubectl("create", "namespace", NAMESPACE)
        return self

    def _stand_ins(self, certs: Path) -> None:
        """The stand-in servers this run needs, and their registrations."""
        from harness.gobuild import built
        from harness.hami import TlsProgram
        from harness.install import WEBHOOK_KINDS
        from harness.servers import free_port

        urls = {}
        if "floor" in self.stand_ins:
            bin_dir = _component("the floor stand-in build", lambda: built(
                ROOT / "bench/floor/build.sh", "the floor stand-in"))
            floor = self.floor = TlsProgram(certs / "tls.crt", certs / "tls.key",
                                            self.tmp / "floor.log")
            _component("the floor stand-in", lambda: floor.launch(
                [str(bin_dir / "floor"), "--bind", f"127.0.0.1:{floor.port}",
                 "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
                 "--mark", STAND_IN_ANNOTATION]))
            urls["floor"] = f"https://127.0.0.1:{floor.port}"
        if "baseline" in self.stand_ins:
            port = free_port()
            urls["baseline"] = f"https://127.0.0.1:{port}"
            for i in range(2):
                self.baselines.append(_component(
                    f"baseline replica {i + 1}",
                    lambda i=i: serve_baseline(port, certs, self.tmp / f"baseline-{i}.log")))
        registered = {"gpupool": [o for o in self.objs if o["kind"] in WEBHOOK_KINDS],
                      "hami": [self.hami_cfg]}
        self.stand_in_cfgs = {
            config: [stand_in(o, urls[server], DOMAINS[like], server) for o in registered[like]]
            for config, (server, like) in STAND_INS.items() if server in urls}

    def _nodes(self) -> None:
        from harness import install
        from harness.layouts import fake_driver, hami_register, per_uuid_spec, write_layout

        driver = fake_driver(self.tmp / "driver")
        fixed = write_layout(self.tmp / "layouts/fixed", "operator-management")
        (fixed["run"] / "management.nvidia.com-gpu-uuid.yaml").write_text(per_uuid_spec())
        plugin = write_layout(self.tmp / "layouts/plugin", "device-plugin")
        status = {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110",
                               "nvidia.com/gpu": "8"}}
        status["allocatable"] = status["capacity"]
        for i in range(4):
            for name, labels, ann, layout in (
                    (f"hami-{i}", {"gpupool.io/pool": "hami", "gpu": "on"},
                     {"hami.io/node-nvidia-register": hami_register()}, fixed),
                    (f"op-{i}", {}, {}, plugin)):
                node = {"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": name, "annotations": ann,
                    "labels": {**labels, "nvidia.com/gpu.present": "true",
                               "type": "kwok"}}}
                self.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(node))
                self.cp.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                                "-p", json.dumps({"status": status}))
                install.agent(self.cp, name, {**layout, "driver": driver})

    def _replica(self, port: int, i: int) -> subprocess.Popen[bytes]:
        """One gpupool replica as the Deployment runs it, sharing the port with the other."""
        from harness.install import webhook_token_kubeconfig
        from harness.servers import wait_ready

        kubeconfig = webhook_token_kubeconfig(self.cp, self.tmp / "webhook.kubeconfig")
        certs = self.tmp / "certs"
        cfg = {"bind": f"127.0.0.1:{port}", "certfile": str(certs / "tls.crt"),
               "keyfile": str(certs / "tls.key"), "kubeconfig": str(kubeconfig),
               "workers": 2, "audit_stdout": False, "loglevel": "warning",
               "audit_file": str(self.tmp / f"audit-{i}.log"), "extra": {"reuse_port": True}}
        log = self.tmp / f"gpupool-{i}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import json, sys\n"
                 "from webhook.server.config import ServeConfig\n"
                 "from webhook.server.runner import serve\n"
                 "serve(ServeConfig(**json.loads(sys.argv[1])))", json.dumps(cfg)],
                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
        wait_ready(proc, self.url, str(certs / "ca.crt"), log)
        return proc

    # ------------------------------------------------------------------ configurations
    def use(self, config: str) -> None:
        """Register what ``config`` needs, remove the rest, and wait until the API server
        applies it (a server-side dry run shows the expected mutation)."""
        from harness import install

        kinds = {"gpupool": install.WEBHOOK_KINDS, "gpupool+hami": install.WEBHOOK_KINDS,
                 MUTATING_ONLY: ("MutatingWebhookConfiguration",),
                 POLICY: install.WEBHOOK_KINDS}.get(config, ())
        install.register(self.cp, [o for o in self.objs if o["kind"] in kinds],
                         self.url)
        self._routing_policy(config == POLICY)
        unused = [o for o in self.objs if o["kind"] in install.WEBHOOK_KINDS
                  and o["kind"] not in kinds]
        if config in ("hami", "gpupool+hami"):
            install.apply(self.cp, self.hami_cfg)
        else:
            unused.append(self.hami_cfg)
        for name, cfgs in self.stand_in_cfgs.items():
            if name == config:
                install.apply(self.cp, cfgs)
            else:
                unused += cfgs
        for cfg in unused:
            self.cp.kubectl("delete", cfg["kind"], cfg["metadata"]["name"], "--ignore-not-found")
        # A whole GPU labelled for HAMi's pool: every webhook registered is called for it,
        # and each leaves its mark. HAMi's webhook sends it to hami-scheduler and gives it
        # exclusive cores, gpupool routes it there too and annotates it, the stand-in
        # annotates it.
        probe = pod("probe", "operator")
        probe["metadata"]["labels"]["gpupool.io/pool"] = "hami"
        calls = CALLS[config]
        want = (bool(calls & {"mutate.gpupool.io", "vgpu.hami.io"}), "vgpu.hami.io" in calls,
                "mutate.gpupool.io" in calls, config in STAND_INS)
        if config == POLICY:  # routed and annotated in the API server, no mutating call
            want = (True, False, True, False)

        def applied() -> bool:
            before = self.cp.metrics()
            r = install.apply(self.cp, probe, "--dry-run=server", "-o", "json")
            if r.returncode != 0:
                return False
            called = set(webhook_calls(before, self.cp.metrics()))
            out = json.loads(r.stdout)
            limits = out["spec"]["containers"][0]["resources"]["limits"]
            annotations = out["metadata"].get("annotations") or {}
            return called == calls and (out["spec"].get("schedulerName") == "hami-scheduler",
                                        "nvidia.com/gpucores" in limits,
                                        "gpupool.io/pool" in annotations,
                                        STAND_IN_ANNOTATION in annotations) == want
        install.wait_until(applied, f"configuration {config} to take effect", timeout=60)

    def _routing_policy(self, on: bool) -> None:
        """The compiled policy and the webhook's condition installed (as the server installs
        them: ``gpupool policy compile`` of this cluster), or neither."""
        name = "gpupool-mutating"
        cfg = json.loads(self.cp.kubectl("get", "mutatingwebhookconfiguration", name, "-o",
                                         "json", check=False).stdout or "null")
        index = next((i for i, w in enumerate((cfg or {}).get("webhooks") or [])
                      if w["name"] == "mutate.gpupool.io"), None)
        gpupool = [sys.executable, "-m", "webhook", "policy", "compile", "--kubeconfig",
                   str(self.cp.kubeconfig)]
        cond: dict[str, str] = {}
        if on:
            compiled = subprocess.run(gpupool, capture_output=True, text=True, check=True)
            r = self.cp.kubectl("apply", "-f", "-", input=compiled.stdout, check=False)
            if r.returncode:
                raise StartError(f"the compiled routing policy: {r.stderr.strip()}")
            cond = json.loads(subprocess.run([*gpupool, "--webhook-condition"],
                                             capture_output=True, text=True,
                                             check=True).stdout)
        else:
            for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
                self.cp.kubectl("delete", kind, "gpupool-routing", "--ignore-not-found")
        if cfg is None or index is None:
            return
        kept = [c for c in cfg["webhooks"][index].get("matchConditions") or []
                if c["name"] != "not-routed-by-policy"]
        self.cp.kubectl("patch", "mutatingwebhookconfiguration", name, "--type=json", "-p",
                        json.dumps([{"op": "add", "path": f"/webhooks/{index}/matchConditions",
                                     "value": kept + ([cond] if on else [])}]))

    # ------------------------------------------------------------------ load
    def session(self) -> requests.Session:
        pki = self.cp.root / "pki"
        s = requests.Session()
        s.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
        s.trust_env = False  # a CA bundle from the environment would override the cluster's
        s.verify = str(pki / "ca.crt")
        return s

    def create(self, pods: list[dict[str, Any]], writers: int
               ) -> tuple[list[float], list[str], float]:
        base = f"https://127.0.0.1:{self.cp.port}/api/v1/namespaces/{NAMESPACE}/pods"
        local = threading.local()

        def one(p: dict[str, Any]) -> tuple[float, str]:
            s = getattr(local, "s", None) or self.session()
            local.s = s
            t0 = time.perf_counter()
            try:
                r = s.post(base, json=p, timeout=30)
                err = "" if r.status_code == 201 else f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as exc:
                err = f"{type(exc).__name__}: {exc}"
            return time.perf_counter() - t0, err

        t0 = time.perf_counter()
        with ThreadPoolExecutor(writers) as pool:
            results = list(pool.map(one, pods))
        wall = time.perf_counter() - t0
        return [r[0] for r in results], [r[1] for r in results if r[1]], wall

    def clear(self) -> None:
        """Remove the batch's pods. They were never scheduled, so a forced delete is
        immediate; one list confirms it (kubectl's --wait polls each pod, a minute a batch)."""
        from harness import install

        self.cp.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--grace-period=0",
                        "--force", "--wait=false")
        install.wait_until(lambda: not self.cp.kubectl(
            "get", "pods", "-n", NAMESPACE, "-o", "name").stdout.strip(),
            "the batch's pods to be deleted", timeout=120)

    # ------------------------------------------------------------------ accounting
    def roots(self) -> dict[int, str]:
        """The processes this rig started, by component; their children count as theirs."""
        out = {p.pid: Path(p.args[0]).name for p in self.cp.procs}
        out.update({p.pid: "gpupool" for p in self.replicas})
        if self.hami.proc is not None:
            out[self.hami.proc.pid] = "hami"
        if self.floor is not None and self.floor.proc is not None:
            out[self.floor.proc.pid] = "floor"
        out.update({p.pid: "baseline" for p in self.baselines})
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds each component has used so far (this process: the load generator)."""
        return cpu_seconds(self.roots())

    def place(self, placement: str) -> None:
        """``shared``: every process may run on every core. ``split``: the webhooks on the
        last core, everything else (control plane, load generator) on the others."""
        cores = sorted(os.sched_getaffinity(0) | self.cores)
        self.cores = set(cores)
        webhooks = {pid for pid, name in self.roots().items() if name in DOMAINS}
        for pid, root in owners(self.roots()).items():
            if placement == "shared":
                want = set(cores)
            else:
                want = {cores[-1]} if root in webhooks else set(cores[:-1])
            pin(pid, want)

    # ------------------------------------------------------------------ stop
    def stop(self) -> list[str]:
        """Stop everything; returns the command lines of any process still alive after."""
        from harness.servers import stop_group

        for p in [*self.replicas, *self.baselines]:
            stop_group(p)
        if getattr(self, "hami", None):
            self.hami.stop()
        if self.floor is not None:
            self.floor.stop()
        if getattr(self, "cp", None):
            self.cp.stop()
        return leftovers(str(self.tmp))


def serve_baseline(port: int, certs: Path, log: Path, workers: int = 2) -> subprocess.Popen[bytes]:
    """One replica of bench/baseline.py as a stand-in: gpupool's serving stack, started as
    gpupool's replicas are (sharing ``port``), its mutation adding STAND_IN_ANNOTATION."""
    from bench.servers import server_cmd, start

    return start(server_cmd("baseline", port, certs, "--workers", str(workers), "--mark",
                            STAND_IN_ANNOTATION, "--reuse-port"),
                 f"https://127.0.0.1:{port}", str(certs / "ca.crt"), log, cwd=ROOT)


def stand_in(cfg: dict[str, Any], url: str, domain: str, server: str) -> dict[str, Any]:
    """``cfg`` (a webhook configuration) registered for the stand-in ``server`` at ``url``:
    the same rules, selectors, matchConditions, policies and paths, its own object name, and
    webhook names ending in the stand-in's domain instead of ``domain``."""
    out = copy.deepcopy(cfg)
    out["metadata"] = {"name": f"{server}-{cfg['metadata']['name']}"}
    for wh in out["webhooks"]:
        wh["name"] = wh["name"].removesuffix(domain) + stand_in_domain(server)
        client = wh["clientConfig"]
        service = client.pop("service", None)
        path = service["path"] if service else urlsplit(client["url"]).path
        client["url"] = url + path
    return out


#: the webhooks the API server calls for a GPU pod in each configuration
CALLS: dict[str, set[str]] = {
    "none": set(), "hami": {"vgpu.hami.io"},
    "gpupool": {"mutate.gpupool.io", "validate-pods.gpupool.io"},
    "gpupool+hami": {"mutate.gpupool.io", "validate-pods.gpupool.io", "vgpu.hami.io"},
    MUTATING_ONLY: {"mutate.gpupool.io"},
    POLICY: {"validate-pods.gpupool.io"},
}
CALLS.update({config: {name.removesuffix(DOMAINS[like]) + stand_in_domain(server)
                       for name in CALLS[like]}
              for config, (server, like) in STAND_INS.items()})


def overlay(suite: Path, mine: Path, into: Path) -> Path:
    """The suite's control plane programs with those found in ``mine`` in their place (another
    Kubernetes release's kube-apiserver, say), as links in ``into``."""
    if not mine.is_dir():
        raise FileNotFoundError(f"{mine}: no such directory")
    into.mkdir(parents=True, exist_ok=True)
    for prog in sorted(suite.iterdir()):
        (into / prog.name).symlink_to((mine / prog.name) if (mine / prog.name).exists()
                                      else prog)
    return into


def version(program: Path) -> str:
    """What a Kubernetes program says it is (``--version``), for the results."""
    r = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=30)
    return (r.stdout or r.stderr).strip()


def leftovers(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (this run's directory)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(f"{entry.name}: {cmd[:200]}")
    return out


def owners(roots: dict[int, str]) -> dict[int, int]:
    """Every live process under ``roots`` (and this one), mapped to its root: the rig's
    programs fork (gunicorn's workers) and spawn threads, all billed to what started them."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int(stat_fields(entry.name)[1])
            except (OSError, IndexError, ValueError):
                continue
    out: dict[int, int] = {}
    for pid in parent:
        p = pid
        while p not in roots and p != os.getpid() and p in parent and p > 1:
            p = parent[p]
        if p in roots or p == os.getpid():
            out[pid] = p
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(roots: dict[int, str]) -> dict[str, float]:
    """User and system CPU so far per component; "load generator" is this process."""
    totals: dict[str, float] = {}
    for pid, root in owners(roots).items():
        name = roots.get(root, "load generator")
        try:
            fields = stat_fields(pid)
        except OSError:  # gone since the listing
            continue
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    return totals


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of ``pid`` onto ``cores`` (threads it starts later inherit it)."""
    try:
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            continue


def accepted_connections() -> int:
    """TCP connections this machine has accepted so far (/proc/net/snmp's PassiveOpens)."""
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()
             if ln.startswith("Tcp:")]
    return int(lines[1][lines[0].index("PassiveOpens")])


def pod(name: str, kind: str) -> dict[str, Any]:
    limits = {"hami": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000},
              "operator": {"nvidia.com/gpu": 1}, "plain": {"cpu": "100m"}}[kind]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"load": kind}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": limits}}]}}


def batch(n: int) -> list[dict[str, Any]]:
    tag = uuid.uuid4().hex[:6]
    kinds = ("hami", "operator", "plain")
    return [pod(f"p-{tag}-{i}", kinds[i % 3]) for i in range(n)]


# ---------------------------------------------------------------------- API server metrics

_BUCKET = re.compile(r'^(\w+)_bucket\{(.*)\} (\S+)$', re.M)


def buckets(text: str, metric: str, match: dict[str, str]) -> dict[str, dict[float, float]]:
    """Cumulative buckets of ``metric`` by webhook name (or "" when the series has none),
    for series whose labels include ``match``."""
    out: dict[str, dict[float, float]] = {}
    for name, labels, value in _BUCKET.findall(text):
        if name != metric:
            continue
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if any(lab.get(k) != v for k, v in match.items()):
            continue
        le = math.inf if lab["le"] == "+Inf" else float(lab["le"])
        series = out.setdefault(lab.get("name", ""), {})
        series[le] = series.get(le, 0.0) + float(value)
    return out


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The q-quantile of what was observed between two scrapes, interpolated within its
    bucket as Prometheus' histogram_quantile does; None when nothing was observed."""
    edges = sorted(after)
    counts = [after[e] - before.get(e, 0.0) for e in edges]
    total = counts[-1] if counts else 0
    if total <= 0:
        return None
    rank = q * total
    prev_edge, prev_count = 0.0, 0.0
    for edge, count in zip(edges, counts, strict=True):
        if count >= rank:
            if math.isinf(edge):
                return prev_edge
            span = count - prev_count
            return prev_edge + (edge - prev_edge) * ((rank - prev_count) / span if span else 1)
        prev_edge, prev_count = edge, count
    return prev_edge


WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST_METRIC = "apiserver_request_duration_seconds"
#: the pod creates among the API server's requests
POD_CREATES = {"verb": "POST", "resource": "pods", "subresource": ""}


def server_view(before: str, after: str) -> dict[str, Any]:
    """p99 per webhook (admission duration) and of the pod create requests themselves."""
    out: dict[str, Any] = {}
    b = buckets(before, WEBHOOK_METRIC, {"operation": "CREATE"})
    for name, series in buckets(after, WEBHOOK_METRIC, {"operation": "CREATE"}).items():
        p99 = quantile(b.get(name, {}), series, 0.99)
        if p99 is not None:
            out[f"webhook {name} p99 ms"] = round(p99 * 1000, 2)
    p99 = quantile(buckets(before, REQUEST_METRIC, POD_CREATES).get("", {}),
                   buckets(after, REQUEST_METRIC, POD_CREATES).get("", {}), 0.99)
    out["create p99 ms"] = round(p99 * 1000, 2) if p99 is not None else None
    return out


def observed(before: str, after: str, metric: str, match: dict[str, str]) -> dict[str, int]:
    """How many observations ``metric`` gained between two scrapes, by webhook name ("" for
    series without one), where it gained any."""
    b = buckets(before, metric, match)
    return {name: round(series[math.inf] - b.get(name, {}).get(math.inf, 0.0))
            for name, series in buckets(after, metric, match).items()
            if series[math.inf] > b.get(name, {}).get(math.inf, 0.0)}


def webhook_calls(before: str, after: str) -> dict[str, int]:
    """Calls the API server made to each webhook between two scrapes (pod creates)."""
    return observed(before, after, WEBHOOK_METRIC, {"operation": "CREATE"})


#: whose webhooks are whose, by the suffix of the webhook's name
WEBHOOK_OWNERS = tuple(DOMAINS.items())


# ---------------------------------------------------------------------- the scenario

def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


#: the full scenario, a short smoke of it, and the decomposition by calls (``--calls``)
PLANS: dict[str, dict[str, Any]] = {
    "full": {"writers": (10, 50, 200), "pods": 300, "rounds": 5, "burst": 1000,
             "burst_writers": 64},
    "quick": {"writers": (10,), "pods": 60, "rounds": 1, "burst": 200, "burst_writers": 64},
    "calls": {"writers": (10, 50, 200), "pods": 300, "rounds": 5, "burst": 0,
              "burst_writers": 0,
              "configs": ("none", "hami", "gpupool", MUTATING_ONLY, *STAND_INS),
              "placements": ("shared",)},
    "routing": {"writers": (10, 50, 200), "pods": 300, "rounds": 3, "burst": 0,
                "burst_writers": 0, "configs": ("none", "gpupool", POLICY),
                "placements": ("shared",)},
}


def run(tmp: Path, *, writers: tuple[int, ...], pods: int, rounds: int, burst: int,
        burst_writers: int, configs: tuple[str, ...] = CONFIGS,
        placements: tuple[str, ...] = PLACEMENTS, profiles: Path | None = None,
        kube_bin: Path | None = None) -> dict[str, Any]:
    rig = Rig(tmp, profiling=profiles is not None, kube_bin=kube_bin,
              stand_ins=frozenset(STAND_INS[c][0] for c in configs if c in STAND_INS))
    if len(os.sched_getaffinity(0)) == 1:
        placements = ("shared",)
    res: dict[str, Any] = {"machine": machine.describe(),
                           "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                           "pods_per_batch": pods, "rounds": rounds, "placements": {}}
    try:
        rig.start()
        res["kube_apiserver"] = version(rig.cp.bin / "kube-apiserver")
        # Unrecorded: every gpupool worker past its imports and first review, every webhook's
        # connections open, before any batch is counted.
        for config in configs:
            rig.use(config)
            rig.create(batch(60), writers[0])
            rig.clear()
        raw: dict[str, dict[int, dict[str, list[dict[str, Any]]]]] = {
            pl: {n: {c: [] for c in configs} for n in writers} for pl in placements}
        for n in writers:
            for _ in range(rounds):
                for placement in placements:
                    for config in configs:
                        rig.use(config)
                        rig.place(placement)
                        raw[placement][n][config].append(measure(rig, batch(pods), n))
                        rig.clear()
        res["rounds_measured"] = {pl: {str(n): v for n, v in by_n.items()}
                                  for pl, by_n in raw.items()}
        for placement in placements:
            res["placements"][placement] = {str(n): summarise(raw[placement][n])
                                            for n in writers}
        if profiles is not None:
            res["apiserver_profiles"] = {
                c: profile_apiserver(rig, c, writers[len(writers) // 2], 20, profiles,
                                     placements[0])
                for c in configs}
        if burst:
            rig.use("gpupool+hami")
            rig.place("shared")
            m = measure(rig, batch(burst), burst_writers)
            res["burst"] = {"pods": burst, "writers": burst_writers,
                            "client_p99_ms": m["p99_ms"],
                            "timed_out": sum("Timeout" in e for e in m["errors"]), **m}
            rig.clear()
    finally:
        res["leftover_processes"] = rig.stop()
    return res


def measure(rig: Rig, pods: list[dict[str, Any]], writers: int) -> dict[str, Any]:
    """One batch: the client's latencies and rate, the API server's histograms, and what
    each component spent on it."""
    cpu0, conns0, before = rig.cpu(), accepted_connections(), rig.cp.metrics()
    lat, errors, wall = rig.create(pods, writers)
    cpu1, conns1, after = rig.cpu(), accepted_connections(), rig.cp.metrics()
    calls = webhook_calls(before, after)
    per_call = {}
    for owner, suffix in WEBHOOK_OWNERS:
        n = sum(v for name, v in calls.items() if name.endswith(suffix))
        if n:
            per_call[owner] = 1000 * (cpu1.get(owner, 0.0) - cpu0.get(owner, 0.0)) / n
    return {"p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99), "rate": len(lat) / wall,
            "answered": len(lat), "seconds": wall, "failed": len(errors), "errors": errors[:3],
            "cpu_ms_per_pod": {k: 1000 * (cpu1[k] - cpu0.get(k, 0.0)) / len(pods)
                               for k in sorted(cpu1)},
            # the API server's own scrapes and the load generator's sessions are kept alive
            "connections_per_pod": (conns1 - conns0) / len(pods),
            "webhook_calls": calls, "cpu_ms_per_call": per_call,
            # what a GPU pod costs: the calls of the webhooks that see GPU pods (all but the
            # grant check on pods without a GPU), per GPU pod sent
            "gpu_calls_per_gpu_pod": sum(v for name, v in calls.items()
                                         if not name.startswith("access."))
            / max(1, sum(1 for p in pods if p["metadata"]["labels"]["load"] != "plain")),
            **server_view(before, after)}


#: where the API server's CPU goes: each part is one function's cumulative time in its profile
PROFILE_PARTS = (
    ("matchConditions", "matchconditions.(*matcher).Match"),
    ("mutating calls", "mutating.(*mutatingDispatcher).callAttrMutatingHook"),
    ("validating calls", "validating.(*validatingDispatcher).callHook"),
    ("TLS handshakes", "crypto/tls.(*Conn).HandshakeContext"),
)
#: a row of ``go tool pprof -top -unit=ms``: flat, flat%, sum%, cum, cum%, function
_PPROF_ROW = re.compile(r"^\s*\S+\s+\S+\s+\S+\s+([\d.]+)ms\s+\S+\s+(.+?)(?: \(inline\))?$", re.M)


def pprof_parts(top: str) -> tuple[float, dict[str, float]]:
    """The profile's total and each of PROFILE_PARTS in ms, from ``go tool pprof -top -cum
    -unit=ms`` (a function inlined at some call sites has a row of each kind: both count)."""
    total = re.search(r"Total samples = ([\d.]+)ms", top)
    cum: dict[str, float] = {}
    for ms, fn in _PPROF_ROW.findall(top):
        cum[fn] = cum.get(fn, 0.0) + float(ms)
    return (float(total.group(1)) if total else 0.0,
            {name: sum(v for fn, v in cum.items() if fn.endswith(suffix))
             for name, suffix in PROFILE_PARTS})


def profile_apiserver(rig: Rig, config: str, writers: int, seconds: int,
                      out_dir: Path, placement: str = "shared") -> dict[str, Any]:
    """A CPU profile of the API server while ``config`` takes batches of creates (and the
    deletions between them) in ``placement``, kept as ``apiserver-<config>.pb.gz`` and summed
    up per created pod with ``go tool pprof``."""
    rig.use(config)
    rig.place(placement)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            rig.create(batch(300), writers)
            rig.clear()

    loader = threading.Thread(target=load)
    loader.start()
    try:
        time.sleep(2)
        before = rig.cp.metrics()
        r = rig.session().get(f"https://127.0.0.1:{rig.cp.port}/debug/pprof/profile",
                              params={"seconds": seconds}, timeout=seconds + 60)
        after = rig.cp.metrics()
    finally:
        stop.set()
        loader.join()
    r.raise_for_status()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"apiserver-{config}.pb.gz"
    path.write_bytes(r.content)
    pods = observed(before, after, REQUEST_METRIC, POD_CREATES).get("", 0)
    if pods <= 0:
        raise RuntimeError(f"no pod was created while the API server was profiled ({config})")
    top = subprocess.run(["go", "tool", "pprof", "-top", "-cum", "-unit=ms", "-nodefraction=0",
                          str(path)], capture_output=True, text=True, check=True).stdout
    total, parts = pprof_parts(top)
    return {"writers": writers, "seconds": seconds, "pods": pods, "profile": path.name,
            "cpu_ms_per_pod": {"all": total / pods, **{k: v / pods for k, v in parts.items()}}}


def summarise(raw: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for config, runs in raw.items():
        row: dict[str, Any] = {
            "p50_ms": statistics.median(r["p50_ms"] for r in runs),
            "p99_ms": statistics.median(r["p99_ms"] for r in runs),
            "creates_per_s": statistics.median(r["rate"] for r in runs),
            "failed": sum(r["failed"] for r in runs),
            "errors": [e for r in runs for e in r["errors"]][:3],
            "server": {k: round(statistics.median(r[k] for r in runs if r.get(k) is not None), 2)
                       for k in {k for r in runs for k in r if k.endswith(" p99 ms")}
                       if any(r.get(k) is not None for r in runs)},
            "cpu_ms_per_pod": {k: statistics.median(r["cpu_ms_per_pod"].get(k, 0.0)
                                                    for r in runs)
                               for k in sorted({k for r in runs for k in r["cpu_ms_per_pod"]})},
            "connections_per_pod": statistics.median(r["connections_per_pod"] for r in runs),
            "calls_per_pod": statistics.median(sum(r["webhook_calls"].values()) / r["answered"]
                                               for r in runs),
            "gpu_calls_per_gpu_pod": statistics.median(r.get("gpu_calls_per_gpu_pod", 0.0)
                                                       for r in runs),
            "cpu_ms_per_call": {k: statistics.median(r["cpu_ms_per_call"][k] for r in runs
                                                     if k in r["cpu_ms_per_call"])
                                for k in sorted({k for r in runs for k in r["cpu_ms_per_call"]})}}
        for base in ("none", "hami", "gpupool"):
            if base in raw:  # (a plan runs some configurations only)
                row[f"p99_vs_{base}"] = statistics.median(
                    a["p99_ms"] / b["p99_ms"] for a, b in zip(runs, raw[base], strict=True))
        out[config] = row
    return out


#: components in the CPU columns, in order; the rest (kwok, the controller-manager) is in "all"
CPU_COLUMNS = (("kube-apiserver", "API server"), ("etcd", "etcd"), ("gpupool", "gpupool"),
               ("hami", "HAMi"), ("floor", "floor"), ("baseline", "baseline"),
               ("load generator", "generator"))


def report(res: dict[str, Any]) -> str:
    lines = [f"Pod creations through a real API server "
             f"({res.get('kube_apiserver', 'kube-apiserver')}; {machine.line(res['machine'])}; "
             f"{res['when']}; "
             f"{res['pods_per_batch']} pods per batch, median of {res['rounds']} interleaved "
             "rounds)"]
    for placement, levels in res["placements"].items():
        lines += ["", f"placement: {placement}",
                  f"{'writers':>7} {'configuration':<16} {'p50 ms':>7} {'p99 ms':>7} "
                  f"{'creates/s':>9} {'p99/none':>8} {'p99/HAMi':>8} {'p99/gpupool':>11} "
                  f"{'calls/GPU pod':>13} {'failed':>6}  API server"]

        def ratio(r: dict[str, Any], base: str, width: int) -> str:
            v = r.get(f"p99_vs_{base}")
            return f"{v:>{width}.2f}" if v is not None else f"{'-':>{width}}"
        for n, level in levels.items():
            for config, r in level.items():
                server = ", ".join(f"{k} {v}" for k, v in sorted(r["server"].items()))
                lines.append(f"{n:>7} {config:<16} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} "
                             f"{r['creates_per_s']:>9.1f} {ratio(r, 'none', 8)} "
                             f"{ratio(r, 'hami', 8)} {ratio(r, 'gpupool', 11)} "
                             f"{r.get('gpu_calls_per_gpu_pod', 0.0):>13.2f} "
                             f"{r['failed']:>6}  {server}")
        rows = [r for level in levels.values() for r in level.values()]
        # the stand-ins' columns only where a configuration ran them
        columns = [(k, t) for k, t in CPU_COLUMNS if k not in STAND_IN_SERVERS
                   or any(k in r["cpu_ms_per_call"] for r in rows)]
        owners = [(k, f"{t}/call") for k, t in columns if k in DOMAINS]
        lines += ["CPU ms per created pod; webhook calls and TCP connections accepted per pod; "
                  "CPU ms per call of each webhook server",
                  f"{'writers':>7} {'configuration':<16} "
                  + " ".join(f"{title:>10}" for _, title in columns)
                  + f" {'all':>6} {'calls':>6} {'conns':>6} "
                  + " ".join(f"{title:>13}" for _, title in owners)]
        for n, level in levels.items():
            for config, r in level.items():
                cpu = r["cpu_ms_per_pod"]
                lines.append(f"{n:>7} {config:<16} "
                             + " ".join(f"{cpu.get(k, 0.0):>10.2f}" for k, _ in columns)
                             + f" {sum(cpu.values()):>6.2f} {r['calls_per_pod']:>6.2f} "
                             f"{r['connections_per_pod']:>6.2f} "
                             + " ".join(f"{r['cpu_ms_per_call'][k]:>13.2f}"
                                        if k in r["cpu_ms_per_call"] else f"{'-':>13}"
                                        for k, _ in owners))
    profiles = res.get("apiserver_profiles")
    if profiles:
        first = next(iter(profiles.values()))
        lines += ["", f"API server CPU ms per created pod, from its CPU profile over "
                      f"{first['seconds']} s at {first['writers']} writers (deletions between "
                      "batches included)",
                  f"{'configuration':<16} {'pods':>6} {'all':>6} "
                  + " ".join(f"{name:>16}" for name, _ in PROFILE_PARTS)]
        for config, r in profiles.items():
            cpu = r["cpu_ms_per_pod"]
            lines.append(f"{config:<16} {r['pods']:>6} {cpu['all']:>6.2f} "
                         + " ".join(f"{cpu[name]:>16.3f}" for name, _ in PROFILE_PARTS))
    b = res.get("burst")
    if b:
        lines.append(f"burst: {b['pods']} pods from {b['writers']} writers, gpupool in front of "
                     f"HAMi: {b['answered']} answered, {b['failed']} failed, {b['timed_out']} "
                     f"timed out, {b['seconds']:.1f} s; client p99 {b['client_p99_ms']:.0f} ms; "
                     f"API server create p99 {b.get('create p99 ms')} ms")
    lines.append(f"processes left behind: {len(res['leftover_processes'])}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.e2e_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true",
                       help="one round of 60 pods at 10 writers, a 200-pod burst (a smoke run)")
    which.add_argument("--calls", action="store_true",
                       help=f"the decomposition instead: none, hami, gpupool, {MUTATING_ONLY} "
                            "(gpupool without its validating call) and the stand-ins "
                            f"({', '.join(STAND_INS)}), on shared cores unless --placement split")
    which.add_argument("--routing", action="store_true",
                       help=f"none, gpupool and {POLICY} (routing in the API server) alone: "
                            "calls per GPU pod and latency, on shared cores")
    p.add_argument("--placement", choices=PLACEMENTS,
                   help="with --calls: where the processes run (default: shared); split puts "
                        "every webhook, stand-ins included, on a core of its own")
    p.add_argument("--apiserver-profiles", metavar="DIR", type=Path,
                   help="also keep a 20-second CPU profile of the API server per configuration "
                        "here (at the middle number of writers) and report where its CPU goes")
    p.add_argument("--kube-bin", metavar="DIR", type=Path,
                   help="run the Kubernetes programs found here (another release's "
                        "kube-apiserver, say) in place of the suite's build")
    p.add_argument("--writers", metavar="N[,N...]",
                   help="the numbers of concurrent writers to measure, in place of the plan's "
                        "(10,50,200): 1 is sequential creates, where the API server's CPU per "
                        "pod is least disturbed by the rest of the machine")
    p.add_argument("--rounds", type=int, metavar="N",
                   help="rounds per number of writers (default: 5; 1 with --quick): single "
                        "rounds here move by tens of percent, and every ratio is a median of "
                        "the rounds' own")
    p.add_argument("--out", help="where the JSON results go (default: "
                                 "bench/results/e2e-load.json; e2e-load-quick.json with "
                                 "--quick, e2e-load-calls.json with --calls)")
    a = p.parse_args()
    if a.apiserver_profiles and shutil.which("go") is None:
        print("e2e load: --apiserver-profiles reads the profiles with `go tool pprof`: put go "
              "on PATH or leave the option out", file=sys.stderr)
        return 2
    plan = "quick" if a.quick else "calls" if a.calls else "routing" if a.routing else "full"
    if a.placement and not a.calls:
        print("e2e load: --placement chooses the decomposition's placement: add --calls (the "
              "full scenario runs both)", file=sys.stderr)
        return 2
    if a.rounds is not None and a.rounds < 1:
        print(f"e2e load: --rounds {a.rounds}: give at least 1", file=sys.stderr)
        return 2
    try:
        writers = tuple(int(n) for n in a.writers.split(",")) if a.writers else None
    except ValueError:
        writers = ()
    if writers is not None and (not writers or min(writers) < 1):
        print(f"e2e load: --writers {a.writers}: give whole numbers of 1 or more, comma "
              "separated (--writers 1,10)", file=sys.stderr)
        return 2
    a.out = a.out or str(ROOT / "bench/results" / {
        "quick": "e2e-load-quick.json", "calls": "e2e-load-calls.json",
        "routing": "e2e-load-routing.json", "full": "e2e-load.json"}[plan])
    # A stopped run still stops what it started: SIGTERM unwinds through run()'s cleanup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="gpupool-e2e-load-") as tmp:
        try:
            placements = {"placements": (a.placement,)} if a.placement else {}
            res = run(Path(tmp), **{**PLANS[plan], "rounds": a.rounds or PLANS[plan]["rounds"],
                                    **placements, **({"writers": writers} if writers else {})},
                      profiles=a.apiserver_profiles,
                      kube_bin=a.kube_bin)
        except StartError as exc:
            print(f"e2e load: {exc}", file=sys.stderr)
            return 2
    publish(res, a.out, "bench.e2e_load", report)
    if res["leftover_processes"]:
        print("e2e load: processes left behind:\n" + "\n".join(res["leftover_processes"]),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
