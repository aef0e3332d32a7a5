"""A connector that no profile names and that cannot be built here is one failure, and its other checks not run.

The suite runs on two copies of ExampleConnector that raise in ``__init__``
(tests/connectors/unconstructible_broken.py), as vLLM 0.34's UMBPStoreConnector does
without MORI's UMBP build: one raises for both roles, one for its worker half only.
Each must show exactly one failing test (the contract check's scheduler test, with
the connector's own error), every other check that builds it skipped as "not run:
the connector could not be constructed here (<its error>)", its lint run as usual,
construction tried once in the test process, and the reports must show those cells
as not run, apart from ordinary skips.
"""

from __future__ import annotations

import re

import pytest

from kvconform.reports import render_html, render_markdown, render_terminal
from kvconform.reports.readers import read_all
from tests.connectors.unconstructible_broken import CONSTRUCTIONS_VAR, MISSING_LIBRARY
from tests.suite_run import of_connector, run_suite

MODULE = "tests.connectors.unconstructible_broken"
# connector -> the kv_role and side whose construction raised
CONNECTORS = {"UnconstructibleConnector": "kv_both, scheduler side", "WorkerUnconstructibleConnector":
              "kv_both, worker side"}
CONSTRUCTION_TEST = "test_contract_scheduler"
# skips decided before a check builds the connector: a check its (default) profile does not list, a second device
# this machine lacks, a replay no one asked for
RULED_OUT_FIRST = ("per its connector profile", "needs 2 cpu devices; 1 visible here", "no workload to replay")
NOT_RUN = f"not run: the connector could not be constructed here (RuntimeError: {MISSING_LIBRARY})"


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
    words = [f"{name} could not be constructed here ({CONNECTORS[name]}, in vLLM's KVConnectorFactory)",
             f"RuntimeError: {MISSING_LIBRARY}", "its other checks are not run"]
    assert all(w in failed[0].message for w in words), failed[0].message[:1500]
    runtime = [o for o in mine if o is not failed[0] and _test_name(o) != "test_lint"]
    not_run = [o for o in runtime if o.outcome == "skipped" and NOT_RUN in o.message]
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
    # the serial run is one process: each connector's scheduler half once, and the worker half of the one whose
    # scheduler half builds
    assert sorted(lines) == sorted(["UnconstructibleConnector SCHEDULER", "WorkerUnconstructibleConnector SCHEDULER",
                                    "WorkerUnconstructibleConnector WORKER"]), lines


def test_the_reports_show_not_run_apart_from_skips(run):
    _, _, _, _, results_file = run
    results = read_all([results_file])
    terminal = render_terminal.render(results)
    counted = r"^not run \(\d+ tests: an earlier step of the connector failed\)"
    assert re.search(counted, terminal, re.M), terminal[-3000:]
    assert NOT_RUN.removeprefix("not run: ") in render_terminal.render(results, details=True)
    for name in CONNECTORS:
        matrix_row = next(line for line in terminal.splitlines() if line.strip().startswith(name))
        assert "not run" in matrix_row, matrix_row
    markdown = render_markdown.render(results)
    assert "### Not run (" in markdown and " not run" in markdown, markdown[-3000:]
    page = render_html.render(results)
    assert "<h2>Not run (" in page and ">NOT RUN</span>" in page
