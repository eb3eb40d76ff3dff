"""The background loop idle workers rely on: it keeps calling, whatever one call does."""

from __future__ import annotations

import threading

from webhook.server import periodic


def test_a_call_that_raises_does_not_end_the_loop(caplog):
    calls: list[int] = []
    third = threading.Event()

    def flaky() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise OSError("disk gone")
        if len(calls) == 3:
            third.set()

    periodic.every(0.01, "flaky job", flaky)
    assert third.wait(10), f"called {len(calls)} times"
    assert "flaky job failed; tried again in 0.01 s" in caplog.text
    assert "disk gone" in caplog.text
