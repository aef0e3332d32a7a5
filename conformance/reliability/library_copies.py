"""A library whose two copies crash a process at exit: found before the process ends, reported as the environment's.

Wheels bundle their own copies of shared libraries (``<package>.libs/<name>-<8 hex>.so``), so a process
often maps one library from two files, mostly harmlessly; those in ``EXIT_CLASHES`` clash in their
destructors at exit. NIXL's wheel bundles libnl, UCX loads the system's too where libibverbs is present,
and the process then ends with SIGSEGV in ``rtnl_tc_unregister`` after every result was written, with or
without kvconform. The harness leaves the exit to Python, as vLLM's processes do, so the crash still
shows in the exit status; this names its cause first, one line per library, in the terminal summary and
results.json (``runs[].environment_notes``), never as a test's failure. Read from ``/proc/self/maps`` in
every process that ran conformance tests (xdist workers tell their controller); elsewhere nothing is said.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .left_behind import runs_conformance_tests

MAPS = "/proc/self/maps"
# libnl-route-3-3ad497a3.so.200.26.0 (auditwheel's copy) and libnl-route-3.so.200.26.0 name one library
_LIBRARY = re.compile(r"^(?P<name>lib.+?)(?:-[0-9a-f]{8})?\.so(?:\.|$)")
# library -> what is known of the clash; a pair of copies of any other library is not reported
EXIT_CLASHES = {
    "libnl-route-3": "NIXL's wheel bundles libnl beside the system's, which libibverbs loads; the bundled copy's "
                     "destructor crashes in rtnl_tc_unregister",
}
# what every note says of the process's end (tests/suite_run.py reads a run's status by it)
MAY_CRASH_AT_EXIT = "so this process may end with SIGSEGV (-11) after every result is written"
_NOTES_KEY = pytest.StashKey[list[str]]()
_WORKER_OUTPUT = "kvconform_library_copies"


def loaded_libraries(maps: str) -> dict[str, set[str]]:
    """Library name -> the files it is mapped from, out of a ``/proc/<pid>/maps`` text."""
    found: dict[str, set[str]] = defaultdict(set)
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            match = _LIBRARY.match(Path(fields[5]).name)
            if match:
                found[match.group("name")].add(fields[5])
    return found


def copies_notes(maps: str) -> list[str]:
    """One line per library of ``EXIT_CLASHES`` mapped from more than one file."""
    return [f"environment: {name} is loaded from {len(files)} files ({', '.join(sorted(files))}): "
            f"{EXIT_CLASHES[name]}, {MAY_CRASH_AT_EXIT}; a packaging clash, not a connector's failure"
            for name, files in sorted(loaded_libraries(maps).items()) if len(files) > 1 and name in EXIT_CLASHES]


def _read_own_maps() -> list[str]:
    try:
        return copies_notes(Path(MAPS).read_text())
    except OSError:  # not Linux
        return []


def notes(config: pytest.Config) -> list[str]:
    """The lines found in this run's processes, once each."""
    noted: list[str] = config.stash.get(_NOTES_KEY, [])
    return list(dict.fromkeys(noted))


@pytest.hookimpl(tryfirst=True)  # before results.json is written (conformance/plugin/results_json.py: trylast)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if not runs_conformance_tests(session):
        return
    found = _read_own_maps()
    session.config.stash.setdefault(_NOTES_KEY, []).extend(found)
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput[_WORKER_OUTPUT] = found  # type: ignore[attr-defined]  # set by xdist


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:  # node: xdist's WorkerController
    """xdist controller: what a worker found in its own process."""
    found = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if found:
        node.config.stash.setdefault(_NOTES_KEY, []).extend(found)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    for line in notes(config):
        terminalreporter.write_line(f"kvconform: {line}", yellow=True)
