"""OffloadingConnector with one scheduler-half lifecycle bug each, for the scheduler-half check.

Each is vLLM's OffloadingConnector whose ``build_connector_meta`` changes the metadata its scheduler half
built in one way (the lines that carry the bug, and nothing else, differ); the worker half is vLLM's own,
which refuses CPU, so on CPU only the scheduler-half check (its worker played by the feeder) runs them.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.kv_offload.base import GPULoadStoreSpec


class _Edited(OffloadingConnector):
    """OffloadingConnector whose scheduler-half metadata ``edit`` changes; ``jobs_of`` names a request's jobs."""

    def build_connector_meta(self, scheduler_output):
        preempted = {job for rid in scheduler_output.preempted_req_ids or () for job in self._jobs_of(rid)}
        meta = super().build_connector_meta(scheduler_output)
        self.edit(meta, preempted)
        return meta

    def _jobs_of(self, rid: str) -> set[int]:
        status = self.connector_scheduler._req_status.get(rid)
        return set(status.transfer_jobs) if status is not None else set()

    def edit(self, meta, preempted_jobs: set[int]) -> None:
        raise NotImplementedError


class PreemptionBlindOffloadingConnector(_Edited):
    """Does not flush a preempted request's stores: vLLM hands its blocks to another request while the worker
    has yet to read them."""

    def edit(self, meta, preempted_jobs):
        meta.jobs_to_flush = set(meta.jobs_to_flush or ()) - preempted_jobs


class ReuseBlindOffloadingConnector(_Edited):
    """Flushes only preempted requests' stores: a finished request's store still in flight when vLLM hands its
    blocks on is not flushed (as if request_finished had returned False with nothing else guarding the blocks)."""

    def edit(self, meta, preempted_jobs):
        meta.jobs_to_flush = set(meta.jobs_to_flush or ()) & preempted_jobs


class ReissuingOffloadingConnector(_Edited):
    """Asks for every store job again in the next step's metadata: the worker would store it twice and report
    it finished twice."""

    _last: dict | None = None

    def edit(self, meta, preempted_jobs):
        last, self._last = self._last or {}, dict(meta.store_jobs)
        meta.store_jobs.update(last)


class DroppedStoreOffloadingConnector(_Edited):
    """Leaves its second store job out of the metadata while its scheduler half waits for it: the worker never
    runs it, so it is never reported."""

    _count = 0

    def edit(self, meta, preempted_jobs):
        for job_id in sorted(meta.store_jobs):
            self._count += 1
            if self._count == 2:
                del meta.store_jobs[job_id]


class ReversedLoadOffloadingConnector(_Edited):
    """Lists a load's destination blocks in reverse: every block is the request's, but the KV lands at the
    wrong positions."""

    def edit(self, meta, preempted_jobs):
        for job in meta.load_jobs.values():
            spec = job.dst_spec
            job.dst_spec = GPULoadStoreSpec(list(spec.block_ids[::-1]), group_sizes=spec.group_sizes,
                                            block_indices=spec.block_indices)
