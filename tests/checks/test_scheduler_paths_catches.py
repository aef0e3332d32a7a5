"""vLLM's own handling of what connectors return is judged: a broken copy of vLLM's Scheduler, named with
``--kvconform-scheduler-cls`` (tests/checks/scheduler_broken.py), fails the workload with the channel it broke.

vLLM's own Scheduler passes the same workload (the shared run); the broken one runs in a suite process of its own,
since the shared run passes no per-run options. One connector (ExampleConnector, unchanged) and one workload, the
one whose prompts fill their blocks exactly.
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, of_connector, run_suite

SELECTION = "test_workload_scenario and block-boundary"
ORIGINAL = "ExampleConnector"
RUN = SelfTestRun(SELECTION, (ORIGINAL,))
own_scheduler_run = results_of(RUN)

# broken scheduler class -> words its failure must carry
BROKEN_SCHEDULERS = {
    "SampledBlockFinishedScheduler": [
        "producer engine, step 0: request_finished block ids for p0: vLLM's scheduler handed 5 block(s)",
        "its 128 computed token(s) of 129 (block size 32) fill 4 of the 5 it held",
        "1 past its computed tokens: ["],
}


@pytest.fixture(scope="module", params=list(BROKEN_SCHEDULERS))
def broken_scheduler_run(request, tmp_path_factory):
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    status, outcomes, output = run_suite(tmp, [f"--connector={ORIGINAL}", "-k", SELECTION,
                                               f"--kvconform-scheduler-cls={BROKEN}.scheduler_broken:{name}"])
    return name, status, outcomes, output


def test_vllms_own_scheduler_passes(own_scheduler_run):
    _, outcomes, output = own_scheduler_run
    assert [o.outcome for o in of_connector(outcomes, ORIGINAL)] == ["passed"], output[-3000:]


def test_a_broken_scheduler_fails_naming_the_channel(broken_scheduler_run):
    name, status, outcomes, output = broken_scheduler_run
    mine = of_connector(outcomes, ORIGINAL)
    assert status == 1 and [o.outcome for o in mine] == ["failed"], output[-3000:]
    for words in BROKEN_SCHEDULERS[name]:
        assert words in mine[0].message, (words, mine[0].message[:2000])
