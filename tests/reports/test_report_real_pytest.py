"""The report reads what real pytest sessions write: JUnit with and without kvconform's properties, and
``--kvconform-json``, with and without xdist. All must agree on every test's outcome and identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.reports.readers import read

pytest_plugins = ["pytester"]

FAKE_SUITE = """
import pytest

def _boom():
    raise ValueError("no device")

@pytest.fixture
def broken_setup():
    _boom()

@pytest.fixture
def broken_teardown():
    yield
    raise OSError("busy")

XFAIL = pytest.mark.xfail(reason="known bug", strict=True)

@pytest.mark.check("roundtrip")
@pytest.mark.parametrize("case", [
    pytest.param("ok", id="cpu-CPU_ATTN-ExampleConnector-float16-bs16"),
    pytest.param("fail", id="cpu-CPU_ATTN-NixlConnector-float16-bs16"),
    pytest.param("skip", id="cpu-CPU_ATTN-OffloadingConnector-float16-bs16"),
    pytest.param("fail", id="cpu-CPU_ATTN-MultiConnector-aligned-extend", marks=XFAIL),
    pytest.param("ok", id="cpu-CPU_ATTN-ExampleConnector-aligned-extend", marks=XFAIL),
])
def test_roundtrip(case):
    if case == "skip":
        pytest.skip("no offloading on this runner")
    assert case == "ok", "loaded bytes differ from the stored ones"

@pytest.mark.check("fill")
@pytest.mark.parametrize("case", ["x"], ids=["cpu-CPU_ATTN-DecodeBenchConnector-tuple"])
def test_fill(case, broken_setup):
    pass

@pytest.mark.check("contract")
@pytest.mark.parametrize("case", ["x"], ids=["cpu-CPU_ATTN-ExampleConnector"])
def test_contract(case, broken_teardown):
    pass
"""

MODULE = "test_fake_suite.py"
EXPECTED = {  # test name -> (check, connector, variant, outcome)
    "test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float16-bs16]":
        ("roundtrip", "ExampleConnector", "float16-bs16", "passed"),
    "test_roundtrip[cpu-CPU_ATTN-NixlConnector-float16-bs16]":
        ("roundtrip", "NixlConnector", "float16-bs16", "failed"),
    "test_roundtrip[cpu-CPU_ATTN-OffloadingConnector-float16-bs16]":
        ("roundtrip", "OffloadingConnector", "float16-bs16", "skipped"),
    "test_roundtrip[cpu-CPU_ATTN-MultiConnector-aligned-extend]":
        ("roundtrip", "MultiConnector", "aligned-extend", "xfailed"),
    "test_roundtrip[cpu-CPU_ATTN-ExampleConnector-aligned-extend]":  # strict xfail that passed
        ("roundtrip", "ExampleConnector", "aligned-extend", "failed"),
    "test_fill[cpu-CPU_ATTN-DecodeBenchConnector-tuple]": ("fill", "DecodeBenchConnector", "tuple", "error"),
    "test_contract[cpu-CPU_ATTN-ExampleConnector]": ("contract", "ExampleConnector", "", "error"),
}
MESSAGES = {
    "test_roundtrip[cpu-CPU_ATTN-NixlConnector-float16-bs16]":
        "AssertionError: loaded bytes differ from the stored ones",
    "test_roundtrip[cpu-CPU_ATTN-OffloadingConnector-float16-bs16]": "no offloading on this runner",
    "test_roundtrip[cpu-CPU_ATTN-MultiConnector-aligned-extend]": "known bug",
    "test_fill[cpu-CPU_ATTN-DecodeBenchConnector-tuple]": "ValueError: no device",
    "test_contract[cpu-CPU_ATTN-ExampleConnector]": "OSError: busy",
}
SCHEMA = Path(__file__).resolve().parents[2] / "reports" / "results.schema.json"


def _session(pytester: pytest.Pytester, *args: str) -> None:
    pytester.makepyfile(**{MODULE[:-3]: FAKE_SUITE})
    pytester.path.joinpath("none.yaml").write_text("platform: cpu\nexpectations: []\n")
    result = pytester.runpytest("-p", "kvconform.conformance.plugin.expectations",
                                "--kvconform-expectations", "none.yaml", "--platform=cpu", "-p", "no:cacheprovider",
                                *args)
    result.assert_outcomes(passed=2, failed=2, skipped=1, xfailed=1, errors=2)  # pytest counts a
    # test whose teardown failed once as passed and once as an error; the report says error


def _rows(results):
    return {t.nodeid.split("::")[-1]: (t.check, t.connector, t.variant, t.outcome) for t in results.tests}


def _assert_identities(results):
    assert _rows(results) == EXPECTED
    assert {(t.platform, t.backend) for t in results.tests} == {("cpu", "CPU_ATTN")}
    assert all(t.nodeid.startswith(MODULE + "::") for t in results.tests)
    messages = {t.nodeid.split("::")[-1]: t.message for t in results.tests}
    for name, message in MESSAGES.items():
        assert message in messages[name], (name, messages[name])
    strict = messages["test_roundtrip[cpu-CPU_ATTN-ExampleConnector-aligned-extend]"]
    assert strict.startswith("[XPASS(strict)]")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_json_and_junit_of_a_real_session_agree(pytester, workers):
    _session(pytester, "-p", "kvconform.conformance.plugin.results_json", "--kvconform-json", "out/results.json",
             "--junitxml", "out/junit.xml", *workers)
    from_json, kind = read(pytester.path / "out/results.json")
    assert kind == "json"
    _assert_identities(from_json)
    from_junit, kind = read(pytester.path / "out/junit.xml")
    assert kind == "junit"
    _assert_identities(from_junit)
    (run,) = from_json.runs
    assert run.platform == "cpu" and run.exitstatus == 1 and run.torch and run.kvconform
    (junit_run,) = from_junit.runs  # the JUnit alone says what the run ran on (suite properties)
    assert (junit_run.torch, junit_run.vllm, junit_run.device) == (run.torch, run.vllm, run.device)
    failing = {t.nodeid: t.details for t in from_json.tests if t.outcome in ("failed", "error")}
    assert "[gw" not in "".join(failing.values())  # xdist's worker banner is not part of a failure's text
    assert any("loaded bytes differ" in details for details in failing.values())


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_public_apis_only_junit_has_no_run_properties_and_the_same_tests(pytester, workers):
    """The fallback of junitxml's private stash key (``private_apis.PRIVATE_USES``): the tests read the same."""
    _session(pytester, "-p", "kvconform.conformance.plugin.results_json", "--kvconform-public-apis-only",
             "--kvconform-json", "out/results.json", "--junitxml", "out/junit.xml", *workers)
    junit = (pytester.path / "out/junit.xml").read_text()
    assert "kvconform.check" in junit and "kvconform.run." not in junit
    from_junit, _ = read(pytester.path / "out/junit.xml")
    _assert_identities(from_junit)
    (junit_run,) = from_junit.runs
    assert junit_run.platform == "cpu" and junit_run.torch is None  # the platform from the test ids
    (run,) = read(pytester.path / "out/results.json")[0].runs
    assert run.platform == "cpu" and run.torch  # results.json still says what the run ran on


def test_junit_of_a_session_without_kvconform_properties_is_parsed_from_ids(pytester):
    _session(pytester, "-p", "no:kvconform.conformance.plugin.results_json", "--junitxml", "out/junit.xml")
    junit = (pytester.path / "out/junit.xml").read_text()
    assert "kvconform.check" not in junit  # really the plain-pytest path
    results, _ = read(pytester.path / "out/junit.xml")
    _assert_identities(results)
    assert results.runs[0].platform == "cpu" and results.runs[0].torch is None


def test_suite_json_matches_the_documented_schema(pytester):
    jsonschema = pytest.importorskip("jsonschema")
    _session(pytester, "-p", "kvconform.conformance.plugin.results_json", "--kvconform-json", "out/results.json")
    data = json.loads((pytester.path / "out/results.json").read_text())
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert list(validator.iter_errors(data)) == []
    data["tests"][0]["outcome"] = "flaky"  # the schema is not vacuous: it rejects what the model never writes
    assert list(validator.iter_errors(data))
