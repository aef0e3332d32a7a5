"""What a run will do with each mutant, decided before any runs: settle some, run the rest.

Every mutant of the connector's own modules (``generate``), those on ``--changed-lines``'s lines where given;
the baseline (``reach``) says which tests reached each. A mutant no test that can fail reached is settled
``not_reached``; of the reached ones, those a mutation floor's row lists run, or ``--sample`` draws (by id, so the
same seed draws the same mutants of the same source, until the suite's reach changes); a mutant to run whose source
does not compile is settled ``not_viable``; the rest run.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from kvconform.reports.mutants import Mutant

from . import swap
from .generate import Candidate, candidates
from .places import SourceIndex
from .reach import BaselineRun, run_baseline
from .runner import Planned, bound
from .selection import on_changed_lines, sample
from .warm import OwnModule


@dataclass
class Plan:
    baseline: BaselineRun
    found: int  # mutants generated (on the changed lines, where given)
    to_run: list[Planned] = field(default_factory=list)
    settled: list[Mutant] = field(default_factory=list)  # not_reached and not_viable: nothing to run

    def summary(self) -> str:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.baseline.counts().items())) or "no test"
        reached = self.found - sum(m.fate == "not_reached" for m in self.settled)
        return (f"kvconform mutate: baseline {counts}; {self.found} mutants, {reached} reached by a test; "
                f"running {len(self.to_run)}")


def plan_run(own: list[OwnModule], suite_args: list[str], folder: Path, changed: dict[str, set[int]] | None,
             size: int | None, seed: int, listed: Collection[str] | None = None) -> Plan:
    """``listed``: the ids to run (a floor's row) instead of a draw of ``size`` with ``seed``."""
    sources = {m.file: Path(m.file).read_text(encoding="utf-8") for m in own}
    found: list[tuple[OwnModule, Candidate]] = []
    for module in own:
        made = candidates(sources[module.file], module.path)
        found += [(module, c) for c in (made if changed is None else on_changed_lines(made, changed))]
    baseline = run_baseline([m.file for m in own], suite_args, folder) if found else BaselineRun({}, {})
    plan = Plan(baseline, len(found))
    indexes = {m.file: SourceIndex(sources[m.file]) for m in own}
    reached = []
    for module, candidate in sorted(found, key=lambda pair: pair[1].id):
        place = indexes[module.file].place(candidate.line)
        tests = baseline.tests_for(module.file, place)
        planned = Planned(candidate, module.file, place, sources[module.file], tests,
                          bound(baseline.durations.get(t, 0.0) for t in tests))
        if tests:
            reached.append(planned)
        else:
            plan.settled.append(planned.record("not_reached"))
    chosen = sample(reached, size, seed) if listed is None else [p for p in reached if p.candidate.id in listed]
    for planned in chosen:
        why = swap.viable(planned.candidate.edit.apply(planned.source), planned.file)
        if why is None:
            plan.to_run.append(planned)
        else:
            plan.settled.append(planned.record("not_viable", why))
    return plan
