"""``--kvconform-coverage``: which of each connector's code its tests ran, measured per test process.

Each process that runs tests (the only one, or each xdist worker) starts coverage.py at configure time,
before vLLM is imported, and switches its context to a test's connector as the test sets up. A worker
sends its data to the controller when it ends (``workeroutput``, as ``results_json`` sends its facts);
the process that writes the results combines them and stores the per-connector summary in
``config.stash`` for ``results_json`` to write, and prints one line per connector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kvconform.reports import identity as ident

if TYPE_CHECKING:
    from coverage import Coverage

    from kvconform.reports.model import ConnectorCoverage

    from ..coverage.scope import Scope

_WORKER_KEY = "kvconform_coverage"
_MEASURING_KEY: pytest.StashKey[Coverage] = pytest.StashKey()
_SCOPE_KEY: pytest.StashKey[Scope] = pytest.StashKey()
_BLOBS_KEY = pytest.StashKey[list[bytes]]()  # xdist controller: what each worker measured
SUMMARY_KEY: pytest.StashKey[list[ConnectorCoverage]] = pytest.StashKey()  # the results' coverage section


def _on(config: pytest.Config) -> bool:
    return bool(config.getoption("kvconform_coverage", default=False))


def _is_controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no test, so it measures nothing and combines what its workers measured."""
    return not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"


def _scope(config: pytest.Config) -> Scope:
    """The files to measure for this run's connectors (third-party ones by their ``module:Class`` spec)."""
    from ..coverage.scope import Scope

    specs = [spec for spec in config.getoption("connector", default=[]) or [] if ":" in spec]
    return Scope({spec.rpartition(":")[2]: spec.partition(":")[0] for spec in specs})


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Start measuring before anything imports vLLM: a module's top level runs once, when it is imported."""
    if not _on(config):
        return
    try:
        from ..coverage import measure
    except ImportError as exc:  # coverage.py is a dependency, but an environment may have lost it
        raise pytest.UsageError(f"--kvconform-coverage needs coverage.py, which cannot be imported here: {exc} "
                                f"(pip install 'coverage>=7.6,<8')") from None
    scope = _scope(config)
    config.stash[_SCOPE_KEY] = scope
    if _is_controller(config):
        config.stash[_BLOBS_KEY] = []
    else:
        config.stash[_MEASURING_KEY] = measure.start(scope)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Attribute what runs from here on to this test's connector (its setup builds it)."""
    measuring = item.config.stash.get(_MEASURING_KEY, None)
    if measuring is not None:
        from ..coverage.measure import NO_CONNECTOR

        connector = ident.from_item(item, ident.UNKNOWN).connector
        measuring.switch_context(NO_CONNECTOR if connector == ident.UNKNOWN else connector)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController (no types)
    """Controller: keep what the worker measured (a worker that crashed sends nothing: its tests are lost)."""
    blob = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if blob and _BLOBS_KEY in node.config.stash:
        node.config.stash[_BLOBS_KEY].append(blob)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop measuring; a worker sends its data on, the process that writes results sums it up per connector."""
    config = session.config
    if not _on(config) or _SCOPE_KEY not in config.stash:
        return
    from ..coverage import measure

    measuring = config.stash.get(_MEASURING_KEY, None)
    if measuring is not None:
        measuring.stop()
    if hasattr(config, "workerinput"):
        if measuring is not None:
            config.workeroutput[_WORKER_KEY] = measuring.get_data().dumps()  # type: ignore[attr-defined]  # xdist's
        return
    if measuring is None:
        measuring = measure.new(config.stash[_SCOPE_KEY])
        blobs: list[bytes] = config.stash.get(_BLOBS_KEY, [])
        measure.combine(measuring, blobs)
    from ..session.target import run_platform

    platform = run_platform(config) or ident.UNKNOWN
    config.stash[SUMMARY_KEY] = measure.summarize(measuring, config.stash[_SCOPE_KEY], platform, platform)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None:
        return
    if not summary:
        terminalreporter.write_line("kvconform coverage: no test ran a connector's code")
        return
    from kvconform.reports.coverage import summary_line

    for connector in summary:
        terminalreporter.write_line(f"kvconform coverage: {summary_line(connector)}")


def summary(config: pytest.Config) -> list[ConnectorCoverage]:
    """The run's per-connector coverage (empty without ``--kvconform-coverage``), for the results file."""
    return config.stash.get(SUMMARY_KEY, [])
