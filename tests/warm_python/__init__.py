"""``python -m pytest`` commands of the project's tests, and their xdist workers, each a fork of a process that imported
vLLM once.

Why: a suite run in a subprocess pays vLLM's import (about 9 s of CPU here) in its own process and again in each of
its xdist workers before its first test, and the tier that needs vLLM starts a few dozen of them. A warm Python
(``server``: a fresh interpreter, one per process of the project's tests that asks for one) imports what every suite
run imports, then forks a child per command, which becomes ``python -m pytest`` in the command's folder, environment
and output, and forks the run's xdist workers too (``shim``). Each child ends through the interpreter's own exit
(threads joined, ``atexit`` handlers, finalisation), so a run that crashes at exit still does.

A command runs in a plain subprocess instead where a fork could differ from a fresh process: another Python or
interpreter options, an environment that differs from the warm Python's beyond pytest's own variables (something
preloaded may have read it at import), or ``KVCONFORM_WARM_PYTHON=off``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .protocol import receive, send

REPO = Path(__file__).resolve().parents[2]
SWITCH = "KVCONFORM_WARM_PYTHON"  # "off": every command in a subprocess of its own
# read when pytest or xdist configures, not at import: a command may differ from the warm Python in these
PER_RUN_PREFIX = "PYTEST_"
START_TIMEOUT_S = 300


def _import_relevant(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if not key.startswith(PER_RUN_PREFIX)}


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class WarmPython:
    """One warm Python, listening on a socket of its own; each command is one connection."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.folder = tempfile.mkdtemp(prefix="kvconform-warm-")
        self.address = os.path.join(self.folder, "socket")
        # its stdin stays a pipe from this process: it ends when this process does
        self.process = subprocess.Popen([sys.executable, "-m", f"{__name__}.server", self.address], cwd=REPO,
                                        env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        start_new_session=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:  # what its imports print comes first
            if line.strip() == b"ready":
                return
        raise RuntimeError(f"the warm Python did not start (status {self.process.wait()})")

    def run(self, args: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout_s: float) -> subprocess.CompletedProcess[str]:
        """``python -m pytest ARGS`` in ``cwd`` with ``env``, as ``subprocess.run`` with captured text output gives it;
        past ``timeout_s`` its process group is killed (its workers with it) and ``subprocess.TimeoutExpired``
        raised."""
        command = [sys.executable, "-m", "pytest", *args]
        with tempfile.TemporaryDirectory(dir=self.folder) as folder, socket.socket(socket.AF_UNIX) as connection:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            connection.connect(self.address)
            send(connection, {"kind": "pytest", "args": list(args), "cwd": str(cwd), "env": dict(env),
                              "stdout": str(out), "stderr": str(err)})
            connection.settimeout(START_TIMEOUT_S)
            started, _ = receive(connection)
            assert started is not None, "the warm Python ended"
            connection.settimeout(timeout_s)
            try:
                ended, _ = receive(connection)
            except TimeoutError:
                kill_group(int(started["pid"]))  # type: ignore[call-overload]
                connection.settimeout(None)
                receive(connection)  # the warm Python reaped it
                raise subprocess.TimeoutExpired(command, timeout_s, _read(out), _read(err)) from None
            assert ended is not None, "the warm Python ended"
            wait_status = int(ended["wait_status"])  # type: ignore[call-overload]
            return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(wait_status), _read(out), _read(err))

    def close(self) -> None:
        if self.process.poll() is None:
            kill_group(self.process.pid)
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)  # its socket


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


_WARM: list[WarmPython] = []  # this process's one warm Python, started at its first command


@atexit.register
def _close() -> None:
    for warm in _WARM:
        warm.close()


def run_pytest(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
               timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``argv`` (a command list) in ``cwd`` with ``env``, its output captured as text: forked from this process's warm
    Python where ``argv`` is ``sys.executable -m pytest ...`` and ``env`` is the warm Python's (pytest's own variables
    aside), else in a subprocess. The warm Python starts with the first such command's environment."""
    if list(argv[:3]) == [sys.executable, "-m", "pytest"] and os.environ.get(SWITCH) != "off":
        if not _WARM:
            _WARM.append(WarmPython(env))
        if _import_relevant(env) == _import_relevant(_WARM[0].env):
            return _WARM[0].run(argv[3:], cwd, env, timeout_s)
    return subprocess.run(list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout_s)
