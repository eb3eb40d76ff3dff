"""The server's configuration, defined once: each field that ``gpupool serve`` takes carries
its flag (name, help, how it parses), the CLI builds ``serve``'s parser from these fields and
maps the parsed flags back onto them, and the runner reads nothing else. Imports nothing
heavy, so the CLI can build its parser from it without loading the server."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

#: Kinds of flag value (``Flag.kind``); the CLI turns each into its parser.
TEXT, POSITIVE_INT, POSITIVE_FLOAT, NON_NEGATIVE_INT, SWITCH, SWITCH_OFF = (
    "text", "positive-int", "positive-float", "non-negative-int", "switch", "switch-off")
#: The one group of ``serve``'s flags of which exactly one is given.
NODE_SOURCE = "node source (one is required)"


@dataclass(frozen=True)
class Flag:
    """How a field is given on ``gpupool serve``'s command line."""

    name: str
    help: str
    kind: str = TEXT
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    #: one of the mutually exclusive flags of this group
    group: str = ""


def _flag(default: Any, name: str, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"flag": Flag(name, help, **kw)})


@dataclass
class ServeConfig:
    """Everything ``gpupool serve`` takes. The CLI's flags, defaults and help are read from
    here (``flags``)."""

    bind: str = _flag("0.0.0.0:8443", "--bind", "address to listen on", metavar="HOST:PORT")
    certfile: str = _flag("", "--cert", "serving certificate (PEM); reloaded when it changes",
                          metavar="FILE")
    keyfile: str = _flag("", "--key", "serving key (PEM); reloaded with --cert", metavar="FILE")
    insecure_http: bool = _flag(False, "--insecure-http", "serve plain HTTP (debug only)",
                                kind=SWITCH)
    policy: str | None = _flag(None, "--policy", "PoolPolicy file; reloaded when it changes",
                               metavar="FILE")
    kubeconfig: str | None = _flag(None, "--kubeconfig",
                                   "watch nodes and namespaces with this kubeconfig",
                                   metavar="FILE", group=NODE_SOURCE)
    in_cluster: bool = _flag(False, "--in-cluster",
                             "watch nodes and namespaces with the pod's service account",
                             kind=SWITCH, group=NODE_SOURCE)
    #: a static snapshot instead of a watch (demo, tests)
    cluster_file: str | None = _flag(None, "--cluster", "serve against a static node snapshot",
                                     metavar="FILE", group=NODE_SOURCE)
    #: the snapshot is the bundled demo: its inventories read as fresh
    demo: bool = _flag(False, "--demo", "serve against the bundled demo cluster "
                       "(webhook/data/demo-cluster.yaml)", kind=SWITCH, group=NODE_SOURCE)
    no_cluster: bool = _flag(False, "--no-cluster",
                             "serve with no nodes: routing only, CDI devices never checked "
                             "(every GPU pod gets a warning; /readyz and gpupool_node_source "
                             "say so)", kind=SWITCH, group=NODE_SOURCE)
    workers: int = _flag(2, "--workers", "worker processes", kind=POSITIVE_INT)
    worker_class: str = _flag("gevent", "--worker-class",
                              "gevent: slow clients cost no thread; gthread: a thread per "
                              "request in progress", choices=("gevent", "gthread"))
    worker_connections: int = _flag(2000, "--worker-connections",
                                    "gevent: open connections per worker", kind=POSITIVE_INT)
    threads: int = _flag(4, "--threads", "gthread: threads per worker", kind=POSITIVE_INT)
    handshake_deadline: float = _flag(3.0, "--handshake-deadline",
                                      "drop a connection whose TLS handshake takes longer",
                                      kind=POSITIVE_FLOAT, metavar="SECONDS")
    request_deadline: float = _flag(10.0, "--request-deadline",
                                    "drop a connection whose request, from its first byte, "
                                    "takes longer", kind=POSITIVE_FLOAT, metavar="SECONDS")
    keepalive: int = _flag(75, "--keepalive",
                           "how long an idle keep-alive connection stays open",
                           kind=NON_NEGATIVE_INT, metavar="SECONDS")
    timeout: int = 30
    graceful_timeout: int = 25
    max_staleness: float = _flag(180.0, "--max-staleness",
                                 "seconds the node cache may go without a sync before /readyz "
                                 "fails", kind=POSITIVE_FLOAT, metavar="SECONDS")
    watch_timeout: int = 60
    audit_file: str | None = _flag(None, "--audit-file",
                                   "also write audit records here (rotated by size; its "
                                   "directory must exist)", metavar="FILE")
    audit_stdout: bool = _flag(True, "--no-audit-stdout",
                               "do not write audit records to standard output",
                               kind=SWITCH_OFF)
    audit_max_bytes: int = _flag(50 * 1024 * 1024, "--audit-max-bytes",
                                 "rotate the audit file past this size (0: never)",
                                 kind=NON_NEGATIVE_INT)
    audit_backups: int = _flag(5, "--audit-backups", "rotated audit files kept",
                               kind=NON_NEGATIVE_INT)
    routing_mode: str = _flag("webhook", "--routing-mode",
                              "where GPU pods are routed: webhook (here alone), policy (by "
                              "a MutatingAdmissionPolicy gpupool compiles and keeps current "
                              "in the API server, for the pods it can route; 1.36 or newer) "
                              "or auto (policy where the API server serves it); needs a "
                              "watch (--kubeconfig or --in-cluster)",
                              choices=("webhook", "policy", "auto"))
    routing_canary_namespace: str = _flag(
        "gpupool-system", "--routing-canary-namespace",
        "namespace of the canary pods that prove the routing policy on the API server before "
        "it routes real pods (server-side dry-run creates: nothing is stored); gpupool's own, "
        "which its webhooks do not see")
    routing_sync_period: float = 30.0
    loglevel: str = _flag("info", "--log-level", "server log level",
                          choices=("debug", "info", "warning", "error", "critical"))
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def flags(cls) -> list[tuple[str, Flag, Any]]:
        """(field name, its flag, its default) for every field ``serve`` takes, in order."""
        return [(f.name, f.metadata["flag"], f.default) for f in fields(cls)
                if "flag" in f.metadata]
