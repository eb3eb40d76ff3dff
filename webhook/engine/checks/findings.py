"""What a pod check finds, as data.

A pod check answers with a ``PodFinding``: what it found (``what``, the key ``render`` words
it by), whether the policy makes that a denial and under which reason code, and the facts
that decided (the nodes among them), as the words need them. It writes no text: ``render``
is the one place a finding becomes a ``Decision``, its message and its node lines, so every
check's findings read alike and a message is changed in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from webhook.engine.core.decision import Reason

#: facts by name, read-only: a finding is never changed once made
Facts = Mapping[str, Any]
_NONE: Facts = MappingProxyType({})


class Note(NamedTuple):
    """Something a check says beside its finding: a warning the pod gets when allowed."""

    what: str
    facts: Facts = _NONE

    def fact(self, name: str) -> Any:
        return self.facts[name]


class PodFinding(NamedTuple):
    """One pod check's answer for the whole pod."""

    #: what it found: "<check>.<finding>", the renderer's key
    what: str
    pool: str
    #: the policy makes it a denial (under ``reason``); else the pod is allowed, routed
    denies: bool = False
    reason: Reason = Reason.ROUTED
    #: what decided, by name, as the words need it
    facts: Facts = _NONE
    #: said beside it, when the pod is allowed
    notes: tuple[Note, ...] = ()
    #: why the check could not run ("no-nodes", "not-synced"; "" when it did)
    unchecked: str = ""

    @property
    def check(self) -> str:
        return self.what.partition(".")[0]

    def fact(self, name: str) -> Any:
        return self.facts[name]


def found(what: str, pool: str, *, denies: bool = False, reason: Reason = Reason.ROUTED,
          notes: tuple[Note, ...] | list[Note] = (), unchecked: str = "",
          **facts: Any) -> PodFinding:
    return PodFinding(what, pool, denies, reason, MappingProxyType(facts), tuple(notes),
                      unchecked)


def note(what: str, **facts: Any) -> Note:
    return Note(what, MappingProxyType(facts))
