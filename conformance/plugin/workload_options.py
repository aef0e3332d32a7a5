"""The workload check's command-line options (a plugin module the main plugin loads).

``--kvconform-replay SPEC`` runs one workload exactly (the line a failure
prints); ``--kvconform-explore N`` turns the generated workloads from a small,
derandomized budget into a deep random search of N workloads per connector,
with shrinking. A malformed spec is one line and a non-zero exit, before
collection.
"""

from __future__ import annotations

import pytest

NORMAL_EXAMPLES = 4  # generated workloads per connector and prefill mode in a normal run (fixed, derandomized)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvconform")
    group.addoption("--kvconform-replay", default=None, metavar="SPEC",
                    help="run test_workload_replay on this workload spec (the JSON line a workload failure prints)")
    group.addoption("--kvconform-explore", type=int, default=0, metavar="N",
                    help="generated workloads: search N random workloads per connector and shrink a failure "
                    f"(default: {NORMAL_EXAMPLES} fixed, derandomized ones, no shrinking)")


def pytest_configure(config: pytest.Config) -> None:
    text = config.getoption("kvconform_replay", default=None)
    if text is not None:
        from kvconform.conformance.workload.spec import SpecError, WorkloadSpec

        try:
            WorkloadSpec.from_text(text)
        except (SpecError, TypeError) as exc:
            raise pytest.UsageError(f"--kvconform-replay: {exc}") from None
    if config.getoption("kvconform_explore", default=0) < 0:
        raise pytest.UsageError("--kvconform-explore: N must be 0 (the normal budget) or a positive count")
