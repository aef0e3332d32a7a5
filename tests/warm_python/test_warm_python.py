"""A command forked from the warm Python gives what the same command in a subprocess gives, and ends as it would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import warm_python
from tests.load import stretched

# a test that records what its process sees; the worker test records its worker's too
PROJECT = {
    "test_seen.py": """
import json, os, sys, time

def test_records_its_process():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    seen = {"cwd": os.getcwd(), "path0": sys.path[0], "argv0": os.path.basename(sys.argv[0]), "pid": os.getpid(),
            "ppid": os.getppid(), "marker": os.environ.get("WARM_MARKER"), "main": sys.modules["__main__"].__name__}
    with open(f"seen-{worker}.json", "w") as out:
        json.dump(seen, out)

def test_fails():
    assert 1 == 2

def test_sleeps_when_asked():
    if os.environ.get("WARM_SLEEP"):
        test_records_its_process()
        time.sleep(float(os.environ["WARM_SLEEP"]))
""",
    "conftest.py": """
import atexit, os, signal

@atexit.register
def _at_exit():
    open("exited", "w").close()
    if os.environ.get("WARM_CRASH_AT_EXIT"):
        os.kill(os.getpid(), signal.SIGSEGV)
""",
}


def _project(folder: Path) -> Path:
    folder.mkdir()
    for name, text in PROJECT.items():
        (folder / name).write_text(text)
    return folder


def _env(**extra: str) -> dict[str, str]:
    """This process's environment but its xdist worker's (the project's tests may run under xdist)."""
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST")}
    return {**inherited, "WARM_MARKER": "m", **extra}


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]


def _seen(folder: Path, worker: str = "main") -> dict[str, object]:
    return json.loads((folder / f"seen-{worker}.json").read_text())


def _workers_seen(folder: Path) -> list[dict[str, object]]:
    return [_seen(folder, path.name[len("seen-"):-len(".json")]) for path in folder.glob("seen-gw*.json")]


@pytest.fixture(scope="module")
def warm():
    """A warm Python of this module's own, with what the preload imports here (vLLM, which imports a pytest
    plugin, anyio): the process's own, if a suite run started one, may hold another environment."""
    started = warm_python.WarmPython(_env())
    yield started
    started.close()
    assert not Path(started.folder).exists(), "the warm Python's socket folder outlived it"


def _run(warm, folder: Path, *args: str, timeout_s: float = 120, **env: str):
    return warm.run(_argv(*args)[3:], folder, _env(**env), stretched(timeout_s))


def test_a_forked_run_sees_and_reports_what_a_subprocess_run_does(warm, tmp_path):
    forked, fresh = _project(tmp_path / "forked"), _project(tmp_path / "fresh")
    done = _run(warm, forked)
    expected = subprocess.run(_argv(), cwd=fresh, env=_env(), capture_output=True, text=True, timeout=stretched(120))
    seen = _seen(forked)
    assert seen["ppid"] == warm.process.pid, "the run was not forked from the warm Python"
    assert done.returncode == expected.returncode == 1
    # the same summary (no warning of the warm Python's own), the same failure shown
    assert done.stdout.splitlines()[-1].split(" in ")[0] == expected.stdout.splitlines()[-1].split(" in ")[0]
    assert "assert 1 == 2" in done.stdout
    for key, value in _seen(fresh).items():
        if key not in ("pid", "ppid"):
            assert seen[key] == (str(forked) if key in ("cwd", "path0") else value), key
    assert (forked / "exited").exists(), "the run did not end through the interpreter's exit"


def test_xdist_workers_are_forked_too_and_report_back(warm, tmp_path):
    folder = _project(tmp_path / "project")
    done = _run(warm, folder, "-n", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 2 passed" in done.stdout
    [seen] = _workers_seen(folder)
    assert seen["ppid"] == warm.process.pid and seen["main"] == "__main__" and seen["marker"] == "m"


def test_a_crash_at_exit_is_the_runs_status(warm, tmp_path):
    assert _run(warm, _project(tmp_path / "project"), WARM_CRASH_AT_EXIT="1").returncode == -signal.SIGSEGV


def test_past_its_bound_the_run_and_its_workers_are_killed(warm, tmp_path):
    folder = _project(tmp_path / "project")
    with pytest.raises(subprocess.TimeoutExpired):
        _run(warm, folder, "-n", "2", "-k", "sleeps", timeout_s=6, WARM_SLEEP="600")
    pids = [int(seen["pid"]) for seen in _workers_seen(folder)]  # type: ignore[call-overload]
    assert pids, "no worker reached its test within the bound"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "a worker outlived its run"


def test_a_command_runs_warm_only_in_the_warm_pythons_environment(warm, tmp_path, monkeypatch):
    monkeypatch.setattr(warm_python, "_WARM", [warm])
    for marker, parent in (("m", warm.process.pid), ("other", os.getpid())):
        folder = _project(tmp_path / marker)
        # the warm Python's own environment, not this process's now (a test before may have changed that)
        warm_python.run_pytest(_argv(), folder, {**warm.env, "WARM_MARKER": marker}, stretched(120))
        assert (_seen(folder)["ppid"], _seen(folder)["marker"]) == (parent, marker)
