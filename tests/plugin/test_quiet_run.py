"""A conformance run as a user starts it (outside the checkout, pytest's default JUnit family, an 80-column
terminal) prints what the suite found and nothing of other packages' deprecations; elsewhere the plugin
filters nothing; and ``pytest --platform=cpu`` in the checkout says in one line how to run the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from kvconform.reports.junit import read_junit_file
from tests.load import stretched
from tests.suite_run import BROKEN, REPO

NOISE = ("torch.jit.script_method", "record_property is incompatible", "PytestAssertRewriteWarning",
         "warnings summary")


def _pytest(cwd, *args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "COLUMNS": str(columns)}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=stretched(300))


def test_a_conformance_run_shows_no_third_party_warnings_and_each_cause_whole(tmp_path):
    junit = tmp_path / "junit.xml"
    # two lint tests (one fails: KVC003) and ExampleConnector's dtype round-trips, which record_property their claim
    done = _pytest(tmp_path, "--pyargs", "kvconform.conformance", "--platform=cpu", "-q", f"--junitxml={junit}",
                   "--connector", "ExampleConnector", "--connector", f"{BROKEN}.dict_cuda_broken:CudaLoadDictConnector",
                   "-k", "test_lint or (test_roundtrip and float16 and ExampleConnector)")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert [noise for noise in NOISE if noise in output] == [], output[-3000:]
    # pytest's short summary cuts the line at 80 columns; the section before it has the whole first line
    cause = "CudaLoadDictConnector: 1 lint error(s) in "
    section = output[output.index("kvconform: the cause of each failure"):output.index("short test summary")]
    assert "FAILED test_lint.py::test_lint[cpu-CudaLoadDictConnector]" in section
    source = (REPO / "tests" / "checks" / "dict_cuda_broken.py").read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if '.to("cuda")' in text)  # the line the lint names
    assert cause in section and f"dict_cuda_broken.py:{line} KVC003" in section, section
    cases = read_junit_file(junit).cases
    assert any("kvconform.claim" in case.properties for case in cases), "the round-trip's claim is still recorded"


def test_elsewhere_the_plugin_filters_no_warning(tmp_path):
    (tmp_path / "test_other.py").write_text(
        "import warnings\n\ndef test_old():\n    warnings.warn('old_api is deprecated', DeprecationWarning)\n")
    done = _pytest(tmp_path, "-q")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "old_api is deprecated" in done.stdout


def test_platform_alone_in_the_checkout_says_to_add_pyargs():
    done = _pytest(REPO, "--platform=cpu", "-q")
    assert done.returncode == 4, (done.stdout + done.stderr)[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["ERROR: kvconform: this would run the project's own tests, not the conformance suite: "
                     "add --pyargs kvconform.conformance"], done.stderr[-2000:]


def test_the_summary_counts_findings_and_skips_and_details_lists_them(tmp_path):
    selection = ("--pyargs", "kvconform.conformance", "--platform=cpu", "-q", "-k", "test_lint",
                 "--connector", "ExampleConnector", "--connector", "MultiConnector", "--connector",
                 "SimpleCPUOffloadConnector")
    counted = _pytest(tmp_path, *selection)
    output = counted.stdout + counted.stderr
    assert counted.returncode == 0, output[-3000:]
    # SimpleCPUOffloadConnector's lint is a known finding; MultiConnector's profile rules its lint out, for the
    # connector and its variants: the summary counts the skips pytest counts
    counts = re.search(r"^2 passed, (\d+) skipped, \d+ deselected, 1 xfailed", counted.stdout, re.MULTILINE)
    assert counts is not None, output[-3000:]
    skipped = int(counts.group(1))
    assert (f"kvconform: 1 xfailed (known findings), {skipped} skipped: --kvconform-details lists each finding and "
            "the skip reasons; kvconform report groups them per connector x check") in output
    assert "kvconform: known findings and skip reasons" not in output
    detailed = _pytest(tmp_path, *selection, "--kvconform-details")
    assert detailed.returncode == 0, (detailed.stdout + detailed.stderr)[-3000:]
    # stdout alone: torch may warn on stderr (no CUDA runtime) and stderr is not part of pytest's terminal report
    section = detailed.stdout[detailed.stdout.index("kvconform: known findings and skip reasons"):]
    assert "  [bug] xfail SimpleCPUOffloadConnector: lint 1 (1 tests: 1 xfailed)" in section
    assert f"skipped ({skipped} tests), by connector x check" in section
    # pytest's own last line still ends the run
    assert section.splitlines()[-1].startswith(f"2 passed, {skipped} skipped")
