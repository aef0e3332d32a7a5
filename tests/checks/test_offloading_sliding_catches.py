"""The sliding-window hit check (conformance/checks/sliding_window_hit.py) fails vLLM's OffloadingConnector, run whole
on CPU over kvconform's CPU-memory medium, when its hit covers a whole prompt where a sliding-window group is
present, and passes it unmodified.

One suite run drives OffloadingConnector (its cpu-medium variant) and tests/checks/offloading_sliding_broken.py's
copy over a cache of a full-attention and a sliding-window group: the stored prompt asked again, extended, and its
leading blocks alone. Only the last can be covered whole (the copy claims all 128 of its tokens); the other two pass
it. The copy is an edit of vLLM 0.32's scheduler half, so this runs on the default release only (tests/conftest.py
ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_sliding_broken.yaml"
ORIGINAL, BROKEN = "OffloadingConnector@cpu-medium", "WholePromptSlidingOffloadingConnector"
SITUATIONS = ("same-prompt", "extended", "leading-blocks")
FAILING = "leading-blocks"
WORDS = ("WholePromptSlidingOffloadingConnector: claim for asked-0: get_num_new_matched_tokens answered 128 external "
         "tokens after 0 computed locally, 128 of its 128-token prompt, over a cache with a sliding-window group",
         "a hit must leave at least the last prompt token to compute (at most 127 here)")

RUN = SelfTestRun.of_broken("test_sliding_window_hit", "OffloadingConnector", "tests.checks.offloading_sliding_broken",
                            [BROKEN], profiles=[PROFILES])
sliding_run = results_of(RUN)


def test_offloading_connector_over_the_cpu_medium_passes(sliding_run):
    _, outcomes, output = sliding_run
    mine = of_connector(outcomes, ORIGINAL)
    assert len(mine) == len(SITUATIONS), ([o.nodeid for o in outcomes], output[-3000:])
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


def test_the_whole_prompt_hit_fails_only_where_a_prompt_can_be_covered_whole(sliding_run):
    returncode, outcomes, output = sliding_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == len(SITUATIONS), [o.nodeid for o in outcomes]
    for outcome in mine:
        expected = "failed" if f"-{FAILING}]" in outcome.nodeid else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])
        if expected == "failed":
            for words in WORDS:
                assert words in outcome.message, (words, outcome.message[:1500])
