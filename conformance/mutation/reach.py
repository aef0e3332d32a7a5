"""The baseline: the suite once on the unchanged code, with each test's outcome and the lines each test ran.

It runs in a child forked from the warm parent, exactly as every mutant's tests will, so a test that cannot pass
that way never counts for a mutant. coverage.py measures the connector's own files, one dynamic context per test
(``suite_hooks.Baseline``). Only tests that passed, or failed exactly as their expectation says (xfailed), can
kill a mutant. A mutant inside a function counts as reached by the tests that ran its statement's head
(``places``); one at module or class level by every test that ran any line of its module (that code ran at
import, before any test, and every later use of the module sees it).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvconform.errors import UserError

from .children import Job, run_all
from .places import Place
from .suite_hooks import CAN_KILL, Baseline

BOUND_S = 3600.0  # the baseline's own bound: the connector's whole suite
NO_TEST = ""  # coverage.py's context for what ran outside any test


@dataclass
class BaselineRun:
    outcomes: dict[str, str]  # node id -> passed / failed / skipped / xfailed / xpassed
    durations: dict[str, float]  # node id -> seconds, every phase
    lines: dict[str, dict[int, set[str]]] = field(default_factory=dict)  # file -> line -> node ids that ran it

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.outcomes.values()))

    def tests_for(self, file: str, place: Place) -> list[str]:
        """The tests that can kill a mutant at ``place`` of ``file``, fastest first."""
        ran = self.lines.get(file, {})
        lines = ran.values() if place.swap is None else (ran.get(line, set()) for line in place.lines)
        reached = {nodeid for nodeids in lines for nodeid in nodeids if self.outcomes.get(nodeid) in CAN_KILL}
        return sorted(reached, key=lambda nodeid: (self.durations.get(nodeid, 0.0), nodeid))

    def to_json(self) -> dict[str, object]:
        return {"outcomes": self.outcomes, "durations": self.durations,
                "lines": {f: {str(n): sorted(ids) for n, ids in by_line.items()} for f, by_line in self.lines.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BaselineRun:
        lines = {f: {int(n): set(ids) for n, ids in by_line.items()} for f, by_line in data["lines"].items()}
        return cls(dict(data["outcomes"]), dict(data["durations"]), lines)


def _measure(files: list[str], suite_args: list[str], result: Path) -> None:
    """The child's work: the suite under coverage.py, each test its own context; the record as JSON."""
    import coverage
    import pytest

    measuring = coverage.Coverage(data_file=None, config_file=False, include=files)
    recorder = Baseline(measuring)
    measuring.start()
    try:
        status = pytest.main([f"--basetemp={result.parent / 'baseline-tmp'}", *suite_args], plugins=[recorder])
    finally:
        measuring.stop()
    data = measuring.get_data()
    lines = {}
    for file in data.measured_files():
        by_line = {n: {c for c in contexts if c != NO_TEST} for n, contexts in data.contexts_by_lineno(file).items()}
        lines[file] = {n: ids for n, ids in by_line.items() if ids}
    run = BaselineRun(recorder.outcomes, dict(recorder.durations), lines)
    result.write_text(json.dumps({"status": int(status), **run.to_json()}))


def run_baseline(files: list[str], suite_args: list[str], folder: Path) -> BaselineRun:
    """The baseline, in a forked child; a suite that cannot run (bad pytest arguments, nothing collected) is the
    user's error, with the end of pytest's output."""
    result, log = folder / "baseline.json", folder / "baseline.log"
    [ended] = run_all([Job("baseline", lambda: _measure(files, suite_args, result), BOUND_S, log)], parallel=1)
    if not result.is_file():
        how = "ran past its bound" if ended.timed_out else f"ended (status {ended.status}, signal {ended.signal})"
        raise UserError(f"the baseline run of the suite {how} without a result: {_tail(log)}")
    data = json.loads(result.read_text())
    status = data.pop("status")
    if status not in (0, 1):  # 1: some test failed, as expectations or a connector's bug may make them
        raise UserError(f"the baseline run of the suite could not run its tests (pytest exit status {status}): "
                        f"{_tail(log)}")
    return BaselineRun.from_json(data)


def _tail(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    return lines[-1] if lines else "no output"
