"""The model's stand-in for workloads: the KV of a token is a function of its whole prefix.

A real model's KV for position p depends on every token up to p, and on the
layer. Here each token's slot bytes are a hash of (prefix, layer), so:

* the bytes a slot must hold are known on any engine, whatever its block ids
  (producer and consumer never need to share ids or compare caches);
* two prompts that share a prefix share that prefix's KV, and diverge after it,
  so a connector keyed on part of a prompt loads bytes that differ from the
  expected ones right where the prompts diverge;
* vLLM's own prefix caching stays correct (shared blocks hold shared prefixes).

``PrefixKV.write`` is the forward (the step's new tokens get their KV);
``PrefixKV.expected`` is what any slot of a computed token must hold.
"""

from __future__ import annotations

import torch

from ..engine.slots import token_slots

_MASK = (1 << 64) - 1
_FNV_PRIME = 0x100000001B3
_FNV_OFFSET = 0xCBF29CE484222325
_MIX1, _MIX2, _GOLDEN = 0x3F58476D1CE4E5B9 >> 1, 0x14D049BB133111EB >> 1, 0x1E3779B97F4A7C15


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def prefix_seeds(tokens: list[int]) -> list[int]:
    """One 64-bit seed per position, chained over the tokens so far (FNV-1a over token ids)."""
    seeds, h = [], _FNV_OFFSET
    for token in tokens:
        h = ((h ^ token) * _FNV_PRIME) & _MASK
        seeds.append(_signed(h))
    return seeds


def slot_bytes(seeds: list[int], layer_index: int, nbytes: int) -> torch.Tensor:
    """[len(seeds), nbytes] uint8: pseudo-random bytes per (prefix seed, layer), cheap and vectorized."""
    x = torch.tensor(seeds, dtype=torch.int64)[:, None] + (torch.arange(nbytes, dtype=torch.int64) + 1) * _GOLDEN
    x = x + (layer_index + 1) * _MIX2
    x = (x ^ (x >> 31)) * _MIX1
    x = (x ^ (x >> 29)) * _MIX2
    x = x ^ (x >> 32)
    return (x & 0xFF).to(torch.uint8)


class PrefixKV:
    """Reads and writes per-token KV bytes of standard ``[B, H, N, C]`` cache views."""

    def __init__(self, caches: dict[str, torch.Tensor], block_size: int):
        self.caches = caches
        self.block_size = block_size
        self.layer_index = {name: i for i, name in enumerate(caches)}
        self._seeds: dict[tuple[int, ...], list[int]] = {}

    def slot_nbytes(self, layer: str) -> int:
        view = self.caches[layer]
        nbytes: int = view.shape[1] * view.shape[3] * view.element_size()
        return nbytes

    def expected(self, layer: str, tokens: list[int], positions: range) -> torch.Tensor:
        """[T, nbytes]: the KV bytes of ``tokens``' positions, as the producer's forward wrote them."""
        seeds = prefix_seeds(tokens[:positions.stop])[positions.start:]
        return slot_bytes(seeds, self.layer_index[layer], self.slot_nbytes(layer))

    def read(self, layer: str, block_ids: list[int], positions: range) -> tuple[torch.Tensor, torch.Tensor,
                                                                                 torch.Tensor]:
        """(bytes [T, nbytes], blocks, offsets) of the slots a request's positions map to."""
        view = self.caches[layer]
        blocks, offsets = token_slots(block_ids, positions, self.block_size)
        data = view[blocks.to(view.device), :, offsets.to(view.device)].contiguous()
        return data.view(torch.uint8).reshape(len(positions), -1).cpu(), blocks, offsets

    def write(self, layer: str, block_ids: list[int], tokens: list[int], positions: range) -> None:
        """The forward: the tokens at ``positions`` get their prefix's KV in their slots."""
        if not len(positions):
            return
        view = self.caches[layer]
        blocks, offsets = token_slots(block_ids, positions, self.block_size)
        data = self.expected(layer, tokens, positions).reshape(len(positions), view.shape[1], -1)
        view[blocks.to(view.device), :, offsets.to(view.device)] = data.view(view.dtype).to(view.device)

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Per layer, [B, N, nbytes] bytes of every slot: to see what a step changed."""
        return {name: view.permute(0, 2, 1, 3).clone(memory_format=torch.contiguous_format).view(torch.uint8)
                .reshape(view.shape[0], view.shape[2], -1).cpu() for name, view in self.caches.items()}
