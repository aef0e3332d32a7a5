"""benchmarks/suite_timing.py's readers: pytest's output, JUnit seconds, and the findings drawn from them."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys

import pytest

from tests.bench.conftest import benchmark_script


@pytest.fixture(scope="module")
def suite_timing():
    with benchmark_script("suite_timing.py") as module:
        yield module


PYTEST_OUTPUT = """\
........s.F
============================= slowest 3 durations ==============================
3.29s call     conformance/test_contract.py::test_contract_scheduler[cpu-CPU_ATTN-ExampleConnector]
0.61s setup    conformance/test_lint.py::test_lint[cpu-NixlPullConnector]
0.20s teardown conformance/test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float16]
=========================== short test summary info ============================
FAILED conformance/test_x.py::test_y - AssertionError: 3 passed
2 failed, 34 passed, 22 skipped, 1 deselected, 4 xfailed, 1 error, 3 warnings in 5.83s
"""


def test_it_reads_durations_and_the_final_counts(suite_timing):
    durations, counts = suite_timing.parse_output(PYTEST_OUTPUT)
    assert [(d["seconds"], d["phase"]) for d in durations] == [(3.29, "call"), (0.61, "setup"), (0.2, "teardown")]
    assert durations[0]["test"].endswith("test_contract_scheduler[cpu-CPU_ATTN-ExampleConnector]")
    assert counts == {"failed": 2, "passed": 34, "skipped": 22, "deselected": 1, "xfailed": 4, "error": 1,
                      "warning": 3}


def test_it_sums_junit_seconds_by_check_connector_and_outcome(suite_timing, tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text("""<testsuites><testsuite>
      <testcase name="a" time="1.5"><properties><property name="kvconform.check" value="roundtrip"/>
        <property name="kvconform.connector" value="ExampleConnector"/></properties></testcase>
      <testcase name="b" time="0.25"><properties><property name="kvconform.check" value="roundtrip"/>
        <property name="kvconform.connector" value="NixlConnector"/></properties><skipped message="nixl"/></testcase>
      <testcase name="c" time="0.5"><properties><property name="kvconform.check" value="lint"/>
        <property name="kvconform.connector" value="ExampleConnector"/></properties><failure message="x"/></testcase>
      <testcase name="d" time="0.125"/>
    </testsuite></testsuites>""")
    by_check, by_connector, by_outcome = suite_timing._junit_seconds(junit)
    assert by_check == {"roundtrip": 1.75, "lint": 0.5, "-": 0.12}
    assert list(by_check) == ["roundtrip", "lint", "-"], "largest first"
    assert by_connector == {"ExampleConnector": 2.0, "NixlConnector": 0.25, "-": 0.12}
    assert by_outcome == {"passed": 1.62, "failed": 0.5, "skipped": 0.25}


def _result(suite_timing, name, wall, target=None):
    return suite_timing.RunResult(name, "", [], wall, 0, target, [1.0, 1.0, 1.0], [2.0, 2.0, 2.0])


def test_findings_state_the_speedup_and_the_import_share(suite_timing):
    results = {"serial": _result(suite_timing, "serial", 40.0, 60.0), "xdist": _result(suite_timing, "xdist", 20.0)}
    notes = suite_timing.findings(results, import_s=8.0)
    assert "-n 2 is 2.00x serial" in notes
    assert "serial: vLLM import (8.0 s per process) is 20% of its 40.0 s wall time" in notes
    slow = suite_timing.findings({**results, "xdist": _result(suite_timing, "xdist", 30.0)}, import_s=8.0)
    assert "-n 2 is 1.33x serial" in slow


def test_findings_compare_the_serial_run_on_one_core(suite_timing):
    results = {"serial": _result(suite_timing, "serial", 36.0), "one-core": _result(suite_timing, "one-core", 34.0),
               "xdist": _result(suite_timing, "xdist", 20.0)}
    notes = suite_timing.findings(results, import_s=8.0)
    assert ("the serial run on one core took 34.0 s against 36.0 s on every core: a second core makes a serial "
            "run 0.94x as fast") in notes
    assert "-n 2 is 1.70x the serial run on one core" in notes


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores to tell one from all")
def test_the_one_core_run_and_every_thread_it_starts_use_one_core(suite_timing, tmp_path):
    """A real pytest run through ``run_suite``: its test sees one core, and so does a thread it starts."""
    (tmp_path / "test_cores.py").write_text(
        "import os, threading\n"
        "def test_cores():\n"
        "    seen = []\n"
        "    worker = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))\n"
        "    worker.start(); worker.join()\n"
        "    assert os.sched_getaffinity(0) == seen[0] == {max(os.sched_getaffinity(os.getppid()))}\n")
    for name, expected in (("one-core", "1 passed"), ("serial", "1 failed")):
        run = suite_timing.RUNS[name]
        probe = suite_timing.SuiteRun(name, run.doc, (str(tmp_path / "test_cores.py"), "-q", "-p", "no:cacheprovider",
                                                      "-p", "no:kvconform"), None, one_core=run.one_core)
        result = suite_timing.run_suite(probe, sys.executable, tmp_path, timeout=120)
        assert expected in result.tail, result.tail


def test_the_table_marks_targets(suite_timing):
    text = suite_timing.table({"gate": _result(suite_timing, "gate", 25.0, 20.0),
                               "serial": _result(suite_timing, "serial", 30.0, 60.0)})
    gate, serial = text.splitlines()[1:]
    assert gate.split()[:5] == ["gate", "25.0", "0.0", "<=", "20"] and " no " in gate
    assert " yes " in serial


def _results_json(path, outcomes):
    path.write_text(json.dumps({"format": "kvconform-results", "version": 1, "runs": [],
                                "tests": [{"nodeid": n, "outcome": o} for n, o in outcomes.items()]}))
    return path


def test_compare_passes_only_when_the_same_tests_have_the_same_outcomes(suite_timing, tmp_path, capsys):
    before = _results_json(tmp_path / "before.json", {"t::a": "passed", "t::b": "xfailed", "t::c": "skipped"})
    same = _results_json(tmp_path / "same.json", {"t::c": "skipped", "t::b": "xfailed", "t::a": "passed"})
    assert suite_timing.main(["--compare", str(before), str(same)]) == 0
    assert "same tests, same outcomes (3 tests)" in capsys.readouterr().out
    after = _results_json(tmp_path / "after.json", {"t::a": "passed", "t::b": "passed", "t::d": "passed"})
    assert suite_timing.main(["--compare", str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "outcomes differ: 1 changed, 1 only in" in out
    assert "changed t::b: xfailed -> passed" in out
    assert f"only in {before}: t::c" in out and f"only in {after}: t::d" in out


def test_compare_refuses_a_file_that_is_not_results_json(suite_timing, tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    assert suite_timing.main(["--compare", str(junk), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("suite_timing: --compare: ") and "not a kvconform results.json" in err
    assert "Traceback" not in err


def test_the_readme_table_states_the_speedup_and_cpu_time(suite_timing):
    serial = _result(suite_timing, "serial", 40.0, 45.0)
    serial.cpu_s = 55.0
    text = suite_timing.readme_table({"serial": serial, "xdist": _result(suite_timing, "xdist", 20.0),
                                      "gate": _result(suite_timing, "gate", 12.0, 10.0)})
    rows = text.splitlines()[2:]
    assert rows[0] == "| full CPU suite without the engine tier, serial | 40.0 s | 55.0 s | 1.0 / 2.0 | <= 45 s: met |"
    assert "| 20.0 s (2.00x) |" in rows[1] and rows[1].endswith("| - |")  # measured, no target
    assert rows[2].endswith("<= 10 s: **not met** |")


def test_an_unknown_run_is_a_usage_error(suite_timing, capsys):
    with pytest.raises(SystemExit) as exit_info:
        suite_timing.main(["--runs", "serial,nightly"])
    assert exit_info.value.code == 2
    assert "--runs: unknown run nightly" in capsys.readouterr().err


def test_connector_restricts_the_full_suite_runs_and_drops_their_targets(suite_timing):
    serial = suite_timing._restricted(suite_timing.RUNS["serial"], ["NixlConnector"])
    assert serial.args[-2:] == ("--connector", "NixlConnector") and serial.target_s is None
    assert "NixlConnector only" in serial.doc
    gate = suite_timing.RUNS["gate"]
    assert suite_timing._restricted(gate, ["NixlConnector"]) is gate, "the gate run is already one connector's"
    assert suite_timing._restricted(suite_timing.RUNS["xdist"], []) is suite_timing.RUNS["xdist"]


def test_the_readme_table_of_a_restricted_run_claims_no_target(suite_timing):
    serial = suite_timing._restricted(suite_timing.RUNS["serial"], ["NixlConnector"])
    result = suite_timing.RunResult("serial", serial.doc, [], 30.0, 0, serial.target_s, [1.0] * 3, [2.0] * 3)
    assert suite_timing.readme_table({"serial": result}).splitlines()[2].endswith("| 1.0 / 2.0 | - |")


@pytest.fixture(scope="module")
def probe_output():
    """What a -n 2 run prints, in phase_probe's own format (its ``_stage_line``), so the two cannot drift apart."""
    with benchmark_script("phase_probe.py") as probe:
        gc.callbacks.remove(probe._on_gc)  # it times this process's collector from its import on

        def process(prefix, collected, finished, voluntary, involuntary):
            return [f"{prefix}: {probe._stage_line('collection finished', 5.1, *collected)}",
                    f"{prefix}: {probe._stage_line('session finished', 21.5, *finished)}",
                    f"{prefix}: harness thread context switches: {voluntary} voluntary, {involuntary} involuntary "
                    "(preempted)"]

        return "\n".join(["166 passed, 1291 skipped, 73 xfailed in 22.00s",
                          *process("phase_probe[gw1]", (5.19, (5.19, 0.08)), (20.95, (13.87, 3.83)), 1833, 8932),
                          *process("phase_probe[gw0]", (5.17, (5.17, 0.07)), (19.69, (16.86, 3.47)), 2002, 9408),
                          f"phase_probe: {probe._stage_line('session finished', 22.3, 1.24, (0.78, 0.33))}",
                          "phase_probe: harness thread context switches: 6083 voluntary, 833 involuntary "
                          "(preempted)"])


def test_it_reads_each_test_process_from_phase_probe_and_leaves_the_controller_out(suite_timing, probe_output):
    gw0, gw1 = suite_timing.parse_probe(probe_output)
    assert gw0 == {"process": "gw0", "harness_before_tests_s": 5.17, "harness_in_tests_s": 11.69,
                   "waited_for_a_core_s": 3.47, "asleep_in_tests_s": 1.31, "other_threads_s": 2.83, "preempted": 9408}
    assert gw1["harness_in_tests_s"] == 8.68 and gw1["preempted"] == 8932
    assert suite_timing.parse_output(probe_output)[1] == {"passed": 166, "skipped": 1291, "xfailed": 73}
    assert suite_timing._tail(probe_output) == "166 passed, 1291 skipped, 73 xfailed in 22.00s"


def test_the_threads_table_puts_each_worker_beside_the_serial_run(suite_timing, probe_output):
    serial = _result(suite_timing, "serial", 30.0)
    serial.processes = [{"process": "process", "harness_before_tests_s": 5.46, "harness_in_tests_s": 20.26,
                         "waited_for_a_core_s": 2.02, "asleep_in_tests_s": 2.0, "other_threads_s": 19.23,
                         "preempted": 6262}]
    xdist = _result(suite_timing, "xdist", 22.0)
    xdist.processes = suite_timing.parse_probe(probe_output)
    rows = suite_timing.readme_threads_table({"serial": serial, "xdist": xdist}).splitlines()
    assert rows[0] == "| | serial | `-n 2`: gw0, gw1 |"
    assert rows[3] == "| harness thread's CPU in the tests | 20.3 s | 11.7 s, 8.7 s |"
    assert rows[6] == "| harness thread preempted (involuntary context switches) | 6,262 | 9,408, 8,932 |"
    assert suite_timing.readme_threads_table({"serial": _result(suite_timing, "serial", 30.0)}) == ""


@pytest.mark.parametrize(("speedups", "chosen"), [
    ([1.43, 1.50, 1.48, 1.34, 1.48], 2),  # sorted 1.34 1.43 1.48 1.48 1.50: the first 1.48
    ([1.2, 1.6], 0),  # an even count: the lower of the middle two
    ([None, 1.3, None], 1),  # a round without both runs has no speedup
    ([None, None], 1),  # none has one: the last round
])
def test_the_median_round_is_the_one_whose_speedup_is_the_median(suite_timing, speedups, chosen):
    assert suite_timing.median_round(speedups) == chosen


def test_rounds_report_every_speedup_and_show_the_median_round(suite_timing, tmp_path, monkeypatch, capsys):
    """Three rounds of serial and -n 2 (the runs faked: their walls are what the rounds compare)."""
    walls = iter([30.0, 20.0, 30.0, 24.0, 29.0, 19.0])  # 1.50x, 1.25x, 1.53x
    made = []

    def fake_run(run, python, scratch, timeout, results_dir):
        made.append(results_dir.name)
        return _result(suite_timing, run.name, next(walls), run.target_s)

    references = iter([0.2, 0.21, 0.3, 0.32, None, 0.19])  # the host slowed in round 2; round 3's serial: not taken
    monkeypatch.setattr(suite_timing, "run_suite", fake_run)
    monkeypatch.setattr(suite_timing, "host_reference_seconds", lambda python: next(references))
    monkeypatch.setattr(suite_timing, "vllm_import_seconds", lambda python: 5.0)
    out = tmp_path / "timing.json"
    status = suite_timing.main(["--runs", "serial,xdist", "--rounds", "3", "--json", str(out),
                                "--results-dir", str(tmp_path / "results")])
    assert status == 0
    assert made == ["round-1", "round-1", "round-2", "round-2", "round-3", "round-3"]
    doc = json.loads(out.read_text())
    assert [r["speedup"] for r in doc["rounds"]] == [1.5, 1.25, 1.526]
    assert [r["runs"]["xdist"]["host_reference_s"] for r in doc["rounds"]] == [0.21, 0.32, 0.19]
    assert doc["median_round"] == 1 and doc["runs"]["xdist"]["wall_s"] == 20.0
    assert doc["findings"][:4] == [
        "-n 2 against serial in 3 rounds: 1.50x, 1.25x, 1.53x; median 1.50x (round 1, whose runs the tables show)",
        "full CPU suite without the engine tier, serial: <= 60 s in 3 of 3 rounds (29.0-30.0 s)",
        "-n 2 against serial in 3 rounds: 1.25x-1.53x",
        "host reference loop before each run: 0.19-0.32 s (1.68x apart): the host's own speed moved that much"]
    printed = capsys.readouterr().out
    assert "| 20.0 s (1.50x) |" in printed
    assert ("| round | full CPU suite without the engine tier, serial | the same with `-n 2` "
            "| `-n 2` against serial |\n|---|---|---|---|\n"
            "| 1 | 30.0 s (0.20 s) | 20.0 s (0.21 s) | 1.50x |\n"
            "| 2 | 30.0 s (0.30 s) | 24.0 s (0.32 s) | 1.25x |\n"
            "| 3 | 29.0 s | 19.0 s (0.19 s) | 1.53x |") in printed


def test_the_host_reference_is_a_fresh_interpreter_timing_a_fixed_loop(suite_timing):
    seconds = suite_timing.host_reference_seconds(sys.executable)
    assert seconds is not None and 0.0 < seconds < 60.0
    assert suite_timing.host_reference_seconds(shutil.which("false")) is None  # ran, printed no figure


def test_an_interpreter_that_is_not_there_is_a_usage_error(suite_timing, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        suite_timing.main(["--python", str(tmp_path / "no-python"), "--runs", "gate"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--python: {tmp_path / 'no-python'} is not an interpreter this machine can run" in err
    assert "Traceback" not in err


def test_rounds_below_one_are_a_usage_error(suite_timing, capsys):
    with pytest.raises(SystemExit) as exit_info:
        suite_timing.main(["--rounds", "0"])
    assert exit_info.value.code == 2
    assert "--rounds: at least 1, not 0" in capsys.readouterr().err
