"""What a node-side answer says, as data.

Whether a GPU resolves on a node (``delivery``), and every node check built on it, answer
with a ``Said``: what they found (``what``, the key the engine's one wording module,
``webhook.engine.wording.words``, words it by) and the facts the words need. They write no
text, so every node's note reads alike and a sentence is changed in one place. A ``Said``
is frozen and hashable (its facts are name/value pairs), so answers that carry one can be
kept and compared.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Said(NamedTuple):
    #: what was found, "<room>.<finding>": the wording module's key
    what: str
    #: the facts the words need, by name, in the order given
    facts: tuple[tuple[str, Any], ...] = ()

    def fact(self, name: str) -> Any:
        for key, value in self.facts:
            if key == name:
                return value
        raise KeyError(f"{self.what} says nothing of {name!r}")


def said(what: str, **facts: Any) -> Said:
    """What was found, with the facts its words need, by name."""
    return Said(what, tuple(facts.items()))
