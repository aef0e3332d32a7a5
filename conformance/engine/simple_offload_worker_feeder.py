"""SimpleCPUOffloadConnector's worker half played for its scheduler half in vLLM's real Scheduler.

The worker half (vllm/v1/simple_kv_offload/worker.py) crashes on CPU (``torch.cuda.Stream.priority_range``), so its
scheduler half runs here with ``SimpleOffloadWorkerFeeder`` in the worker's place, as ``OffloadingWorkerFeeder``
(engine/offloading_worker_feeder.py) does for OffloadingConnector. The contract it plays, from vLLM 0.32's
``SimpleCPUOffloadWorker``: the metadata (``SimpleCPUOffloadMetadata``) names at most one load event and one store
event per step, each a flat list of GPU blocks (a store's requests are not named; a load's are,
``load_event_to_reqs``); ``handle_preemptions`` waits for every launched transfer when ``need_flush`` is set;
``start_load_kv`` launches the step's load (after the forward: its loads are asynchronous) and ``wait_for_save``
the step's store, each on its own stream; ``get_finished`` reports each stream's events up to its high-water mark
(a stream's events complete in launch order, so no event is reported before an earlier one), loads as request ids
in ``finished_recving`` (from the step's ``load_event_to_reqs``), stores as ``completed_store_events`` of a
``SimpleCPUOffloadWorkerMetadata``; ``finished_sending`` is always None. Moves no bytes. ``Timing`` says when a
launched event completes; an event never completes before one launched earlier on its stream.

The check judges per request, so ``simple_asks`` splits each event into one ``Ask`` per request whose blocks it
names (``owner``: the check's knowledge of which request holds a block); the feeder's transfers carry those ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..vllm_install import api as vllm_api
from .offloading_worker_feeder import Ask, FeederMismatch, JobId, Timing, Transfer, TransferLedger

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

KINDS = ("load", "store")
# owner(block, requests to look among or None for all) -> the request holding the GPU block, None if none does
Owner = Callable[[int, Sequence[str] | None], str | None]


def simple_metadata(metadata: object) -> Any:
    """The step's SimpleCPUOffloadMetadata; another shape is ``FeederMismatch``."""
    try:
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata
    except ImportError as exc:
        raise FeederMismatch(f"the worker-results feeder reads SimpleCPUOffloadConnector's metadata from vLLM 0.32's "
                             f"vllm/v1/simple_kv_offload/metadata.py, which this vLLM lacks ({exc})") from None
    if not isinstance(metadata, SimpleCPUOffloadMetadata):
        raise FeederMismatch(f"the worker-results feeder plays SimpleCPUOffloadConnector's worker half, whose metadata "
                             f"is a SimpleCPUOffloadMetadata; the scheduler half sent a {type(metadata).__name__}")
    return metadata


def _split(kind: str, event: int, blocks: Sequence[int], owner: Owner, among: Sequence[str] | None) -> list[Ask]:
    by_request: dict[str | None, list[int]] = {}
    for block in blocks:
        by_request.setdefault(owner(int(block), among), []).append(int(block))
    return [Ask(f"{event}:{rid or '?'}", kind, rid, ids) for rid, ids in by_request.items()]


def simple_asks(metadata: object, owner: Owner) -> list[Ask]:
    """The step's load and store events, one ``Ask`` per request whose blocks each names."""
    meta = simple_metadata(metadata)
    asks: list[Ask] = []
    if meta.load_event >= 0 and meta.load_gpu_blocks:
        asks += _split("load", meta.load_event, meta.load_gpu_blocks, owner,
                       list(meta.load_event_to_reqs.get(meta.load_event, ())))
    if meta.store_event >= 0 and meta.store_gpu_blocks:
        asks += _split("store", meta.store_event, meta.store_gpu_blocks, owner, None)
    return asks


@dataclass
class SimpleOffloadWorkerFeeder(TransferLedger):
    """SimpleCPUOffloadWorker as its scheduler half sees it (the module docstring gives the order)."""

    timing: Timing
    owner: Owner
    forward: Callable[[object], None] | None = None  # the model's forward, after the flush, before the launches
    transfers: dict[JobId, Transfer] = field(default_factory=dict)  # every request's part of every event
    step_index: int = -1
    _events: dict[tuple[str, int], list[JobId]] = field(default_factory=dict)  # an event's transfers
    _launched: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {k: [] for k in KINDS})  # (event, due)
    _pending: dict[str, set[int]] = field(default_factory=lambda: {k: set() for k in KINDS})
    _hwm: dict[str, int] = field(default_factory=lambda: {k: -1 for k in KINDS})
    _launches: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        """One model-runner step of the worker half; returns the step's ``KVConnectorOutput``."""
        KVConnectorOutput = vllm_api.find("KVConnectorOutput")
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

        self.step_index += 1
        step = self.step_index
        meta = simple_metadata(scheduler_output.kv_connector_metadata)
        for ask in simple_asks(meta, self.owner):
            self.transfers[ask.job_id] = Transfer(ask.job_id, ask.kind, ask.req_id or "?", ask.blocks, step)
            event = meta.load_event if ask.kind == "load" else meta.store_event
            self._events.setdefault((ask.kind, event), []).append(ask.job_id)
        # bind_connector_metadata
        for kind, event in (("load", meta.load_event), ("store", meta.store_event)):
            if event >= 0:
                self._pending[kind].add(event)
        # handle_preemptions: every launched transfer waited for, before the forward
        if meta.need_flush:
            for kind in KINDS:
                for event, _ in self._launched[kind]:
                    for transfer in self._transfers_of(kind, event):
                        transfer.flushed, transfer.due = step, step
                    self._hwm[kind] = event
                self._launched[kind].clear()
        if self.forward is not None:
            self.forward(scheduler_output)
        # start_load_kv (after the forward launch), then wait_for_save
        if meta.load_gpu_blocks:
            self._launch("load", meta.load_event, step)
        if meta.store_gpu_blocks:
            self._launch("store", meta.store_event, step)
        # get_finished, then build_connector_worker_meta
        finished_recving: set[str] = set()
        completed: dict[int, int] = {}
        for kind in KINDS:
            if not self._pending[kind]:
                continue
            mark = self._poll(kind, step)
            for event in sorted(j for j in self._pending[kind] if j <= mark):
                self._pending[kind].discard(event)
                for transfer in self._transfers_of(kind, event):
                    transfer.reported = step
                if kind == "load":
                    finished_recving.update(meta.load_event_to_reqs.get(event) or ())
                else:
                    completed[event] = 1
        worker_meta = SimpleCPUOffloadWorkerMetadata(completed_store_events=completed) if completed else None
        return KVConnectorOutput(finished_sending=None, finished_recving=finished_recving or None,
                                 kv_connector_worker_meta=worker_meta)

    def _transfers_of(self, kind: str, event: int) -> list[Transfer]:
        return [self.transfers[job_id] for job_id in self._events.get((kind, event), ())]

    def _launch(self, kind: str, event: int, step: int) -> None:
        launched = self._launched[kind]
        due = step + self.timing.delay(kind, self._launches[kind])
        due = max(due, launched[-1][1]) if launched else due  # a stream completes its events in launch order
        self._launches[kind] += 1
        launched.append((event, due))
        for transfer in self._transfers_of(kind, event):
            transfer.submitted, transfer.due = step, due

    def _poll(self, kind: str, step: int) -> int:
        """The stream's high-water mark after a non-blocking poll (``_poll_stream_events``)."""
        launched = self._launched[kind]
        while launched and launched[0][1] <= step:
            self._hwm[kind] = launched.pop(0)[0]
        return self._hwm[kind]
