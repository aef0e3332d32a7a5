"""The hybrid pair judges where a NIXL producer's prefill stops, for the right reason.

A shared run covers the pair round-trip on a hybrid cache with a Mamba group (``conformance/test_block_sizes_pair.py``)
for the unmodified NixlConnector and hybrid_pair_broken.py's TruncatesSkippingNixlConnector: vLLM 0.32's
producer-side truncation with the ``not`` of its skip_reading_prefix_cache test dropped, so the producer truncates
the request that asks for prompt logprobs and computes the others to their prompt's end, past the consumer's claim
(profiles: hybrid_pair_broken.yaml). The broken copy is vLLM 0.32's code, so this runs on that release only. On the
CPU backend the smallest group holds 32 tokens per block: req-0 has 161 prompt tokens, req-2 (prompt logprobs) 103.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "hybrid_pair_broken.yaml"

RUN = SelfTestRun.of_broken("test_block_sizes_pair", "NixlConnector", "tests.checks.hybrid_pair_broken",
                            ["TruncatesSkippingNixlConnector"], profiles=[PROFILES])

prefill_run = results_of(RUN)


def _only(outcomes, name):
    mine = of_connector(outcomes, name)
    assert len(mine) == 1, [(o.nodeid, o.outcome) for o in mine]
    return mine[0]


def test_the_unmodified_producer_stops_where_the_consumer_loads(prefill_run):
    _, outcomes, output = prefill_run
    outcome = _only(outcomes, "NixlConnector")
    assert outcome.outcome == "passed", (outcome.nodeid, outcome.outcome, outcome.message[:1500], output[-2000:])


def test_a_producer_that_truncates_the_wrong_requests_fails(prefill_run):
    _, outcomes, _ = prefill_run
    outcome = _only(outcomes, "TruncatesSkippingNixlConnector")
    assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:1500])
    for words in ("PrefillExtentFailure", "TruncatesSkippingNixlConnector",
                  # an ordinary request computed to its prompt's end, one token past what the consumer loads
                  "req-0 (161 prompt tokens): the producer computed 161 tokens and the consumer claimed 160",
                  # the request asking for prompt logprobs truncated, though the consumer reads nothing of it
                  "req-2 asked for its prompt's logprobs", "the producer computed 102 of its 103 prompt tokens"):
        assert words in outcome.message, (words, outcome.message[:3000])
