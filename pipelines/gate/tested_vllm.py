"""Which vLLM a ``gate --run`` tests, and the proof that the test processes imported it.

Three sources, chosen on the command line (``SOURCES``):

- the checkout (default): an overlay of the head commit's Python over the
  installed build's compiled parts (``overlay``), first on PYTHONPATH
  (and kept first by the run's import mode, ``suite_run``, however kvconform is installed);
- ``--vllm-python PATH``: a Python whose vLLM already is the change (a CI image
  built from the pull request), run as it is;
- ``--installed``: the vLLM installed beside kvconform, which is not the change;
  only on request, and every verdict says so.

The gate process itself never imports the change: a probe subprocess imports
vLLM with the run's environment (a checkout that does not import against the
installed build stops there: the test run, started beside the probe, is ended
unseen; ``held_run``), and afterwards every test process's own record
(results.json's ``vllm_imports``) must name the same vLLM and commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvconform.conformance.vllm_install.source import TOLD_COMMIT_ENV

from .overlay import InstalledBuild, build_overlay, compiled_changes, installed_build
from .repository import GateError

PROBE_TIMEOUT_S = 300
# Imports what every conformance test imports first; prints the process's record as JSON.
PROBE = """
import json, sys
try:
    import vllm
    import vllm.distributed.kv_transfer.kv_connector.factory
except BaseException as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}))
    sys.exit(0)
from kvconform.conformance.vllm_install.source import imported
print(json.dumps(imported("probe")))
"""


# A JSON object a process wrote (the probe's, or one of results.json's ``vllm_imports``, made by
# ``vllm_install/source.py``: ``imported``): read with ``.get``, since another process wrote it.
Record = dict[str, object]


class CannotTest(Exception):
    """The change cannot be tested with the vLLM at hand (a build is needed); one line, no verdict."""


class WrongVllm(Exception):
    """A test process imported another vLLM than the one under test; one line, no verdict."""


@dataclass(frozen=True)
class TestedVllm:
    """The vLLM a run tests: how to start its Python, and what each test process must report."""

    python: str
    env: dict[str, str]
    label: str  # said with every verdict
    expected_file: str | None = None  # vllm.__file__ every process must report (None: whatever the probe found)
    commit: str | None = None  # the commit the run is told to test; None when it tests no particular one
    build_must_match: bool = False  # vLLM's own build commit, when it records one, must be ``commit``

    def start_probe(self, cwd: Path) -> subprocess.Popen[str]:
        """Start importing vLLM as the run will (``probe_record`` reads what it found)."""
        try:
            return subprocess.Popen([self.python, "-c", PROBE], cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            raise CannotTest(f"{self.python} could not import vLLM: {exc}") from None

    def probe_record(self, probe: subprocess.Popen[str]) -> Record:
        """The started probe's record, or CannotTest with the import error."""
        try:
            stdout, stderr = probe.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            probe.kill()
            probe.communicate()
            raise CannotTest(f"{self.python} could not import vLLM: {exc}") from None
        lines = stdout.strip().splitlines()
        try:
            record = json.loads(lines[-1]) if lines else None
        except ValueError:
            record = None
        if not isinstance(record, dict):
            last = (stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            raise CannotTest(f"{self.python} could not run the import probe: {last}")
        if "error" in record:
            raise CannotTest(f"{self.label}: vLLM does not import: {record['error']}")
        return record

    def verify(self, records: list[Record], probe: Record) -> None:
        """Every process imported the vLLM under test, told the right commit; else WrongVllm."""
        expected = self.expected_file or probe.get("file")
        for record in [probe, *records]:
            process = record.get("process", "?")
            if record.get("file") != expected:
                raise WrongVllm(f"test process {process} imported vLLM from {record.get('file')}, "
                                f"not {expected} ({self.label}): no verdict")
            if record.get("commit") != self.commit:
                raise WrongVllm(f"test process {process} was told commit {record.get('commit')}, "
                                f"not {self.commit}: no verdict")
            built = record.get("build_commit")
            if self.build_must_match and built and built != self.commit:
                raise WrongVllm(f"test process {process} imported vLLM built from {built}, "
                                f"not the change's head {self.commit}: no verdict")


def _env(python_path: str | None = None, commit: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOLD_COMMIT_ENV}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [python_path, env.get("PYTHONPATH")]))
    if commit:
        env[TOLD_COMMIT_ENV] = commit
    return env


@contextmanager
def _checkout(repo: Path, head: str, changed: list[str]) -> Iterator[TestedVllm]:
    build = installed_build()
    compiled = compiled_changes(changed)
    if compiled:
        more = f" and {len(compiled) - 3} more" if len(compiled) > 3 else ""
        raise CannotTest(f"the change touches compiled sources ({', '.join(compiled[:3])}{more}), which the "
                         f"installed build ({build.label()}) does not contain: build it (e.g. the pull "
                         "request's CI image) and run the gate with --vllm-python")
    with tempfile.TemporaryDirectory(prefix="kvconform-overlay-") as tmp:
        package = build_overlay(repo, head, build, Path(tmp))
        yield TestedVllm(sys.executable, _env(tmp, head), _checkout_label(head, build),
                         expected_file=str(package / "__init__.py"), commit=head)


def _checkout_label(head: str, build: InstalledBuild) -> str:
    return f"tested checkout {head[:12]} over the compiled parts of the installed {build.label()}"


@contextmanager
def _other_python(python: Path | None, head: str) -> Iterator[TestedVllm]:
    if python is None or not (python.is_file() and os.access(python, os.X_OK)):
        raise GateError(f"--vllm-python {python}: not an executable file")
    yield TestedVllm(str(python), _env(None, head), f"tested the vLLM of {python} as the change's {head[:12]}",
                     commit=head, build_must_match=True)


@contextmanager
def _installed() -> Iterator[TestedVllm]:
    build = installed_build()
    yield TestedVllm(sys.executable, _env(), f"tested the installed vLLM {build.version}, not the checkout",
                     expected_file=str(build.package_dir / "__init__.py"))


def tested_vllm(source: str, repo: Path, head: str, changed: list[str],
                python: Path | None = None) -> AbstractContextManager[TestedVllm]:
    """The context giving the ``TestedVllm`` for ``source`` (one of ``SOURCES``)."""
    return SOURCES[source](repo, head, changed, python)


# source -> its context, from (repository, head commit, changed files, --vllm-python)
VllmSource = Callable[[Path, str, list[str], Path | None], AbstractContextManager[TestedVllm]]
SOURCES: dict[str, VllmSource] = {
    "checkout": lambda repo, head, changed, python: _checkout(repo, head, changed),
    "python": lambda repo, head, changed, python: _other_python(python, head),
    "installed": lambda repo, head, changed, python: _installed(),
}


def read_imports(results_json: Path) -> list[Record]:
    """The per-process vLLM records of a run's results.json (empty when it has none)."""
    try:
        data = json.loads(results_json.read_text())
    except (OSError, ValueError):
        return []
    runs = data.get("runs", []) if isinstance(data, dict) else []
    return [record for run in runs if isinstance(run, dict)
            for record in run.get("vllm_imports", []) if isinstance(record, dict)]
