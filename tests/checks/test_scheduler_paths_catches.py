"""vLLM's own handling of what connectors return is judged: a broken copy of vLLM's Scheduler, named with
``--kvconform-scheduler-cls`` (tests/checks/scheduler_broken.py), fails the check of the channel it broke.

Each broken scheduler runs the one selection and connector that reach its path, unchanged: the workload whose prompts
fill their blocks exactly on ExampleConnector (what ``request_finished`` is handed), and the wrapper's reports on
MultiConnector's ``reporting`` variant (transfer stats from both sides: its children count layers saved on the worker
side and lookups on the scheduler side: what vLLM's scheduler returns of them, judged by the driver each step,
engine/published.py), and the workload on MultiConnector's ``late-saves`` variant (whose
``request_finished`` keeps blocks for sends that finish steps later: what vLLM frees when they are reported, judged
by the driver, engine/transfer_reports.py). vLLM's own Scheduler passes the same selections (the shared run); a broken
one runs in a suite process of its own, since the shared run passes no per-run options.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, run_suite


@dataclass(frozen=True)
class BrokenScheduler:
    """The selection and connector (as ``--connector`` takes it; a variant as test ids name it) that reach a broken
    scheduler's path, and the words its failure must carry."""

    selection: str
    connector: str
    variant: str
    words: tuple[str, ...]


FILLED_BLOCKS = BrokenScheduler(
    "test_workload_scenario and block-boundary", "ExampleConnector", "ExampleConnector",
    ("producer engine, step 0: request_finished block ids for p0: vLLM's scheduler handed 5 block(s)",
     "its 128 computed token(s) of 129 (block size 32) fill 4 of the 5 it held",
     "1 past its computed tokens: ["))
BOTH_SIDES_STATS = BrokenScheduler(
    "test_wrapper_reports and reporting", "MultiConnector", "MultiConnector@reporting",
    # the worker side's count (layers saved) is lost at the first step with both: the driver names vLLM's scheduler
    ("vLLM's scheduler (ReplacedStatsScheduler, with MultiConnector), step ", "(update_from_output): connector stats: "
     "it returned connector stats {'ReportingExampleConnector': {'saved_layers': 0, 'lookups': ",
     "the scheduler side's alone: the worker's were dropped",
     "the worker reported {'ReportingExampleConnector': {'saved_layers': 4, 'lookups': 0}} in "
     "KVConnectorOutput.kv_connector_stats"))
LEAKED_SENDS = BrokenScheduler(
    "test_workload_scenario and block-boundary and late-saves", "MultiConnector", "MultiConnector@late-saves",
    ("vLLM's scheduler (LeakedSendScheduler, with MultiConnector), step 3 (update_from_output): update_from_output "
     "took the finished sends of p0, p1 but still holds p0: blocks [",))
BROKEN_SCHEDULERS = {
    "SampledBlockFinishedScheduler": FILLED_BLOCKS,
    "ReplacedStatsScheduler": BOTH_SIDES_STATS,
    "LeakedSendScheduler": LEAKED_SENDS,
}
RUN = SelfTestRun(FILLED_BLOCKS.selection, (FILLED_BLOCKS.connector,))
STATS_RUN = SelfTestRun(BOTH_SIDES_STATS.selection, (BOTH_SIDES_STATS.connector,))
own_scheduler_run = results_of(RUN)
own_scheduler_stats_run = results_of(STATS_RUN)
SENDS_RUN = SelfTestRun(LEAKED_SENDS.selection, (LEAKED_SENDS.connector,))
own_scheduler_sends_run = results_of(SENDS_RUN)


def variant_outcomes(outcomes, case: BrokenScheduler):
    """The outcomes of the case's connector variant (a variant's id carries ``@name``; the plain one's does not)."""
    return [o for o in outcomes if any(f"-{case.variant}{end}" in o.nodeid for end in ("-", "]"))]


@pytest.fixture(scope="module", params=list(BROKEN_SCHEDULERS))
def broken_scheduler_run(request, tmp_path_factory):
    name = request.param
    case = BROKEN_SCHEDULERS[name]
    tmp = tmp_path_factory.mktemp(name)
    status, outcomes, output = run_suite(tmp, [f"--connector={case.connector}", "-k", case.selection,
                                               f"--kvconform-scheduler-cls={BROKEN}.scheduler_broken:{name}"])
    return case, status, outcomes, output


@pytest.mark.parametrize("run, case", [("own_scheduler_run", FILLED_BLOCKS),
                                       ("own_scheduler_stats_run", BOTH_SIDES_STATS),
                                       ("own_scheduler_sends_run", LEAKED_SENDS)])
def test_vllms_own_scheduler_passes(request, run, case):
    _, outcomes, output = request.getfixturevalue(run)
    assert [o.outcome for o in variant_outcomes(outcomes, case)] == ["passed"], output[-3000:]


def test_a_broken_scheduler_fails_naming_the_channel(broken_scheduler_run):
    case, status, outcomes, output = broken_scheduler_run
    mine = variant_outcomes(outcomes, case)
    assert status == 1 and [o.outcome for o in mine] == ["failed"], output[-3000:]
    for words in case.words:
        assert words in mine[0].message, (words, mine[0].message[:2000])
