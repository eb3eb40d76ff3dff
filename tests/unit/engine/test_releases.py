"""The cluster's Kubernetes release: read from what the API server and users say, and one
line where gpupool does not support it. (Each allocator switch is judged by the releases'
own allocators in tests/integration/test_dra_judge.py.)"""

from __future__ import annotations

import pytest

from webhook.engine import Release, parse_release, release_from_version, release_note
from webhook.engine.stacks.releases import NEWEST_RELEASE


@pytest.mark.parametrize("text,minor", [("1.37", 37), ("v1.36.3", 36), ("v1.34.1-eks-1a2b3c", 34),
                                        ("1.35+", 35), (" v1.37.2 ", 37)])
def test_a_version_is_read_from_the_forms_clusters_report(text, minor):
    assert parse_release(text).minor == minor


@pytest.mark.parametrize("text", ["", "37", "v2.1.0", "latest", "1"])
def test_anything_else_is_refused_naming_the_input(text):
    with pytest.raises(ValueError, match=r"is not a Kubernetes version.*1\.37"):
        parse_release(text)


def test_the_api_servers_version_document_names_the_release():
    assert release_from_version({"gitVersion": "v1.36.3", "major": "1", "minor": "36"}) \
        == Release(36, "discovered")
    # a distribution's gitVersion gpupool cannot read: major and minor ("31+" on some)
    assert release_from_version({"gitVersion": "custom", "major": "1", "minor": "35+"}) \
        == Release(35, "discovered")
    assert release_from_version({"kind": "Status"}) is None
    assert release_from_version(["v1.36"]) is None


def test_unsupported_releases_get_one_line_and_supported_ones_none():
    assert release_note(Release(35)) == release_note(Release(37)) == ""
    old = release_note(Release(33))
    assert "1.33 is older than" in old and "1.35 to 1.37" in old
    new = release_note(Release(38))
    assert "newer than" in new and "allocator" in new
    # 1.34: out of upstream support, and its allocator is not one gpupool decides as
    mid = release_note(Release(34))
    assert not Release(34).supported
    assert "does not decide DRA allocation as Kubernetes 1.34's allocator" in mid
    assert "never denied" in mid
    assert "\n" not in old + new + mid


def test_a_cluster_that_has_said_nothing_is_decided_as_the_newest_release():
    assert NEWEST_RELEASE.minor == 37 and NEWEST_RELEASE.source == "assumed"
    assert not Release(35).request_takes_a_device_once
    assert Release(38).distinct_over_every_device
