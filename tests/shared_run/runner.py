"""One suite run for many self-tests: the runs the collected self-test modules declare, grouped as their profiles
allow (tests/shared_run/plan.py), each group run once per session under two xdist workers.

Why: a suite process pays vLLM's import, the suite's collection and its workers' start before its first test, and
a process per self-test module paid that two dozen times. The first self-test that needs a group's results runs
it, under a lock, in a folder every xdist worker of the project's tests shares (pytest's base temporary folder);
the others wait for and read the same results, a run that timed out included (each reader fails, none reruns
it). Each self-test sees only its own tests' outcomes (the ``selftest_runs`` property tests/shared_run/selection.py
records) and a status as its own run would have ended: 1 where one of its tests failed, 5 where it had none, the
group's own where the group run itself broke.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared_run import selection
from tests.shared_run.plan import SelfTestRun, declared, group_key, groups
from tests.suite_run import RUN_TIMEOUT_S, Outcome, outcome_of, run_suite_cases

WORKERS = 2
# the pair checks' bounds, halved (docs/reliability.md): the broken copies that never finish a transfer fail at the
# bound, each waiting it out while NIXL's progress threads poll; the correct connectors finish well inside it
WAIT_SCALE = 0.5
NO_TESTS = 5  # pytest's status for a run that collected nothing
SHARED_MEMORY = Path("/dev/shm")


@dataclass
class GroupResults:
    """What one group's run gave: its status and output, each run's outcomes, and the shared-memory segments
    (names under /dev/shm) it left that were not there before it."""

    status: int
    output: str
    outcomes: dict[str, list[Outcome]]
    shared_memory_left: set[str]


def _skipped(item: pytest.Item) -> bool:
    """Whether a mark skips ``item`` for certain: ``skip``, or ``skipif`` on a condition already True."""
    return any(mark.name == "skip" or (mark.name == "skipif" and mark.args and mark.args[0] is True)
               for mark in item.iter_markers())


def _shared_memory() -> set[str]:
    return {path.name for path in SHARED_MEMORY.iterdir()} if SHARED_MEMORY.is_dir() else set()


def _run_group(group: list[SelfTestRun], folder: Path) -> GroupResults:
    plan = folder / "plan.json"
    plan.write_text(json.dumps([run.as_json() for run in group], indent=1))
    connectors = dict.fromkeys(spec for run in group for spec in run.connectors)
    profiles = dict.fromkeys(path for run in group for path in run.profiles)
    args = ["-p", selection.__name__, f"{selection.OPTION}={plan}", "-n", str(WORKERS), "--kvconform-wait-scale",
            str(WAIT_SCALE),
            *(word for spec in connectors for word in ("--connector", spec)),
            *(word for path in profiles for word in ("--profiles", str(path)))]
    before = _shared_memory()
    # each run's own bound, two runs at a time
    status, cases, output = run_suite_cases(folder, args, RUN_TIMEOUT_S * math.ceil(len(group) / WORKERS))
    outcomes: dict[str, list[Outcome]] = {run.name: [] for run in group}
    for case in cases:
        for index in case.properties.get(selection.PROPERTY, "").split():
            outcomes[group[int(index)].name].append(outcome_of(case))
    return GroupResults(status, output, outcomes, _shared_memory() - before)


def _record(group: list[SelfTestRun], folder: Path) -> dict[str, object]:
    """What the group's run gave, as its results file holds it."""
    try:
        results = _run_group(group, folder)
    except subprocess.TimeoutExpired as exc:
        return {"timed_out": str(exc)}
    return {"status": results.status, "output": results.output,
            "outcomes": {name: [vars(o) for o in found] for name, found in results.outcomes.items()},
            "shared_memory_left": sorted(results.shared_memory_left)}


class SharedSuite:
    """The session's self-test runs; ``results(run)`` runs ``run``'s group on first use."""

    def __init__(self, runs: list[SelfTestRun], root: Path) -> None:
        self.runs, self.groups, self.root = runs, groups(runs), root
        self._done: dict[str, GroupResults] = {}

    @classmethod
    def of_session(cls, session: pytest.Session, tmp_path_factory: pytest.TempPathFactory) -> SharedSuite:
        """The runs of the collected modules that have a test to run here (NIXL's self-tests skip without it)."""
        modules = dict.fromkeys(item.module for item in session.items
                                if getattr(item, "module", None) is not None and not _skipped(item))
        base = tmp_path_factory.getbasetemp()
        # xdist: each worker's base folder sits in the run's own, which they share
        return cls(declared(modules), base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)

    def _declared(self, run: SelfTestRun) -> SelfTestRun:
        found = next((declared_run for declared_run in self.runs if declared_run == run), None)
        if found is None:
            raise LookupError(f"{run} is not declared by a collected module: make it a module constant")
        return found

    def group_results(self, run: SelfTestRun) -> GroupResults:
        """The results of the group ``run`` belongs to, run now unless a worker ran it already."""
        group = next(members for members in self.groups if run in members)
        key = group_key(group)
        if key not in self._done:
            folder = self.root / f"shared-suite-{key}"
            with open(self.root / f"shared-suite-{key}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                record = folder / "results.json"
                if not record.exists():
                    folder.mkdir(exist_ok=True)
                    record.write_text(json.dumps(_record(group, folder)))
                saved = json.loads(record.read_text())
            if "timed_out" in saved:
                raise TimeoutError(f"the shared self-test run in {folder} did not finish: {saved['timed_out']}")
            self._done[key] = GroupResults(
                saved["status"], saved["output"],
                {name: [Outcome(**o) for o in found] for name, found in saved["outcomes"].items()},
                set(saved["shared_memory_left"]))
        return self._done[key]

    def results(self, run: SelfTestRun) -> tuple[int, list[Outcome], str]:
        """``run``'s status, outcomes and output, as a run of its own would have given them."""
        named = self._declared(run)
        group = self.group_results(named)
        outcomes = group.outcomes[named.name]
        if group.status not in (0, 1):
            status = group.status
        elif not outcomes:
            status = NO_TESTS
        else:
            status = int(any(o.outcome in ("failed", "error") for o in outcomes))
        return status, outcomes, group.output
