"""Issue 48: node checks write no text. What a node check, ``delivery`` or a restarted
container's judge finds is ``Said`` data, and ``wording.words`` is the one place it becomes
words: every key said anywhere has words there, and no words are kept for a key nothing
says."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.kit import ROOT
from webhook.api import delivery
from webhook.api.said import said
from webhook.engine.wording.words import WORDS, known, words


def _said_keys() -> dict[str, list[str]]:
    """Every literal key given to ``said(...)`` in the product, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "said":
                first = n.args[0] if n.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), \
                    f"{path}:{n.lineno}: said() takes its key as a literal, so it can be listed"
                found.setdefault(first.value, []).append(
                    f"{Path(path).relative_to(ROOT)}:{n.lineno}")
    return found


def test_every_key_said_has_words_and_every_word_is_said():
    keys = _said_keys()
    assert len(keys) >= 80, sorted(keys)
    unworded = {k: where for k, where in keys.items() if not known(k)}
    assert not unworded, f"said without words in wording/words.py: {unworded}"
    unsaid = set(WORDS) - set(keys)
    assert not unsaid, f"words kept for keys nothing says: {sorted(unsaid)}"


def test_words_read_the_facts_they_are_given():
    handed = said("restart.notRead", container="main", value="GPU-1", ignored=False)
    assert words(handed) == ("container main is handed back NVIDIA_VISIBLE_DEVICES=GPU-1: its "
                             "runtime handler there is not the NVIDIA runtime, which alone "
                             "reads NVIDIA_VISIBLE_DEVICES")
    ignored = handed._replace(facts=(*handed.facts[:2], ("ignored", True)))
    assert words(ignored).endswith(words(delivery.UNPRIVILEGED_ENVVAR_IGNORED))
    # a note inside a note is worded where it is read
    nested = said("own.valueFrom", plugin=said("delivery.modeUnknown"), missing=())
    assert words(nested).endswith("(the plugin's own would fail: runtime mode unknown)")
    assert words(said("own.valueFrom", plugin=None, missing=("k=GPU-1", "k=GPU-2", "k=3"))
                 ).endswith("fail: k=GPU-1, k=GPU-2)")
    assert words(None) == ""


def test_a_said_is_frozen_and_can_be_kept():
    a = said("plugin.onlyCordoned", gpus=("GPU-1",))
    assert hash(a) == hash(said("plugin.onlyCordoned", gpus=("GPU-1",)))
    assert a.fact("gpus") == ("GPU-1",)


#: where words are made: the wording room, and the renderer of pod checks' findings
_WORDING = ("wording/", "checks/render.py")
_BUILDS = {"allow", "deny", "saying", "warned"}


def _texts(node: ast.AST) -> list[int]:
    """Lines where ``node`` holds text written in place (a literal or an f-string; the key
    of a ``said(...)`` is not text)."""
    keys = {id(n.args[0]) for n in ast.walk(node) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "said" and n.args}
    return [n.lineno for n in ast.walk(node)
            if isinstance(n, ast.JoinedStr)
            or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value
                and id(n) not in keys)]


def test_rules_build_decisions_from_words_not_from_text_of_their_own():
    """Issue 48: no rule writes user-facing text. Every decision a rule builds takes its
    message and warnings from ``wording`` (or, for pod checks, from ``checks.render``)."""
    written = []
    for path in sorted((ROOT / "webhook" / "engine").rglob("*.py")):
        where = str(path.relative_to(ROOT / "webhook" / "engine"))
        if where.startswith(_WORDING):
            continue
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(n, ast.Call):
                continue
            name = n.func.id if isinstance(n.func, ast.Name) else \
                n.func.attr if isinstance(n.func, ast.Attribute) else ""
            if name not in _BUILDS:
                continue
            parts = [*n.args[1:], *(k.value for k in n.keywords
                                    if k.arg in ("message", "warnings"))] \
                if name in ("allow", "deny") else [*n.args]
            written += [f"{where}:{line}" for part in parts for line in _texts(part)]
    assert not written, f"decisions built from text written in place: {written}"
