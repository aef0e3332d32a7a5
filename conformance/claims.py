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


PROMISED_HITS: dict[str, Promise] = {
    # ExampleConnector's design: it stores the whole blocks before a prompt's last token
    # (align_to_block_size), and vLLM always computes a prompt's last token itself.
    "whole-blocks": Promise(
        "every whole block of the stored prompt before its last token (the consumer computes at least its own "
        "last token)",
        lambda stored, wanted, block_size: (min(stored, wanted) - 1) // block_size * block_size),
}
