"""Time limits for the project tests' own subprocess runs, stretched by how busy the machine's CPUs are.

WHY: the self-tests run the suite in a subprocess under a time limit, so that a hang
fails the test instead of hanging the project's tests. What such a run costs is CPU,
mostly each process importing vLLM (about 12 s of CPU with 0.33.0's CUDA torch,
against 5 s with 0.32.0's), and at a load average L on N cores a process gets about
N/L of a core. Fixed limits set on a quiet machine failed healthy runs at load 45-55
on 2 cores (a 300 s deadline, a 5 s per-test timeout, a 600 s timeout). A hang never
finishes however long it is given, so stretching the limit keeps what it catches.
"""

from __future__ import annotations

import os


def cpu_busy() -> float:
    """Processes waiting for each core (the 1-minute load average per core), at least 1 on a quiet machine."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def stretched(seconds: float) -> int:
    """``seconds`` on a quiet machine, in whole seconds, given the CPU share a process gets now."""
    return round(seconds * cpu_busy())


def describe_load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
