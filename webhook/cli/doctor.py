"""``gpupool doctor``: one row per GPU node saying whether its pool's pods will start there.

Automates the checklist people otherwise run by hand: which pool and scheduler a node is in,
which GPUs HAMi registered, which CDI kinds the node's specs define, the runtime's mode and
default kind, what a pod of that pool would miss, and the fix.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from webhook.api.delivery import LABEL_PREFIX
from webhook.api.inventory import Inventory
from webhook.cli.table import names, table
from webhook.engine import (
    ClusterView,
    NodeState,
    PodAnswer,
    Policy,
    Release,
    advertised_twice,
    fix_text,
    node_verdict,
    release_note,
    words,
)

if TYPE_CHECKING:
    from webhook.cli.live import Live


@dataclass
class Row:
    node: str
    pool: str
    scheduler: str
    hami_gpus: int
    cdi_kinds: dict[str, int]
    mode: str
    default_kind: str
    state: str
    missing: list[str]
    fix: str
    errors: list[str]
    #: the steering labels the node's agent set (what the scheduler sees)
    steering: dict[str, str]
    #: devices the node's ResourceSlices publish, per DRA driver
    dra_devices: dict[str, int]
    #: findings beyond the row's status (a resource served two ways, MIG devices that fail)
    hazards: list[str]
    #: the MIG devices the device plugin registered, per resource (the kubelet's list)
    mig_devices: dict[str, int]
    #: the device plugins the agent found running there, and how each hands GPUs (or what
    #: is unknown); empty: the agent did not look
    device_plugins: list[str] = field(default_factory=list)


def diagnose(view: ClusterView, policy: Policy) -> list[Row]:
    rows = []
    for node in sorted(view.nodes(), key=lambda n: n.name):
        slices = view.slices_for(node.name)
        if not node.is_gpu_node(policy) and not slices:
            continue
        dra_devices: dict[str, int] = {}
        for s in slices:
            dra_devices[s.driver] = dra_devices.get(s.driver, 0) + len(s)
        hazards = [h.message for h in advertised_twice(node, view)]
        pool = policy.by_name[node.pool(policy)]
        check = node_verdict(node, view, policy)
        inv = node.inventory
        mig = dict(sorted((r, len(ids)) for r, ids in ((inv.mig or {}) if inv else {}).items()))
        for resource in mig:
            m = node_verdict(node, view, policy, resource)
            if m.state is NodeState.MISSING:
                shown = ", ".join(m.missing[:2]) or words(m.note)
                hazards.append(f"{resource}: its MIG devices fail here ({shown}); fix: "
                               f"{fix_text(pool, [m], policy, view)}")
        errors = [f"{p}: {r}" for p, r in inv.errors] if inv else []
        for e in (node.inventory_error, node.register_error):
            if e:
                errors.append(e)
        if check.state is NodeState.OK:
            fix = ""
        elif check.state is NodeState.MISSING:
            fix = fix_text(pool, [check], policy, view)
        else:
            fix = ("deploy gpupool's agent DaemonSet on this node" if inv is None
                   else "check the node's runtime configuration and HAMi registration")
        rows.append(Row(
            node=node.name, pool=pool.name, scheduler=pool.scheduler_name,
            hami_gpus=len(node.gpus),
            cdi_kinds={k: len(v) for k, v in sorted(inv.kinds.items())} if inv else {},
            mode=(inv.runtime.mode or "unknown") if inv else "unknown",
            default_kind=(inv.runtime.default_kind or "-") if inv else "-",
            state=(f"unknown: {words(check.note)}" if check.state is NodeState.UNKNOWN
                   else check.state),
            missing=list(check.missing), fix=fix, errors=errors,
            steering={k.removeprefix(LABEL_PREFIX): v for k, v in sorted(node.labels.items())
                      if k.startswith(LABEL_PREFIX)},
            dra_devices=dict(sorted(dra_devices.items())), hazards=hazards,
            mig_devices=mig, device_plugins=_plugins(inv)))
    return rows


def _plugins(inv: Inventory | None) -> list[str]:
    if inv is None or inv.plugins is None:
        return []
    return [p.describe() for p in inv.plugins] or ["none found running on the node"]


@dataclass
class CertificateStatus:
    """The webhook's serving certificate, as doctor reports it."""

    source: str
    not_after: str = ""  # ISO time; "" when it could not be read
    days_left: int | None = None
    problem: str = ""  # why it is a finding, or why it could not be read
    finding: bool = False  # expired, expiring soon, unreadable, wrong names: doctor exits 1
    #: the certificate's DNS and IP subject alternative names
    sans: list[str] = field(default_factory=list)
    #: the name the API server verifies (the webhooks' Service as <name>.<namespace>.svc)
    host: str = ""
    #: whether ``sans`` cover ``host``; None when no host was known to check
    covers_host: bool | None = None

    @property
    def ok(self) -> bool:
        return not self.finding

    def describe(self) -> str:
        if not self.not_after:
            return f"serving certificate ({self.source}): {self.problem}"
        text = (f"serving certificate ({self.source}): expires {self.not_after} "
                f"({self.days_left} day(s) left); names {', '.join(self.sans) or 'none'}")
        if self.covers_host:
            text += f" (cover {self.host})"
        return f"{text}: {self.problem}" if self.problem else text


def certificate_status(pem: bytes, source: str, host: str = "") -> CertificateStatus:
    """Expiry, names, and whether the names cover ``host`` (the API server verifies the
    certificate against the webhook's Service name; a renewal that dropped it breaks every
    call)."""
    from cryptography import x509

    from webhook.files import certs

    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        return CertificateStatus(source, problem=f"not a PEM certificate ({exc})", finding=True)
    expires = cert.not_valid_after_utc
    names = certs.Names.of(cert)
    sans = [*names.dns, *names.ips]
    problems = [{"expired": "EXPIRED: the API server rejects the webhook; renew it now",
                 "soon": "expires soon; renew it (gpupool certs renew, or cert-manager)",
                 "": ""}[certs.expiry_state(expires)]]
    covers = covered(host, names.dns, names.ips) if host else None
    if covers is False:
        problems.append(f"its names do not cover {host}, the name the API server verifies: "
                        "every call to the webhook fails TLS verification; reissue it for "
                        f"that name (gpupool certs renew --out DIR --service "
                        f"{host.split('.')[0]} --namespace "
                        f"{host.split('.')[1] if host.count('.') >= 2 else 'NAMESPACE'} "
                        "--force, or the Certificate's dnsNames)")
    problem = "; ".join(p for p in problems if p)
    return CertificateStatus(source, expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                             max((expires - dt.datetime.now(dt.UTC)).days, 0), problem,
                             finding=bool(problem), sans=sans, host=host, covers_host=covers)


def covered(host: str, dns: Sequence[str], ips: Sequence[str]) -> bool:
    """As TLS verification matches a host: an exact name (any case), a wildcard for one
    leftmost label, or an IP address among the IP SANs."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return any(ipaddress.ip_address(x) == ip for x in ips)
    host = host.lower().rstrip(".")
    for name in dns:
        name = name.lower().rstrip(".")
        if name == host:
            return True
        if name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]:
            return True
    return False


def certificate_from_file(path: str, host: str = "") -> CertificateStatus:
    from webhook.files.certs import CertError

    try:
        with open(path, "rb") as fh:
            return certificate_status(fh.read(), path, host)
    except OSError as exc:
        raise CertError(f"--cert {path}: {exc.strerror}") from exc


def certificate_from_secret(live: Live, ref: str, host: str = "") -> CertificateStatus:
    """The Secret's tls.crt. A Secret that cannot be read is reported, not fatal: doctor's
    node rows do not depend on it."""
    import base64

    from kubernetes import client

    from webhook.cluster.kube import KubeError

    namespace, _, name = ref.rpartition("/")
    source = f"secret {ref}"
    try:
        secret = live.call(f"reading secret {ref}", client.CoreV1Api(live.api)
                           .read_namespaced_secret, name, namespace or "default")
    except KubeError as exc:
        return CertificateStatus(source, problem=f"not checked ({exc}; pass --tls-secret "
                                                 "NAMESPACE/NAME or --cert FILE)")
    data = (secret.data or {}).get("tls.crt") if secret is not None else None
    if not data:
        return CertificateStatus(source, problem="not checked (no tls.crt in the Secret)")
    return certificate_status(base64.b64decode(data), source, host)


def status_text(r: Row) -> str:
    if r.state == NodeState.OK:
        return "ok"
    if r.state == NodeState.MISSING:
        more = " ..." if len(r.missing) > 2 else ""
        return f"missing {len(r.missing)}: {', '.join(r.missing[:2])}{more}"
    return str(r.state)


def state_of(r: Row) -> str:
    """The row's state in one word, for the totals."""
    return "ok" if r.state == NodeState.OK else str(r.state).split(":", 1)[0]


@dataclass
class Totals:
    """What a person with thousands of nodes reads first."""

    nodes: dict[str, int]  # state -> nodes
    with_hazards: int
    #: GPU pods at risk, as ``gpupool scan`` reports them (live clusters only: None else)
    pods_at_risk: int | None = None


def totals(rows: list[Row], at_risk: dict[str, list[PodAnswer]] | None = None) -> Totals:
    counts: dict[str, int] = {}
    for r in rows:
        counts[state_of(r)] = counts.get(state_of(r), 0) + 1
    risky = None if at_risk is None else sum(len(v) for v in at_risk.values())
    return Totals(dict(sorted(counts.items())), sum(1 for r in rows if r.hazards), risky)


def format_table(rows: list[Row], cert: CertificateStatus | None = None,
                 wide: bool = False, at_risk: dict[str, list[PodAnswer]] | None = None,
                 installation: list[str] | None = None, release: Release | None = None
                 ) -> str:
    """One aligned row per node, its details under it, then each distinct fix once with the
    nodes it applies to, and the totals."""
    head = ["NODE", "POOL", "SCHEDULER", "HAMI GPUS", "MODE", "DEFAULT KIND",
            "CDI KINDS (devices)", "STATUS"]
    cells = [[r.node, r.pool, r.scheduler, r.hami_gpus, r.mode, r.default_kind,
              ", ".join(f"{k}({n})" for k, n in r.cdi_kinds.items()) or "-", status_text(r)]
             for r in rows]
    table_lines = table(head, cells)
    indent = " " * 4
    lines = [table_lines[0]] if rows else [table_lines[0], "(no GPU nodes)"]
    fixes: dict[str, list[str]] = {}
    for r, line in zip(rows, table_lines[1:], strict=True):
        lines.append(line)
        if r.steering:
            lines.append(f"{indent}steering labels: "
                         + ", ".join(f"{k}={v}" for k, v in r.steering.items()))
        if wide and len(r.missing) > 2:
            lines.extend(f"{indent}missing: {m}" for m in r.missing)
        if r.fix:
            fixes.setdefault(r.fix, []).append(r.node)
        lines.extend(f"{indent}device plugin: {p}" for p in r.device_plugins)
        if r.mig_devices:
            lines.append(f"{indent}MIG devices: "
                         + ", ".join(f"{d}({n})" for d, n in r.mig_devices.items()))
        if r.dra_devices:
            lines.append(f"{indent}DRA devices: "
                         + ", ".join(f"{d}({n})" for d, n in r.dra_devices.items()))
        lines.extend(f"{indent}hazard: {h}" for h in r.hazards)
        lines.extend(f"{indent}pod at risk: {_risk(a)}" for a in (at_risk or {}).get(r.node, ()))
        lines.extend(f"{indent}spec error: {e}" for e in r.errors)
    if fixes:
        lines.append("")
        for fix, nodes in sorted(fixes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"fix for {len(nodes)} node(s) ({names(nodes, wide)}): {fix}")
    pending = (at_risk or {}).get("", [])
    if pending:
        lines.append("")
        lines.extend(f"pending pod at risk: {_risk(a)}" for a in pending)
    t = totals(rows, at_risk)
    lines.append("")
    if release is not None:
        lines.append(kubernetes_line(release))
    summary = ", ".join(f"{n} {state}" for state, n in t.nodes.items()) or "none"
    lines.append(f"{len(rows)} GPU node(s): {summary}"
                 + (f"; {t.with_hazards} with hazards" if t.with_hazards else "")
                 + (f"; {t.pods_at_risk} GPU pod(s) at risk" if t.pods_at_risk is not None
                    else ""))
    if installation:
        lines.append("")
        lines.extend(installation)
    if cert is not None:
        lines.append("")
        lines.append(cert.describe())
    return "\n".join(lines)


def to_document(rows: list[Row], cert: CertificateStatus | None = None,
                at_risk: dict[str, list[PodAnswer]] | None = None,
                installation: dict[str, Any] | None = None, release: Release | None = None
                ) -> dict[str, Any]:
    """The report as ``-o json`` and ``-o yaml`` print it."""
    return {"kind": "DoctorReport", "nodes": [asdict(r) for r in rows],
            "kubernetes": None if release is None else {
                "release": str(release), "source": release.source,
                "supported": release.supported, "note": release_note(release)},
            "totals": asdict(totals(rows, at_risk)),
            "podsAtRisk": None if at_risk is None else [
                a.to_json() for pods in at_risk.values() for a in pods],
            "installation": installation,
            "certificate": asdict(cert) if cert is not None else None}


def kubernetes_line(release: Release) -> str:
    """Which release gpupool decides DRA allocation as, and where that came from; the one
    line saying so where the release is not supported."""
    where = {"discovered": "the API server's /version", "given": "--kube-version",
             "assumed": "assumed: the release is not known, so the newest supported"
             }[release.source]
    return release_note(release) or (f"Kubernetes {release} ({where}): DRA allocation is "
                                      f"decided as its scheduler decides it")


def _risk(a: PodAnswer) -> str:
    return f"{a.namespace}/{a.name} {a.outcome.value} ({a.reason}): {a.message}"


@dataclass
class RoutingReport:
    """Where GPU pods are routed, as the cluster holds it (``webhook.cluster.routingpolicy``)."""

    #: "api-server" (the compiled policy and the webhook's condition installed), "webhook"
    mode: str
    matches: bool | None  # the installed policy is the one compiled now (None: none)
    text: str
    pools: list[str] = field(default_factory=list)  # the pools the API server routes

    @property
    def ok(self) -> bool:
        return self.matches is not False

    def to_document(self) -> dict[str, Any]:
        return {"mode": self.mode, "matches": self.matches, "pools": self.pools,
                "message": self.text}


def routing_report(api: Any, view: ClusterView, policy: Policy, policy_source: str
                   ) -> RoutingReport:
    """Which mode is live, and whether what is installed is what ``policy`` (from
    ``policy_source``) and this cluster compile to."""
    from webhook.cluster.routingpolicy import CONFIGURATION, WEBHOOK, Cluster, read, target
    from webhook.engine import claimable_pools, routing_facts

    cluster = Cluster(api)
    installed, config = read(cluster)
    if not installed.served:
        return RoutingReport("webhook", None, "routing: in the webhook alone (this API server "
                             "does not serve MutatingAdmissionPolicy v1: Kubernetes 1.36 or "
                             "newer routes in the API server)")
    want = target(policy, view, config)
    proof = installed.proof or {}
    if proof.get("result") == "failed" and proof.get("digest") == want.digest:
        return RoutingReport(
            "webhook", False, "routing: in the webhook alone: the canary pods that prove "
            f"MutatingAdmissionPolicy gpupool-routing ({proof.get('digest')}) failed on API "
            f"server {proof.get('server') or '(version unknown)'} at {proof.get('at')}: "
            f"{proof.get('reason')}. It routes no pod until the PoolPolicy or the API server "
            "changes (docs/install.md, 'Routing in the API server')")
    if installed.digest is None and installed.condition is None:
        return RoutingReport("webhook", None, "routing: in the webhook alone (no "
                             "MutatingAdmissionPolicy gpupool-routing: --routing-mode webhook, "
                             "or no gpupool replica has installed it yet)")
    pools = list(claimable_pools(policy, routing_facts(view, policy)))
    problems = []
    if installed.digest == want.digest and not installed.binding and installed.canary:
        problems.append("MutatingAdmissionPolicy gpupool-routing is bound to its canary pods "
                        "alone: a replica is proving it, or cannot (see its log)")
    elif installed.digest != want.digest or not installed.binding:
        problems.append(f"MutatingAdmissionPolicy gpupool-routing is not what {policy_source} "
                        f"and this cluster compile to (installed {installed.digest or 'none'}"
                        f"{'' if installed.binding else ', no binding'}, compiled "
                        f"{want.digest})")
    if installed.condition != want.condition["expression"]:
        problems.append(f"the {want.condition['name']} condition on {WEBHOOK} "
                        f"({CONFIGURATION}) is "
                        + ("missing" if installed.condition is None else "another one"))
    if problems:
        return RoutingReport("api-server", False, "routing: " + "; ".join(problems) + ". A "
                             "running gpupool replica with --routing-mode auto or policy "
                             "rewrites them within 30 s; if none runs: gpupool policy compile "
                             "| kubectl apply -f - (docs/install.md, 'Routing in the API "
                             "server')", pools)
    return RoutingReport("api-server", True, "routing: in the API server for pools "
                         f"{', '.join(pools) or 'none'} (MutatingAdmissionPolicy "
                         f"gpupool-routing, as {policy_source} and this cluster compile); "
                         "the webhook routes the other GPU pods", pools)
