"""fast_exit: a conformance run (and each of its xdist workers) ends with pytest's status once the exit handlers
ran, skipping the teardown of vLLM and torch; any other pytest run in the environment ends as Python ends it.

Each run loads a small plugin (written into the test's folder) that registers an exit handler after kvconform's
and keeps an object whose finalizer runs only when the interpreter tears its modules down; both leave a file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.load import stretched

REPO = Path(__file__).resolve().parents[2]
WITNESS_PLUGIN = '''
import atexit, os, pathlib
OUT = pathlib.Path(os.environ["KVCONFORM_EXIT_WITNESS"])
ROLE = os.environ.get("PYTEST_XDIST_WORKER", "main")  # the xdist controller is "main" too

def pytest_configure(config):
    atexit.register(lambda: (OUT / f"{ROLE}-exit-handler-ran").write_text("yes"))

class Finalized:
    path = str(OUT / f"{ROLE}-interpreter-teardown-ran")

    def __del__(self, _open=open):  # module globals may be gone by then: what it needs is bound here
        with _open(self.path, "w") as file:
            file.write("yes")

KEPT = Finalized()
'''
RUN_TIMEOUT_S = 300


def _run(tmp_path: Path, args: list[str]) -> tuple[int, set[str], str]:
    (tmp_path / "exit_witness.py").write_text(WITNESS_PLUGIN)
    out = tmp_path / "witness"
    out.mkdir()
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}  # this test's own worker's
    env = {**outer, "KVCONFORM_EXIT_WITNESS": str(out),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "exit_witness", "-p", "no:cacheprovider", "-q", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=stretched(RUN_TIMEOUT_S))
    return proc.returncode, {p.name for p in out.iterdir()}, proc.stdout + proc.stderr


@pytest.mark.parametrize("connector_spec,status", [
    ("ExampleConnector", 0),
    # the lint finds its hard-coded .cuda(): a failed run's status comes through
    ("tests.broken_connectors.example_broken:HardcodedCudaLoadConnector", 1),
])
def test_a_conformance_run_ends_with_pytests_status_after_the_exit_handlers(tmp_path, connector_spec, status):
    code, left, output = _run(tmp_path, ["--pyargs", "kvconform.conformance", "--platform=cpu", "-k", "test_lint",
                                         "--connector", connector_spec])
    assert code == status, output[-3000:]
    assert ("1 failed" if status else "1 passed") in output, output[-3000:]
    assert left == {"main-exit-handler-ran"}, (left, output[-2000:])


@pytest.mark.parametrize("connector_spec,status", [
    ("ExampleConnector", 0),
    ("tests.broken_connectors.example_broken:HardcodedCudaLoadConnector", 1),
])
def test_an_xdist_worker_of_a_conformance_run_and_its_controller_end_so_too(tmp_path, connector_spec, status):
    code, left, output = _run(tmp_path, ["--pyargs", "kvconform.conformance", "--platform=cpu", "-k", "test_lint",
                                         "--connector", connector_spec, "-n", "1"])
    assert code == status, output[-3000:]
    assert ("1 failed" if status else "1 passed") in output, output[-3000:]
    # the controller collects nothing itself: its worker's output says the run was a conformance run
    assert left == {"gw0-exit-handler-ran", "main-exit-handler-ran"}, (left, output[-2000:])


def test_the_controller_of_an_xdist_run_without_conformance_tests_ends_as_python_does(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    code, left, output = _run(tmp_path, ["test_plain.py", "-n", "1"])
    assert code == 0, output[-3000:]
    assert left == {"gw0-exit-handler-ran", "gw0-interpreter-teardown-ran", "main-exit-handler-ran",
                    "main-interpreter-teardown-ran"}, (left, output[-2000:])


def test_any_other_pytest_run_ends_as_python_ends_it(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    code, left, output = _run(tmp_path, ["test_plain.py"])
    assert code == 0, output[-3000:]
    assert left == {"main-exit-handler-ran", "main-interpreter-teardown-ran"}, (left, output[-2000:])
