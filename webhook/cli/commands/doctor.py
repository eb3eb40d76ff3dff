"""``gpupool doctor``: one row per GPU node, gpupool's installation, its certificate."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.common import (
    EXIT_FINDING,
    EXIT_OK,
    UsageError,
    add_command,
    add_kube_flags,
    add_kube_version,
    add_output,
    load_nodes,
    load_policy,
    print_doc,
    view_of,
)


def cmd_doctor(args: argparse.Namespace) -> int:
    from webhook.cli.doctor import (
        certificate_from_file,
        certificate_from_secret,
        diagnose,
        format_table,
        to_document,
    )
    from webhook.cli.installation import InstallationError, find, runbook

    policy = load_policy(args.policy)
    host = _service_host(args.webhook_service) if args.webhook_service else ""
    pods: list[dict[str, Any]] | None = None
    installation = None
    live: Any = None
    if args.cluster:
        snapshot = load_nodes(args.cluster)
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
                           field_selector="status.phase!=Succeeded,status.phase!=Failed")
        if listed is not None:
            pods = live.api.sanitize_for_serialization(listed).get("items") or []
    view = view_of(snapshot, policy, {}, kube_version=args.kube_version)
    rows = diagnose(view, policy)
    routing = None
    if live is not None:
        routing = _routing(live, view, policy, args.policy, installation)
    release = view.release()
    at_risk = None
    if pods is not None:
        from webhook.cli.atrisk import answers, by_node

        at_risk = by_node(answers(pods, view, policy))
    if args.output in ("json", "yaml"):
        doc = to_document(rows, cert, at_risk,
                          installation.to_document() if installation else None, release)
        doc["routing"] = None if routing is None else routing.to_document()
        print_doc(doc, args.output)
    else:
        described = None
        if installation is not None:
            described = [f"gpupool in namespace {installation.namespace}: "
                         + (", ".join(installation.configurations) or "no webhook "
                            "configuration found"),
                         "if its webhook is down, to let GPU pods through without it "
                         "(docs/install.md, 'When the webhook is down'):",
                         *(f"  {line}" for line in runbook(installation))]
        if routing is not None:
            described = [routing.text, *(described or [])]
        print(format_table(rows, cert, wide=args.output == "wide", at_risk=at_risk,
                           installation=described, release=release))
    healthy = all(r.state == "ok" and not r.hazards for r in rows) and (cert is None or cert.ok) \
        and not at_risk and release.supported and (routing is None or routing.ok)
    return EXIT_OK if healthy else EXIT_FINDING


def _routing(live: Any, view: Any, policy: Any, policy_path: str | None,
             installation: Any) -> Any:
    """Where GPU pods are routed, judged against the PoolPolicy the installation serves
    (its ConfigMap), else the one given or built in. None where this identity may not
    read it."""
    from webhook.cli.doctor import routing_report

    source = f"--policy {policy_path}" if policy_path else "the built-in policy"
    ref = installation.policy_configmap if installation is not None else ""
    if not policy_path and ref:
        from kubernetes import client

        from webhook.engine import load_policy_text

        ns, _, name = ref.partition("/")
        cm = live.call(f"reading ConfigMap {ref}", client.CoreV1Api(live.api)
                       .read_namespaced_config_map, name, ns, optional=True)
        text = (cm.data or {}).get("policy.yaml") if cm is not None else None
        if text:
            try:
                policy, source = load_policy_text(text), f"the PoolPolicy in ConfigMap {ref}"
            except ValueError:
                source += f" (ConfigMap {ref} does not load)"
    return live.call("reading the routing policy",
                     lambda _request_timeout=None: routing_report(live.api, view, policy,
                                                                  source),
                     optional=True)


def _service_host(ref: str | None) -> str:
    """NAMESPACE/NAME of the webhooks' Service as the name the API server verifies."""
    from webhook.cluster.kube import WEBHOOK_NAMESPACE, WEBHOOK_SERVICE
    from webhook.files import certs

    namespace, _, name = (ref or "").rpartition("/")
    if ref and not (namespace and name):
        raise UsageError(f"--webhook-service {ref!r}: use NAMESPACE/NAME")
    return certs.service_host(name or WEBHOOK_SERVICE, namespace or WEBHOOK_NAMESPACE)


def _no_installation() -> Any:
    from webhook.cli.doctor import CertificateStatus

    return CertificateStatus("not found", problem="not checked (no gpupool installation found: "
                                                  "no webhook configuration or Deployment "
                                                  "labelled app.kubernetes.io/part-of=gpupool; "
                                                  "pass -n, --tls-secret NAMESPACE/NAME or "
                                                  "--cert FILE)")


def register(sub: Any, prog: str) -> None:
    dc = add_command(sub, "doctor", "one row per GPU node: will its pool's pods start?", f"""
        {prog} doctor                      # the current kubectl context
        {prog} doctor --context prod -o wide
        {prog} doctor -n gpu-admission         # a release installed in another namespace
        {prog} doctor --cluster nodes.yaml --cert certs/tls.crt""")
    src = dc.add_mutually_exclusive_group()
    src.add_argument("--cluster", metavar="FILE",
                     help="'kubectl get nodes,runtimeclasses -o yaml' output")
    add_kube_flags(dc, "query a live cluster with this kubeconfig (default: $KUBECONFIG or "
                    "~/.kube/config)", src)
    add_kube_version(dc)
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
    add_output(dc, "table")
    dc.set_defaults(func=cmd_doctor)

