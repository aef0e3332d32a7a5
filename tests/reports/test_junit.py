"""The one JUnit reader: how pytest's XML encodes each outcome, its message, properties and time."""

from __future__ import annotations

import pytest

from kvconform.reports.junit import JunitError, parse_junit

CASES = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" timestamp="2026-01-01T00:00:00" time="3.5">
  <properties><property name="kvconform.run.platform" value="cpu"/></properties>
  <testcase classname="kvconform.conformance.test_roundtrip" name="test_a[cpu-X]" time="1.5">
    <properties><property name="kvconform.check" value="roundtrip"/></properties></testcase>
  <testcase classname="kvconform.conformance.test_roundtrip" name="test_b" time="0.5">
    <failure message="AssertionError: lost">traceback</failure><error message="teardown">t2</error></testcase>
  <testcase classname="kvconform.conformance.test_roundtrip" name="test_c" time="-1">
    <skipped type="pytest.xfail" message="known">why</skipped></testcase>
  <testcase classname="kvconform.conformance.test_roundtrip" name="test_d" time="x">
    <skipped type="pytest.skip" message="no nixl"/></testcase>
  <testcase classname="kvconform.conformance.test_roundtrip" name="test_e"><error message="boom"/></testcase>
</testsuite></testsuites>"""


def test_each_outcome_message_and_property_is_read_in_file_order():
    document = parse_junit(CASES)
    got = [(c.name, c.outcome, c.junit_outcome, c.message, c.text, c.seconds) for c in document.cases]
    assert got == [
        ("test_a[cpu-X]", "passed", "passed", "", "", 1.5),
        ("test_b", "failed", "failed", "AssertionError: lost", "traceback", 0.5),  # failure beats teardown error
        ("test_c", "xfailed", "skipped", "known", "why", 0.0),  # a negative time is no time
        ("test_d", "skipped", "skipped", "no nixl", "", 0.0),  # so is one that is not a number
        ("test_e", "error", "error", "boom", "", 0.0),
    ]
    first = document.cases[0]
    assert first.properties == {"kvconform.check": "roundtrip"}
    assert first.junit_id == "kvconform.conformance.test_roundtrip::test_a[cpu-X]"
    assert first.nodeid == "kvconform/conformance/test_roundtrip.py::test_a[cpu-X]"
    [suite] = document.suites
    assert (suite.properties, suite.timestamp, suite.seconds) == (
        {"kvconform.run.platform": "cpu"}, "2026-01-01T00:00:00", 3.5)


def test_a_single_testsuite_root_is_read_too():
    document = parse_junit('<testsuite time="x"><testcase name="t"/></testsuite>')
    assert [c.nodeid for c in document.cases] == ["t"] and document.suites[0].seconds is None


@pytest.mark.parametrize(("text", "says"), [
    ("<testsuites>", "not well-formed XML"),
    ("<html/>", "not a JUnit XML file (root element <html>"),
])
def test_what_is_not_junit_is_one_error_line(text, says):
    with pytest.raises(JunitError, match=r"^[^\n]*$") as raised:
        parse_junit(text)
    assert says in str(raised.value)
