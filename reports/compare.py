"""``kvconform compare BEFORE AFTER``: two runs' outcomes side by side, test id by test id.

Two runs of the same suite that should agree (the suite installed from the wheel and from the
checkout; a vLLM release and the next) are compared by test id, the node id without the folder
it was collected from (``test_roundtrip.py::test_roundtrip[cpu-...]``), since one run may collect
the suite from site-packages and the other from a checkout. Every id whose outcomes differ is a
line, ``did not run`` where one run lacks it; the release report (``releases.py``) lists a changed cell's tests
with the same lines across several runs. Exit status: 0 when the runs agree, 1 when they
differ, 2 when an input cannot be read.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from kvconform.errors import UserError

from .model import CaseResult, Results
from .readers import ReportInputError, read_all

ABSENT = "did not run"


def suite_id(nodeid: str) -> str:
    """A test's id without the folder it was collected from: ``test_x.py::test_y[...]``."""
    file, sep, rest = nodeid.partition("::")
    return Path(file).name + sep + rest


def outcomes_of(tests: Iterable[CaseResult]) -> dict[str, list[str]]:
    """test id -> its outcomes, sorted (a test that fails and then errors in teardown has two)."""
    found: dict[str, list[str]] = defaultdict(list)
    for test in tests:
        found[suite_id(test.nodeid)].append(test.outcome)
    return {key: sorted(value) for key, value in found.items()}


def outcomes(results: Results) -> dict[str, list[str]]:
    return outcomes_of(results.tests)


def changed_ids(runs: Sequence[dict[str, list[str]]]) -> list[str]:
    """The test ids whose outcomes differ between any two of ``runs`` (absent from one included), sorted."""
    keys = set().union(*(run.keys() for run in runs))
    return sorted(key for key in keys if len({tuple(run.get(key, ())) for run in runs}) > 1)


def outcome_line(key: str, labelled: Sequence[tuple[str, list[str] | None]], absent: str = ABSENT) -> str:
    """``id: before passed, after failed``: a test id's outcomes in each labelled run, ``absent`` where it has none."""
    return f"{key}: " + ", ".join(f"{label} {'/'.join(found) if found else absent}" for label, found in labelled)


def differences(before: dict[str, list[str]], after: dict[str, list[str]],
                labels: tuple[str, str] = ("before", "after")) -> list[str]:
    """One line per test id whose outcomes differ: ``id: before passed, after failed``."""
    return [outcome_line(key, [(labels[0], before.get(key)), (labels[1], after.get(key))])
            for key in changed_ids([before, after])]


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
