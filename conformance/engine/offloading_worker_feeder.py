"""A connector's scheduler half in vLLM's real Scheduler, its worker half played by a worker-results feeder.

For connectors whose worker half refuses the platform (OffloadingConnector on CPU:
``CPUOffloadingSpec.get_worker`` raises), so the scheduler half's lifecycle still runs here. Real: vLLM's
``Scheduler`` stepped as the engine core steps it (``SchedulerDriver``), its KV cache manager and block
pool, and the scheduler half vLLM builds through ``KVConnectorFactory``; nothing of vLLM is mocked.
Played: the worker half, by ``OffloadingWorkerFeeder``, which does per step what
``OffloadingConnectorWorker`` does in the model runner's order but moves no bytes and finishes each
transfer when its ``Timing`` says (its docstring gives the order). Delays may finish transfers out of
submission order: ``OffloadingWorker.get_finished`` promises no order, and other offloading backends
finish as their I/O does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput


@dataclass(frozen=True)
class Timing:
    """When the feeder finishes transfers: the steps from submission to the report, cycled over transfers
    in submission order (0: reported at the end of the step that submitted it, after its forward)."""

    name: str
    store_delays: tuple[int, ...]
    load_delays: tuple[int, ...]
    doc: str

    def delay(self, kind: str, index: int) -> int:
        delays = self.store_delays if kind == "store" else self.load_delays
        return delays[index % len(delays)]


TIMINGS = {t.name: t for t in (
    Timing("immediate", (0,), (0,), "every transfer reported at the end of the step that submitted it"),
    Timing("next-step", (1,), (1,), "every transfer reported one step after its submission"),
    Timing("late-out-of-order", (4, 0, 2, 1), (2, 0, 3), "stores reported 0 to 4 steps after submission, "
           "later ones before earlier ones; loads 0 to 3 steps"),
)}


JobId = int | str  # a job's id: OffloadingConnector's job id; "event:request" for a per-event worker's part


@dataclass
class Transfer:
    """One job of the scheduler half's metadata, as the feeder (the worker) runs it."""

    job_id: JobId
    kind: str  # "store" (reads GPU blocks) or "load" (writes GPU blocks)
    req_id: str
    blocks: list[int]  # the GPU block ids it reads (a store) or writes (a load)
    issued: int  # the step whose metadata asked for it
    submitted: int | None = None
    due: int | None = None  # the step at whose end it is reported
    flushed: int | None = None  # the step whose jobs_to_flush waited for it
    reported: int | None = None

    @property
    def done(self) -> bool:
        """Whether it has read (a store) or written (a load) its GPU blocks in full."""
        return self.flushed is not None or self.reported is not None

    def describe(self) -> str:
        what = f"{self.kind} job {self.job_id} of request {self.req_id} (GPU blocks {self.blocks}; asked for at step " \
               f"{self.issued}"
        if self.submitted is not None:
            what += f", submitted at step {self.submitted}, due at step {self.due}"
        return what + ")"


@dataclass(frozen=True)
class Ask:
    """One request's part of a transfer the scheduler half's metadata asks the worker for."""

    job_id: JobId
    kind: str  # "store" (reads GPU blocks) or "load" (writes GPU blocks)
    req_id: str | None  # None: no request holds these blocks
    blocks: list[int]
    first_index: int | None = None  # a load's first block index in its request's table, where the metadata says


class FeederMismatch(vllm_api.VllmApiError):
    """The scheduler half's metadata is not the shape the feeder plays the worker of (vLLM 0.32's
    OffloadingConnectorMetadata): kvconform cannot play this worker, which is no finding about the connector."""


def gpu_block_ids(spec: object, what: str) -> list[int]:
    """The GPU block ids of a ``GPULoadStoreSpec`` (a store's source, a load's destination)."""
    ids = getattr(spec, "block_ids", None)
    if ids is None:
        raise FeederMismatch(f"the worker-results feeder reads the GPU block ids of a {what} from its spec's "
                             f"block_ids (vLLM 0.32's GPULoadStoreSpec); this vLLM's is a {type(spec).__name__} "
                             f"without them")
    return [int(b) for b in ids]


def offloading_common() -> ModuleType:
    """vLLM's offloading/common.py (the connector's metadata both ways), where this vLLM keeps it."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading import common
    except ImportError as exc:
        raise FeederMismatch(f"the worker-results feeder reads OffloadingConnector's metadata from vLLM 0.32's "
                             f"vllm/distributed/kv_transfer/kv_connector/v1/offloading/common.py, which this "
                             f"vLLM lacks ({exc})") from None
    module: ModuleType = common
    return module


def offloading_jobs(metadata: object) -> tuple[dict[int, Any], dict[int, Any], set[int]]:
    """(load_jobs, store_jobs, jobs_to_flush) of an OffloadingConnectorMetadata, checked for the fields the
    feeder reads; a metadata of another shape is ``FeederMismatch``."""
    OffloadingConnectorMetadata = offloading_common().OffloadingConnectorMetadata

    if not isinstance(metadata, OffloadingConnectorMetadata):
        raise FeederMismatch(f"the worker-results feeder plays OffloadingConnector's worker half, whose metadata is "
                             f"an OffloadingConnectorMetadata; the scheduler half sent a {type(metadata).__name__}")
    for jobs in (metadata.load_jobs, metadata.store_jobs):
        for job in jobs.values():
            if not (hasattr(job, "req_id") and hasattr(job, "src_spec") and hasattr(job, "dst_spec")):
                raise FeederMismatch(f"the worker-results feeder reads vLLM 0.32's TransferJob (req_id, src_spec, "
                                     f"dst_spec); this vLLM's {type(job).__name__} has "
                                     f"{sorted(vars(job)) if hasattr(job, '__dict__') else type(job).__name__}")
    return dict(metadata.load_jobs), dict(metadata.store_jobs), set(metadata.jobs_to_flush or ())


def offloading_asks(metadata: object) -> list[Ask]:
    """An OffloadingConnectorMetadata's load and store jobs as ``Ask`` s (a load's ``block_indices``, where it names
    one group's, as its first index)."""
    loads, stores, _ = offloading_jobs(metadata)
    asks = [Ask(job_id, "store", job.req_id, gpu_block_ids(job.src_spec, "store")) for job_id, job in stores.items()]
    for job_id, job in loads.items():
        indices = list(getattr(job.dst_spec, "block_indices", None) or [])
        asks.append(Ask(job_id, "load", job.req_id, gpu_block_ids(job.dst_spec, "load"),
                        int(indices[0]) if len(indices) == 1 else None))
    return asks


class TransferLedger:
    """What every feeder answers from its ``transfers`` (each job ever asked for, by job id): those in flight."""

    transfers: dict[JobId, Transfer]

    def in_flight(self) -> list[Transfer]:
        """Transfers asked for and not reported yet."""
        return [t for t in self.transfers.values() if t.reported is None]

    def idle(self) -> bool:
        return not self.in_flight()


@dataclass
class OffloadingWorkerFeeder(TransferLedger):
    """OffloadingConnector's worker half as its scheduler half sees it: the step's jobs run, finished on a
    ``Timing``, reported in a ``KVConnectorOutput`` as vLLM's runner reports them. Moves no bytes.

    Per step, in the model runner's order (gpu_model_runner.py calls ``handle_preemptions``, then
    kv_connector_model_runner_mixin.py's ``_get_kv_connector_output`` runs the rest), as
    vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py does:

    * ``handle_preemptions``: the step's ``jobs_to_flush`` that are this step's store jobs are taken out of
      ``store_jobs``; those and the stores deferred from the previous step are submitted; then the flushed
      jobs are waited for (``OffloadingWorker.wait``), so they are done before the forward;
    * ``start_kv_transfers``: the stores deferred from the previous step (if still unsubmitted) and the
      step's ``load_jobs`` are submitted;
    * (the forward: a callback, so a check can see what it writes)
    * ``prepare_store_kv`` (``wait_for_save``): the step's remaining ``store_jobs`` are deferred to the next
      step's start ("so that offloading starts AFTER transfers related to token sampling");
    * ``get_finished`` + ``build_connector_worker_meta``: each transfer due by this step (its delay counted
      from its submission; a flushed one is due at once) is reported once, as ``completed_jobs {job_id: 1}``
      of an ``OffloadingWorkerMetadata`` in ``KVConnectorOutput.kv_connector_worker_meta``; a load's request
      id also in ``finished_recving``; stores never in ``finished_sending`` (the worker returns ``set()``
      there: the scheduler half tracks stores by job id). One worker: vLLM counts a job done when
      ``world_size`` (here 1) workers reported it.
    """

    timing: Timing
    # The model's forward, after the flushes and before the step's loads start and its stores are deferred: a
    # check passes a callback that sees what the forward (and the step's loads) write while the feeder's
    # transfers are, or are not, done.
    forward: Callable[[object], None] | None = None
    transfers: dict[JobId, Transfer] = field(default_factory=dict)  # every job ever asked for, by job id
    step_index: int = -1
    _deferred: list[int] = field(default_factory=list)  # stores to submit at the next step's start
    _submitted: dict[str, int] = field(default_factory=lambda: {"store": 0, "load": 0})

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        """One model-runner step of the worker half; returns the step's ``KVConnectorOutput``."""
        KVConnectorOutput = vllm_api.find("KVConnectorOutput")
        OffloadingWorkerMetadata = offloading_common().OffloadingWorkerMetadata

        self.step_index += 1
        step = self.step_index
        load_jobs, store_jobs, flush = offloading_jobs(scheduler_output.kv_connector_metadata)
        for job_id, job in store_jobs.items():
            self.transfers[job_id] = Transfer(job_id, "store", job.req_id, gpu_block_ids(job.src_spec, "store"), step)
        for job_id, job in load_jobs.items():
            self.transfers[job_id] = Transfer(job_id, "load", job.req_id, gpu_block_ids(job.dst_spec, "load"), step)

        # handle_preemptions: flushed store jobs of this step join the deferred ones; all are submitted;
        # the flushed ones are waited for
        for job_id in flush:
            if store_jobs.pop(job_id, None) is not None:
                self._deferred.append(job_id)
        self._submit_deferred(step)
        for job_id in flush:
            transfer = self.transfers.get(job_id)
            if transfer is not None and transfer.submitted is not None and not transfer.done:
                transfer.flushed, transfer.due = step, step  # OffloadingWorker.wait(): done before the forward
        # start_kv_transfers (Offloading's loads are asynchronous: started after the forward; the deferred
        # stores were submitted above)
        if self.forward is not None:  # called on every step, so a check sees a step's loads without tokens too
            self.forward(scheduler_output)
        for job_id in load_jobs:
            self._submit(self.transfers[job_id], step)
        # wait_for_save -> prepare_store_kv: the step's stores start at the next step
        self._deferred.extend(store_jobs)

        # get_finished + build_connector_worker_meta
        meta = OffloadingWorkerMetadata()
        finished_recving: set[str] = set()
        for transfer in sorted(self.in_flight(), key=lambda t: (t.due if t.due is not None else step + 1, t.job_id)):
            if transfer.due is None or transfer.due > step:
                continue
            transfer.reported = step
            meta.mark_completed(int(transfer.job_id))
            if transfer.kind == "load":
                finished_recving.add(transfer.req_id)
        return KVConnectorOutput(finished_sending=set(), finished_recving=finished_recving,
                                 kv_connector_worker_meta=meta if meta.completed_jobs else None)

    def _submit_deferred(self, step: int) -> None:
        for job_id in self._deferred:
            self._submit(self.transfers[job_id], step)
        self._deferred.clear()

    def _submit(self, transfer: Transfer, step: int) -> None:
        transfer.submitted = step
        transfer.due = step + self.timing.delay(transfer.kind, self._submitted[transfer.kind])
        self._submitted[transfer.kind] += 1
