"""The resumed-fill check fails each broken DecodeBenchConnector that loses track of what it filled, for the right
reason, and passes the unmodified one.

A shared run covers ``-k test_resumed_request_fill`` for DecodeBenchConnector and the broken copies
(tests/checks/decode_bench_resume_broken.py, given DecodeBenchConnector's profile by the YAML beside it).
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "decode_bench_resume_broken.yaml"

# connector class -> words its failure must carry: the step, the request, the channel and the slots
BROKEN_RESUME = {
    "RefillOnResumeConnector": ["step 7 (request r resumed from preemption (preempted at step 4 after generating 3",
                                "claimed 8 token(s) from position 64", "hold the fill 0.25 at position(s) 70..71",
                                "tokens it generated", "channel: the fill", "offset 6"],
    "RefillEveryStepConnector": ["step 2:", "request a's, not preempted, filled once already at step 1",
                                 "the blocks handed to the worker this step: {'a'"],
}

RUN = SelfTestRun.of_broken("test_resumed_request_fill", "DecodeBenchConnector",
                           "tests.checks.decode_bench_resume_broken", BROKEN_RESUME, profiles=[PROFILES])


resume_run = results_of(RUN)


def test_unmodified_decode_bench_passes(resume_run):
    _, outcomes, output = resume_run
    mine = of_connector(outcomes, "DecodeBenchConnector")
    assert [o.outcome for o in mine] == ["passed"], (output[-3000:], [o.message[:1500] for o in mine])


@pytest.mark.parametrize("name", list(BROKEN_RESUME))
def test_broken_connector_fails_with_the_step_request_and_slots(resume_run, name):
    _, outcomes, output = resume_run
    mine = of_connector(outcomes, name)
    assert [o.outcome for o in mine] == ["failed"], output[-3000:]
    for words in BROKEN_RESUME[name]:
        assert words in mine[0].message, (words, mine[0].message[:1500])
