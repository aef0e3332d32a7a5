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

import torch


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
