"""The outcomes a test can have, and how each is ranked and shown, as one table.

A matrix cell shows its most severe outcome: a failure anywhere in a cell must be
visible at a glance, and a known bug (xfailed) outranks a plain pass so a
connector with open issues never looks clean.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

OutcomeName = Literal["passed", "failed", "skipped", "xfailed", "xpassed", "error"]


@dataclass(frozen=True)
class Outcome:
    name: OutcomeName
    severity: int  # higher is worse; a cell takes its worst
    failing: bool  # makes the run red
    mark: str  # a plain-ASCII label (summary.md, index.html badges): no emoji, which many machines draw as boxes
    colour: str  # index.html cell background


# Keyed by plain str: callers look up names read from files, after checking they are known.
OUTCOMES: dict[str, Outcome] = {o.name: o for o in (
    Outcome("error", 6, True, "ERROR", "#e0707a"),
    Outcome("failed", 5, True, "FAIL", "#f08a8a"),
    Outcome("xpassed", 4, False, "XPASS", "#f5c26b"),
    Outcome("xfailed", 3, False, "XFAIL", "#f7e08c"),
    Outcome("passed", 2, False, "PASS", "#9ad89a"),
    Outcome("skipped", 1, False, "SKIP", "#d9d9d9"),
)}

# Worst first: the order of columns in counts and of sections in the summary.
ORDER: tuple[OutcomeName, ...] = tuple(o.name for o in sorted(OUTCOMES.values(), key=lambda o: -o.severity))


def worst(names: Iterable[OutcomeName]) -> OutcomeName:
    """The most severe of ``names`` (a cell's outcomes: at least one)."""
    return max(names, key=lambda n: OUTCOMES[n].severity)


def is_failing(name: str) -> bool:
    return name in OUTCOMES and OUTCOMES[name].failing
