"""A P/D engine's scheduler shutdown, run to its end while the next test runs.

NixlConnector's scheduler ``shutdown()`` joins its handshake listener, which notices the stop only when
its 1 s receive timeout runs out: waiting for it would be most of a pair test's time. vLLM's calls are
unchanged and in ``EngineCore.shutdown``'s order; only the harness thread stops waiting, and only for
engines in a P/D role (a producer and a consumer are two servers that stop independently). Nothing goes
unjudged: ``reliability/held_reports.py`` holds the test's reports until its closes end, then the thread
and zmq checks judge what it left, and an exception the shutdown raised fails its teardown. Where no test
claims the closes (the bench, a script, ``--pdb``), ``close`` runs the shutdown inline.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

THREAD_PREFIX = "kvconform-close: "


@dataclass
class BackgroundClose:
    """One shutdown call running on its own thread; ``error`` is what it raised, formatted."""

    what: str
    thread: threading.Thread
    started: float = field(default_factory=time.monotonic)
    error: str | None = None

    def done(self) -> bool:
        return not self.thread.is_alive()


_claimed: list[BackgroundClose] | None = None  # the running test's closes; None: close inline


def claim() -> list[BackgroundClose]:
    """From now on ``close`` runs in the background and lists its closes in the returned list (one test's)."""
    global _claimed
    _claimed = []
    return _claimed


def release() -> None:
    """From now on ``close`` runs inline again."""
    global _claimed
    _claimed = None


def close(shutdown: Callable[[], None], what: str) -> None:
    """Call ``shutdown``: on a daemon thread when a test claimed the closes, else here (raising what it raises)."""
    if _claimed is None:
        shutdown()
        return
    record = BackgroundClose(what, threading.Thread())

    def run() -> None:
        try:
            shutdown()
        except BaseException as exc:  # noqa: BLE001 - reported as the test's failure by reliability/held_reports.py
            record.error = "".join(traceback.format_exception(exc)).rstrip()

    record.thread = threading.Thread(target=run, name=THREAD_PREFIX + what, daemon=True)
    _claimed.append(record)
    record.thread.start()
