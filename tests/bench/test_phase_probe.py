"""benchmarks/phase_probe.py: the stages it prints, with the harness thread's share of the CPU."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

BUSY_TEST = """
import threading
import time

def _spin(seconds):
    end = time.thread_time() + seconds  # this thread's own CPU time
    while time.thread_time() < end:
        pass

def test_busy():
    helper = threading.Thread(target=_spin, args=(0.3,))  # CPU that is not the harness thread's
    helper.start()
    _spin(0.3)
    helper.join()
"""


def _probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, worker: str | None = None) -> list[str]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")])))
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    pytester.makepyfile(test_busy=BUSY_TEST)
    result = pytester.runpytest_subprocess("-p", "phase_probe", "-p", "no:kvconform", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    return [line for line in result.errlines if line.startswith("phase_probe")]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="the harness thread's figures come from Linux's "
                    "/proc/self/task/<tid>/schedstat")
def test_each_stage_splits_the_cpu_between_the_harness_thread_and_the_others(pytester, monkeypatch):
    lines = _probe(pytester, monkeypatch)
    finished = next(line for line in lines if "session finished" in line)
    figures = re.search(r"at +([\d.]+) s wall +([\d.]+) s CPU \(harness thread +([\d.]+) s, "
                        r"waited for a core +([\d.]+) s; other threads +([\d.]+) s\)", finished)
    assert figures, finished
    _wall, cpu, harness, _waited, others = map(float, figures.groups())
    assert harness >= 0.3  # the test's own loop ran on the harness thread
    assert others >= 0.2  # the helper thread's loop is counted apart from it
    assert abs(cpu - harness - others) < 0.05
    switches = next(line for line in lines if "context switches" in line)
    assert re.search(r"context switches: \d+ voluntary, \d+ involuntary \(preempted\)$", switches), switches


def test_an_xdist_workers_lines_name_it(pytester, monkeypatch):
    lines = _probe(pytester, monkeypatch, worker="gw3")
    assert lines and all(line.startswith("phase_probe[gw3]: ") for line in lines)
