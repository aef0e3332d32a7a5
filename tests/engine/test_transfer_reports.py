"""The rules on what a worker reports finished (engine/transfer_reports.py), on their own: no vLLM, no connector.

Each case feeds ``TransferReports`` the scheduler side's answers as the driver records them (request_finished's
flag, the claims) and judges a report: the transfers in flight pass, everything else fails naming the request and
why, in the words the self-tests match ("as finished sending, but no such transfer was in flight").
"""

from __future__ import annotations

from kvconform.conformance.engine.transfer_reports import (
    TransferReports,
    sends_not_freed,
    unclaimed_receives,
    unkept_sends,
)

NOT_IN_FLIGHT = "but no such transfer was in flight"


def test_a_kept_send_is_reported_once():
    reports = TransferReports()
    reports.finished("p0", kept=True)
    assert reports.take({"p0"}, set(), "step 3") is None
    problem = reports.take({"p0"}, set(), "step 5")
    assert problem is not None and f"reported p0 as finished sending, {NOT_IN_FLIGHT}" in problem, problem
    assert "its send was reported finished already, at step 3" in problem, problem


def test_a_send_of_a_request_whose_blocks_were_not_kept_fails():
    reports = TransferReports()
    reports.finished("p0", kept=False)
    problem = unkept_sends(reports, {"p0"})
    assert problem is not None and "request_finished returned False for it" in problem, problem
    assert "(in flight: none;" in problem, problem


def test_a_send_of_a_request_not_finished_fails():
    reports = TransferReports()
    reports.finished("p1", kept=True)
    problem = unkept_sends(reports, {"p0", "p1"})
    assert problem is not None and f"reported p0 as finished sending, {NOT_IN_FLIGHT} (in flight: p1;" in problem
    assert "request_finished was never called for it" in problem, problem


def test_a_request_kept_again_may_be_reported_again():
    """A request id reused after its send was reported (a later request of the same id) may send again."""
    reports = TransferReports()
    reports.finished("p0", kept=True)
    assert reports.take({"p0"}, set(), "step 1") is None
    reports.finished("p0", kept=True)
    assert reports.take({"p0"}, set(), "step 4") is None


def test_a_false_answer_after_a_true_one_leaves_the_blocks_kept():
    """A wrapper's request_finished_all_groups that calls its own request_finished: the first True kept them."""
    reports = TransferReports()
    reports.finished("p0", kept=True)
    reports.finished("p0", kept=False)
    assert unkept_sends(reports, {"p0"}) is None


def test_an_async_claim_is_received_once():
    reports = TransferReports()
    reports.claimed("c0", 64, True)
    assert reports.take(set(), {"c0"}, "step 2") is None
    problem = reports.take(set(), {"c0"}, "step 3")
    assert problem is not None and f"reported c0 as finished receiving, {NOT_IN_FLIGHT}" in problem, problem
    assert "its load was reported received already, at step 2" in problem, problem


def test_a_resumed_request_claims_a_load_again():
    reports = TransferReports()
    reports.claimed("c0", 64, True)
    assert reports.take(set(), {"c0"}, "step 2") is None
    reports.claimed("c0", 32, True)  # preempted and readmitted: a new claim, a new load
    assert reports.take(set(), {"c0"}, "step 6") is None


def test_a_receive_without_an_async_claim_fails():
    reports = TransferReports()
    reports.claimed("c0", 96, False)
    reports.claimed("c1", 0, False)
    problem = unclaimed_receives(reports, {"c0", "c1", "c2"})
    assert problem is not None and f"reported c0, c1, c2 as finished receiving, {NOT_IN_FLIGHT}" in problem, problem
    assert "c0: its claim was (96, False), not an asynchronous load" in problem, problem
    assert "c2: the connector never answered a lookup for it" in problem, problem


def test_an_async_flag_without_tokens_starts_no_load():
    reports = TransferReports()
    reports.claimed("c0", None, True)  # "ask again": vLLM waits for nothing
    assert unclaimed_receives(reports, {"c0"}) is not None


def test_a_send_reported_as_received_fails_as_a_receive():
    """The producer's completed send filed under finished_recving (tests/checks/nixl_broken.py's copy)."""
    reports = TransferReports()
    reports.finished("p0", kept=True)
    problem = reports.take(set(), {"p0"}, "step 4")
    assert problem is not None and f"reported p0 as finished receiving, {NOT_IN_FLIGHT}" in problem, problem


def test_the_first_problem_is_the_sends():
    reports = TransferReports()
    problem = reports.take({"p0"}, {"c0"}, "step 0")
    assert problem is not None and "as finished sending" in problem and "receiving" not in problem, problem


def test_empty_reports_pass():
    assert TransferReports().take(set(), set(), "step 0") is None


def test_a_freed_send_passes_and_a_held_one_names_what_vllm_kept():
    assert sends_not_freed({}) is None
    problem = sends_not_freed({"p0": "the request (FINISHED_STOPPED) and blocks [3, 4]"})
    assert problem is not None and "update_from_output took the finished sends of p0 but still holds" in problem
    assert "p0: the request (FINISHED_STOPPED) and blocks [3, 4]" in problem, problem
