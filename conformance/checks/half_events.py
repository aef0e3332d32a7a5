"""KV events of a scheduler half whose worker is played by a feeder: each finished store reaches vLLM's publisher.

With ``kv_events_config`` enabled (a user's setting) vLLM's Scheduler takes the connector's ``take_events()`` at the
end of each ``update_from_output`` and publishes them after its KV cache manager's own; KV-aware routers read them to
know which engine holds which offloaded blocks. For a family whose stores the scheduler-half check follows block by
block (checks/half_families.py, ``kv_events``), ``HalfEvents`` holds what the publisher is handed to those stores:
by the end of the ``update_from_output`` that tells vLLM's scheduler a store finished, one ``BlockStored`` per block
it stored, naming the block as vLLM's KV cache manager names it (the request's block hash, its parent's hash, its
tokens, the block size), so a router can place it as it places the GPU tier's blocks; nothing stored twice that was
stored once. The hashes compare in both forms vLLM publishes (bytes, or the 64-bit int
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` asks for). That a ``BlockRemoved`` names only a block an earlier
``BlockStored`` named is the scheduler driver's rule, judged for every connector at every step (engine/published.py),
not here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .offload_events import HASH_MASK, STORED

if TYPE_CHECKING:
    from ..engine.scheduler import SchedulerDriver

GPU_MEDIUM = "GPU"  # vllm.distributed.kv_events.MEDIUM_GPU: the KV cache manager's own tier


@dataclass(frozen=True)
class StoredBlock:
    """One block a store of the scheduler half copied, as its ``BlockStored`` must name it."""

    request: str
    index: int  # the block's index in the request
    block_hash: bytes
    parent: bytes | None  # the previous block's hash; None for the first block
    tokens: tuple[int, ...]

    def describe(self) -> str:
        return f"block {self.index} of request {self.request} (hash {self.block_hash.hex()[:12]})"


def hash_forms(block_hash: bytes | None) -> tuple[object, ...]:
    """The forms vLLM may publish a block hash in: bytes, or its low 64 bits as an int; None stays None."""
    if block_hash is None:
        return (None,)
    return block_hash, int.from_bytes(block_hash, "big") & HASH_MASK


def stored_blocks(request: str, block_hashes: list[bytes], tokens: list[int], indices: Iterable[int],
                  block_size: int) -> list[StoredBlock]:
    """The blocks ``indices`` of a request (its block hashes and tokens), as the events of a store of them name
    them."""
    return [StoredBlock(request, k, bytes(block_hashes[k]), bytes(block_hashes[k - 1]) if k else None,
                        tuple(tokens[k * block_size:(k + 1) * block_size])) for k in indices]


def block_stored_problem(block: StoredBlock, event: Any, block_size: int) -> str | None:
    """None when ``event`` (a ``BlockStored`` naming ``block``'s hash last) carries what vLLM's KV cache manager's
    events carry for it; else what differs, in words."""
    wrong = []
    if list(event.token_ids) != list(block.tokens):
        wrong.append(f"token_ids {list(event.token_ids)[:4]}{'...' if len(event.token_ids) > 4 else ''} "
                     f"({len(event.token_ids)} tokens) for the block's {len(block.tokens)} tokens")
    if event.parent_block_hash not in hash_forms(block.parent):
        wrong.append(f"parent_block_hash {event.parent_block_hash!r} for "
                     f"{block.parent.hex()[:12] if block.parent else None} (the previous block's hash)")
    if event.block_size != block_size:
        wrong.append(f"block_size {event.block_size} for {block_size}")
    if getattr(event, "medium", None) == GPU_MEDIUM:
        wrong.append(f"medium {GPU_MEDIUM} (the KV cache manager's own tier) for the offload tier's")
    if not wrong:
        return None
    return (f"the BlockStored of {block.describe()} carries {'; '.join(wrong)}: a KV-aware router rebuilds which "
            f"prefix a block holds from these, as from the KV cache manager's own events")


class HalfEvents:
    """What one scheduler's publisher was handed of its connector's events, against the stores it owes them for."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.owed: list[tuple[int, StoredBlock]] = []  # (step the store's report reached vLLM, the block)
        self.published: list[tuple[int, Any]] = []  # (publish count, a connector event)
        self.matched = 0  # owed blocks whose BlockStored was found
        self._publishes = 0
        self._unmatched: list[Any] = []  # published BlockStored events no owed block has claimed yet

    def watch(self, driver: SchedulerDriver) -> None:
        """Follow the connector's events in what ``driver``'s scheduler publishes (engine/scheduler.py)."""

        def published(events: list[Any]) -> None:
            self._publishes += 1
            for event in events:
                self.published.append((self._publishes, event))
                if type(event).__name__ == STORED:
                    self._unmatched.append(event)

        driver.on_connector_events(published)

    def owe(self, step: int, blocks: Iterable[StoredBlock]) -> None:
        """Blocks of stores whose finish step ``step``'s output told vLLM's scheduler."""
        self.owed.extend((step, block) for block in blocks)

    def problem(self) -> str | None:
        """Each owed block matched to one published ``BlockStored`` and held to ``block_stored_problem``; then no
        ``BlockStored`` left over. None, or what is wrong in words."""
        for step, block in self.owed:
            event = next((e for e in self._unmatched if e.block_hashes and e.block_hashes[-1] in
                          hash_forms(block.block_hash)), None)
            if event is None:
                return (f"KV events: the store of {block.describe()} was reported finished to vLLM's scheduler by "
                        f"step {step}'s output, and vLLM's event publisher was never handed its BlockStored (the "
                        f"connector's events so far: {self._describe_published()}): a KV-aware router never "
                        f"learns the offload tier holds it")
            self._unmatched.remove(event)
            self.matched += 1
            if problem := block_stored_problem(block, event, self.block_size):
                return f"KV events: {problem}"
        self.owed.clear()
        if self._unmatched:
            event = self._unmatched[0]
            return (f"KV events: vLLM's event publisher was handed a BlockStored of {event.block_hashes!r} that no "
                    f"store reported finished accounts for ({len(self._unmatched)} such event(s)): a block announced "
                    f"twice, or before its store finished")
        return None

    def _describe_published(self) -> str:
        kinds = [type(event).__name__ for _, event in self.published]
        return ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds))) or "none"
