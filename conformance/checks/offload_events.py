"""KV events of a connector's own stores: every block its offloading manager stores or evicts reaches vLLM's publisher.

With ``kv_events_config`` enabled (a user's setting) vLLM's Scheduler takes the connector's ``take_events()`` at the
end of each ``update_from_output`` and publishes them, after its KV cache manager's own, through its
``kv_event_publisher``; KV-aware routers read them to know which engine holds which offloaded blocks. An offloading
connector (vLLM's OffloadingConnector, or any connector whose scheduler half keeps a ``connector_scheduler.manager``
from vLLM's offloading registry) must turn each store its manager completes into one ``BlockStored`` and each
eviction into one ``BlockRemoved``, in the step the manager made it: a connector that drops them leaves a router
blind, one that repeats them or names blocks it never stored misleads it.

``EventsRecord`` follows one workload's engines (they may share one manager, as engines sharing a medium do): it
watches the manager's ``prepare_store`` (the keys it evicted, for which request) and ``complete_store`` (the keys
it stored), which vLLM's offloading API defines for every medium, and what the publisher was handed besides the KV
cache manager's own events. Blocks are compared as vLLM's default payload names them: the offload key's block hash
(bytes, or the 64-bit int ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` asks for), its KV cache group and the manager's
medium. A connector without such a manager has no ground truth here. The rules that need none (a ``BlockRemoved``
names only blocks announced stored, none announced twice, every event taken is published in its step) are the
scheduler driver's, judged for every connector at every step of every check (engine/published.py), not here. A
manager on a tier vLLM's CPU spec sizes is also held to the tier's room, store by store (``offload_tier.py``): the
eviction counts its events announce.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .offload_tier import TierRoom, tier_chunks

if TYPE_CHECKING:

    from ..engine.scheduler import SchedulerDriver

STORED, REMOVED = "BlockStored", "BlockRemoved"
HASH_MASK = (1 << 64) - 1  # vLLM's int form of a block hash keeps its low 64 bits


@dataclass(frozen=True)
class BlockEvent:
    """What one event tells a router about one offloaded block."""

    kind: str  # STORED or REMOVED
    block: bytes | int  # the block hash, as the event carries it
    group: int | None
    medium: str | None

    def block_text(self) -> str:
        block = self.block.hex()[:12] if isinstance(self.block, bytes) else f"{self.block:#x}"
        return f"{block} (group {self.group}, medium {self.medium})"

    def __str__(self) -> str:
        return f"{self.kind} of block {self.block_text()}"


@dataclass(frozen=True)
class ManagerChange:
    """One block the manager stored or evicted: the event it owes, and where it happened."""

    event: BlockEvent
    engine: str
    step: int
    request: str  # the request whose store job completed (stored) or whose store made room (evicted)


def _hash_forms(block: bytes) -> tuple[bytes, int]:
    return block, int.from_bytes(block, "big") & HASH_MASK


def published_blocks(event: Any) -> list[BlockEvent]:
    """A published event as block events: a ``BlockStored`` names its chunk by its last hash (vLLM's default payload
    names one hash per offloaded chunk; self-describing payloads end with it), a ``BlockRemoved`` every hash."""
    kind, hashes = type(event).__name__, list(getattr(event, "block_hashes", ()))
    group, medium = getattr(event, "group_idx", None), getattr(event, "medium", None)
    if kind == STORED:
        return [BlockEvent(kind, hashes[-1], group, medium)] if hashes else []
    if kind == REMOVED:
        return [BlockEvent(kind, block, group, medium) for block in hashes]
    return []


class EventsRecord:
    """Every engine of a workload: what offloading managers stored and evicted, and what reached the publisher."""

    def __init__(self) -> None:
        self.changes: list[ManagerChange] = []  # what the watched managers owe, in order
        self.published: list[tuple[str, int, BlockEvent]] = []  # (engine, step, event) of watched connectors' events
        self.engine, self.step = "", 0
        self._managers: dict[int, Any] = {}
        self._tiers: list[TierRoom] = []  # the room of each watched manager's tier, where vLLM's CPU spec sizes it

    @property
    def managers(self) -> int:
        return len(self._managers)

    def watch(self, engine: str, driver: SchedulerDriver) -> None:
        """Follow ``engine``'s Scheduler (one engine after another: the record judges them in order)."""
        self.engine, self.step = engine, 0
        scheduler = driver.scheduler
        manager = _offloading_manager(scheduler.connector)
        if manager is not None and id(manager) not in self._managers:
            self._managers[id(manager)] = manager
            chunks = tier_chunks(scheduler, manager)
            if chunks is not None:
                self._tiers.append(TierRoom(chunks))
                self._tiers[-1].watch(manager)
            self._watch_manager(manager)

        if manager is None:  # nothing to hold its events to here: the driver's rules judge them (engine/published.py)
            return

        def published(events: list[Any]) -> None:
            for event in events:
                blocks = published_blocks(event)
                if _medium_of(manager) is None:  # a medium the manager does not say
                    blocks = [replace(block, medium=None) for block in blocks]
                self.published.extend((self.engine, self.step, block) for block in blocks)

        driver.on_connector_events(published)

    def _watch_manager(self, manager: Any) -> None:
        pending: dict[bytes, str] = {}  # keys prepared for storing, not completed yet -> the request
        medium = _medium_of(manager)
        prepare_store, complete_store = manager.prepare_store, manager.complete_store

        def change(kind: str, key: bytes, request: str) -> ManagerChange:
            from vllm.v1.kv_offload.base import get_offload_block_hash, get_offload_group_idx

            event = BlockEvent(kind, get_offload_block_hash(key), get_offload_group_idx(key), medium)
            return ManagerChange(event, self.engine, self.step, request)

        def prepared(keys: Collection[bytes], req_context: Any) -> Any:
            output = prepare_store(keys, req_context)
            if output is not None:
                self.changes.extend(change(REMOVED, key, req_context.req_id) for key in output.evicted_keys)
                pending.update((key, req_context.req_id) for key in output.keys_to_store)
            return output

        def completed(keys: Collection[bytes], req_context: Any, *args: Any, **kwargs: Any) -> Any:
            success = kwargs.get("success", args[0] if args else True)
            done = [key for key in keys if key in pending]
            for key in done:
                request = pending.pop(key)
                if success:
                    self.changes.append(change(STORED, key, request))
            return complete_store(keys, req_context, *args, **kwargs)

        manager.prepare_store, manager.complete_store = prepared, completed

    def problem(self) -> str | None:
        """What went wrong so far, in words naming the step, the request and the event; None if nothing."""
        tiers = next((tier.problem for tier in self._tiers if tier.problem), None)
        return tiers or changes_problem(self.changes, self.published)

    def followed(self) -> int:
        """Manager changes whose events reached the publisher (all of them, while ``problem`` says nothing)."""
        return len(self.changes)

    def stores(self) -> int:
        """Blocks the watched managers stored."""
        return sum(change.event.kind == STORED for change in self.changes)


def _medium_of(manager: Any) -> str | None:
    """The medium a manager's events carry (vLLM's ``Medium`` value, as its event translation writes it)."""
    return getattr(getattr(manager, "medium", None), "value", None)


def _offloading_manager(connector: Any) -> Any:
    """The connector's scheduler half's offloading manager (vLLM's ``OffloadingManager``), or None."""
    from vllm.v1.kv_offload.base import OffloadingManager

    manager = getattr(getattr(connector, "connector_scheduler", None), "manager", None)
    return manager if isinstance(manager, OffloadingManager) else None


def _key(event: BlockEvent) -> tuple[str, int | None, str | None, bytes | int]:
    return event.kind, event.group, event.medium, event.block


def _forms(event: BlockEvent) -> Iterable[tuple[str, int | None, str | None, bytes | int]]:
    assert isinstance(event.block, bytes)  # a manager's key holds the hash as bytes
    return [(event.kind, event.group, event.medium, form) for form in _hash_forms(event.block)]


def changes_problem(changes: list[ManagerChange], published: list[tuple[str, int, BlockEvent]]) -> str | None:
    """Each change owes one published event of its kind, block, group and medium, by the end of the step it was made
    in (vLLM's Scheduler takes the connector's events after the step's stores completed); nothing else is owed."""
    left = Counter(_key(event) for _, _, event in published)
    for change in changes:
        form = next((form for form in _forms(change.event) if left[form] > 0), None)
        if form is None:
            got = [str(e) for engine, step, e in published if (engine, step) == (change.engine, change.step)]
            what = "stored" if change.event.kind == STORED else "evicted, to make room for a store of,"
            return (f"KV events: the offloading manager {what} block {change.event.block_text()} for request "
                    f"{change.request} in step {change.step} of the {change.engine} engine, and vLLM's event "
                    f"publisher was never handed its {change.event.kind} (the connector's events that step: "
                    f"{', '.join(got[:4]) or 'none'}): a KV-aware router never learns of it")
        left[form] -= 1
    # of events alike, the later ones are those no change accounts for: a repeat is the extra one
    extra: list[tuple[str, int, BlockEvent]] = []
    for engine, step, event in reversed(published):
        if left[_key(event)] > 0:
            left[_key(event)] -= 1
            extra.insert(0, (engine, step, event))
    if extra:
        engine, step, event = extra[0]
        return (f"KV events: in step {step} of the {engine} engine vLLM's event publisher was handed {event}, which "
                f"no store or eviction of the offloading manager accounts for ({len(extra)} such event(s)): a block "
                f"announced twice, or one the connector never stored")
    return None

