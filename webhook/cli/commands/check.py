"""``gpupool check``: decide offline on Pods and workload manifests, against a cluster
snapshot, a live cluster or (said out loud) none."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from webhook.cli.common import (
    EXIT_FINDING,
    EXIT_OK,
    UsageError,
    add_command,
    add_kube_flags,
    add_kube_version,
    add_output,
    cluster_source,
    load_nodes,
    load_policy,
    namespace_labels,
    print_doc,
    view_of,
)
from webhook.engine import meta_of

if TYPE_CHECKING:
    from webhook.files.snapshot import ClusterFile


def cmd_check(args: argparse.Namespace) -> int:
    from webhook.cli.check import expand_paths, format_text, load_manifests, run_check, to_document

    policy = load_policy(args.policy)
    labels = namespace_labels(args.namespace_labels)
    manifests = load_manifests(expand_paths(args.files, args.recursive),
                               default_namespace=args.namespace)
    namespaces = {meta_of(obj).get("namespace") or "default"
                  for _, objs in manifests for obj in objs}
    snapshot = _check_source(args)
    view = view_of(snapshot, policy, labels, sorted(namespaces), args.kube_version)
    if args.running:
        return _running(args, manifests, view, policy)
    report = run_check(manifests, view, policy)
    if args.no_cluster:
        report.cdi_unchecked = "--no-cluster: routing only"
    if args.output in ("json", "yaml"):
        print_doc(to_document(report), args.output)
        # Also on stderr, where a person watching a pipeline sees them.
        for line in ([f"note: CDI devices not checked: {report.cdi_unchecked}"]
                     if report.cdi_unchecked else []) + report.skipped:
            print(line, file=sys.stderr)
    else:
        print(format_text(report, wide=args.output == "wide"))
    return report.exit_code


def _running(args: argparse.Namespace, manifests: list[tuple[str, list[dict[str, Any]]]],
             view: Any, policy: Any) -> int:
    """``--running``: the pods in the files are running pods (``kubectl get pods -A -o
    yaml``), re-checked where they are against the cluster state given: which of them the
    change would break, on which node and why."""
    from webhook.cli.atrisk import answers, format_answers, pods_of

    pods = pods_of(obj for _, objs in manifests for obj in objs)
    if not pods:
        raise UsageError(f"--running: no Pod in {', '.join(p for p, _ in manifests)}; pass "
                         "'kubectl get pods -A -o yaml' output")
    found = answers(pods, view, policy)
    if args.output in ("json", "yaml"):
        print_doc({"kind": "RunningPodsReport", "pods": [a.to_json() for a in found],
                   "atRisk": sum(a.outcome.at_risk for a in found)}, args.output)
    else:
        print(format_answers(found, wide=args.output == "wide"))
    return EXIT_FINDING if any(a.outcome.at_risk for a in found) else EXIT_OK


def _check_source(args: argparse.Namespace) -> ClusterFile:
    """The nodes ``check`` decides against, read as kubectl would find a cluster. A gate on
    the exit code must never pass a pod the CDI check did not see: with no nodes to check
    against, that is an error (exit 2) naming the input, unless ``--no-cluster`` says so."""
    from webhook.files.snapshot import ClusterFile

    source = cluster_source(args, "nodes to check against", "check routing only")
    if source == "none":
        return ClusterFile([], {}, None)
    if source == "file":
        snapshot = load_nodes(args.cluster)
        if not snapshot.nodes:
            raise UsageError(f"--cluster {args.cluster}: holds no Node, so CDI devices cannot "
                             "be checked; pass 'kubectl get nodes -o yaml' output (or "
                             "--no-cluster to check routing only)")
        return snapshot
    from webhook.cli.live import Live, cluster_objects

    live = Live(args.kubeconfig, args.context, budget=args.request_timeout)
    snapshot = cluster_objects(live)
    if not snapshot.nodes:
        raise UsageError(f"the cluster at {live.host} has no Node, so CDI devices cannot be "
                         "checked (or --no-cluster to check routing only)")
    return snapshot


def register(sub: Any, prog: str) -> None:
    c = add_command(sub, "check", "decide offline on Pods and workload manifests", f"""
        # the demo cluster that `make run` serves: this pod is denied
        {prog} check -f docs/examples/pod-hami.yaml --cluster webhook/data/demo-cluster.yaml
        # every manifest under a directory, against the current context's nodes
        {prog} check -R -f deploy/ --context prod
        # what kubectl would send, from standard input
        helm template ./chart | {prog} check -f - --cluster nodes.yaml -o json
        # before a change: which running pods would the planned cluster state break?
        kubectl get pods -A -o yaml > pods.yaml
        {prog} check --running -f pods.yaml --cluster planned-nodes.yaml""")
    c.add_argument("-f", "--filename", dest="files", action="append", required=True,
                   metavar="FILE", help="manifest file, directory, or - for standard input "
                                        "(repeatable)")
    c.add_argument("-R", "--recursive", action="store_true",
                   help="read the subdirectories of -f directories too")
    c.add_argument("--cluster", metavar="FILE",
                   help="'kubectl get nodes,runtimeclasses -o yaml' output (without it, the "
                        "cluster of --context/--kubeconfig, $KUBECONFIG or ~/.kube/config, as "
                        "kubectl finds it)")
    c.add_argument("--running", action="store_true",
                   help="the files hold running pods ('kubectl get pods -A -o yaml'): list "
                        "those the cluster state given (--cluster: a planned one) would "
                        "break, on their nodes, as 'gpupool scan' would report them; exit 1 "
                        "if any. Exact where the nodes carry what each pod holds "
                        "(gpupool.io/held-devices, published by the agent: keep it on "
                        "planned nodes) or the pods HAMi's hami.io/vgpu-devices-allocated; "
                        "a started pod with neither is MayFailOnRestart, since its restart "
                        "gets back what the kubelet cached, not a new allocation")
    c.add_argument("--no-cluster", action="store_true",
                   help="check routing only: CDI devices are not checked (without this, "
                        "having no nodes to check against is an error, exit 2)")
    c.add_argument("--policy", metavar="FILE", help="PoolPolicy YAML (default: built-in policy)")
    c.add_argument("-n", "--namespace",
                   help="namespace for objects that name none (default: default)")
    c.add_argument("--namespace-labels", metavar="K=V,...",
                   help="labels of the objects' namespaces, as the server would see them")
    add_kube_flags(c, "read the nodes and namespaces of a live cluster with this kubeconfig "
                   "(instead of --cluster)")
    add_kube_version(c)
    add_output(c, "one line per object")
    c.set_defaults(func=cmd_check)

