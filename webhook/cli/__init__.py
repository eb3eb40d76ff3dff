"""The ``gpupool`` command and its subcommands (check, serve, certs, audit, agent, doctor).
Thin: argument handling and formatting around the engine, the server and the node agent."""

from webhook.cli.main import kubectl_plugin_main, main

__all__ = ["kubectl_plugin_main", "main"]
