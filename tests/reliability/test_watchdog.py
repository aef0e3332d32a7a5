"""The watchdog process ends a test process stuck where no Python handler runs, and only such a process.

Each case runs a small Python process that starts kvconform's watchdog as the plugin does, arms it as for a
test, then deadlocks in native code holding the interpreter lock (a normal mutex locked twice through
``ctypes.PyDLL``): pytest-timeout's signal handler, its thread and Ctrl-C's KeyboardInterrupt would all wait
forever there. The process must be killed by the watchdog within its bound, with one line saying why and the
stuck frame in the recorded stacks; a Ctrl-C ends it within the grace; a process that disarms and exits is
left alone, and its watchdog leaves with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvconform.conformance.reliability.watchdog import hard_bound
from kvconform.conformance.reliability.watchdog_process import INTERRUPT_GRACE_S
from tests.load import stretched

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import ctypes, pathlib, sys
from kvconform.conformance.reliability.watchdog import Watchdog

folder = pathlib.Path(sys.argv[1])
watchdog = Watchdog((folder / "stacks.txt").open("w"), folder / "record.json")
watchdog.send({"arm": float(sys.argv[2]), "limit": 1.0, "nodeid": "test_x.py::test_stuck", "connector": "Stuck"})


def stuck_in_native_code():
    libc = ctypes.PyDLL(None)
    mutex = ctypes.create_string_buffer(64)
    libc.pthread_mutex_lock(mutex)
    print("stuck", flush=True)
    libc.pthread_mutex_lock(mutex)


if sys.argv[3] == "deadlock":
    stuck_in_native_code()
watchdog.send({"disarm": True})
watchdog.close()
print("done", flush=True)
"""


def _start(folder: Path, arm_s: float, what: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(arm_s), what], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _ended(child: subprocess.Popen[str], within_s: float) -> tuple[float, str, str]:
    start = time.monotonic()
    try:
        out, err = child.communicate(timeout=stretched(within_s))
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"the process was not ended within {stretched(within_s)} s: {out} {err}")
    return time.monotonic() - start, out, err


def test_a_native_deadlock_is_killed_at_its_bound_with_its_stacks(tmp_path):
    child = _start(tmp_path, 1.0, "deadlock")
    _, out, err = _ended(child, 15)
    assert child.returncode == -signal.SIGKILL, (child.returncode, out, err)
    assert "stuck" in out and "done" not in out
    assert "kvconform: watchdog: Stuck did not finish within 1 s in test_x.py::test_stuck" in err, err
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["nodeid"] == "test_x.py::test_stuck" and record["connector"] == "Stuck"
    assert "stuck_in_native_code" in record["stacks"], record["stacks"]


def test_ctrl_c_ends_a_stuck_process_within_the_grace(tmp_path):
    child = _start(tmp_path, 600.0, "deadlock")
    assert child.stdout is not None and child.stdout.readline().strip() == "stuck"
    time.sleep(0.5)  # the watchdog has read its arm line by now
    os.killpg(child.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    took, _, err = _ended(child, INTERRUPT_GRACE_S + 10)
    assert child.returncode == -signal.SIGKILL, (child.returncode, err)
    assert "interrupted (Ctrl-C)" in err and took < stretched(INTERRUPT_GRACE_S + 10)


def test_a_test_that_finishes_is_left_alone(tmp_path):
    child = _start(tmp_path, 1.0, "finish")
    _, out, err = _ended(child, 15)
    assert child.returncode == 0 and out.splitlines() == ["done"], (child.returncode, out, err)
    assert not (tmp_path / "record.json").exists() and "watchdog" not in err


def test_the_bound_gives_pytest_timeout_its_chance_first():
    assert hard_bound(1) == 6 and hard_bound(20) == 40 and hard_bound(300) == 330
