"""Where every bench entry point leaves its figures: a JSON file that records the command
that made it (bench/README.md cites both), and the table on stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def publish(res: dict[str, Any], out: str | Path, prog: str,
            report: Callable[[dict[str, Any]], str]) -> None:
    res["command"] = " ".join([f"python -m {prog}", *sys.argv[1:]])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2))
    print(report(res))
    print(f"\nresults: {out}")
