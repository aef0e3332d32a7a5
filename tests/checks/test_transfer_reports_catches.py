"""The pair checks judge what the worker reports finished, through the scheduler driver's oracle.

What a report of finished transfers means (only sends whose blocks ``request_finished`` kept, only loads a claim
made asynchronous, each once: engine/transfer_reports.py) used to be judged by the workload check alone, which
never runs the P/D pair connectors. SendsReportedReceivedConnector (nixl_broken.py) files the producer's completed
sends under ``finished_recving``; vLLM's scheduler frees a finished request's blocks on either report, so the
producer drains on time and the pair checks passed it (all but test_pair_turns, whose prefill engine also receives
and compares what it reports received). Now the driver fails it in every pair check, naming the worker, the step,
the channel and the request; the unmodified NixlConnector passes the same checks.
"""

from __future__ import annotations

from tests.checks.cases import NEEDS_NIXL, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_broken.yaml"

PREFILL_ABORT = Case("test_pair_prefill_abort", "test_pair_prefill_abort[")
ROUTED_IDS = Case("(test_pair_routed and routed-ids)", "routed-ids]")
WORDS = ["SendsReportedReceivedConnector (kv_producer, worker side), step", "(update_from_output)",
         "the worker's report of finished transfers (finished_recving ['req-",
         "as finished receiving, but no such transfer was in flight",
         "not an asynchronous load"]

CASES: dict[str, list[Case]] = {
    "NixlConnector": [PREFILL_ABORT, ROUTED_IDS],
    "SendsReportedReceivedConnector": [Case(PREFILL_ABORT.select, PREFILL_ABORT.nodeid_part, "failed", WORDS),
                                       Case(ROUTED_IDS.select, ROUTED_IDS.nodeid_part, "failed", WORDS)],
}

RUN = SelfTestRun.of_broken(selection(CASES), "NixlConnector", "tests.checks.nixl_broken",
                           ["SendsReportedReceivedConnector"], profiles=[PROFILES])


reports_run = results_of(RUN)


def test_the_pair_checks_fail_a_send_reported_as_received(reports_run):
    _, outcomes, output = reports_run
    assert_meets_its_cases(outcomes, output, "SendsReportedReceivedConnector", CASES["SendsReportedReceivedConnector"])


def test_the_unmodified_connector_passes_them(reports_run):
    _, outcomes, output = reports_run
    assert_meets_its_cases(outcomes, output, "NixlConnector", CASES["NixlConnector"])
