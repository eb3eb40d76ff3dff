"""The server's configuration, defined once: ``gpupool serve``'s flags take their defaults
from these fields, and the runner reads nothing else. Imports nothing heavy, so the CLI can
build its parser from it without loading the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServeConfig:
    """Everything ``gpupool serve`` takes. The CLI's defaults are read from here."""

    bind: str = "0.0.0.0:8443"
    certfile: str = ""
    keyfile: str = ""
    policy: str | None = None
    cluster_file: str | None = None  # a static snapshot instead of a watch (demo, tests)
    demo: bool = False  # the snapshot is the bundled demo: its inventories read as fresh
    kubeconfig: str | None = None
    in_cluster: bool = False
    workers: int = 2
    worker_class: str = "gevent"
    worker_connections: int = 2000
    threads: int = 4
    handshake_deadline: float = 3.0
    request_deadline: float = 10.0
    keepalive: int = 75
    timeout: int = 30
    graceful_timeout: int = 25
    max_staleness: float = 180.0
    watch_timeout: int = 60
    audit_file: str | None = None
    audit_stdout: bool = True
    audit_max_bytes: int = 50 * 1024 * 1024
    audit_backups: int = 5
    loglevel: str = "info"
    extra: dict[str, Any] = field(default_factory=dict)
