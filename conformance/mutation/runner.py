"""Each mutant's fate: its change swapped into a forked child of the warm parent, then the tests that reached it.

A mutant whose source does not compile is ``not_viable``; one that no test which can fail reached is
``not_reached`` (neither runs). The rest run in children, ``parallel`` at a time, each bounded by its tests'
baseline time (``bound``): past it the child is killed and the mutant ``timed_out``. In the child the first failure
ends pytest (``-x``): the mutant is ``killed`` by it; a child that dies (a crash in the connector's code, an exit)
kills it too; where every test passed it ``survived``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kvconform.errors import one_line
from kvconform.reports.mutants import Fate, Mutant

from . import swap
from .children import Ended, Job, run_all
from .generate import Candidate
from .places import Place
from .suite_hooks import MESSAGE_LIMIT, MutantTests

BOUND_FACTOR = 3.0  # times the baseline's time of the mutant's tests
BOUND_EXTRA_S = 30.0
BOUND_MIN_S = 60.0


def bound(durations: Iterable[float]) -> float:
    return max(BOUND_MIN_S, BOUND_FACTOR * sum(durations) + BOUND_EXTRA_S)


@dataclass(frozen=True)
class Planned:
    """A mutant ready to run: where it is, its mutated source, the tests that reached it, its bound."""

    candidate: Candidate
    file: str
    place: Place
    source: str  # the module's unchanged source
    tests: list[str]
    bound: float

    def record(self, fate: Fate, killed_by: str = "", duration: float = 0.0) -> Mutant:
        c = self.candidate
        return Mutant(id=c.id, module=c.module, function=self.place.function, line=c.line, operator=c.operator,
                      diff=c.diff(self.source), fate=fate, tests=len(self.tests),
                      killed_by=one_line(killed_by, MESSAGE_LIMIT), duration=round(duration, 3))


def _run_mutant(planned: Planned, module: ModuleType, live: swap.LiveFunctions, args: list[str],
                folder: Path) -> None:
    """The child's work: apply the change, run the tests, write what happened to ``result.json``."""
    from cosmic_ray.exceptions import CosmicRayTestingException  # type: ignore[import-untyped]

    # the exception cosmic-ray's ExceptionReplacer writes into an ``except``: defined, so the handler just misses
    builtins.CosmicRayTestingException = CosmicRayTestingException  # type: ignore[attr-defined]
    result = folder / "result.json"
    mutated = planned.candidate.edit.apply(planned.source)
    try:
        swap.apply(module, planned.file, mutated, planned.place.swap, live)
    except Exception as exc:  # the module's top level raised as it re-ran: every test of it would fail
        result.write_text(json.dumps({"failure": f"importing {planned.candidate.module} with the change: "
                                                 f"{type(exc).__name__}: {exc}"}))
        return
    import pytest

    hooks = MutantTests(planned.tests, folder / "current")
    status = int(pytest.main([f"--basetemp={folder / 'tmp'}", *args, "-x"], plugins=[hooks]))
    failure = hooks.failure
    if not failure and hooks.missing:
        failure = f"{hooks.missing[0]}: no longer collected"
    if not failure and status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        failure = f"pytest ended with exit status {status} ({pytest.ExitCode(status).name})"
    result.write_text(json.dumps({"failure": failure}))


def _read(path: Path) -> str:
    return path.read_text(errors="replace").strip() if path.is_file() else ""


def fate_of(planned: Planned, ended: Ended[int], folder: Path) -> Mutant:
    """The mutant's record from how its child ended and what it wrote."""
    current = _read(folder / "current")
    where = f" in {current}" if current else " before its first test"
    if ended.timed_out:
        return planned.record("timed_out", f"past its bound of {planned.bound:.0f} s{where}", ended.duration)
    result = folder / "result.json"
    if result.is_file():
        failure = json.loads(result.read_text())["failure"]
        return planned.record("killed" if failure else "survived", failure, ended.duration)
    if ended.signal is not None:
        how = f"died of {signal.Signals(ended.signal).name}"
    else:
        log = [line for line in _read(folder / "log").splitlines() if line.strip()]
        how = f"exited with status {ended.status}" + (f" ({log[-1]})" if log else "")
    return planned.record("killed", f"the test process {how}{where}", ended.duration)


def run_mutants(planned: list[Planned], modules: dict[str, ModuleType], live: swap.LiveFunctions,
                args: list[str], folder: Path, parallel: int,
                progress: Callable[[int, Mutant], None]) -> Iterator[Mutant]:
    """Run ``planned`` (all viable and reached), yielding each record as its child ends; ``progress`` is told
    each with its place in the order of ending."""
    def job(index: int) -> Job[int]:
        item, where = planned[index], folder / str(index)
        where.mkdir()
        return Job(index, lambda: _run_mutant(item, modules[item.file], live, args, where), item.bound,
                   where / "log")

    with contextlib.closing(run_all((job(i) for i in range(len(planned))), parallel)) as ended_children:
        for done, ended in enumerate(ended_children, 1):
            mutant = fate_of(planned[ended.key], ended, folder / str(ended.key))
            progress(done, mutant)
            yield mutant
