"""Validates the workload check's command-line options (declared in ``options.py``) before collection.

``--kvconform-replay SPEC`` runs one workload exactly (the line a failure
prints); ``--kvconform-explore N`` turns the generated workloads from a small
budget seeded by each test's id into a deep Hypothesis search of N workloads
per connector, with shrinking. A malformed spec is one line and a non-zero
exit, before collection.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    text = config.getoption("kvconform_replay", default=None)
    if text is not None:
        from ..workload.spec import SpecError, WorkloadSpec

        try:
            WorkloadSpec.from_text(text)
        except (SpecError, TypeError) as exc:
            raise pytest.UsageError(f"--kvconform-replay: {exc}") from None
    if config.getoption("kvconform_explore", default=0) < 0:
        raise pytest.UsageError("--kvconform-explore: N must be 0 (the normal budget) or a positive count")
