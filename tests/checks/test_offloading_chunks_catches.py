"""The sliding-window hit's mid-chunk-hit situation (conformance/checks/sliding_window_hit.py), on OffloadingConnector's
three-block-chunks settings, fails a copy whose stores combine a chunk's block offsets with ``^`` (the mutation
floor's survivor ``offloading/scheduler.py:1779``), and passes the unmodified connector there.

One suite run drives OffloadingConnector (its three-block-chunks variant: the whole connector on CPU, three blocks per
chunk) and tests/checks/offloading_chunks_broken.py's copy, on three blocks per chunk and on two. Its 256-token prompt
stores two chunks of the 32-token full-attention group, and the second chunk's store takes blocks 3, 2, 1 for 3, 4, 5:
the copy lists two of the first chunk's blocks again, and its scheduler half crashes when the store it let run past
the request's finish completes (``_remove_pending_job`` meets a block it already released). The situations whose
prompts fill one chunk pass it, as does every situation on two blocks per chunk, where ``^`` and ``+`` agree. The copy
is an edit of vLLM 0.32's scheduler half, so this runs on the default release only (tests/conftest.py
ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_chunks_broken.yaml"
ORIGINAL = "OffloadingConnector@three-block-chunks"
BROKEN = "XorOffsetChunksOffloadingConnector"
SITUATIONS = ("same-prompt", "extended", "leading-blocks", "mid-chunk-hit")
FAILING = "mid-chunk-hit"
# the copy's crash: vLLM's scheduler hands the finished store to the scheduler half, which releases a block twice
WORDS = ("KeyError", "update_connector_output", "_remove_pending_job")

RUN = SelfTestRun.of_broken("test_sliding_window_hit", "OffloadingConnector", "tests.checks.offloading_chunks_broken",
                            [BROKEN], profiles=[PROFILES])
chunks_run = results_of(RUN)


def test_the_unchanged_connector_passes_on_three_block_chunks(chunks_run):
    _, outcomes, output = chunks_run
    mine = of_connector(outcomes, ORIGINAL)
    assert len(mine) == len(SITUATIONS), ([o.nodeid for o in outcomes], output[-3000:])
    for outcome in mine:  # its profile names the one situation it serves: the rest skip
        expected = "passed" if f"-{FAILING}]" in outcome.nodeid else "skipped"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])


def test_the_copy_fails_only_mid_chunk_hit_on_three_block_chunks(chunks_run):
    returncode, outcomes, output = chunks_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == len(SITUATIONS), [o.nodeid for o in outcomes]
    for outcome in mine:
        expected = "failed" if f"-{FAILING}]" in outcome.nodeid else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])
        if expected == "failed":
            assert "test_sliding_window_hit" in outcome.nodeid, outcome.nodeid
            for word in WORDS:
                assert word in outcome.message, (word, outcome.message[-3000:])


@pytest.mark.parametrize("situation", SITUATIONS)
def test_the_copy_passes_on_two_block_chunks(chunks_run, situation):
    _, outcomes, _ = chunks_run
    mine = [o for o in of_connector(outcomes, f"{BROKEN}@two-block-chunks") if f"-{situation}]" in o.nodeid]
    assert len(mine) == 1, [o.nodeid for o in outcomes]
    assert mine[0].outcome == "passed", (mine[0].nodeid, mine[0].outcome, mine[0].message[:800])
