"""A check's independent verdicts (conformance/checks/verdicts.py) against the expectations' matching of a pin.

One failure leaves the check as itself, so the pin that names it still accepts it; several leave as one
``SeveralFailures``, which no pin accepts, even one whose ``raises`` and ``match`` fit one of them, and which no
entry can name. A crash ends the check at once, with the failures kept.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvconform.conformance.checks.pair_core import PairFailure
from kvconform.conformance.checks.verdicts import SeveralFailures, Verdicts
from kvconform.conformance.session.expectation_schema import Entry

RELEASE = "the producer did not release its pages (finished_sending) within 15 s (producer holds req-0)"
LEAK = "after the consumer drained, the consumer still holds 2 block(s): they never return to the free pool"


def pin(raises: str = "PairFailure", match: str = r"producer did not release its pages") -> Entry:
    """An xfail entry like finding 20's."""
    return Entry(test="*test_pair_notify_only[*]", expect="xfail", reason="a pinned finding", finding_class="bug",
                 link="https://github.com/vllm-project/vllm/pull/1", raises=raises, match=match)


def judged(*messages: str) -> BaseException:
    """What leaves a check whose verdicts raise ``PairFailure``s with ``messages`` (a verdict that holds between)."""
    with pytest.raises(BaseException) as caught:
        with Verdicts() as verdicts:
            for message in messages:
                with verdicts.judge():
                    raise PairFailure(message)
                with verdicts.judge():
                    pass
    return caught.value


def test_no_failure_leaves_nothing():
    with Verdicts() as verdicts:
        with verdicts.judge() as verdict:
            pass
    assert verdict.held and not verdicts.failures


def test_the_check_goes_on_after_a_failed_verdict():
    after = []
    with pytest.raises(PairFailure):
        with Verdicts() as verdicts:
            with verdicts.judge() as first:
                raise PairFailure(RELEASE)
            after.append(first.held)
    assert after == [False]


def test_one_failure_leaves_as_itself_and_its_pin_accepts_it():
    error = judged(RELEASE)
    assert type(error) is PairFailure and str(error) == RELEASE
    assert pin().mismatch("call", error) is None


def test_several_failures_leave_as_one_that_the_pin_of_one_of_them_does_not_accept():
    error = judged(RELEASE, LEAK)
    assert isinstance(error, SeveralFailures)
    assert [str(failure) for failure in error.failures] == [RELEASE, LEAK]
    assert RELEASE in str(error) and LEAK in str(error)  # every failure listed, the pinned one's message too
    for raises in ("PairFailure", "AssertionError", "builtins.AssertionError"):
        why = pin(raises=raises).mismatch("call", error)
        assert why is not None and "it raised SeveralFailures" in why, (raises, why)


@pytest.mark.parametrize("name", ["SeveralFailures", "kvconform.conformance.checks.verdicts.SeveralFailures",
                                  "object", "builtins.object"])
def test_no_entry_can_name_the_combined_failure_or_a_base_of_it(name):
    assert any(name in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}") for cls in SeveralFailures.__mro__)
    with pytest.raises(ValidationError, match="matches any failure of its kind"):
        pin(raises=name)


def test_a_crash_after_a_failure_leaves_with_it():
    with pytest.raises(SeveralFailures) as caught:
        with Verdicts() as verdicts:
            with verdicts.judge():
                raise PairFailure(RELEASE)
            raise RuntimeError("the connector crashed")
    assert [type(failure) for failure in caught.value.failures] == [PairFailure, RuntimeError]
    assert pin(raises="RuntimeError", match="crashed").mismatch("call", caught.value) is not None


def test_a_crash_alone_leaves_as_itself():
    with pytest.raises(RuntimeError, match="crashed"):
        with Verdicts() as verdicts:
            with verdicts.judge():
                raise RuntimeError("the connector crashed")
