"""The expectations' pytest hooks: each conformance test gets the entry that decides it, and the run reports
what no test used.

Entries are loaded once per run (``session/expectation_loading.py``) and matched at collection
(``session/expectation_matching.py``). An xfail accepts only the failure it pins and is strict: a fixed bug
fails the run and names the entry to remove (on a vLLM kvconform's CI does not test, a note, failing only
under ``--kvconform-strict``). An entry no test of the whole suite's collection matched is reported as stale;
a narrowed run judges nothing. Under xdist the workers collect and send the entries they used to the
controller through ``workeroutput``; state lives in ``config.stash``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kvconform.reports import identity as ident

from ..session.expectation_loading import EXPECTATIONS_DIR, ExpectationError, load_expectations
from ..session.expectation_matching import Expectation, decide, holding_here
from ..session.target import run_platform
from ..vllm_install.window import installed_status

_WORKER_KEY = "kvconform_expectations"


@dataclass
class _State:
    expectations: list[Expectation]
    strict: bool
    whole_suite: bool  # the run collects everything it would unfiltered: only then can an entry be stale
    untested_vllm: str | None = None  # the installed vLLM's label when kvconform's CI does not test it
    decided: set[str] = field(default_factory=set)  # ``where`` of each entry that decided a test
    saw_conformance_tests: bool = False
    passing: dict[str, set[str]] = field(default_factory=dict)  # where -> tests its strict xfail let pass


def passing_note(expectation: Expectation) -> str:
    """On a vLLM kvconform's CI does not test, a strict xfail that passes is this note, not a failure."""
    return f"passes on this vLLM: the finding may be fixed; remove or narrow {expectation.where}"


_STATE = pytest.StashKey[_State]()
_ENTRY = pytest.StashKey[Expectation]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


# Options that collect fewer tests than the full suite for the platform. (``-k``, ``-m`` and
# ``--deselect`` act after this plugin matched the entries, so they narrow nothing here.)
NARROWING_OPTIONS = {"connector": "--connector", "attn_backend": "--attn-backend", "lf": "--last-failed"}


def _narrowing_arg(config: pytest.Config, arg: str) -> bool:
    """Whether a positional argument collects part of a folder: a node id, a file, a module."""
    if "::" in arg:
        return True
    path = Path(config.invocation_params.dir, arg)
    if path.exists():
        return path.is_file()
    if config.getoption("pyargs", default=False):
        try:
            spec = importlib.util.find_spec(arg)
        except (ImportError, ValueError):
            return False
        return spec is not None and spec.submodule_search_locations is None  # a module, not a package
    return False


def collects_whole_suite(config: pytest.Config) -> bool:
    """Whether this run collects every test it would unfiltered, so an unused entry is really stale.

    A run narrowed by ``--connector``, ``--attn-backend``, a file or a node id collects
    fewer tests, and an entry for the others is not stale there (CI group steps, the gate).
    """
    if any(config.getoption(name, default=None) for name in NARROWING_OPTIONS):
        return False
    return not any(_narrowing_arg(config, arg) for arg in config.args)


@pytest.hookimpl(trylast=True)  # after kvconform.conformance.plugin has resolved the run's platform
def pytest_configure(config: pytest.Config) -> None:
    paths = config.getoption("kvconform_expectations", default=[]) or [EXPECTATIONS_DIR]
    try:
        loaded = load_expectations(paths)
    except ExpectationError as exc:
        raise pytest.UsageError(str(exc)) from None
    status = installed_status()
    config.stash[_STATE] = _State(holding_here(loaded, run_platform(config)),
                                  bool(config.getoption("kvconform_strict", default=False)),
                                  collects_whole_suite(config), untested_vllm=status.note if status else None)


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: an entry for a deselected test is not stale
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(_STATE, None)
    platform = run_platform(config)
    if state is None or platform is None:
        return
    for item in items:
        if not ident.is_conformance(item):
            continue
        state.saw_conformance_tests = True
        expectation = decide(state.expectations, ident.from_item(item, platform), item.nodeid)
        if expectation is None:
            continue
        state.decided.add(expectation.where)
        item.stash[_ENTRY] = expectation
        item.user_properties.extend(expectation.properties())
        mark = expectation.mark()
        if mark is not None:
            item.add_marker(mark)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: sees the report after pytest's xfail handling
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """An xfail entry accepts only its own failure; a strict xfail that passes names the entry to remove.

    pytest's xfail turns any failure (setup errors too) into "xfailed". An entry pins the
    exception and message it expects, as ``xfail(raises=...)`` plus ``match``; another
    failure is reported as a failure that names the entry it did not match. On a vLLM
    kvconform's CI does not test, a pass is an XPASS carrying the note (``_note_passing``).
    """
    report = yield
    expectation = item.stash.get(_ENTRY, None)
    if expectation is None or expectation.entry.expect != "xfail":
        return report
    state = item.config.stash[_STATE]
    if hasattr(report, "wasxfail") and call.excinfo is not None:
        why = expectation.entry.mismatch(call.when, call.excinfo.value)
        if why is not None:
            del report.wasxfail
            report.outcome = "failed"
            report.longrepr = (f"not the expected failure of {expectation.where} "
                               f"({expectation.entry.finding_class}: {expectation.entry.reason}): {why}\n\n"
                               f"{report.longrepr}")
    elif (report.when == "call" and report.failed and isinstance(report.longrepr, str)
            and report.longrepr.startswith("[XPASS(strict)]")):
        if state.untested_vllm and not state.strict:
            _note_passing(state, expectation, item.nodeid, report)
        else:
            report.longrepr = (f"unexpectedly passing: remove the entry {expectation.where} "
                               f"(it expected: {expectation.entry.reason})")
    return report


def _note_passing(state: _State, expectation: Expectation, nodeid: str, report: pytest.TestReport) -> None:
    """Turn a strict XPASS into pytest's plain XPASS (a pass), its reason the note, and record it.

    A dev build or a release candidate may carry a fix of the finding, or the entry's range may
    be too wide: a person judges it, so the run says which entry to look at and stays green.
    """
    report.outcome = "passed"
    report.longrepr = None
    report.wasxfail = (f"{passing_note(expectation)} "
                       f"({state.untested_vllm}; it expected: {expectation.entry.reason})")
    state.passing.setdefault(expectation.where, set()).add(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController (no types)
    """xdist controller: merge what a worker's collection used."""
    state = node.config.stash.get(_STATE, None)
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if state is not None and sent:
        state.decided.update(sent["decided"])
        state.saw_conformance_tests |= sent["saw_conformance_tests"]
        for where, nodeids in sent["passing"].items():
            state.passing.setdefault(where, set()).update(nodeids)


def stale(config: pytest.Config) -> list[Expectation]:
    """Entries for this run's platform that decided no collected conformance test."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.saw_conformance_tests or not state.whole_suite:
        return []
    return [e for e in state.expectations if e.where not in state.decided]


def stale_as_dicts(config: pytest.Config) -> list[dict[str, str]]:
    return [{"where": e.where, "expect": e.entry.expect, "selector": e.selector()} for e in stale(config)]


def passing(config: pytest.Config) -> list[tuple[Expectation, list[str]]]:
    """Strict xfail entries whose tests passed on an untested vLLM (each with those tests), in file order."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return []
    return [(e, sorted(state.passing[e.where])) for e in state.expectations if e.where in state.passing]


def passing_as_dicts(config: pytest.Config) -> list[dict[str, Any]]:
    """``passing`` for results.json (``RunInfo.passing_expectations``)."""
    return [{"where": e.where, "selector": e.selector(), "note": passing_note(e), "tests": tests}
            for e, tests in passing(config)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if _is_worker(config):
        config.workeroutput[_WORKER_KEY] = {"decided": sorted(state.decided),  # type: ignore[attr-defined]  # xdist's
                                            "saw_conformance_tests": state.saw_conformance_tests,
                                            "passing": {where: sorted(ids) for where, ids in state.passing.items()}}
    elif state.strict and stale(config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _is_worker(config):
        return
    _summarize_passing(terminalreporter, config)
    _summarize_stale(terminalreporter, config)


def _summarize_passing(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    entries = passing(config)
    if not entries:
        return
    plural = "s" if len(entries) > 1 else ""
    terminalreporter.write_sep("=", f"kvconform: {len(entries)} expected failure{plural} passed on "
                                    f"{config.stash[_STATE].untested_vllm}", yellow=True)
    for e, tests in entries:
        terminalreporter.write_line(f"{passing_note(e)} ({e.selector()}; {len(tests)} test(s))")
    terminalreporter.write_line("--kvconform-strict makes such a pass fail the run, as on the releases CI tests")


def _summarize_stale(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    entries = stale(config)
    if not entries:
        return
    strict = config.stash[_STATE].strict
    plural = "s" if len(entries) > 1 else ""
    terminalreporter.write_sep("=", f"kvconform: {len(entries)} stale expectation{plural}",
                               red=strict, yellow=not strict)
    for e in entries:
        terminalreporter.write_line(f"{e.where}: {e.entry.expect} {e.selector()} matches no collected test; "
                                    f"remove the entry or fix its selectors")
    if strict:
        terminalreporter.write_line("--kvconform-strict: stale expectations fail this run")
