"""The ``gpupool`` command: the top-level parser over one module per command
(``webhook.cli.commands``), and the one place errors become output.

Exit codes are uniform: 0 success (for ``check``: everything allowed), 1 a finding (a pod
denied, a node that would fail its pods), 2 bad input or usage, 3 an internal error (a bug:
``GPUPOOL_DEBUG=1`` prints its traceback). Every error is one line on stderr that names the
input and what to do: ``main`` is the only place errors become output.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module

from webhook.cli.commands import COMMANDS
from webhook.cli.common import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    UsageError,
    add_version_flag,
)


def build_parser(prog: str = "gpupool") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description=(
        "Route GPU pods to their node pool's scheduler and reject pods whose nodes lack the "
        "CDI devices they need."), formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 ok, 1 a finding (a pod denied, a node that fails its pods), "
               "2 bad input, 3 internal error")
    add_version_flag(p)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=Parser)

    for name in COMMANDS:
        module = import_module(f"webhook.cli.commands.{name}")
        if name == "completion":
            module.register(sub, prog, p)
        else:
            module.register(sub, prog)
    return p


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None, prog: str = "gpupool") -> int:
    parser = build_parser(prog)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, with that command's help
        getattr(args, "parser_of_command", parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    from webhook.cluster.kube import KubeError
    from webhook.engine import PolicyError
    from webhook.files.certs import CertError
    from webhook.files.snapshot import SnapshotError
    from webhook.node.spec import CDIError

    def fail(text: str, code: int = EXIT_USAGE) -> int:
        print(f"{prog}: error: {text}", file=sys.stderr)
        return code

    try:
        return int(args.func(args))
    except (UsageError, PolicyError, SnapshotError, CertError, CDIError, KubeError) as exc:
        return fail(_one_line(exc))
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file named on the command line, as the system reports it
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"{where}{exc.strerror or _one_line(exc)}")
    except Exception as exc:
        if os.environ.get("GPUPOOL_DEBUG"):
            raise
        return fail(f"internal error ({type(exc).__name__}: {_one_line(exc)}); this is a bug: "
                    "rerun with GPUPOOL_DEBUG=1 for the traceback and report it",
                    EXIT_INTERNAL)


def kubectl_plugin_main() -> int:
    """``kubectl gpupool ...``: kubectl finds this executable on PATH as a plugin, and passes
    ``--context``, ``-n`` and ``--kubeconfig`` through to the subcommand."""
    return main(prog="kubectl gpupool")


if __name__ == "__main__":
    sys.exit(main())
