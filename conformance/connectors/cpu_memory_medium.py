"""A CPU-memory transfer medium for vLLM's OffloadingConnector, so the connector runs end to end on CPU.

OffloadingConnector takes its medium from vLLM's spec registry (``vllm.v1.kv_offload.factory``): the
profile's ``spec_name`` and ``spec_module_path`` name this module's spec, as a third-party backend's would.
vLLM's own CPU medium (``CPUOffloadingSpec``) refuses every platform but CUDA-alike and XPU GPUs in
``get_worker``, and its copy handlers need device tensors, streams and events; nothing else in the connector
(its scheduler, its worker, its config, vLLM's CPU manager) asks for a GPU. So this spec is vLLM's
``CPUOffloadingSpec`` (its sizing from ``cpu_bytes_to_use`` and its LRU/ARC ``CPUOffloadingManager``) with
one change: its worker copies between the worker's KV cache tensors and a store of CPU tensors, chunk for
chunk as vLLM's handlers lay them out (vLLM 0.32 names a job's cache blocks by id, 0.34 by address,
``DevicePointers``: both are read as rows of the cache tensors), and finishes a load when it is submitted and a
store ``store_delay`` polls later. The connector, its scheduler and worker halves and the manager stay vLLM's
own; the round-trip compares the bytes.

Engines that name one medium (``medium`` in the extra config) share it only where their KV configurations agree
(model, KV dtype, groups and layers, bytes per block, tokens per hash and chunk), as vLLM's own shared tiers key
their stores (``vllm/v1/kv_offload/file_mapper.py``): an offload key is a block hash and a group, which say
nothing of the configuration, so a medium shared between engines must keep configurations apart itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCacheRef,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingManager,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.config import OffloadingConfig
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec


@dataclass(frozen=True)
class BlockCopy:
    """One KV block's bytes of one cache tensor: row ``cache_row`` of the worker's cache, and its place in the
    store (chunk ``chunk``, the ``slot``-th block of that chunk)."""

    tensor_idx: int
    cache_row: int
    chunk: int
    slot: int
    num_bytes: int


def block_copies(cache_spec: GPULoadStoreSpec, store_spec: BlockIDsLoadStoreSpec, blocks_per_chunk: int,
                 refs_per_group: list[list[CanonicalKVCacheRef]]) -> list[BlockCopy]:
    """The copies a job makes, as vLLM's CPU handlers lay chunks out (``cpu/gpu_worker.py``): per group, its
    cache blocks in order, the first one ``block_indices[g] % blocks_per_chunk`` blocks into its first chunk."""
    copies: list[BlockCopy] = []
    cache_offset = chunk_offset = 0
    groups = zip(refs_per_group, cache_spec.group_sizes, cache_spec.block_indices, strict=True)
    for refs, group_size, block_index in groups:
        if group_size == 0:
            continue
        skip = block_index % blocks_per_chunk
        rows = cache_spec.block_ids[cache_offset:cache_offset + group_size]
        num_chunks = -(-(group_size + skip) // blocks_per_chunk)
        chunks = store_spec.block_ids[chunk_offset:chunk_offset + num_chunks]
        for ref in refs:
            for i, row in enumerate(rows):
                chunk, slot = divmod(i + skip, blocks_per_chunk)
                copies.append(BlockCopy(ref.tensor_idx, int(row), int(chunks[chunk]), slot, ref.page_size_bytes))
        cache_offset += group_size
        chunk_offset += num_chunks
    assert cache_offset == len(cache_spec.block_ids) and chunk_offset == len(store_spec.block_ids), (
        f"job's specs disagree: {len(cache_spec.block_ids)} cache blocks in groups {list(cache_spec.group_sizes)},"
        f" {len(store_spec.block_ids)} chunks, {blocks_per_chunk} blocks per chunk")
    return copies


def pointer_copies(pointers: Any, store_spec: BlockIDsLoadStoreSpec, blocks_per_chunk: int,
                   caches: list[torch.Tensor]) -> list[BlockCopy]:
    """The copies a job makes where vLLM hands the worker its blocks as pointers (``DevicePointers``, from vLLM
    0.34): per group, per data reference, each block's address and size, the first block ``block_indices[g] %
    blocks_per_chunk`` blocks into its first chunk. An address is read back as the row of the cache tensor holding
    it, so both kinds of job copy the same (tensor, row) blocks to the same store slots."""
    from vllm.v1.kv_offload.pointer_utils import iter_pointer_groups

    rows = [(t.data_ptr(), t.data_ptr() + t.shape[0] * t.stride(0), t.stride(0)) for t in caches]

    def row_of(address: int) -> tuple[int, int]:
        for index, (start, end, stride) in enumerate(rows):
            if start <= address < end and (address - start) % stride == 0:
                return index, (address - start) // stride
        raise ValueError(f"vLLM handed the worker address {address:#x}, the start of no block of its KV caches")

    copies: list[BlockCopy] = []
    chunk_offset = 0
    for group in iter_pointer_groups(pointers, blocks_per_chunk):
        chunks = store_spec.block_ids[chunk_offset:chunk_offset + group.n_chunks]
        for ref in range(group.n_data_refs):
            first = group.dev_ptr_offset + ref * group.group_size
            for i in range(group.group_size):
                tensor_idx, row = row_of(int(pointers.ptrs[first + i]))
                chunk, slot = divmod(i + group.skip, blocks_per_chunk)
                copies.append(BlockCopy(tensor_idx, row, int(chunks[chunk]), slot, int(pointers.sizes[first + i])))
        chunk_offset += group.n_chunks
    return copies


@dataclass
class Medium:
    """What one CPU-memory medium holds: vLLM's manager (the index of what is stored, in the scheduler) and the
    store itself (per cache tensor, ``num_chunks`` rows of one chunk's bytes; made by the first worker)."""

    key: str | None
    manager: OffloadingManager
    store: list[torch.Tensor] | None = None


# The media engines of this process share, per KV configuration, all under one name at a time (a new name
# replaces them, so a run keeps one medium's stores)
_shared: dict[str, Medium] = {}


def configuration_of(config: OffloadingConfig) -> str:
    """What a stored block's bytes mean, as vLLM's shared file tier keys its folders (``FileMapper``'s fields)."""
    groups = [(group.tokens_per_block, group.layer_names) for group in config.groups]
    return repr((config.model.name, config.model.dtype, groups, config.worker_kv_bytes_per_block,
                 config.cache.tokens_per_hash, config.cache.blocks_per_chunk, config.kv_cache_layout))


# written into a medium's folder when its first medium is made: the folder's incarnation
INCARNATION_FILE = ".kvconform-medium"


def incarnation(key: str) -> str:
    """``key`` with the incarnation of the folder it names (the profiles name ``{storage}``, a fresh folder per test):
    pytest numbers a test's folder anew once an earlier one is removed, so a later test may get the same path, and
    must not get the media, stores and manager settings (events on or off) of the test that had it before. A key
    that names no folder is kept as it is."""
    folder = Path(key)
    if not folder.is_dir():
        return key
    mark = folder / INCARNATION_FILE
    if not mark.exists():
        mark.write_text(uuid.uuid4().hex)
    return f"{key}#{mark.read_text()}"


def medium(key: str | None, configuration: str, new_manager: Callable[[], OffloadingManager]) -> Medium:
    """The medium named ``key`` for engines of ``configuration``, made with ``new_manager`` when this process holds
    none; a private one (for this spec alone) when ``key`` is None."""
    if key is None:
        return Medium(None, new_manager())
    key = incarnation(key)
    if any(held.key != key for held in _shared.values()):
        _shared.clear()
    if configuration not in _shared:
        _shared[configuration] = Medium(key, new_manager())
    return _shared[configuration]


class CPUMemoryWorker(OffloadingWorker):
    """Copies between the worker's KV cache tensors and the medium's store. A load is done when it is submitted; a
    store reads the cache ``store_delay`` ``get_finished`` calls after its submission (0: at once), or when
    ``wait`` asks for it, as a device copy on its own stream may run any time before its event is reported; each
    job is reported by the next ``get_finished`` after it ran."""

    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int, num_chunks: int, held: Medium,
                 store_delay: int = 0):
        self.caches = [entry.tensor for entry in kv_caches.tensors]
        self.page_sizes = [entry.page_size_bytes for entry in kv_caches.tensors]
        self.refs_per_group = kv_caches.group_data_refs
        self.blocks_per_chunk = blocks_per_chunk
        for group, refs in enumerate(self.refs_per_group):
            for ref in refs:
                row = self.caches[ref.tensor_idx]
                if ref.page_size_bytes > row.shape[1]:
                    raise ValueError(
                        f"vLLM's OffloadingConnector worker handed KV group {group} a cache view of "
                        f"{row.shape[1]}-byte block rows (shape {tuple(row.shape)}, strides {row.stride()}) for "
                        f"{ref.page_size_bytes}-byte pages: a block's bytes are not one row of the view")
        shapes = [(num_chunks, page * blocks_per_chunk) for page in self.page_sizes]
        if held.store is None:
            held.store = [torch.zeros(shape, dtype=torch.int8) for shape in shapes]
        if [tuple(t.shape) for t in held.store] != shapes:
            raise ValueError(f"CPU-memory medium {held.key!r} holds chunks of shapes "
                             f"{[tuple(t.shape) for t in held.store]}; this worker's KV cache needs {shapes}")
        self.store = held.store
        self.num_chunks = num_chunks
        self.finished: list[TransferResult] = []
        self.store_delay = store_delay
        self.pending_stores: dict[int, tuple[int, Callable[[], bool]]] = {}  # job -> (polls left, run it)

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        assert isinstance(dst_spec, BlockIDsLoadStoreSpec)
        self.check_chunks(job_id, "store", dst_spec)
        if self.store_delay == 0:
            return self._run(job_id, src_spec, dst_spec, to_store=True)
        self.pending_stores[job_id] = (self.store_delay,
                                       lambda: self._run(job_id, src_spec, dst_spec, to_store=True))
        return True

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec,
                    expedited: bool = False) -> bool:
        assert isinstance(src_spec, BlockIDsLoadStoreSpec)
        self.check_chunks(job_id, "load", src_spec)
        return self._run(job_id, dst_spec, src_spec, to_store=False)

    def check_chunks(self, job_id: int, kind: str, store_spec: BlockIDsLoadStoreSpec) -> None:
        """The job's chunks are chunks of the store: vLLM's manager hands out ids ``0 .. num_chunks - 1`` of the
        spec's ``num_chunks``, and any other id is memory outside the tier (a negative one would otherwise wrap to
        the store's last rows here, as torch indexes, and pass)."""
        outside = [int(chunk) for chunk in store_spec.block_ids if not 0 <= int(chunk) < self.num_chunks]
        if outside:
            raise ValueError(f"vLLM's offloading manager gave {kind} job {job_id} CPU chunk(s) {outside} of "
                             f"{[int(c) for c in store_spec.block_ids]}, outside the medium's {self.num_chunks} chunks "
                             f"(0 to {self.num_chunks - 1}): the job would {kind} KV in memory the tier does not hold")

    def _run(self, job_id: int, cache_spec: GPULoadStoreSpec, store_spec: BlockIDsLoadStoreSpec,
             to_store: bool) -> bool:
        start = time.perf_counter()
        copies = self.job_copies(cache_spec, store_spec, to_store)
        for copy in copies:
            self.copy_block(copy, to_store)
        self.finished.append(TransferResult(job_id, success=True, transfer_size=sum(c.num_bytes for c in copies),
                                            transfer_time=time.perf_counter() - start))
        return True

    def job_copies(self, cache_spec: GPULoadStoreSpec, store_spec: BlockIDsLoadStoreSpec,
                   to_store: bool) -> list[BlockCopy]:
        """The blocks a store (``to_store``) or load copies, whichever way vLLM names the cache's blocks."""
        if isinstance(cache_spec, GPULoadStoreSpec):
            return block_copies(cache_spec, store_spec, self.blocks_per_chunk, self.refs_per_group)
        return pointer_copies(cache_spec, store_spec, self.blocks_per_chunk, self.caches)  # vLLM 0.34's pointers

    def copy_block(self, copy: BlockCopy, to_store: bool) -> None:
        """One block's bytes, cache to store (``to_store``) or store to cache."""
        cache = self.caches[copy.tensor_idx][copy.cache_row, :copy.num_bytes]
        offset = copy.slot * self.page_sizes[copy.tensor_idx]
        stored = self.store[copy.tensor_idx][copy.chunk, offset:offset + copy.num_bytes]
        if to_store:
            stored.copy_(cache)
        else:
            cache.copy_(stored)

    def get_finished(self) -> list[TransferResult]:
        for job_id, (polls, run) in list(self.pending_stores.items()):
            if polls <= 1:
                del self.pending_stores[job_id]
                run()
            else:
                self.pending_stores[job_id] = (polls - 1, run)
        finished, self.finished = self.finished, []
        return finished

    def wait(self, job_ids: set[int]) -> None:
        for job_id in sorted(job_ids & self.pending_stores.keys()):
            self.pending_stores.pop(job_id)[1]()

    def shutdown(self) -> None:
        self.caches.clear()


class CPUMemoryOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec whose worker is :class:`CPUMemoryWorker`, on any platform."""

    worker_class: type[CPUMemoryWorker] = CPUMemoryWorker

    def __init__(self, config: OffloadingConfig):
        super().__init__(config)
        key = self.extra_config.get("medium")
        self.medium = medium(None if key is None else str(key), configuration_of(config), super().get_manager)
        self._memory_worker: CPUMemoryWorker | None = None

    def get_manager(self) -> OffloadingManager:
        return self.medium.manager

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self.config.canonical_layout:
            raise ValueError("CPUMemoryOffloadingSpec keeps each worker's own page layout: "
                             "kv_connector_extra_config canonical_layout is not supported")
        if self._memory_worker is None:
            self._memory_worker = self.worker_class(kv_caches, self.blocks_per_chunk, self.num_chunks,
                                                    self.medium, int(self.extra_config.get("store_delay", 0)))
        return self._memory_worker

