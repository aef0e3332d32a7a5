"""``kvconform gate --run``: the verdict, from the JUnit file of a real pytest run.

The conformance suite itself costs minutes (vLLM import, engine tests), so these
tests swap in a small suite whose behaviour per connector is set by an
environment variable; everything else (selection, platform claims, the pytest
subprocess, reading JUnit, the verdict and exit status) is the gate's own.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from tests.gate.vllm_checkout import CONNECTORS

from pipelines import gate_cli

EXAMPLE = f"{CONNECTORS}/v1/example_connector.py"

# Each connector's tests: "pass", "fail", "skip" (all skipped), "xfail" (a known bug, expected),
# "error" (a fixture breaks). A connector not listed gets no tests.
SUITE = textwrap.dedent('''
    import os
    import pytest

    BEHAVIOUR = dict(item.split("=") for item in os.environ["GATE_SUITE"].split(",") if item)

    @pytest.fixture
    def rig(connector):
        if BEHAVIOUR[connector] == "error":
            raise RuntimeError("the rig could not be built")

    @pytest.mark.parametrize("connector", list(BEHAVIOUR))
    @pytest.mark.parametrize("dtype", ["float16", "float32"])
    def test_roundtrip(rig, connector, dtype):
        behaviour = BEHAVIOUR[connector]
        if behaviour == "skip":
            pytest.skip(f"{connector} needs a package that is not installed")
        if behaviour == "xfail":
            pytest.xfail("known bug: vLLM issue 1234")
        assert behaviour != "fail", "loaded bytes differ from the saved ones"

    def test_platform_facts():
        pass
''')


@pytest.fixture
def small_suite(tmp_path, monkeypatch):
    """Point the gate's pytest run at the small suite; returns a list of the commands it built."""
    suite = tmp_path / "suite" / "test_small_suite.py"
    suite.parent.mkdir()
    suite.write_text(SUITE)
    built = []
    real_command = gate_cli.pytest_command

    def command(platform: str, connectors: list[str], results: Path) -> list[str]:
        real = real_command(platform, connectors, results)
        built.append(real)
        return [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider",
                "-q", *[word for word in real if word.startswith("--junitxml=")]]

    monkeypatch.setattr(gate_cli, "pytest_command", command)
    # no installed plugins in the small run: kvconform's would probe accelerators and import torch
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return built


def run_gate(gate, repo, head, monkeypatch, behaviour: str, *extra: str):
    monkeypatch.setenv("GATE_SUITE", behaviour)
    return gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--run", "--platform=cpu", *extra)


def test_passes_when_every_selected_test_passes_or_fails_as_expected(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=xfail")
    assert result.status == 0, result.out
    assert "kvconform gate: PASS: ExampleConnector, MultiConnector on cpu" in result.out
    [command] = small_suite
    assert "--connector=ExampleConnector" in command and "--connector=MultiConnector" in command
    assert "--platform=cpu" in command


def test_fails_with_the_failing_test_ids(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=fail,MultiConnector=pass")
    assert result.status == 1
    failing = [line.strip() for line in result.out.splitlines() if line.strip().startswith("FAILED ")]
    assert len(failing) == 2, result.out
    for line, dtype in zip(failing, ("float16", "float32")):
        # the JUnit class name is the suite's path below the run's folder: only its end is fixed
        assert line.endswith(f"test_small_suite::test_roundtrip[{dtype}-ExampleConnector]: "
                             "AssertionError: loaded bytes differ from the saved ones"), line


def test_a_broken_fixture_is_an_error(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=error")
    assert result.status == 1
    errors = [line.strip() for line in result.out.splitlines() if line.strip().startswith("ERROR ")]
    assert len(errors) == 2 and all("MultiConnector]" in line and "could not be built" in line for line in errors)


def test_a_connector_whose_every_test_skipped_fails_the_gate(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=skip")
    assert result.status == 1
    assert ("MultiConnector: every test skipped on cpu: "
            "MultiConnector needs a package that is not installed") in result.out
    assert "ExampleConnector:" not in result.out


def test_a_connector_with_no_tests_fails_the_gate(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass")
    assert result.status == 1
    assert "MultiConnector: no test ran on cpu" in result.out


def test_a_run_that_writes_no_results_fails(gate, vllm_repo, small_suite, monkeypatch, tmp_path):
    (tmp_path / "suite" / "test_small_suite.py").write_text("def broken(:\n")
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == 1
    assert "ERROR " in result.out or "wrote no results" in result.out


def test_kept_results_are_never_judged_twice(gate, vllm_repo, small_suite, monkeypatch, tmp_path):
    kept = tmp_path / "kept"
    head = vllm_repo.touch(EXAMPLE)
    first = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass",
                     "--results", str(kept))
    assert first.status == 0 and (kept / "junit.xml").is_file()
    (tmp_path / "suite" / "test_small_suite.py").write_text("import sys\nsys.exit(3)\n")
    second = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass",
                      "--results", str(kept))
    assert second.status == 1, second.out


def test_nothing_selected_runs_nothing(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch("README.md")
    result = run_gate(gate, vllm_repo, head, monkeypatch, "")
    assert result.status == 0
    assert "nothing to run" in result.out
    assert small_suite == []


def test_connectors_that_do_not_claim_the_platform_are_not_run_there(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(f"{CONNECTORS}/v1/moriio/moriio_common.py")  # MoRIIO claims rocm only
    result = run_gate(gate, vllm_repo, head, monkeypatch, "")
    assert result.status == 0
    assert "MoRIIOConnector claims rocm; not run on cpu" in result.out
    assert "nothing to run on cpu" in result.out
    assert small_suite == []


def test_the_real_command_is_an_argument_list_with_glued_values():
    command = gate_cli.pytest_command("cpu", ["ExampleConnector", "--rf", "$(touch pwned)"], Path("/r"))
    assert command[:5] == [sys.executable, "-m", "pytest", "--pyargs", "conformance"]
    assert "--connector=--rf" in command and "--connector=$(touch pwned)" in command
    assert "--rf" not in command and "--platform=cpu" in command
    assert "--junitxml=/r/junit.xml" in command and "--kvconform-json=/r/results.json" in command


@pytest.mark.parametrize("status", [2, 3, 4])
def test_an_interrupted_or_misused_pytest_fails_even_without_failing_tests(status):
    results = [gate_cli.TestResult("t::test_a[ExampleConnector]", "ExampleConnector", "passed")]
    assert gate_cli.judge(results, ["ExampleConnector"], "cpu", status) == [
        f"pytest exited with status {status} (see its output above)"]
    assert gate_cli.judge(results, ["ExampleConnector"], "cpu", 0) == []
