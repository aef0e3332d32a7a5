"""A failed READ whose handle cannot be released at once: the consumer must report it once and release it later.

The consumer's READ cannot be posted after NIXL prepared its handle, and releasing that handle raises at the first
attempt (the backend may still be moving the READ's bytes). Besides a failed read's judgement
(``pair_failed_load.py``), the consumer reports the request in exactly one step's output and releases the handle it
kept before it drains.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.prompts import request_prompt
from .load_failure import LoadFailureAnswer, LoadFailureViolation, PolicyRig
from .pair_core import SideLog, open_pair
from .pair_failed_load import consumer_drains, judge_failed_load
from .pair_transport import PairFault, UnreleasableTransport, install_transport, require_read_faults

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

    from ..engine.rig import EngineStandIn, Rig


UNRELEASABLE_READ = PairFault(
    "post-error-unreleasable", "posting the consumer's READ failed after NIXL had prepared its handle, and that handle "
    "could not be released at the first attempt (the transport raised for both: the backend may still be moving the "
    "READ's bytes)", post_error=True)


@dataclass
class ReportCountingLog(SideLog):
    """A ``SideLog`` that also counts, per request, the steps whose output reported it finished receiving or failed
    (vLLM's scheduler takes each report as a new event: a second one finds the request gone or running)."""

    reports: Counter[str] = field(default_factory=Counter)

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        output = super().step(scheduler_output)
        for request_id in set(output.finished_recving or ()) | set(output.failed_recving or ()):
            self.reports[request_id] += 1
        return output


class ReleaseLedger(UnreleasableTransport):
    """An ``UnreleasableTransport`` that also lists the handles released after their first release was refused."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self.released_later: set[int] = set()  # id() of the handles whose later release went through

    def release_xfer_handle(self, handle: Any, *args: Any, **kwargs: Any) -> Any:
        refused = id(handle) in self._refused
        result = super().release_xfer_handle(handle, *args, **kwargs)
        if refused:
            self.released_later.add(id(handle))
        return result

    def refused(self) -> int:
        """How many handles' first release was refused."""
        return len(self._refused)

    def kept(self) -> int:
        """How many handles whose first release was refused were never released afterwards."""
        return len(self._refused - self.released_later)


def run_pair_unreleasable_read(rig: Rig, policy: str) -> LoadFailureAnswer:
    """The consumer's READ cannot be posted, and its prepared handle cannot be released at the first attempt; the
    consumer's answer is judged as a failed read's is, and besides: it reports the request exactly once (one step's
    finished_recving or failed_recving), and by the time it drained it has released the handle it had to keep."""
    rig = PolicyRig.of(rig, policy)
    stored = {"req-0": request_prompt(0, 4 * rig.block_size + 5)}
    name, fault = rig.connector.name, UNRELEASABLE_READ
    with open_pair(rig, stored) as pair:
        require_read_faults(pair)
        log = ReportCountingLog(pair.consumer)
        pair.logs["consumer"] = log
        ledger = install_transport(pair.consumer, fault, transport=ReleaseLedger)
        assert isinstance(ledger, ReleaseLedger)
        consumer_drains(pair, stored, f"{name}: after {fault.doc}, the consumer neither failed nor finished its "
                                      f"request")
        kept = ledger.kept()  # before the consumer's shutdown, which may release what a step forgot
    if not ledger.failed or not ledger.refused():
        raise LoadFailureViolation(f"{name} posted no read the fault could act on ({ledger.posted} posted, "
                                   f"{ledger.refused()} release(s) refused): no unreleasable handle was staged")
    answer = judge_failed_load(rig, pair, stored, fault, policy)
    if answer.raised is not None:
        return answer
    repeated = ", ".join(f"{rid} in {log.reports[rid]} steps" for rid in stored if log.reports[rid] > 1)
    if repeated:
        raise LoadFailureViolation(
            f"{name}: {fault.doc}; the consumer reported {repeated} (finished_recving / failed_recving): vLLM's "
            f"scheduler takes each report as the load's end, so a second one finds the request already failed, freed "
            f"or running")
    if kept:
        raise LoadFailureViolation(
            f"{name}: {fault.doc}; the consumer drained with {kept} READ handle(s) whose first release was refused "
            f"never released again (release_xfer_handle): NIXL keeps each handle's descriptors, and a backend still "
            f"moving the READ's bytes may write them into blocks vLLM has freed and handed to another request")
    return answer
