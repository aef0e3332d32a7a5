"""benchmarks/family_cost.py: each test's CPU per family, and per thread group, the short-lived threads included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

SPINNING_TESTS = """
import threading
import time

def _spin(seconds):
    end = time.thread_time() + seconds  # this thread's own CPU time
    while time.thread_time() < end:
        pass

def test_harness_spins():
    _spin(0.3)

def test_a_short_lived_thread_spins():
    helper = threading.Thread(target=_spin, args=(0.5,), name="connector-progress")
    helper.start()
    helper.join()

def test_waits():
    time.sleep(0.4)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread figures come from Linux's "
                    "/proc/self/task/<tid>/stat")
def test_each_tests_cpu_goes_to_its_family_and_its_threads(pytester, monkeypatch, tmp_path):
    out = tmp_path / "cost.json"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAMILY_COST_JSON", str(out))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_spinning=SPINNING_TESTS)
    result = pytester.runpytest_subprocess("-p", "family_cost", "-p", "no:kvconform", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    rows = {row["test"].split("::")[1]: row for row in json.loads(out.read_text())}
    assert {row["family"] for row in rows.values()} == {"test_spinning"}

    def cpu(row: dict, group: str) -> float:  # the spin reads its thread's clock: system time as well as user
        user, system, _threads = row["threads"].get(group, (0.0, 0.0, 0))
        return float(user + system)

    harness = rows["test_harness_spins"]
    assert cpu(harness, "harness thread") >= 0.25
    assert harness["user"] + harness["sys"] >= 0.25

    helper = rows["test_a_short_lived_thread_spins"]
    assert cpu(helper, "py:connector-progress") >= 0.25  # sampled every 0.2 s: seen before it ended
    assert cpu(helper, "harness thread") < 0.2

    waiting = rows["test_waits"]
    assert waiting["harness_off_cpu"] >= 0.35 and waiting["user"] + waiting["sys"] < 0.2
    summary = [line for line in result.errlines if line.startswith("family_cost: test_spinning")]
    assert len(summary) == 1 and summary[0].split()[2] == "3", summary
