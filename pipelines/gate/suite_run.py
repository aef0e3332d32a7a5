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

The run's own output (thousands of lines: progress, ``-rs``'s skip reasons, tracebacks)
goes to a log file the gate names (``pytest.log`` in ``--results DIR``, else a file
of its own in the system's temporary folder, kept after the gate ends, never in the
caller's folder); the gate prints its selection, a line per connector and the
verdict, with the failures' first lines (``printing``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.errors import UserError

from .held_run import HeldRun
from .results import GateCase, read_cannot_drive, read_results
from .tested_vllm import TestedVllm, read_imports

JUNIT_FILE = "junit.xml"  # the verdict is read from here
JSON_FILE = "results.json"  # the suite's own results, kept for ``kvconform report``
LOG_FILE = "pytest.log"  # --results DIR: the run's own output
BASE_FOLDER = "base"  # --results DIR: the run over the change's base (where there is one) keeps its files here
IMPORT_MODE = "--import-mode=append"


def suite_argv(platform: str, connectors: list[str], results: Path, python: str = sys.executable,
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


@dataclass(frozen=True)
class SuiteRun:
    """What a run gave: each test's result (None: no readable JUnit file), pytest's exit status, its log, and what
    of the tested vLLM kvconform cannot drive (the session's findings, a line each: the checks that need it did not
    run)."""

    results: list[GateCase] | None
    status: int
    log: Path
    cannot_drive: list[str] = field(default_factory=list)


@contextmanager
def _results_folder(chosen: Path | None) -> Iterator[tuple[Path, Path]]:
    """The folder the run writes to, and the file its output goes to; a kept folder loses its old results, so they
    are never judged twice. A temporary folder is removed when the run ends, its log is not."""
    if chosen is None:
        fd, log = tempfile.mkstemp(prefix="kvconform-gate-", suffix=".log")
        os.close(fd)
        with tempfile.TemporaryDirectory(prefix="kvconform-gate-") as tmp:
            yield Path(tmp), Path(log)
        return
    try:
        chosen.mkdir(parents=True, exist_ok=True)
        for name in (JUNIT_FILE, JSON_FILE):  # a base run's, from an earlier gate, would be read as this one's
            (chosen / name).unlink(missing_ok=True)
            (chosen / BASE_FOLDER / name).unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"--results {chosen}: cannot use it: {exc.strerror}") from None
    yield chosen.resolve(), chosen.resolve() / LOG_FILE


def run_suite(vllm: TestedVllm, platform: str, connectors: list[str], kept: Path | None,
              keyword: str | None) -> SuiteRun:
    """Run the selected tests over ``vllm`` (results kept in ``kept``, if given), its output into a log file the gate
    names as the run starts."""
    with _results_folder(kept) as (folder, log):
        # The results folder is the working directory: nothing from the checkout or
        # the caller's folder (conftest.py, pytest.ini, a vllm/ folder) can join the run.
        probing = vllm.start_probe(folder)
        command = suite_argv(platform, connectors, folder, vllm.python, keyword)
        try:
            output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise UserError(f"cannot write the run's log {log}: {exc.strerror}") from None
        try:
            run = HeldRun(command, folder, vllm.env, output)
            try:
                probe = vllm.probe_record(probing)
            except BaseException:
                run.stop()
                raise
            print(f"kvconform gate: running the tests; pytest's output goes to {log}", flush=True)
            run.release()
            status = run.wait()
        finally:
            os.close(output)
        kept_files = "" if kept is not None else (f" ({JUNIT_FILE} and {JSON_FILE} were temporary: --results DIR "
                                                  "keeps them)")
        print(f"kvconform gate: pytest exited with status {status}{kept_files}", flush=True)
        results = read_results(folder / JUNIT_FILE, connectors, platform)
        if results:  # a failure from another vLLM would mislead as much as a pass
            vllm.verify(read_imports(folder / JSON_FILE), probe)
        cannot_drive = read_cannot_drive(folder / JSON_FILE)
    return SuiteRun(results, status, log, cannot_drive)
