"""YAML read one way, and its errors told in one line. PyYAML's own text spans four lines
with a caret, and names the document ``<unicode string>`` when it was parsed from text: a
user reading ``gpupool``'s one-line errors needs the file's name, the line and the problem."""

from __future__ import annotations

from typing import Any

import yaml

#: The one safe loader every file gpupool reads goes through (libyaml's where PyYAML has it):
#: the same file gets the same error wording whichever flag named it.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_error(exc: Exception) -> str:
    """``problem at line L, column C`` (PyYAML counts from 0; editors from 1)."""
    problem = getattr(exc, "problem", None)
    mark: Any = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if not problem:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}" + (f" ({context})" if context else "")
