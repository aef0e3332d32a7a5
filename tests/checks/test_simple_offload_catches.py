"""The scheduler-half check holds SimpleCPUOffloadConnector's scheduler half: a lookup that skips its stored blocks,
one whose claim covers the prompt's last token, one that inverts skip_reading_prefix_cache, KV events without the
blocks' tokens, and a preempted request whose readmitted blocks are never offloaded all fail; vLLM's own passes.

One suite run drives the unmodified SimpleCPUOffloadConnector and tests/checks/simple_offload_broken.py's copies (the
mutation floor's survivors ``vllm/v1/simple_kv_offload/manager.py:366``, ``:373``, ``:349`` and ``:665``, and the
preemption situation of issue 60's CPU-offload family, written by hand) through
``test_scheduler_half`` on the next-step timing, whose feeder plays the family's worker
(conformance/engine/simple_offload_worker_feeder.py). The copies edit vLLM 0.32's code, so this runs on the default
release only (tests/conftest.py ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "simple_offload_broken.yaml"
SKIPPED, WHOLE = "SkippedHashesSimpleOffloadConnector", "WholePromptSimpleOffloadConnector"
INVERTED, UNTOKENED = "InvertedSkipSimpleOffloadConnector", "UntokenedEventsSimpleOffloadConnector"
NO_RESET = "NoPreemptionResetSimpleOffloadConnector"

RUN = SelfTestRun.of_broken("test_scheduler_half and next-step", "SimpleCPUOffloadConnector",
                            "tests.checks.simple_offload_broken", [SKIPPED, WHOLE, INVERTED, UNTOKENED, NO_RESET],
                            profiles=[PROFILES])


simple_run = results_of(RUN)


def test_simple_offload_scheduler_half_passes(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, "SimpleCPUOffloadConnector")
    assert [o.outcome for o in mine] == ["passed"], ([(o.nodeid, o.message[:800]) for o in mine], output[-3000:])


def test_a_lookup_that_skips_stored_blocks_fails(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, SKIPPED)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for words in ("SchedulerHalfFailure", "claimed 0 tokens beyond 0 computed, but its blocks 0 to",
                  "were stored (their stores reported finished"):
        assert words in mine[0].message, (words, mine[0].message[:1500])


def test_a_claim_of_the_last_token_fails(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, WHOLE)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for words in ("SchedulerHalfFailure", "the lookup of request r1 claimed 32 tokens beyond 128 computed, 160 of its "
                  "160 tokens: none left for vLLM to compute", "must leave at least the last token"):
        assert words in mine[0].message, (words, mine[0].message[:1500])


def test_an_inverted_skip_reading_test_fails(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, INVERTED)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for words in ("SchedulerHalfFailure", "claimed 0 tokens beyond 0 computed, but its blocks 0 to",
                  "were stored (their stores reported finished"):
        assert words in mine[0].message, (words, mine[0].message[:1500])


def test_block_stored_events_without_tokens_fail(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, UNTOKENED)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for words in ("SchedulerHalfFailure", "KV events: the BlockStored of block 0 of request d0",
                  "carries token_ids [] (0 tokens) for the block's 32 tokens"):
        assert words in mine[0].message, (words, mine[0].message[:1500])


def test_a_readmitted_request_whose_blocks_are_never_offloaded_fails(simple_run):
    _, outcomes, output = simple_run
    mine = of_connector(outcomes, NO_RESET)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for words in ("SchedulerHalfFailure", "request n0 finished at step", "its block(s) [3, 4] were never asked to be "
                  "stored", "in eager mode (its default) it stores each block"):
        assert words in mine[0].message, (words, mine[0].message[:1500])
