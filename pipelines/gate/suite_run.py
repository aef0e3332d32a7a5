"""The gate's conformance run over one tested vLLM: the pytest command, its results folder, its tests' results.

The run imports the suite's modules with ``--import-mode=append``, pytest's own
option. The overlay of the change's vLLM is first on ``PYTHONPATH``
(``tested_vllm``), and pytest's default mode, ``prepend``, puts each test
module's package root at ``sys.path[0]``: from an editable install that root is the
checkout, which holds no ``vllm/``, but from a wheel it is the site-packages folder
kvconform went into, which holds the installed vLLM wherever the two were installed
together (a venv, an image's system Python, ``--user`` beside a ``--user`` vLLM). That
folder would come before the overlay in the xdist worker (xdist starts it with the
controller's ``sys.path``) and in every engine process vLLM starts from the worker
(multiprocessing's spawn hands the child its parent's ``sys.path``; fork copies it).
``append`` adds the root only where ``sys.path`` lacks it, at its end, so the path of
every process stays as the interpreter built it, overlay first, however kvconform is
installed; test module names, and so test ids, are those of ``prepend`` (both derive
them from the package root), where ``importlib`` mode would rename them. The check
that every process imported the vLLM under test stays: a process that imports
another still ends the gate with no verdict.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.errors import UserError

from .held_run import OUT_FD, HeldRun
from .results import GateCase, read_results
from .tested_vllm import TestedVllm, read_imports

JUNIT_FILE = "junit.xml"  # the verdict is read from here
JSON_FILE = "results.json"  # the suite's own results, kept for ``kvconform report``
BASE_FOLDER = "base"  # --results DIR: the run over the change's base (where there is one) keeps its files here
IMPORT_MODE = "--import-mode=append"


def pytest_command(platform: str, connectors: list[str], results: Path, python: str = sys.executable,
                   keyword: str | None = None) -> list[str]:
    """The conformance run for ``connectors`` on ``platform``: an argument list, never a shell line.

    Connector names come from the checkout's factory; ``SuiteCommand`` glues them to
    their option (``--connector=NAME``), so they can never be read as an option themselves.
    One xdist worker, so a connector that crashes it fails its test and the run goes on.
    """
    command = SuiteCommand(platform, connectors, python=(python,), plugins=(NO_CACHE,),
                           options=(IMPORT_MODE,),  # the overlay stays first on sys.path however kvconform is installed
                           keyword=keyword, workers=1, report_skips=True, junitxml=results / JUNIT_FILE,
                           results_json=results / JSON_FILE)
    return command.argv()


def _terminal_look() -> tuple[list[str], dict[str, str]]:
    """pytest writes to a pipe the gate relays (``held_run``): the options and environment that give it the colours
    and line width it would have on the gate's terminal (none where the gate's output is no terminal either)."""
    if not os.isatty(OUT_FD):
        return [], {}
    try:
        return ["--color=yes"], {"COLUMNS": str(os.get_terminal_size(OUT_FD).columns)}
    except OSError:
        return ["--color=yes"], {}


@contextmanager
def _results_folder(chosen: Path | None) -> Iterator[Path]:
    """The folder the run writes to; a kept one loses its old results, so they are never judged twice."""
    if chosen is None:
        with tempfile.TemporaryDirectory(prefix="kvconform-gate-") as tmp:
            yield Path(tmp)
        return
    try:
        chosen.mkdir(parents=True, exist_ok=True)
        for name in (JUNIT_FILE, JSON_FILE):  # a base run's, from an earlier gate, would be read as this one's
            (chosen / name).unlink(missing_ok=True)
            (chosen / BASE_FOLDER / name).unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"--results {chosen}: cannot use it: {exc.strerror}") from None
    yield chosen.resolve()


def run_suite(vllm: TestedVllm, platform: str, connectors: list[str], kept: Path | None,
              keyword: str | None) -> tuple[list[GateCase] | None, int]:
    """Run the selected tests over ``vllm`` (results kept in ``kept``, if given): each test's result and the run's
    exit status."""
    with _results_folder(kept) as folder:
        # The results folder is the working directory: nothing from the checkout or
        # the caller's folder (conftest.py, pytest.ini, a vllm/ folder) can join the run.
        probing = vllm.start_probe(folder)
        command = pytest_command(platform, connectors, folder, vllm.python, keyword)
        options, env = _terminal_look()
        run = HeldRun([*command, *options], folder, {**vllm.env, **env})
        try:
            probe = vllm.probe_record(probing)
        except BaseException:
            run.stop()
            raise
        run.release()
        status = run.wait()
        if kept is None:  # pytest just named a file that is about to be removed
            print(f"kvconform gate: the {JUNIT_FILE} named above is temporary and removed when the gate ends; "
                  f"--results DIR keeps {JUNIT_FILE} and {JSON_FILE}", flush=True)
        results = read_results(folder / JUNIT_FILE, connectors, platform)
        if results:  # a failure from another vLLM would mislead as much as a pass
            vllm.verify(read_imports(folder / JSON_FILE), probe)
    return results, status
