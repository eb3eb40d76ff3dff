"""``gpupool doctor``: one row per GPU node saying whether its pool's pods will start there.

Automates the checklist people otherwise run by hand: which pool and scheduler a node is in,
which GPUs HAMi registered, which CDI kinds the node's specs define, the runtime's mode and
default kind, what a pod of that pool would miss, and the fix.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from webhook.api.delivery import LABEL_PREFIX
from webhook.engine import (
    ClusterView,
    NodeState,
    Policy,
    fix_text,
    mixed_resources,
    node_verdict,
)


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


def diagnose(view: ClusterView, policy: Policy) -> list[Row]:
    rows = []
    classes = view.device_classes()
    for node in sorted(view.nodes(), key=lambda n: n.name):
        slices = view.slices_for(node.name)
        if not node.is_gpu_node(policy) and not slices:
            continue
        dra_devices: dict[str, int] = {}
        for s in slices:
            dra_devices[s.driver] = dra_devices.get(s.driver, 0) + len(s)
        hazards = [f"{resource} is served here both by a device plugin and by DeviceClass "
                   f"{cls} (extendedResourceName): the scheduler counts the device plugin's "
                   "GPUs and DRA's apart, so both can hand out the same GPU; remove the "
                   "device plugin from this node or the class's extendedResourceName"
                   for resource, cls in mixed_resources(node, classes)] if slices else []
        pool = policy.by_name[policy.pool_for_label_value(node.labels.get(policy.pool_label))]
        check = node_verdict(node, view, policy)
        inv = node.inventory
        mig = dict(sorted((r, len(ids)) for r, ids in ((inv.mig or {}) if inv else {}).items()))
        for resource in mig:
            m = node_verdict(node, view, policy, resource)
            if m.state is NodeState.MISSING:
                shown = ", ".join(m.missing[:2]) or m.note
                hazards.append(f"{resource}: its MIG devices fail here ({shown}); fix: "
                               f"{fix_text(pool, [m], policy, view.runtime_classes())}")
        errors = [f"{p}: {r}" for p, r in inv.errors] if inv else []
        for e in (node.inventory_error, node.register_error):
            if e:
                errors.append(e)
        if check.state is NodeState.OK:
            fix = ""
        elif check.state is NodeState.MISSING:
            fix = fix_text(pool, [check], policy, view.runtime_classes())
        else:
            fix = ("deploy gpupool's agent DaemonSet on this node" if inv is None
                   else "check the node's runtime configuration and HAMi registration")
        rows.append(Row(
            node=node.name, pool=pool.name, scheduler=pool.scheduler_name,
            hami_gpus=len(node.gpus),
            cdi_kinds={k: len(v) for k, v in sorted(inv.kinds.items())} if inv else {},
            mode=(inv.runtime.mode or "unknown") if inv else "unknown",
            default_kind=(inv.runtime.default_kind or "-") if inv else "-",
            state=(f"unknown: {check.note}" if check.state is NodeState.UNKNOWN
                   else check.state),
            missing=list(check.missing), fix=fix, errors=errors,
            steering={k.removeprefix(LABEL_PREFIX): v for k, v in sorted(node.labels.items())
                      if k.startswith(LABEL_PREFIX)},
            dra_devices=dict(sorted(dra_devices.items())), hazards=hazards,
            mig_devices=mig))
    return rows


@dataclass
class CertificateStatus:
    """The webhook's serving certificate, as doctor reports it."""

    source: str
    not_after: str = ""  # ISO time; "" when it could not be read
    days_left: int | None = None
    problem: str = ""  # why it is a finding, or why it could not be read
    finding: bool = False  # expired, expiring soon or unreadable: doctor exits 1

    @property
    def ok(self) -> bool:
        return not self.finding

    def describe(self) -> str:
        if not self.not_after:
            return f"serving certificate ({self.source}): {self.problem}"
        text = (f"serving certificate ({self.source}): expires {self.not_after} "
                f"({self.days_left} day(s) left)")
        return f"{text}: {self.problem}" if self.problem else text


def certificate_status(pem: bytes, source: str) -> CertificateStatus:
    from webhook import certs

    try:
        expires = certs.not_after(pem)
    except ValueError as exc:
        return CertificateStatus(source, problem=f"not a PEM certificate ({exc})", finding=True)
    problem = {"expired": "EXPIRED: the API server rejects the webhook; renew it now",
               "soon": "expires soon; renew it (gpupool certs renew, or cert-manager)",
               "": ""}[certs.expiry_state(expires)]
    return CertificateStatus(source, expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                             max((expires - dt.datetime.now(dt.UTC)).days, 0), problem,
                             finding=bool(problem))


def certificate_from_file(path: str) -> CertificateStatus:
    from webhook.certs import CertError

    try:
        with open(path, "rb") as fh:
            return certificate_status(fh.read(), path)
    except OSError as exc:
        raise CertError(f"--cert {path}: {exc.strerror}") from exc


def certificate_from_secret(api: Any, ref: str) -> CertificateStatus:
    """The Secret's tls.crt. A Secret that cannot be read is reported, not fatal: doctor's
    node rows do not depend on it."""
    import base64

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from webhook.kube import REQUEST_TIMEOUT

    namespace, _, name = ref.rpartition("/")
    source = f"secret {ref}"
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(
            name, namespace or "default", _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        why = "not found" if exc.status == 404 else f"{exc.status} {exc.reason}"
        return CertificateStatus(source, problem=f"not checked ({why}; pass --tls-secret "
                                                 "NAMESPACE/NAME or --cert FILE)")
    data = (secret.data or {}).get("tls.crt")
    if not data:
        return CertificateStatus(source, problem="not checked (no tls.crt in the Secret)")
    return certificate_status(base64.b64decode(data), source)


def format_table(rows: list[Row], cert: CertificateStatus | None = None,
                 wide: bool = False) -> str:
    head = (f"{'NODE':<24} {'POOL':<10} {'SCHEDULER':<18} {'HAMI GPUS':<9} {'MODE':<7} "
            f"{'DEFAULT KIND':<28} {'CDI KINDS (devices)':<48} STATUS")
    lines = [head]
    for r in rows:
        kinds = ", ".join(f"{k}({n})" for k, n in r.cdi_kinds.items()) or "-"
        status = "ok" if r.state == NodeState.OK else (
            f"missing {len(r.missing)}: {', '.join(r.missing[:2])}"
            f"{' ...' if len(r.missing) > 2 else ''}" if r.state == NodeState.MISSING else r.state)
        lines.append(f"{r.node:<24} {r.pool:<10} {r.scheduler:<18} {r.hami_gpus:<9} "
                     f"{r.mode:<7} {r.default_kind:<28} {kinds:<48} {status}")
        if r.steering:
            lines.append(f"{'':<24} steering labels: "
                         + ", ".join(f"{k}={v}" for k, v in r.steering.items()))
        if wide and len(r.missing) > 2:
            lines.extend(f"{'':<24} missing: {m}" for m in r.missing)
        if r.fix:
            lines.append(f"{'':<24} fix: {r.fix}")
        if r.mig_devices:
            lines.append(f"{'':<24} MIG devices: "
                         + ", ".join(f"{d}({n})" for d, n in r.mig_devices.items()))
        if r.dra_devices:
            lines.append(f"{'':<24} DRA devices: "
                         + ", ".join(f"{d}({n})" for d, n in r.dra_devices.items()))
        for h in r.hazards:
            lines.append(f"{'':<24} hazard: {h}")
        for e in r.errors:
            lines.append(f"{'':<24} spec error: {e}")
    if not rows:
        lines.append("(no GPU nodes)")
    if cert is not None:
        lines.append("")
        lines.append(cert.describe())
    return "\n".join(lines)


def to_document(rows: list[Row], cert: CertificateStatus | None = None) -> dict[str, Any]:
    """The report as ``-o json`` and ``-o yaml`` print it."""
    return {"kind": "DoctorReport", "nodes": [asdict(r) for r in rows],
            "certificate": asdict(cert) if cert is not None else None}
