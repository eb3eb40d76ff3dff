"""``gpupool policy compile``: the routing the API server can do itself, as a
MutatingAdmissionPolicy and its binding (``webhook.engine.native.routing``), for
``kubectl apply -f -``; and the condition that keeps gpupool's mutating webhook to the pods
the policy leaves (``--webhook-condition``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    add_command,
    add_kube_flags,
    cluster_source,
    load_nodes,
    load_policy,
    print_doc,
    view_of,
)


def cmd_compile(args: argparse.Namespace) -> int:
    from webhook.engine import (
        EXCLUDED_NAMESPACES,
        claimable_pools,
        compile_policy,
        routing_facts,
        webhook_condition,
        why_left,
    )

    policy = load_policy(args.policy)
    live = None
    view = None
    source = cluster_source(args, "cluster to compile against",
                            "compile for a cluster with no GPU Operator, HAMi plugin "
                            "configuration, MIG device or DRA extended resource")
    if source == "file":
        view = view_of(load_nodes(args.cluster), policy, {})
    elif source == "live":
        from webhook.cli.live import Live, cluster_objects

        live = Live(args.kubeconfig, args.context, budget=args.request_timeout)
        view = view_of(cluster_objects(live), policy, {})
    facts = routing_facts(view, policy)
    if args.webhook_condition:
        print_doc(webhook_condition(policy, facts), args.output or "json")
        return EXIT_OK
    if live is not None and view is not None and not args.exclude_namespace:
        # As the server compiles it: the pods gpupool's own webhook sees (its selectors).
        from webhook.cluster.routingpolicy import Cluster, read, target

        objs = target(policy, view, read(Cluster(live.api))[1]).objects
    else:
        objs = compile_policy(policy, facts, args.exclude_namespace or
                              list(EXCLUDED_NAMESPACES))
    if args.output == "json":
        print_doc({"apiVersion": "v1", "kind": "List", "items": objs}, "json")
    else:
        import yaml

        print(yaml.safe_dump_all(objs, sort_keys=False), end="")
    claimable = claimable_pools(policy, facts)
    left = [p.name for p in policy.pools if p.name not in claimable]
    if left:
        print(f"note: pools {', '.join(left)} are routed by the webhook alone: "
              f"{why_left(policy, facts, left)}", file=sys.stderr)
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    p = add_command(sub, "policy", "compile the PoolPolicy's routing for the API server", f"""
        # routing in the API server (Kubernetes 1.36 or newer), for the current context
        {prog} policy compile | kubectl apply -f -
        # and the condition that keeps gpupool's mutating webhook to the other pods
        {prog} policy compile --webhook-condition""")
    inner = p.add_subparsers(dest="policy_cmd", required=True, metavar="COMMAND")
    c = add_command(inner, "compile", "the routing policy as a MutatingAdmissionPolicy and "
                                      "its binding (YAML on standard output)", f"""
        {prog} policy compile --policy policy.yaml --cluster nodes.yaml
        {prog} policy compile --no-cluster -o json""")
    c.add_argument("--policy", metavar="FILE", help="PoolPolicy YAML (default: built-in policy)")
    c.add_argument("--cluster", metavar="FILE",
                   help="'kubectl get nodes,runtimeclasses,deviceclasses -o yaml' output: what "
                        "of the cluster decides which pools the API server may route "
                        "(default: the live cluster, as kubectl finds it)")
    c.add_argument("--no-cluster", action="store_true",
                   help="compile for a cluster with no GPU Operator ClusterPolicy, HAMi "
                        "plugin configuration, MIG device or DRA extended resource")
    c.add_argument("--exclude-namespace", action="append", metavar="NS",
                   help="a namespace the policy never sees, as the webhooks' "
                        "namespaceSelector (repeatable; default: kube-system, "
                        "kube-node-lease, gpupool-system)")
    c.add_argument("--webhook-condition", action="store_true",
                   help="print the matchCondition to add to the mutate.gpupool.io webhook "
                        "instead: it skips the pods the policy routed")
    c.add_argument("-o", "--output", choices=("yaml", "json"), default=None,
                   help="yaml (default) or json")
    add_kube_flags(c, "read the cluster of this kubeconfig (instead of --cluster)")
    c.set_defaults(func=cmd_compile)
