"""The coverage floor's comparison, on synthetic results: below, within the tolerance, unreachable lines left out,
another vLLM, no coverage, a bad floor file, and a floor rewritten from a run."""

from __future__ import annotations

import pytest

from kvconform.reports.coverage_floor import (
    Floor,
    FloorError,
    check_floor,
    counted_percent,
    floor_text,
    load_floor,
    updated_floor,
)
from kvconform.reports.model import CaseResult, RunInfo, build
from tests.coverage.samples import BASE, WORKER, nixl, results, worker_module

# worker_module(): (16 + 2) of (20 + 4) = 75%


def _floor(percent: float, **fields) -> Floor:
    return Floor.model_validate({"vllm": "0.32.0", "connectors": {"NixlConnector": {WORKER: percent}}, **fields})


def test_a_module_below_its_floor_is_named_with_both_figures():
    check = check_floor(results(nixl()), _floor(80.0))
    assert check.exit_status == 1
    assert check.below == [f"NixlConnector: {WORKER}: 75.0%, below its floor 80.0% (tolerance 1 points; the floor)"]


@pytest.mark.parametrize("floor", [75.0, 76.0, 50.0])
def test_at_or_within_the_tolerance_of_its_floor_passes(floor):
    check = check_floor(results(nixl()), _floor(floor))
    assert (check.below, check.notes, check.exit_status) == ([], [], 0)


def test_just_past_the_tolerance_fails():
    assert check_floor(results(nixl()), _floor(76.1)).exit_status == 1
    assert check_floor(results(nixl()), _floor(78.0, tolerance=3)).exit_status == 0


def test_unreachable_lines_leave_the_count_with_the_branches_from_and_into_them():
    module = worker_module()
    assert counted_percent(module, set()) == pytest.approx(75.0)
    # lines 89-90: statement 90 and the branch 89->exit leave the total: 18 of 22
    assert counted_percent(module, {89, 90}) == pytest.approx(100 * 18 / 22)
    # 30: the statement and the branch into it
    assert counted_percent(module, {30}) == pytest.approx(100 * 18 / 22)
    unreachable = {WORKER: [{"lines": "89-90", "reason": "CUDA-only"}, {"lines": 30, "reason": "GPU kernel"}]}
    floor = _floor(85.0, unreachable_on_cpu=unreachable)
    assert floor.unreachable_lines(WORKER) == {30, 89, 90}
    assert check_floor(results(nixl()), floor).exit_status == 0  # 18 of 20 = 90%


def test_another_vllm_release_is_not_checked_and_says_so():
    check = check_floor(results(nixl(), vllm="0.33.0"), _floor(99.0), "floor.yaml")
    assert check.exit_status == 0
    assert check.notes == ["floor.yaml was measured on vLLM 0.32.0; these results are from 0.33.0 on cpu: not checked"]


def test_results_without_coverage_or_without_the_connector_fail():
    assert check_floor(results(), _floor(10.0)).below == [
        "no coverage for cpu in these results: run the suite with --kvconform-coverage and --kvconform-json PATH"]
    other = check_floor(results(nixl(connector="ExampleConnector")), _floor(10.0))
    assert other.below[0].startswith("NixlConnector: no coverage in these results")


def test_a_module_the_run_did_not_list_counts_as_zero():
    entry = nixl(worker_module())
    floor = Floor.model_validate({"vllm": "0.32.0", "connectors": {"NixlConnector": {"vllm/gone.py": 5.0}}})
    assert check_floor(results(entry), floor).below == [
        "NixlConnector: vllm/gone.py: 0.0%, below its floor 5.0% (tolerance 1 points; the floor)"]


def test_the_floor_rewritten_from_a_run_holds_its_own_modules_and_keeps_the_unreachable_lines(tmp_path):
    unreachable = {WORKER: [{"lines": "89-90", "reason": "CUDA-only"}]}
    old = _floor(10.0, tolerance=2, unreachable_on_cpu=unreachable)
    new = updated_floor(results(nixl()), old)
    assert new.connectors == {"NixlConnector": {WORKER: round(100 * 18 / 22, 1)}}  # base.py is shared: not listed
    assert (new.tolerance, new.unreachable_on_cpu, new.vllm) == (2, old.unreachable_on_cpu, "0.32.0")
    path = tmp_path / "floor.yaml"
    path.write_text(floor_text(new))
    assert load_floor(path) == new
    assert check_floor(results(nixl()), load_floor(path)).exit_status == 0
    assert BASE not in path.read_text()


@pytest.mark.parametrize("text,message", [
    ("vllm: [", "not valid YAML"),
    ("connectors: {}\n", "vllm: Field required"),
    ("vllm: 0.32.0\nunreachable_on_cpu: {x.py: [{lines: 9-3, reason: r}]}\n", "is not a line or a range"),
    ("vllm: 0.32.0\nunreachable_on_cpu: {x.py: [{lines: 9}]}\n", "reason: Field required"),
    ("vllm: 0.32.0\nfloor: 3\n", "floor: Extra inputs are not permitted"),
])
def test_a_bad_floor_file_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "floor.yaml"
    path.write_text(text)
    with pytest.raises(FloorError, match=message) as caught:
        load_floor(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    with pytest.raises(FloorError, match="no such file"):
        load_floor(tmp_path / "missing.yaml")


def test_explained_lines_come_in_line_order_with_what_they_are():
    floor = _floor(10.0, unreachable_on_cpu={WORKER: [{"lines": "89-90", "reason": "CUDA only"}]},
                   not_reached={WORKER: [{"lines": "30-32", "reason": "needs two ranks"}]})
    assert floor.explained(WORKER) == [("not reached", "30-32", "needs two ranks"),
                                       ("unreachable on cpu", "89-90", "CUDA only")]
    assert floor.unreachable_lines(WORKER) == {89, 90}  # not_reached lines stay counted
    assert floor.explained("vllm/other.py") == []


def test_the_rewritten_floor_leaves_out_connectors_whose_only_tests_that_ran_were_lint():
    run = RunInfo(id="cpu", platform="cpu", vllm="0.32.0")
    lint = CaseResult(run="cpu", nodeid="conformance/test_lint.py::test_lint[cpu-NixlConnector]", check="lint",
                      platform="cpu", backend="-", connector="NixlConnector", outcome="passed")
    skipped = lint.model_copy(update={"check": "roundtrip", "outcome": "skipped",
                                      "nodeid": "conformance/test_roundtrip.py::test_roundtrip[cpu-NixlConnector]"})
    only_lint = build([run], [lint, skipped], [nixl()])
    assert updated_floor(only_lint, _floor(10.0)).connectors == {}
    assert updated_floor(results(nixl()), _floor(10.0)).connectors != {}  # its contract test ran


def test_an_explained_range_the_run_ran_all_of_fails_the_check_and_one_it_missed_any_of_does_not():
    # worker_module() misses statements 30-32 and 90, and the branches 29->30 and 89->exit
    explained = {"not_reached": {WORKER: [{"lines": "40-45", "reason": "needs two ranks"},
                                          {"lines": "29", "reason": "its branch into 30 only"}]},
                 "unreachable_on_cpu": {WORKER: [{"lines": "60", "reason": "CUDA only"},
                                                 {"lines": "31", "reason": "GPU kernel"}]}}
    check = check_floor(results(nixl()), _floor(10.0, **explained), "floor.yaml")
    assert check.exit_status == 1 and check.below == []
    assert check.stale == [
        f"{WORKER}: lines 40-45 are listed as not reached, but NixlConnector's tests ran all of it (statements and "
        "branches): correct or remove the entry (floor.yaml)",
        f"{WORKER}: line 60 is listed as unreachable on cpu, but NixlConnector's tests ran all of it (statements "
        "and branches): correct or remove the entry (floor.yaml)"]
    still_missed = {"not_reached": {WORKER: [{"lines": "29", "reason": "its branch into 30 only"}]},
                    "unreachable_on_cpu": {WORKER: [{"lines": "88-90", "reason": "CUDA only"}]}}
    assert check_floor(results(nixl()), _floor(10.0, **still_missed)).exit_status == 0
