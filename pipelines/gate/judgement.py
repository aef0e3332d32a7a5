"""The gate's judgement of the selected connectors: which tests are the change's problems, which connectors the run
did not exercise, and the verdict, in the reports' ``Verdict`` type (a headline and the gate's exit status).

A test may pass, fail as expected (xfail) or be skipped; any other outcome fails
the gate. A connector passes only when at least one runtime check ran here and
passed or failed as expected (what a runtime check is and what ran means are the
reports' one definition, ``reports.exercised``): lint alone, or only skips, is not
exercised, which is neither a pass nor a failure. What fails over the change's base too is set apart
(``base_comparison``): it says the checkout does not run over the installed build,
not that the change broke it. Where kvconform cannot drive the tested vLLM (a name or shape of its internals
moved: the suite's session names it and does not run the checks that need it), a failure of what did run still
fails the change; otherwise there is no verdict, since kvconform, not the connectors, is what must change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvconform.reports.exercised import is_runtime_check, ran
from kvconform.reports.verdict import Verdict

from .base_comparison import RUN, Base, Problem, split
from .results import GateCase

# The gate's exit statuses (documented in docs/gate.md): a verdict is 0, 1 or 3; 2 and 4 mean no verdict could be given.
EXIT_PASS = 0  # every selected connector was exercised here and passed (or failed as expected)
EXIT_FAIL = 1  # a test failed or errored, or pytest itself did
EXIT_NO_VERDICT = 2  # bad input, or a test process imported another vLLM than the one under test
EXIT_NOT_EXERCISED = 3  # nothing failed, but a selected connector ran no runtime check here
EXIT_BUILD_NEEDED = 4  # the change cannot be tested with the installed build (compiled sources, import error),
# or what fails on head fails over the change's base too: the checkout does not run over the installed build;
# or vLLM cannot run here at all (pytest's status 4 before any test: conformance/plugin/preflight.py),
# or kvconform cannot drive it (the session's findings: conformance/engine/shapes.py)
PYTEST_USAGE_ERROR = 4  # pytest's status for a run stopped before any test

PASS = Verdict("PASS", EXIT_PASS)
FAIL = Verdict("FAIL", EXIT_FAIL)
NOT_EXERCISED = Verdict("NOT EXERCISED", EXIT_NOT_EXERCISED)
FAILS_ON_BASE_TOO = Verdict("NO VERDICT: what fails here fails over the change's base too", EXIT_BUILD_NEEDED)
CANNOT_DRIVE = Verdict("NO VERDICT: kvconform cannot drive this vLLM", EXIT_BUILD_NEEDED)

FAILING = ("failed", "error")


@dataclass(frozen=True)
class GateOutcome:
    """What the run showed: the change's problems, connectors it did not exercise, and what fails over the base too;
    ``verdict`` says what that means."""

    problems: list[Problem]  # the change's
    not_exercised: dict[str, str]  # connector -> why (the skip reasons)
    on_base_too: list[Problem] = field(default_factory=list)  # failing over the change's base too: not counted
    base: Base | None = None  # the base they were compared with (None: it is the installed build, or not run)
    elsewhere: tuple[str, ...] = ()  # selected connectors that claim other platforms only: not exercised here
    cannot_drive: tuple[str, ...] = ()  # what of the tested vLLM kvconform cannot drive: its checks did not run

    @property
    def failures(self) -> list[str]:
        return [problem.line for problem in self.problems]

    @property
    def verdict(self) -> Verdict:
        """The change's problems first, then what kvconform cannot drive, failures the base shares, anything not
        exercised."""
        if self.problems:
            return FAIL
        if self.cannot_drive:
            return CANNOT_DRIVE
        if self.on_base_too:
            return FAILS_ON_BASE_TOO
        if self.not_exercised or self.elsewhere:
            return NOT_EXERCISED
        return PASS

    def against(self, base: Base) -> GateOutcome:
        """This outcome with the problems ``base`` has too set apart."""
        change, both = split(self.problems, base)
        return replace(self, problems=change, on_base_too=both, base=base)


def judge(results: list[GateCase] | None, connectors: list[str], exit_status: int) -> GateOutcome:
    """The outcome for ``connectors``, from each test's result and pytest's exit status."""
    if results is None:
        return GateOutcome([Problem(RUN, None, f"pytest exited with status {exit_status} and wrote no results")], {})
    problems = [_problem(case) for case in results if case.outcome in FAILING]
    not_exercised = {}
    for name in connectors:
        own = [case for case in results if case.connector == name]
        if any(case.outcome in FAILING for case in own):
            continue
        if not any(is_runtime_check(case.check) and ran(case.result) for case in own):
            not_exercised[name] = _why_not_exercised(own)
    if exit_status not in (0, 5) and not problems:
        problems.append(Problem(RUN, None, f"pytest exited with status {exit_status} (its log says why)"))
    return GateOutcome(problems, not_exercised)


def _problem(case: GateCase) -> Problem:
    message = f": {case.message}" if case.message else ""
    return Problem(case.junit_id, case.connector, f"{case.outcome.upper()} {case.junit_id}{message}")


def _why_not_exercised(own: list[GateCase]) -> str:
    if not own:
        return "no test of it ran"
    reasons = sorted({case.message for case in own if case.outcome == "skipped" and case.message})
    checks = sorted({case.check for case in own if ran(case.result)})
    parts = [f"only {', '.join(checks)} ran (no runtime check)"] if checks else []
    return "; ".join(parts + reasons) or "every test skipped without a reason"
