"""Results with connector coverage, built in code: the project tests of the coverage reports and the floor."""

from __future__ import annotations

from kvconform.reports.model import (
    CaseResult,
    ConnectorCoverage,
    MissingLines,
    ModuleCoverage,
    Results,
    RunInfo,
    build,
)

WORKER = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/worker.py"
BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"


def worker_module(missing: list[int] | None = None, branches: list[tuple[int, int]] | None = None) -> ModuleCoverage:
    """NIXL's worker, 20 statements and 4 branches, missing lines 30-32 (in one method) and 90 by default."""
    missing = [30, 31, 32, 90] if missing is None else missing
    branches = [(29, 30), (89, -12)] if branches is None else branches
    groups = [MissingLines(function="NixlConnectorWorker.register_kv_caches", lines=[n for n in missing if n < 50]),
              MissingLines(function="NixlConnectorWorker._cuda_only", lines=[n for n in missing if n >= 50])]
    return ModuleCoverage(path=WORKER, own=True, statements=20, covered_statements=20 - len(missing), branches=4,
                          covered_branches=4 - len(branches), missing=[g for g in groups if g.lines],
                          missing_branches=branches)


def shared_module() -> ModuleCoverage:
    return ModuleCoverage(path=BASE, own=False, statements=10, covered_statements=5, branches=0, covered_branches=0,
                          missing=[MissingLines(function="KVConnectorBase_V1.shutdown", lines=[40, 41, 42, 43, 44])])


def results(*entries: ConnectorCoverage, vllm: str = "0.32.0", platform: str = "cpu") -> Results:
    run = RunInfo(id=platform, platform=platform, vllm=vllm)
    test = CaseResult(run=platform, nodeid="conformance/test_contract.py::test_x[cpu-NixlConnector]",
                      check="contract", platform=platform, backend="-", connector="NixlConnector", outcome="passed")
    return build([run], [test], list(entries))


def nixl(*modules: ModuleCoverage, connector: str = "NixlConnector", platform: str = "cpu") -> ConnectorCoverage:
    return ConnectorCoverage(run=platform, platform=platform, connector=connector,
                             modules=list(modules) or [worker_module(), shared_module()])
