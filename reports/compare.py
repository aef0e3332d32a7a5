"""``kvconform compare BEFORE AFTER``: two runs' outcomes side by side, test id by test id.

Two runs of the same suite that should agree (the suite installed from the wheel and from the
checkout; a vLLM release and the next) are compared by test id, the node id without the folder
it was collected from (``test_roundtrip.py::test_roundtrip[cpu-...]``), since one run may collect
the suite from site-packages and the other from a checkout. Every id whose outcomes differ is a
line, ``did not run`` where one run lacks it. Exit status: 0 when the runs agree, 1 when they
differ, 2 when an input cannot be read.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from kvconform.errors import UserError

from .model import Results
from .readers import ReportInputError, read_all

ABSENT = "did not run"


def suite_id(nodeid: str) -> str:
    """A test's id without the folder it was collected from: ``test_x.py::test_y[...]``."""
    file, sep, rest = nodeid.partition("::")
    return Path(file).name + sep + rest


def outcomes(results: Results) -> dict[str, list[str]]:
    """test id -> its outcomes, sorted (a test that fails and then errors in teardown has two)."""
    found: dict[str, list[str]] = defaultdict(list)
    for test in results.tests:
        found[suite_id(test.nodeid)].append(test.outcome)
    return {key: sorted(value) for key, value in found.items()}


def differences(before: dict[str, list[str]], after: dict[str, list[str]],
                labels: tuple[str, str] = ("before", "after")) -> list[str]:
    """One line per test id whose outcomes differ: ``id: before passed, after failed``."""
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old != new:
            lines.append(f"{key}: {labels[0]} {'/'.join(old) if old else ABSENT}, "
                         f"{labels[1]} {'/'.join(new) if new else ABSENT}")
    return lines


def read_outcomes(path: Path) -> dict[str, list[str]]:
    try:
        return outcomes(read_all([str(path)]))
    except ReportInputError as exc:
        raise UserError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, metavar="BEFORE", help="JUnit XML or kvconform JSON of one run")
    parser.add_argument("after", type=Path, metavar="AFTER", help="the run to compare with it")
    parser.add_argument("--labels", nargs=2, default=("before", "after"), metavar=("A", "B"),
                        help="what to call the two runs in each line (default: before after)")


def run(args: argparse.Namespace) -> int:
    before, after = read_outcomes(args.before), read_outcomes(args.after)
    lines = differences(before, after, tuple(args.labels))
    for line in lines:
        print(line)
    print(f"kvconform compare: {len(before.keys() | after.keys())} test ids, {len(lines)} differ "
          f"({args.labels[0]}: {args.before}, {args.labels[1]}: {args.after})")
    return 1 if lines else 0
