"""The harness thread gets its cores back after building a connector's worker side pins it.

In vLLM each worker is a process of its own, and what a connector's worker side does to
the thread that builds it stays in that worker. Here one harness thread plays the
scheduler, both sides of a P/D pair and every test after this one, so it must undo
exactly one thing: vLLM's NIXL worker side on CPU calls ``os.sched_setaffinity(0, [last
core of each NUMA node])`` while it is constructed, to reserve that core for its
transfers. On Linux that pins the calling thread; left so, the harness (and every later
test in the process) would run on that one core.

So the calling thread's affinity is restored when the build ends, however it ends. The
connector's own threads stay where vLLM put them, at the priority they started with, and
nothing in their environment is set: the connector runs under vLLM's defaults.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def restore_harness_affinity() -> Iterator[None]:
    """Around building a connector's worker side (or vLLM's world of one): the calling thread's CPU affinity as
    it was before, when the block exits. Threads started in the block keep whatever the connector gave them."""
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        yield
    finally:
        if saved is not None and os.sched_getaffinity(0) != saved:
            os.sched_setaffinity(0, saved)
