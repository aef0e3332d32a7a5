"""The cache hit a connector promises, as data: how many tokens a consumer must be offered.

vLLM's scheduler checks a connector's claim only from above, with a bare
``assert`` (gone under ``python -O``). A claim of 1 of 4 stored blocks is a
silent loss of work, so a profile may name the hit its connector promises
(``promised_hit`` in ``connectors.yaml``) and the round-trip checks it exactly.
A connector without a promise has its claim recorded beside what was stored.

Kept free of torch and vLLM: the profiles validate names against this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Promise:
    doc: str
    # (stored prompt length, consumer prompt length that starts with it, block size) -> tokens hit in all
    tokens: Callable[[int, int, int], int]
    # the same arguments -> whether the promise speaks for that consumer prompt at all; the workload check,
    # whose consumers ask for any extension of a stored prompt, holds a connector to its promise only there
    covers: Callable[[int, int, int], bool] = lambda stored, wanted, block_size: True


PROMISED_HITS: dict[str, Promise] = {
    # ExampleConnector's design: it stores the whole blocks before a prompt's last token
    # (align_to_block_size), and vLLM always computes a prompt's last token itself.
    "whole-blocks": Promise(
        "every whole block of the stored prompt before its last token (the consumer computes at least its own "
        "last token)",
        lambda stored, wanted, block_size: (min(stored, wanted) - 1) // block_size * block_size,
        # it keys a prompt by all its whole blocks, so it promises the stored prompt asked again, or extended
        # within its last block; a prompt that runs into further blocks is another key (no hit is promised)
        covers=lambda stored, wanted, block_size: (wanted - 1) // block_size == (stored - 1) // block_size),
}
