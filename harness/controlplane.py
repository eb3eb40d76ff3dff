"""A real kube-apiserver (with embedded etcd) and kubectl on loopback, for tests.

The binaries are built from the official Kubernetes Go modules by
tests/e2e/controlplane/build.sh and cached outside the tree. Without Go the end-to-end layer
is skipped loudly; under CI=true a missing toolchain or a failed build fails the run.

The end-to-end layer runs on the current release (``CURRENT``); ``GPUPOOL_KUBE_RELEASE``
runs it on another the build script knows (the oldest kept, ``OLDEST``, for the tests whose
behaviour depends on the release).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from harness.gobuild import built
from harness.kit import ROOT
from harness.servers import free_port

BUILD = ROOT / "tests" / "e2e" / "controlplane" / "build.sh"
#: the release the end-to-end layer runs on, and the oldest it keeps
CURRENT, OLDEST = "1.37", "1.35"


def release() -> str:
    """The Kubernetes release this run's control plane is of."""
    return os.environ.get("GPUPOOL_KUBE_RELEASE") or CURRENT


def binaries() -> Path:
    """The directory holding kube-apiserver, kubectl and etcd of ``release()``; builds them
    on first use."""
    return built(BUILD, f"the end-to-end layer (Kubernetes {release()})", release())


def _pem_key(key: Any) -> bytes:
    pem: bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    return pem


def _cert(subject: x509.Name, key: Any, issuer_cert: Any, issuer_key: Any, *, ca: bool = False,
          client: bool = False, ips: Sequence[str] = (), dns: Sequence[str] = ()
          ) -> x509.Certificate:
    import ipaddress

    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer_cert.subject if issuer_cert else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    sans = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips] + [x509.DNSName(d) for d in dns]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key or key, hashes.SHA256())


@dataclass
class ControlPlane:
    root: Path
    bin: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    port: int = 0
    kubeconfig: Path = Path()
    audit_log: Path = Path()
    tokens: dict[str, str] = field(default_factory=dict)
    #: --feature-gates for the API server, schedulers and controller manager alike ("" none)
    feature_gates: str = ""
    #: serve /debug/pprof on the API server (bench/e2e_load.py's --apiserver-profiles)
    profiling: bool = False

    def _gates(self) -> list[str]:
        return [f"--feature-gates={self.feature_gates}"] if self.feature_gates else []

    def start(self) -> ControlPlane:
        pki = self.root / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "e2e-ca")]), ca_key,
                   None, None, ca=True)
        srv_key = ec.generate_private_key(ec.SECP256R1())
        srv = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                    srv_key, ca, ca_key, ips=["127.0.0.1", "10.0.0.1"],
                    dns=["localhost", "kubernetes", "kubernetes.default.svc"])
        adm_key = ec.generate_private_key(ec.SECP256R1())
        adm = _cert(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                               x509.NameAttribute(NameOID.COMMON_NAME, "e2e-admin")]),
                    adm_key, ca, ca_key, client=True)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM),
                 "server.crt": srv.public_bytes(serialization.Encoding.PEM),
                 "server.key": _pem_key(srv_key),
                 "admin.crt": adm.public_bytes(serialization.Encoding.PEM),
                 "admin.key": _pem_key(adm_key), "sa.key": _pem_key(sa_key),
                 "sa.pub": sa_key.public_key().public_bytes(
                     serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)}
        for name, data in files.items():
            (pki / name).write_bytes(data)
        # Identities for RBAC tests: the agent's ServiceAccount as the API server names it.
        self.tokens = {"agent": "agent-token-0123456789", "webhook": "webhook-token-0123456789",
                       "hami-scheduler": "hami-scheduler-token-0123456789",
                       "hami-device-plugin": "hami-device-plugin-token-0123456789"}
        (pki / "tokens.csv").write_text(
            f'{self.tokens["agent"]},system:serviceaccount:gpupool-system:gpupool-agent,'
            f'uid-agent,"system:serviceaccounts,system:serviceaccounts:gpupool-system"\n'
            f'{self.tokens["webhook"]},system:serviceaccount:gpupool-system:gpupool-webhook,'
            f'uid-webhook,"system:serviceaccounts,system:serviceaccounts:gpupool-system"\n'
            # HAMi's scheduler and device plugin as its chart runs them (release hami in
            # kube-system): their writes of HAMi's pod annotations are theirs to make
            # (docs/security.md); all-powerful here rather than given HAMi's chart's roles
            + "".join(f'{self.tokens[n]},system:serviceaccount:kube-system:{n},uid-{n},'
                      f'"system:serviceaccounts,system:serviceaccounts:kube-system,'
                      f'system:masters"\n' for n in ("hami-scheduler", "hami-device-plugin")))
        (pki / "audit-policy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "resources": [
                {"group": "", "resources": ["pods"]},
                {"group": "apps", "resources": ["deployments"]}]}, {"level": "None"}]}))
        self.audit_log = self.root / "audit.log"
        etcd_port, peer_port = free_port(), free_port()
        self._spawn("etcd", [str(self.bin / "etcd"), "--data-dir", str(self.root / "etcd"),
                             "--listen-client-url", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-url", f"http://127.0.0.1:{peer_port}"])
        self.port = free_port()
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=Node,RBAC",
            # Advertised on loopback: Kubernetes 1.37 refuses that to the endpoint reconciler,
            # and nothing here reads the kubernetes Service's endpoints.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true", "--disable-admission-plugins=ServiceAccount",
            f"--audit-policy-file={pki / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=100",
            f"--profiling={str(self.profiling).lower()}", "--v=0", *self._gates()])
        self.kubeconfig = self.root / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {
                "server": f"https://127.0.0.1:{self.port}",
                "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"client-certificate": str(pki / "admin.crt"),
                                                 "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}]}))
        self._wait_ready()
        return self

    def start_scheduler(self, name: str, config: dict[str, Any],
                        lease: tuple[str, str] | None = None) -> None:
        """A real kube-scheduler (same module as the API server) with this
        KubeSchedulerConfiguration (its profiles, extenders); with ``lease`` (namespace,
        name), leader election on that Lease, as HAMi's chart runs its scheduler, with short
        timings so a stopped scheduler's Lease expires within seconds."""
        path = self.root / f"{name}.yaml"
        election: dict[str, Any] = {"leaderElect": False}
        if lease is not None:
            election = {"leaderElect": True, "resourceLock": "leases",
                        "resourceNamespace": lease[0], "resourceName": lease[1],
                        "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
        path.write_text(yaml.safe_dump({
            **config, "leaderElection": election,
            "clientConnection": {"kubeconfig": str(self.kubeconfig)}}))
        self._spawn(name, [str(self.bin / "kube-scheduler"), f"--config={path}",
                           "--secure-port=0", "--v=2", *self._gates()])

    def start_controller_manager(self) -> None:
        """A real kube-controller-manager: workloads create their pods as in a cluster, each
        controller under its own ServiceAccount (so pods reach the webhooks as the
        replicaset or job controller), and node lifecycle follows the nodes' Ready state."""
        pki = self.root / "pki"
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            # 1.37 knows no cloud controllers at all (kube-controller-manager refuses to
            # start when told to turn off one it does not know)
            "--controllers=*,-nodeipam" + (
                ",-cloud-node-lifecycle,-service-lb-controller"
                if int(release().split(".")[1]) < 37 else ""),
            "--node-monitor-grace-period=60s", "--v=1", *self._gates()])

    def start_kwok(self, kwok_bin: Path) -> None:
        """kwok as every node's kubelet: nodes Ready with leases, bound pods Running."""
        stages = sorted((kwok_bin / "stages").glob("*.yaml"))
        self._spawn("kwok", [str(kwok_bin / "kwok"), f"--kubeconfig={self.kubeconfig}",
                             "--manage-all-nodes=true", "--node-lease-duration-seconds=40",
                             *(f"--config={s}" for s in stages)])

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def kill(self, name: str) -> None:
        """SIGKILL the program started as ``name`` (a scheduler that dies without a word)."""
        proc = next(p for p in self.procs if any(name in a for a in _argv(p)))
        proc.kill()
        proc.wait(30)
        self.procs.remove(proc)

    def stop_apiserver(self) -> None:
        """Cut every watch: the API server dies (SIGKILL, no graceful drain), etcd and its
        data stay."""
        proc = next(p for p in self.procs if _argv(p)[0].endswith("kube-apiserver"))
        proc.kill()
        proc.wait(30)
        self._apiserver_args = _argv(proc)
        self.procs.remove(proc)

    def start_apiserver(self) -> None:
        self._spawn("kube-apiserver", self._apiserver_args)
        self._wait_ready()

    def _wait_ready(self) -> None:
        pki = self.root / "pki"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{_argv(p)[0]} exited: "
                                       f"{self.log(Path(_argv(p)[0]).name)[-3000:]}")
            try:
                r = requests.get(f"https://127.0.0.1:{self.port}/readyz",
                                 cert=(str(pki / "admin.crt"), str(pki / "admin.key")),
                                 verify=str(pki / "ca.crt"), timeout=3)
                if r.ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError("kube-apiserver not ready in 120s: "
                           f"{self.log('kube-apiserver')[-3000:]}")

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                token: str | None = None, env: dict[str, Any] | None = None
                ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}"]
        if token:
            cmd += [f"--token={self.tokens[token]}", "--user="]
        r = subprocess.run([*cmd, *args], input=input, capture_output=True, text=True,
                           timeout=120, env={**os.environ, **(env or {})})
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {r.stderr}")
        return r

    def create_crd(self, path: Path | str, timeout: float = 60) -> None:
        """Creates a CRD and returns once it is Established. ``kubectl wait --for
        condition=established`` fails outright, not waiting, while the new CRD has no
        ``status.conditions`` yet; polling the condition is the wait that holds."""
        self.kubectl("create", "-f", str(path))
        name = yaml.safe_load(Path(path).read_text())["metadata"]["name"]
        query = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + timeout
        while self.kubectl("get", "crd", name, "-o", f"jsonpath={query}",
                           check=False).stdout.strip() != "True":
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig acting as one of ``tokens``' identities instead of the admin."""
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        cfg["users"] = [{"name": token, "user": {"token": self.tokens[token]}}]
        cfg["contexts"][0]["context"]["user"] = token
        path.write_text(yaml.safe_dump(cfg))
        return path

    def metrics(self) -> str:
        return self.kubectl("get", "--raw", "/metrics").stdout

    def stop(self) -> None:
        """Everything but etcd at once (a scheduler or kwok would otherwise sit out its own
        grace period against an API server already gone), then etcd: an API server whose
        etcd goes first spends 30 s shutting down."""
        last = [p for p in self.procs if _argv(p)[0].endswith("/etcd")]
        for group in ([p for p in self.procs if p not in last], last):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            deadline = time.monotonic() + 10
            for p in group:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _argv(proc: subprocess.Popen[bytes]) -> list[str]:
    """The command a process was started with (always a list of strings here)."""
    return cast(list[str], proc.args)
