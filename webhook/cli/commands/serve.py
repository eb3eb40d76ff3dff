"""``gpupool serve``: check every input a worker will read, keep a copy of each, then run
the webhook under gunicorn."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    UsageError,
    add_command,
    non_negative_int,
    positive,
)


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

    cluster = args.cluster_file
    if args.demo:
        from webhook.files.policyfile import DATA_DIR

        cluster = str(DATA_DIR / "demo-cluster.yaml")
    if not (cluster or args.kubeconfig or args.in_cluster or args.no_cluster):
        raise UsageError("no node source: pass --in-cluster, --kubeconfig FILE, --cluster FILE "
                         "or --demo (or --no-cluster to serve without checking CDI devices)")
    if bool(args.certfile) != bool(args.keyfile):
        raise UsageError("--cert and --key go together")
    if not args.certfile and not args.insecure_http:
        raise UsageError("--cert/--key are required (or --insecure-http for local debugging)")
    # Everything a worker would trip over is checked here, once, before any worker forks.
    if args.certfile:
        _check_tls(args.certfile, args.keyfile)
    if args.policy:
        _check_policy(args.policy)
    if cluster:
        _check_cluster(cluster, args.demo)
    if args.kubeconfig:
        from webhook.cluster.kube import check_kubeconfig

        check_kubeconfig(args.kubeconfig)
    if args.in_cluster:
        from webhook.cluster.kube import check_in_cluster

        check_in_cluster()
    if args.audit_file:
        _check_audit_file(args.audit_file)
    _check_bind(args.bind)
    if args.insecure_http:  # said once every input has passed, just before serving
        print("warning: --insecure-http: serving plain HTTP, for local debugging only; the API "
              "server calls webhooks over HTTPS alone, and reviews carry pod specs",
              file=sys.stderr)
    cfg = ServeConfig(**{name: getattr(args, name) for name, _, _ in ServeConfig.flags()})
    cfg.cluster_file = cluster
    cfg.certfile, cfg.keyfile = args.certfile or "", args.keyfile or ""
    serve(cfg)
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    """Every flag from ``ServeConfig``'s fields (``Flag``): name, help, parser, default and
    group are written once, there."""
    from webhook.server.config import (
        NON_NEGATIVE_INT,
        POSITIVE_FLOAT,
        POSITIVE_INT,
        SWITCH,
        SWITCH_OFF,
        ServeConfig,
    )

    s = add_command(sub, "serve", "run the admission webhook under gunicorn", f"""
        {prog} serve --in-cluster --cert /certs/tls.crt --key /certs/tls.key \\
          --policy /policy/policy.yaml
        {prog} serve --demo --bind 127.0.0.1:8443 \\
          --cert .run/certs/tls.crt --key .run/certs/tls.key""")
    parsers = {POSITIVE_INT: positive(int), POSITIVE_FLOAT: positive(float),
               NON_NEGATIVE_INT: non_negative_int}
    groups: dict[str, Any] = {}
    for dest, flag, default in ServeConfig.flags():
        target = s
        if flag.group:
            if flag.group not in groups:
                groups[flag.group] = s.add_argument_group(
                    flag.group).add_mutually_exclusive_group()
            target = groups[flag.group]
        kw: dict[str, Any] = {"dest": dest, "help": flag.help}
        if flag.kind == SWITCH:
            kw.update(action="store_true")
        elif flag.kind == SWITCH_OFF:
            kw.update(action="store_false")
        else:
            kw.update(default=default if default != "" else None)
            if flag.metavar:
                kw["metavar"] = flag.metavar
            if flag.choices:
                kw["choices"] = flag.choices
            if flag.kind in parsers:
                kw["type"] = parsers[flag.kind]
            if default not in (None, ""):
                kw["help"] += " (default: %(default)s)"
        target.add_argument(flag.name, **kw)
    s.set_defaults(func=cmd_serve)
