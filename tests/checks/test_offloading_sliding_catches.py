"""The sliding-window hit check (conformance/checks/sliding_window_hit.py) fails vLLM's OffloadingConnector, run whole
on CPU over kvconform's CPU-memory medium, when its hit covers a whole prompt where a sliding-window group is present,
or when the window it counts back from a hit's end inside a chunk is wrong, and passes it unmodified.

One suite run drives OffloadingConnector (its cpu-medium and two-block-chunks variants) and
tests/checks/offloading_sliding_broken.py's two copies. The first copy, on the cpu-medium settings: the stored prompt
asked again, extended, and its leading blocks alone over a full-attention and a sliding-window group; only the last
can be covered whole (the copy claims all 128 of its tokens), the other two pass it, as does mid-chunk-hit. The
second copy (the mutation floor's survivor ``offloading/scheduler.py:122``), on two blocks per chunk, every situation:
only mid-chunk-hit, whose hit ends inside a sliding-window chunk after one never stored, fails it (no hit at all).
The copies are edits of vLLM 0.32's scheduler half, so this runs on the default release only (tests/conftest.py
ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_sliding_broken.yaml"
MEDIUM, TWO_BLOCK_CHUNKS = "OffloadingConnector@cpu-medium", "OffloadingConnector@two-block-chunks"
WHOLE_PROMPT, POWER_PADDING = "WholePromptSlidingOffloadingConnector", "PowerPaddingSlidingOffloadingConnector"
SITUATIONS = ("same-prompt", "extended", "leading-blocks", "mid-chunk-hit")
ONLY_ITS_SITUATION = {TWO_BLOCK_CHUNKS: "mid-chunk-hit"}  # a variant whose profile names one situation: the rest skip
# copy -> (the situation that fails it, words its failure must carry)
CAUGHT = {
    WHOLE_PROMPT: ("leading-blocks", (
        "WholePromptSlidingOffloadingConnector: claim for asked-0: get_num_new_matched_tokens answered 128 external "
        "tokens after 0 computed locally, 128 of its 128-token prompt, over a cache with a sliding-window group",
        "a hit must leave at least the last prompt token to compute (at most 127 here)")),
    POWER_PADDING: ("mid-chunk-hit", (
        "PowerPaddingSlidingOffloadingConnector: claim for asked-0 (256-token prompt, over a cache with groups "
        "sliding, wide-full, mamba2): get_num_new_matched_tokens answered 0 external tokens after 0 computed locally",
        "after the producer stored its first 256 and first 200 tokens (2 requests): nothing was loaded")),
}

RUN = SelfTestRun.of_broken("test_sliding_window_hit", "OffloadingConnector", "tests.checks.offloading_sliding_broken",
                            list(CAUGHT), profiles=[PROFILES])
sliding_run = results_of(RUN)


@pytest.mark.parametrize("original", [MEDIUM, TWO_BLOCK_CHUNKS])
def test_the_unchanged_connector_passes(sliding_run, original):
    _, outcomes, output = sliding_run
    mine = of_connector(outcomes, original)
    assert len(mine) == len(SITUATIONS), ([o.nodeid for o in outcomes], output[-3000:])
    for outcome in mine:
        only = ONLY_ITS_SITUATION.get(original)
        expected = "skipped" if only is not None and f"-{only}]" not in outcome.nodeid else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])


@pytest.mark.parametrize("broken", list(CAUGHT))
def test_each_copy_fails_only_its_situation_for_its_reason(sliding_run, broken):
    returncode, outcomes, output = sliding_run
    assert returncode == 1, output[-3000:]
    failing, words = CAUGHT[broken]
    mine = of_connector(outcomes, broken)
    assert len(mine) == len(SITUATIONS), [o.nodeid for o in outcomes]
    for outcome in mine:
        expected = "failed" if f"-{failing}]" in outcome.nodeid else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])
        if expected == "failed":
            assert "test_sliding_window_hit" in outcome.nodeid, outcome.nodeid
            for phrase in words:
                assert phrase in outcome.message, (phrase, outcome.message[:1500])
