"""What a set of results means, once: the headline and the exit status.

``kvconform report``'s exit status is what a CI step keys on, and the headline is
what a person reads first; both come from this one table so they never disagree.
The first rule that holds decides. A headline whose word could be read for more
than it says carries its meaning (``passing``: every outcome matched kvconform's
expectations, not "the connectors work"); what the run exercised is said beside it
by every report (``exercised.verdict_line``), never decided here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .model import Results
from .not_run import is_not_run
from .outcomes import is_failing


@dataclass(frozen=True)
class Verdict:
    headline: str
    exit_status: int  # kvconform report's, unless --exit-zero
    meaning: str = ""  # what the headline says and no more, where its word could be read for more

    @property
    def stated(self) -> str:
        """``passing (every outcome as expected)``: the headline with its meaning."""
        return f"{self.headline} ({self.meaning})" if self.meaning else self.headline


def _has_failures(results: Results) -> bool:
    return any(is_failing(outcome) for outcome in results.totals)


def _is_empty(results: Results) -> bool:
    return not results.tests


def _cannot_drive_vllm(results: Results) -> bool:
    return any(run.vllm_mismatches for run in results.runs)


def _has_not_run(results: Results) -> bool:
    return any(is_not_run(test) for test in results.tests)


def _has_stale_expectations(results: Results) -> bool:
    return any(run.stale_expectations for run in results.runs)


# (rule, verdict): failures first; a run that tested nothing is not a success; an expectation that
# matched no test means the expectations no longer describe the suite.
RULES: tuple[tuple[Callable[[Results], bool], Verdict], ...] = (
    (_has_failures, Verdict("FAILING", 1, "a test failed or errored")),
    (_is_empty, Verdict("no tests ran", 1)),
    # not the connectors' result: the checks that need what kvconform cannot drive did not run (caveats say what)
    (_cannot_drive_vllm, Verdict("not tested: kvconform cannot drive this vLLM", 1)),
    # a connector that could not be built here, its construction test deselected: its checks never started
    (_has_not_run, Verdict("not tested: checks that could not start here (see Not run)", 1)),
    (_has_stale_expectations, Verdict("passing, but expectations matched no test", 1)),
)
PASSING = Verdict("passing", 0, "every outcome as expected")


def caveats(results: Results) -> list[str]:
    """What a reader must know beside the verdict, once each: a run's vLLM that kvconform's CI does not test,
    the expected failures that passed there (an entry to remove or narrow), and what the run found about its
    environment."""
    notes = [note for run in results.runs
             for note in (run.vllm_note, *(f"kvconform cannot drive vLLM {run.vllm}: {m}" for m in run.vllm_mismatches),
                          *(p.note for p in run.passing_expectations), *run.environment_notes)]
    return list(dict.fromkeys(filter(None, notes)))


def verdict(results: Results) -> Verdict:
    return next((v for rule, v in RULES if rule(results)), PASSING)
