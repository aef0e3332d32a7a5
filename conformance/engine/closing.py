"""A P/D engine's scheduler shutdown, run to its end while the next test runs.

Why: NixlConnector's scheduler ``shutdown()`` sets a stop event and joins its
handshake listener, which notices the stop only when its 1 s receive timeout
(``RCVTIMEO``) runs out after the last handshake: most of a pair test's time would
be spent waiting on an idle thread. vLLM's call is
unchanged and in vLLM's order (the worker side first, then the scheduler's, as
``EngineCore.shutdown`` does); only the harness thread stops waiting for it. A
producer and a consumer are two servers whose engines stop independently, so this
applies to engines in a P/D role only.

Nothing about the shutdown goes unjudged: ``reliability/held_reports.py`` holds the
test's reports until its background closes have ended, then the thread and zmq
checks judge what the test left behind (the listener included), and an exception
the shutdown raised fails the test's teardown. Where no test claimed the closes
(the bench, a script, a run with ``--pdb``), ``close`` runs the shutdown inline,
as before.
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
