"""``gpupool scan``: re-check GPU pods as the cluster changes; report in PolicyReports,
Events and metrics (one leader writes, on a Lease)."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from webhook.cli.common import EXIT_OK, UsageError, add_command, add_kube_flags, load_policy


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: use HOST:PORT or :PORT")
    return host or "0.0.0.0", int(port)


def cmd_scan(args: argparse.Namespace) -> int:
    import logging
    import signal

    from webhook.cluster.kube import api_client
    from webhook.scan import schedulers
    from webhook.scan.run import ScanConfig, ScanService

    policy = load_policy(args.policy)
    try:
        refs = [schedulers.parse_ref(r) for r in args.scheduler_lease]
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    named = {r.scheduler for r in refs}
    refs += [r for r in schedulers.default_refs(sorted(policy.schedulers), args.hami_namespace)
             if r.scheduler not in named]
    try:
        pod_refs = [schedulers.parse_pods_ref(r) for r in args.scheduler_pods]
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    named = {r.scheduler for r in pod_refs}
    pod_refs += [r for r in schedulers.default_pod_refs(sorted(policy.schedulers),
                                                        args.hami_namespace)
                 if r.scheduler not in named]
    if not args.namespace:
        raise UsageError("--namespace is required for the leader-election Lease (or set "
                         "POD_NAMESPACE)")
    api = api_client(kubeconfig=args.kubeconfig, context=args.context,
                     in_cluster=not args.kubeconfig and not args.context)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = ScanConfig(namespace=args.namespace, identity=args.identity,
                     lease_name=args.lease_name, lease_duration=args.lease_duration,
                     renew_deadline=args.lease_duration * 2 / 3,
                     retry=max(0.5, args.lease_duration / 7.5),
                     report_api=args.report_api, events=not args.no_events,
                     scheduler_leases=refs, scheduler_pods=pod_refs, listen=args.listen,
                     resync=args.resync)
    try:
        svc = ScanService(api, policy, cfg)
        svc.start()
    except OSError as exc:
        raise UsageError(f"--listen {args.listen[0]}:{args.listen[1]}: {exc.strerror}") from exc
    signal.signal(signal.SIGTERM, lambda *_: svc.stop())
    try:
        svc.wait()
    except KeyboardInterrupt:
        svc.stop()
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    sc = add_command(sub, "scan", "re-check GPU pods as the cluster changes; report at risk "
                                  "pods (PolicyReports, Events, metrics)", f"""
        # as the chart's scan Deployment runs it (two replicas, one leads)
        {prog} scan --namespace gpupool-system
        # against the current kubectl context, reports in OpenReports' format
        {prog} scan --kubeconfig ~/.kube/config --namespace gpupool-system \\
            --report-api openreports --listen :9090
        # offline, before a change: {prog} check --running -f pods.yaml --cluster planned.yaml""")
    sc.add_argument("--policy", metavar="FILE", help="PoolPolicy YAML (default: built-in policy)")
    sc.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE"),
                    help="namespace of the leader-election Lease (default: $POD_NAMESPACE)")
    sc.add_argument("--identity", default=os.environ.get("POD_NAME") or socket.gethostname(),
                    help="this replica's name in the Lease (default: $POD_NAME or the host "
                         "name)")
    sc.add_argument("--lease-name", default="gpupool-scan",
                    help="the leader-election Lease (default: %(default)s)")
    sc.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS",
                    help="how long a standby waits for the leader's renewal before taking "
                         "over (default: %(default)s, as kube-scheduler's)")
    sc.add_argument("--report-api", choices=("wgpolicyk8s", "openreports", "none"),
                    default="wgpolicyk8s",
                    help="PolicyReport format: wgpolicyk8s.io/v1alpha2 PolicyReport (Kyverno, "
                         "Policy Reporter), openreports.io/v1alpha1 Report (its successor), "
                         "or none (default: %(default)s)")
    sc.add_argument("--no-events", action="store_true",
                    help="write no Kubernetes Events")
    sc.add_argument("--scheduler-lease", action="append", default=[],
                    metavar="SCHEDULER=NAMESPACE/NAME",
                    help="where a scheduler keeps its leader-election Lease (repeatable; "
                         "default: default-scheduler=kube-system/kube-scheduler, each other "
                         "pool scheduler in --hami-namespace under its own name)")
    sc.add_argument("--scheduler-pods", action="append", default=[],
                    metavar="SCHEDULER=NAMESPACE/SELECTOR",
                    help="where a scheduler's own pods are (repeatable; with none Ready it is "
                         "not running; default: each pool scheduler other than "
                         "default-scheduler in --hami-namespace, labelled "
                         "app.kubernetes.io/component=hami-scheduler as HAMi's chart does)")
    sc.add_argument("--hami-namespace", default="kube-system",
                    help="HAMi's release namespace, where its scheduler's Lease is "
                         "(default: %(default)s)")
    sc.add_argument("--resync", type=float, default=600.0, metavar="SECONDS",
                    help="decide every pod again this often, besides on each change "
                         "(default: %(default)s)")
    sc.add_argument("--listen", type=_listen, default=("0.0.0.0", 8080), metavar="HOST:PORT",
                    help="probes and metrics: /healthz, /readyz, /metrics (default: :8080)")
    add_kube_flags(sc, "run outside the cluster with this kubeconfig (default: in-cluster)",
                   request_timeout=False)
    sc.set_defaults(func=cmd_scan)
