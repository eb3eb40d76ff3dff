"""What a message shown to a user must never carry: an empty or unset part of a template
(``mode None``, ``default kind )``, ``--vendor= --class=``), or a fix that names a
RuntimeClass the failing nodes cannot run (issue 46, item 5)."""

from __future__ import annotations

import re

#: Traces of a template filled with nothing: a Python None, an empty value after a name,
#: empty brackets or quotes, punctuation with nothing between.
_EMPTY = [re.compile(p) for p in (
    r"\bNone\b",
    r"\bkind [),;.]", r"\bkind $", r"\bmode [),;.]", r"--\w+=(\s|$)", r"\w=(\s|$)",
    r"\(\s*\)", r"''", r'""', r"\s[,;]", r"[,;:]\s*[,;.]", r"\s{2,}",
)]


def empty_parts(message: str) -> list[str]:
    """The parts of ``message`` that show an empty field (none: the message is whole)."""
    return [m.group(0) for p in _EMPTY for m in [p.search(message)] if m]


def named_runtime_classes(message: str) -> list[str]:
    """The RuntimeClasses a message tells the user to run a pod with."""
    return re.findall(r"runtimeClassName (\S+?)[;,.)]?(?:\s|$)", message)
