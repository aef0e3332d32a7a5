"""A connector that no profile names and that cannot be built here is one failure, and its other checks not run.

The suite runs, once, on four copies of ExampleConnector that raise in ``__init__``
(tests/connectors/unconstructible_broken.py): two as vLLM 0.34's UMBPStoreConnector does
without MORI's UMBP build (one raises for both roles, one for its worker half only), one
whose native core panics with a ``BaseException`` as pyo3's do, and one whose scheduler
half fails a bare ``assert`` in a helper. Each must show exactly one failing test (the
contract check's scheduler test, with the connector's own error and the line of its code
that raised), every other check that builds it skipped as "not run: the connector could
not be constructed here (<its error>)", its lint run as usual, construction tried once
in the test process (the worker half first, as vLLM's engine builds it), and the reports
must show those cells as not run, apart from ordinary skips, and count none of the four
as a connector whose runtime checks ran.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvconform.reports import render_html, render_markdown, render_terminal
from kvconform.reports.exercised import UNCONSTRUCTED, exercised, verdict_line
from kvconform.reports.readers import read_all
from tests.connectors.unconstructible_broken import CONSTRUCTIONS_VAR, MISSING_LIBRARY, PANIC_MESSAGE
from tests.suite_run import of_connector, run_suite

MODULE = "tests.connectors.unconstructible_broken"
SOURCE = "tests/connectors/unconstructible_broken.py"


def _line_of(code: str, after: str) -> int:
    """The first line of ``code`` after the line that starts with ``after`` in the broken connectors' module:
    where the failure must say it raised."""
    lines = (Path(__file__).parent / "unconstructible_broken.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    return next(i for i, line in enumerate(lines[start:], start + 1) if line.strip() == code)


# connector -> (the kv_role and side whose construction raised, its error, where in its code it raised)
CONNECTORS = {
    "UnconstructibleConnector": ("kv_both, worker side", f"RuntimeError: {MISSING_LIBRARY}", SOURCE + ":"
                                 f"{_line_of('raise RuntimeError(MISSING_LIBRARY)', 'class UnconstructibleConn')}"),
    "WorkerUnconstructibleConnector": ("kv_both, worker side", f"RuntimeError: {MISSING_LIBRARY}", SOURCE + ":"
                                       f"{_line_of('raise RuntimeError(MISSING_LIBRARY)', 'class WorkerUncon')}"),
    # the panic and the assert raise in helper functions the connector's __init__ calls
    "PanickingConnector": ("kv_both, worker side", f"PanicException: {PANIC_MESSAGE}",
                           f"{SOURCE}:{_line_of('raise PanicException(PANIC_MESSAGE)', 'def _native_core_new')}"),
    "AssertingConnector": ("kv_both, scheduler side", "AssertionError",
                           f"{SOURCE}:{_line_of('assert reachable', 'def _check_store_reachable')}: assert reachable"),
}
CONSTRUCTION_TEST = "test_contract_scheduler"
# skips decided before a check builds the connector: a check its (default) profile does not list, a second device
# this machine lacks, a replay no one asked for
RULED_OUT_FIRST = ("per its connector profile", "needs 2 cpu devices; 1 visible here", "no workload to replay")
NOT_RUN = "not run: the connector could not be constructed here ({})"


def _test_name(outcome) -> str:
    return outcome.nodeid.split("::")[-1].split("[")[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("construction-selftest")
    constructions = folder / "constructions.txt"
    results = folder / "results-run.json"
    args = ["--kvconform-json", str(results), *(a for name in CONNECTORS for a in ("--connector", f"{MODULE}:{name}"))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CONSTRUCTIONS_VAR, str(constructions))
        returncode, outcomes, output = run_suite(folder, args)
    lines = constructions.read_text().splitlines() if constructions.exists() else []
    return returncode, outcomes, output, lines, results


def test_the_run_fails(run):
    returncode, _, output, _, _ = run
    assert returncode == 1, output[-3000:]


@pytest.mark.parametrize("name", list(CONNECTORS))
def test_one_failure_naming_the_error_and_the_rest_not_run(run, name):
    _, outcomes, output, _, _ = run
    mine = of_connector(outcomes, name)
    failed = [o for o in mine if o.outcome in ("failed", "error")]
    assert [_test_name(o) for o in failed] == [CONSTRUCTION_TEST], [(o.nodeid, o.message[:300]) for o in failed]
    side, error, raised_at = CONNECTORS[name]
    words = [f"{name} could not be constructed here ({side}, in vLLM's KVConnectorFactory): {error} "
             f"(raised at {raised_at}); ", "its other checks are not run"]
    assert all(w in failed[0].message for w in words), failed[0].message[:1500]
    runtime = [o for o in mine if o is not failed[0] and _test_name(o) != "test_lint"]
    not_run = [o for o in runtime if o.outcome == "skipped" and NOT_RUN.format(error) in o.message]
    checks = {_test_name(o).removeprefix("test_").split("_")[0] for o in not_run}
    assert {"roundtrip", "workload", "contract"} <= checks, sorted({_test_name(o) for o in not_run})
    # what else was skipped was ruled out before any construction, as for any connector on one CPU
    others = [o for o in runtime if o not in not_run]
    assert all(o.outcome == "skipped" and any(r in o.message for r in RULED_OUT_FIRST) for o in others), \
        [(o.nodeid, o.outcome, o.message[:300]) for o in others if not any(r in o.message for r in RULED_OUT_FIRST)]
    lint = [o for o in mine if _test_name(o) == "test_lint"]
    assert lint and all(o.outcome == "passed" for o in lint), [(o.nodeid, o.message[:300]) for o in lint]


def test_construction_is_tried_once_per_process(run):
    _, _, _, lines, _ = run
    # the serial run is one process: each connector's worker half once (vLLM's engine builds it first), and the
    # scheduler half of the one whose worker half builds, after it
    assert sorted(lines) == sorted(["UnconstructibleConnector WORKER", "WorkerUnconstructibleConnector WORKER",
                                    "PanickingConnector WORKER", "AssertingConnector WORKER",
                                    "AssertingConnector SCHEDULER"]), lines
    assert lines.index("AssertingConnector WORKER") < lines.index("AssertingConnector SCHEDULER"), lines


def test_the_reports_show_not_run_apart_from_skips(run):
    _, _, _, _, results_file = run
    results = read_all([results_file])
    terminal = render_terminal.render(results)
    counted = r"^not run \(\d+ tests: an earlier step of the connector failed\)"
    assert re.search(counted, terminal, re.M), terminal[-3000:]
    details = render_terminal.render(results, details=True)
    assert all(NOT_RUN.format(error).removeprefix("not run: ") in details for _, error, _ in CONNECTORS.values())
    for name in CONNECTORS:
        matrix_row = next(line for line in terminal.splitlines() if line.strip().startswith(name))
        assert "not run" in matrix_row, matrix_row
    markdown = render_markdown.render(results)
    assert "### Not run (" in markdown and " not run" in markdown, markdown[-3000:]
    page = render_html.render(results)
    assert "<h2>Not run (" in page and ">NOT RUN</span>" in page


def test_the_verdict_counts_none_of_them_as_run(run):
    _, _, _, _, results_file = run
    results = read_all([results_file])
    [cpu] = exercised(results).platforms
    assert (cpu.runtime, cpu.lint_only, cpu.nothing) == ((), (), ())
    assert sorted(cpu.unconstructed) == sorted(CONNECTORS)
    line = verdict_line(results)
    assert f"runtime checks ran for 0 of {len(CONNECTORS)} connectors on cpu; {len(CONNECTORS)} {UNCONSTRUCTED}" \
        in line, line
    assert line.startswith("FAILING"), line
