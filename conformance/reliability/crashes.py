"""A connector that kills the process fails one test, named; the run goes on.

Crash isolation is pytest-xdist's: run with ``-n 1`` (or more) and a worker that
dies is replaced. This plugin makes the controller's report say which connector
crashed and how the process ended (``killed by SIGSEGV``, ``exit status 3``).

A connector that crashed or hung in one test of a check will most likely do it
again in the next: each crash costs a fresh worker (seconds of vLLM import) and
each hang a full timeout. So every crash and timeout goes into a ledger (under xdist, a file
the controller and its workers share), and a later test of the same connector
and check is reported as not run, naming the first one; ``--kvconform-keep-going``
runs them anyway.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, TypedDict

import pytest

from kvconform.reports.identity import check_of, connector_in_nodeid, connector_of

from ..session.private_apis import public_only

LEDGER_INPUT_KEY = "kvconform_ledger"  # xdist workerinput: the ledger file's path


class LedgerEntry(TypedDict):
    nodeid: str
    connector: str | None
    what: str  # "crashed the test process", "timed out"


class Ledger:
    """Tests that crashed their process or timed out, in memory; under xdist also in a file all workers share."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._entries: list[LedgerEntry] = []

    def add(self, nodeid: str, connector: str | None, what: str) -> None:
        entry: LedgerEntry = {"nodeid": nodeid, "connector": connector, "what": what}
        if self.path is None:
            self._entries.append(entry)
            return
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")

    def entries(self) -> list[LedgerEntry]:
        if self.path is None:
            return list(self._entries)
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def share(self, config: pytest.Config) -> Path:
        """Move to a file workers can read (once, in the xdist controller); removed when the session ends."""
        if self.path is None:
            folder = Path(tempfile.mkdtemp(prefix="kvconform-ledger-"))
            config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
            self.path = folder / "ledger.jsonl"
            self.path.write_text("".join(json.dumps(entry) + "\n" for entry in self._entries))
        return self.path


_LEDGER_KEY = pytest.StashKey[Ledger]()
_ITEMS_BY_ID_KEY = pytest.StashKey[dict[str, pytest.Item]]()
_HELD_WRITTEN_KEY = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    shared = getattr(config, "workerinput", {}).get(LEDGER_INPUT_KEY)
    config.stash[_LEDGER_KEY] = Ledger(Path(shared) if shared else None)
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(CrashReporter(config), "kvconform-crash-reporter")


def pytest_report_header(config: pytest.Config) -> str:
    workers = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    if workers:
        return "kvconform: crash isolation on: a connector that crashes its worker fails that test; the run goes on"
    return "kvconform: crash isolation off: a connector that crashes the process ends the run (run with -n 1)"


def ended_by_watchdog_file(folder: Path, worker: str) -> Path:
    """Where the watchdog of worker ``worker`` (``watchdog.py``) records the test it ended, for the controller."""
    return folder / f"watchdog-{worker}.json"


def _ended_by_watchdog(folder: Path, worker: str) -> dict[str, Any] | None:
    """What worker ``worker``'s watchdog recorded of the test it ended, once (the record is consumed)."""
    path = ended_by_watchdog_file(folder, worker)
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return record


def _held_file(folder: Path, worker: str) -> Path:
    return folder / f"held-{worker}.json"


def record_held(config: pytest.Config, held: list[str]) -> None:
    """An xdist worker's tests whose results wait for their background shutdowns (``held_reports.py``), for the
    controller to report if the worker dies first; nothing outside xdist."""
    shared = getattr(config, "workerinput", {}).get(LEDGER_INPUT_KEY)
    if shared and config.stash.get(_HELD_WRITTEN_KEY, []) != held:
        worker = config.workerinput["workerid"]  # type: ignore[attr-defined]  # set by xdist
        _held_file(Path(shared).parent, worker).write_text(json.dumps(held))
        config.stash[_HELD_WRITTEN_KEY] = held


def record_stop(item: pytest.Item, what: str) -> None:
    """Put a test that stopped abnormally (``what``: "timed out", ...) in the ledger."""
    item.config.stash[_LEDGER_KEY].add(item.nodeid, connector_of(item).name, what)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A connector that crashed or hung in one test of a check: its other tests of that check are not run."""
    connector = connector_of(item)
    if connector is None or item.config.getoption("kvconform_keep_going"):
        return
    entries = item.config.stash[_LEDGER_KEY].entries()
    if not entries:
        return
    if _ITEMS_BY_ID_KEY not in item.config.stash:
        item.config.stash[_ITEMS_BY_ID_KEY] = {i.nodeid: i for i in item.session.items}
    by_id = item.config.stash[_ITEMS_BY_ID_KEY]
    check = check_of(item)
    for entry in entries:
        earlier = by_id.get(entry["nodeid"])
        if earlier is None or earlier is item:
            continue
        other = connector_of(earlier)
        if other is not None and other.name == connector.name and check_of(earlier) == check:
            pytest.fail(f"not run: {connector.name} {entry['what']} earlier in {entry['nodeid']}; its other "
                        f"{check} tests are not run (--kvconform-keep-going runs them)", pytrace=False)


# --- the xdist controller ---------------------------------------------------------------------


def how_it_ended(returncode: int | None) -> str | None:
    """``killed by SIGSEGV`` or ``exit status 3``, from a process's return code."""
    if returncode is None:
        return None
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _worker_returncode(node: Any) -> int | None:  # node: xdist's WorkerController
    """The dead worker's return code, when execnet still holds its process (a private detail, feature-tested:
    None if not; ``private_apis.PRIVATE_USES``)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    try:
        return popen.wait(timeout=5) if popen is not None else None
    except Exception:
        return None


class CrashReporter:
    """xdist controller: names the connector of a test whose worker died, and puts it in the ledger."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.endings: dict[str, str] = {}
        self.unsent: dict[str, tuple[Any, list[str]]] = {}  # a dead worker -> (its node, results it held)

    def _connector_names(self) -> list[str]:
        try:
            from ..connectors.selection import connector_params

            return [p.name for p in connector_params(self.config)]
        except Exception:
            return []

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:  # node: xdist's WorkerController
        node.workerinput[LEDGER_INPUT_KEY] = str(self.config.stash[_LEDGER_KEY].share(self.config))

    def _held_by(self, worker: str) -> list[str]:
        try:
            held: list[str] = json.loads(
                _held_file(self.config.stash[_LEDGER_KEY].share(self.config).parent, worker).read_text())
            return held
        except (OSError, ValueError):
            return []

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:  # node: xdist's WorkerController
        if not error:
            return
        worker = node.gateway.id
        returncode = None if public_only(self.config) else _worker_returncode(node)
        self.endings[worker] = how_it_ended(returncode) or str(error).strip().splitlines()[0]
        self.unsent[worker] = (node, self._held_by(worker))  # reported with its crashed test, or at the end

    def _report_unsent(self, worker: str, crashitem: str | None = None) -> list[str]:
        """Fail each test whose result the dead worker still held (all but ``crashitem``, reported as crashed)."""
        node, held = self.unsent.pop(worker, (None, []))
        names = self._connector_names()
        unsent = [nodeid for nodeid in held if nodeid != crashitem]
        for nodeid in unsent:
            connector = connector_in_nodeid(nodeid, names)
            report = pytest.TestReport(
                nodeid=nodeid, location=(nodeid.split("::")[0], None, nodeid), keywords={}, outcome="failed",
                when="teardown", longrepr=f"{connector or 'the code under test'}: pytest worker {worker} died "
                f"({self.endings[worker]}) while this test's connector shutdown was still running in the "
                f"background; its result was never sent")
            report.node = node  # type: ignore[attr-defined]  # as xdist's reports carry their worker
            self.config.hook.pytest_runtest_logreport(report=report)
        return unsent

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: object) -> None:
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
        connector = connector_in_nodeid(crashitem, self._connector_names())
        ending = self.endings.get(worker, "it died")
        unsent = self._report_unsent(worker, crashitem)
        also = (f"; its earlier test(s) {', '.join(unsent)} were still shutting their connectors down in the "
                f"background" if unsent else "")
        report.when = "call"  # the crash is this test's failure, not an error in some other phase
        ended = _ended_by_watchdog(self.config.stash[_LEDGER_KEY].share(self.config).parent, worker)
        if ended is not None and ended.get("nodeid") == crashitem:
            report.longrepr = watchdog_timeout(ended, worker, also)
            self.config.stash[_LEDGER_KEY].add(crashitem, connector, "timed out")
            return
        report.longrepr = (f"{connector or 'the code under test'} crashed the test process: pytest worker {worker} "
                           f"died while running {crashitem} ({ending}){also}; the run goes on in a fresh worker")
        self.config.stash[_LEDGER_KEY].add(crashitem, connector, "crashed the test process")

    @pytest.hookimpl(tryfirst=True)  # before the results and the summary are written
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for worker in list(self.unsent):  # a worker that died between tests
            self._report_unsent(worker)


def watchdog_timeout(ended: dict[str, Any], worker: str, also: str = "") -> str:
    """The failure of a test the watchdog ended: a timeout, as ``timeouts.py`` words one, then why and where."""
    stacks = ended.get("stacks") or "(no stacks were written)"
    return (f"{ended.get('connector')} did not finish the test within {float(ended['arm']):g} s (per-test timeout "
            f"{float(ended['limit']):g} s, then a grace; change it with --kvconform-timeout), and pytest-timeout "
            f"could not end it: it was stuck where no Python handler runs (native code holding the interpreter "
            f"lock, or signals ignored), so kvconform's watchdog killed pytest worker {worker}{also}; the run goes "
            f"on in a fresh worker. Where its threads were:\n{stacks}")
