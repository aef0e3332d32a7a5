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
- a connector's runtime checks *ran on a platform* when at least one test of a runtime check of that
  connector on that platform ran; otherwise it had *lint only* (its lint ran, everything else was
  skipped) or *no test run* (every test skipped, lint too).

Tests that name no connector (``-``: platform facts, collection errors) count for none.
"""

from __future__ import annotations

from dataclasses import dataclass

from .findings import findings
from .identity import UNKNOWN
from .matrix import build_matrix
from .model import CaseResult, Results
from .verdict import verdict

# Checks that read a connector's source without running it: a connector with only these ran nothing of it.
STATIC_CHECKS = frozenset({"lint"})
NOT_A_CHECK = frozenset({"collection"})  # a module that did not import: no connector's check


def is_runtime_check(check: str) -> bool:
    """Whether a check drives the connector's code (every check but the static ones and collection errors)."""
    return check not in STATIC_CHECKS and check not in NOT_A_CHECK


def ran(test: CaseResult) -> bool:
    """Whether the test ran the code it checks: any outcome but a skip."""
    return test.outcome != "skipped"


@dataclass(frozen=True)
class PlatformExercise:
    """One platform's connectors, by what of them ran."""

    platform: str
    runtime: tuple[str, ...]  # at least one runtime check ran
    lint_only: tuple[str, ...]  # no runtime check ran; the lint did
    nothing: tuple[str, ...]  # every test skipped

    @property
    def connectors(self) -> int:
        return len(self.runtime) + len(self.lint_only) + len(self.nothing)

    def text(self) -> str:
        """``runtime checks ran for 8 of 17 connectors on cpu; 9 had lint only (why: see the matrix)``."""
        rest = [f"{len(names)} had {what}" for names, what in ((self.lint_only, "lint only"),
                                                                (self.nothing, "no test run")) if names]
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
    seen: dict[str, dict[str, tuple[bool, bool]]] = {}  # platform -> connector -> (a runtime check ran, lint ran)
    for test in results.tests:
        if test.connector == UNKNOWN:
            continue
        runtime, static = seen.setdefault(test.platform, {}).get(test.connector, (False, False))
        if ran(test):
            runtime = runtime or is_runtime_check(test.check)
            static = static or test.check in STATIC_CHECKS
        seen[test.platform][test.connector] = (runtime, static)
    platforms = tuple(
        PlatformExercise(platform,
                         runtime=tuple(sorted(c for c, (r, _) in by.items() if r)),
                         lint_only=tuple(sorted(c for c, (r, s) in by.items() if not r and s)),
                         nothing=tuple(sorted(c for c, (r, s) in by.items() if not r and not s)))
        for platform in build_matrix(results).platforms if (by := seen.get(platform)))
    found = findings(results)
    return Exercised(platforms, len(found), sum(f.tests for f in found))


def verdict_line(results: Results) -> str:
    """``passing (every outcome as expected) - runtime checks ran for 8 of 17 connectors on cpu; ...``: the
    verdict (``verdict.verdict``, which alone decides it) and what it rests on, as every report states it."""
    return f"{verdict(results).stated} - {exercised(results).text()}"
