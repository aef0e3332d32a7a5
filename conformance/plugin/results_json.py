"""The suite's own results as JSON: ``--kvconform-json PATH``, in the report's results format.

Each collected item is labelled with its identity (check, platform, backend,
connector, variant) through ``item.user_properties``: pytest copies those onto
every report, xdist carries reports to the controller, and JUnit writes them as
``<property>`` elements, so the controller (the only process that writes the
file) and ``kvconform report`` both read exact labels instead of parsing ids.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

from kvconform.reports import identity as ident
from kvconform.reports.model import CaseResult, Results, RunInfo, build, clip, failure_cause, first_line
from kvconform.reports.outcomes import OUTCOMES, is_failing
from kvconform.reports.readers import expected_from_properties

from ..session.private_apis import public_only
from ..session.target import TARGET_KEY, run_platform
from ..vllm_install import source as vllm_source
from ..vllm_install.versions import installed
from ..vllm_install.window import VLLM_DISTRIBUTIONS, installed_status
from .coverage import summary as coverage_summary

if TYPE_CHECKING:
    from kvconform.reports.outcomes import OutcomeName

_WORKER_KEY = "kvconform_results"


def _version(*dists: str) -> tuple[str | None, str | None]:
    """(version, distribution) of the first of ``dists`` that is installed; (None, None) when none is."""
    return installed(*dists) or (None, None)


def _vllm_commit() -> str | None:
    """vLLM's commit when this process already imported vLLM; never imports it (seconds, and not ours to pay)."""
    vllm = sys.modules.get("vllm")
    commit = getattr(vllm, "__commit__", None) if vllm is not None else None
    version_module = sys.modules.get("vllm._version")
    return commit or getattr(version_module, "__commit_id__", None)


def _longrepr_text(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The failure text without xdist's ``[gw0] linux -- Python ...`` line (``longreprtext`` adds it)."""
    return "" if report.longrepr is None else str(report.longrepr)


def _reason(report: pytest.TestReport) -> tuple[str, str]:
    """(one-line message, details) of a report that did not simply pass."""
    if getattr(report, "wasxfail", None):
        return first_line(report.wasxfail), clip(_longrepr_text(report)) if report.skipped else ""
    if report.skipped and isinstance(report.longrepr, tuple):
        return first_line(str(report.longrepr[2]).removeprefix("Skipped: ")), ""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = _longrepr_text(report)
    return first_line(crash.message if crash is not None else text), clip(text)


class _Collector:
    """Controller side: phase reports per test, turned into one result per test at the end."""

    def __init__(self, config: pytest.Config, path: Path | None):
        self.config = config
        self.path = path
        self.started = datetime.now(timezone.utc)
        self.clock = time.monotonic()
        self.phases: dict[str, dict[str, tuple[str, pytest.TestReport]]] = {}
        self.collect_errors: dict[str, pytest.CollectReport] = {}
        self.worker_commits: set[str] = set()
        self.vllm_imports: list[dict[str, Any]] = []  # what each xdist worker imported as vLLM

    def add(self, report: pytest.TestReport) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category in OUTCOMES or category == "":
            self.phases.setdefault(report.nodeid, {})[report.when] = (category, report)

    def _result(self, nodeid: str, phases: dict[str, tuple[str, pytest.TestReport]], run: str) -> CaseResult:
        outcome, decisive = "error", None
        for when in ("setup", "call"):
            category, report = phases.get(when, ("", None))
            if category:
                outcome, decisive = category, report
                break
        teardown_category, teardown = phases.get("teardown", ("", None))
        if teardown_category == "error" and not is_failing(outcome):
            outcome, decisive = "error", teardown
        any_report = next(report for _, report in phases.values())
        properties = {str(name): str(value) for name, value in any_report.user_properties}
        identity = ident.from_test_name(nodeid.split("::")[-1], properties, self.platform)
        message, details = _reason(decisive) if decisive is not None and outcome != "passed" else ("", "")
        if decisive is None and outcome == "error":
            message = "no setup or call report was received for this test"
        cause, message = failure_cause(outcome, message)
        return CaseResult(
            run=run, nodeid=nodeid, check=identity.check, platform=identity.platform, backend=identity.backend,
            connector=identity.connector, variant=identity.variant, params=identity.params,
            outcome=cast("OutcomeName", outcome),  # a category of OUTCOMES (add), or "error"
            duration=round(sum(report.duration for _, report in phases.values()), 6),
            message=message, details=details, expected=expected_from_properties(properties), cause=cause,
        )

    def _collect_error(self, nodeid: str, report: pytest.CollectReport, run: str) -> CaseResult:
        return CaseResult(run=run, nodeid=nodeid, check="collection", platform=self.platform,
                          backend=ident.UNKNOWN, connector=ident.UNKNOWN, outcome="error",
                          message=first_line(_longrepr_text(report)), details=clip(_longrepr_text(report)))

    @property
    def platform(self) -> str:
        return run_platform(self.config) or ident.UNKNOWN

    def run_info(self, exitstatus: int) -> RunInfo:
        from ..reliability.library_copies import notes
        from .expectations import passing_as_dicts, stale_as_dicts
        from .preflight import mismatch_lines, waivers
        from .scheduler_option import notes as scheduler_notes

        commits = {c for c in (_vllm_commit(), *self.worker_commits) if c}
        return RunInfo.model_validate(dict(  # the expectations and imports as dicts: pydantic builds their models
            id=self.platform, **environment(self.config), vllm_commit=", ".join(sorted(commits)) or None,
            started=self.started.isoformat(timespec="seconds"), duration=round(time.monotonic() - self.clock, 3),
            exitstatus=int(exitstatus), stale_expectations=stale_as_dicts(self.config),
            passing_expectations=passing_as_dicts(self.config),
            environment_notes=[*waivers(), *notes(self.config), *scheduler_notes(self.config)],
            vllm_mismatches=mismatch_lines(self.config),
            vllm_imports=[*filter(None, [vllm_source.imported("controller")]), *self.vllm_imports],
        ))

    # hooks: this object is registered as a plugin of the controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.add(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # under xdist every worker sends the same error: keyed by node id
            self.collect_errors[report.nodeid] = report

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:  # node: xdist's WorkerController (no types)
        output = getattr(node, "workeroutput", {}).get(_WORKER_KEY, {})
        if output.get("vllm_commit"):
            self.worker_commits.add(output["vllm_commit"])
        if output.get("vllm_import"):
            self.vllm_imports.append(output["vllm_import"])

    @pytest.hookimpl(trylast=True)  # after other plugins (expectations) settled the exit status
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.path is not None:  # None: collected for the summary only (--kvconform-details)
            self.write(self.path, session.exitstatus)

    def results(self, exitstatus: int) -> Results:
        run = self.run_info(exitstatus)
        tests = [self._collect_error(n, r, run.id) for n, r in self.collect_errors.items()]
        tests += [self._result(nodeid, phases, run.id) for nodeid, phases in self.phases.items()]
        return build([run], tests, coverage_summary(self.config))

    def write(self, path: Path, exitstatus: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.results(exitstatus).to_json(), indent=2) + "\n")


def _device_name(config: pytest.Config) -> str | None:
    target = config.stash.get(TARGET_KEY, None)
    if target is None:
        return None
    try:
        return target.platform.device_name(0)
    except Exception as exc:  # a device that cannot be named is reported, not fatal
        return f"unknown ({type(exc).__name__})"


def environment(config: pytest.Config) -> dict[str, str | None]:
    """What the run ran on: the ``RunInfo`` fields known at the start (``ident.RUN_FIELDS``)."""
    vllm, vllm_package = _version(*VLLM_DISTRIBUTIONS)
    status = installed_status()
    return {"platform": run_platform(config) or ident.UNKNOWN, "kvconform": _version("kvconform")[0], "vllm": vllm,
            "vllm_package": vllm_package, "vllm_note": status.note if status else None, "torch": _version("torch")[0],
            "device": _device_name(config)}


_COLLECTOR_NAME = "kvconform-results-collector"


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("kvconform_json", default=None)
    details = config.getoption("kvconform_details", default=False)  # the summary lists findings (plugin/console.py)
    if (path or details) and not hasattr(config, "workerinput"):  # the controller (or the only process) collects
        config.pluginmanager.register(_Collector(config, config.invocation_params.dir / path if path else None),
                                      _COLLECTOR_NAME)


def run_results(config: pytest.Config, exitstatus: int) -> Results | None:
    """The run's results, where the controller collects them (``--kvconform-json``, ``--kvconform-details``)."""
    collector = config.pluginmanager.get_plugin(_COLLECTOR_NAME)
    return collector.results(exitstatus) if isinstance(collector, _Collector) else None


def pytest_unconfigure(config: pytest.Config) -> None:
    collector = config.pluginmanager.get_plugin(_COLLECTOR_NAME)
    if collector is not None:
        config.pluginmanager.unregister(collector)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Record what the run ran on as JUnit suite properties, so a report from JUnit alone can say it.

    JUnit is written by the controller; pytest has no public way to add suite
    properties from a plugin under xdist (``record_testsuite_property`` does not
    work there), so this uses junitxml's own stash key, where it has the shape
    pytest 8 and 9 give it (``private_apis.PRIVATE_USES``).
    """
    config = session.config
    if hasattr(config, "workerinput"):
        return
    junit = junit_writer(config)
    if junit is not None:
        for name, value in environment(config).items():
            if value is not None:
                junit.add_global_property(ident.RUN_PROPERTY_PREFIX + name, value)


class JUnitWriter(Protocol):
    """What kvconform uses of pytest's JUnit writer."""

    def add_global_property(self, name: str, value: object) -> None: ...


def junit_writer(config: pytest.Config) -> JUnitWriter | None:
    """pytest's JUnit writer of this run, if it writes one and has ``add_global_property`` (feature-tested: None
    where pytest moved it, and under ``--kvconform-public-apis-only``, so the JUnit file has no run properties)."""
    if public_only(config):
        return None
    try:
        from _pytest.junitxml import xml_key
    except ImportError:
        return None
    junit = config.stash.get(xml_key, None) if isinstance(xml_key, pytest.StashKey) else None
    return junit if callable(getattr(junit, "add_global_property", None)) else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    platform = run_platform(config) or ident.UNKNOWN
    for item in items:
        item.user_properties.extend(ident.from_item(item, platform).properties())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """xdist worker: tell the controller vLLM's commit and which vLLM it imported (known only here)."""
    config = session.config
    if hasattr(config, "workerinput"):
        worker = config.workerinput.get("workerid", "worker")
        config.workeroutput[_WORKER_KEY] = {"vllm_commit": _vllm_commit(),  # type: ignore[attr-defined]  # xdist's
                                            "vllm_import": vllm_source.imported(worker)}
