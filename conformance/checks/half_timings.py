"""The scheduler-half check's timings: the worker-results feeder's, and async scheduling.

Apart from checks/scheduler_half.py so the test module reads the table at collection without importing the
harness. ``async`` is no feeder timing alone: the check drives vLLM's AsyncScheduler for it, in the engine
core's batch-queue order, with the worker finishing stores 1 to 3 steps after submission, so a lookup in step
N+1 meets stores step N's output has yet to report and stores the worker has yet to finish.
"""

from __future__ import annotations

from ..engine.offloading_worker_feeder import TIMINGS, Timing

ASYNC = Timing("async", (2, 1, 3), (1, 0), "vLLM's AsyncScheduler stepped in the engine core's batch-queue order "
               "(step N+1 scheduled before step N's output arrives); stores reported 1 to 3 steps after "
               "submission, loads 0 to 1")
HALF_TIMINGS = {**TIMINGS, ASYNC.name: ASYNC}
