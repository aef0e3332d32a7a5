"""A conformance run's process ends as soon as pytest and the exit handlers are done, with pytest's status.

Why: once pytest has returned and Python's exit handlers have run, the interpreter
still tears down everything vLLM, torch and the connectors loaded (module by
module, then the C++ libraries' destructors). In a one-connector run that was
2.2 s of 11.3 s, after the last result was written (``benchmarks/phase_probe.py``:
the first exit handler at 9.2 s, the process gone at 11.3 s). And NIXL's wheel
bundles a second copy of libnl whose destructor crashes there
(``benchmarks/HISTORY.md``: a serial run that had passed exited with -11).

So this module registers an exit handler when it is imported, with the plugin,
before vLLM and torch are: exit handlers run last-registered first, so it runs
after theirs and after pytest's own (the temporary folders' lock files). It flushes
logging and the standard streams and ends the process with the status pytest
returned. It does so only where the run collected conformance tests and pytest is
the process's program: started as ``pytest`` or ``python -m pytest``, or an xdist
worker (its controller has had every report by then, and waits for the worker to
end: NixlConnector's tests with ``-n 2`` took 29.3-30.1 s with the workers ending
so, 31.6-32.5 s without). An xdist controller collects nothing itself: it ends so
once a worker that collected conformance tests has ended (it said so in its
output); its teardown (execnet's threads, pytest's plugins, no vLLM) was 0.3 s
after its last worker was gone, a serial stretch at the end of every ``-n`` run.
``pytest.main()`` inside another program, and any other pytest run in this
environment, end as Python ends them.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path

import pytest

from kvconform.conformance.reliability.items import runs_conformance_tests

_CONFORMANCE_RUN_KEY = pytest.StashKey[bool]()
_WORKER_RAN_CONFORMANCE = "kvconform_ran_conformance_tests"  # in an xdist worker's output to its controller
_PYTEST_MAIN = Path(pytest.__file__).with_name("__main__.py")


class _ExitStatus:
    """The status to end with, set when pytest returns; None: end as Python does."""

    value: int | None = None


def _end_now() -> None:
    status = _ExitStatus.value
    if status is None:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to write to it
            pass
    os._exit(status)


atexit.register(_end_now)


def runs_as_the_program() -> bool:
    """``python -m pytest`` or the ``pytest`` script, not a host process that calls ``pytest.main()``."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    return (main_file is not None and Path(main_file).resolve() == _PYTEST_MAIN.resolve()) or \
        Path(sys.argv[0]).name in ("pytest", "py.test")


def pytest_collection_finish(session: pytest.Session) -> None:
    if runs_conformance_tests(session):
        session.config.stash[_CONFORMANCE_RUN_KEY] = True
        if hasattr(session.config, "workerinput"):  # tells the controller, which collects nothing itself
            session.config.workeroutput[_WORKER_RAN_CONFORMANCE] = True


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: a worker that ran conformance tests and ended makes this a conformance run here too."""
    if getattr(node, "workeroutput", {}).get(_WORKER_RAN_CONFORMANCE):
        node.config.stash[_CONFORMANCE_RUN_KEY] = True


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    # a run nested in this one (pytester) returns first; the outermost run's decision is the last word
    _ExitStatus.value = None
    status = yield
    if config.stash.get(_CONFORMANCE_RUN_KEY, False) and (hasattr(config, "workerinput") or runs_as_the_program()):
        _ExitStatus.value = int(status)
    return status
