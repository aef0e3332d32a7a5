"""The harness thread keeps every core when a connector pins the thread that builds it.

vLLM's NIXL worker side on CPU calls ``os.sched_setaffinity(0, [last core of each
NUMA node])`` while it is constructed, to reserve that core for its transfers.
On Linux that pins the calling thread, and the threads it starts from then on
(NIXL's agent progress threads, which poll without pause) inherit the pin. In
vLLM that is a worker process's own business; here the calling thread is the
harness, which also plays the scheduler, the other side of a pair and every test
after this one. Left pinned, the harness ran on one core beside the connector's
polling threads, and two xdist workers pinned themselves to the same last core
while the other idled. So the affinity is restored as soon as the worker side is
built: the connector's own threads stay where vLLM put them, the harness does not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def kept_cpu_affinity() -> Iterator[None]:
    """Restore the calling thread's CPU affinity when the block exits, however it exits."""
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        yield
    finally:
        if saved is not None and os.sched_getaffinity(0) != saved:
            os.sched_setaffinity(0, saved)
