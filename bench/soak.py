"""Soak: steady load for a while; errors, worker memory growth after warm-up, and whether
every denial sent is in the audit log exactly once.

    python -m bench.soak [--minutes 10] [--rate 150]

The suite runs a short variant (tests/integration/test_faults.py) through `run()`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent


def worker_rss(master_pid: int) -> dict[int, float]:
    out = {}
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    for child in children:
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except FileNotFoundError:
            continue
        out[int(child)] = int(status.split("VmRSS:")[1].split()[0]) / 1024
    return out


def run(url: str, ca: str, master_pid: int, bodies: dict[str, bytes], *, seconds: float,
        warmup: float, rate: float, connections: int = 6) -> dict[str, Any]:
    """Send `rate` req/s for `seconds`, alternating allowed and denied reviews (each denial
    with its own uid); sample worker RSS after `warmup` and at the end."""
    stop_at = time.monotonic() + seconds
    sent = {"allow": 0, "deny": 0}
    errors: list[str] = []
    deny_uids: list[str] = []
    lock = threading.Lock()
    per_conn = rate / connections
    rss: dict[str, dict[int, float]] = {}

    def client(k: int) -> None:
        n = 0
        with requests.Session() as s:
            start = time.monotonic()
            while time.monotonic() < stop_at:
                due = start + n / per_conn
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                kind = "deny" if n % 2 else "allow"
                uid = f"soak-{k}-{n}"
                body = bodies[kind].replace(b"__UID__", uid.encode())
                try:
                    r = s.post(f"{url}/{'validate' if kind == 'deny' else 'mutate'}", data=body,
                               headers={"Content-Type": "application/json"}, verify=ca,
                               timeout=10)
                    ok = r.status_code == 200 and r.json()["response"]["uid"] == uid
                    ok = ok and r.json()["response"]["allowed"] is (kind == "allow")
                    if not ok:
                        raise RuntimeError(f"{r.status_code} {r.text[:200]}")
                    with lock:
                        sent[kind] += 1
                        if kind == "deny":
                            deny_uids.append(uid)
                except Exception as exc:  # counted, never fatal: the soak reports them
                    with lock:
                        errors.append(repr(exc)[:200])
                n += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    time.sleep(warmup)
    rss["after_warmup"] = worker_rss(master_pid)
    for t in threads:
        t.join()
    rss["end"] = worker_rss(master_pid)
    growth = {pid: (rss["end"][pid] - v) / v for pid, v in rss["after_warmup"].items()
              if pid in rss["end"]}
    return {"seconds": seconds, "rate": rate, "sent": sent, "errors": len(errors),
            "error_samples": errors[:5], "deny_uids": deny_uids,
            "rss_mib": {k: {str(p): round(v, 1) for p, v in d.items()} for k, d in rss.items()},
            "max_rss_growth": round(max(growth.values()), 4) if growth else None}


def audit_count(audit: Path, uids: list[str]) -> dict[str, Any]:
    seen: dict[str, int] = {}
    for f in [audit, *sorted(audit.parent.glob(audit.name + ".*"))]:
        if f.suffix == ".lock" or not f.exists():
            continue
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            seen[rec["uid"]] = seen.get(rec["uid"], 0) + 1
    return {"denials_sent": len(uids), "recorded_once": sum(1 for u in uids if seen.get(u) == 1),
            "missing": sum(1 for u in uids if u not in seen),
            "duplicated": sum(1 for u in uids if seen.get(u, 0) > 1)}


def bodies() -> dict[str, bytes]:
    sys.path.insert(0, str(ROOT))
    from harness.kit import gpu_pod, review

    allow = review(gpu_pod(), uid="__UID__")
    deny_pod = gpu_pod()
    deny_pod["metadata"]["labels"] = {"gpupool.io/pool": "no-such-pool"}
    deny = review(deny_pod, uid="__UID__")
    return {"allow": json.dumps(allow).encode(), "deny": json.dumps(deny).encode()}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--rate", type=float, default=150)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.servers import start_server, stop_server

    with tempfile.TemporaryDirectory() as tmp:
        srv = start_server(Path(tmp))
        try:
            res = run(srv.url, srv.ca, srv.proc.pid, bodies(), seconds=a.minutes * 60,
                      warmup=min(60, a.minutes * 6), rate=a.rate)
            time.sleep(1)
            res["audit"] = audit_count(srv.audit, res.pop("deny_uids"))
        finally:
            stop_server(srv)
    out = ROOT / "bench/results/soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    return 0 if res["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
