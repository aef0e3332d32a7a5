"""The cache hits a connector may promise, as data: how many tokens a consumer must be offered.

vLLM's scheduler checks a connector's claim only from above, with a bare
``assert`` (gone under ``python -O``). A claim of 1 of 4 stored blocks is a
silent loss of work, so a profile may name the hit its connector promises
(``promised_hit`` in ``connectors.yaml``): a range of tokens in all (computed
locally plus claimed) that the round-trip and the workload check. A promise is
named for what it allows; a connector without one has its claim recorded
beside what was stored.

Kept free of torch and vLLM: the profiles validate names against this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# (stored prompt length, consumer prompt length that starts with it, block size) -> a number of tokens or a yes/no
Rule = Callable[[int, int, int], int]


def _whole_blocks_before_last_token(stored: int, wanted: int, block_size: int) -> int:
    """Every whole block of the shared prefix before its last token: vLLM computes a prompt's last token itself."""
    return (min(stored, wanted) - 1) // block_size * block_size


def _stored_tokens_the_consumer_can_take(stored: int, wanted: int, block_size: int) -> int:
    """All of the stored prompt, short of the consumer's own last token."""
    return min(stored, wanted - 1)


def _always(stored: int, wanted: int, block_size: int) -> bool:
    return True


@dataclass(frozen=True)
class Promise:
    doc: str
    least: Rule  # the fewest tokens in all the consumer must be offered
    most: Rule  # the most it may be offered (at most the stored prompt, short of the consumer's last token)
    # whether the promise speaks for that consumer prompt at all; the workload check, whose consumers ask for
    # any extension of a stored prompt, holds a connector to its promise only there
    covers: Callable[[int, int, int], bool] = _always

    def bounds(self, stored: int, wanted: int, block_size: int) -> tuple[int, int]:
        return self.least(stored, wanted, block_size), self.most(stored, wanted, block_size)

    def describe(self, least: int, most: int) -> str:
        return f"a hit of {least} tokens" if least == most else f"a hit of {least} to {most} tokens"


PROMISED_HITS: dict[str, Promise] = {
    # ExampleConnector's design, exactly: it stores the whole blocks before a prompt's last token
    # (align_to_block_size) under a key of all of them, so it promises the stored prompt asked again, or
    # extended within its last block; a prompt that runs into further blocks is another key (no hit promised).
    "whole-blocks": Promise(
        "every whole block of the stored prompt before its last token, exactly (the consumer computes at least "
        "its own last token)",
        least=_whole_blocks_before_last_token, most=_whole_blocks_before_last_token,
        covers=lambda stored, wanted, block_size: (wanted - 1) // block_size == (stored - 1) // block_size),
    # Block-chained stores (in-memory dicts, LMCache and Mooncake at block granularity): each block is keyed
    # by the tokens up to its end, so any prompt that starts with the stored one finds its blocks; a store
    # may also keep the stored prompt's last whole block, or its partial tail.
    "whole-blocks-or-more": Promise(
        "at least every whole block of the stored prompt before its last token, at most the stored prompt "
        "short of the consumer's last token",
        least=_whole_blocks_before_last_token, most=_stored_tokens_the_consumer_can_take),
    # Token-granular stores that keep a prompt's partial last block too: everything stored is a hit.
    "whole-prompt": Promise(
        "every stored token, short of the consumer's last token, exactly",
        least=_stored_tokens_the_consumer_can_take, most=_stored_tokens_the_consumer_can_take),
}
