"""The gate's test run, started before its import probe has answered, its output held until the probe passes.

``gate --run`` imports vLLM in a probe process of its own (``tested_vllm.PROBE``:
a checkout that does not import against the installed build stops there, with exit
4 and no verdict), and the pytest run's worker imports vLLM again. Starting the run
beside the probe lets the two imports share the cores, while the user still sees
the probe's answer first: the run's output (stdout and stderr, as the run writes
them) is held back until the probe passes and then streamed as it comes (to the
gate's log file, ``suite_run``, or its standard output), and when the probe fails,
the run and every process it started are killed unseen, before the gate says why
it cannot test the change.

The run stays in the gate's process group, so an interrupt from the terminal or a
CI agent stopping the job's group reaches it as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

OUT_FD = 1  # where the run's output goes once released, unless told another: the gate's own standard output
CHUNK = 65536
STOP_GRACE_S = 5.0  # how long a stopped run's output may stay open (a process it started as it was stopped)
PROC = Path("/proc")  # Linux: the processes a run started are found by their parent ids


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (empty where ``/proc`` is not Linux's)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [entry for entry in os.listdir(PROC) if entry.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = (PROC / entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        parent = int(stat.rpartition(")")[2].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


class HeldRun:
    """A command started now, whose output is shown only from ``release()`` on."""

    def __init__(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], out: int | None = None):
        self._out = OUT_FD if out is None else out  # a file descriptor: the gate's output, or the run's log
        self._proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._held: list[bytes] | None = []  # None once released
        self._shown = True  # False once the gate's own output is gone (a reader that closed its pipe)
        self._lock = threading.Lock()
        self._relay = threading.Thread(target=self._pump, name="kvconform-gate-relay", daemon=True)
        self._relay.start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while chunk := os.read(fd, CHUNK):
            with self._lock:
                if self._held is None:
                    self._show(chunk)
                else:
                    self._held.append(chunk)

    def _show(self, chunk: bytes) -> None:
        """Write to the gate's output; where that is gone, drop the rest but keep draining, so the run never blocks
        on a full pipe (as it would have ended on its own broken pipe when it wrote there itself)."""
        if self._shown:
            try:
                _write_all(self._out, chunk)
            except OSError:
                self._shown = False

    def release(self) -> None:
        """Show what the run wrote so far, after what the gate printed; stream the rest as it comes."""
        with self._lock:
            sys.stdout.flush()
            for chunk in self._held or []:
                self._show(chunk)
            self._held = None

    def wait(self) -> int:
        """The run's exit status, once it and everything holding its output have ended."""
        try:
            status = self._proc.wait()
        except BaseException:
            self.stop()
            raise
        self._finish()
        return status

    def stop(self) -> None:
        """End the run: its own process first (xdist would replace a lost worker), then what it started. Output
        still held is never shown; a released run (an interrupted ``wait``) shows what it wrote to the end, as it
        did when it wrote to the gate's terminal itself."""
        started = descendants(self._proc.pid)
        for pid in [self._proc.pid, *started]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # already gone
                pass
        self._proc.wait()
        with self._lock:
            if self._held is not None:
                self._held.clear()
        self._finish(timeout=STOP_GRACE_S)

    def _finish(self, timeout: float | None = None) -> None:
        """Join the relay; its pipe is closed only once it stopped reading (a closed descriptor can be reused)."""
        self._relay.join(timeout)
        assert self._proc.stdout is not None
        if not self._relay.is_alive():
            self._proc.stdout.close()
