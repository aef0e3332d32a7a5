"""Time limits for the project tests' own subprocess runs, stretched by how busy the machine's CPUs are.

WHY: the self-tests run the suite in a subprocess under a time limit, so that a hang
fails the test instead of hanging the project's tests. What such a run costs is CPU,
mostly each process importing vLLM (more than twice as much with 0.33's CUDA torch as
with 0.32's: benchmarks/README.md), and at a load average L on N cores a process gets
about N/L of a core, so a fixed limit set on a quiet machine fails healthy runs on a
busy one. A hang never finishes however long it is given, so stretching the limit keeps
what it catches.
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
