"""What vLLM's scheduler publishes of its connector each step, KV events and transfer stats, judged as it does so.

At the end of every ``update_from_output`` vLLM's Scheduler (0.32) takes the connector's ``take_events()``, appends
them to its KV cache manager's own events and hands the batch to its ``kv_event_publisher``. It does so whether or
not ``kv_events_config`` enables events: without it the publisher is vLLM's null one, which drops the batch, and
most connectors take none then; so the events are judged at every step, enabled or not. KV-aware routers read the
batches to know which engine holds which blocks. With ``log_stats`` the same update returns ``SchedulerStats``,
whose ``kv_connector_stats`` the stats loggers read: the worker's ``kv_connector_stats`` of that step's
``KVConnectorOutput``, aggregated (by the connector's own ``aggregate``) with what the scheduler side's
``get_kv_connector_stats()`` returned, where it returned any that is not empty.

One function per rule, each returning None or the problem in words:

* ``removed_unannounced``: each block a ``BlockRemoved`` names is a copy an earlier ``BlockStored`` announced (of
  any engine over the same storage: engines sharing a tier evict each other's blocks) that no removal took back
  since;
* ``events_not_published``: the events vLLM's scheduler took from the connector in a step reach its publisher in
  that step, after the KV cache manager's own, as taken;
* ``stats_not_aggregated``: the connector stats vLLM's scheduler returned are the worker's and the scheduler side's
  together, neither dropped nor replaced.

The last two are vLLM's own behaviour: where a vLLM change or a scheduler class breaks them, the failure names
vLLM's scheduler, not the connector. A block is what a router keys it by: its hash (bytes, or the 64-bit int
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` asks for, as the events carry it), its KV cache group and its medium; a
``BlockStored`` and a ``BlockRemoved`` each name every hash they carry; ``AllBlocksCleared`` takes back every copy
that engine announced. A block announced stored twice with no removal between is a second copy, not a mistake:
vLLM's own ``BlockPool`` (the KV cache manager's, and SimpleCPUOffloadConnector's CPU tier) caches one hash in two
blocks when two requests compute it at once, announcing each and later removing each, and its ``full`` report mode
announces blocks it already holds again; so copies are counted, each removal taking back one. Where a store has a
ground truth (an offloading manager's stores, a feeder's), a repeat is judged against it (checks/offload_events.py,
checks/half_events.py). ``SchedulerDriver`` (engine/scheduler.py) feeds ``PublishedBlocks`` and ``StepPublication``
every step, so every check that drives vLLM's scheduler judges them.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

STORED, REMOVED, CLEARED = "BlockStored", "BlockRemoved", "AllBlocksCleared"
SHOWN = 4  # events named in a message; the rest are counted

Block = tuple[int | None, str | None, bytes | int]  # (group, medium, hash)


def blocks_of(event: Any) -> list[Block]:
    """The blocks an event names: every hash it carries, with its group and medium."""
    group, medium = getattr(event, "group_idx", None), getattr(event, "medium", None)
    return [(group, medium, block) for block in getattr(event, "block_hashes", None) or ()]


def block_text(block: Block) -> str:
    group, medium, block_hash = block
    shown = block_hash.hex()[:12] if isinstance(block_hash, bytes) else f"{block_hash:#x}"
    return f"{shown} (group {group}, medium {medium})"


def describe(events: list[Any]) -> str:
    """Events as a reader tells them apart: their kind and the blocks they name (hashes shortened)."""
    def one(event: Any) -> str:
        return f"{type(event).__name__}({', '.join(block_text(b) for b in blocks_of(event))})"

    more = f" and {len(events) - SHOWN} more" if len(events) > SHOWN else ""
    return f"{len(events)} event(s): {', '.join(one(e) for e in events[:SHOWN])}{more}" if events else "none"


@dataclass
class PublishedBlocks:
    """The copies of blocks the connectors of the engines over one storage announced held, and where each block was
    last taken back.

    Each engine's scheduler (``SchedulerDriver``) is one ``stream``; engines sharing a tier share the ledger (a rig
    hands its engines one), an engine of its own keeps its own."""

    held: dict[Block, Counter[int]] = field(default_factory=dict)  # block -> stream -> copies announced, not removed
    removed: dict[Block, str] = field(default_factory=dict)  # block -> where its last copy was taken back
    streams: int = 0

    def stream(self) -> int:
        """A new engine's stream number (1: the first over this storage)."""
        self.streams += 1
        return self.streams

    def take(self, events: Iterable[Any], stream: int, where: str) -> str | None:
        """Judge the events engine ``stream``'s scheduler took at ``where``, in order, then count them; None, or the
        first problem in words."""
        for event in events:
            kind = type(event).__name__
            if kind == CLEARED:
                for copies in self.held.values():
                    copies.pop(stream, None)
                continue
            for block in blocks_of(event):
                copies = self.held.setdefault(block, Counter())
                if kind == STORED:
                    copies[stream] += 1
                elif kind == REMOVED:
                    if problem := removed_unannounced(block, copies, self.removed.get(block)):
                        return problem
                    # the engine's own copy first; else another engine's over the shared tier
                    owner = stream if copies[stream] > 0 else next(s for s, n in copies.items() if n > 0)
                    copies[owner] -= 1
                    self.removed[block] = where
        return None


def removed_unannounced(block: Block, copies: Counter[int], removed_at: str | None) -> str | None:
    """None when some engine's connector announced a copy of ``block`` stored that no removal took back; else why
    not."""
    if any(n > 0 for n in copies.values()):
        return None
    since = (f"every copy announced was taken back, the last at {removed_at}" if removed_at else
             "no BlockStored ever named it")
    return (f"a BlockRemoved of block {block_text(block)}, which no engine over this storage holds as its events "
            f"tell it ({since}): a KV-aware router is told to drop a block it was never told of")


def events_not_published(taken: list[Any], own: int, published: list[Any]) -> str | None:
    """None when the events vLLM's scheduler took from the connector in an update (``taken``) were handed to its
    publisher in that update, after the ``own`` events of its KV cache manager, as taken; else what it handed."""
    handed = published[own:]
    if len(handed) == len(taken) and all(a is b for a, b in zip(handed, taken, strict=True)):
        return None
    return (f"it took {describe(taken)} from the connector's take_events() but handed its KV event publisher "
            f"{describe(handed)} after its KV cache manager's {own}: vLLM's Scheduler publishes what it takes in the "
            f"step it takes it, and a router never learns of what it drops")


def stats_not_aggregated(returned: dict[str, Any] | None, worker: Any, scheduler: Any) -> str | None:
    """None when the connector stats vLLM's scheduler returned (``SchedulerStats.kv_connector_stats``) are the
    worker's (``worker``, the step's ``KVConnectorOutput.kv_connector_stats``, as reported) aggregated with the
    scheduler side's (``scheduler``, what its ``get_kv_connector_stats()`` returned), where either has any."""
    counted = scheduler if scheduler is not None and not scheduler.is_empty() else None
    if worker is not None and counted is not None:
        expected = copy.deepcopy(worker).aggregate(copy.deepcopy(counted))
    else:
        expected = worker if worker is not None else counted
    payload = expected.to_dict() if expected else None
    if (returned or None) == (payload or None):
        return None
    worker_data, scheduler_data = (s.to_dict() if s is not None else None for s in (worker, scheduler))
    how = {repr(scheduler_data): "the scheduler side's alone: the worker's were dropped",
           repr(worker_data): "the worker's alone: the scheduler side's were dropped"}.get(repr(returned or None),
                                                                                         "neither side's, nor both")
    return (f"it returned connector stats {returned!r} in its SchedulerStats, {how}; the worker reported "
            f"{worker_data!r} in KVConnectorOutput.kv_connector_stats and the scheduler side's "
            f"get_kv_connector_stats() returned {scheduler_data!r}, whose aggregate is {payload!r}: vLLM's stats "
            f"loggers count what the scheduler returns, so whatever it leaves out is never logged or exported")


@dataclass
class StepPublication:
    """What one ``update_from_output`` took from the connector and handed on: its events, the KV cache manager's
    own, the batches published, and (with stats on) both sides' connector stats, copied as given."""

    taken: list[Any] = field(default_factory=list)
    own: list[Any] = field(default_factory=list)  # the KV cache manager's events vLLM took, which come first
    published: list[Any] = field(default_factory=list)
    worker_stats: Any = None
    scheduler_stats: Any = None


def returned_connector_stats(outputs: Any) -> tuple[bool, dict[str, Any] | None]:
    """Whether ``update_from_output``'s outputs carry ``SchedulerStats``, and their connector stats."""
    for engine_outputs in (outputs or {}).values():
        stats = getattr(engine_outputs, "scheduler_stats", None)
        if stats is not None:
            return True, stats.kv_connector_stats
    return False, None
