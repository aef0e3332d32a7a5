"""The scheduler-half check fails each broken OffloadingConnector for its bug, and passes vLLM's own.

One suite run drives the unmodified OffloadingConnector and the copies of
tests/checks/offloading_broken.py (each one scheduler-half lifecycle bug) through
``test_scheduler_half`` on every timing of the worker-results feeder. On CPU their worker half refuses the
platform, so before this check none of these bugs could fail anything here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parents[1] / "checks" / "offloading_broken.yaml"
TIMINGS = ("immediate", "next-step", "late-out-of-order", "async")

# connector -> words every one of its failures must carry
BROKEN_SCHEDULER_HALF = {
    # n0 preempted mid-prefill with its last chunk's store unread; a decoder writes one of its blocks
    "PreemptionBlindOffloadingConnector": ["PreemptionBlindOffloadingConnector", "store job", "of request n0",
                                           "had not read block", "was preempted at step",
                                           "did not flush it (jobs_to_flush"],
    # a one-token request finishes with its store unread; the next one takes its blocks
    "ReuseBlindOffloadingConnector": ["ReuseBlindOffloadingConnector", "of request s0", "had not read block",
                                      "when request s1 wrote it", "finished at step",
                                      "request_finished did not delay the free", "did not flush it"],
    "ReissuingOffloadingConnector": ["step 1: the metadata asks for store job 0 again",
                                     "report it finished twice"],
    "DroppedStoreOffloadingConnector": ["the scheduler half still has pending work",
                                        "has_pending_push_work() is True",
                                        "it waits for a job it never asked the worker for"],
    # the preempted request comes back and loads its prefix, into its blocks in reverse
    "ReversedLoadOffloadingConnector": ["load job", "writes the KV of request n0's block",
                                        "the loaded tokens would land at other positions"],
}


RUN = SelfTestRun.of_broken("test_scheduler_half", "OffloadingConnector", "tests.checks.offloading_broken",
                           BROKEN_SCHEDULER_HALF, profiles=[PROFILES])


scheduler_half_run = results_of(RUN)


def test_suite_exits_nonzero_on_broken_connectors(scheduler_half_run):
    returncode, outcomes, output = scheduler_half_run
    assert returncode == 1, output[-3000:]
    assert outcomes, "the suite reported no tests"


def test_unmodified_offloading_connector_passes_every_timing(scheduler_half_run):
    _, outcomes, output = scheduler_half_run
    mine = of_connector(outcomes, "OffloadingConnector")
    ran = {t for t in TIMINGS for o in mine if o.nodeid.endswith(f"-OffloadingConnector-{t}]")}
    assert ran == set(TIMINGS) and len(mine) == len(TIMINGS), [o.nodeid for o in mine]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


@pytest.mark.parametrize("name", list(BROKEN_SCHEDULER_HALF))
def test_broken_connector_fails_every_timing_for_its_bug(scheduler_half_run, name):
    _, outcomes, _ = scheduler_half_run
    mine = of_connector(outcomes, name)
    assert len(mine) == len(TIMINGS), [o.nodeid for o in outcomes]
    for outcome in mine:
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:800])
        assert "SchedulerHalfFailure" in outcome.message, outcome.message[:800]
        for word in BROKEN_SCHEDULER_HALF[name]:
            assert word in outcome.message, (word, outcome.message[:1500])
