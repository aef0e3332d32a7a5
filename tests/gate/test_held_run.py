"""``held_run.HeldRun``: the gate's test run, shown only once the import probe passed, or ended unseen."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from kvconform.pipelines.gate import held_run
from kvconform.pipelines.gate.held_run import HeldRun, descendants


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def _ends(pid: int, seconds: float = 10.0) -> bool:
    """Whether ``pid`` ends within ``seconds`` (a killed process goes once the kernel has torn it down)."""
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _wait_for(path, seconds: float = 30.0) -> str:
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    return path.read_text()


def test_output_is_held_until_released_then_streamed(tmp_path, capfd):
    script = "import sys, time; print('before', flush=True); print('to stderr', file=sys.stderr, flush=True)"
    run = HeldRun([sys.executable, "-c", script], tmp_path, os.environ)
    while run._proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.2)  # the relay has read it all by now
    assert capfd.readouterr().out == ""  # held, though the run has ended
    run.release()
    assert run.wait() == 0
    assert capfd.readouterr().out == "before\nto stderr\n"


def test_output_after_the_release_is_streamed_as_it_comes(tmp_path, capfd):
    gate = tmp_path / "go"
    script = textwrap.dedent(f"""
        import os, time
        print('first', flush=True)
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.02)
        print('second', flush=True)
    """)
    run = HeldRun([sys.executable, "-c", script], tmp_path, os.environ)
    run.release()
    deadline = time.monotonic() + 30
    seen = ""
    while "first" not in seen:
        assert time.monotonic() < deadline
        seen += capfd.readouterr().out
        time.sleep(0.02)
    gate.touch()
    assert run.wait() == 0
    assert seen + capfd.readouterr().out == "first\nsecond\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="finds a run's processes in Linux's /proc")
def test_a_stopped_run_and_what_it_started_end_unseen(tmp_path, capfd):
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; print('child', flush=True); time.sleep(120)"])
        print('parent', flush=True)
        with open({str(pids)!r}, "w") as out:
            out.write(f"{{os.getpid()}} {{child.pid}}\\n")
        time.sleep(120)
    """)
    run = HeldRun([sys.executable, "-c", script], tmp_path, os.environ)
    parent, child = map(int, _wait_for(pids).split())
    assert descendants(parent) == [child]
    started = time.monotonic()
    run.stop()
    assert time.monotonic() - started < 10
    assert _ends(parent) and _ends(child)
    assert capfd.readouterr().out == ""


def test_an_interrupted_wait_stops_the_run(tmp_path, monkeypatch):
    run = HeldRun([sys.executable, "-c", "import time; time.sleep(120)"], tmp_path, os.environ)
    run.release()
    monkeypatch.setattr(run._proc, "wait", _interrupted(run._proc.wait))
    with pytest.raises(KeyboardInterrupt):
        run.wait()
    assert run._proc.poll() is not None


def _interrupted(wait):
    calls = []

    def once(*args, **kwargs):  # the first wait is interrupted, the stop's own wait is not
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return wait(*args, **kwargs)

    return once


@pytest.mark.timeout(120)  # the relay that stopped draining left the run blocked for ever
def test_a_gate_whose_output_is_gone_still_waits_for_the_whole_run(tmp_path, monkeypatch):
    """``kvconform gate ... | head``: the reader goes, the run goes on writing and must not block on a full pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    monkeypatch.setattr(held_run, "OUT_FD", write_end)
    script = "import sys\nfor i in range(20000):\n    print('x' * 100)\nsys.exit(3)"
    try:
        run = HeldRun([sys.executable, "-c", script], tmp_path, os.environ)
        run.release()
        assert run.wait() == 3  # 2 MB through a 64 KB pipe: drained after the first write failed
    finally:
        os.close(write_end)
