"""Where a pytest run's time goes outside the per-test figures: a plugin for measuring, not for CI.

JUnit and ``--durations`` time each test's phases and pytest's summary the session; what falls between
(collection, hooks around each test, the cyclic collector, unconfigure, interpreter exit) is wall time
nobody accounts for. At exit this prints to stderr (``phase_probe:``, ``phase_probe[gw0]:`` per xdist
worker) wall and CPU time at each stage, each test's whole protocol beside the sum of its phases, and
the collector's time per generation. Where ``/proc`` has them it adds the harness thread's own CPU, its
time runnable but waiting for a core and its context switches: what tells contention from work.

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p phase_probe --pyargs kvconform.conformance ...
"""

from __future__ import annotations

import atexit
import gc
import os
import resource
import sys
import threading
import time

import pytest

_T0 = time.monotonic()
_HARNESS_THREAD = f"/proc/self/task/{threading.get_native_id()}"  # the thread that imports the plugin runs pytest
_stages: list[tuple[str, float, float, tuple[float, float] | None]] = []
_gc_seconds = {0: 0.0, 1: 0.0, 2: 0.0}
_gc_passes = {0: 0, 1: 0, 2: 0}
_gc_started = [0.0]
_protocol = {"tests": 0, "seconds": 0.0}
_phases = {"setup": 0.0, "call": 0.0, "teardown": 0.0}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _harness_thread_s() -> tuple[float, float] | None:
    """The harness thread's CPU time and its time runnable but waiting for a core, or None without /proc."""
    try:
        with open(f"{_HARNESS_THREAD}/schedstat") as schedstat:
            on_cpu_ns, waiting_ns, _slices = schedstat.read().split()
    except (OSError, ValueError):
        return None
    return int(on_cpu_ns) / 1e9, int(waiting_ns) / 1e9


def _context_switches() -> str:
    try:
        with open(f"{_HARNESS_THREAD}/status") as status:
            fields = dict(line.split(":", 1) for line in status if "ctxt_switches" in line)
    except OSError:
        return "not available here"
    return (f"{fields['voluntary_ctxt_switches'].strip()} voluntary, "
            f"{fields['nonvoluntary_ctxt_switches'].strip()} involuntary (preempted)")


def _stage(name: str) -> None:
    _stages.append((name, time.monotonic() - _T0, _cpu_s(), _harness_thread_s()))


def _stage_line(name: str, wall: float, cpu: float, harness: tuple[float, float] | None) -> str:
    line = f"{name:20s} at {wall:8.2f} s wall {cpu:8.2f} s CPU"
    if harness is not None:
        on_cpu, waiting = harness
        others = max(cpu - on_cpu, 0.0)  # two clocks: never below zero
        line += f" (harness thread {on_cpu:7.2f} s, waited for a core {waiting:6.2f} s; other threads {others:7.2f} s)"
    return line


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        _gc_seconds[info["generation"]] += time.perf_counter() - _gc_started[0]
        _gc_passes[info["generation"]] += 1


gc.callbacks.append(_on_gc)
_stage("plugin imported")


def pytest_configure(config: pytest.Config) -> None:
    _stage("configure")


def pytest_collection_finish(session: pytest.Session) -> None:
    _stage("collection finished")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    started = time.perf_counter()
    yield
    _protocol["tests"] += 1
    _protocol["seconds"] += time.perf_counter() - started


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _phases[report.when] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stage("session finished")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _stage("unconfigure")
    atexit.register(_report)  # registered last, so it runs first among the exit handlers


def _report() -> None:
    _stage("exit handlers")
    lines = [_stage_line(*stage) for stage in _stages]
    phases = sum(_phases.values())
    lines.append(f"{_protocol['tests']} tests: {_protocol['seconds']:.2f} s in their whole protocol, "
                 f"{phases:.2f} s in their reported phases "
                 f"(setup {_phases['setup']:.2f}, call {_phases['call']:.2f}, teardown {_phases['teardown']:.2f})")
    lines.append("cyclic collector: " + ", ".join(
        f"generation {gen} {_gc_passes[gen]} passes {_gc_seconds[gen]:.2f} s" for gen in _gc_seconds))
    lines.append(f"harness thread context switches: {_context_switches()}")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    prefix = f"phase_probe[{worker}]" if worker else "phase_probe"
    print("\n".join(f"{prefix}: {line}" for line in lines), file=sys.stderr, flush=True)
