"""``kvconform report`` end to end: the three files, the terminal matrix, escaping, and bad input."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvconform.conformance.cli import main
from tests.reports.samples import CPU_WITH_PROPERTIES, CUDA_PLAIN, HOSTILE, HOSTILE_MESSAGE

SCHEMA = Path(__file__).resolve().parents[2] / "reports" / "results.schema.json"


@pytest.fixture
def junit_files(tmp_path):
    cpu, cuda = tmp_path / "junit-cpu.xml", tmp_path / "junit-cuda.xml"
    cpu.write_text(CPU_WITH_PROPERTIES)
    cuda.write_text(CUDA_PLAIN)
    return [str(cpu), str(cuda)]


def _report(capsys, *args):
    rc = main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _block(lines: list[str], title: str) -> list[str]:
    """The lines of one platform's matrix: from its title to the next blank line."""
    at = lines.index(title)
    return lines[at + 1: lines.index("", at)]


def _cells(block: list[str]) -> dict[str, list[str]]:
    """connector -> its cells' lines (a cell lists one outcome per line), read by column position."""
    header = block[0]
    starts = [header.index(word) for word in header.split()]
    rows: dict[str, list[str]] = {}
    current = None
    for line in block[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        if cells[0]:
            current = cells[0]
            rows[current] = [[c] if c else [] for c in cells[1:]]
        else:
            for column, text in zip(rows[current], cells[1:], strict=True):
                column += [text] if text else []
    return {name: [" · ".join(col) for col in cols] for name, cols in rows.items()}


def test_report_writes_results_summary_and_page_and_prints_the_matrix(tmp_path, capsys, junit_files):
    out_dir = tmp_path / "out" / "nested"
    rc, out, err = _report(capsys, *junit_files, "--out", out_dir, "--print-matrix")
    assert (rc, err) == (1, "")  # tests failed: a CI step can key on it
    assert sorted(p.name for p in out_dir.iterdir()) == ["index.html", "results.json", "summary.md"]
    lines = out.splitlines()
    assert lines.index("cuda") < lines.index("cpu")  # platforms in the platform table's order
    cpu = _block(lines, "cpu")
    assert cpu[0].split() == ["connector", "roundtrip", "contract", "lint", "engine"]
    cpu_rows = _cells(cpu)
    # every outcome with its count, in the same words as summary.md: no "xfail 1/2" to decode
    assert cpu_rows["ExampleConnector"] == ["1 xfailed · 1 passed", "-", "1 failed", "1 failed"]
    assert cpu_rows["DecodeBenchConnector"] == ["-", "1 skipped", "-", "-"]
    assert list(cpu_rows)[0] == "ExampleConnector"  # the connector with a failure comes first
    cuda_rows = _cells(_block(lines, "cuda"))
    assert cuda_rows["NixlConnector"] == ["1 failed", "-", "-", "-"]
    assert cuda_rows["ExampleConnector"] == ["1 passed", "-", "1 passed", "-"]
    assert list(cuda_rows)[-1] == "ExampleConnector"  # the only connector without a failure on cuda
    assert "total: 2 error, 3 failed, 1 xfailed, 3 passed, 1 skipped; verdict: FAILING" in out
    assert out.splitlines()[-1].startswith("kvconform report: 10 tests from 2 file(s): FAILING; wrote ")


def test_the_terminal_counts_findings_and_skips_and_ends_on_the_matrix_and_the_verdict(tmp_path, capsys,
                                                                                        junit_files):
    _, out, _ = _report(capsys, *junit_files, "--out", tmp_path, "--print-matrix")
    lines = out.splitlines()
    assert ("known findings: 1 (1 tests: 1 xfailed); kvconform report --details or index.html lists them"
            in lines)
    assert ("skipped (1 tests): 1 reason in 1 connector x check cell; kvconform report --details or index.html "
            "lists them") in lines
    assert "loads from the wrong folder" not in out and "needs two devices" not in out  # counted, not listed
    # the end: the failures' first lines and the counts above, then the matrices, then the verdict
    assert max(i for i, line in enumerate(lines) if line.startswith(("FAILED ", "ERROR ", "known", "skipped"))) < \
        lines.index("cuda") < lines.index("cpu")
    assert lines[-2] == ("total: 2 error, 3 failed, 1 xfailed, 3 passed, 1 skipped; verdict: FAILING (a test failed "
                         "or errored) - runtime checks ran for 3 of 3 connectors on cuda; runtime checks ran for 1 of "
                         "2 connectors on cpu; 1 had no test run (why: see the matrix); 1 known finding (1 tests)")
    assert lines[-1].startswith("kvconform report: ")
    cpu = _block(lines, "cpu")
    assert lines.index("cpu") + len(cpu) + 1 == len(lines) - 3  # the cpu matrix, its blank line, the verdict


def test_the_terminal_lists_each_known_finding_once_and_groups_skip_reasons_with_details(tmp_path, capsys,
                                                                                         junit_files):
    _, out, _ = _report(capsys, *junit_files, "--out", tmp_path, "--print-matrix", "--details")
    findings = out[out.index("known findings (1)"):]
    assert findings.splitlines()[1:4] == [
        "  [bug] xfail ExampleConnector: roundtrip 1 (1 tests: 1 xfailed)",
        "      loads from the wrong folder",
        "      https://github.com/vllm-project/vllm/issues  (conformance/expectations/cpu.yaml:13)"]
    skipped = out[out.index("skipped (1 tests), by connector x check"):].splitlines()
    assert skipped[1].split() == ["DecodeBenchConnector", "contract", "1", "needs", "two", "devices"]
    # the whole first line of a failure's cause, not a message cut at its colon
    assert ("FAILED conformance/test_lint.py::test_lint[cpu-ExampleConnector] [cpu]: ExampleConnector: 1 lint "
            "error(s) in /v/example_connector.py: example_connector.py:190: KVC001 error: .cuda() hard-codes the "
            "device") in out


def test_results_json_matches_the_documented_schema(tmp_path, capsys, junit_files):
    jsonschema = pytest.importorskip("jsonschema")
    assert _report(capsys, *junit_files, "--out", tmp_path)[0] == 1  # tests failed
    data = json.loads((tmp_path / "results.json").read_text())
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert [e.message for e in validator.iter_errors(data)] == []
    assert data["totals"] == {"error": 2, "failed": 3, "xfailed": 1, "passed": 3, "skipped": 1}
    data["runs"][0]["hostname"] = "ci"  # undocumented fields are refused, so the schema cannot drift silently
    assert list(validator.iter_errors(data))


def test_summary_lists_failures_then_findings_then_a_matrix_per_platform(tmp_path, capsys, junit_files):
    _report(capsys, *junit_files, "--out", tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("## kvconform conformance: FAILING (a test failed or errored)\n\nruntime checks ran for "
                              "3 of 3 connectors on cuda; runtime checks ran for 1 of 2 connectors on cpu; 1 had no "
                              "test run (why: see the matrix); 1 known finding (1 tests)\n")
    failures_at = summary.index("### Failures (5)")
    findings_at = summary.index("### Known findings (1)")
    assert failures_at < findings_at < summary.index("### cuda") < summary.index("### cpu")
    failure_rows = [ln for ln in summary[failures_at:findings_at].splitlines() if ln.startswith("| ")][1:]
    outcomes = [row.split(" | ")[0] for row in failure_rows]
    assert outcomes == ["| **ERROR**", "| **ERROR**", "| **FAIL**", "| **FAIL**", "| **FAIL**"]
    assert "lint error(s) in /v/example\\_connector.py: example\\_connector.py:190: KVC001" in summary
    finding_rows = [ln for ln in summary[findings_at:summary.index("### cuda")].splitlines() if ln.startswith("| ")]
    assert finding_rows[0].startswith("| class | expect | connector | checks (tests) | outcome | reason | link |")
    assert finding_rows[1] == ("| bug | xfail | ExampleConnector | roundtrip 1 | 1 xfailed "
                               "| loads from the wrong folder | [issues](https://github.com/vllm-project/vllm/issues) "
                               "| conformance/expectations/cpu.yaml:13 |")
    # test text cannot break the table or inject HTML into the annotation
    assert "NIXL agent failed \\| &lt;b&gt;bold&lt;/b&gt;" in summary
    assert "<b>" not in summary
    # the same words as the terminal's cells
    assert "| ExampleConnector | 1 xfailed · 1 passed | – | 1 failed | 1 failed |" in summary
    skipped = summary[summary.index("<details><summary>Skipped: 1 tests"):]
    assert "| cpu | DecodeBenchConnector | contract | 1 | needs two devices |" in skipped


def test_page_is_self_contained_with_matrix_filters_and_failure_text(tmp_path, capsys, junit_files):
    assert _report(capsys, *junit_files, "--out", tmp_path)[0] == 1  # tests failed
    page = (tmp_path / "index.html").read_text()
    for external in ("<link", " src=", "@import", "url(", "http://", "https://cdn"):
        assert external not in page
    for select in ('id="f-platform"', 'id="f-check"', 'id="f-outcome"'):
        assert select in page
    cell = 'class="cell o-failed" data-platform="cuda" data-check="roundtrip" data-outcomes="failed"'
    assert cell in page
    assert ".o-failed { background: #f08a8a; }" in page
    assert "RuntimeError: NIXL agent failed" in page
    assert not [ch for ch in page if ord(ch) > 0x2000 and ch not in "–…·"], "marks need no emoji font"
    assert '<span class="badge o-failed">FAIL</span>' in page
    assert 'id="findings"' in page and "bug finding, expected xfail by conformance/expectations/cpu.yaml:13" in page


class _Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]


def test_hostile_failure_text_is_escaped_everywhere(tmp_path, capsys):
    hostile = tmp_path / "junit.xml"
    hostile.write_text(HOSTILE)
    assert _report(capsys, hostile, "--out", tmp_path / "out", "--print-matrix")[0] == 1
    page = (tmp_path / "out" / "index.html").read_text()
    parsed = _Elements()
    parsed.feed(page)
    assert parsed.tags.count("script") == 1  # ours, at the end
    assert "img" not in parsed.tags and "onerror" not in parsed.attrs
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "<script" not in summary and "<img" not in summary and "&lt;script&gt;" in summary
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["tests"][0]["message"] == HOSTILE_MESSAGE  # the data keeps the text; only renderings escape it


@pytest.mark.parametrize("case", ["missing", "malformed-xml", "not-junit", "unwritable-out"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    path = tmp_path / "input.xml"
    out = tmp_path / "out"
    if case == "malformed-xml":
        path.write_text("<testsuite><testcase></testsuite>")
    elif case == "not-junit":
        path.write_text("<?xml version='1.0'?><project><target/></project>")
    elif case == "unwritable-out":
        path.write_text(CUDA_PLAIN)
        out.write_text("a file where the folder should be")
    rc, stdout, stderr = _report(capsys, path, "--out", out)
    assert rc == 2
    assert stderr.count("\n") == 1 and stderr.startswith("kvconform report: error: ")
    assert "Traceback" not in stderr
    expected = {"missing": "no such file", "malformed-xml": "not well-formed XML", "not-junit": "not a JUnit XML file",
                "unwritable-out": "cannot write the report"}[case]
    assert expected in stderr


def _results_json(path, tests, stale=()):
    run = {"id": "cpu", "platform": "cpu", "vllm": "0.32.0", "stale_expectations": list(stale)}
    path.write_text(json.dumps({"format": "kvconform-results", "version": 1, "runs": [run], "tests": tests,
                                "totals": {}, "cells": []}))
    return path


def test_headline_and_exit_status_warn_about_stale_expectations_and_empty_runs(tmp_path, capsys):
    passed = {"run": "cpu", "nodeid": "conformance/test_lint.py::test_lint[cpu-ExampleConnector]", "check": "lint",
              "platform": "cpu", "backend": "-", "connector": "ExampleConnector", "outcome": "passed"}
    stale = {"where": "conformance/expectations/cpu.yaml:13", "expect": "xfail", "selector": "test=*gone*"}
    cases = {  # name -> (results, headline, exit status)
        "stale": (_results_json(tmp_path / "stale.json", [passed], [stale]),
                  "passing, but expectations matched no test", 1),
        "empty": (_results_json(tmp_path / "empty.json", []), "no tests ran", 1),
        "clean": (_results_json(tmp_path / "clean.json", [passed]), "passing (every outcome as expected)", 0),
    }
    for name, (path, headline, status) in cases.items():
        rc, out, _ = _report(capsys, path, "--out", tmp_path / name, "--print-matrix")
        summary = (tmp_path / name / "summary.md").read_text()
        assert rc == status and summary.startswith(f"## kvconform conformance: {headline}\n"), name
        assert f"verdict: {headline}" in out
        assert _report(capsys, path, "--out", tmp_path / name, "--exit-zero")[0] == 0, name
        has_stale = name == "stale"
        assert ("### Stale expectations" in summary) is has_stale
        assert ("cpu.yaml:13" in (tmp_path / name / "index.html").read_text()) is has_stale
        assert ("stale expectation conformance/expectations/cpu.yaml:13: xfail test=*gone*" in out) is has_stale


def test_exit_zero_keeps_bad_input_an_error(tmp_path, capsys):
    rc, _, err = _report(capsys, tmp_path / "missing.xml", "--out", tmp_path / "out", "--exit-zero")
    assert rc == 2 and "no such file" in err
