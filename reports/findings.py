"""Known findings: the tests an expectation entry decided, grouped so each finding is listed once.

A reader of a red or yellow build asks "what is known to be wrong here?" before
"which of 300 tests failed?". One finding (one cause: its class, reason and
link) often spans several entries and dozens of tests (a crash hits every check
that builds the worker), so tests are grouped by the finding, not by the entry
or the test, and each finding says how many tests it decided and whether all of
them behaved as expected.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kvconform.check_table import COLUMN_ORDER

from .model import Expected, Results
from .outcomes import ORDER

# What an entry expected -> the outcome a test it decided should have had.
EXPECTED_OUTCOME = {"xfail": "xfailed", "skip": "skipped"}
# Order of the sections: known failures first, then deliberate skips.
EXPECT_ORDER = ("xfail", "skip")
UNCLASSED = "unclassified"  # a finding whose entries give no class (expectations written before classes)


@dataclass
class Finding:
    expect: str  # xfail | skip
    finding_class: str
    reason: str
    link: str
    wheres: list[str] = field(default_factory=list)  # file:line of each entry that decided a test
    platforms: list[str] = field(default_factory=list)
    connectors: Counter[str] = field(default_factory=Counter)  # connector -> tests
    checks: Counter[str] = field(default_factory=Counter)  # check -> tests
    outcomes: Counter[str] = field(default_factory=Counter)  # outcome -> tests

    @property
    def tests(self) -> int:
        return sum(self.outcomes.values())

    @property
    def as_expected(self) -> int:
        return self.outcomes[EXPECTED_OUTCOME[self.expect]]

    @property
    def unexpected(self) -> int:
        """Tests the entries decided that ran and did not behave as they said (a fixed bug: the xfail passed)."""
        not_run = self.outcomes["skipped"] if self.expect != "skip" else 0  # skipped for another reason
        return self.tests - self.as_expected - not_run

    def connector_names(self) -> list[str]:
        return sorted(self.connectors)

    def check_names(self) -> list[str]:
        rank = {name: i for i, name in enumerate(COLUMN_ORDER)}
        return sorted(self.checks, key=lambda k: (rank.get(k, len(rank)), k))

    def outcome_parts(self) -> list[str]:
        """``["1 failed", "36 xfailed"]``: what became of the tests, worst first."""
        return [f"{self.outcomes[o]} {o}" for o in ORDER if self.outcomes[o]]

    def outcome_counts(self) -> str:
        """``37 xfailed`` or ``1 failed · 36 xfailed``."""
        return " · ".join(self.outcome_parts())

    def check_parts(self) -> list[str]:
        """``["roundtrip 26", "load_failure 6"]``: the checks in the order a connector meets them, with their tests."""
        return [f"{k} {self.checks[k]}" for k in self.check_names()]

    def checks_with_counts(self) -> str:
        """``roundtrip 26, load_failure 6, contract 5``."""
        return ", ".join(self.check_parts())


def _key(e: Expected) -> tuple[str, str, str, str]:
    return (e.expect, e.finding_class or UNCLASSED, e.reason or "", e.link or "")


def findings(results: Results) -> list[Finding]:
    """One ``Finding`` per (expect, class, reason, link) among the tests an xfail or skip entry decided.

    Ordered: xfails before skips, then the finding with the most unexpected tests,
    then the most tests; ties by reason, so the order is stable between runs.
    """
    grouped: dict[tuple[str, str, str, str], Finding] = {}
    for test in results.tests:
        if test.expected is None or test.expected.expect not in EXPECTED_OUTCOME:
            continue
        key = _key(test.expected)
        finding = grouped.setdefault(key, Finding(*key))
        if test.expected.where not in finding.wheres:
            finding.wheres.append(test.expected.where)
        if test.platform not in finding.platforms:
            finding.platforms.append(test.platform)
        finding.connectors[test.connector] += 1
        finding.checks[test.check] += 1
        finding.outcomes[test.outcome] += 1
    for finding in grouped.values():
        finding.wheres.sort()
    return sorted(grouped.values(), key=lambda f: (EXPECT_ORDER.index(f.expect), -f.unexpected, -f.tests, f.reason))


def where_text(wheres: list[str]) -> str:
    """``conformance/expectations/cpu.yaml:38, 41, 42``: the entries' lines, each file named once."""
    lines: dict[str, list[str]] = {}
    for where in wheres:
        path, _, line = where.rpartition(":")
        if not path or not line.isdigit():
            path, line = where, ""
        lines.setdefault(path, [])
        if line:
            lines[path].append(line)
    parts = [f"{path}:{', '.join(sorted(nums, key=int))}" if nums else path for path, nums in lines.items()]
    return "; ".join(parts)


_NUMBERED = re.compile(r"/(?:pull|issues)/(\d+)/?$")  # a pull request or an issue: #123
_SOURCE_LINE = re.compile(r"^L(\d+)(?:-L\d+)?$")  # a source line's anchor: file.py:123


def is_web_link(link: str) -> bool:
    return link.startswith(("https://", "http://"))


def link_text(link: str) -> str:
    """What a finding's link reads as: ``#45080`` for a pull request or issue, ``worker.py:165`` for a source
    line, else the last part of its path (or its host). The address itself goes in the link's target: printed
    whole, a source URL wraps into a column a few characters wide."""
    if not is_web_link(link):
        return link
    parts = urlsplit(link)
    name = parts.path.rstrip("/").rpartition("/")[2]
    numbered, line = _NUMBERED.search(parts.path), _SOURCE_LINE.match(parts.fragment)
    if numbered:
        return f"#{numbered.group(1)}"
    if line and name:
        return f"{name}:{line.group(1)}"
    return name or parts.netloc
