"""The suite's lint check reads a third-party connector's own helpers (kvconform issue 56, self-test d).

One suite run of ``test_lint`` over tests/checks/cuda_helper_broken/: CudaHelperConnector's module only delegates
and its worker helpers call ``torch.cuda`` unguarded, so its lint cell fails naming each helper's file and line;
CleanHelperConnector, in the same package, reaches only a guarded helper and passes.
"""

from __future__ import annotations

from tests.lint.test_lint_package import expected_places
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import BROKEN, of_connector

PACKAGE = f"{BROKEN}.cuda_helper_broken"
CONNECTORS = {"CudaHelperConnector": f"{PACKAGE}.connector:CudaHelperConnector",
              "CleanHelperConnector": f"{PACKAGE}.clean_connector:CleanHelperConnector"}


RUN = SelfTestRun("test_lint", tuple(CONNECTORS.values()))


run = results_of(RUN)


def _only(outcomes, name: str):
    mine = of_connector(outcomes, name)
    assert len(mine) == 1, [o.nodeid for o in outcomes]
    return mine[0]


def test_the_delegating_connector_fails_naming_each_helper_line(run):
    returncode, outcomes, output = run
    assert returncode == 1, output[-3000:]
    cell = _only(outcomes, "CudaHelperConnector")
    assert cell.outcome == "failed", cell.message[:1500]
    first = cell.message.splitlines()[0]
    assert "CudaHelperConnector: 3 lint error(s) in the 6 file(s) of its package tests it runs: " in first, first
    for path, line, _ in expected_places():
        assert f"{path}:{line} KVC004" in first, first
    assert "unused.py" not in cell.message


def test_the_clean_connector_of_the_same_package_passes(run):
    _, outcomes, _ = run
    cell = _only(outcomes, "CleanHelperConnector")
    assert cell.outcome == "passed", cell.message[:1500]
