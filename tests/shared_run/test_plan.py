"""Self-test runs share a process only where their profiles agree (tests/shared_run/plan.py)."""

from __future__ import annotations

import pytest

from tests.shared_run.keywords import KeywordError
from tests.shared_run.plan import SelfTestRun, groups

NIXL_COPY = "connectors:\n  CopyConnector:\n    kv_buffer_device: cpu\n"
OTHER_COPY = "connectors:\n  CopyConnector:\n    kv_buffer_device: cuda\n"


def _profiles(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_runs_whose_profiles_agree_share_a_group(tmp_path):
    first = SelfTestRun.of_broken("a", "NixlConnector", "m", ["CopyConnector"],
                                  profiles=[_profiles(tmp_path, "a.yaml", NIXL_COPY)])
    second = SelfTestRun.of_broken("b", "NixlConnector", "m", ["CopyConnector"],
                                   profiles=[_profiles(tmp_path, "b.yaml", NIXL_COPY)])
    assert groups([first, second]) == [[first, second]]
    assert first.labels == ("NixlConnector", "CopyConnector")


def test_a_connector_described_two_ways_splits_the_runs(tmp_path):
    first = SelfTestRun.of_broken("a", "NixlConnector", "m", ["CopyConnector"],
                                  profiles=[_profiles(tmp_path, "a.yaml", NIXL_COPY)])
    second = SelfTestRun.of_broken("b", "NixlConnector", "m", ["CopyConnector"],
                                   profiles=[_profiles(tmp_path, "b.yaml", OTHER_COPY)])
    unprofiled = SelfTestRun.of_broken("c", "ExampleConnector", "m", ["CopyConnector"])
    assert groups([first, second, unprofiled]) == [[first], [second], [unprofiled]]


def test_a_selection_pytest_would_refuse_is_refused_where_it_is_declared():
    with pytest.raises(KeywordError, match="ends too soon"):
        SelfTestRun("test_fill and", ("DecodeBenchConnector",))
