"""A connector that could not be built here ran none of its checks: its one construction failure is a failure
(the verdict fails), but the verdict line and the gate's line per connector count it as not run, never as a
connector whose runtime checks ran."""

from __future__ import annotations

from kvconform.pipelines.gate.printing import connector_line
from kvconform.pipelines.gate.results import GateCase
from kvconform.reports.exercised import exercised, is_construction_failure, ran_runtime_check, verdict_line
from kvconform.reports.model import CaseResult, Results, RunInfo, build

CONSTRUCTION = ("Failed: Panics could not be constructed here (kv_both, worker side, in vLLM's KVConnectorFactory): "
                "PanicException: boom (raised at my_pkg/core.py:42); no profile names it, so its other checks are "
                "not run")
NOT_RUN = "not run: the connector could not be constructed here (PanicException: boom)"


def _test(nodeid: str, connector: str, check: str, outcome: str, message: str = "") -> CaseResult:
    return CaseResult(run="cpu", nodeid=nodeid, check=check, platform="cpu", backend="CPU_ATTN",
                      connector=connector, outcome=outcome, message=message)


def _results(*tests: CaseResult) -> Results:
    return build([RunInfo(id="cpu", platform="cpu")], list(tests))


UNCONSTRUCTED = (_test("p1", "Panics", "contract", "failed", CONSTRUCTION),
                 _test("p2", "Panics", "roundtrip", "skipped", NOT_RUN),
                 _test("p3", "Panics", "lint", "passed"))


def test_a_construction_failure_is_no_runtime_check_that_ran():
    construction, not_run, lint = UNCONSTRUCTED
    assert is_construction_failure(construction) and not ran_runtime_check(construction)
    assert not is_construction_failure(not_run) and not ran_runtime_check(not_run)
    assert not ran_runtime_check(lint)
    # any other failure of a runtime check drove the connector's code
    crash = _test("c1", "Crashes", "contract", "failed", "AssertionError: get_num_new_matched_tokens returned -1")
    assert not is_construction_failure(crash) and ran_runtime_check(crash)


def test_the_verdict_line_counts_it_as_not_run_could_not_be_constructed():
    results = _results(*UNCONSTRUCTED, _test("a1", "Ran", "roundtrip", "passed"),
                       _test("d1", "LintOnly", "lint", "passed"), _test("d2", "LintOnly", "fill", "skipped"))
    [cpu] = exercised(results).platforms
    assert (cpu.runtime, cpu.unconstructed, cpu.lint_only, cpu.nothing) == (("Ran",), ("Panics",), ("LintOnly",), ())
    assert verdict_line(results) == (
        "FAILING (a test failed or errored) - runtime checks ran for 1 of 3 connectors on cpu; 1 not run: could not "
        "be constructed, 1 had lint only (why: see the matrix); no known findings")


def test_a_connector_whose_other_checks_ran_counts_as_run():
    """A construction failure beside a check that ran (a profile variant built, another did not): it ran."""
    results = _results(*UNCONSTRUCTED, _test("p4", "Panics", "fill", "passed"))
    [cpu] = exercised(results).platforms
    assert (cpu.runtime, cpu.unconstructed) == (("Panics",), ())


def test_the_gates_line_says_it_was_not_run():
    cases = [GateCase(f"junit::{test.nodeid}", "Panics", test) for test in UNCONSTRUCTED]
    assert connector_line("Panics", "cpu", cases) == ("kvconform gate: Panics on cpu: 1 failed, 1 passed, 1 skipped; "
                                                      "not run: could not be constructed")
    ran = [*cases, GateCase("junit::p4", "Panics", _test("p4", "Panics", "fill", "passed"))]
    assert connector_line("Panics", "cpu", ran).endswith("; runtime checks ran: fill")
    skipped = [GateCase("junit::s1", "Skips", _test("s1", "Skips", "fill", "skipped", "needs package x"))]
    assert connector_line("Skips", "cpu", skipped).endswith("; no runtime check ran")
