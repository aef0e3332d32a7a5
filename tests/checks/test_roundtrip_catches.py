"""The round-trip check fails each deliberately broken connector, for the right reason."""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

# connector class -> words its failures must carry
BROKEN_ROUNDTRIP = {
    "HardcodedCudaLoadConnector": ["device mismatch", "HardcodedCudaLoadConnector", "layer model.layers.0",
                                   "the KV cache is on cpu", "cuda"],
    "HardcodedCudaStringConnector": ["device mismatch", "HardcodedCudaStringConnector", "cuda"],
    "OffByOneInjectConnector": ["OffByOneInjectConnector"],
    "WrongBlockSaveConnector": ["WrongBlockSaveConnector", "loaded wrong bytes"],
    "EveryLayerKVCacheConnector": ["AttributeError", "'ModuleWithoutKVCache' object has no attribute 'kv_cache'"],
}


RUN = SelfTestRun.of_broken("test_roundtrip and not layout and not mla and not scenario and not other_device",
                           "ExampleConnector", "tests.checks.example_broken", BROKEN_ROUNDTRIP)


roundtrip_run = results_of(RUN)


def test_suite_exits_nonzero_on_broken_connectors(roundtrip_run):
    returncode, outcomes, output = roundtrip_run
    assert returncode == 1, output[-3000:]
    assert outcomes, "the suite reported no tests"


def test_unmodified_example_connector_passes_the_same_checks(roundtrip_run):
    _, outcomes, _ = roundtrip_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert mine and all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_ROUNDTRIP))
def test_broken_connector_fails_every_roundtrip(roundtrip_run, name):
    _, outcomes, _ = roundtrip_run
    mine = of_connector(outcomes, name)
    assert len(mine) == 4, [o.nodeid for o in outcomes]
    for outcome in mine:
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        for word in BROKEN_ROUNDTRIP[name]:
            assert word in outcome.message, (word, outcome.message[:1500])
