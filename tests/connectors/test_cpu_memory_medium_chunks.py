"""conformance/connectors/cpu_memory_medium.py: the medium refuses a job whose CPU chunk ids are not chunks of its
store, as memory outside a real tier would fault; a negative id would otherwise wrap to the store's last rows in
torch's indexing and pass (the mutation floor's CPUOffloadingManager survivor, chunk ids counted from -1)."""

from __future__ import annotations

import shutil

import pytest
import torch
from vllm.v1.kv_offload.base import CanonicalKVCacheRef, CanonicalKVCaches, CanonicalKVCacheTensor, GPULoadStoreSpec
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

from kvconform.conformance.connectors.cpu_memory_medium import CPUMemoryWorker, Medium

PAGE, NUM_BLOCKS, NUM_CHUNKS = 8, 4, 3


def _worker(store_delay: int = 0) -> CPUMemoryWorker:
    cache = torch.arange(NUM_BLOCKS * PAGE, dtype=torch.int8).view(NUM_BLOCKS, PAGE)
    caches = CanonicalKVCaches([CanonicalKVCacheTensor(cache, PAGE)], [[CanonicalKVCacheRef(0, PAGE)]])
    held = Medium(None, manager=None)  # type: ignore[arg-type]  # the worker never asks the manager
    return CPUMemoryWorker(caches, blocks_per_chunk=1, num_chunks=NUM_CHUNKS, held=held, store_delay=store_delay)


def _blocks(*ids: int) -> GPULoadStoreSpec:
    return GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[0])


@pytest.mark.parametrize("chunk", [-1, NUM_CHUNKS])
@pytest.mark.parametrize("store_delay", [0, 2])
def test_a_store_to_a_chunk_outside_the_medium_is_refused_when_submitted(chunk, store_delay):
    worker = _worker(store_delay)
    with pytest.raises(ValueError, match=rf"store job 7 CPU chunk\(s\) \[{chunk}\] of \[0, {chunk}\], outside the "
                                         rf"medium's {NUM_CHUNKS} chunks \(0 to {NUM_CHUNKS - 1}\)"):
        worker.submit_store(7, _blocks(1, 2), CPULoadStoreSpec([0, chunk]))
    assert worker.get_finished() == [] and not worker.pending_stores


def test_a_load_from_a_chunk_outside_the_medium_is_refused():
    with pytest.raises(ValueError, match=r"load job 3 CPU chunk\(s\) \[-1\]"):
        _worker().submit_load(3, CPULoadStoreSpec([-1]), _blocks(2))


def test_chunks_of_the_store_round_trip():
    worker = _worker()
    last = NUM_CHUNKS - 1
    assert worker.submit_store(1, _blocks(1, 2), CPULoadStoreSpec([0, last]))
    worker.caches[0][3].zero_()
    assert worker.submit_load(2, CPULoadStoreSpec([last]), _blocks(3))
    assert torch.equal(worker.caches[0][3], worker.caches[0][2])
    assert [result.job_id for result in worker.get_finished()] == [1, 2]


def test_a_folder_made_again_at_the_same_path_gets_media_of_its_own(tmp_path):
    """pytest may give a later test the path of an earlier, removed test's folder: the media are the folder's, not
    the path's (the kv-events scenario once got an earlier test's manager, made with events off)."""
    from kvconform.conformance.connectors.cpu_memory_medium import medium

    folder = tmp_path / "kv-storage"
    folder.mkdir()
    first = medium(str(folder), "configuration", lambda: "manager of the first test")  # type: ignore[arg-type,return-value]
    assert medium(str(folder), "configuration", lambda: "another") is first  # type: ignore[arg-type,return-value]
    shutil.rmtree(folder)
    folder.mkdir()
    later = medium(str(folder), "configuration", lambda: "manager of the later test")  # type: ignore[arg-type,return-value]
    assert later is not first and later.manager == "manager of the later test"
