"""Forked children: each bounded in time, killed with what it started, none left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kvconform.conformance.mutation.children import Job, run_all


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not yet collected by init
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_hanging_child_is_killed_at_its_bound_with_the_process_it_started(tmp_path: Path) -> None:
    started = tmp_path / "grandchild.pid"

    def hang() -> None:
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        started.write_text(str(sleeper.pid))
        time.sleep(600)

    begun = time.monotonic()
    [ended] = run_all([Job("hang", hang, 1.0, tmp_path / "hang.log")], parallel=1)
    assert ended.timed_out and ended.status is None and time.monotonic() - begun < 30
    grandchild = int(started.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_statuses_of_children_that_return_raise_and_die(tmp_path: Path) -> None:
    def returns() -> None:
        print("fine")

    def raises() -> None:
        raise RuntimeError("broken on purpose")

    def dies() -> None:
        os.kill(os.getpid(), 9)

    jobs = [Job(name, work, 30.0, tmp_path / f"{name}.log")
            for name, work in (("returns", returns), ("raises", raises), ("dies", dies))]
    ended = {e.key: e for e in run_all(jobs, parallel=2)}
    assert (ended["returns"].status, ended["raises"].status, ended["dies"].signal) == (0, 1, 9)
    assert not any(e.timed_out for e in ended.values())
    assert (tmp_path / "returns.log").read_text() == "fine\n"
    assert "RuntimeError: broken on purpose" in (tmp_path / "raises.log").read_text()


def test_stopping_early_kills_the_children_still_running_and_starts_no_more(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()

    def slow(name: str) -> Job[str]:
        def work() -> None:
            (pids / name).write_text(str(os.getpid()))
            time.sleep(600)
        return Job(name, work, 600.0, tmp_path / f"{name}.log")

    running = run_all([Job("quick", lambda: None, 30.0, tmp_path / "quick.log"), slow("a"), slow("b")], parallel=2)
    assert next(running).key == "quick"  # "a" started beside it; "b" starts once a child ends
    deadline = time.monotonic() + 20
    while not (pids / "a").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    running.close()  # as an exception or Ctrl-C in the caller's loop would
    pid = int((pids / "a").read_text())
    assert not _alive(pid) and not (pids / "b").exists()
