"""``gpupool serve``: the WSGI app under gunicorn, with TLS, probes and the node cache.

gevent workers: a connection waiting on a slow or idle client costs a greenlet, not a thread,
so a stream of slow clients cannot hold back the API server's reviews (a gthread worker ties a
thread to every request in progress; ``--worker-class gthread`` remains for comparison, see
bench/README.md). Each worker builds its own app after the fork (its own policy source and
node watch), so no lock or socket is shared across processes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication

from webhook.engine import ClusterView, NodeInfo, Policy, load_resources
from webhook.server import periodic
from webhook.server.app import Probe, Webhook, create_app
from webhook.server.config import ServeConfig
from webhook.server.policysource import PolicySource
from webhook.server.tls import Deadlines, ReloadingContext

if TYPE_CHECKING:
    from webhook.cluster.watch import ClusterInformer
    from webhook.files.snapshot import ClusterFile

log = logging.getLogger(__name__)


def node_source_of(cfg: ServeConfig) -> str:
    """watch, demo, file or none: what the server decides against."""
    if cfg.kubeconfig or cfg.in_cluster:
        return "watch"
    if cfg.cluster_file:
        return "demo" if cfg.demo else "file"
    return "none"


def load_snapshot(cfg: ServeConfig) -> tuple[ClusterFile, str | None]:
    """``--cluster``'s snapshot, or the last good copy the server kept of it (with why), as
    the master checks it at start and every worker loads it at boot: a file broken after
    start must not stop a worker from booting (``webhook.server.filewatch``)."""
    from webhook.files.snapshot import SnapshotError, load_cluster_file
    from webhook.server.filewatch import KeptCopies, load_or_kept

    path = cfg.cluster_file
    assert path is not None

    def load(paths: Sequence[str]) -> ClusterFile:
        snapshot = load_cluster_file(paths[0], name=path)
        if not snapshot.nodes:
            raise SnapshotError(f"{path}: holds no Node; pass 'kubectl get nodes -o yaml' "
                                "output (or --no-cluster to serve without checking CDI "
                                "devices)")
        return snapshot

    return load_or_kept(KeptCopies.from_env(), "cluster snapshot", [path], load,
                        (SnapshotError,))


def build_webhook(cfg: ServeConfig) -> tuple[Webhook, Any, list[Any]]:
    """Everything one worker needs: the webhook, its metrics, and things to keep alive."""
    from webhook.files.snapshot import restamp_inventories
    from webhook.server import metrics as metrics_mod
    from webhook.server.audit import AuditLog, SinkHealth

    keep: list[Any] = []
    informer_ref: ClusterInformer | None = None
    view = ClusterView()
    listeners: list[Callable[[Policy], None]] = [lambda p: view.set_pool_label(p.pool_label)]

    def policy_changed(policy: Policy) -> None:
        for listener in listeners:
            listener(policy)

    policies = PolicySource(cfg.policy, on_change=policy_changed)
    policies.start()
    view.set_pool_label(policies.policy.pool_label)
    webhook = Webhook(policies=policies, view=view)
    source = node_source_of(cfg)
    metrics_mod.node_source(source)
    if cfg.cluster_file:
        (nodes, namespaces, runtime_classes, resources, _), kept_why = load_snapshot(cfg)
        if cfg.demo:
            restamp_inventories(nodes, dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        nodes.reverse()
        # Convert and drop each raw node as we go: the raw dicts are many times larger.
        # (what pods hold is the scan's alone: admission never reads it)
        view.replace_nodes(NodeInfo.from_object(nodes.pop(), keep_held=False)
                           for _ in range(len(nodes)))
        view.replace_namespaces(namespaces)
        view.replace_runtime_classes(runtime_classes)
        load_resources(view, resources)
        count = len(view)
        webhook.ready_checks.append(Probe(
            "node-source", lambda: (True, f"{source} snapshot {cfg.cluster_file}: {count} nodes")))
        if kept_why is not None:
            webhook.ready_checks.append(Probe(
                "cluster-file", lambda: (False, kept_why), critical=False))
    elif source == "watch":
        from webhook.cluster.kube import api_client
        from webhook.cluster.watch import ClusterInformer

        informer = ClusterInformer(view, api_client(kubeconfig=cfg.kubeconfig,
                                                    in_cluster=cfg.in_cluster),
                                   watch_timeout=cfg.watch_timeout)
        informer.start()
        keep.append(informer)
        informer_ref = informer
        from webhook.cluster.routingpolicy import Keeper
        from webhook.server.metrics import routing_proof

        keeper = Keeper(cfg.routing_mode, informer.api_client, lambda: policies.policy, view,
                        informer.settled, period=cfg.routing_sync_period,
                        canary_namespace=cfg.routing_canary_namespace, on_proof=routing_proof)
        listeners.append(lambda _p: keeper.poke())
        keeper.start()
        keep.append(keeper)
        if cfg.routing_mode != "webhook":
            webhook.ready_checks.append(Probe("routing-policy", keeper.status,
                                              critical=False))
        webhook.ready_checks.append(
            Probe("node-source", lambda: informer.ready(cfg.max_staleness)))
        webhook.live_checks.append(Probe("node-watch", informer.alive))
    else:
        # Only with --no-cluster (the CLI refuses to start without a node source otherwise).
        view.replace_nodes([])
        view.replace_namespaces({})
        webhook.ready_checks.append(Probe(
            "node-source", lambda: (False, "none (--no-cluster): CDI devices are not checked "
                                           "and every GPU pod gets a warning"), critical=False))

    def policy_ready() -> tuple[bool, str]:
        policy = policies.policy  # also runs the periodic reload check
        if policies.serving_kept:
            return False, f"{cfg.policy} does not load: {policies.last_error}"
        if policies.last_error:
            return False, f"last update rejected, serving the last good one ({policies.last_error})"
        return True, f"{len(policy.pools)} pools" + (f" from {cfg.policy}" if cfg.policy
                                                      else " (built-in)")

    webhook.ready_checks.append(Probe("policy", policy_ready, critical=False))
    audit = AuditLog.from_config(stdout=cfg.audit_stdout, path=cfg.audit_file,
                                 max_bytes=cfg.audit_max_bytes, backups=cfg.audit_backups,
                                 on_change=metrics_mod.audit_sink_state,
                                 on_lost=metrics_mod.audit_record_lost)
    audit.start_retrying()
    metrics_mod.audit_sinks_declared([sink.health.name for sink in audit.sinks])
    for sink in audit.sinks:
        def sink_ready(health: SinkHealth = sink.health) -> tuple[bool, str]:
            lost, failing = metrics_mod.audit_totals().get(health.name, (0.0, False))
            return health.status(lost, failing)

        # Not critical: a denial is still served without its record.
        webhook.ready_checks.append(Probe(f"audit-{sink.health.name}", sink_ready,
                                          critical=False))
    metrics = metrics_mod.Metrics(policies=policies, view=view, informer=informer_ref)
    webhook.hooks.append(lambda ep, req, d, _s: audit.record(ep, req, d, policies.policy))
    webhook.hooks.append(metrics.observe)
    # (an idle worker's last reviews reach /metrics too: ``metrics.Tally``)
    periodic.every(metrics_mod.FLUSH_SECONDS, "metrics flush", metrics.tally.flush)
    keep += [audit, metrics]
    return webhook, metrics, keep


def memory_dir() -> str | None:
    """Where files written all the time go: ``/dev/shm`` where the host has it (a folder in
    memory, as the manifests mount an emptyDir of medium Memory), else the default."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def _post_fork(server: Any, worker: Any) -> None:
    """In the new worker, first: keep a stop signal that arrives while it boots."""
    from webhook.server.worker import hold_stop_signals

    hold_stop_signals()


def _child_exit(server: Any, worker: Any) -> None:
    """Fold a dead worker's counters into the multiprocess totals' archive."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def _worker_exit(server: Any, worker: Any) -> None:
    """Close this worker's audit log, so the loss it counted reaches the file's gap markers
    even when no later record came its way, and write the reviews it counted last to the
    metrics files (gunicorn also calls this in the master, which holds no app)."""
    app = getattr(worker, "wsgi", None)
    keep = getattr(app, "config", {}).get("gpupool.keep", [])
    if not keep:
        return  # (the master: importing the metrics there would give it series of its own)
    from webhook.server.audit import AuditLog
    from webhook.server.metrics import Metrics

    for obj in keep:
        if isinstance(obj, AuditLog):
            obj.close()
        elif isinstance(obj, Metrics):
            obj.tally.flush()


class GunicornApp(BaseApplication):  # type: ignore[misc]  # gunicorn is untyped
    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg_obj = cfg
        self._tls: dict[str, ReloadingContext] = {}
        super().__init__()

    def _context(self) -> ReloadingContext:
        """This worker's reloading TLS context (created after the fork, once)."""
        if "ctx" not in self._tls:
            c = self.cfg_obj
            self._tls["ctx"] = ReloadingContext(
                c.certfile, c.keyfile,
                deadlines=Deadlines(c.handshake_deadline, c.request_deadline))
        return self._tls["ctx"]

    def load_config(self) -> None:
        c = self.cfg_obj

        def ssl_context(conf: Any, default_factory: Any) -> Any:
            # gthread calls this per connection, gevent once per worker; both only call
            # .wrap_socket() on what it returns, which picks up rotated certificates.
            return self._context()

        settings: dict[str, Any] = {
            "bind": [c.bind],
            "workers": c.workers,
            # gevent: gunicorn's worker, closing idle keep-alive connections on a graceful stop
            "worker_class": ("webhook.server.worker.GeventWorker" if c.worker_class == "gevent"
                             else c.worker_class),
            "worker_connections": c.worker_connections,
            "threads": c.threads,
            "keepalive": c.keepalive,
            "timeout": c.timeout,
            "graceful_timeout": c.graceful_timeout,
            "loglevel": c.loglevel,
            "accesslog": None,
            "errorlog": "-",
            "limit_request_line": 8190,
            "limit_request_fields": 100,
            "proc_name": "gpupool",
            # gunicorn's runtime control socket lives in $HOME: unwritable under a read-only
            # root filesystem, shared between servers on one host, and not needed.
            "control_socket_disable": True,
            "child_exit": _child_exit,
            "post_fork": _post_fork,
            "worker_exit": _worker_exit,
            "worker_tmp_dir": os.environ.get("GPUPOOL_WORKER_TMP", memory_dir()),
        }
        if c.certfile:
            settings.update({"certfile": c.certfile, "keyfile": c.keyfile,
                             "ssl_context": ssl_context})
        settings.update(c.extra)
        for key, value in settings.items():
            if value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        c = self.cfg_obj
        webhook, metrics, keep = build_webhook(c)
        tls: ReloadingContext | None = None
        if c.certfile:
            tls = self._context()
            webhook.ready_checks.append(Probe("certificate", tls.ready))
            webhook.ready_checks.append(Probe("certificate-files", tls.files_load,
                                              critical=False))
        from webhook.server.metrics import install_routes

        app = create_app(webhook, extra_routes=lambda a: install_routes(a, metrics, tls))
        app.config["gpupool.keep"] = keep
        return app


def serve(cfg: ServeConfig) -> None:
    """Run until stopped. Sets up the metrics directory before prometheus-client is imported,
    which is when it decides whether to run in multiprocess mode."""
    import shutil
    import tempfile

    logging.basicConfig(level=getattr(logging, cfg.loglevel.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if "prometheus_client" in sys.modules and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise RuntimeError("prometheus_client was imported before serve() set up metrics")
    if "urllib3" in sys.modules and cfg.worker_class == "gevent":
        # urllib3 keeps ssl's classes from before gevent patches them in the workers, and
        # every TLS call of the node watch then recurses until it fails.
        raise RuntimeError("urllib3 was imported before the gevent workers started")
    owned = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # (``memory_dir``: on a disk each write dirties a page the kernel then writes back.
        # A folder made here, not a TemporaryDirectory: a worker is forked inside ``run``
        # and leaves it through this function too, and its exit would then delete the
        # folder every other worker still writes to.)
        owned = tempfile.mkdtemp(
            prefix="gpupool-metrics-", dir=memory_dir())
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = owned
    from webhook import __version__

    source = node_source_of(cfg)
    log.info("gpupool %s: serving on %s, nodes from %s%s", __version__, cfg.bind, source,
             " (--no-cluster: CDI devices are not checked)" if source == "none" else "")
    master = os.getpid()
    try:
        GunicornApp(cfg).run()
    finally:
        if owned is not None and os.getpid() == master:  # (the master, once every worker left)
            shutil.rmtree(owned, ignore_errors=True)
