"""Where gpupool is installed in a live cluster, found by its labels rather than by the
default release's names: a Helm release called anything, in any namespace, or the kustomize
base, all label their objects ``app.kubernetes.io/part-of=gpupool``.

``doctor`` reads the serving certificate from what this finds (the Secret the webhook
Deployment mounts), checks it against the name the API server will verify (the webhook
configurations' Service), and prints the outage runbook with these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from webhook.cli.live import Live

PART_OF = "app.kubernetes.io/part-of=gpupool"
#: The volume of the webhook Deployment that holds the serving pair (chart and kustomize base).
TLS_VOLUME = "tls"
POLICY_VOLUME = "policy"


@dataclass
class Installation:
    """One gpupool install: its namespace and the names a runbook needs."""

    namespace: str
    deployment: str = ""
    #: "mutatingwebhookconfiguration/NAME" and "validatingwebhookconfiguration/NAME"
    configurations: list[str] = field(default_factory=list)
    #: the host the API server verifies the serving certificate against
    host: str = ""
    tls_secret: str = ""  # NAMESPACE/NAME
    #: the ConfigMap the webhook reads its PoolPolicy from (NAMESPACE/NAME; "" unknown)
    policy_configmap: str = ""

    def to_document(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "deployment": self.deployment,
                "webhookConfigurations": self.configurations, "verifiedHost": self.host,
                "tlsSecret": self.tls_secret, "policyConfigMap": self.policy_configmap}


class InstallationError(Exception):
    pass


def find(live: Live, namespace: str | None = None) -> Installation | None:
    """The installation in ``namespace``, or the only one in the cluster; None when there is
    none this identity can see. Several without ``namespace`` is an error naming them."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(live.api)
    configs: list[tuple[str, dict[str, Any]]] = []
    for kind, lister in (("mutatingwebhookconfiguration",
                          admission.list_mutating_webhook_configuration),
                         ("validatingwebhookconfiguration",
                          admission.list_validating_webhook_configuration)):
        found = _items(live, live.call(f"listing {kind}s", lister, label_selector=PART_OF,
                                       optional=True))
        configs.extend((kind, c) for c in found)
    apps = client.AppsV1Api(live.api)
    listed = live.call("listing deployments", apps.list_deployment_for_all_namespaces,
                       label_selector=PART_OF, optional=True)
    webhooks = [d for d in _items(live, listed) if _tls_secret_of(d)]
    by_ns: dict[str, Installation] = {}
    for dep in webhooks:
        meta = dep.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        policy = _volume_of(dep, POLICY_VOLUME, "configMap", "name")
        by_ns.setdefault(ns, Installation(ns, str(meta.get("name") or ""),
                                          tls_secret=f"{ns}/{_tls_secret_of(dep)}",
                                          policy_configmap=f"{ns}/{policy}" if policy else ""))
    for kind, cfg in configs:
        for wh in cfg.get("webhooks") or ():
            cc = wh.get("clientConfig") or {}
            service = cc.get("service")
            if service:
                ns = str(service.get("namespace") or "")
                host = f"{service.get('name')}.{ns}.svc"
            elif cc.get("url"):
                # a URL names no Service: the release's Deployment says where it lives
                ns = _instance_namespace(cfg, webhooks)
                host = urlsplit(str(cc["url"])).hostname or ""
            else:
                continue
            if namespace and ns != namespace:
                continue
            inst = by_ns.setdefault(ns, Installation(ns))
            inst.host = inst.host or host
            name = f"{kind}/{(cfg.get('metadata') or {}).get('name')}"
            if name not in inst.configurations:
                inst.configurations.append(name)
    if namespace:
        return by_ns.get(namespace)
    by_ns.pop("", None)  # configurations whose installation could not be placed
    if len(by_ns) > 1:
        raise InstallationError(f"gpupool is installed in several namespaces "
                                f"({', '.join(sorted(by_ns))}); pass -n NAMESPACE")
    return next(iter(by_ns.values()), None)


def _items(live: Live, listed: Any) -> list[dict[str, Any]]:
    """A list call's items as the API server sent them (plain mappings)."""
    if listed is None:
        return []
    doc = live.api.sanitize_for_serialization(listed)
    return [i for i in doc.get("items") or () if isinstance(i, dict)]


def _tls_secret_of(dep: dict[str, Any]) -> str:
    return _volume_of(dep, TLS_VOLUME, "secret", "secretName")


def _volume_of(dep: dict[str, Any], volume: str, kind: str, key: str) -> str:
    """What the Deployment's volume ``volume`` mounts (a Secret's or ConfigMap's name)."""
    spec = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
    for vol in spec.get("volumes") or ():
        if vol.get("name") == volume and isinstance(vol.get(kind), dict):
            return str(vol[kind].get(key) or "")
    return ""


def _instance_namespace(cfg: dict[str, Any], deployments: list[dict[str, Any]]) -> str:
    """A configuration that calls a URL names no Service: its Helm release does."""
    key = "app.kubernetes.io/instance"
    instance = ((cfg.get("metadata") or {}).get("labels") or {}).get(key)
    for dep in deployments:
        meta = dep.get("metadata") or {}
        if instance and (meta.get("labels") or {}).get(key) == instance:
            return str(meta.get("namespace") or "")
    return ""


def runbook(inst: Installation) -> list[str]:
    """The outage runbook's commands with this installation's names (docs/install.md, "When
    the webhook is down")."""
    ignore = "'[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"Ignore\"}]'"
    lines = [f"kubectl -n {inst.namespace} get pods,endpoints -l {PART_OF}"]
    lines += [f"kubectl patch {name} --type=json -p {ignore}" for name in inst.configurations]
    return lines
