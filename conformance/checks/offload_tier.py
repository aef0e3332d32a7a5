"""The room of a CPU offloading tier: a store evicts only the blocks it has no room for, and never overfills the tier.

A user sizes OffloadingConnector's CPU tier with ``cpu_bytes_to_use``; vLLM's CPU spec (``CPUOffloadingSpec``) turns
it into a number of chunks, and its manager (``CPUOffloadingManager``) hands each stored block one of them. Its
``prepare_store`` returns the blocks it evicted "as a result" of the store (``OffloadingManager`` in
``vllm/v1/kv_offload/base.py``), and ``None`` only when the blocks "cannot be stored". So, with the blocks the tier
holds counted (those prepared for storing, less those evicted or whose store failed), every store:

* evicts no more blocks than the tier lacks room for: an extra eviction drops KV the user paid memory to keep, and a
  KV-aware router is told the block is gone;
* evicts at least that many: a tier holding more blocks than chunks has two blocks in one chunk;
* is refused only when it does not fit: a store the tier had room for, refused, is KV lost for nothing;
* evicts only blocks it holds whose store completed (``prepare_store``'s blocks are "protected from eviction until
  complete_store is called").

``TierRoom`` follows one manager through its ``prepare_store``, ``complete_store`` and ``reset_cache``; the room is
what vLLM's CPU spec sizes for the engine's configuration (``tier_chunks``), so only a tier vLLM's CPU spec (or a
medium built on it, as kvconform's CPU-memory medium is) sizes is judged. The workload's kv-events situation drives
it (``offload_events.EventsRecord``), on a tier of a few chunks its stores overflow.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.core.sched.scheduler import Scheduler


def tier_chunks(scheduler: Scheduler, manager: Any) -> int | None:
    """The chunks the engine's CPU tier has room for, as vLLM's CPU spec sizes them from its configuration, or None
    where ``manager`` is not vLLM's CPU manager or the connector's medium not vLLM's CPU spec or one built on it (no
    sizing to judge by)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    transfer = scheduler.vllm_config.kv_transfer_config
    if transfer is None or not isinstance(manager, CPUOffloadingManager):
        return None
    if not issubclass(OffloadingSpecFactory.get_spec_cls(transfer.kv_connector_extra_config), CPUOffloadingSpec):
        return None
    return int(CPUOffloadingSpec(build_offloading_config(scheduler.vllm_config, scheduler.kv_cache_config)).num_chunks)


@dataclass
class TierRoom:
    """What one tier of ``chunks`` chunks holds, store by store; ``problem`` is its first broken promise."""

    chunks: int
    held: set[bytes] = field(default_factory=set)  # blocks prepared for storing, not evicted nor failed
    pending: set[bytes] = field(default_factory=set)  # of those, blocks whose store has not completed
    problem: str | None = None

    def watch(self, manager: Any) -> None:
        """Follow ``manager``'s stores (the caller's problem check names the engine and step)."""
        prepare_store, complete_store, reset_cache = manager.prepare_store, manager.complete_store, manager.reset_cache

        def prepared(keys: Collection[bytes], req_context: Any) -> Any:
            keys = list(keys)
            output = prepare_store(keys, req_context)
            stored = None if output is None else list(output.keys_to_store)
            evicted = None if output is None else list(output.evicted_keys)
            self.note(store_problem(self, keys, stored, evicted), req_context.req_id)
            return output

        def completed(keys: Collection[bytes], req_context: Any, *args: Any, **kwargs: Any) -> Any:
            success = kwargs.get("success", args[0] if args else True)
            done = self.pending & set(keys)
            self.pending -= done
            if not success:
                self.held -= done
            return complete_store(keys, req_context, *args, **kwargs)

        def reset() -> Any:
            self.held.clear()
            self.pending.clear()
            return reset_cache()

        manager.prepare_store, manager.complete_store, manager.reset_cache = prepared, completed, reset

    def note(self, problem: str | None, request: str) -> None:
        """Keep the first problem, naming the request whose store it was."""
        if problem and self.problem is None:
            self.problem = f"CPU tier: a store for request {request}: {problem}"


def store_problem(tier: TierRoom, offered: list[bytes], stored: list[bytes] | None,
                  evicted: list[bytes] | None) -> str | None:
    """Judge one ``prepare_store`` of ``offered`` blocks (``stored`` and ``evicted``: its output, None when it refused)
    against the tier's room, and update what the tier holds."""
    held_before = len(tier.held)
    room = f"a tier of {tier.chunks} chunks holding {held_before} blocks"
    if stored is None or evicted is None:
        new = len(set(offered) - tier.held)
        if held_before + new <= tier.chunks:
            return (f"prepare_store refused a store of {new} new block(s) into {room}: it had room for them "
                    f"(None is for blocks that cannot be stored); their KV is lost for nothing")
        return None
    not_held = [key for key in evicted if key not in tier.held]
    in_flight = [key for key in evicted if key in tier.pending]
    lacking = max(0, held_before + len(set(stored) - tier.held) - tier.chunks)
    tier.held -= set(evicted)
    tier.pending -= set(evicted)
    tier.held |= set(stored)
    tier.pending |= set(stored)
    if not_held:
        return (f"prepare_store evicted {len(not_held)} block(s) the tier did not hold (first: "
                f"{not_held[0].hex()[:12]}), storing {len(stored)} into {room}")
    if in_flight:
        return (f"prepare_store evicted block {in_flight[0].hex()[:12]} while its own store was in flight (a block "
                f"prepare_store took is protected from eviction until complete_store)")
    if len(evicted) > lacking:
        return (f"prepare_store evicted {len(evicted)} block(s) to store {len(stored)} into {room}, which lacked "
                f"room for {lacking}: {len(evicted) - lacking} evicted with room to keep them (a store evicts "
                f"only the blocks it has no room for)")
    if len(tier.held) > tier.chunks:
        return (f"prepare_store evicted {len(evicted)} block(s) to store {len(stored)} into {room}, which lacked "
                f"room for {lacking}: the tier now holds {len(tier.held)} blocks in {tier.chunks} chunks")
    return None
