"""One module per ``gpupool`` command: its flags (``register``) and what it runs. The
library each calls lives beside this package (``webhook.cli.check``, ``doctor``, ``audit``,
``live``, ...) or below it; this package stays light to import, so ``--help`` and shell
completion load no engine."""

from __future__ import annotations

#: The commands in the order ``--help`` lists them.
COMMANDS = ("check", "serve", "scan", "certs", "audit", "agent", "doctor", "policy",
            "completion")
