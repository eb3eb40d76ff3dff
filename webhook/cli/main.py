"""The ``gpupool`` command: thin argument handling around the library modules.

Exit codes are uniform: 0 success (for ``check``: everything allowed), 1 a finding (a pod
denied, a node that would fail its pods), 2 bad input or usage, 3 an internal error (a bug:
``GPUPOOL_DEBUG=1`` prints its traceback). Every error is one line on stderr that names the
input and what to do: ``main`` is the only place errors become output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from webhook import __version__
from webhook.engine import meta_of
from webhook.kube import REQUEST_TIMEOUT

if TYPE_CHECKING:
    from webhook.engine import ClusterView, Policy
    from webhook.snapshot import ClusterFile

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
OUTPUTS = ("json", "yaml", "wide")


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


def _load_nodes(cluster: str) -> ClusterFile:
    from webhook.snapshot import load_cluster_file

    return load_cluster_file(cluster)


def _view(snapshot: ClusterFile, policy: Policy, ns_labels: dict[str, str],
          namespaces: Sequence[str] = ()) -> ClusterView:
    from webhook.engine import view_from_objects

    ns = snapshot.namespaces
    for name in namespaces:
        ns.setdefault(name, {}).update(ns_labels)
    return view_from_objects(snapshot.nodes, policy, ns, snapshot.runtime_classes,
                             snapshot.resources)


def _print_doc(doc: Any, output: str | None) -> None:
    """``-o json`` and ``-o yaml``, as kubectl prints them."""
    if output == "yaml":
        import yaml

        # Through JSON first: YAML then holds exactly what -o json prints (enum members as
        # their values, which safe_dump would refuse).
        print(yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False,
                             default_flow_style=False), end="")
    else:
        print(json.dumps(doc, indent=2))


# ------------------------------------------------------------------ check


def cmd_check(args: argparse.Namespace) -> int:
    from webhook.cli.check import expand_paths, format_text, load_manifests, run_check, to_document

    policy = _policy(args.policy)
    labels = _namespace_labels(args.namespace_labels)
    manifests = load_manifests(expand_paths(args.files, args.recursive),
                               default_namespace=args.namespace)
    namespaces = {meta_of(obj).get("namespace") or "default"
                  for _, objs in manifests for obj in objs}
    snapshot = _check_source(args)
    view = _view(snapshot, policy, labels, sorted(namespaces))
    report = run_check(manifests, view, policy)
    if args.no_cluster:
        report.cdi_unchecked = "--no-cluster: routing only"
    if args.output in ("json", "yaml"):
        _print_doc(to_document(report), args.output)
        # Also on stderr, where a person watching a pipeline sees them.
        for line in ([f"note: CDI devices not checked: {report.cdi_unchecked}"]
                     if report.cdi_unchecked else []) + report.skipped:
            print(line, file=sys.stderr)
    else:
        print(format_text(report, wide=args.output == "wide"))
    return report.exit_code


def _check_source(args: argparse.Namespace) -> ClusterFile:
    """The nodes ``check`` decides against, read as kubectl would find a cluster. A gate on
    the exit code must never pass a pod the CDI check did not see: with no nodes to check
    against, that is an error (exit 2) naming the input, unless ``--no-cluster`` says so."""
    from webhook.kube import kubeconfig_path
    from webhook.snapshot import ClusterFile

    given = [flag for flag, value in (("--cluster", args.cluster), ("--no-cluster",
                                      args.no_cluster),
                                      ("--kubeconfig/--context",
                                       args.kubeconfig or args.context)) if value]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)}: pass one of them (--cluster reads nodes from "
                         "a file, --kubeconfig/--context from a cluster, --no-cluster checks "
                         "routing only)")
    if args.no_cluster:
        return ClusterFile([], {}, None)
    if args.cluster:
        snapshot = _load_nodes(args.cluster)
        if not snapshot.nodes:
            raise UsageError(f"--cluster {args.cluster}: holds no Node, so CDI devices cannot "
                             "be checked; pass 'kubectl get nodes -o yaml' output (or "
                             "--no-cluster to check routing only)")
        return snapshot
    path = kubeconfig_path(args.kubeconfig)
    if not args.kubeconfig and not args.context and not any(
            os.path.isfile(os.path.expanduser(p)) for p in path.split(os.pathsep) if p):
        raise UsageError("no nodes to check against: pass --cluster FILE ('kubectl get nodes "
                         "-o yaml' output), --context/--kubeconfig for a live cluster (none "
                         f"found at {path}), or --no-cluster to check routing only")
    from webhook.cli.live import Live, cluster_objects

    live = Live(args.kubeconfig, args.context, budget=args.request_timeout)
    snapshot = cluster_objects(live)
    if not snapshot.nodes:
        raise UsageError(f"the cluster at {live.host} has no Node, so CDI devices cannot be "
                         "checked (or --no-cluster to check routing only)")
    return snapshot


# ------------------------------------------------------------------ serve


def _check_bind(bind: str) -> None:
    """Fail before gunicorn does: it retries a taken port for 5 s and then exits 1."""
    import socket

    if bind.startswith("unix:"):
        return
    host, sep, port_text = bind.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--bind {bind!r}: use HOST:PORT, e.g. 0.0.0.0:8443")
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--bind {bind!r}: cannot resolve {host!r} ({exc.strerror})") from exc
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise UsageError(f"--bind {bind}: {(exc.strerror or str(exc)).lower()}; choose "
                             "another address "
                             "or stop what listens there") from exc


def _check_tls(cert: str, key: str) -> None:
    """The pair loaded exactly as each worker will load it; when it does not load but an
    earlier run of this server kept a good copy (``GPUPOOL_STATE_DIR``), that copy serves."""
    import ssl

    from webhook.server.tls import ReloadingContext

    for flag, path in (("--cert", cert), ("--key", key)):
        if not os.path.isfile(path):
            raise UsageError(f"{flag} {path}: no such file")
    try:
        ctx = ReloadingContext(cert, key)
    except ssl.SSLError as exc:
        raise UsageError(f"--cert {cert} / --key {key}: not a certificate and its key "
                         f"({exc.reason or exc}); are they swapped or from different pairs?"
                         ) from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"--cert {cert} / --key {key}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from exc
    if ctx.serving_kept:
        print(f"warning: --cert {cert} / --key {key}: {ctx.last_error}", file=sys.stderr)


def _check_policy(path: str) -> None:
    """As ``_check_tls``, for ``--policy``."""
    from webhook.server.policysource import PolicySource

    source = PolicySource(path)
    if source.serving_kept:
        print(f"warning: --policy {path}: {source.last_error}", file=sys.stderr)


def _check_cluster(path: str, demo: bool) -> None:
    from webhook.server.config import ServeConfig
    from webhook.server.runner import load_snapshot

    _, kept_why = load_snapshot(ServeConfig(cluster_file=path, demo=demo))
    if kept_why is not None:
        print(f"warning: --cluster {path}: {kept_why}", file=sys.stderr)


def _check_audit_file(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"--audit-file {path}: directory {directory} does not exist; create "
                         "it or mount a volume there")
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise UsageError(f"--audit-file {path}: {exc.strerror}") from exc


def cmd_serve(args: argparse.Namespace) -> int:
    """The master checks every input a worker reads at boot, and keeps a copy of each that
    loads (``webhook.server.filewatch.KeptCopies``), so a worker that boots after a file went
    bad serves the last good one instead of failing to boot and stopping the server."""
    import tempfile

    from webhook.server.filewatch import STATE_DIR_ENV

    owned = None
    if not os.environ.get(STATE_DIR_ENV):
        owned = tempfile.TemporaryDirectory(prefix="gpupool-state-")
        os.environ[STATE_DIR_ENV] = owned.name
    try:
        return _serve(args)
    finally:
        if owned is not None:
            owned.cleanup()


def _serve(args: argparse.Namespace) -> int:
    from webhook.server.config import ServeConfig
    from webhook.server.runner import serve

    cluster = args.cluster
    if args.demo:
        from webhook.policyfile import DATA_DIR

        cluster = str(DATA_DIR / "demo-cluster.yaml")
    if not (cluster or args.kubeconfig or args.in_cluster or args.no_cluster):
        raise UsageError("no node source: pass --in-cluster, --kubeconfig FILE, --cluster FILE "
                         "or --demo (or --no-cluster to serve without checking CDI devices)")
    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together")
    if not args.cert and not args.insecure_http:
        raise UsageError("--cert/--key are required (or --insecure-http for local debugging)")
    # Everything a worker would trip over is checked here, once, before any worker forks.
    if args.cert:
        _check_tls(args.cert, args.key)
    if args.policy:
        _check_policy(args.policy)
    if cluster:
        _check_cluster(cluster, args.demo)
    if args.kubeconfig:
        from webhook.kube import check_kubeconfig

        check_kubeconfig(args.kubeconfig)
    if args.in_cluster:
        from webhook.kube import check_in_cluster

        check_in_cluster()
    if args.audit_file:
        _check_audit_file(args.audit_file)
    _check_bind(args.bind)
    if args.insecure_http:  # said once every input has passed, just before serving
        print("warning: --insecure-http: serving plain HTTP, for local debugging only; the API "
              "server calls webhooks over HTTPS alone, and reviews carry pod specs",
              file=sys.stderr)
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


def _expiry_warning(not_after: dt.datetime) -> None:
    from webhook import certs

    if certs.expiry_state(not_after):
        left = max((not_after - dt.datetime.now(dt.UTC)).days, 0)
        print(f"warning: the serving certificate expires in {left} day(s), on "
              f"{not_after:%Y-%m-%d}; renew it with 'gpupool certs renew'", file=sys.stderr)


def cmd_certs(args: argparse.Namespace) -> int:
    from webhook import certs

    if args.certs_cmd == "generate":
        made = certs.generate(args.out, args.service, args.namespace,
                              extra_dns=args.dns, extra_ips=args.ip, days=args.days,
                              algorithm=args.algorithm, force=args.force)
        p = made.paths
        ca = (f"kept the CA in {p.ca_cert} (--force replaces it)" if made.ca_kept
              else f"wrote a new CA {p.ca_cert}")
        print(f"{ca}; wrote {p.tls_cert}, {p.tls_key} (0600), {p.ca_bundle}")
        _expiry_warning(made.not_after)
        return EXIT_OK
    if args.certs_cmd == "renew":
        done = certs.renew(args.out, args.service, args.namespace, extra_dns=args.dns,
                           extra_ips=args.ip, days=args.days,
                           renew_before_days=args.renew_before_days, algorithm=args.algorithm,
                           force=args.force)
        if done:
            names = certs.Names.of(certs.load_certificate(certs.Paths(Path(args.out)).tls_cert))
            print(f"renewed serving certificate for {', '.join([*names.dns, *names.ips])}")
        else:
            print("serving certificate not due yet")
        _expiry_warning(certs.expiry(certs.Paths(Path(args.out)).tls_cert))
        return EXIT_OK
    print(certs.ca_bundle(certs.Paths(Path(args.out))))
    return EXIT_OK


# ------------------------------------------------------------------ audit


def _reason_code(text: str) -> str:
    """A reason code as the records spell it, whatever its case; a typo is an error with the
    closest codes, never an empty listing."""
    import difflib

    from webhook.engine import Reason

    by_lower = {code.lower(): code for code in Reason.codes()}
    if text.lower() in by_lower:
        return by_lower[text.lower()]
    close = difflib.get_close_matches(text.lower(), by_lower, n=3, cutoff=0.5)
    hint = (f"did you mean {' or '.join(by_lower[c] for c in close)}?" if close
            else f"one of {', '.join(Reason.codes())}")
    raise argparse.ArgumentTypeError(f"unknown reason code {text!r}; {hint}")


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
    if gaps.not_an_audit_log():
        where = "standard input" if args.file == "-" else args.file
        raise UsageError(f"{where}: no gpupool audit record in {gaps.lines} line(s); pass the "
                         "file of 'gpupool serve --audit-file' (default "
                         "/var/log/gpupool/audit.log) or the webhook's 'kubectl logs' with "
                         "--file -")
    if args.output in ("json", "yaml"):
        _print_doc(records, args.output)
    else:
        print(format_table(records, wide=args.output == "wide"))
    for line in gaps.describe():  # on stderr, so -o json stays parseable
        print(line, file=sys.stderr)
    return EXIT_OK


# ------------------------------------------------------------------ agent and doctor


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from webhook.kube import api_client
    from webhook.node.agent import KubeNodeClient, Observer, Publisher, run

    for d in args.cdi_dir:  # a typo would otherwise read as "no specs on this node"
        if not os.path.isdir(d):
            print(f"warning: --cdi-dir {d}: no such directory (yet); specs written there "
                  "later are read on the next look", file=sys.stderr)
    observer = Observer(spec_dirs=args.cdi_dir or None, nvidia_config=args.runtime_config,
                        containerd_config=args.containerd_config, host_root=args.host_root,
                        driver_gpus_dir=args.driver_gpus_dir or None,
                        kubelet_checkpoint=args.kubelet_checkpoint or None,
                        settle_seconds=args.settle_seconds)
    if args.print:
        print(observer.observe().dumps())
        if args.once:
            return EXIT_OK
    if not args.node_name:
        raise UsageError("--node-name is required to publish (or set NODE_NAME; or use "
                         "--once --print to only print)")
    api = api_client(kubeconfig=args.kubeconfig, context=args.context,
                     in_cluster=not args.kubeconfig and not args.context)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    publisher = Publisher(KubeNodeClient(api, args.node_name))
    if args.once:
        publisher.publish(observer.observe())
        return EXIT_OK
    run(observer, publisher, poll_interval=args.poll_interval)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from webhook.cli.doctor import (
        certificate_from_file,
        certificate_from_secret,
        diagnose,
        format_table,
        gpu_pods_by_node,
        to_document,
    )
    from webhook.cli.installation import InstallationError, find, runbook

    policy = _policy(args.policy)
    host = _service_host(args.webhook_service) if args.webhook_service else ""
    pods_by_node: dict[str, int] | None = None
    installation = None
    if args.cluster:
        snapshot = _load_nodes(args.cluster)
        if not snapshot.nodes:
            raise UsageError(f"--cluster {args.cluster}: holds no Node; pass 'kubectl get "
                             "nodes -o yaml' output")
        cert = certificate_from_file(args.cert, host or _service_host(None)) if args.cert \
            else None
    else:
        from kubernetes import client

        from webhook.cli.live import Live, cluster_objects

        live = Live(args.kubeconfig, args.context, budget=args.request_timeout)
        snapshot = cluster_objects(live)
        try:
            installation = find(live, args.namespace)
        except InstallationError as exc:
            raise UsageError(str(exc)) from exc
        if args.namespace and installation is None:
            raise UsageError(f"-n {args.namespace}: no gpupool installation there (no webhook "
                             "configuration or Deployment labelled "
                             "app.kubernetes.io/part-of=gpupool)")
        host = host or (installation.host if installation else "")
        if args.cert:
            cert = certificate_from_file(args.cert, host)
        else:
            secret = args.tls_secret or (installation.tls_secret if installation else "")
            cert = (certificate_from_secret(live, secret, host) if secret
                    else _no_installation())
        listed = live.call("listing pods", client.CoreV1Api(live.api)
                           .list_pod_for_all_namespaces, optional=True,
                           field_selector="spec.nodeName!=")
        if listed is not None:
            pods = live.api.sanitize_for_serialization(listed).get("items") or []
            pods_by_node = gpu_pods_by_node(pods, policy)
    view = _view(snapshot, policy, {})
    rows = diagnose(view, policy)
    if args.output in ("json", "yaml"):
        _print_doc(to_document(rows, cert, pods_by_node,
                               installation.to_document() if installation else None),
                   args.output)
    else:
        described = None
        if installation is not None:
            described = [f"gpupool in namespace {installation.namespace}: "
                         + (", ".join(installation.configurations) or "no webhook "
                            "configuration found"),
                         "if its webhook is down, to let GPU pods through without it "
                         "(docs/install.md, 'When the webhook is down'):",
                         *(f"  {line}" for line in runbook(installation))]
        print(format_table(rows, cert, wide=args.output == "wide", pods_by_node=pods_by_node,
                           installation=described))
    healthy = all(r.state == "ok" and not r.hazards for r in rows) and (cert is None or cert.ok)
    return EXIT_OK if healthy else EXIT_FINDING


def _service_host(ref: str | None) -> str:
    """NAMESPACE/NAME of the webhooks' Service as the name the API server verifies."""
    from webhook import certs

    namespace, _, name = (ref or "").rpartition("/")
    if ref and not (namespace and name):
        raise UsageError(f"--webhook-service {ref!r}: use NAMESPACE/NAME")
    return certs.service_host(name or certs.DEFAULT_SERVICE,
                              namespace or certs.DEFAULT_NAMESPACE)


def _no_installation() -> Any:
    from webhook.cli.doctor import CertificateStatus

    return CertificateStatus("not found", problem="not checked (no gpupool installation found: "
                                                  "no webhook configuration or Deployment "
                                                  "labelled app.kubernetes.io/part-of=gpupool; "
                                                  "pass -n, --tls-secret NAMESPACE/NAME or "
                                                  "--cert FILE)")


# ------------------------------------------------------------------ completion


def cmd_completion(args: argparse.Namespace) -> int:
    from webhook.cli.completion import script

    print(script(args.parser_root, args.shell), end="")
    return EXIT_OK


# ------------------------------------------------------------------ parser


class _Parser(argparse.ArgumentParser):
    """argparse, with kubectl's habit for mistakes: one line naming the flag and where the
    help is, exit 2 (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value

    parse.__name__ = kind.__name__
    return parse


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def _output(p: argparse.ArgumentParser, default_name: str) -> None:
    p.add_argument("-o", "--output", choices=OUTPUTS, default=None,
                   help=f"json, yaml, or wide (more columns); default: {default_name}")


def _kube_flags(p: argparse.ArgumentParser, kubeconfig_help: str,
                group: argparse._MutuallyExclusiveGroup | None = None, *,
                request_timeout: bool = True) -> None:
    (group or p).add_argument("--kubeconfig", help=kubeconfig_help)
    p.add_argument("--context", help="the kubeconfig context to use (default: its current one)")
    if not request_timeout:  # a long-running command: each call has its own timeout
        return
    p.add_argument("--request-timeout", type=_positive(float), default=REQUEST_TIMEOUT,
                   metavar="SECONDS", help="how long the API server may take, all calls "
                                           "together (default: %(default)s)")


def _version_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action="version", version=f"gpupool {__version__}",
                   help="print gpupool's version and exit")


def _sub(sub: Any, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary,
        epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _version_flag(p)
    p.set_defaults(parser_of_command=p)  # the innermost command's parser, for its errors
    return p


def build_parser(prog: str = "gpupool") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=(
        "Route GPU pods to their node pool's scheduler and reject pods whose nodes lack the "
        "CDI devices they need."), formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 ok, 1 a finding (a pod denied, a node that fails its pods), "
               "2 bad input, 3 internal error")
    _version_flag(p)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)

    c = _sub(sub, "check", "decide offline on Pods and workload manifests", f"""
        # the demo cluster that `make run` serves: this pod is denied
        {prog} check -f docs/examples/pod-hami.yaml --cluster webhook/data/demo-cluster.yaml
        # every manifest under a directory, against the current context's nodes
        {prog} check -R -f deploy/ --context prod
        # what kubectl would send, from standard input
        helm template ./chart | {prog} check -f - --cluster nodes.yaml -o json""")
    c.add_argument("-f", "--filename", dest="files", action="append", required=True,
                   metavar="FILE", help="manifest file, directory, or - for standard input "
                                        "(repeatable)")
    c.add_argument("-R", "--recursive", action="store_true",
                   help="read the subdirectories of -f directories too")
    c.add_argument("--cluster", metavar="FILE",
                   help="'kubectl get nodes,runtimeclasses -o yaml' output (without it, the "
                        "cluster of --context/--kubeconfig, $KUBECONFIG or ~/.kube/config, as "
                        "kubectl finds it)")
    c.add_argument("--no-cluster", action="store_true",
                   help="check routing only: CDI devices are not checked (without this, "
                        "having no nodes to check against is an error, exit 2)")
    c.add_argument("--policy", metavar="FILE", help="PoolPolicy YAML (default: built-in policy)")
    c.add_argument("-n", "--namespace",
                   help="namespace for objects that name none (default: default)")
    c.add_argument("--namespace-labels", metavar="K=V,...",
                   help="labels of the objects' namespaces, as the server would see them")
    _kube_flags(c, "read the nodes and namespaces of a live cluster with this kubeconfig "
                   "(instead of --cluster)")
    _output(c, "one line per object")
    c.set_defaults(func=cmd_check)

    s = _sub(sub, "serve", "run the admission webhook under gunicorn", f"""
        {prog} serve --in-cluster --cert /certs/tls.crt --key /certs/tls.key \\
          --policy /policy/policy.yaml
        {prog} serve --demo --bind 127.0.0.1:8443 \\
          --cert .run/certs/tls.crt --key .run/certs/tls.key""")
    from webhook.server.config import ServeConfig as D  # the defaults, defined once

    s.add_argument("--bind", default=D.bind, metavar="HOST:PORT",
                   help="address to listen on (default: %(default)s)")
    s.add_argument("--cert", metavar="FILE",
                   help="serving certificate (PEM); reloaded when it changes")
    s.add_argument("--key", metavar="FILE", help="serving key (PEM); reloaded with --cert")
    s.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (debug only)")
    s.add_argument("--policy", metavar="FILE", help="PoolPolicy file; reloaded when it changes")
    src = s.add_argument_group("node source (one is required)").add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="FILE",
                     help="watch nodes and namespaces with this kubeconfig")
    src.add_argument("--in-cluster", action="store_true",
                     help="watch nodes and namespaces with the pod's service account")
    src.add_argument("--cluster", metavar="FILE", help="serve against a static node snapshot")
    src.add_argument("--demo", action="store_true", help="serve against the bundled demo "
                     "cluster (webhook/data/demo-cluster.yaml)")
    src.add_argument("--no-cluster", action="store_true",
                     help="serve with no nodes: routing only, CDI devices never checked (every "
                          "GPU pod gets a warning; /readyz and gpupool_node_source say so)")
    s.add_argument("--workers", type=_positive(int), default=D.workers,
                   help="worker processes (default: %(default)s)")
    s.add_argument("--worker-class", choices=("gevent", "gthread"), default=D.worker_class,
                   help="gevent (default): slow clients cost no thread; gthread: a thread per "
                        "request in progress")
    s.add_argument("--worker-connections", type=_positive(int), default=D.worker_connections,
                   help="gevent: open connections per worker (default: %(default)s)")
    s.add_argument("--threads", type=_positive(int), default=D.threads,
                   help="gthread: threads per worker (default: %(default)s)")
    s.add_argument("--handshake-deadline", type=_positive(float), default=D.handshake_deadline,
                   metavar="SECONDS", help="drop a connection whose TLS handshake takes longer "
                                           "(default: %(default)s)")
    s.add_argument("--request-deadline", type=_positive(float), default=D.request_deadline,
                   metavar="SECONDS",
                   help="drop a connection whose request, from its first byte, takes longer "
                        "(default: %(default)s)")
    s.add_argument("--keepalive", type=_non_negative_int, default=D.keepalive, metavar="SECONDS",
                   help="how long an idle keep-alive connection stays open (default: "
                        "%(default)s)")
    s.add_argument("--max-staleness", type=_positive(float), default=D.max_staleness,
                   metavar="SECONDS", help="seconds the node cache may go without a sync "
                                           "before /readyz fails (default: %(default)s)")
    s.add_argument("--audit-file", metavar="FILE",
                   help="also write audit records here (rotated by size; its directory must "
                        "exist)")
    s.add_argument("--audit-max-bytes", type=_non_negative_int, default=D.audit_max_bytes,
                   help="rotate the audit file past this size (0: never; default: "
                        "%(default)s)")
    s.add_argument("--audit-backups", type=_non_negative_int, default=D.audit_backups,
                   help="rotated audit files kept (default: %(default)s)")
    s.add_argument("--no-audit-stdout", action="store_true",
                   help="do not write audit records to standard output")
    s.add_argument("--log-level", default=D.loglevel,
                   choices=("debug", "info", "warning", "error", "critical"),
                   help="server log level (default: %(default)s)")
    s.set_defaults(func=cmd_serve)

    ce = _sub(sub, "certs", "generate or renew the webhook's certificates", f"""
        {prog} certs generate --out certs --service gpupool-webhook --namespace gpupool-system
        {prog} certs renew --out certs --renew-before-days 30
        {prog} certs ca-bundle --out certs""")
    cs = ce.add_subparsers(dest="certs_cmd", required=True, metavar="ACTION",
                           parser_class=_Parser)
    summaries = {
        "generate": ("a serving certificate, from the CA in --out (kept) or a new CA",
                     f"{prog} certs generate --out certs --dns localhost --ip 127.0.0.1"),
        "renew": ("reissue the serving certificate from the same CA when it is due",
                  f"{prog} certs renew --out certs --renew-before-days 30"),
        "ca-bundle": ("print the base64 CA for the webhooks' clientConfig.caBundle",
                      f"{prog} certs ca-bundle --out certs"),
    }
    for name, (summary, example) in summaries.items():
        x = _sub(cs, name, summary, example)
        x.add_argument("--out", required=True, metavar="DIR",
                       help="directory for the certificate files")
        if name == "ca-bundle":
            continue
        renewing = name == "renew"
        keeps = " (default: the certificate's own names)" if renewing else ""
        x.add_argument("--service", default=None if renewing else "gpupool-webhook",
                       help="the webhook's Service name" + (
                           keeps + "; given, its names are added" if renewing
                           else " (default: %(default)s)"))
        x.add_argument("--namespace", default=None if renewing else "gpupool-system",
                       help="the webhook's namespace" + (
                           keeps if renewing else " (default: %(default)s)"))
        x.add_argument("--dns", action="append", default=[],
                       help="extra DNS SAN, an RFC 1123 host name (repeatable)")
        x.add_argument("--ip", action="append", default=[], help="extra IP SAN (repeatable)")
        x.add_argument("--days", type=int, default=365,
                       help="serving certificate validity in days, at least 1 and at most what "
                            "the CA has left (default: %(default)s)")
        x.add_argument("--algorithm", choices=["ecdsa", "rsa"],
                       default=None if renewing else "ecdsa",
                       help="key algorithm" + (" (default: the replaced key's)" if renewing
                                               else " (default: %(default)s)"))
        if name == "generate":
            x.add_argument("--force", action="store_true",
                           help="replace an existing CA too (installed caBundles stop working)")
        else:
            x.add_argument("--renew-before-days", type=float, default=30,
                           help="renew when fewer days are left (default: %(default)s)")
            x.add_argument("--force", action="store_true", help="renew even if not due")
    ce.set_defaults(func=cmd_certs)

    a = _sub(sub, "audit", "read the audit log of rejections", f"""
        {prog} audit --file /var/log/gpupool/audit.log --since 1h --reason cdidevicemissing
        kubectl logs -n gpupool-system deploy/gpupool-webhook | {prog} audit --file - -o json""")
    a.add_argument("--file", default="/var/log/gpupool/audit.log",
                   help="log file (rotated files beside it are read too), or - for standard "
                        "input (default: %(default)s)")
    a.add_argument("--since", metavar="DURATION",
                   help="only records newer than this (30m, 1h, 2d)")
    a.add_argument("-n", "--namespace", help="only records of this namespace")
    reason = a.add_argument("--reason", type=_reason_code, metavar="CODE",
                            help="only records with this reason code (any case), e.g. "
                                 "CDIDeviceMissing")
    from webhook.engine import Reason

    reason.completions = Reason.codes()  # type: ignore[attr-defined]  # read by completion
    dr = a.add_mutually_exclusive_group()
    dr.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, default=None,
                    help="only server-side dry runs")
    dr.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False,
                    help="only real requests")
    _output(a, "summary and table")
    a.set_defaults(func=cmd_audit)

    ag = _sub(sub, "agent", "publish this node's CDI inventory on its Node", f"""
        # what the agent would publish on this machine
        {prog} agent --once --print
        # as the DaemonSet runs it
        {prog} agent --node-name "$NODE_NAME\"""")
    ag.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                    help="the Node to annotate (default: $NODE_NAME)")
    ag.add_argument("--cdi-dir", action="append", default=[], metavar="DIR",
                    help="CDI spec directory, in priority order (default: /etc/cdi, /var/run/cdi"
                         " or containerd's cdi_spec_dirs)")
    ag.add_argument("--runtime-config", metavar="FILE", help="the NVIDIA runtime's config.toml")
    ag.add_argument("--containerd-config", metavar="FILE",
                    help="containerd's config.toml (the drop-ins it imports are read too)")
    ag.add_argument("--host-root", default="", metavar="DIR",
                    help="where the host's root is mounted, for containerd's absolute import "
                         "paths (the DaemonSet: /host)")
    ag.add_argument("--driver-gpus-dir", default="/proc/driver/nvidia/gpus", metavar="DIR",
                    help="where the NVIDIA driver lists the node's GPUs ('' to not read it)")
    ag.add_argument("--kubelet-checkpoint", default="", metavar="FILE",
                    help="the kubelet's device-manager checkpoint, for the MIG devices the "
                         "device plugin registered (the DaemonSet: /host/var/lib/kubelet/"
                         "device-plugins/kubelet_internal_checkpoint)")
    ag.add_argument("--once", action="store_true", help="observe (and publish) once, then exit")
    ag.add_argument("--print", action="store_true", help="print the annotation value")
    ag.add_argument("--poll-interval", type=_positive(float), default=30.0, metavar="SECONDS",
                    help="how often to look at the node's files (default: %(default)s)")
    ag.add_argument("--settle-seconds", type=float, default=5.0, metavar="SECONDS",
                    help="how long a changed file that fails to parse keeps its last good content")
    _kube_flags(ag, "kubeconfig (default: the pod's service account)", request_timeout=False)
    ag.set_defaults(func=cmd_agent)

    dc = _sub(sub, "doctor", "one row per GPU node: will its pool's pods start?", f"""
        {prog} doctor                      # the current kubectl context
        {prog} doctor --context prod -o wide
        {prog} doctor -n gpu-admission         # a release installed in another namespace
        {prog} doctor --cluster nodes.yaml --cert certs/tls.crt""")
    src = dc.add_mutually_exclusive_group()
    src.add_argument("--cluster", metavar="FILE",
                     help="'kubectl get nodes,runtimeclasses -o yaml' output")
    _kube_flags(dc, "query a live cluster with this kubeconfig (default: $KUBECONFIG or "
                    "~/.kube/config)", src)
    dc.add_argument("--policy", metavar="FILE", help="PoolPolicy YAML (default: built-in)")
    dc.add_argument("-n", "--namespace",
                    help="the namespace gpupool is installed in (default: found by the label "
                         "app.kubernetes.io/part-of=gpupool, any release)")
    dc.add_argument("--tls-secret", metavar="NAMESPACE/NAME",
                    help="the webhook's serving certificate Secret, whose expiry and names are "
                         "reported (default: the one the webhook Deployment mounts)")
    dc.add_argument("--cert", metavar="FILE",
                    help="report this serving certificate instead of the Secret's")
    dc.add_argument("--webhook-service", metavar="NAMESPACE/NAME",
                    help="the Service the API server calls, whose name the certificate must "
                         "cover (default: the webhook configurations'; with --cluster: "
                         "gpupool-system/gpupool-webhook)")
    _output(dc, "table")
    dc.set_defaults(func=cmd_doctor)

    co = _sub(sub, "completion", "print a shell completion script", f"""
        source <({prog} completion bash)
        {prog} completion zsh > "${{fpath[1]}}/_gpupool\"""")
    co.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")
    co.set_defaults(func=cmd_completion, parser_root=p)
    return p


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None, prog: str = "gpupool") -> int:
    parser = build_parser(prog)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, with that command's help
        getattr(args, "parser_of_command", parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    from webhook.certs import CertError
    from webhook.engine import PolicyError
    from webhook.kube import KubeError
    from webhook.node.spec import CDIError
    from webhook.snapshot import SnapshotError

    def fail(text: str, code: int = EXIT_USAGE) -> int:
        print(f"{prog}: error: {text}", file=sys.stderr)
        return code

    try:
        return int(args.func(args))
    except (UsageError, PolicyError, SnapshotError, CertError, CDIError, KubeError) as exc:
        return fail(_one_line(exc))
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file named on the command line, as the system reports it
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"{where}{exc.strerror or _one_line(exc)}")
    except Exception as exc:
        if os.environ.get("GPUPOOL_DEBUG"):
            raise
        return fail(f"internal error ({type(exc).__name__}: {_one_line(exc)}); this is a bug: "
                    "rerun with GPUPOOL_DEBUG=1 for the traceback and report it",
                    EXIT_INTERNAL)


def kubectl_plugin_main() -> int:
    """``kubectl gpupool ...``: kubectl finds this executable on PATH as a plugin, and passes
    ``--context``, ``-n`` and ``--kubeconfig`` through to the subcommand."""
    return main(prog="kubectl gpupool")


if __name__ == "__main__":
    sys.exit(main())
