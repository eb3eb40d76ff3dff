"""Processes as ``/proc`` shows them: what tests and benchmarks ask of the programs they
start (their children, their state), read in one place."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int | str) -> list[str]:
    """``/proc/<pid>/stat``'s fields after the command name (which may hold spaces):
    state, ppid, pgrp, session, ..."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2:].split()


def children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid``."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(stat_fields(entry)[1]) == pid:
                    out.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def argv0(pid: int) -> bytes:
    """The program a process runs, as its command line names it (b"" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""
