"""The expectations plugin in real pytest sessions (pytester), on fake tests whose ids mimic the suite's.

The fake tests use plain parametrize ids (``cpu-CPU_ATTN-ExampleConnector-...``)
rather than the kvconform fixtures, so no vLLM is imported and each session is fast.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from kvconform.conformance.plugin import expectations, results_json
from kvconform.conformance.vllm_install.window import TESTED_VLLM, VllmStatus

pytest_plugins = ["pytester"]

FAKE_SUITE = """
import pytest

pytestmark = pytest.mark.check("roundtrip")

IDS = ["cpu-CPU_ATTN-ExampleConnector-aligned-extend", "cpu-CPU_ATTN-ExampleConnector-float16-bs16",
       "cpu-CPU_ATTN-MultiConnector-aligned-extend"]

@pytest.mark.parametrize("case", IDS, ids=IDS)
def test_roundtrip(case):
    # the known bug: ExampleConnector fails the aligned-extend case; MultiConnector passes it here
    if case == "cpu-CPU_ATTN-ExampleConnector-aligned-extend":
        raise FileNotFoundError("load looks in a folder that was never written")
"""

XFAIL_EXAMPLE = """
  - test: "*test_roundtrip*ExampleConnector*aligned-extend*"
    expect: xfail
    reason: aligned prompts load from the wrong folder
    link: https://github.com/vllm-project/vllm/issues/1
    class: bug
    raises: FileNotFoundError
    match: "never written"
"""
XFAIL_MULTI = """
  - test: "*test_roundtrip*MultiConnector*aligned-extend*"
    expect: xfail
    reason: inherits the ExampleConnector bug
    link: https://github.com/vllm-project/vllm/issues/2
    class: bug
    raises: FileNotFoundError
    match: "never written"
"""
STALE = """
  - connector: NoSuchConnector
    expect: skip
    reason: matches nothing
"""

BASE_ARGS = ("-p", "kvconform.conformance.plugin.expectations", "-p", "kvconform.conformance.plugin.results_json",
             "--platform=cpu", "-p", "no:cacheprovider", "-rA")


def _expectations(pytester: pytest.Pytester, *entries: str, platform: str = "cpu", name: str = "exp.yaml") -> str:
    pytester.path.joinpath(name).write_text(f"platform: {platform}\nexpectations:\n" + "".join(
        textwrap.dedent(e).strip("\n") + "\n" for e in entries))
    return name


def _entry_line(pytester: pytest.Pytester, name: str, needle: str) -> int:
    lines = pytester.path.joinpath(name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*BASE_ARGS, *args)


def test_xfail_entry_marks_the_known_failure_strict_xfail(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "ExampleConnector")
    result.assert_outcomes(xfailed=1, passed=1)
    line = _entry_line(pytester, exp, "ExampleConnector*aligned-extend")
    result.stdout.fnmatch_lines([f"XFAIL *ExampleConnector-aligned-extend* - bug: aligned prompts load from the wrong "
                                 f"folder (https://github.com/vllm-project/vllm/issues/1; exp.yaml:{line})"])
    assert result.ret == 0


def test_without_the_entry_the_bug_is_a_plain_failure(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester)
    result = _run(pytester, "--kvconform-expectations", exp)
    result.assert_outcomes(failed=1, passed=2)


@pytest.fixture
def tested_vllm(monkeypatch) -> VllmStatus:
    """The run sees a vLLM release kvconform's CI tests, whichever vLLM (or none) is installed: where a strict
    xfail that passes fails the run (on an untested one it is a note: test_expectations_untested.py)."""
    status = VllmStatus(TESTED_VLLM[-1], "vllm", tested=True)
    for module in (expectations, results_json):
        monkeypatch.setattr(module, "installed_status", lambda: status)
    return status


def test_unexpectedly_passing_names_the_entry_to_remove_and_fails_the_run(pytester, tested_vllm):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, XFAIL_MULTI)
    result = _run(pytester, "--kvconform-expectations", exp)
    result.assert_outcomes(xfailed=1, passed=1, failed=1)
    line = _entry_line(pytester, exp, "MultiConnector*aligned-extend")
    result.stdout.fnmatch_lines([f"unexpectedly passing: remove the entry exp.yaml:{line} *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_stale_entry_is_reported_and_fails_only_under_strict(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, STALE)
    line = _entry_line(pytester, exp, "NoSuchConnector")
    lenient = _run(pytester, "--kvconform-expectations", exp)
    lenient.assert_outcomes(xfailed=1, passed=2)
    lenient.stdout.fnmatch_lines(["*kvconform: 1 stale expectation*",
                                  f"exp.yaml:{line}: skip connector=NoSuchConnector matches no collected test*"])
    assert lenient.ret == 0
    strict = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    strict.assert_outcomes(xfailed=1, passed=2)
    strict.stdout.fnmatch_lines(["--kvconform-strict: stale expectations fail this run"])
    assert strict.ret == pytest.ExitCode.TESTS_FAILED


def test_used_entries_are_not_stale_even_when_deselected(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict", "-k", "bs16")
    result.assert_outcomes(passed=1)
    assert "stale expectation" not in result.stdout.str()
    assert result.ret == 0


def test_stale_entries_reach_the_controller_under_xdist(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, STALE)
    line = _entry_line(pytester, exp, "NoSuchConnector")
    result = _run(pytester, "-n", "2", "--kvconform-expectations", exp, "--kvconform-strict",
                  "--kvconform-json", "out/results.json")
    result.assert_outcomes(xfailed=1, passed=2)
    result.stdout.fnmatch_lines(["*kvconform: 1 stale expectation*", f"exp.yaml:{line}: skip *"])
    used = _entry_line(pytester, exp, "ExampleConnector*aligned-extend")
    assert f"exp.yaml:{used}: " not in result.stdout.str()  # a worker used the xfail entry: not stale
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = json.loads(pytester.path.joinpath("out/results.json").read_text())
    assert data["runs"][0]["stale_expectations"] == [
        {"where": f"exp.yaml:{line}", "expect": "skip", "selector": "connector=NoSuchConnector"}]
    xfailed = [t for t in data["tests"] if t["outcome"] == "xfailed"]
    assert [t["expected"]["where"] for t in xfailed] == [f"exp.yaml:{used}"]
    assert [t["expected"]["class"] for t in xfailed] == ["bug"]  # each finding's class reaches the results


def test_skip_entry_skips_with_its_reason(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, """
      - test: "*MultiConnector*"
        expect: skip
        reason: no wrapped connector on this runner
    """)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "MultiConnector")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * no wrapped connector on this runner (exp.yaml:3)"])


def test_entries_for_another_platform_are_ignored(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, STALE, platform="xpu")
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    result.assert_outcomes(failed=1, passed=2)  # the xpu xfail does not apply on cpu ...
    assert "stale expectation" not in result.stdout.str()  # ... and is not stale here


def test_tests_without_a_check_marker_are_left_alone(pytester):
    pytester.makepyfile(test_unit="def test_roundtrip_helper():\n    assert 1 + 1 == 2\n")
    exp = _expectations(pytester, """
      - test: "*roundtrip*"
        expect: skip
        reason: would skip everything
    """)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict")
    result.assert_outcomes(passed=1)
    assert "stale expectation" not in result.stdout.str()  # no conformance test collected: nothing to judge
    assert result.ret == 0


def test_malformed_file_stops_the_run_with_one_line(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, """
      - test: "*ExampleConnector*"
        expect: xfail
        reason: no link given
    """)
    result = _run(pytester, "--kvconform-expectations", exp)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: exp.yaml:3: expectations.0: expect: xfail needs link and class and raises "
                                 "and match (or findings)"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


OTHER_FAILURES = """
import pytest

pytestmark = pytest.mark.check("roundtrip")

IDS = ["cpu-CPU_ATTN-ExampleConnector-key-error", "cpu-CPU_ATTN-ExampleConnector-other-message",
       "cpu-CPU_ATTN-ExampleConnector-setup-error"]

@pytest.fixture
def rig(request):
    if request.node.callspec.id.endswith("setup-error"):
        raise FileNotFoundError("load looks in a folder that was never written (raised by a fixture)")

@pytest.mark.parametrize("case", IDS, ids=IDS)
def test_roundtrip(case, rig):
    if case.endswith("key-error"):
        raise KeyError("model.layers.0.self_attn.attn")  # a harness regression, not the known bug
    raise FileNotFoundError("the stored file was deleted")  # the right type, another cause
"""


def test_another_failure_is_not_absorbed_and_names_the_entry_it_did_not_match(pytester):
    pytester.makepyfile(test_roundtrip=OTHER_FAILURES)
    exp = _expectations(pytester, XFAIL_EXAMPLE.replace("aligned-extend", "*"))
    line = _entry_line(pytester, exp, "test_roundtrip")
    result = _run(pytester, "--kvconform-expectations", exp)
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert out.count(f"not the expected failure of exp.yaml:{line} (bug: aligned prompts") == 3, out
    assert "it raised KeyError: 'model.layers.0.self_attn.attn'; the entry expects FileNotFoundError" in out
    assert "message does not match 'never written': 'the stored file was deleted'" in out
    assert "it failed in setup, not in the test itself (FileNotFoundError" in out
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_expected_failure_is_still_an_xfail_when_it_matches(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE)
    result = _run(pytester, "--kvconform-expectations", exp, "-k", "aligned-extend and Example")
    result.assert_outcomes(xfailed=1)
    assert "not the expected failure" not in result.stdout.str()


@pytest.mark.parametrize("narrowing", [["test_roundtrip.py"], ["test_roundtrip.py::test_roundtrip"],
                                       ["--connector", "ExampleConnector"], ["--attn-backend", "CPU_ATTN"]],
                         ids=["file", "node-id", "connector", "attn-backend"])
def test_a_narrowed_run_judges_no_entry_stale(pytester, narrowing):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, STALE)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict", *narrowing)
    result.assert_outcomes(xfailed=1, passed=2)
    assert "stale expectation" not in result.stdout.str()
    assert result.ret == 0


def test_the_whole_folder_judges_stale_entries(pytester):
    pytester.makepyfile(test_roundtrip=FAKE_SUITE)
    exp = _expectations(pytester, XFAIL_EXAMPLE, STALE)
    result = _run(pytester, "--kvconform-expectations", exp, "--kvconform-strict", str(pytester.path))
    result.stdout.fnmatch_lines(["*kvconform: 1 stale expectation*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
