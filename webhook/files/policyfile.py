"""Policies from files: the one place the shells (server, CLI) read a PoolPolicy from disk.

Parsing stays in the engine (``webhook.engine.core.policy``); reading bytes does not, so the engine
imports no file I/O and every shell loads a policy the same way.
"""

from __future__ import annotations

from pathlib import Path

from webhook.engine import Policy, PolicyError, load_policy_text

#: Package data: the built-in default policy and the demo cluster of ``make run``.
DATA_DIR = Path(__file__).parent.parent / "data"


def load_policy_file(path: str, name: str | None = None) -> Policy:
    """``name``: what errors call the file, when ``path`` is a copy of it (the server loads
    copies, see ``webhook.server.filewatch.KeptCopies``)."""
    name = name or path
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PolicyError(f"{name}: cannot read policy: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{name}: policy is not UTF-8 text") from exc
    return load_policy_text(text, name)


def default_policy_text() -> str:
    return (DATA_DIR / "default-policy.yaml").read_text("utf-8")


def default_policy() -> Policy:
    return load_policy_text(default_policy_text(), "built-in default policy")
