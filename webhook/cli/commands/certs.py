"""``gpupool certs``: the webhook's CA and serving certificate for a self-signed install."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    Parser,
    add_command,
)
from webhook.cluster.kube import WEBHOOK_NAMESPACE, WEBHOOK_SERVICE


def _expiry_warning(not_after: dt.datetime) -> None:
    from webhook.files import certs

    if certs.expiry_state(not_after):
        left = max((not_after - dt.datetime.now(dt.UTC)).days, 0)
        print(f"warning: the serving certificate expires in {left} day(s), on "
              f"{not_after:%Y-%m-%d}; renew it with 'gpupool certs renew'", file=sys.stderr)


def cmd_certs(args: argparse.Namespace) -> int:
    from webhook.files import certs

    if args.certs_cmd == "generate":
        made = certs.generate(args.out, args.service, args.namespace,
                              extra_dns=args.dns, extra_ips=args.ip, days=args.days,
                              algorithm=args.algorithm, force=args.force)
        p = made.paths
        ca = (f"kept the CA in {p.ca_cert} (--force replaces it)" if made.ca_kept
              else f"wrote a new CA {p.ca_cert}")
        print(f"{ca}; wrote {p.tls_cert}, {p.tls_key} (0600), {p.ca_bundle}")
        _expiry_warning(made.not_after)
        return EXIT_OK
    if args.certs_cmd == "renew":
        done = certs.renew(args.out, args.service, args.namespace, extra_dns=args.dns,
                           extra_ips=args.ip, days=args.days,
                           renew_before_days=args.renew_before_days, algorithm=args.algorithm,
                           force=args.force)
        if done:
            names = certs.Names.of(certs.load_certificate(certs.Paths(Path(args.out)).tls_cert))
            print(f"renewed serving certificate for {', '.join([*names.dns, *names.ips])}")
        else:
            print("serving certificate not due yet")
        _expiry_warning(certs.expiry(certs.Paths(Path(args.out)).tls_cert))
        return EXIT_OK
    print(certs.ca_bundle(certs.Paths(Path(args.out))))
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    ce = add_command(sub, "certs", "generate or renew the webhook's certificates", f"""
        {prog} certs generate --out certs --service gpupool-webhook --namespace gpupool-system
        {prog} certs renew --out certs --renew-before-days 30
        {prog} certs ca-bundle --out certs""")
    cs = ce.add_subparsers(dest="certs_cmd", required=True, metavar="ACTION",
                           parser_class=Parser)
    summaries = {
        "generate": ("a serving certificate, from the CA in --out (kept) or a new CA",
                     f"{prog} certs generate --out certs --dns localhost --ip 127.0.0.1"),
        "renew": ("reissue the serving certificate from the same CA when it is due",
                  f"{prog} certs renew --out certs --renew-before-days 30"),
        "ca-bundle": ("print the base64 CA for the webhooks' clientConfig.caBundle",
                      f"{prog} certs ca-bundle --out certs"),
    }
    for name, (summary, example) in summaries.items():
        x = add_command(cs, name, summary, example)
        x.add_argument("--out", required=True, metavar="DIR",
                       help="directory for the certificate files")
        if name == "ca-bundle":
            continue
        renewing = name == "renew"
        keeps = " (default: the certificate's own names)" if renewing else ""
        x.add_argument("--service", default=None if renewing else WEBHOOK_SERVICE,
                       help="the webhook's Service name" + (
                           keeps + "; given, its names are added" if renewing
                           else " (default: %(default)s)"))
        x.add_argument("--namespace", default=None if renewing else WEBHOOK_NAMESPACE,
                       help="the webhook's namespace" + (
                           keeps if renewing else " (default: %(default)s)"))
        x.add_argument("--dns", action="append", default=[],
                       help="extra DNS SAN, an RFC 1123 host name (repeatable)")
        x.add_argument("--ip", action="append", default=[], help="extra IP SAN (repeatable)")
        x.add_argument("--days", type=int, default=365,
                       help="serving certificate validity in days, at least 1 and at most what "
                            "the CA has left (default: %(default)s)")
        x.add_argument("--algorithm", choices=["ecdsa", "rsa"],
                       default=None if renewing else "ecdsa",
                       help="key algorithm" + (" (default: the replaced key's)" if renewing
                                               else " (default: %(default)s)"))
        if name == "generate":
            x.add_argument("--force", action="store_true",
                           help="replace an existing CA too (installed caBundles stop working)")
        else:
            x.add_argument("--renew-before-days", type=float, default=30,
                           help="renew when fewer days are left (default: %(default)s)")
            x.add_argument("--force", action="store_true", help="renew even if not due")
    ce.set_defaults(func=cmd_certs)

