"""The report's parts on their own: a failure's message, findings listed once, skip reasons grouped, the
error shown before its traceback, the verdict's exit status and what it rests on (the connectors whose runtime
checks ran, per platform), and counts kept with their words in the page."""

from __future__ import annotations

import pytest

from kvconform.reports import render_html
from kvconform.reports.exercised import exercised, is_runtime_check, verdict_line
from kvconform.reports.findings import findings, where_text
from kvconform.reports.matrix import build_matrix
from kvconform.reports.model import CaseResult, Expected, RunInfo, build, first_line
from kvconform.reports.render_html import error_text
from kvconform.reports.skips import skip_groups
from kvconform.reports.verdict import verdict


@pytest.mark.parametrize("text, line", [
    ("plain message\nmore", "plain message"),
    ("\n\n  padded  \n", "padded"),
    # an introduction keeps the first line it introduces
    ("X: 1 lint error(s) in a.py:\n  a.py:3: KVC001 error: .cuda()\n  a.py:9: info",
     "X: 1 lint error(s) in a.py: a.py:3: KVC001 error: .cuda()"),
    # a process's stderr tail: its exception line is the cause, not the partial first line of the tail
    ("AssertionError: the engine with X exited with status 1:\nrtial log line\nTraceback (most recent call last):\n"
     '  File "x.py", line 1\nRuntimeError: no CPU kernels\nassert (1 == 0)',
     "AssertionError: the engine with X exited with status 1: RuntimeError: no CPU kernels"),
    # an introduction with nothing after it says so, never ends in a bare colon
    ("AssertionError: the engine with X exited with status 1:\n", "AssertionError: the engine with X exited with "
                                                                  "status 1: (no output)"),
    ("ends with a colon:\nassert 1 == 0", "ends with a colon: assert 1 == 0"),
])
def test_first_line_is_the_whole_first_line_of_the_cause(text, line):
    assert first_line(text) == line


def test_first_line_is_cut_to_its_limit():
    assert first_line("a" * 50, limit=10) == "a" * 9 + "…"


def _test(nodeid, connector, check, outcome, expected=None, message="", platform="cpu") -> CaseResult:
    return CaseResult(run=platform, nodeid=nodeid, check=check, platform=platform, backend="CPU_ATTN",
                      connector=connector, outcome=outcome, message=message, expected=expected)


CRASH = dict(expect="xfail", reason="crashes on CPU", link="https://example.org/src#L1", **{"class": "bug"})


def _results(*tests, stale=()) -> object:
    return build([RunInfo(id="cpu", platform="cpu", stale_expectations=list(stale))], list(tests))


def test_a_finding_is_listed_once_across_its_entries_checks_and_tests():
    results = _results(
        _test("t1", "C", "roundtrip", "xfailed", Expected(where="cpu.yaml:10", **CRASH)),
        _test("t2", "C", "roundtrip", "xfailed", Expected(where="cpu.yaml:10", **CRASH)),
        _test("t3", "C", "contract", "xfailed", Expected(where="cpu.yaml:12", **CRASH)),
        _test("t4", "C", "contract", "failed", Expected(where="cpu.yaml:12", **CRASH), "unexpectedly passing"),
        _test("t5", "D", "fill", "xfailed", Expected(where="cpu.yaml:20", expect="xfail", reason="other", link="l")),
        _test("t6", "D", "fill", "skipped", Expected(where="cpu.yaml:30", expect="skip", reason="not here")),
        _test("t7", "D", "fill", "passed", Expected(where="cpu.yaml:40", expect="pass")),
        _test("t8", "D", "fill", "passed"),
    )
    crash, other, skip = findings(results)
    assert (crash.finding_class, crash.reason, crash.tests, crash.unexpected) == ("bug", "crashes on CPU", 4, 1)
    assert crash.checks_with_counts() == "roundtrip 2, contract 2"
    assert crash.outcome_counts() == "1 failed · 3 xfailed"
    assert where_text(crash.wheres) == "cpu.yaml:10, 12"
    assert (other.finding_class, other.tests) == ("unclassified", 1)  # expectations without a class still show
    assert (skip.expect, skip.tests, skip.unexpected) == ("skip", 1, 0)


def test_skip_reasons_are_grouped_per_connector_and_check_without_repeating_the_connector():
    results = _results(
        *(_test(f"r{i}", "C", "roundtrip", "skipped", message="C: the roundtrip check does not apply")
          for i in range(5)),
        _test("r9", "C", "roundtrip", "skipped", message="needs 2 cpu devices"),
        _test("f1", "C", "fill", "skipped", message="C: the fill check does not apply"),
        _test("p1", "C", "fill", "passed"),
    )
    groups = [(g.connector, g.check, g.tests, g.reason) for g in skip_groups(results, build_matrix(results))]
    assert groups == [("C", "roundtrip", 5, "the roundtrip check does not apply"),
                      ("C", "roundtrip", 1, "needs 2 cpu devices"),
                      ("C", "fill", 1, "the fill check does not apply")]


def test_the_page_shows_a_tracebacks_error_before_the_traceback():
    details = ("platform = PlatformSpec(name='cpu', ...)\nconnector = ConnectorParam(...)\n\n"
               "    def test_x():\n>       low, _ = torch.cuda.Stream.priority_range()\n"
               "E       AttributeError: type object 'Stream' has no attribute 'priority_range'\n\n"
               "vllm/v1/simple_kv_offload/worker.py:165: AttributeError")
    assert error_text(details) == ("AttributeError: type object 'Stream' has no attribute 'priority_range'\n"
                                   "vllm/v1/simple_kv_offload/worker.py:165: AttributeError")


@pytest.mark.parametrize("tests, stale, status", [
    ([("passed", None)], [], 0),
    ([("passed", None), ("xfailed", "xfail"), ("skipped", None)], [], 0),
    ([("passed", None), ("failed", None)], [], 1),
    ([("error", None)], [], 1),
    ([], [], 1),
    ([("passed", None)], [{"where": "cpu.yaml:3", "expect": "xfail", "selector": "test=x"}], 1),
])
def test_the_verdicts_exit_status(tests, stale, status):
    cases = [_test(f"t{i}", "C", "roundtrip", outcome,
                   Expected(where="w:1", expect=kind, reason="r", link="l") if kind else None)
             for i, (outcome, kind) in enumerate(tests)]
    assert verdict(_results(*cases, stale=stale)).exit_status == status


def test_the_verdict_line_says_per_platform_which_connectors_runtime_checks_ran_and_the_known_findings():
    crash = Expected(where="cpu.yaml:10", **CRASH)
    results = _results(
        # runtime checks ran: a pass, a failure as expected, an error (the connector's code was driven all three)
        _test("a1", "Ran", "roundtrip", "passed"), _test("a2", "Ran", "lint", "skipped"),
        _test("b1", "Crashes", "contract", "xfailed", crash), _test("b2", "Crashes", "fill", "xfailed", crash),
        _test("c1", "Errors", "fill", "error", message="RuntimeError: no device"),
        # lint only: its lint passed (or failed), every runtime check skipped
        _test("d1", "LintOnly", "lint", "passed"), _test("d2", "LintOnly", "roundtrip", "skipped"),
        _test("e1", "LintFails", "lint", "failed"),
        # nothing ran
        _test("f1", "Skipped", "lint", "skipped"), _test("f2", "Skipped", "fill", "skipped"),
        # no connector's: counted for none
        _test("g1", "-", "collection", "error"), _test("g2", "-", "platform_facts", "passed"),
        # another platform: counted apart
        _test("h1", "Ran", "roundtrip", "skipped", platform="cuda"), _test("h2", "Ran", "lint", "passed",
                                                                          platform="cuda"),
    )
    found = exercised(results)
    cpu = next(p for p in found.platforms if p.platform == "cpu")
    assert (cpu.runtime, cpu.lint_only, cpu.nothing) == (("Crashes", "Errors", "Ran"), ("LintFails", "LintOnly"),
                                                          ("Skipped",))
    assert (found.findings, found.finding_tests) == (1, 2)
    assert verdict_line(results) == (
        "FAILING (a test failed or errored) - "
        "runtime checks ran for 0 of 1 connectors on cuda; 1 had lint only (why: see the matrix); "
        "runtime checks ran for 3 of 6 connectors on cpu; 2 had lint only, 1 had no test run (why: see the matrix); "
        "1 known finding (2 tests)")
    passing = _results(_test("a1", "Ran", "roundtrip", "passed"), _test("b1", "Crashes", "fill", "xfailed", crash),
                       _test("d1", "LintOnly", "lint", "passed"))
    assert verdict_line(passing) == ("passing (every outcome as expected) - runtime checks ran for 2 of 3 connectors "
                                     "on cpu; 1 had lint only (why: see the matrix); 1 known finding (1 tests)")
    assert verdict_line(_results()) == "no tests ran - no connector's test ran; no known findings"


def test_the_runtime_checks_are_every_check_but_lint_and_collection_errors():
    assert [is_runtime_check(c) for c in ("roundtrip", "engine", "workload", "lint", "collection")] == [
        True, True, True, False, False]


def test_the_page_keeps_each_count_with_its_word_and_states_the_verdicts_basis():
    crash = Expected(where="cpu.yaml:10", **CRASH)
    results = _results(*(_test(f"x{i}", "C", "roundtrip", "xfailed", crash) for i in range(4)),
                       *(_test(f"p{i}", "C", "roundtrip", "passed") for i in range(22)))
    page = render_html.render(results)
    # the matrix cell, the totals and the findings' outcome and checks: no count breaks from its word
    assert '<span class="count">4 xfailed</span> · <span class="count">22 passed</span>' in page
    assert '<p id="totals"><span class="count">4 xfailed</span>, <span class="count">22 passed</span></p>' in page
    assert '<td><span class="count">roundtrip 4</span></td><td><span class="count">4 xfailed</span></td>' in page
    assert "span.count { white-space: nowrap; }" in page
    assert "4 xfailed · 22" not in page  # every count sits in its own span
    assert ("<h1>kvconform conformance results: passing (every outcome as expected)</h1>\n"
            '<p id="exercised">runtime checks ran for 1 of 1 connectors on cpu; 1 known finding (4 tests)</p>') in page
