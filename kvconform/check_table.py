"""The table of conformance checks: every other list of checks derives from it.

A check is one column of the report. Its row says whether it runs the connector or only reads its source, which
key of a connector profile gates it (a profile lists ``roundtrip``; the ``load_failure`` tests run wherever it
does), and what it catches, in one line. Row order is column order: the order a connector meets the checks.

A leaf that imports nothing of kvconform, so that the profiles (``conformance``), the report's columns
(``reports``) and the PR gate's words (``pipelines``) all read the same rows; ``tests/install/test_check_table.py``
holds the suite's ``check`` markers, the profile file, docs/checks.md and the report's columns to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckRow:
    name: str
    static: bool  # reads the connector's source without running it
    gated_by: str  # the profile key that turns it on: its own name, or the check it rides on
    catches: str  # one line: what a failing cell of it means


CHECKS: tuple[CheckRow, ...] = (
    CheckRow("roundtrip", False, "roundtrip", "save then load through the connector, byte for byte"),
    CheckRow("load_failure", False, "roundtrip", "a failed load is reported, never silent"),
    CheckRow("shared_store", False, "roundtrip",
             "an engine of another configuration over the same store never gets this one's KV"),
    CheckRow("fill", False, "fill", "the connector fills the blocks it was asked to"),
    CheckRow("contract", False, "contract", "the connector API as vLLM's scheduler and worker call it"),
    CheckRow("scheduler_half", False, "contract",
             "the scheduler half in vLLM's Scheduler, its worker's reports fed back as vLLM's runner does"),
    CheckRow("lint", True, "lint", "device assumptions in the connector's source, found statically"),
    CheckRow("engine", False, "engine", "vLLM's engine end to end"),
    CheckRow("lifecycle", False, "lifecycle",
             "a wrapper forwards every engine-lifecycle hook to each child and carries their reports back"),
    CheckRow("workload", False, "workload", "server-like workloads through vLLM's scheduler"),
)

BY_NAME: dict[str, CheckRow] = {row.name: row for row in CHECKS}
COLUMN_ORDER: tuple[str, ...] = tuple(row.name for row in CHECKS)
STATIC_CHECKS: frozenset[str] = frozenset(row.name for row in CHECKS if row.static)
# the keys a profile's ``checks:`` may list: the checks that gate themselves
PROFILE_KEYS: tuple[str, ...] = tuple(row.name for row in CHECKS if row.gated_by == row.name)


def gate_of(check: str) -> str:
    """The profile key a test of ``check`` needs; a name the table lacks gates itself (a third party's check)."""
    row = BY_NAME.get(check)
    return row.gated_by if row is not None else check
