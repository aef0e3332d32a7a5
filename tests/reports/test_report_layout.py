"""The page reads at a glance: verdict, matrix, failures, findings; short link texts; why a row shows only lint.

A full CPU run has 17 connectors and 19 known findings whose links are long source
URLs. Printed whole in a narrow column, those URLs made each finding 400-900 px tall
and put the matrix 13,000 px down the page; the browser test lays out a page of that
size in headless chromium and measures where the matrix is.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kvconform.reports import render_html, render_markdown
from kvconform.reports.findings import link_text
from kvconform.reports.matrix import build_matrix
from kvconform.reports.model import CaseResult, Expected, Results, RunInfo, build
from kvconform.reports.skips import RUN_ELSEWHERE, static_only_notes

REPO = Path(__file__).resolve().parents[2]
SOURCE = "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/kv_connector/v1/"


@pytest.mark.parametrize("link, text", [
    (SOURCE + "mooncake/store/worker.py#L1968", "worker.py:1968"),
    (SOURCE + "example_connector.py#L50-L58", "example_connector.py:50"),
    ("https://github.com/vllm-project/vllm/pull/45080", "#45080"),
    ("https://github.com/LMCache/LMCache/issues/12/", "#12"),
    ("https://example.org/docs/design.html", "design.html"),
    ("https://example.org/", "example.org"),
    ("see the design notes", "see the design notes"),  # not an address: shown as it is
])
def test_a_link_reads_as_file_and_line_or_number(link, text):
    assert link_text(link) == text


def _test(nodeid: str, connector: str, check: str, outcome: str, message: str = "",
          expected: Expected | None = None) -> CaseResult:
    return CaseResult(run="cpu", nodeid=nodeid, check=check, platform="cpu", backend="CPU_ATTN",
                      connector=connector, outcome=outcome, message=message, expected=expected)


CHECKS = ("roundtrip", "load_failure", "fill", "contract", "lint", "engine", "workload")


def full_run(connectors: int = 17, finding_count: int = 19) -> Results:
    """A run shaped like today's CPU run: half the connectors only linted (a missing package), the others ran
    every check, one test failed, and ``finding_count`` findings: one per connector with a long source link and
    reason, the rest short with a pull request's link."""
    tests = []
    for c in range(connectors):
        name = f"Connector{c:02d}"
        for check in CHECKS:
            for n in range(3):
                nodeid = f"conformance/test_{check}.py::test_{check}[cpu-CPU_ATTN-{name}-{n}]"
                if c % 2 and check != "lint":
                    tests.append(_test(nodeid, name, check, "skipped",
                                       f"{name} needs package pkg{c}, which is not installed here"))
                elif c < finding_count and check == ("lint" if c % 2 else "roundtrip") and n == 0:
                    reason = f"{name} loads the wrong blocks when " + "a prompt is long " * 12
                    tests.append(_test(nodeid, name, check, "xfailed", reason, Expected(
                        expect="xfail", where=f"conformance/expectations/cpu.yaml:{10 + c}", reason=reason,
                        link=f"{SOURCE}some/deep/module/path/worker_{c}.py#L{100 + c}", **{"class": "bug"})))
                else:
                    tests.append(_test(nodeid, name, check, "passed"))
    # findings beyond one per connector: on the lint check
    for extra in range(max(0, finding_count - connectors)):
        name = f"Connector{extra:02d}"
        nodeid = f"conformance/test_lint.py::test_lint[{name}-extra{extra}]"
        tests.append(_test(nodeid, name, "lint", "xfailed", "hard-coded cuda", Expected(
            expect="xfail", where=f"conformance/expectations/any.yaml:{extra}", reason=f"hard-coded cuda {extra}",
            link=f"https://github.com/vllm-project/vllm/pull/{45000 + extra}", **{"class": "hazard"})))
    tests.append(_test("conformance/test_engine.py::test_engine[cpu-CPU_ATTN-Connector00]", "Connector00", "engine",
                       "failed", "AssertionError: the engine exited with status 1: RuntimeError: boom"))
    tests = [t for t in tests if not (t.connector == "Connector00" and t.check == "engine" and t.outcome == "passed")]
    return build([RunInfo(id="cpu", platform="cpu")], tests)


def test_the_page_orders_verdict_matrix_failures_findings_with_short_link_texts():
    page = render_html.render(full_run())
    marks = ["<h1>", '<table id="matrix"', '<ul id="failures"', '<table id="findings"']
    positions = [page.index(mark) for mark in marks]
    assert positions == sorted(positions), dict(zip(marks, positions, strict=True))
    findings = page[page.index('<table id="findings"'):]
    findings = findings[:findings.index("</table>")]
    assert f'<a href="{SOURCE}some/deep/module/path/worker_3.py#L103" title=' in findings
    texts = re.findall(r"<a [^>]*>([^<]*)</a>", findings)
    assert "worker_3.py:103" in texts and "#45001" in texts
    assert not [t for t in texts if t.startswith("http")], "no link text is a raw address"
    assert findings.count("<details><summary>") == 17  # the 17 long reasons fold; the short ones do not


def test_a_row_with_only_lint_says_why_and_what_runs_it_elsewhere():
    results = build([RunInfo(id="cpu", platform="cpu")], [
        _test("a", "LMCacheMPConnector", "lint", "xfailed"),
        *(_test(f"r{i}", "LMCacheMPConnector", "roundtrip", "skipped",
                "LMCacheMPConnector needs package lmcache, which is not installed here") for i in range(3)),
        _test("f", "LMCacheMPConnector", "fill", "skipped", "LMCacheMPConnector: the fill check does not apply"),
        _test("b", "ExampleConnector", "lint", "passed"),
        _test("c", "ExampleConnector", "roundtrip", "passed"),
        _test("d", "HiSparseConnector", "roundtrip", "skipped", "HiSparseConnector: only on CUDA"),
    ])
    notes = static_only_notes(results, build_matrix(results))
    assert notes["LMCacheMPConnector"].text() == ("only lint ran: needs package lmcache, which is not installed "
                                                  "here; `make test-thirdparty` runs it")
    assert notes["HiSparseConnector"].text() == "no test ran: only on CUDA"
    assert "ExampleConnector" not in notes  # it ran its checks
    page = render_html.render(results)
    assert "needs package lmcache, which is not installed here; <code>make test-thirdparty</code> runs it" in page


def test_the_connectors_run_elsewhere_are_those_make_test_thirdparty_runs():
    found = re.search(r"^TP_CONNECTORS\s*\?=\s*(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile no longer sets TP_CONNECTORS"
    assert sorted(found.group(1).split()) == sorted(RUN_ELSEWHERE)


def test_summary_links_read_as_file_and_line():
    summary = render_markdown.render(full_run())
    assert f"[worker\\_3.py:103]({SOURCE}some/deep/module/path/worker_3.py#L103)" in summary
    assert "[link](" not in summary


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
PROBE = """<script>
(function () {
  var matrix = document.getElementById('matrix').getBoundingClientRect();
  var findings = document.getElementById('findings').getBoundingClientRect();
  var rows = Array.prototype.map.call(document.querySelectorAll('#findings tr'),
                                      function (r) { return r.getBoundingClientRect().height; });
  document.body.setAttribute('data-probe', JSON.stringify({
    matrixTop: matrix.top + window.scrollY, matrixBottom: matrix.bottom + window.scrollY,
    findingsTop: findings.top + window.scrollY, tallestFinding: Math.max.apply(null, rows),
    pageWidth: document.documentElement.scrollWidth}));
})();
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium), so "
                                             "the page's layout cannot be measured")
def test_in_a_1400_wide_browser_the_matrix_of_17_connectors_is_within_the_first_2000_px(tmp_path):
    page = tmp_path / "index.html"
    page.write_text(render_html.render(full_run()).replace("</body>", PROBE + "</body>"))
    profile = tmp_path / "profile"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,2000", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found, f"chromium exited {done.returncode} without running the page: {done.stderr[-2000:]}"
    record = json.loads(html.unescape(found.group(1)))
    assert record["matrixTop"] < 400, record  # right under the verdict and the filters
    assert record["matrixBottom"] < 2000, record  # the whole matrix on the first screen
    assert record["findingsTop"] > record["matrixBottom"], record
    assert record["tallestFinding"] < 120, record  # a long link or reason no longer makes a row hundreds of px
    assert record["pageWidth"] <= 1400, record  # and nothing pushes the page wider than the window
