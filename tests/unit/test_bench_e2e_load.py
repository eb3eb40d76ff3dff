"""The e2e load scenario's own arithmetic and failure reporting (the scenario itself runs in
`make bench`, not here)."""

from __future__ import annotations

import pytest

from bench.e2e_load import StartError, _component, buckets, quantile, server_view

SCRAPE = """\
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="0.005"} @A@
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="0.025"} @B@
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpupool.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} @B@
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.1"} @C@
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} @C@
"""  # noqa: E501


def test_quantiles_come_from_what_was_observed_between_two_scrapes():
    def scrape(a: int, b: int, c: int) -> str:
        return SCRAPE.replace("@A@", str(a)).replace("@B@", str(b)).replace("@C@", str(c))

    before = scrape(100, 100, 50)
    after = scrape(100, 200, 150)  # 100 new observations, all in (5 ms, 25 ms]
    b = buckets(before, "apiserver_admission_webhook_admission_duration_seconds", {})
    a = buckets(after, "apiserver_admission_webhook_admission_duration_seconds", {})
    p99 = quantile(b["mutate.gpupool.io"], a["mutate.gpupool.io"], 0.99)
    assert p99 == pytest.approx(0.005 + 0.02 * 0.99)
    assert quantile(a["mutate.gpupool.io"], a["mutate.gpupool.io"], 0.99) is None
    view = server_view(before, after)
    assert view["webhook mutate.gpupool.io p99 ms"] == pytest.approx(24.8)
    assert view["create p99 ms"] == pytest.approx(99.0)


def test_a_component_that_does_not_start_is_named():
    with pytest.raises(StartError, match="kwok did not start: no such binary"):
        _component("kwok", lambda: (_ for _ in ()).throw(FileNotFoundError("no such binary")))
