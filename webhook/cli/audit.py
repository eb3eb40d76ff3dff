"""``gpupool audit``: reading the rejection log back, filtered and summarised.

The writer lives with the server (``webhook.server.audit``); the record format is the contract
between them, so this side skips what it cannot parse instead of failing on it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.server.audit import GAP_MARKER

_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_since(text: str) -> dt.timedelta:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"--since {text!r}: use a number and s, m, h or d (e.g. 30m, 1h)")
    n, unit = int(m.group(1)), m.group(2)
    return dt.timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: n})


@dataclass
class Gaps:
    """What the log itself says is missing from it."""

    markers: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "file:line" of torn audit lines

    @property
    def lost(self) -> int:
        return sum(m.get("lost", 0) for m in self.markers if isinstance(m.get("lost"), int))

    def __bool__(self) -> bool:
        return bool(self.markers or self.unreadable)

    def describe(self) -> list[str]:
        out = [f"gap: {m.get('lost', '?')} record(s) lost by worker {m.get('pid', '?')} "
               f"between {m.get('since', '?')} and {m.get('time', '?')} ({m.get('error', '')})"
               for m in self.markers]
        if self.unreadable:
            shown = ", ".join(self.unreadable[:5])
            more = f" and {len(self.unreadable) - 5} more" if len(self.unreadable) > 5 else ""
            out.append(f"gap: {len(self.unreadable)} unreadable audit line(s) at {shown}{more}")
        return out


def read_records(lines: Iterable[str], gaps: Gaps | None = None, source: str = "-"
                 ) -> Iterator[dict[str, Any]]:
    """Audit records among other log lines (stdout mixes them with gunicorn's logs). Gap
    markers and lines that start like a record but do not parse go to ``gaps``."""
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if gaps is not None and '"audit":"gpupool' in line:
                gaps.unreadable.append(f"{source}:{number}")
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("audit") == "gpupool":
            yield rec
        elif rec.get("audit") == GAP_MARKER and gaps is not None:
            gaps.markers.append(rec)


@dataclass
class AuditFilter:
    since: dt.timedelta | None = None
    namespace: str | None = None
    reason: str | None = None
    dry_run: bool | None = None

    def __call__(self, rec: dict[str, Any]) -> bool:
        if self.namespace is not None and rec.get("namespace") != self.namespace:
            return False
        if self.reason is not None and rec.get("reason") != self.reason:
            return False
        if self.dry_run is not None and bool(rec.get("dryRun")) != self.dry_run:
            return False
        if self.since is not None:
            try:
                when = dt.datetime.fromisoformat(str(rec.get("time")).replace("Z", "+00:00"))
            except ValueError:
                return False
            if when < dt.datetime.now(dt.UTC) - self.since:
                return False
        return True


def summarize(records: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    return {key: Counter(str(r.get(key) or "-") for r in records)
            for key in ("reason", "namespace", "pool")}


def format_table(records: list[dict[str, Any]], wide: bool = False) -> str:
    out = [f"{len(records)} record(s)"]
    for key, counts in summarize(records).items():
        out.append("")
        out.append(f"{'BY ' + key.upper():<40} COUNT")
        for value, n in counts.most_common():
            out.append(f"{value:<40} {n}")
    if records:
        out.append("")
        out.append(f"{'TIME':<25} {'DRY':<4} {'NAMESPACE':<16} {'NAME':<30} {'POOL':<10} REASON"
                   + ("  USER  UID" if wide else ""))
        for r in records:
            out.append(f"{r.get('time', ''):<25} {'yes' if r.get('dryRun') else 'no':<4} "
                       f"{r.get('namespace', ''):<16} {r.get('kind', '')}/{r.get('name', ''):<30}"
                       f" {r.get('pool', ''):<10} {r.get('reason', '')}"
                       + (f"  {r.get('user', '')}  {r.get('uid', '')}" if wide else ""))
            if wide and r.get("message"):
                out.append(f"{'':<25} {r['message']}")
    return "\n".join(out)
