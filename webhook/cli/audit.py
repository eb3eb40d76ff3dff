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

from webhook.cli.table import table
from webhook.server.audit import GAP_MARKER

_DURATION = re.compile(r"^(\d+)([smhd])$")
#: gunicorn's and gpupool's own log lines, as ``kubectl logs`` of the webhook shows them
_SERVER_LOG = re.compile(r"\[(INFO|WARNING|ERROR|DEBUG|CRITICAL)\]|\bwebhook\.(server|engine)\b|"
                         r"\bgunicorn\b|\bgpupool\b")


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
    #: non-blank lines read, and how many were audit records (kept or filtered out)
    lines: int = 0
    records: int = 0
    #: lines of gpupool's own server log (standard output mixes them with the records)
    server_lines: int = 0

    def not_an_audit_log(self) -> bool:
        """Text was read, and none of it is gpupool's: the wrong file, or a corrupt one."""
        return (self.lines > 0 and not self.records and not self.markers
                and not self.unreadable and not self.server_lines)

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
        if gaps is not None and line:
            gaps.lines += 1
            if _SERVER_LOG.search(line):
                gaps.server_lines += 1
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
            if gaps is not None:
                gaps.records += 1
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
    for key, counts in summarize(records).items() if records else ():
        out.append("")
        out.extend(table([f"BY {key.upper()}", "COUNT"], counts.most_common()))
    if records:
        out.append("")
        headers = ["TIME", "DRY RUN", "NAMESPACE", "OBJECT", "POOL", "REASON"]
        rows = []
        for r in records:
            row = [r.get("time", ""), "yes" if r.get("dryRun") else "no",
                   r.get("namespace") or "-", f"{r.get('kind', '')}/{r.get('name', '')}",
                   r.get("pool") or "-", r.get("reason", "")]
            if wide:
                row += [r.get("user") or "-", r.get("uid") or "-", r.get("message") or ""]
            rows.append(row)
        out.extend(table(headers + (["USER", "UID", "MESSAGE"] if wide else []), rows))
    return "\n".join(out)
