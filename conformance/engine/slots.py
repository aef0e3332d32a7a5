"""Where a token's KV lives: vLLM's paged layout, decoded in one place.

vLLM hands each request a block table per KV cache group; token position ``p``
lives in block ``table[p // block_size]`` at offset ``p % block_size``, and a
standard cache view is ``[blocks, heads, block_size, head_size]`` (``[B, H, N, C]``).
Every check that compares or writes a request's KV (round-trip, load failures,
the P/D pair, workloads, the bench) indexes slots through these functions, so a
change in that layout is one edit here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput


def token_slots(block_ids: list[int], positions: Sequence[int], block_size: int,
                device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(block id, offset in the block) of each token position (a range, or any positions), from a request's block
    table."""
    pos = (torch.arange(positions.start, positions.stop, dtype=torch.long) if isinstance(positions, range)
           else torch.tensor(list(positions), dtype=torch.long))
    blocks = torch.tensor(block_ids, dtype=torch.long)[pos // block_size]
    offsets = pos % block_size
    return (blocks, offsets) if device is None else (blocks.to(device), offsets.to(device))


def token_slot_bytes(view: torch.Tensor, block_ids: list[int], tokens: int | Sequence[int],
                     block_size: int) -> torch.Tensor:
    """The bytes of a request's first ``tokens`` token slots (or of the slots at positions ``tokens``) in a standard
    ``[B, H, N, C]`` view, a row each."""
    blocks, offsets = token_slots(block_ids, range(tokens) if isinstance(tokens, int) else tokens, block_size,
                                  view.device)
    return view[blocks, :, offsets].contiguous().view(torch.uint8).flatten(1)


def leading_blocks(block_ids: list[int], count: int, device: torch.device | str) -> torch.Tensor:
    """The first ``count`` block ids of a request's table, as an index tensor on ``device``."""
    return torch.tensor(block_ids[:count], dtype=torch.long, device=device)


def runner_block_ids(outputs: Sequence[SchedulerOutput], request_id: str) -> tuple[list[int], ...]:
    """The block table a model runner keeps for a request, per group, from the scheduler's outputs in order: the
    table it was first scheduled with, each later step's new block ids appended (replaced where it resumed).

    vLLM's scheduler may later free a sliding window's blocks below the window (its own table then holds the null
    block there), but the runner's table keeps the ids it computed or loaded those tokens in."""
    table: tuple[list[int], ...] = ()
    for output in outputs:
        new = next((data.block_ids for data in output.scheduled_new_reqs if data.req_id == request_id), None)
        if new is not None:
            table = tuple(list(group) for group in new)
            continue
        cached = output.scheduled_cached_reqs
        if request_id not in cached.req_ids:
            continue
        added = cached.new_block_ids[cached.req_ids.index(request_id)]
        if added is None:
            continue
        # vLLM 0.32 lists a resumed request here with its whole new table; 0.34 sends it again as a new request
        if request_id in (getattr(cached, "resumed_req_ids", None) or ()):
            table = tuple(list(group) for group in added)
        else:
            table = tuple([*group, *more] for group, more in zip(table, added, strict=True))
    return table
