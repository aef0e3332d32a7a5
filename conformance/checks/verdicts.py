"""Independent verdicts of one check, each judged even where another failed, so that a pinned failure hides nothing.

An expected failure (an xfail entry in conformance/expectations/) accepts one failure, by its class and message. A
check that stops at its first failed assertion leaves everything after it unjudged, and a pin on that assertion
would hide a second bug behind the known one. A check whose judgements do not depend on each other makes each one a
block of its own (``Verdicts.judge``): a ``CheckFailure`` raised there is kept and the check goes on. When the check
ends, exactly one failure is raised as itself, so a pin's ``raises`` and ``match`` apply to it as before; several are
raised as one ``SeveralFailures``, which no pin can name (conformance/session/expectation_schema.py refuses the name,
and it derives from no other failure class a pin could name), so the test fails, listing every failure. Anything
else raised inside (a crash, pytest's own outcomes) ends the check at once, together with the failures kept.
A judgement that only makes sense when an earlier one held reads that one's ``Verdict.held``.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from ..engine.check_failure import CheckFailure

# Raised inside a check, these end it as they are, whatever it found: the user or the interpreter stops the run.
INTERRUPTS = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _where(error: BaseException) -> str:
    """The file and line that raised ``error``, e.g. ``pair_core.py:212``; empty when it carries no traceback."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ is not None else []
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""


class SeveralFailures(Exception):
    """Several independent failures of one check, each listed with its class and message: never one pinned cause.

    Not a ``CheckFailure`` (nor an ``AssertionError``), so a pin that names one of the failures' classes, or a base
    of them, does not accept it."""

    def __init__(self, failures: Sequence[BaseException]) -> None:
        self.failures = tuple(failures)
        lines = [f"({number}) {type(failure).__name__}"
                 + (f" at {_where(failure)}" if _where(failure) else "") + f": {failure}"
                 for number, failure in enumerate(self.failures, 1)]
        super().__init__(f"{len(self.failures)} independent failures of one check (an expected failure pins one "
                         f"cause, so none is expected):\n" + "\n".join(lines))


@dataclass
class Verdict:
    """One judgement: ``failure`` is the ``CheckFailure`` it raised, None while it holds."""

    failure: CheckFailure | None = None

    @property
    def held(self) -> bool:
        return self.failure is None


class Verdicts:
    """The judgements of one check, used as a context, each judgement in a block of its own (``Verdicts.judge``).

    On leaving, the failures kept are raised: one as itself, several as ``SeveralFailures``."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []

    @contextmanager
    def judge(self) -> Iterator[Verdict]:
        """One judgement: a ``CheckFailure`` raised in the block is kept (and set on the ``Verdict``), and the check
        goes on after the block."""
        verdict = Verdict()
        try:
            yield verdict
        except CheckFailure as failure:
            verdict.failure = failure
            self.failures.append(failure)

    def __enter__(self) -> Verdicts:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if error is None:
            if len(self.failures) == 1:
                raise self.failures[0]
            if self.failures:
                raise SeveralFailures(self.failures)
        elif self.failures and not isinstance(error, INTERRUPTS):
            raise SeveralFailures([*self.failures, error]) from error
