"""engine/ranks.py: what a rank process raised reaches the test as the connector's own exception, so a cell and its
expectations (which pin the type and message) judge a ranked engine as they judge an engine in one process."""

from __future__ import annotations

import pytest

from kvconform.conformance.engine.ranks import RankFailure, _portable, _raise_rank_error


class _Unrebuildable(Exception):
    def __init__(self, a: str, b: str) -> None:  # pickle rebuilds it from args=(message,): one argument short
        super().__init__(f"{a} {b}")


def test_a_rank_exception_is_raised_as_itself_with_the_rank_traceback_as_its_cause():
    error = _portable(RuntimeError("Cannot access accelerator device when none is available."))
    with pytest.raises(RuntimeError, match="Cannot access accelerator device") as raised:
        _raise_rank_error("X's kv_producer (TP 2): rank 0 could not start", ("Traceback ...\nRuntimeError", error))
    cause = raised.value.__cause__
    assert isinstance(cause, RankFailure)
    assert str(cause) == "X's kv_producer (TP 2): rank 0 could not start:\nTraceback ...\nRuntimeError"


def test_an_exception_that_cannot_cross_is_a_rank_failure_with_the_traceback_text():
    assert _portable(_Unrebuildable("a", "b")) is None
    assert _portable(SystemExit(3)) is None  # raised here, it would end the test run
    with pytest.raises(RankFailure, match="rank 1 failed \\(a step\\):\nTraceback ...") as raised:
        _raise_rank_error("X's kv_consumer (TP 2): rank 1 failed (a step)", ("Traceback ...", None))
    assert raised.value.__cause__ is None
