"""Where a conformance run's CPU goes, per check family and per thread: a plugin for measuring, not for CI.

``/usr/bin/time`` gives a run's wall, user and system time; it cannot say which checks or whose threads spend
them. This plugin takes, around each test's whole protocol, the process's ``getrusage`` (its threads and the
children it reaped: the engines), the CPU of its live children (the ranks' forkserver, whose ranks' time
``getrusage`` sees only when it is reaped at exit) and, from ``/proc/self/task``, each thread's own user and
system time, sampled every ``SAMPLE_S`` seconds so that threads a test starts and ends are seen before they go.
Threads are grouped by what they are: the harness thread (the one running pytest), Python threads by their
``threading`` name, native threads by their kernel name (``comm``: NIXL's and UCX's progress threads, torch's
OpenMP pool). At exit it prints per family (the test module) and per thread group: tests, wall, user, sys, and
the wall time the harness thread spent off a core (``harness waits``: asleep on a poll, a sleep or a connector's
timeout, or runnable but waiting for a core, which ``harness_runnable`` in the JSON gives apart); with
``FAMILY_COST_JSON=FILE`` it also writes each test's row (``FILE.<worker>`` under xdist).

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p family_cost --pyargs kvconform.conformance ...
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

SAMPLE_S = 0.2
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_HARNESS_TID = threading.get_native_id()


def _thread_times() -> dict[int, tuple[str, float, float]]:
    """Each live thread of this process: tid -> (kernel name, user s, system s)."""
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                raw = stat.read()
        except OSError:
            continue  # the thread ended between listing and reading
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        times[int(tid)] = (comm, int(fields[11]) * _TICK_S, int(fields[12]) * _TICK_S)
    return times


def _live_children_s() -> tuple[float, float]:
    """User and system time of this process's live children and what they reaped (the ranks' forkserver holds its
    ranks' time until it is reaped itself, at exit, which ``getrusage`` of this process sees only then)."""
    me, user, system = str(os.getpid()), 0.0, 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                raw = stat.read()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        if fields[1] == me:
            user += (int(fields[11]) + int(fields[13])) * _TICK_S
            system += (int(fields[12]) + int(fields[14])) * _TICK_S
    return user, system


def _harness_schedstat_s() -> tuple[float, float]:
    """The harness thread's time on a core, and its time runnable but waiting for one."""
    with open(f"/proc/self/task/{_HARNESS_TID}/schedstat") as schedstat:
        on_cpu_ns, runnable_ns, _slices = schedstat.read().split()
    return int(on_cpu_ns) / 1e9, int(runnable_ns) / 1e9


class ThreadLedger:
    """Per-thread CPU since ``start``, by thread group, with a sampler that sees short-lived threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: dict[int, tuple[float, float]] = {}
        self._last: dict[int, tuple[str, float, float]] = {}
        self._names: dict[int, str] = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._run, name="family_cost-sampler", daemon=True)
        self._sampler.start()

    def _group(self, tid: int, comm: str) -> str:
        if tid == _HARNESS_TID:
            return "harness thread"
        if tid == self._sampler.native_id:
            return "family_cost sampler"
        name = self._names.get(tid)
        return f"py:{name}" if name else f"native:{comm}"

    def sample(self) -> None:
        live = _thread_times()
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        with self._lock:
            self._names.update(names)
            for tid, (comm, user, system) in live.items():
                self._first.setdefault(tid, (0.0, 0.0))  # born during the test: all its time is the test's
                self._last[tid] = (comm, user, system)

    def start(self) -> None:
        """Begin a test: every live thread's present time is its zero; threads born later start at zero."""
        live = _thread_times()
        with self._lock:
            self._first = {tid: (user, system) for tid, (_, user, system) in live.items()}
            self._last = dict(live)
            self._names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}

    def finish(self) -> dict[str, list[float]]:
        """The test's CPU per thread group: group -> [user s, system s, threads]."""
        self.sample()
        groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        with self._lock:
            for tid, (comm, user, system) in self._last.items():
                first_user, first_system = self._first.get(tid, (0.0, 0.0))
                entry = groups[self._group(tid, comm)]
                entry[0] += user - first_user
                entry[1] += system - first_system
                entry[2] += 1
        return dict(groups)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()


def _usage() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


def _family(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def _connector(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return "-"
    for key in ("connector", "connector_name", "pair_connector"):
        value = callspec.params.get(key)
        if value is not None:
            return str(getattr(value, "name", value))
    return "-"


_ledger: ThreadLedger | None = None
_rows: list[dict[str, object]] = []


def pytest_configure(config: pytest.Config) -> None:
    global _ledger
    _ledger = ThreadLedger()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    assert _ledger is not None
    _ledger.start()
    user0, system0 = _usage()
    live_user0, live_system0 = _live_children_s()
    on_cpu0, runnable0 = _harness_schedstat_s()
    started = time.monotonic()
    yield
    wall = time.monotonic() - started
    user1, system1 = _usage()
    live_user1, live_system1 = _live_children_s()
    on_cpu1, runnable1 = _harness_schedstat_s()
    _rows.append({"test": item.nodeid, "family": _family(item), "connector": _connector(item), "wall": wall,
                  "user": user1 - user0, "sys": system1 - system0,
                  "live_children_user": live_user1 - live_user0, "live_children_sys": live_system1 - live_system0,
                  "harness_off_cpu": wall - (on_cpu1 - on_cpu0), "harness_runnable": runnable1 - runnable0,
                  "threads": _ledger.finish(),
                  "threads_alive_after": len(os.listdir("/proc/self/task"))})


def _sum(rows: list[dict[str, object]], key: str) -> float:
    return sum(float(row[key]) for row in rows)  # type: ignore[arg-type]


def _report() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    out = os.environ.get("FAMILY_COST_JSON")
    if out:
        Path(f"{out}.{worker}" if worker else out).write_text(json.dumps(_rows, indent=1))
    by_family: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in _rows:
        by_family[str(row["family"])].append(row)
    prefix = f"family_cost[{worker}]" if worker else "family_cost"
    lines = [f"{'family':34s} {'tests':>5s} {'wall':>8s} {'user':>8s} {'sys':>8s} {'harness waits':>13s} "
             f"{'live children user+sys':>22s}"]
    for family, rows in sorted(by_family.items(), key=lambda kv: -_sum(kv[1], "sys")):
        lines.append(f"{family:34s} {len(rows):5d} {_sum(rows, 'wall'):8.1f} {_sum(rows, 'user'):8.1f} "
                     f"{_sum(rows, 'sys'):8.1f} {_sum(rows, 'harness_off_cpu'):13.1f} "
                     f"{_sum(rows, 'live_children_user'):10.1f} {_sum(rows, 'live_children_sys'):11.1f}")
    threads: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in _rows:
        for group, (user, system, _count) in row["threads"].items():  # type: ignore[attr-defined]
            threads[group][0] += user
            threads[group][1] += system
    lines.append(f"{'thread group':34s} {'user':>8s} {'sys':>8s}")
    for group, (user, system) in sorted(threads.items(), key=lambda kv: -kv[1][1])[:15]:
        lines.append(f"{group:34s} {user:8.1f} {system:8.1f}")
    print("\n".join(f"{prefix}: {line}" for line in lines), file=sys.stderr, flush=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    atexit.register(_report)
