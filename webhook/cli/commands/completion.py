"""``gpupool completion``: a shell completion script from the parser itself."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    add_command,
)


def cmd_completion(args: argparse.Namespace) -> int:
    from webhook.cli.completion import script

    print(script(args.parser_root, args.shell), end="")
    return EXIT_OK


def register(sub: Any, prog: str, root: argparse.ArgumentParser) -> None:
    co = add_command(sub, "completion", "print a shell completion script", f"""
        source <({prog} completion bash)
        {prog} completion zsh > "${{fpath[1]}}/_gpupool\"""")
    co.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")
    co.set_defaults(func=cmd_completion, parser_root=root)

