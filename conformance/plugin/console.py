"""What a conformance run prints: its own findings, not other packages' noise, and each failure's cause whole.

Only in a run that collects the conformance suite (``target.targets_conformance``); elsewhere it does nothing.
Warnings vLLM and torch raise about their own APIs, and pytest's warning about ``record_property`` under
xunit2 (the labels are written all the same), are filtered after the user's ini lines (``-W`` still wins).
A section before pytest's short summary gives each failing test's whole first line of its cause
(``reports.model.first_line``, the line the report and the gate show), which pytest cuts at the terminal's
width. The known findings (xfailed) and skips are counted in one line after it; ``--kvconform-details``
lists each finding once and the skip reasons grouped per connector x check instead (``kvconform report``'s
words, ``reports.render_terminal.details_lines``). ``pytest --platform=cpu`` in the checkout with no test
named says in one line how to run the suite.
"""

from __future__ import annotations

import warnings
from typing import Literal

import pytest

from kvconform.reports.model import first_line
from kvconform.reports.render_terminal import details_lines

from ..session.target import CONFORMANCE_DIR, PACKAGE, is_active, targets_conformance

# Warning filters for a conformance run, later ones winning: (action, message regex, category, module regex).
FilterAction = Literal["default", "error", "ignore", "always", "module", "once"]  # warnings.filterwarnings' actions
WARNING_FILTERS: tuple[tuple[FilterAction, str, type[Warning], str], ...] = (
    ("ignore", "", DeprecationWarning, ""),  # other packages' deprecations (torch.jit.script_method, ...)
    ("ignore", "", PendingDeprecationWarning, ""),
    ("default", "", DeprecationWarning, "kvconform"),  # kvconform's own still show
    # pytest writes the properties under every JUnit family; the reports read them (see above)
    ("ignore", "record_property is incompatible with junit_family", pytest.PytestWarning, ""),
)


def ini_line(action: str, message: str, category: type[Warning], module: str) -> str:
    """One filter in pytest's ``filterwarnings`` syntax."""
    return f"{action}:{message}:{category.__module__}.{category.__qualname__}:{module}"


SECTION = "kvconform: the cause of each failure (first line)"
DETAILS_SECTION = "kvconform: known findings and skip reasons"
_CAUSES_NAME = "kvconform-failure-causes"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if is_active(config) and not targets_conformance(config) and _collects_this_checkout(config):
        raise pytest.UsageError(f"kvconform: this would run the project's own tests, not the conformance suite: "
                                f"add --pyargs {PACKAGE}")
    if not targets_conformance(config):
        return
    for action, message, category, module in WARNING_FILTERS:
        # for the tests (pytest applies its ini filters around each phase of each test) ...
        config.addinivalue_line("filterwarnings", ini_line(action, message, category, module))
        # ... and for the rest of configuration, where the plugin imports the connectors (and so vLLM and torch):
        # pytest runs it in a warnings.catch_warnings() of its own, which drops this filter when it ends
        warnings.filterwarnings(action, message, category, module)
    if not hasattr(config, "workerinput"):  # the controller (or the only process) prints the summary
        config.pluginmanager.register(_Causes(), _CAUSES_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    causes = config.pluginmanager.get_plugin(_CAUSES_NAME)
    if causes is not None:
        config.pluginmanager.unregister(causes)


def _collects_this_checkout(config: pytest.Config) -> bool:
    """Whether pytest chose what to collect (no test named) in kvconform's own source checkout."""
    return (config.args_source != pytest.Config.ArgsSource.ARGS
            and config.rootpath == CONFORMANCE_DIR.parent and (config.rootpath / "tests").is_dir())


def _cause(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return first_line(crash.message if crash is not None else str(report.longrepr or "")) or "no message"


class _Causes:
    """Each failing test's cause as it is reported, printed whole before pytest's short summary."""

    def __init__(self) -> None:
        self.causes: dict[str, tuple[str, str]] = {}  # node id -> (FAILED | ERROR, first line of the cause)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.causes.setdefault(report.nodeid, ("FAILED" if report.when == "call" else "ERROR", _cause(report)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.causes.setdefault(report.nodeid, ("ERROR", _cause(report)))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, exitstatus: int,
                                config: pytest.Config) -> None:
        _findings_and_skips(terminalreporter, exitstatus, config)
        if not self.causes:
            return
        terminalreporter.section(SECTION)
        for nodeid, (word, cause) in self.causes.items():
            terminalreporter.write_line(f"{word} {nodeid}")
            terminalreporter.write_line(f"    {cause}")


def _findings_and_skips(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """``--kvconform-details``: each known finding and the skip reasons, grouped; else one line counting them."""
    if config.getoption("kvconform_details", default=False):
        from .results_json import run_results

        results = run_results(config, exitstatus)
        lines = details_lines(results) if results is not None else []
        if lines:
            terminalreporter.section(DETAILS_SECTION)
            for line in lines:
                terminalreporter.write_line(line)
        return
    counted = {word: len(terminalreporter.stats.get(word, [])) for word in ("xfailed", "skipped")}
    if any(counted.values()):
        terminalreporter.write_line(
            f"kvconform: {counted['xfailed']} xfailed (known findings), {counted['skipped']} skipped: "
            "--kvconform-details lists each finding and the skip reasons; kvconform report groups them per "
            "connector x check")
