"""The judges of two channels through a wrapper (conformance/checks/wrapper_events.py, wrapper_load_failures.py),
on records written by hand: each kind of fault is named, with its child, its step and what was lost.

The suite runs them on vLLM's real Scheduler (tests/checks/test_wrapper_catches.py); these pin what each judge says
for the situations a single broken copy cannot show (a duplicated event, an event published a step late, vLLM's
scheduler mishandling a failed block under either policy).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvconform.conformance.checks.wrapper_events import StepEvents, events_problem
from kvconform.conformance.checks.wrapper_load_failures import FailedLoad, RequestAfter, load_failures_problem

NAMES = ["child 0 (A)", "child 1 (B)"]


@dataclass
class Stored:
    """Stands in for vLLM's BlockStored: what the judge reads is its kind, its block hashes and its repr."""

    block_hashes: list[int]


def test_events_each_published_once_in_their_step_pass():
    first, second = Stored([1]), Stored([2])
    step = StepEvents(1, taken={0: [first], 1: [second]}, own=[Stored([9])], published=[Stored([9]), first, second])
    assert events_problem([step], NAMES) is None


def test_events_left_in_a_child_name_it():
    step = StepEvents(3, taken={0: [Stored([1])]}, published=[Stored([1])], left={1: [Stored([2]), Stored([3])]})
    problem = events_problem([step], NAMES)
    assert problem is not None and problem.startswith("child 1 (B) produced 2 event(s): Stored(2), Stored(3)")
    assert "never took from it in step 3" in problem


def test_events_taken_but_published_a_step_late_are_lost_in_their_step():
    late = Stored([5])
    steps = [StepEvents(1, taken={1: [late]}), StepEvents(2, published=[late])]
    problem = events_problem(steps, NAMES)
    assert problem is not None and "in step 1 the wrapper took 1 event(s): Stored(5) from child 1 (B)" in problem


def test_events_published_twice_are_named():
    event = Stored([7])
    problem = events_problem([StepEvents(1, taken={0: [event]}, published=[event, event])], NAMES)
    assert problem is not None and "handed 1 event(s): Stored(7) more than the children produced" in problem


def _load(handed: set[int], after: RequestAfter) -> FailedLoad:
    return FailedLoad(step=4, child=1, blocks={6}, handed=handed, recompute_from={"req": 64}, after={"req": after})


def test_a_failed_block_that_never_reached_vllm_names_the_child_and_blocks():
    problem = load_failures_problem([_load(set(), RequestAfter(None, "finished"))], NAMES, "recompute",
                                    {"req": "LENGTH"})
    assert problem is not None and problem.startswith("child 1 (B) reported blocks [6] (of req) as failed to load in "
                                                      "step 4, but vLLM's scheduler got invalid_block_ids none")


def test_recompute_from_the_failed_block_passes():
    loads = [_load({6}, RequestAfter(64, "RUNNING"))]
    assert load_failures_problem(loads, NAMES, "recompute", {"req": "LENGTH"}) is None


def test_recompute_that_keeps_the_failed_block_computed_fails():
    problem = load_failures_problem([_load({6}, RequestAfter(96, "RUNNING"))], NAMES, "recompute", {"req": "LENGTH"})
    assert problem is not None and "left req with 96 computed tokens, past its first failed block" in problem


def test_recompute_that_finishes_the_request_fails():
    problem = load_failures_problem([_load({6}, RequestAfter(None, "finished"))], NAMES, "recompute", {"req": "ERROR"})
    assert problem is not None and "finished req (ERROR) instead of recomputing" in problem


def test_fail_policy_wants_an_error_finish():
    assert load_failures_problem([_load({6}, RequestAfter(None, "finished"))], NAMES, "fail", {"req": "ERROR"}) is None
    problem = load_failures_problem([_load({6}, RequestAfter(None, "finished"))], NAMES, "fail", {"req": "LENGTH"})
    assert problem is not None and "finished LENGTH, not with an error" in problem
