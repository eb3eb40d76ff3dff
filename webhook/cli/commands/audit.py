"""``gpupool audit``: the rejection log, summarised and filtered."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    UsageError,
    add_command,
    add_output,
    print_doc,
)


def _reason_code(text: str) -> str:
    """A reason code as the records spell it, whatever its case; a typo is an error with the
    closest codes, never an empty listing."""
    import difflib

    from webhook.engine import Reason

    by_lower = {code.lower(): code for code in Reason.codes()}
    if text.lower() in by_lower:
        return by_lower[text.lower()]
    close = difflib.get_close_matches(text.lower(), by_lower, n=3, cutoff=0.5)
    hint = (f"did you mean {' or '.join(by_lower[c] for c in close)}?" if close
            else f"one of {', '.join(Reason.codes())}")
    raise argparse.ArgumentTypeError(f"unknown reason code {text!r}; {hint}")


def cmd_audit(args: argparse.Namespace) -> int:
    from webhook.cli.audit import AuditFilter, Gaps, format_table, parse_since, read_records

    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    filt = AuditFilter(since=since, namespace=args.namespace, reason=args.reason,
                       dry_run=args.dry_run)
    gaps = Gaps()
    if args.file == "-":
        records = [r for r in read_records(sys.stdin, gaps) if filt(r)]
    else:
        paths = [args.file]
        # Include rotated files, oldest first, so the listing is in time order.
        i = 1
        while os.path.exists(f"{args.file}.{i}"):
            paths.insert(0, f"{args.file}.{i}")
            i += 1
        records = []
        for p in paths:
            try:
                with open(p, encoding="utf-8", errors="replace") as fh:
                    records.extend(r for r in read_records(fh, gaps, p) if filt(r))
            except OSError as exc:
                raise UsageError(f"{p}: {exc.strerror}") from exc
    if gaps.not_an_audit_log():
        where = "standard input" if args.file == "-" else args.file
        raise UsageError(f"{where}: no gpupool audit record in {gaps.lines} line(s); pass the "
                         "file of 'gpupool serve --audit-file' (default "
                         "/var/log/gpupool/audit.log) or the webhook's 'kubectl logs' with "
                         "--file -")
    if args.output in ("json", "yaml"):
        print_doc(records, args.output)
    else:
        print(format_table(records, wide=args.output == "wide"))
    for line in gaps.describe():  # on stderr, so -o json stays parseable
        print(line, file=sys.stderr)
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    a = add_command(sub, "audit", "read the audit log of rejections", f"""
        {prog} audit --file /var/log/gpupool/audit.log --since 1h --reason cdidevicemissing
        kubectl logs -n gpupool-system deploy/gpupool-webhook | {prog} audit --file - -o json""")
    a.add_argument("-f", "--file", default="/var/log/gpupool/audit.log",
                   help="log file (rotated files beside it are read too), or - for standard "
                        "input (default: %(default)s)")
    a.add_argument("--since", metavar="DURATION",
                   help="only records newer than this (30m, 1h, 2d)")
    a.add_argument("-n", "--namespace", help="only records of this namespace")
    reason = a.add_argument("--reason", type=_reason_code, metavar="CODE",
                            help="only records with this reason code (any case), e.g. "
                                 "CDIDeviceMissing")
    from webhook.engine import Reason

    reason.completions = Reason.codes()  # type: ignore[attr-defined]  # read by completion
    dr = a.add_mutually_exclusive_group()
    dr.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, default=None,
                    help="only server-side dry runs")
    dr.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False,
                    help="only real requests")
    add_output(a, "summary and table")
    a.set_defaults(func=cmd_audit)

