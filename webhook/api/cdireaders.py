"""Which CDI spec versions a node's containerd can read.

containerd resolves CDI names (the device plugin's ``cdi-cri`` names and ``cdi.k8s.io/``
annotations, DRA's CDI ids) with the CDI library it was built with, and each library release
parses only the spec versions it knows: a newer file is refused whole ("unknown field
additionalGids", "invalid version"), so every device in it is unresolvable there. The
toolkit writes version 0.7.0 when its specs carry ``additionalGids`` (toolkit #1860, #1940),
which containerd before 1.7.16 cannot read. The NVIDIA runtime in ``cdi`` mode resolves with
its own, newer, library; the NRI plugin hands device edits itself.

Each release's library is the one its own go.mod requires, as the Go module proxy serves it
(``github.com/containerd/containerd@v1.7.N/go.mod``, ``.../v2@v2.N.N/go.mod``); what each
library release reads is judged by the real libraries (tests/cdilibs, built from their
modules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Reader:
    #: the first containerd release (major, minor, patch) that links ``library``
    since: tuple[int, int, int]
    #: the CDI library release
    library: str
    #: the newest spec version it reads
    reads: str


#: In release order; each row holds until the next row's release.
CONTAINERD: tuple[Reader, ...] = (
    Reader((1, 7, 0), "v0.5.4", "0.5.0"),
    Reader((1, 7, 12), "v0.6.1", "0.6.0"),
    Reader((1, 7, 13), "v0.6.2", "0.6.0"),
    Reader((1, 7, 16), "v0.7.2", "0.7.0"),
    Reader((1, 7, 27), "v0.8.1", "0.8.0"),
    Reader((2, 0, 0), "v0.8.0", "0.8.0"),
    Reader((2, 0, 3), "v0.8.1", "0.8.0"),
    Reader((2, 0, 5), "v1.0.0", "1.0.0"),
    Reader((2, 1, 0), "v1.0.1", "1.0.0"),
    Reader((2, 2, 1), "v1.1.0", "1.1.0"),
    Reader((2, 4, 0), "v1.1.1", "1.1.0"),
)
_RELEASE = re.compile(r"^containerd://v?(\d+)\.(\d+)\.(\d+)")


def containerd_release(runtime_version: str | None) -> tuple[int, int, int] | None:
    """The containerd release in a node's ``status.nodeInfo.containerRuntimeVersion``
    (``containerd://1.7.13``, a distribution's suffix allowed); None for another runtime
    or a value not in that form."""
    m = _RELEASE.match(runtime_version or "")
    if m is None:
        return None
    major, minor, patch = (int(g) for g in m.groups())
    return major, minor, patch


def containerd_reader(runtime_version: str | None) -> Reader | None:
    """The CDI library the node's containerd resolves names with; None where it is not
    containerd, not known, or older than every release listed (before 1.7, whose CDI
    support is not judged here)."""
    release = containerd_release(runtime_version)
    if release is None:
        return None
    found = None
    for row in CONTAINERD:
        if release >= row.since:
            found = row
    return found


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def first_reading(version: str) -> str | None:
    """The first containerd release whose CDI library reads spec ``version`` (None: none
    listed does)."""
    for row in CONTAINERD:
        if version_key(row.reads) >= version_key(version):
            return ".".join(str(n) for n in row.since)
    return None
