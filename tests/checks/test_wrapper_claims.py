"""The judgement of which child a wrapper loads a hit from (conformance/checks/wrapper_claims.py), on given answers
and on stand-in wrappers whose children answer as told: no vLLM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kvconform.conformance.checks.wrapper_claims import (
    claim_problem,
    first_claimer,
    handing_problem,
    watch_wrapper_claims,
)

NAMES = ["child 0 (A)", "child 1 (B)", "child 2 (C)"]


@pytest.mark.parametrize(("answers", "first"), [
    ([(0, (0, False)), (1, (64, False))], 1),
    ([(0, (32, False)), (1, (64, True))], 0),
    ([(1, (64, False)), (0, (32, False))], 0),  # the config's order, not the order asked
    ([(0, (0, False)), (1, (0, False))], None),
    ([(0, (None, False)), (1, (64, False))], 0),  # not yet: child 0 may hold the hit
    ([(0, (64, False)), (1, (None, False))], 0),
    ([], None),
])
def test_the_first_claiming_child_in_the_configs_order(answers, first):
    assert first_claimer(answers) == first


def test_a_claim_is_the_first_claiming_childs():
    answers = [(0, (32, False)), (1, (64, True))]
    assert claim_problem(NAMES, answers, (32, False)) is None
    problem = claim_problem(NAMES, answers, (64, True))
    assert problem is not None
    assert "it claimed (64, True), but its children answered child 0 (A) (32, False), child 1 (B) (64, True)" in problem
    assert "child 0 (A), so its claim is (32, False)" in problem
    assert claim_problem(NAMES, answers, (32, True)) is not None  # the async flag is the child's too


def test_no_claim_where_no_child_claims():
    answers = [(0, (0, False)), (1, (0, False))]
    assert claim_problem(NAMES, answers, (0, False)) is None
    assert "no child holds a hit to load" in (claim_problem(NAMES, answers, (32, False)) or "")
    assert "it asked no child" in (claim_problem(NAMES, [], (32, False)) or "")


def test_a_child_still_looking_up_first_means_not_yet():
    pending_first = [(0, (None, False)), (1, (64, False))]
    assert claim_problem(NAMES, pending_first, (None, False)) is None
    problem = claim_problem(NAMES, pending_first, (64, False))
    assert problem is not None and "child 0 (A) had not finished looking up (answered None)" in problem
    # a later child still looking up: the first claiming child is known, and "not yet" is an answer too
    pending_later = [(0, (64, False)), (1, (None, False))]
    assert claim_problem(NAMES, pending_later, (64, False)) is None
    assert claim_problem(NAMES, pending_later, (None, False)) is None


def test_the_first_claiming_child_alone_is_handed_the_load():
    assert handing_problem(NAMES, 0, 64, [(0, 64), (1, 0)]) is None
    assert handing_problem(NAMES, None, 64, [(0, 0), (1, 64)]) is None  # no child's claim given: not judged here
    assert handing_problem(NAMES, 0, 0, [(0, 0), (1, 0)]) is None
    elsewhere = handing_problem(NAMES, 0, 64, [(0, 0), (1, 64)])
    assert elsewhere is not None
    assert "which it handed on as child 0 (A): 0, child 1 (B): 64" in elsewhere
    assert "child 0 (A), the first child that claimed them, is the one to be handed all 64" in elsewhere
    both = handing_problem(NAMES, 0, 64, [(0, 64), (1, 64)])  # another child loads too
    assert both is not None and "child 0 (A): 64, child 1 (B): 64" in both
    assert "child 0 (A): 0" in (handing_problem(NAMES, 0, 64, [(1, 0)]) or "")  # never handed it at all


@dataclass
class Child:
    """A scheduler-side child that answers every lookup with ``answer`` and keeps what it is handed."""

    answer: tuple[int | None, bool]
    handed: list[int] = field(default_factory=list)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        return self.answer

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.handed.append(num_external_tokens)


@dataclass
class Wrapper:
    """A wrapper that asks every child and keeps the first (or, with ``last``, the last) child that claims."""

    sub_connectors: list[Child]
    last: bool = False
    chosen: dict[str, int] = field(default_factory=dict)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        claim: tuple[int | None, bool] = (0, False)
        for index, child in enumerate(self.sub_connectors):
            tokens, load_async = child.get_num_new_matched_tokens(request, num_computed_tokens)
            if tokens and (self.last or not claim[0]):
                self.chosen[request.request_id], claim = index, (tokens, load_async)
        return claim

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        for index, child in enumerate(self.sub_connectors):
            chosen = self.chosen.get(request.request_id) == index
            child.update_state_after_alloc(request, blocks, num_external_tokens if chosen else 0)


@dataclass
class Request:
    request_id: str


def _schedule(wrapper: Wrapper, request_id: str = "r0") -> str | None:
    record = watch_wrapper_claims(wrapper)  # type: ignore[arg-type]
    assert record is not None
    request = Request(request_id)
    tokens, _ = wrapper.get_num_new_matched_tokens(request, 0)
    wrapper.update_state_after_alloc(request, [], tokens or 0)
    return record.problem()


def test_a_wrapper_that_loads_from_its_first_claiming_child_passes():
    children = [Child((0, False)), Child((64, False)), Child((64, False))]
    assert _schedule(Wrapper(children)) is None
    assert [c.handed for c in children] == [[0], [64], [0]]  # the record handed every call on unchanged


def test_a_wrapper_that_loads_from_its_last_claiming_child_fails_naming_the_request():
    problem = _schedule(Wrapper([Child((64, False)), Child((64, False))], last=True), "c7")
    assert problem is not None and problem.startswith("request c7: vLLM's update_state_after_alloc gave it 64")
    assert "child 0 (Child): 0, child 1 (Child): 64" in problem


def test_a_claim_taken_from_a_later_child_fails_at_the_lookup():
    problem = _schedule(Wrapper([Child((32, False)), Child((64, False))], last=True))
    assert problem is not None and "it claimed (64, False)" in problem and "so its claim is (32, False)" in problem


def test_a_connector_without_children_is_not_watched():
    assert watch_wrapper_claims(Child((64, False))) is None  # type: ignore[arg-type]
    assert watch_wrapper_claims(None) is None
