"""Connector coverage in the reports: ``kvconform report --uncovered``, the HTML section, merged inputs, the schema,
and ``--coverage-floor`` through the command line; on synthetic results (no vLLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.conformance.cli import main
from kvconform.reports.coverage import html_section, line_ranges
from kvconform.reports.model import ModuleCoverage
from kvconform.reports.readers import read_all
from tests.coverage.samples import BASE, WORKER, nixl, results, shared_module, worker_module

SCHEMA = Path(__file__).resolve().parents[2] / "reports" / "results.schema.json"


def _write(path: Path, *entries, **fields) -> Path:
    path.write_text(json.dumps(results(*entries, **fields).to_json()))
    return path


def _report(capsys, *args):
    rc = main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_line_ranges_read_as_spans():
    assert line_ranges([9, 3, 4, 5, 11, 10]) == "3-5, 9-11"
    assert line_ranges([7]) == "7"


def test_uncovered_lists_own_modules_then_shared_code_with_lines_by_function(tmp_path, capsys):
    rc, out, err = _report(capsys, _write(tmp_path / "r.json", nixl()), "--uncovered", "NixlConnector")
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        "NixlConnector (cpu): 75.0% of its own code (1 module); 1 shared module reached; lines and branches no "
        "test ran, by function:",
        " its own modules:",
        f"  {WORKER}  75.0% (16 of 20 statements, 2 of 4 branches)",
        "    NixlConnectorWorker.register_kv_caches: 30-32",
        "    NixlConnectorWorker._cuda_only: 90",
        "    branches never taken: 29->30, 89->exit",
        " shared code its tests reached (not counted):",
        f"  {BASE}  50.0% (5 of 10 statements, 0 of 0 branches)",
        "    KVConnectorBase_V1.shutdown: 40-44",
    ]
    assert not (tmp_path / "out").exists()  # --uncovered alone writes nothing


def test_uncovered_with_a_floor_says_why_under_each_own_module(tmp_path, capsys):
    floor = tmp_path / "floor.yaml"
    floor.write_text(f"vllm: 0.32.0\nunreachable_on_cpu:\n  {WORKER}:\n  - {{lines: '90', reason: CUDA only}}\n"
                     f"not_reached:\n  {WORKER}:\n  - {{lines: 30-32, reason: needs two ranks}}\n")
    rc, out, err = _report(capsys, _write(tmp_path / "r.json", nixl()), "--uncovered", "NixlConnector",
                           "--coverage-floor", floor)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    at = lines.index("    branches never taken: 29->30, 89->exit")
    assert lines[at + 1:at + 3] == ["    not reached: 30-32: needs two ranks", "    unreachable on cpu: 90: CUDA only"]
    assert lines[-1] == "kvconform coverage: every module at or above its floor (" + str(floor) + ")"


@pytest.mark.parametrize("entries,message", [
    ((), "these results have no coverage: run the suite with --kvconform-coverage"),
    ((nixl(connector="ExampleConnector"),), "no coverage for 'NixlConnector' in these results; connectors with "
                                            "coverage: ExampleConnector"),
])
def test_uncovered_without_that_connectors_coverage_is_one_line_and_status_2(tmp_path, capsys, entries, message):
    rc, out, err = _report(capsys, _write(tmp_path / "r.json", *entries), "--uncovered", "NixlConnector")
    assert (rc, out) == (2, "")
    assert err == f"kvconform report: error: {message}" + err.split(message, 1)[1]
    assert err.count("\n") == 1 and "Traceback" not in err


def test_report_needs_out_unless_it_only_reads_coverage(tmp_path, capsys):
    rc, out, err = _report(capsys, _write(tmp_path / "r.json", nixl()))
    assert rc == 2 and "--out DIR is required" in err
    rc, out, err = _report(capsys, _write(tmp_path / "r.json", nixl()), "--update-coverage-floor")
    assert rc == 2 and "give both" in err


def test_the_html_section_shows_each_connectors_figure_and_its_unrun_lines_escaped():
    hostile = ModuleCoverage(path="evil/<script>.py", own=True, statements=2, covered_statements=1, branches=0,
                             covered_branches=0, missing=[{"function": "<b>f</b>", "lines": [3]}])
    page = html_section(results(nixl(), nixl(hostile, connector="<img src=x>")))
    assert '<table id="coverage">' in page
    assert "<td>NixlConnector</td><td class=\"pct\">75.0%</td>" in page
    assert "NixlConnectorWorker.register_kv_caches</code></td><td>30-32" in page
    assert "shared code its tests reached (not counted)" in page
    assert "<script>" not in page and "<img" not in page and "<b>f" not in page
    assert "&lt;img src=x&gt;" in page and "evil/&lt;script&gt;.py" in page
    assert html_section(results()) == ""


def test_merged_runs_miss_a_line_only_where_neither_ran_it(tmp_path):
    first = _write(tmp_path / "a.json", nixl(worker_module(missing=[30, 31, 90], branches=[(29, 30)]),
                                             shared_module()))
    second = _write(tmp_path / "b.json", nixl(worker_module(missing=[31, 32, 90], branches=[(29, 30), (89, -12)])))
    merged = read_all([first, second])
    [entry] = merged.coverage
    worker = next(m for m in entry.modules if m.path == WORKER)
    assert worker.missing_lines() == {31, 90}
    assert worker.missing_branches == [(29, 30)]
    assert (worker.covered_statements, worker.covered_branches) == (18, 3)
    assert [m.path for m in entry.modules] == [WORKER, BASE]  # the shared module only the first run reached


def test_runs_on_two_vllm_releases_keep_their_coverage_apart(tmp_path):
    merged = read_all([_write(tmp_path / "a.json", nixl()), _write(tmp_path / "b.json", nixl(), vllm="0.33.0")])
    assert sorted(c.platform for c in merged.coverage) == ["cpu (vLLM 0.32.0)", "cpu (vLLM 0.33.0)"]


def test_results_with_coverage_match_the_schema_and_without_it_have_no_key(tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    out = tmp_path / "out"
    rc, _, _ = _report(capsys, _write(tmp_path / "r.json", nixl()), "--out", out)
    written = json.loads((out / "results.json").read_text())
    assert rc == 0 and len(written["coverage"]) == 1
    validator.validate(written)
    assert "coverage" not in results().to_json()


def test_coverage_floor_through_the_command_line(tmp_path, capsys):
    run = _write(tmp_path / "r.json", nixl())
    floor = tmp_path / "floor.yaml"
    floor.write_text(f"vllm: 0.32.0\nconnectors:\n  NixlConnector:\n    {WORKER}: 90\n")
    rc, out, _ = _report(capsys, run, "--coverage-floor", floor)
    assert rc == 1 and f"NixlConnector: {WORKER}: 75.0%, below its floor 90.0%" in out
    rc, out, _ = _report(capsys, run, "--coverage-floor", floor, "--update-coverage-floor")
    assert rc == 0 and "wrote" in out
    rc, out, _ = _report(capsys, run, "--coverage-floor", floor)
    assert rc == 0 and "every module at or above its floor" in out
    rc, _, err = _report(capsys, run, "--coverage-floor", tmp_path / "nope.yaml")
    assert rc == 2 and "nope.yaml: no such file" in err
