"""The fill checks on groups of different block sizes fails per-group block arithmetic bugs, for the right reason.

One subprocess runs ``-k test_block_sizes`` for the unmodified DecodeBenchConnector
and the broken copies of tests/broken_connectors/hybrid_block_sizes_broken.py (given
DecodeBenchConnector's profile by the YAML beside it). The groups there hold 64
(sliding window, group 0), 32 (full attention, group 1) and 32 (Mamba2, group 2)
tokens per block on the CPU backend.
"""

from __future__ import annotations

import pytest

from tests.selftest.suite_run import REPO, of_connector, run_broken

PROFILES = REPO / "tests" / "broken_connectors" / "hybrid_block_sizes_broken.yaml"
TESTS_PER_CONNECTOR = 4  # 2 scenarios x 2 registrations

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
}


@pytest.fixture(scope="module")
def block_sizes_run(tmp_path_factory):
    return run_broken(tmp_path_factory.mktemp("block-sizes-selftest"), "test_block_sizes",
                      "DecodeBenchConnector", "hybrid_block_sizes_broken", list(BROKEN),
                      ("--profiles", str(PROFILES)))


def test_suite_exits_nonzero_on_broken_connectors(block_sizes_run):
    returncode, outcomes, output = block_sizes_run
    assert returncode == 1, output[-3000:]
    assert outcomes, "the suite reported no tests"


def test_unmodified_decode_bench_passes(block_sizes_run):
    _, outcomes, _ = block_sizes_run
    mine = of_connector(outcomes, "DecodeBenchConnector")
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in mine]
    for outcome in mine:
        assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_connector_fails_where_its_bug_shows(block_sizes_run, name):
    _, outcomes, _ = block_sizes_run
    mine = of_connector(outcomes, name)
    assert len(mine) == TESTS_PER_CONNECTOR, [o.nodeid for o in outcomes]
    for outcome in mine:
        words = next((w for fragment, w in BROKEN[name].items() if fragment in outcome.nodeid), None)
        if words is None:  # a scenario its bug does not reach: it passes there, so the other one is needed
            assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])
            continue
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        for word in words:
            assert word in outcome.message, (outcome.nodeid, word, outcome.message[:1500])
