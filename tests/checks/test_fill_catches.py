"""The fill checks fail each deliberately broken DecodeBenchConnector, for the right reason.

A shared run covers ``-k test_fill`` for the unmodified connector and the broken
copies (tests/checks/decode_bench_broken.py, given DecodeBenchConnector's
profile by the YAML beside it).
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "decode_bench_broken.yaml"

# connector class -> (the tests it must fail: id fragments, words each failure must carry)
BROKEN_FILL = {
    # vLLM PR #45080's crash: every list/tuple entry (and the unknown entries) is treated as a tensor.
    "DeviceOfEveryLayerConnector": (["-owned]", "-views]", "test_fill_random", "-dict-constant]", "-none-constant]"],
                                    ["object has no attribute 'device'"]),
    "UnfilledStatesConnector": (["-owned]", "-views]", "test_fill_random", "test_fill_unexpected_entry",
                                 "-owned-registration]", "-views-registration]"],
                                ["UnfilledStatesConnector", "state 0", "MambaSpec"]),
    # a request's whole block table: startup_fill on attention alone leaves no request anything to fill
    "NullBlockFillConnector": (["test_fill[", "test_fill_random", "test_fill_prefix_hit", "test_fill_unexpected_entry",
                                "-hybrid-"],
                               ["NullBlockFillConnector", "block 0 (the null block, which no request owns)"]),
    "SkippedStartupFillConnector": (["test_fill_startup", "-startup]"],
                                    ["SkippedStartupFillConnector", "the whole tensor",
                                     "at startup (startup_fill: true, in register_kv_caches)"]),
    "StartupFillsZeroedGroupsConnector": (["-hybrid-", "-startup]"],
                                          ["StartupFillsZeroedGroupsConnector", "at startup",
                                           "a group startup_fill leaves to the requests"]),
    "UnregisteredLayerCrashConnector": (["-missing-constant]"], ["KeyError", "model.layers.3.mixer"]),
    "PlatformFp8OnlyConnector": (["-fp8_e5m2-owned]", "-fp8_e5m2-pages]", "-fp8_e5m2]"],
                                 ["PlatformFp8OnlyConnector", "0.25"]),  # the constant, or the random fill's mean
    "GroupSpecFp8Connector": (["test_fill_head_sizes[cpu-CPU_ATTN-GroupSpecFp8Connector-fp8]"],
                              ["GroupSpecFp8Connector", "UniformTypeKVCacheSpecs", "expected the constant fill 0.25"]),
}
# test_fill 5 dtypes x 3 registrations, 5 random, 3 prefix-hit, 1 high block ids, 3 unexpected entries x 2 modes,
# 6 startup cases, 2 head sizes
TESTS_PER_CONNECTOR = 38
# vLLM 0.32's DecodeBenchConnector fills a tuple of block-indexed state views whole: every request's
# pages change (see the README's "bugs found"); these tests must fail, and only these.
KNOWN_BUGS = {"-views]": "the fill changed bytes the requests do not own"}


RUN = SelfTestRun.of_broken("test_fill", "DecodeBenchConnector", "tests.checks.decode_bench_broken", BROKEN_FILL,
                           profiles=[PROFILES])


fill_run = results_of(RUN)


def test_suite_exits_nonzero_on_broken_connectors(fill_run):
    returncode, outcomes, output = fill_run
    assert returncode == 1, output[-3000:]
    assert outcomes, "the suite reported no tests"


def _known_bug(nodeid: str) -> str | None:
    return next((words for fragment, words in KNOWN_BUGS.items() if fragment in nodeid), None)


def test_unmodified_decode_bench_passes_all_but_its_known_bug(fill_run):
    _, outcomes, _ = fill_run
    mine = of_connector(outcomes, "DecodeBenchConnector")
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in mine]
    for outcome in mine:
        words = _known_bug(outcome.nodeid)
        if words is None:
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])
        else:  # failing, or the strict expected failure conformance/expectations/any.yaml records
            assert outcome.outcome in ("failed", "skipped"), (outcome.nodeid, outcome.outcome)
            message = outcome.message
            recorded = "block-indexed state views whole" in message and "expectations/any.yaml" in message
            assert words in outcome.message or recorded, (outcome.nodeid, outcome.message[:1500])


@pytest.mark.parametrize("name", list(BROKEN_FILL))
def test_broken_connector_fails_the_fill_checks_its_bug_touches(fill_run, name):
    _, outcomes, _ = fill_run
    fragments, words = BROKEN_FILL[name]
    mine = of_connector(outcomes, name)
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in outcomes]
    hit = [o for o in mine if any(fragment in o.nodeid for fragment in fragments)]
    assert hit, [o.nodeid for o in mine]
    for outcome in hit:
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        if _known_bug(outcome.nodeid) is None:  # views fail for the inherited bug too, first
            for word in words:
                assert word in outcome.message, (outcome.nodeid, word, outcome.message[:1500])
