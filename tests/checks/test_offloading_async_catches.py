"""The scheduler-half check's async timing fails an OffloadingConnector whose lookup counts a block being stored as
a hit, and only that timing does; vLLM's own passes every timing.

One suite run drives the unmodified OffloadingConnector and tests/checks/offloading_async_broken.py's copy through
``test_scheduler_half`` (every timing) and the contract checks: the copy fails the async timing, naming the
lookup that claimed a block whose store is in flight, and has the unmodified connector's outcome everywhere
else. Left out: ``test_contract_empty_registration``, a known finding of vLLM's OffloadingConnector (any.yaml,
by its name), which the copy, under another name, fails as such.
"""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_async_broken.yaml"
BROKEN = "PendingAsHitOffloadingConnector"
SELECT = "test_scheduler_half or (test_contract and not empty_registration)"
WORDS = [BROKEN, "AsyncScheduler", "timing async", "the lookup of request p0 claimed",
         "the scheduler half had not been told was finished", "HIT_PENDING"]


RUN = SelfTestRun.of_broken(SELECT, "OffloadingConnector", "tests.checks.offloading_async_broken", [BROKEN],
                           profiles=[PROFILES])


async_run = results_of(RUN)


def _outcomes(outcomes, name):
    return {o.nodeid.replace(f"-{name}", "-CONNECTOR"): o for o in of_connector(outcomes, name)}


def test_unmodified_offloading_connector_passes_every_timing(async_run):
    _, outcomes, output = async_run
    mine = [o for o in of_connector(outcomes, "OffloadingConnector") if "test_scheduler_half" in o.nodeid]
    assert len(mine) == 4 and any(o.nodeid.endswith("-async]") for o in mine), output[-3000:]
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


def test_async_timing_catches_the_pending_hit(async_run):
    returncode, outcomes, output = async_run
    assert returncode == 1, output[-3000:]
    broken = _outcomes(outcomes, BROKEN)
    failed = [nodeid for nodeid, o in broken.items() if o.outcome == "failed"]
    assert len(failed) == 1 and "test_scheduler_half[" in failed[0] and failed[0].endswith("-async]"), \
        [(o.nodeid, o.outcome, o.message[:800]) for o in broken.values()]
    message = broken[failed[0]].message
    for word in WORDS:
        assert word in message, (word, message[:1500])


def test_every_other_check_gives_the_broken_copy_the_unmodified_outcome(async_run):
    _, outcomes, _ = async_run
    original, broken = _outcomes(outcomes, "OffloadingConnector"), _outcomes(outcomes, BROKEN)
    assert set(original) == set(broken) and len(broken) > 4, (sorted(original), sorted(broken))
    differ = {n: (original[n].outcome, broken[n].outcome) for n in broken
              if not n.endswith("-async]") and original[n].outcome != broken[n].outcome}
    assert not differ, differ
