"""The ``gpupool`` command: thin argument handling around the library modules.

Exit codes are uniform: 0 success (for ``check``: everything allowed), 1 a finding (a pod
denied), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.engine import objects

if TYPE_CHECKING:
    from webhook.engine.cluster import ClusterView
    from webhook.engine.policy import Policy

EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def _policy(path: str | None) -> Policy:
    from webhook.policyfile import default_policy, load_policy_file

    return load_policy_file(path) if path else default_policy()


def _namespace_labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--namespace-labels: {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _view(cluster: str | None, policy: Policy, ns_labels: dict[str, str],
          namespaces: Sequence[str] = ()) -> ClusterView:
    from webhook.engine.cluster import view_from_objects
    from webhook.snapshot import load_cluster_file

    nodes, ns = load_cluster_file(cluster) if cluster else ([], {})
    for name in namespaces:
        ns.setdefault(name, {}).update(ns_labels)
    return view_from_objects(nodes, policy, ns)


# ------------------------------------------------------------------ check


def cmd_check(args: argparse.Namespace) -> int:
    from webhook.cli.check import format_json, format_text, load_manifests, run_check

    policy = _policy(args.policy)
    labels = _namespace_labels(args.namespace_labels)
    manifests = load_manifests(args.files)
    namespaces = {objects.meta_of(obj).get("namespace") or "default"
                  for _, objs in manifests for obj in objs}
    view = _view(args.cluster, policy, labels, sorted(namespaces))
    report = run_check(manifests, view, policy)
    if args.output == "json":
        print(format_json(report))
        for line in report.skipped:
            print(line, file=sys.stderr)
    else:
        print(format_text(report))
    return report.exit_code


# ------------------------------------------------------------------ serve


def cmd_serve(args: argparse.Namespace) -> int:
    from webhook.server.runner import ServeConfig, serve

    cluster = args.cluster
    if args.demo:
        from webhook.policyfile import DATA_DIR

        cluster = str(DATA_DIR / "demo-cluster.yaml")
    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together")
    if not args.cert and not args.insecure_http:
        raise UsageError("--cert/--key are required (or --insecure-http for local debugging)")
    if args.policy:
        _policy(args.policy)  # fail fast, before forking workers
    cfg = ServeConfig(bind=args.bind, certfile=args.cert or "", keyfile=args.key or "",
                      policy=args.policy, cluster_file=cluster, demo=args.demo,
                      kubeconfig=args.kubeconfig,
                      in_cluster=args.in_cluster, workers=args.workers, threads=args.threads,
                      worker_class=args.worker_class,
                      worker_connections=args.worker_connections,
                      handshake_deadline=args.handshake_deadline,
                      request_deadline=args.request_deadline,
                      keepalive=args.keepalive, audit_file=args.audit_file,
                      audit_stdout=not args.no_audit_stdout, loglevel=args.log_level,
                      audit_max_bytes=args.audit_max_bytes, audit_backups=args.audit_backups,
                      max_staleness=args.max_staleness)
    serve(cfg)
    return EXIT_OK


# ------------------------------------------------------------------ certs


def cmd_certs(args: argparse.Namespace) -> int:
    from webhook import certs

    if args.certs_cmd == "generate":
        paths = certs.generate(args.out, args.service, args.namespace,
                               extra_dns=args.dns, extra_ips=args.ip, days=args.days,
                               algorithm=args.algorithm)
        print(f"wrote {paths.ca_cert}, {paths.tls_cert}, {paths.tls_key} (0600), "
              f"{paths.ca_bundle}")
        return EXIT_OK
    if args.certs_cmd == "renew":
        done = certs.renew(args.out, args.service, args.namespace, extra_dns=args.dns,
                           extra_ips=args.ip, days=args.days,
                           renew_before_days=args.renew_before_days, algorithm=args.algorithm,
                           force=args.force)
        print("renewed serving certificate" if done else "serving certificate not due yet")
        return EXIT_OK
    if args.certs_cmd == "ca-bundle":
        print(certs.ca_bundle(certs.Paths(Path(args.out))))
        return EXIT_OK
    raise UsageError("certs: choose generate, renew or ca-bundle")


# ------------------------------------------------------------------ audit


def cmd_audit(args: argparse.Namespace) -> int:
    from webhook.cli.audit import AuditFilter, Gaps, format_table, parse_since, read_records

    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    filt = AuditFilter(since=since, namespace=args.namespace, reason=args.reason,
                       dry_run=args.dry_run)
    gaps = Gaps()
    if args.file == "-":
        records = [r for r in read_records(sys.stdin, gaps) if filt(r)]
    else:
        paths = [args.file]
        # Include rotated files, oldest first, so the listing is in time order.
        i = 1
        while os.path.exists(f"{args.file}.{i}"):
            paths.insert(0, f"{args.file}.{i}")
            i += 1
        records = []
        for p in paths:
            try:
                with open(p, encoding="utf-8", errors="replace") as fh:
                    records.extend(r for r in read_records(fh, gaps, p) if filt(r))
            except OSError as exc:
                raise UsageError(f"{p}: {exc.strerror}") from exc
    if args.output == "json":
        print(json.dumps(records, indent=2))
    else:
        print(format_table(records))
    for line in gaps.describe():  # on stderr, so -o json stays parseable
        print(line, file=sys.stderr)
    return EXIT_OK


# ------------------------------------------------------------------ agent and doctor


def _kube_client(kubeconfig: str | None, in_cluster: bool) -> Any:
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    return config.new_client_from_config(config_file=kubeconfig)


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from webhook.node.agent import KubeNodeClient, Observer, Publisher, run

    observer = Observer(spec_dirs=args.cdi_dir or None, nvidia_config=args.runtime_config,
                        containerd_config=args.containerd_config,
                        driver_gpus_dir=args.driver_gpus_dir or None,
                        settle_seconds=args.settle_seconds)
    if args.print:
        print(observer.observe().dumps())
        if args.once:
            return EXIT_OK
    if not args.node_name:
        raise UsageError("--node-name is required to publish (or use --once --print)")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api = _kube_client(args.kubeconfig, not args.kubeconfig)
    publisher = Publisher(KubeNodeClient(api, args.node_name))
    if args.once:
        publisher.publish(observer.observe())
        return EXIT_OK
    run(observer, publisher, poll_interval=args.poll_interval)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from webhook.cli.doctor import diagnose, format_json, format_table
    from webhook.engine.cluster import NodeInfo

    policy = _policy(args.policy)
    if args.cluster:
        view = _view(args.cluster, policy, {})
    else:
        from kubernetes import client

        api = _kube_client(args.kubeconfig, False)
        items = client.CoreV1Api(api).list_node().items
        view = _view(None, policy, {})
        view.replace_nodes(NodeInfo.from_object(api.sanitize_for_serialization(n))
                           for n in items)
    rows = diagnose(view, policy)
    print(format_json(rows) if args.output == "json" else format_table(rows))
    return EXIT_OK if all(r.state == "ok" for r in rows) else EXIT_FINDING


# ------------------------------------------------------------------ parser


def build_parser(prog: str = "gpupool") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=(
        "Route GPU pods to their node pool's scheduler and reject pods whose nodes lack the "
        "CDI devices they need."))
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("check", help="decide offline on Pods and workload manifests")
    c.add_argument("-f", "--filename", dest="files", action="append", required=True,
                   help="manifest file (repeatable)")
    c.add_argument("--cluster", help="'kubectl get nodes -o yaml' output or Node YAML")
    c.add_argument("--policy", help="PoolPolicy YAML (default: built-in policy)")
    c.add_argument("--namespace-labels", help="labels of the objects' namespaces, k=v,...")
    c.add_argument("-o", "--output", choices=["text", "json"], default="text")
    c.set_defaults(func=cmd_check)

    s = sub.add_parser("serve", help="run the admission webhook under gunicorn")
    s.add_argument("--bind", default="0.0.0.0:8443")
    s.add_argument("--cert", help="serving certificate (PEM); reloaded when it changes")
    s.add_argument("--key", help="serving key (PEM)")
    s.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (debug only)")
    s.add_argument("--policy", help="PoolPolicy file; reloaded when it changes")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", help="watch nodes and namespaces with this kubeconfig")
    src.add_argument("--in-cluster", action="store_true", help="watch with the pod's account")
    src.add_argument("--cluster", help="serve against a static node snapshot file")
    src.add_argument("--demo", action="store_true", help="serve against the bundled demo cluster")
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--worker-class", choices=("gevent", "gthread"), default="gevent",
                   help="gevent (default): slow clients cost no thread; gthread: a thread per "
                        "request in progress")
    s.add_argument("--worker-connections", type=int, default=2000,
                   help="gevent: open connections per worker")
    s.add_argument("--threads", type=int, default=4, help="gthread: threads per worker")
    s.add_argument("--handshake-deadline", type=float, default=3.0, metavar="SECONDS",
                   help="drop a connection whose TLS handshake takes longer")
    s.add_argument("--request-deadline", type=float, default=10.0, metavar="SECONDS",
                   help="drop a connection whose request, from its first byte, takes longer")
    s.add_argument("--keepalive", type=int, default=75)
    s.add_argument("--max-staleness", type=float, default=180.0,
                   help="seconds the node cache may go without a sync before /readyz fails")
    s.add_argument("--audit-file", help="also write audit records here (rotated by size)")
    s.add_argument("--audit-max-bytes", type=int, default=50 * 1024 * 1024,
                   help="rotate the audit file past this size")
    s.add_argument("--audit-backups", type=int, default=5, help="rotated audit files kept")
    s.add_argument("--no-audit-stdout", action="store_true")
    s.add_argument("--log-level", default="info")
    s.set_defaults(func=cmd_serve)

    ce = sub.add_parser("certs", help="generate or renew the webhook's certificates")
    cs = ce.add_subparsers(dest="certs_cmd", required=True)
    for name in ("generate", "renew", "ca-bundle"):
        x = cs.add_parser(name)
        x.add_argument("--out", required=True, help="directory for the certificate files")
        if name == "ca-bundle":
            continue
        x.add_argument("--service", default="gpupool-webhook")
        x.add_argument("--namespace", default="gpupool-system")
        x.add_argument("--dns", action="append", default=[], help="extra DNS SAN (repeatable)")
        x.add_argument("--ip", action="append", default=[], help="extra IP SAN (repeatable)")
        x.add_argument("--days", type=int, default=365, help="serving certificate validity")
        x.add_argument("--algorithm", choices=["ecdsa", "rsa"], default="ecdsa")
        if name == "renew":
            x.add_argument("--renew-before-days", type=float, default=30)
            x.add_argument("--force", action="store_true")
    ce.set_defaults(func=cmd_certs)

    a = sub.add_parser("audit", help="read the audit log of rejections")
    a.add_argument("--file", default="/var/log/gpupool/audit.log", help="log file, or - for stdin")
    a.add_argument("--since", help="only records newer than this (30m, 1h, 2d)")
    a.add_argument("--namespace")
    a.add_argument("--reason")
    dr = a.add_mutually_exclusive_group()
    dr.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, default=None)
    dr.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    a.add_argument("-o", "--output", choices=["table", "json"], default="table")
    a.set_defaults(func=cmd_audit)

    ag = sub.add_parser("agent", help="publish this node's CDI inventory on its Node")
    ag.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                    help="the Node to annotate (default: $NODE_NAME)")
    ag.add_argument("--cdi-dir", action="append", default=[],
                    help="CDI spec directory, in priority order (default: /etc/cdi, /var/run/cdi"
                         " or containerd's cdi_spec_dirs)")
    ag.add_argument("--runtime-config", help="the NVIDIA runtime's config.toml")
    ag.add_argument("--containerd-config", help="containerd's config.toml")
    ag.add_argument("--driver-gpus-dir", default="/proc/driver/nvidia/gpus",
                    help="where the NVIDIA driver lists the node's GPUs ('' to not read it)")
    ag.add_argument("--once", action="store_true", help="observe (and publish) once, then exit")
    ag.add_argument("--print", action="store_true", help="print the annotation value")
    ag.add_argument("--poll-interval", type=float, default=30.0)
    ag.add_argument("--settle-seconds", type=float, default=5.0,
                    help="how long a changed file that fails to parse keeps its last good content")
    ag.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    ag.set_defaults(func=cmd_agent)

    dr = sub.add_parser("doctor", help="one row per GPU node: will its pool's pods start?")
    src = dr.add_mutually_exclusive_group()
    src.add_argument("--cluster", help="'kubectl get nodes -o yaml' output")
    src.add_argument("--kubeconfig", help="query a live cluster (default: ~/.kube/config)")
    dr.add_argument("--policy")
    dr.add_argument("-o", "--output", choices=["table", "json"], default="table")
    dr.set_defaults(func=cmd_doctor)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "gpupool") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    from webhook.certs import CertError
    from webhook.engine.policy import PolicyError
    from webhook.node.spec import CDIError
    from webhook.snapshot import SnapshotError

    try:
        return int(args.func(args))
    except (UsageError, PolicyError, SnapshotError, CertError, CDIError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


def kubectl_plugin_main() -> int:
    """``kubectl gpupool ...``: kubectl finds this executable on PATH as a plugin."""
    return main(prog="kubectl gpupool")


if __name__ == "__main__":
    sys.exit(main())
