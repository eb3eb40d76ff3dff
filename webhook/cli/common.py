"""What every ``gpupool`` command shares: exit codes, the usage error, the parser's habits
(one-line errors, ``--version``, ``-o``, the kubeconfig flags), and reading a policy and a
cluster snapshot. Light to import: each command loads what it needs when it runs."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from webhook import __version__
from webhook.cluster.kube import REQUEST_TIMEOUT

if TYPE_CHECKING:
    from webhook.engine import ClusterView, Policy, Release
    from webhook.files.snapshot import ClusterFile

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
OUTPUTS = ("json", "yaml", "wide")


class UsageError(Exception):
    pass


def cluster_source(args: argparse.Namespace, need: str, without: str) -> str:
    """Which cluster a command reads (``--cluster``, ``--no-cluster`` or a kubeconfig:
    "file", "none" or "live"), with one wording for every command that takes the three: more
    than one given, or none given and no kubeconfig where kubectl would look, is a usage error
    naming all three. ``need``: what is missing then, in words; ``without``: what
    ``--no-cluster`` does instead."""
    import os

    from webhook.cluster.kube import kubeconfig_path

    live = bool(args.kubeconfig or args.context)
    given = [flag for flag, value in (("--cluster", args.cluster),
                                      ("--no-cluster", args.no_cluster),
                                      ("--kubeconfig/--context", live)) if value]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)}: pass one of them (--cluster reads nodes from "
                         "a file, --kubeconfig/--context from a cluster, --no-cluster "
                         f"to {without})")
    if args.no_cluster:
        return "none"
    if args.cluster:
        return "file"
    path = kubeconfig_path(args.kubeconfig)
    if not live and not any(os.path.isfile(os.path.expanduser(p))
                            for p in path.split(os.pathsep) if p):
        raise UsageError(f"no {need}: pass --cluster FILE ('kubectl get "
                         "nodes -o yaml' output), --context/--kubeconfig for a live cluster "
                         f"(none found at {path}), or --no-cluster to {without}")
    return "live"


def load_policy(path: str | None) -> Policy:
    from webhook.files.policyfile import default_policy, load_policy_file

    return load_policy_file(path) if path else default_policy()


def namespace_labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--namespace-labels: {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def load_nodes(cluster: str) -> ClusterFile:
    from webhook.files.snapshot import load_cluster_file

    return load_cluster_file(cluster)


def view_of(snapshot: ClusterFile, policy: Policy, ns_labels: dict[str, str],
          namespaces: Sequence[str] = (), kube_version: str | None = None) -> ClusterView:
    """The view the engine decides against; its Kubernetes release is ``kube_version``
    where given, else the live cluster's, else the newest supported."""
    from webhook.engine import view_from_objects

    ns = snapshot.namespaces
    for name in namespaces:
        ns.setdefault(name, {}).update(ns_labels)
    view = view_from_objects(snapshot.nodes, policy, ns, snapshot.runtime_classes,
                             snapshot.resources)
    view.set_release(release_of(snapshot, kube_version))
    return view


def release_of(snapshot: ClusterFile, kube_version: str | None) -> Release:
    from webhook.engine import NEWEST_RELEASE, parse_release, release_from_version

    if kube_version:
        return parse_release(kube_version, "given")
    return release_from_version(snapshot.version) or NEWEST_RELEASE


def add_kube_version(parser: Any) -> None:
    """``--kube-version``: the release whose DRA allocator decides, for a cluster file (a
    live cluster says its own)."""
    from webhook.engine import SUPPORTED_RELEASES

    def release(text: str) -> str:
        from webhook.engine import parse_release

        try:
            parse_release(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
        return text

    parser.add_argument(
        "--kube-version", metavar="1.X", type=release,
        help="the Kubernetes release of the cluster, whose DRA allocator gpupool decides as "
             f"(supported: {', '.join(SUPPORTED_RELEASES)}; default: the live cluster's, "
             f"else {SUPPORTED_RELEASES[-1]})")


def print_doc(doc: Any, output: str | None) -> None:
    """``-o json`` and ``-o yaml``, as kubectl prints them."""
    if output == "yaml":
        import yaml

        # Through JSON first: YAML then holds exactly what -o json prints (enum members as
        # their values, which safe_dump would refuse).
        print(yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False,
                             default_flow_style=False), end="")
    else:
        print(json.dumps(doc, indent=2))


class Parser(argparse.ArgumentParser):
    """argparse, with kubectl's habit for mistakes: one line naming the flag and where the
    help is, exit 2 (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
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


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def add_output(p: argparse.ArgumentParser, default_name: str) -> None:
    p.add_argument("-o", "--output", choices=OUTPUTS, default=None,
                   help=f"json, yaml, or wide (more columns); default: {default_name}")


def add_kube_flags(p: argparse.ArgumentParser, kubeconfig_help: str,
                group: argparse._MutuallyExclusiveGroup | None = None, *,
                request_timeout: bool = True) -> None:
    (group or p).add_argument("--kubeconfig", help=kubeconfig_help)
    p.add_argument("--context", help="the kubeconfig context to use (default: its current one)")
    if not request_timeout:  # a long-running command: each call has its own timeout
        return
    p.add_argument("--request-timeout", type=positive(float), default=REQUEST_TIMEOUT,
                   metavar="SECONDS", help="how long the API server may take, all calls "
                                           "together (default: %(default)s)")


def add_version_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action="version", version=f"gpupool {__version__}",
                   help="print gpupool's version and exit")


def add_command(sub: Any, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary,
        epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version_flag(p)
    p.set_defaults(parser_of_command=p)  # the innermost command's parser, for its errors
    return p

