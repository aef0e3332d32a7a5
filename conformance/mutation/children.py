"""Forked children with a time bound each, a few at a time, none left behind.

Each child leads a process group of its own, so whatever it starts (an engine process, a server) ends with it:
a child past its bound is killed with its group (SIGKILL: a hang in native code ignores gentler signals), and a
child that exits has its group killed too. Whatever ends the parent's loop (Ctrl-C included) kills every child
still running before it returns. A child's stdout and stderr go to a log file of its own.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

Key = TypeVar("Key")
POLL_S = 0.05


@dataclass(frozen=True)
class Job(Generic[Key]):
    key: Key
    work: Callable[[], None]  # runs in the child; returning is exit 0, raising exit 1
    bound: float  # seconds
    log: Path


@dataclass(frozen=True)
class Ended(Generic[Key]):
    key: Key
    status: int | None  # the exit status; None where it was killed or died of a signal
    signal: int | None  # the signal it died of, or None
    timed_out: bool
    duration: float


def fork(work: Callable[[], None], log: Path) -> int:
    """Start ``work`` in a forked child that leads its own process group; its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's code
        status = 1
        try:
            os.setpgid(0, 0)
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            # the parent's sys.stdout may be no longer fd 1 (pytest's capture, a redirect): write to the log
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115  # open until os._exit
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            work()
            status = 0
        except BaseException:  # noqa: BLE001  # whatever ends the child is its log's last word
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first, the group exists before it is killed
    except OSError:
        pass
    return pid


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _ended(job: Job[Key], wait_status: int, started: float, timed_out: bool) -> Ended[Key]:
    died = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
    status = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None
    return Ended(job.key, None if timed_out else status, None if timed_out else died, timed_out,
                 time.monotonic() - started)


def run_all(jobs: Iterable[Job[Key]], parallel: int) -> Generator[Ended[Key], None, None]:
    """Run ``jobs`` in forked children, up to ``parallel`` at once, and yield each as it ends."""
    pending = iter(jobs)
    running: dict[int, tuple[Job[Key], float]] = {}
    try:
        while True:
            while len(running) < parallel and (job := next(pending, None)) is not None:
                running[fork(job.work, job.log)] = (job, time.monotonic())
            if not running:
                return
            for pid, (job, started) in list(running.items()):
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                timed_out = not done and time.monotonic() - started > job.bound
                if timed_out:
                    _kill_group(pid)
                    done, wait_status = os.waitpid(pid, 0)
                if done:
                    _kill_group(pid)  # what the child started and left running
                    del running[pid]
                    yield _ended(job, wait_status, started, timed_out)
            time.sleep(POLL_S)
    finally:
        for pid in running:
            _kill_group(pid)
            os.waitpid(pid, 0)
