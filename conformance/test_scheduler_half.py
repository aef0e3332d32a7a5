"""Scheduler halves whose worker half cannot run here, through vLLM's real Scheduler (checks/scheduler_half.py).

One test per timing (checks/half_timings.py): the worker-results feeder's (transfers reported in the step
that submitted them, one step later, late and out of order), and ``async``: vLLM's AsyncScheduler in the
engine core's batch-queue order, where a lookup meets a preempted request's stores still in flight. Each
runs the same lifecycle workload (preemption under a small pool, an abort, finishes with stores in flight,
blocks handed on, a reload; async adds the preempted prompt again while its stores are in flight) and must
have exercised what it is about: a pass on a workload that preempted nothing in flight, flushed nothing or
loaded nothing would prove nothing.

It applies to connectors whose profile sets ``scheduler_half`` (OffloadingConnector, SimpleCPUOffloadConnector);
it runs wherever their contract check does, and says in the ``kvconform.half`` property which half ran and why not
the other (the worker half's refusal or crash, quoted). Connectors whose worker half runs here are driven whole by
the round-trip, contract and workload checks, with real bytes; the feeders play one connector family's worker
contract each (checks/half_families.py), so they are no stand-in for theirs. A counter a family's worker contract
cannot produce (its table entry says why) is not asked of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.half_timings import HALF_TIMINGS
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("scheduler_half")

# report fields each timing's run must have exercised (HalfReport in checks/scheduler_half.py)
EXERCISED = ("stores", "loads", "flushes", "aborts", "preempted_in_flight", "finished_in_flight",
             "reused_after_preemption", "reused_after_finish", "stored_events", "finished_fully_offloaded")
# and what a timing is about: transfers reported out of order; a lookup meeting a preempted request's stores in flight
EXERCISED_BY_TIMING = {"late-out-of-order": ("out_of_order",), "async": ("lookups_with_store_in_flight",)}


@pytest.mark.parametrize("timing", list(HALF_TIMINGS))
def test_scheduler_half(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, timing: str,
                        request: pytest.FixtureRequest, record_property: Callable[[str, object], None]) -> None:
    """The scheduler half's lifecycle against vLLM's contract with its worker half, every step."""
    if not subject.profile.scheduler_half:
        pytest.skip(f"{subject.name}: its profile does not set scheduler_half (the check's feeders play the "
                    f"worker halves of the families in checks/half_families.py only; the other checks drive this "
                    f"connector's own worker half)")
    from kvconform.conformance.checks.scheduler_half import BLOCK_SIZE, SchedulerHalfRig, run_scheduler_half

    rig = request.getfixturevalue("make_rig")(CacheShape(block_size=BLOCK_SIZE), SchedulerHalfRig)
    if reason := rig.block_size_refusal():
        pytest.skip(reason)
    with refusals_skip():
        result = run_scheduler_half(rig, HALF_TIMINGS[timing])
    record_property("kvconform.half", result.label)
    report = result.report
    record_property("kvconform.scheduler_half", report.describe())
    wanted = [*EXERCISED, *EXERCISED_BY_TIMING.get(timing, ())]
    missing = [name for name in wanted if name not in result.unexercisable and not getattr(report, name)]
    if result.not_met:
        record_property("kvconform.scheduler_half_not_met", "; ".join(
            f"{situation}: {why}" for situation, why in result.not_met.items()))
    if result.unexercisable:
        record_property("kvconform.scheduler_half_unexercisable", "; ".join(
            f"{name.replace('_', ' ')}: {why}" for name, why in result.unexercisable.items()))
    assert not missing, (f"{subject.name}: the scheduler-half workload (timing {timing}) ran without "
                         f"{', '.join(m.replace('_', ' ') for m in missing)}: not exercised ({report.describe()})")
