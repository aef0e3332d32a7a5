"""The watchdog process: ends a test process that a per-test timeout cannot end.

pytest-timeout ends a hanging test from inside its process: a SIGALRM handler (its ``signal`` method) or a
Python thread (``thread``). A connector stuck in native code that holds the interpreter lock (a pyo3 core
waiting on a lock, a C call through ``ctypes.PyDLL``) runs neither: the signal's Python handler waits for the
lock and so does every Python thread, Ctrl-C included. Only another process can bound such a test, so each
test process starts one of these beside it (``watchdog.py``), with nothing imported but the standard library
(it starts in milliseconds and never waits for the lock it watches).

The test process sends one JSON line per test on this process's stdin: ``{"arm": SECONDS, "nodeid": ...,
"connector": ..., "limit": ...}`` before the test, ``{"disarm": true}`` after it, ``{"exit": true}`` at its
end. When an armed test outlives its bound, or the process outlives ``INTERRUPT_GRACE_S`` after a Ctrl-C, this
process asks it for its threads' stacks (SIGUSR2, which the test process gave to ``faulthandler``: its handler
is C code that needs no lock), writes what it found to the record file (the xdist controller reads it to report
the test as timed out), prints one line, and kills the test process (SIGKILL). It ends when its test process
does (stdin closes, or it is no longer this process's parent).

Run as a script: ``python -I watchdog_process.py PID DUMP_FILE RECORD_FILE``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

INTERRUPT_GRACE_S = 10.0  # after a Ctrl-C, how long a test process gets to end by itself
DUMP_WAIT_S = 1.0  # how long faulthandler gets to write the stacks before the kill
DUMP_LINES = 60  # the stacks' lines kept in the record (the stuck thread's frames come first)
POLL_S = 0.5


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as dump:
            lines = dump.read().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[:DUMP_LINES] + ([f"... ({len(lines) - DUMP_LINES} more lines)"]
                                           if len(lines) > DUMP_LINES else []))


def _write_record(path: str, record: dict[str, object]) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as out:
        json.dump(record, out)
    os.replace(partial, path)


def end(pid: int, dump_path: str, record_path: str, armed: dict[str, object] | None, why: str) -> None:
    """Ask for the stacks, record them with the test, say so in one line, kill the test process."""
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        return
    time.sleep(DUMP_WAIT_S)
    record = {**(armed or {}), "why": why, "pid": pid, "stacks": _tail(dump_path)}
    _write_record(record_path, record)
    test = f" in {armed['nodeid']}" if armed else ""
    print(f"kvconform: watchdog: {why}{test}; the test process ({pid}) did not respond (stuck where a Python "
          f"handler cannot run: native code holding the interpreter lock, or signals ignored), so it was killed",
          file=sys.stderr, flush=True)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def watch(pid: int, dump_path: str, record_path: str) -> None:
    interrupted_at: list[float] = []
    signal.signal(signal.SIGINT, lambda *_: interrupted_at.append(time.monotonic()))
    armed: dict[str, object] | None = None
    deadline = float("inf")
    pending = b""
    while os.getppid() == pid:
        ready, _, _ = select.select([sys.stdin.buffer], [], [], POLL_S)
        if ready:
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                return  # the test process closed its end: it is ending
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "exit" in message:
                    return
                if "arm" in message:
                    armed, deadline = message, time.monotonic() + float(message["arm"])
                else:
                    armed, deadline = None, float("inf")
        now = time.monotonic()
        if armed is not None and now > deadline:
            end(pid, dump_path, record_path, armed, f"{armed.get('connector')} did not finish within "
                                                    f"{float(str(armed['arm'])):g} s")
            return
        if interrupted_at and now > interrupted_at[0] + INTERRUPT_GRACE_S:
            end(pid, dump_path, record_path, armed, f"interrupted (Ctrl-C), and still running "
                                                    f"{INTERRUPT_GRACE_S:g} s later")
            return


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
