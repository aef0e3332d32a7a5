"""Under xdist (-n 1), connectors that kill the process, deadlock, leak threads or litter cannot take the run down.

One suite run, two round-trip tests per connector: a segfault and an ``os._exit``
in ``start_load_kv`` (each crashes one worker; its other test is reported as not
run), a deadlock in native code that holds the interpreter lock (the watchdog ends
the worker: a timeout with the stacks; its other test not run), a leaked
non-daemon thread (an error naming it; the worker still exits), a
well-behaved thread (no error), writes outside the storage folder (an error naming
them), and the unmodified ExampleConnector, which must pass throughout.
"""

from __future__ import annotations

import os

import pytest

from kvconform.conformance.reliability.watchdog import hard_bound
from kvconform.reports.identity import connector_in_nodeid
from tests.load import stretched
from tests.reliability.suite import misbehaving, shared_run

CONNECTORS = ["ExampleConnector", "SegfaultLoadConnector", "ExitLoadConnector", "NativeDeadlockLoadConnector",
              "LeakyThreadConnector", "TidyThreadConnector", "LitteringConnector"]
TESTS = "test_roundtrip and not mla and not layout and not scenario and not other and (float32 or fp8)"
CRASHES = {"SegfaultLoadConnector": "killed by SIGSEGV", "ExitLoadConnector": "exit status 3"}
WELL_BEHAVED = ["ExampleConnector", "TidyThreadConnector"]
TIMEOUT_S = 20  # per test on a quiet machine, stretched by the load as the run starts (tests/load.py)


def _plan(folder):
    """ExampleConnector first, the crashers next, the rest after them: later tests show the run went on."""
    litter = folder / "litter"
    litter.mkdir()
    # a limit that bounds the deadlock's cost: pytest-timeout cannot end it, so the watchdog does, after a grace
    timeout = stretched(TIMEOUT_S)
    (folder / "timeout_s").write_text(str(timeout))
    args = ["-n", "1", "-k", TESTS, f"--kvconform-timeout={timeout}",
            "-o", f"kvconform_default_storage=LitteringConnector {litter} [0-9a-f]{{32}}",
            "--connector", "ExampleConnector", *misbehaving(*CONNECTORS[1:])]
    return args, {"KVCONFORM_LITTER_DIR": str(litter)}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return shared_run(tmp_path_factory, "crash-isolation", _plan)


@pytest.fixture
def crash_run(shared):
    return shared[0]


@pytest.fixture
def litter(shared):
    return shared[1] / "litter"


@pytest.fixture
def timeout_s(shared):
    return float((shared[1] / "timeout_s").read_text())


def test_the_run_finishes_and_fails(crash_run):
    assert crash_run.returncode == 1, crash_run.output[-3000:]
    assert {connector_in_nodeid(c.nodeid, CONNECTORS) for c in crash_run.cases} >= set(CONNECTORS), [
        c.nodeid for c in crash_run.cases]
    assert len(crash_run.cases) == 2 * len(CONNECTORS)


@pytest.mark.parametrize("name", WELL_BEHAVED)
def test_well_behaved_connectors_pass_after_the_crashes(crash_run, name):
    mine = crash_run.of(name)
    assert len(mine) == 2 and all(c.outcome == "passed" for c in mine), [(c.nodeid, c.message) for c in mine]
    first_crash = min(i for i, c in enumerate(crash_run.cases) if "crashed the test process:" in c.message)
    if name == "TidyThreadConnector":  # listed after the crashers: it ran in a replacement worker
        assert all(crash_run.cases.index(c) > first_crash for c in mine)


@pytest.mark.parametrize("name", list(CRASHES))
def test_a_crash_is_one_failure_naming_the_connector_and_the_rest_not_run(crash_run, name):
    crashed, not_run = sorted(crash_run.of(name), key=lambda c: "not run" in c.message)
    assert crashed.outcome == "failed", (crashed.nodeid, crashed.message)
    assert f"{name} crashed the test process: pytest worker" in crashed.message
    assert CRASHES[name] in crashed.message and crashed.nodeid.split("::")[-1] in crashed.message
    assert not_run.outcome == "error"
    assert f"not run: {name} crashed the test process earlier in " in not_run.message
    assert crashed.nodeid.split("::")[-1] in not_run.message


def test_leaked_threads_are_errors_naming_them(crash_run):
    mine = crash_run.of("LeakyThreadConnector")
    assert len(mine) == 2
    for case in mine:
        assert case.outcome == "error", (case.nodeid, case.message)
        assert "LeakyThreadConnector left 2 thread(s) running after the test" in case.message
        assert "'leaky-kv-poller' (non-daemon)" in case.message


def test_writes_outside_the_storage_folder_are_errors_naming_them(crash_run, litter):
    written = sorted(os.listdir(litter))
    assert written, "the littering connector wrote nothing: the check was not exercised"
    flagged = [c for c in crash_run.of("LitteringConnector")
               if "wrote outside its per-test storage folder" in c.message]
    assert flagged, [(c.nodeid, c.outcome, c.message[:300]) for c in crash_run.of("LitteringConnector")]
    named = " ".join(c.message for c in flagged)
    for name in written:
        assert os.path.join(str(litter), name) in named
    assert all(c.outcome == "error" for c in flagged)


def test_a_native_deadlock_is_a_timeout_with_its_stacks_and_the_rest_not_run(crash_run, timeout_s):
    name = "NativeDeadlockLoadConnector"
    ended, not_run = sorted(crash_run.of(name), key=lambda c: "not run" in c.message)
    assert ended.outcome == "failed", (ended.nodeid, ended.message)
    assert f"{name} did not finish the test within {hard_bound(timeout_s):g} s (per-test timeout {timeout_s:g} s" \
        in ended.message, ended.message[:1500]
    assert "pytest-timeout could not end it" in ended.message and "watchdog killed pytest worker" in ended.message
    assert "start_load_kv" in ended.message, ended.message  # the stacks: the deadlocked frame is named
    assert "crashed" not in ended.message
    assert not_run.outcome == "error"
    assert f"not run: {name} timed out earlier in " in not_run.message
