"""One way to reach the API server for every shell (serve, agent, doctor): a kubeconfig with
an optional context, or the pod's service account.

Every way this goes wrong for a user (no kubeconfig, a context that is not in it, running the
agent off-cluster, an API server that does not answer) becomes one ``KubeError`` line that
names the input and what to do, never a client library traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.engine import HAMI_PLUGIN_SELECTOR

DEFAULT_KUBECONFIG = "~/.kube/config"
#: The webhook's Service and namespace as the chart (release ``gpupool``) and the kustomize
#: base name them: what ``certs`` issues for, and ``doctor`` checks against, by default.
WEBHOOK_SERVICE, WEBHOOK_NAMESPACE = "gpupool-webhook", "gpupool-system"
#: Seconds a CLI command's calls to the API server may take, all together, before it is
#: reported as unreachable (``--request-timeout``).
REQUEST_TIMEOUT = 30.0
#: The DRA API gpupool reads.
DRA_GROUP = "resource.k8s.io"


@dataclass(frozen=True)
class Source:
    """One kind of object gpupool reads from the cluster: how it is listed (and so watched,
    from the listing's resourceVersion), and what gpupool does while it cannot list it."""

    kind: str
    resource: str  # the plural, as RBAC and the API's paths name it
    group: str  # "" for the core group
    version: str
    #: without it the webhook is not ready (``/readyz``) and ``check`` stops
    required: bool
    #: what gpupool decides without it
    absent: str
    label_selector: str | None = None
    #: (client class, method) for the built-in kinds; custom objects go through
    #: ``CustomObjectsApi.list_cluster_custom_object``
    typed: tuple[str, str] | None = None

    def lister(self, api_client: Any) -> Callable[..., Any]:
        """The client call that lists every object of this kind (and, with ``watch=True``,
        watches them)."""
        import functools

        from kubernetes import client

        call: Callable[..., Any]
        if self.typed is not None:
            api_class, method = self.typed
            call = getattr(getattr(client, api_class)(api_client), method)
        else:
            call = functools.partial(client.CustomObjectsApi(api_client)
                                     .list_cluster_custom_object,
                                     self.group, self.version, self.resource)
        if self.label_selector:
            return functools.partial(call, label_selector=self.label_selector)
        return call


_NOT_READY = "the webhook is not ready and decides nothing until it is listed"
_DRA = "DRA claims are not judged (a warning says so)"
_DELIVERY = "``delivery: detect`` reads each node's CDI specs on disk alone"
#: Every kind gpupool reads, in one place: the server's watch, ``check``'s and ``doctor``'s
#: live listing and the chart's ClusterRole all follow it (a cluster file may hold any).
SOURCES = (
    Source("Node", "nodes", "", "v1", True, _NOT_READY, typed=("CoreV1Api", "list_node")),
    Source("Namespace", "namespaces", "", "v1", True, _NOT_READY,
           typed=("CoreV1Api", "list_namespace")),
    Source("RuntimeClass", "runtimeclasses", "node.k8s.io", "v1", False,
           "every RuntimeClass is taken to name its handler",
           typed=("NodeV1Api", "list_runtime_class")),
    Source("DeviceClass", "deviceclasses", DRA_GROUP, "v1", False, _DRA),
    Source("ResourceSlice", "resourceslices", DRA_GROUP, "v1", False, _DRA),
    Source("ResourceClaim", "resourceclaims", DRA_GROUP, "v1", False, _DRA),
    Source("ResourceClaimTemplate", "resourceclaimtemplates", DRA_GROUP, "v1", False, _DRA),
    Source("ClusterPolicy", "clusterpolicies", "nvidia.com", "v1", False, _DELIVERY),
    Source("DaemonSet", "daemonsets", "apps", "v1", False, _DELIVERY,
           label_selector=HAMI_PLUGIN_SELECTOR,
           typed=("AppsV1Api", "list_daemon_set_for_all_namespaces")),
)
SOURCE = {s.kind: s for s in SOURCES}


class KubeError(RuntimeError):
    pass


def kubeconfig_path(kubeconfig: str | None) -> str:
    """The file the client will read, as kubectl chooses it."""
    return kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser(DEFAULT_KUBECONFIG)


def check_kubeconfig(kubeconfig: str | None, context: str | None = None) -> None:
    """What ``api_client`` would refuse, found without importing the client library: the
    server checks its flags in the master process, where importing urllib3 before gevent
    patches ssl in the workers would break every TLS call they make."""
    import yaml

    from webhook.api.yamltext import yaml_error

    path = kubeconfig_path(kubeconfig)
    files = [os.path.expanduser(p) for p in path.split(os.pathsep) if p]
    docs = []
    for f in files:
        if not os.path.isfile(f):
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                docs.append(yaml.safe_load(fh))
        except yaml.YAMLError as exc:
            raise KubeError(f"kubeconfig {f}: not a usable kubeconfig ({yaml_error(exc)})"
                            ) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeError(f"kubeconfig {f}: not a usable kubeconfig ({exc})") from exc
    if not docs:
        raise KubeError(f"kubeconfig {path}: no such file; pass --kubeconfig FILE (or set "
                        "KUBECONFIG)")
    if not all(isinstance(d, dict) for d in docs):
        raise KubeError(f"kubeconfig {path}: not a usable kubeconfig (not a mapping)")
    contexts = {c.get("name") for d in docs for c in d.get("contexts") or ()
                if isinstance(c, dict)}
    wanted = context or next((d.get("current-context") for d in docs
                              if d.get("current-context")), None)
    if not wanted:
        raise KubeError(f"kubeconfig {path}: no current-context; pass --context")
    if wanted not in contexts:
        raise KubeError(f"kubeconfig {path}: no context {wanted!r} in it (see kubectl config "
                        "get-contexts)")


def check_in_cluster() -> None:
    """What ``api_client(in_cluster=True)`` would refuse, without the client library."""
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    if not (os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(token)):
        raise KubeError("not running in a pod (no KUBERNETES_SERVICE_HOST or service account "
                        "token); pass --kubeconfig FILE to run outside the cluster")


def api_client(kubeconfig: str | None = None, context: str | None = None,
               in_cluster: bool = False, retries: int | bool | None = None) -> Any:
    """``retries``: urllib3's retries for each call (None: the library's default of three;
    a command that promises a total time passes False)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if in_cluster:
        try:
            config.load_incluster_config()
        except ConfigException as exc:
            raise KubeError(f"not running in a pod ({exc}); pass --kubeconfig FILE to run "
                            "outside the cluster") from exc
        return client.ApiClient()
    check_kubeconfig(kubeconfig, context)  # missing, unparsable, no such context
    path = kubeconfig_path(kubeconfig)
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context,
                                client_configuration=configuration)
        if retries is not None:
            configuration.retries = retries
        return client.ApiClient(configuration=configuration)
    except ConfigException as exc:
        raise KubeError(f"kubeconfig {path}: {exc}") from exc
    except (OSError, ValueError, TypeError, AttributeError) as exc:  # right shape, bad values
        raise KubeError(f"kubeconfig {path}: not a usable kubeconfig ({exc})") from exc


def server_version(api_client: Any, **kwargs: Any) -> dict[str, Any] | None:
    """The API server's ``/version`` document (``kwargs``: the client's call options, such
    as ``_request_timeout``): which release's DRA allocator places the pods. Read by the
    watch and by the CLI against a live cluster alike."""
    from kubernetes import client

    found = client.VersionApi(api_client).get_code(**kwargs)
    doc = api_client.sanitize_for_serialization(found)
    return doc if isinstance(doc, dict) else None


def api_error(exc: BaseException, api: Any = None) -> KubeError | None:
    """The one-line form of an error from calling the API server, or None if ``exc`` is not
    one."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    host = getattr(getattr(api, "configuration", None), "host", None) or "the API server"
    if isinstance(exc, ApiException):
        what = {401: "not authenticated", 403: "forbidden"}.get(exc.status or 0, exc.reason)
        return KubeError(f"{host}: {exc.status} {what}; check the credentials of --kubeconfig "
                         "and --context")
    if isinstance(exc, HTTPError):
        reason = getattr(exc, "reason", None) or exc
        return KubeError(f"cannot reach the API server at {host}: {reason}; check "
                         "--kubeconfig and --context")
    return None
