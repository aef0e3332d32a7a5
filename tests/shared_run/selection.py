"""The pytest plugin that gives each connector of a shared self-test run its own selection.

Loaded into the suite's process by tests/shared_run/runner.py (``-p tests.shared_run.selection``) with the path of
a plan: the runs sharing the process, each a ``-k`` selection and the connectors it applies to. A test is kept
where some run selects it (its connector is one of the run's, or it has none, and the run's ``-k`` matches it), and
records which runs did as the ``selftest_runs`` property of its JUnit case; the rest are deselected, as ``-k``
deselects.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from tests.shared_run import keywords

OPTION = "--kvconform-selftest-plan"
PROPERTY = "selftest_runs"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(OPTION, metavar="PLAN", help="kvconform's own tests: the shared self-test run's plan (JSON)")


@functools.cache
def _label_patterns(labels: tuple[str, ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each label and the pattern of it in a test id's parameters, longest first (a label may end another)."""
    return tuple((label, re.compile(rf"(^|-){re.escape(label)}(@|-|]$)"))
                 for label in sorted(labels, key=len, reverse=True))


def connector_of(nodeid: str, labels: list[str]) -> str | None:
    """The one of ``labels`` a test id is parametrized with, a profile variant of it (``Name@variant``) included."""
    param_id = nodeid.partition("[")[2]
    return next((label for label, pattern in _label_patterns(tuple(labels))
                 if label in param_id and pattern.search(param_id)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    plan_path = config.getoption(OPTION)
    if not plan_path:
        return
    plan = json.loads(Path(plan_path).read_text())
    labels = sorted({label for run in plan for label in run["labels"]})
    runs_of = {label: [(index, run) for index, run in enumerate(plan) if label in run["labels"]] for label in labels}
    kept, deselected = [], []
    for item in items:
        connector = connector_of(item.nodeid, labels)
        names = keywords.lowered(keywords.item_names(item))
        selecting = [str(index) for index, run in (enumerate(plan) if connector is None else runs_of[connector])
                     if keywords.selects(run["select"], names)]
        if selecting:
            item.user_properties.append((PROPERTY, " ".join(selecting)))
            kept.append(item)
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
