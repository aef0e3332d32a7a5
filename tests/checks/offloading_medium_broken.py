"""A CPU-memory medium for vLLM's OffloadingConnector with one copy bug, for the round-trip's byte comparison.

The connector is vLLM's OffloadingConnector, unchanged (a subclass only so the suite can name it); its profile
(offloading_medium_broken.yaml) names this module's spec, kvconform's CPU-memory medium whose loads put each
block's bytes into the next block of the request (the last into the first). Every claim, job and completion is
what the unmodified medium reports: only a check that compares the loaded bytes catches it.
"""

from __future__ import annotations

from dataclasses import replace

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector

from kvconform.conformance.connectors.cpu_memory_medium import CPUMemoryOffloadingSpec, CPUMemoryWorker


class OffByOneLoadWorker(CPUMemoryWorker):
    def job_copies(self, cache_spec, store_spec, to_store):
        copies = super().job_copies(cache_spec, store_spec, to_store)
        if to_store:
            return copies
        shifted = []
        for tensor_idx in dict.fromkeys(copy.tensor_idx for copy in copies):
            mine = [copy for copy in copies if copy.tensor_idx == tensor_idx]
            rows = [copy.cache_row for copy in mine]
            shifted += [replace(copy, cache_row=row) for copy, row in zip(mine, rows[1:] + rows[:1], strict=True)]
        return shifted


class OffByOneLoadSpec(CPUMemoryOffloadingSpec):
    worker_class = OffByOneLoadWorker


class OffByOneMediumOffloadingConnector(OffloadingConnector):
    """vLLM's OffloadingConnector; its profile gives it OffByOneLoadSpec as its medium."""
