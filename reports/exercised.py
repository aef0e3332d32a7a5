"""What a verdict rests on: per platform, which connectors the run exercised, and the known findings.

"passing" means every outcome matched kvconform's expectations, not that the connectors work: a run
where most connectors had only their source linted, or a known crash decided dozens of tests, passes
too. So every report says, beside the verdict, what was exercised, computed here once and worded by
``Exercised.text``. The definition, per platform and connector (the gate's ``judgement`` keys on the
same ``is_runtime_check``):

- a test *ran* when its outcome is not ``skipped`` (passed, failed, error, xfailed or xpassed: the
  connector's code was driven, whatever came of it);
- a *runtime check* is any check but the static ones (``lint`` reads the connector's source and runs
  none of it) and collection errors, which belong to no connector;
- a test's failure that says the connector *could not be constructed here* (the one failure of a connector
  no profile names that cannot be built: conformance/connectors/construction.py) drove no check of it: the
  probe built it, no check did;
- a connector's runtime checks *ran on a platform* when at least one test of a runtime check of that
  connector on that platform ran, its construction failure aside; otherwise it was *not run: could not be
  constructed* (that failure is its only runtime outcome), had *lint only* (its lint ran, everything else
  was skipped) or *no test run* (every test skipped, lint too).

Tests that name no connector (``-``: platform facts, collection errors) count for none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kvconform.check_table import STATIC_CHECKS

from .findings import findings
from .identity import UNKNOWN
from .matrix import build_matrix
from .model import CaseResult, Results
from .outcomes import is_failing
from .verdict import verdict

NOT_A_CHECK = frozenset({"collection"})  # a module that did not import: no connector's check
# The construction failure's first line (ConstructionFailure.failure), as pytest records it ("Failed: ..." or bare)
_CONSTRUCTION_FAILURE = re.compile(r"^(?:Failed: )?\S+ could not be constructed here \(")
UNCONSTRUCTED = "not run: could not be constructed"  # how the verdict line counts such a connector


def is_runtime_check(check: str) -> bool:
    """Whether a check drives the connector's code (every check but the static ones and collection errors)."""
    return check not in STATIC_CHECKS and check not in NOT_A_CHECK


def ran(test: CaseResult) -> bool:
    """Whether the test ran the code it checks: any outcome but a skip."""
    return test.outcome != "skipped"


def is_construction_failure(test: CaseResult) -> bool:
    """Whether the test failed because its connector could not be built here at all: no check of it ran."""
    return is_failing(test.outcome) and bool(_CONSTRUCTION_FAILURE.match(test.message))


def ran_runtime_check(test: CaseResult) -> bool:
    """Whether the test drove the connector's code in a check: a runtime check that ran, not its construction
    failure."""
    return ran(test) and is_runtime_check(test.check) and not is_construction_failure(test)


@dataclass(frozen=True)
class PlatformExercise:
    """One platform's connectors, by what of them ran."""

    platform: str
    runtime: tuple[str, ...]  # at least one runtime check ran
    lint_only: tuple[str, ...]  # no runtime check ran; the lint did
    nothing: tuple[str, ...]  # every test skipped
    unconstructed: tuple[str, ...] = ()  # no runtime check ran: its construction failed

    @property
    def connectors(self) -> int:
        return len(self.runtime) + len(self.unconstructed) + len(self.lint_only) + len(self.nothing)

    def text(self) -> str:
        """``runtime checks ran for 8 of 17 connectors on cpu; 1 not run: could not be constructed, 8 had lint only
        (why: see the matrix)``."""
        rest = [f"{len(names)} {what}" for names, what in ((self.unconstructed, UNCONSTRUCTED),
                                                           (self.lint_only, "had lint only"),
                                                           (self.nothing, "had no test run")) if names]
        why = f"; {', '.join(rest)} (why: see the matrix)" if rest else ""
        return f"runtime checks ran for {len(self.runtime)} of {self.connectors} connectors on {self.platform}{why}"


@dataclass(frozen=True)
class Exercised:
    """What the run exercised on each platform, and the known findings that decided tests."""

    platforms: tuple[PlatformExercise, ...]
    findings: int  # known findings, each once (``findings.findings``)
    finding_tests: int  # the tests those findings decided

    def text(self) -> str:
        """The description every report puts beside the verdict, one line."""
        parts = [p.text() for p in self.platforms] or ["no connector's test ran"]
        known = (f"{self.findings} known finding{'s' if self.findings != 1 else ''} ({self.finding_tests} tests)"
                 if self.findings else "no known findings")
        return "; ".join([*parts, known])


def exercised(results: Results) -> Exercised:
    """Per platform (in the matrix's order), each connector's share of the run; the known findings."""
    # platform -> connector -> what of it ran
    seen: dict[str, dict[str, _Ran]] = {}
    for test in results.tests:
        if test.connector != UNKNOWN:
            seen.setdefault(test.platform, {}).setdefault(test.connector, _Ran()).add(test)
    platforms = tuple(
        PlatformExercise(platform,
                         runtime=_named(by, _Ran.runtime_ran),
                         lint_only=_named(by, _Ran.lint_only),
                         nothing=_named(by, _Ran.nothing),
                         unconstructed=_named(by, _Ran.unconstructed))
        for platform in build_matrix(results).platforms if (by := seen.get(platform)))
    found = findings(results)
    return Exercised(platforms, len(found), sum(f.tests for f in found))


@dataclass
class _Ran:
    """One connector's tests on one platform, by what of it ran."""

    runtime: bool = False  # a runtime check ran (ran_runtime_check)
    static: bool = False  # its lint ran
    construction_failed: bool = False

    def add(self, test: CaseResult) -> None:
        self.runtime = self.runtime or ran_runtime_check(test)
        self.static = self.static or (ran(test) and test.check in STATIC_CHECKS)
        self.construction_failed = self.construction_failed or is_construction_failure(test)

    def runtime_ran(self) -> bool:
        return self.runtime

    def unconstructed(self) -> bool:
        return not self.runtime and self.construction_failed

    def lint_only(self) -> bool:
        return not self.runtime and not self.construction_failed and self.static

    def nothing(self) -> bool:
        return not self.runtime and not self.construction_failed and not self.static


def _named(by: dict[str, _Ran], kind: Callable[[_Ran], bool]) -> tuple[str, ...]:
    return tuple(sorted(name for name, what in by.items() if kind(what)))


def verdict_line(results: Results) -> str:
    """``passing (every outcome as expected) - runtime checks ran for 8 of 17 connectors on cpu; ...``: the
    verdict (``verdict.verdict``, which alone decides it) and what it rests on, as every report states it."""
    return f"{verdict(results).stated} - {exercised(results).text()}"
