"""pytest's JUnit XML, read in one place: each test case's outcome, message, properties and time.

The report, the PR gate, the timing script and the project's own suite-running
tests all read the JUnit file a conformance run writes. How pytest encodes an
outcome there (a ``<failure>``, ``<error>`` or ``<skipped>`` child, an xfail as a
skip of type ``pytest.xfail``, properties under ``<properties>``) is one fact, so
it is decoded here and nowhere else; each caller keeps only what it makes of a case.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .outcomes import OutcomeName

JunitOutcome = Literal["passed", "failed", "error", "skipped"]  # an xfail is skipped

# JUnit child element -> outcome; the first present wins (a call failure with a teardown error is a failure).
OUTCOME_TAGS: tuple[tuple[str, JunitOutcome], ...] = (("failure", "failed"), ("error", "error"), ("skipped", "skipped"))
XFAIL_TYPE = "pytest.xfail"  # pytest writes an xfail as <skipped type="pytest.xfail">


class JunitError(ValueError):
    """Text that is not a JUnit XML document; the message is one line."""


@dataclass(frozen=True)
class JunitCase:
    """One ``<testcase>``."""

    classname: str
    name: str
    junit_outcome: JunitOutcome  # what the file says: passed / failed / error / skipped (an xfail is skipped)
    xfail: bool  # skipped as an expected failure
    message: str  # the outcome element's ``message`` attribute ("" when passed)
    text: str  # the outcome element's body (a traceback, a skip's location)
    seconds: float
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def outcome(self) -> OutcomeName:
        """The outcome with expected failures told apart: passed / failed / error / skipped / xfailed."""
        return "xfailed" if self.xfail else self.junit_outcome

    @property
    def junit_id(self) -> str:
        """``classname::name``, as the file spells the test (dotted module path, then the test's name)."""
        return f"{self.classname}::{self.name}"

    @property
    def nodeid(self) -> str:
        """pytest's node id, rebuilt from the dotted classname (best effort: the module is the last ``test_*`` part)."""
        if not self.classname:
            return self.name
        parts = self.classname.split(".")
        modules = [i for i, part in enumerate(parts) if part.startswith("test_") or part.endswith("_test")]
        if not modules:
            return self.junit_id
        module = modules[-1]
        return "::".join(["/".join(parts[: module + 1]) + ".py", *parts[module + 1:], self.name])


@dataclass(frozen=True)
class JunitSuite:
    """One ``<testsuite>``: its properties (kvconform records the run's there), start and duration."""

    properties: dict[str, str]
    timestamp: str | None
    seconds: float | None  # None when the file's ``time`` is not a number


@dataclass(frozen=True)
class JunitDocument:
    suites: list[JunitSuite]
    cases: list[JunitCase]  # in the order the file lists them (the order the run reported them)


def _properties(element: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in element.findall("./properties/property")}


def _seconds(text: str | None) -> float | None:
    try:
        return float(text or 0)
    except ValueError:
        return None


def _case(element: ET.Element) -> JunitCase:
    junit_outcome: JunitOutcome = "passed"
    detail = None
    for tag, outcome in OUTCOME_TAGS:
        detail = element.find(tag)
        if detail is not None:
            junit_outcome = outcome
            break
    return JunitCase(
        classname=element.get("classname", ""), name=element.get("name", ""), junit_outcome=junit_outcome,
        xfail=junit_outcome == "skipped" and detail is not None and detail.get("type") == XFAIL_TYPE,
        message=(detail.get("message") or "") if detail is not None else "",
        text=(detail.text or "") if detail is not None else "",
        seconds=max(_seconds(element.get("time")) or 0.0, 0.0), properties=_properties(element))


def parse_junit(text: str | bytes) -> JunitDocument:
    """The suites and test cases of a JUnit XML document; ``JunitError`` when it is not one."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise JunitError(f"not well-formed XML: {exc}") from None
    if root.tag == "testsuites":
        suites = root.findall("testsuite")
    elif root.tag == "testsuite":
        suites = [root]
    else:
        raise JunitError(f"not a JUnit XML file (root element <{root.tag}>, expected <testsuites> or <testsuite>)")
    return JunitDocument(
        suites=[JunitSuite(_properties(s), s.get("timestamp"), _seconds(s.get("time"))) for s in suites],
        cases=[_case(case) for suite in suites for case in suite.iter("testcase")])


def read_junit_file(path: Path) -> JunitDocument:
    """``parse_junit`` of a file; an unreadable file raises ``OSError``."""
    return parse_junit(Path(path).read_bytes())
