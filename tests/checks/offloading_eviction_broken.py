"""vLLM's OffloadingConnector whose CPU manager counts a store's evictions wrong, run whole on CPU over kvconform's
CPU-memory medium.

``FloorDivEvictionOffloadingConnector`` is vLLM's connector unmodified; its profile (offloading_eviction_broken.yaml,
the small-tier variant's settings: a tier of four chunks) names ``FloorDivEvictionSpec``, kvconform's CPU-memory
medium whose manager is vLLM 0.32's ``CPUOffloadingManager`` with one edit, the mutation floor's survivor at
``vllm/v1/kv_offload/cpu/manager.py:311``: ``num_chunks_to_evict = len(keys_to_store) // free`` for ``- free``. A
store that exactly fills the tier evicts a block it had room to keep (or is refused), one into a tier with one free
chunk evicts one block too many, and one into a full tier raises ZeroDivisionError.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from kvconform.conformance.connectors.cpu_memory_medium import CPUMemoryOffloadingSpec


class FloorDivEvictionManager(CPUOffloadingManager):
    def _get_num_free_chunks(self) -> int:
        """Read only at line 311, right after ``prepare_store`` appended ``len(keys_to_store)`` to
        ``allocation_sizes_in_current_batch``: the free count that makes line 311 compute ``len // free`` (the edit),
        ZeroDivisionError included."""
        free = super()._get_num_free_chunks()
        wanted = self.allocation_sizes_in_current_batch[-1]
        return wanted - wanted // free


class _FloorDivManagerSpec(CPUOffloadingSpec):
    def get_manager(self):
        """vLLM's manager as vLLM's CPU spec builds it, of the edited class."""
        manager = super().get_manager()
        manager.__class__ = FloorDivEvictionManager
        return manager


class FloorDivEvictionSpec(CPUMemoryOffloadingSpec, _FloorDivManagerSpec):
    """kvconform's CPU-memory medium, its manager made by ``_FloorDivManagerSpec`` (next in line after it)."""


class FloorDivEvictionOffloadingConnector(OffloadingConnector):
    """vLLM's OffloadingConnector unmodified; its profile names ``FloorDivEvictionSpec``."""
