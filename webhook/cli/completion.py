"""``gpupool completion bash|zsh``: shell completion generated from the argument parser itself,
so a new flag or subcommand completes without anyone editing a script.

zsh gets the same function through its bash compatibility layer (``bashcompinit``), as many
CLIs ship it; both complete ``gpupool`` and the ``kubectl-gpupool`` plugin executable.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

#: metavars of options whose value is a path: completed as file names
_PATH_METAVARS = {"FILE", "DIR"}
_FUNCTION = "_gpupool_complete"


@dataclass
class _Command:
    words: list[str] = field(default_factory=list)  # subcommands and flags
    values: dict[str, list[str] | None] = field(default_factory=dict)  # flag: choices | files


def _walk(parser: argparse.ArgumentParser, path: str, out: dict[str, _Command]) -> None:
    cmd = out.setdefault(path, _Command())
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                cmd.words.append(name)
                _walk(sub, f"{path} {name}".strip(), out)
            continue
        cmd.words.extend(action.option_strings)
        if not action.option_strings or action.nargs == 0:
            continue
        listed = action.choices or getattr(action, "completions", None)
        if listed:
            values: list[str] | None = [str(c) for c in listed]
        elif action.metavar in _PATH_METAVARS:
            values = None
        else:
            continue
        for opt in action.option_strings:
            cmd.values[opt] = values


def _bash(parser: argparse.ArgumentParser) -> str:
    commands: dict[str, _Command] = {}
    _walk(parser, "", commands)
    paths = [p for p in commands if p]
    lines = [
        "# bash completion for gpupool (from `gpupool completion bash`)",
        f"{_FUNCTION}() {{",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '  local path="" next i words=""',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    next="${path:+$path }${COMP_WORDS[i]}"',
        '    case "$next" in',
        f"      {'|'.join(shlex.quote(p) for p in paths)}) path=\"$next\" ;;",
        "    esac",
        "  done",
        '  case "$path:$prev" in',
    ]
    for path, cmd in commands.items():
        for opt, values in sorted(cmd.values.items()):
            key = shlex.quote(f"{path}:{opt}")
            if values is None:
                lines.append(f'    {key}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
            else:
                words = shlex.quote(" ".join(values))
                lines.append(f'    {key}) COMPREPLY=($(compgen -W {words} -- "$cur")); return ;;')
    lines += ["  esac", '  case "$path" in']
    for path, cmd in commands.items():
        label = shlex.quote(path) if path else '""'
        lines.append(f"    {label}) words={shlex.quote(' '.join(cmd.words))} ;;")
    lines += [
        "  esac",
        '  COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        f"complete -o default -F {_FUNCTION} gpupool kubectl-gpupool",
    ]
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    body = _bash(parser)
    if shell == "zsh":
        return ("#compdef gpupool kubectl-gpupool\n"
                "# zsh completion for gpupool (from `gpupool completion zsh`)\n"
                "autoload -U +X bashcompinit && bashcompinit\n" + body)
    return body
