"""The invariants a workload checks after every engine step, one function each.

Each reads what the step left (caches, the scheduler's requests and block tables, the connector's answers)
and raises ``WorkloadFailure`` naming the step, request, layer and slot. They hold for any connector on any
workload, so a generated workload needs no expected result of its own (what the worker reports finished is
judged for every check that drives vLLM's scheduler, by the driver: engine/transfer_reports.py):

* ``computed_slots``: every token counted as computed holds its prefix's KV in its mapped slot;
* ``stray_writes``: nothing changed outside the forward's slots and those of requests loading KV;
* ``claim_within_known``: a claim is never negative nor beyond the longest prefix any engine computed;
* ``claim_meets_promise``: a profile's ``promised_hit`` is offered for every prompt stored before it;
* ``no_reuse_before_release``: blocks a connector still holds are not handed to another request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from ..engine.check_failure import CheckFailure
from ..engine.slots import token_slots
from .kv import PrefixKV


class WorkloadFailure(CheckFailure):
    """An invariant broke at some step; the message names step, request, layer, slot and the spec."""


def computed_slots(kv: PrefixKV, rid: str, tokens: list[int], block_ids: list[int], upto: int,
                   why: str) -> str | None:
    """None when positions [0, upto) hold their prefix's KV; else what is wrong, in words."""
    if upto <= 0:
        return None
    positions = range(0, upto)
    for layer in kv.caches:
        got, blocks, offsets = kv.read(layer, block_ids, positions)
        want = kv.expected(layer, tokens, positions)
        bad = (got != want).any(dim=1)
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            zero = bool((got[first] == 0).all())
            return (f"request {rid}, layer {layer}: token {first} of the {upto} {why} does not hold its prefix's "
                    f"KV (block {int(blocks[first])} slot {int(offsets[first])}"
                    f"{', all zero' if zero else ''}; {int(bad.sum())} wrong token(s) in this layer)")
    return None


def stray_writes(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                 allowed: dict[str, torch.Tensor]) -> str | None:
    """None when every changed slot is allowed; else the first stray slot, in words."""
    for layer, old in before.items():
        changed = (old != after[layer]).any(dim=-1)  # [B, N]
        stray = changed & ~allowed[layer]
        if bool(stray.any()):
            block, slot = (int(x) for x in stray.nonzero()[0])
            return (f"layer {layer}: block {block} slot {slot} changed although no request being computed or "
                    f"loaded in this step owns it ({int(stray.sum())} stray slot(s) in all)")
    return None


def allow(mask: torch.Tensor, block_ids: list[int], positions: range, block_size: int,
          whole_blocks: bool) -> None:
    """Mark a request's slots for ``positions`` (or all its blocks covering them) as writable."""
    if not len(positions) or not block_ids:
        return
    usable = min(positions.stop, len(block_ids) * block_size)
    if usable <= positions.start:
        return
    blocks, offsets = token_slots(block_ids, range(positions.start, usable), block_size)
    if whole_blocks:
        mask[blocks] = True
    else:
        mask[blocks, offsets] = True


def longest_prefix(prompt: list[int], known: list[tuple[int, ...]]) -> int:
    best = 0
    for seq in known:
        n = 0
        for a, b in zip(prompt, seq, strict=False):  # a common prefix of two lengths
            if a != b:
                break
            n += 1
        best = max(best, n)
    return best


def claim_within_known(rid: str, prompt: list[int], num_computed: int, external: int | None,
                       known: list[tuple[int, ...]]) -> str | None:
    if not external:
        return None
    if external < 0:
        return (f"request {rid} ({len(prompt)}-token prompt): the connector claimed {external} external tokens "
                f"after {num_computed} computed ones; a claim counts tokens to load beyond those and is never "
                f"negative (vLLM's scheduler adds it to the computed count unchecked)")
    limit = longest_prefix(prompt, known)
    if num_computed + external > limit:
        return (f"request {rid} ({len(prompt)}-token prompt): the connector claimed {external} external tokens "
                f"after {num_computed} computed ones, {num_computed + external} in all, but no engine over this "
                f"storage ever computed more than {limit} tokens of that prompt")
    return None


def promised_tokens(prompt: list[int], stored: Iterable[Sequence[int]], promise_name: str,
                    block_size: int) -> tuple[int, int | None]:
    """(tokens the promise owes ``prompt`` at least, length of the stored prompt that owes them): the most over the
    stored prompts ``prompt`` starts with that the promise covers; (0, None) when none does. What a claim may
    reach at most, the stored prompt, ``claim_within_known`` checks for every connector."""
    from ..checks.claims import PROMISED_HITS

    promise = PROMISED_HITS[promise_name]
    owed, source = 0, None
    for seq in stored:
        if len(seq) <= len(prompt) and tuple(prompt[:len(seq)]) == tuple(seq) and \
                promise.covers(len(seq), len(prompt), block_size):
            tokens = promise.least(len(seq), len(prompt), block_size)
            if tokens > owed:
                owed, source = tokens, len(seq)
    return owed, source


def claim_meets_promise(rid: str, prompt: list[int], num_computed: int, external: int | None,
                        stored: Iterable[Sequence[int]], promise_name: str | None, block_size: int) -> str | None:
    """None when the claim covers the promised hit of every stored prompt ``prompt`` starts with (and the
    promise covers); else what was promised and what was offered, in words."""
    if promise_name is None or external is None:
        return None
    from ..checks.claims import PROMISED_HITS

    owed, source = promised_tokens(prompt, stored, promise_name, block_size)
    offered = num_computed + max(external, 0)
    if offered < owed:
        return (f"request {rid} ({len(prompt)}-token prompt): the connector claimed {external} external tokens after "
                f"{num_computed} computed ones, {offered} in all, but its profile promises a hit of at least {owed} "
                f"tokens for it ({promise_name}: {PROMISED_HITS[promise_name].doc}; a {source}-token prompt it starts "
                f"with was stored before this engine started; block size {block_size})")
    return None


def held_blocks(block_ids: list[int], tokens: list[int], block_size: int) -> dict[int, tuple[int, ...]]:
    """Block id -> the prefix whose KV it holds (tokens up to the block's end), for a finished request."""
    return {b: tuple(tokens[:(k + 1) * block_size]) for k, b in enumerate(block_ids)}


def no_reuse_before_release(held: dict[str, dict[int, tuple[int, ...]]],
                            allocated: dict[str, tuple[list[int], list[int]]], block_size: int) -> str | None:
    """A block the connector still holds may be shared only as vLLM's prefix cache shares it: at the same
    place in a request with the same prefix (so its bytes stay what the connector reads)."""
    for owner, blocks in held.items():
        for rid, (ids, tokens) in allocated.items():
            if rid == owner:
                continue
            reused = [b for k, b in enumerate(ids)
                      if b in blocks and blocks[b] != tuple(tokens[:(k + 1) * block_size])]
            if reused:
                return (f"block(s) {sorted(reused)} were handed to request {rid} for other tokens while the "
                        f"connector still held them for finished request {owner} (request_finished kept "
                        f"them; finished_sending not yet reported)")
    return None
