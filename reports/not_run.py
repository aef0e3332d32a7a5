"""Which skipped tests were not run because an earlier step of their connector failed.

A skip whose reason starts with ``not run: `` is no unmet need: the connector's check could not
start (it could not be constructed here, a failure its one construction test reports:
conformance/connectors/construction.py). The reports count those apart ("N not run" in a cell and
the totals, a NOT RUN badge, a table of their own before the skips), so a row of them never reads
like the ordinary skips of a connector that is simply not meant to run here.
"""

from __future__ import annotations

from .model import CaseResult

NOT_RUN_PREFIX = "not run: "
NOT_RUN_MARK = "NOT RUN"  # its badge in index.html, beside the outcomes' marks


def is_not_run(test: CaseResult) -> bool:
    """A skipped test whose check was not run because an earlier step of its connector failed."""
    reason = test.message.removeprefix(f"{test.connector}: ")
    return test.outcome == "skipped" and reason.startswith(NOT_RUN_PREFIX)
