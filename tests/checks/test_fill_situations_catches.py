"""The fill check's situations that the rest of it lacks fail the two DecodeBenchConnector bugs only they reach.

Two mutants of vLLM 0.32's DecodeBenchConnector passed every other fill test (the mutation floor's survivors),
written by hand in tests/checks/decode_bench_broken.py: a scheduler whose per-group loop stops at the first group
filled at startup (only a cache whose state layers come first has a group after it), and a worker that drops the
block ids past a cache tensor's last dimension (64 on CPU; the suite's other pools hold 48 blocks). One shared run
drives both situations over the unmodified connector and the two copies: each copy fails its own and passes the
other's.
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "decode_bench_broken.yaml"
SITUATIONS = ("test_fill_high_block_ids[", "-hybrid-state-layers-first]")  # id fragments of the two tests
# copy -> (the situation that fails it, words its failure must carry)
CAUGHT: dict[str, tuple[str, tuple[str, ...]]] = {
    "StopsAtStartupGroupConnector": ("-hybrid-state-layers-first]", (
        "StopsAtStartupGroupConnector: layer", "(FullAttentionSpec, group 2", "expected the constant fill 0.25",
        "not filled in the blocks the request needs")),
    "LastDimensionBoundConnector": ("test_fill_high_block_ids[", (
        "LastDimensionBoundConnector: layer", "(FullAttentionSpec, group 0", "(block 70)",
        "expected the constant fill 0.25", "not filled in the blocks the request needs")),
}

RUN = SelfTestRun.of_broken("test_fill_high_block_ids or state-layers-first", "DecodeBenchConnector",
                            "tests.checks.decode_bench_broken", list(CAUGHT), profiles=[PROFILES])


situations_run = results_of(RUN)


def _situations(outcomes, connector):
    return [o for o in of_connector(outcomes, connector) if any(s in o.nodeid for s in SITUATIONS)]


def test_the_unmodified_connector_passes_both_situations(situations_run):
    _, outcomes, output = situations_run
    mine = _situations(outcomes, "DecodeBenchConnector")
    assert len(mine) == len(SITUATIONS), ([o.nodeid for o in outcomes], output[-3000:])
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


@pytest.mark.parametrize("broken", list(CAUGHT))
def test_each_copy_fails_its_situation_for_its_reason(situations_run, broken):
    returncode, outcomes, output = situations_run
    assert returncode == 1, output[-3000:]
    failing, words = CAUGHT[broken]
    mine = of_connector(outcomes, broken)
    assert len(mine) == len(SITUATIONS), [o.nodeid for o in outcomes]
    for outcome in mine:
        expected = "failed" if failing in outcome.nodeid else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])
        if expected == "failed":
            for word in words:
                assert word in outcome.message, (word, outcome.message[:1500])
