"""``gpupool doctor``: one row per GPU node saying whether its pool's pods will start there.

Automates the checklist people otherwise run by hand: which pool and scheduler a node is in,
which GPUs HAMi registered, which CDI kinds the node's specs define, the runtime's mode and
default kind, what a pod of that pool would miss, and the fix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from webhook.api.delivery import LABEL_PREFIX
from webhook.engine.candidates import Demand
from webhook.engine.cdi import MISSING, OK, UNKNOWN, assess_node, fix_text
from webhook.engine.cluster import ClusterView
from webhook.engine.policy import Policy


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


def diagnose(view: ClusterView, policy: Policy) -> list[Row]:
    rows = []
    for node in sorted(view.nodes(), key=lambda n: n.name):
        if not node.is_gpu_node(policy):
            continue
        pool = policy.by_name[policy.pool_for_label_value(node.labels.get(policy.pool_label))]
        check = assess_node(node, pool, None, Demand(), policy)
        inv = node.inventory
        errors = [f"{p}: {r}" for p, r in inv.errors] if inv else []
        for e in (node.inventory_error, node.register_error):
            if e:
                errors.append(e)
        if check.state == OK:
            fix = ""
        elif check.state == MISSING:
            fix = fix_text(pool, [check], policy)
        else:
            fix = ("deploy gpupool's agent DaemonSet on this node" if inv is None
                   else "check the node's runtime configuration and HAMi registration")
        rows.append(Row(
            node=node.name, pool=pool.name, scheduler=pool.scheduler_name,
            hami_gpus=len(node.gpus),
            cdi_kinds={k: len(v) for k, v in sorted(inv.kinds.items())} if inv else {},
            mode=(inv.runtime.mode or "unknown") if inv else "unknown",
            default_kind=(inv.runtime.default_kind or "-") if inv else "-",
            state=check.state if check.state != UNKNOWN else f"unknown: {check.note}",
            missing=list(check.missing), fix=fix, errors=errors,
            steering={k.removeprefix(LABEL_PREFIX): v for k, v in sorted(node.labels.items())
                      if k.startswith(LABEL_PREFIX)}))
    return rows


def format_table(rows: list[Row]) -> str:
    head = (f"{'NODE':<24} {'POOL':<10} {'SCHEDULER':<18} {'HAMI GPUS':<9} {'MODE':<7} "
            f"{'DEFAULT KIND':<28} {'CDI KINDS (devices)':<48} STATUS")
    lines = [head]
    for r in rows:
        kinds = ", ".join(f"{k}({n})" for k, n in r.cdi_kinds.items()) or "-"
        status = "ok" if r.state == OK else (
            f"missing {len(r.missing)}: {', '.join(r.missing[:2])}"
            f"{' ...' if len(r.missing) > 2 else ''}" if r.state == MISSING else r.state)
        lines.append(f"{r.node:<24} {r.pool:<10} {r.scheduler:<18} {r.hami_gpus:<9} "
                     f"{r.mode:<7} {r.default_kind:<28} {kinds:<48} {status}")
        if r.steering:
            lines.append(f"{'':<24} steering labels: "
                         + ", ".join(f"{k}={v}" for k, v in r.steering.items()))
        if r.fix:
            lines.append(f"{'':<24} fix: {r.fix}")
        for e in r.errors:
            lines.append(f"{'':<24} spec error: {e}")
    if not rows:
        lines.append("(no GPU nodes)")
    return "\n".join(lines)


def format_json(rows: list[Row]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2)
