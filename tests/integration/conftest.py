"""A real gunicorn process serving real TLS, started once per test session
(``harness.servers``)."""

from __future__ import annotations

import pytest

from harness.servers import start_server, stop_server


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("gpupool"))
    yield srv
    stop_server(srv)
