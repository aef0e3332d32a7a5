"""The session's questions before any test (conformance/plugin/preflight.py, conformance/engine/shapes.py).

A vLLM that cannot configure the platform stops the run in one line with status 4; a vLLM whose internals
kvconform no longer fits is named once in the header and the verdict, and the checks that need what moved
are reported as not run for that reason, none as a connector's failure (a vLLM function renamed to a name
kvconform's table does not know is one such finding, not a failure of every check that builds a request).
Both are simulated on the installed vLLM by plugins in this folder; the CI Triton waiver is run for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvconform.conformance.engine import shapes
from tests.load import stretched
from tests.plugin import drifted_vllm, refusing_vllm
from tests.suite_run import REPO, run_suite

SELECTION = ["--connector", "ExampleConnector", "-k", "(test_roundtrip and float32) or test_fill or test_lint"]


def test_installed_vllm_fits():
    """Every release CI tests is fitted: the table names no mismatch on the installed one."""
    assert [m.line() for m in shapes.mismatches()] == []


def test_drift_is_named_with_the_line_that_relies_on_it(monkeypatch):
    from kvconform.conformance.vllm_install import api

    monkeypatch.setitem(api.PLACES, "ModelRunnerOutput", api.Place((drifted_vllm.__name__,), "ModelRunnerOutput"))
    monkeypatch.setitem(api.PLACES, "MambaBase", api.Place((drifted_vllm.__name__,), "MambaBase"))
    lines = [m.line() for m in shapes.mismatches()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("ModelRunnerOutput no longer takes kv_connector_output "
                               "(conformance/engine/scheduler.py:")
    assert lines[1].startswith("MambaBase.bind_kv_cache now reads page_alignment of the layer it is given, which "
                               "kvconform's _StateLayer does not provide (conformance/engine/hybrid_cache.py:")
    fill = next(m for m in shapes.mismatches() if m.what.startswith("MambaBase"))
    assert fill.blocks("test_fill") and not fill.blocks("test_roundtrip") and not fill.blocks("test_lint")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_refusing_vllm_stops_the_run_in_one_line(tmp_path, workers):
    """Serially the one process asks; under xdist each worker does and the controller says it, as serially."""
    status, outcomes, output = run_suite(tmp_path, ["-p", "tests.plugin.refusing_vllm", *workers, *SELECTION])
    assert status == 4, output[-2000:]
    assert outcomes == []
    errors = [line for line in output.splitlines() if line.startswith("ERROR: ")]
    assert errors == [f"ERROR: kvconform: vLLM {_vllm()} cannot configure the cpu platform here: RuntimeError: "
                      f"{refusing_vllm.MESSAGE}; no connector was tested"], output[-2000:]
    assert "Traceback" not in output


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_drifted_vllm_is_named_once_and_blames_no_connector(tmp_path, workers):
    results = tmp_path / "results-run.json"
    status, outcomes, output = run_suite(tmp_path, ["-p", "tests.plugin.drifted_vllm", "-rs", *workers,
                                                    f"--kvconform-json={results}", *SELECTION])
    header = [line for line in output.splitlines() if line.startswith("kvconform: cannot drive vLLM")]
    assert len(header) == 3, output[:3000]
    renamed = [line for line in header if f"has no {drifted_vllm.RENAMED} in vllm.v1.core.kv_cache_utils" in line]
    assert len(renamed) == 1 and "(conformance/engine/requests.py:" in renamed[0], header
    assert not [o for o in outcomes if o.outcome in ("failed", "error")], output[-3000:]
    assert status == 0, output[-3000:]  # nothing failed: the report's verdict says what was not tested
    not_run = [o for o in outcomes if "not run: kvconform cannot drive this vLLM" in o.message]
    assert not_run and all(o.outcome == "skipped" for o in not_run)
    lint = [o for o in outcomes if "test_lint" in o.nodeid]
    assert lint and not [o for o in lint if "cannot drive" in o.message]  # the lint reads source: it still runs
    assert all(any(module in o.nodeid for o in not_run) for module in ("test_roundtrip", "test_fill"))
    # the renamed function is looked up by every check that builds a request: none of them ran
    assert [o.nodeid for o in outcomes if "test_lint" not in o.nodeid and o not in not_run] == []

    out = tmp_path / "report"
    report = subprocess.run([sys.executable, "-m", "kvconform", "report", str(results), "--out", str(out)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=stretched(120),
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert report.returncode == 1, report.stdout + report.stderr
    summary = (out / "summary.md").read_text()
    assert "not tested: kvconform cannot drive this vLLM" in summary
    caveats = [line for line in summary.splitlines() if line.startswith("> **kvconform cannot drive vLLM")]
    assert len(caveats) == 3, summary
    assert any("ModelRunnerOutput no longer takes kv\\_connector\\_output" in c for c in caveats), summary
    assert any("has no init\\_none\\_hash in" in c for c in caveats), summary  # markdown escapes "_"
    data = json.loads((out / "results.json").read_text())
    assert all(t["cause"] == "harness" for t in data["tests"] if "cannot drive" in t.get("message", "")
               or t["outcome"] == "skipped" and t["message"].startswith("not run:"))


def test_ci_triton_waiver_is_said_in_header_and_reports(tmp_path, monkeypatch):
    """The waiver .ci/waivers holds for the vLLM 0.34 environment, turned on as the Makefile turns it on."""
    results = tmp_path / "results-run.json"
    monkeypatch.setenv("KVCONFORM_CI_WAIVE_TRITON", "1")
    monkeypatch.setenv("PYTHONPATH", str(REPO / ".ci" / "waivers"), prepend=os.pathsep)
    status, outcomes, output = run_suite(tmp_path, ["-p", "kvconform_ci_triton_waiver", f"--kvconform-json={results}",
                                                    "--connector", "ExampleConnector", "-k", "test_lint"])
    assert status == 0, output[-2000:]
    assert "kvconform: Triton requirement waived for CI: triton-cpu is not installable here" in output
    run = json.loads(results.read_text())["runs"][0]
    assert any(n.startswith("Triton requirement waived for CI") for n in run["environment_notes"])


def _vllm() -> str:
    from kvconform.conformance.vllm_install.api import vllm_version

    return vllm_version()
