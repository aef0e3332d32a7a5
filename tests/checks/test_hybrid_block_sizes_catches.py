"""The checks on groups of different block sizes fail per-group bugs, for the right reason.

A shared run covers ``-k test_block_sizes`` (the fill check, ``conformance/test_block_sizes.py``, and the
pair round-trip, ``conformance/test_block_sizes_pair.py``) for the unmodified DecodeBenchConnector and
NixlConnector and the broken copies of tests/checks/hybrid_block_sizes_broken.py and
hybrid_pair_broken.py, and nixl_broken.py's DoneOnPostingConnector (given their originals' profiles by the YAML
files beside them). The fill check's
groups hold 64 (sliding window, group 0), 32 (full attention, group 1) and 32 (Mamba2, group 2) tokens
per block on the CPU backend; the pair's 64 (sliding window), 32 (full attention) and 32 (Mamba2).
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "hybrid_block_sizes_broken.yaml"
PAIR_PROFILES = REPO / "tests" / "checks" / "hybrid_pair_broken.yaml"
PAIR_BROKEN = ("tests.checks.hybrid_pair_broken:FirstGroupOnlyNixlConnector",
               "tests.checks.nixl_broken:DoneOnPostingConnector")
# connector -> the tests it runs (the others are skipped: the fill check does not apply to a pair, nor the
# round-trip to DecodeBenchConnector): the fill check's 2 scenarios x 2 registrations, or the pair round-trip
TESTS_RUN = {"DecodeBenchConnector": 4, "FirstGroupBlockSizeConnector": 4, "SlicedBlockSizeConnector": 4,
             "NixlConnector": 1, "FirstGroupOnlyNixlConnector": 1, "DoneOnPostingConnector": 1}
TESTS_PER_CONNECTOR = 5

# connector -> {test id fragment: words its failure must carry}; the tests not named must pass
BROKEN = {
    # group 0's 64-token blocks for the 32-token full-attention group: half its blocks left as they were
    "FirstGroupBlockSizeConnector": {
        "-two-requests-": ["FirstGroupBlockSizeConnector", "FullAttentionSpec, group 1",
                           "expected the constant fill 0.25", "not filled in the blocks the request needs"],
        "-prefix-hit-block-sizes-": ["FirstGroupBlockSizeConnector", "FullAttentionSpec, group 1",
                                     "expected the constant fill 0.25"],
    },
    # 32-token ranges sliced out of the 64-token group: right without a hit for two-requests' prompts; the
    # prefix-hit scenario's first prompt (4 x 32 + 1 tokens) gets the block holding only its last token filled
    "SlicedBlockSizeConnector": {
        "-prefix-hit-block-sizes-": ["SlicedBlockSizeConnector", "phase 1 of 'prefix-hit-block-sizes'",
                                     "the fill changed bytes the requests do not own",
                                     "a request's block in group 0, but past the tokens to fill"],
    },
    # the second group's block ids never exchanged: its blocks on the consumer keep their old bytes
    "FirstGroupOnlyNixlConnector": {
        "test_block_sizes_pair": ["FirstGroupOnlyNixlConnector", "layer model.layers.1.self_attn.attn (group 1, "
                                  "32 tokens per block; groups' block sizes [64, 32, 32])", "loaded wrong bytes"],
    },
    # reports a read received in the step it posts it (nixl_broken.py): the bytes land polls later
    "DoneOnPostingConnector": {
        "test_block_sizes_pair": ["DoneOnPostingConnector", "reported req-", "received (finished_recving) at its "
                                  "step", "groups' block sizes [64, 32, 32]",
                                  "reported the read done before it completed"],
    },
}
PAIR_NAMES = ("NixlConnector", "FirstGroupOnlyNixlConnector", "DoneOnPostingConnector")


RUN = SelfTestRun.of_broken(
    "test_block_sizes", "DecodeBenchConnector", "tests.checks.hybrid_block_sizes_broken",
    [name for name in BROKEN if name not in PAIR_NAMES], profiles=[PROFILES, PAIR_PROFILES],
    also=["NixlConnector", *PAIR_BROKEN])


block_sizes_run = results_of(RUN)


def _ran(outcomes, name):
    mine = of_connector(outcomes, name)
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in mine]
    ran = [o for o in mine if o.outcome != "skipped"]
    assert len(ran) == TESTS_RUN[name], [(o.nodeid, o.outcome, o.message[:300]) for o in mine]
    return ran


def test_suite_exits_nonzero_on_broken_connectors(block_sizes_run):
    returncode, outcomes, output = block_sizes_run
    assert returncode == 1, output[-3000:]  # pytest's status (suite_run.pytest_status)
    assert outcomes, "the suite reported no tests"


@pytest.mark.parametrize("name", ["DecodeBenchConnector", "NixlConnector"])
def test_unmodified_connector_passes(block_sizes_run, name):
    _, outcomes, _ = block_sizes_run
    for outcome in _ran(outcomes, name):
        assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_connector_fails_where_its_bug_shows(block_sizes_run, name):
    _, outcomes, _ = block_sizes_run
    for outcome in _ran(outcomes, name):
        words = next((w for fragment, w in BROKEN[name].items() if fragment in outcome.nodeid), None)
        if words is None:  # a scenario its bug does not reach: it passes there, so the other one is needed
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])
            continue
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        for word in words:
            assert word in outcome.message, (outcome.nodeid, word, outcome.message[:1500])
