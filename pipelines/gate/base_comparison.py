"""The gate judges the change, not its base: what fails over the base too is not the change's doing.

``gate --run`` tests a checkout's Python over the installed build's compiled
parts (``tested_vllm``). A reviewer's checkout is rarely the installed release:
a main branch ahead of it may not run over the older build at all (a newer
Python over an older build can fail every test of a connector at setup), which
is no fault of a change on top of it. So when the run over the head has failures and the
change's base (the commit the head forked from) is not the installed build, its
``vllm/`` tree compared by git blob id (``overlay.compare_with_build``), the
failed tests run again over the base. Only what fails on head and not on the
base counts against the change; what fails on both says that this checkout does
not run over the installed build (exit 4, no verdict on those tests).

A base that is the installed build, or a head run without failures, costs
nothing more: no comparison, no second run. This module holds the data and the
decisions (which base, which tests to run again, which problem is whose);
``suite_run`` runs the tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .overlay import InstalledBuild, compare_with_build

RUN = ""  # the test of a problem with the run itself (pytest's exit status), not with one test

# One name as pytest's -k grammar reads it (``_pytest/mark/expression.py``'s ident, less the backslash).
_KEYWORD_NAME = re.compile(r"[\w:+.\[\]/-]+")
_KEYWORD_WORDS = {"and", "or", "not", "True", "False", "None"}


@dataclass(frozen=True)
class Problem:
    """One thing that fails the gate: a test that failed or errored, or the run itself."""

    test: str  # the test's JUnit id (``classname::name``), or RUN
    connector: str | None
    line: str  # as the verdict lists it


@dataclass(frozen=True)
class Base:
    """The change's base where it is not the installed build, and, once run, what fails over it."""

    commit: str
    build: InstalledBuild
    differing: int  # files of its ``vllm/`` that are not the installed build's
    failing: frozenset[str] = frozenset()  # the tests (and RUN) that failed over it
    broken: str = ""  # why nothing ran over it (it does not import, no results): every test fails there

    def fails(self, problem: Problem) -> bool:
        """Whether the base fails as the head did: then the problem is not the change's."""
        return bool(self.broken) or problem.test in self.failing

    def does_not_run(self) -> str:
        """What a problem on both sides says about the checkout."""
        return (f"this checkout does not run over the installed build {self.build.distribution} "
                f"{self.build.version} ({self.build.package_dir}): {self.differing} file(s) of its base "
                f"{self.commit[:12]} differ from it")

    def why_broken(self) -> str:
        return f" ({self.broken})" if self.broken else ""


def base_to_compare(repo: Path, fork: str, build: InstalledBuild) -> Base | None:
    """The change's base, when its ``vllm/`` is not ``build``'s (a GateError where it holds no vLLM); else None."""
    differing = len(compare_with_build(repo, fork, build).differing)
    return Base(fork, build, differing) if differing else None


def rerun_keyword(problems: Iterable[Problem], keyword: str | None) -> str | None:
    """The ``-k`` that runs the failed tests again (and, by pytest's substring match, perhaps a few more).

    Where one cannot be named in a -k expression (a problem with the run itself, a
    test id the grammar cannot read), the whole selection (``keyword``) runs again.
    """
    tests = [problem.test for problem in problems]
    names = sorted({test.rpartition("::")[2] for test in tests})
    if RUN in tests or not all(_KEYWORD_NAME.fullmatch(name) and name not in _KEYWORD_WORDS for name in names):
        return keyword
    return " or ".join(names)


def split(problems: list[Problem], base: Base) -> tuple[list[Problem], list[Problem]]:
    """(the change's problems, those the base fails too)."""
    return ([problem for problem in problems if not base.fails(problem)],
            [problem for problem in problems if base.fails(problem)])
