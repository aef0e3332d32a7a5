"""The save/load round-trip: a producer stores, a fresh consumer loads, bytes are compared.

Scenarios are data: prompt lengths in blocks plus a remainder, so one table
covers aligned and unaligned prompts, partial last blocks, several requests in
one step, and prompts that extend a stored one, for any block size.

Each request's claim, the profile's promised hit, the loaded bytes (every layer) and the writes outside the
loaded slots are judged apart (conformance/checks/verdicts.py), so a pinned finding on one (a lost hit, garbled
bytes) hides no other. After a claim beyond what was stored, that request's bytes are not compared and no
stray write is judged: nothing was saved to compare them with, nor are the slots it loaded known.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.check_failure import CheckFailure
from ..engine.prompts import request_prompt
from ..engine.rig import EngineStandIn, Rig
from ..engine.slots import token_slots
from .verdicts import Verdicts


@dataclass(frozen=True)
class RoundTripScenario:
    name: str
    stored: tuple[tuple[int, int], ...]  # per request: (full blocks, extra tokens) the producer stores
    extend: int = 0  # tokens the consumer's prompt adds after the stored prompt
    doc: str = ""

    def lengths(self, block_size: int) -> list[int]:
        return [blocks * block_size + extra for blocks, extra in self.stored]


ROUNDTRIP_SCENARIOS: dict[str, RoundTripScenario] = {s.name: s for s in (
    RoundTripScenario("unaligned", ((4, 5),), doc="prompt length not a multiple of the block size; partial last block"),
    RoundTripScenario("aligned", ((4, 0),), doc="prompt length an exact multiple of the block size"),
    RoundTripScenario("extend", ((3, 5),), extend=11, doc="the consumer's prompt extends the stored one"),
    RoundTripScenario("aligned-extend", ((4, 0),), extend=1, doc="a stored aligned prompt, extended by one token"),
    RoundTripScenario("one-past-block", ((3, 1),), doc="prompt one token past a block boundary"),
    RoundTripScenario("multi", ((2, 3), (3, 7), (1, 9)), doc="several requests in one step"),
)}


class RoundTripFailure(CheckFailure):
    """A round-trip check failed; the message says which slot, layer and request."""


def _as_bytes(view: torch.Tensor) -> torch.Tensor:
    return view.contiguous().view(torch.uint8)


@dataclass
class RoundTripResult:
    claimed: dict[str, int]
    stored_lengths: dict[str, int]
    # (fewest, most) tokens in all each request's hit may be, per the profile's ``promised_hit``, when it names one
    promised: dict[str, tuple[int, int]] | None = None

    def describe(self) -> str:
        """Claimed against stored per request, for the results (``kvconform.claim``)."""
        promised = self.promised or {}
        return "; ".join(f"{rid}: claimed {tokens} of {self.stored_lengths[rid]} stored tokens"
                         + (f" (promised {_span(*promised[rid])})" if rid in promised else "")
                         for rid, tokens in self.claimed.items())


def _span(least: int, most: int) -> str:
    return str(least) if least == most else f"{least}-{most}"


class ClaimMismatch(RoundTripFailure):
    """The connector's hit lies outside the range its profile promises (``promised_hit``)."""


def promised_hits(rig: Rig, stored: dict[str, list[int]],
                  wanted: dict[str, list[int]]) -> dict[str, tuple[int, int]] | None:
    """(fewest, most) tokens each request's hit may cover in all (local + external), per the profile's promise;
    None without one."""
    from .claims import PROMISED_HITS

    name = rig.connector.profile.promised_hit
    if name is None:
        return None
    promise = PROMISED_HITS[name]
    return {rid: promise.bounds(len(stored[rid]), len(wanted[rid]), rig.block_size) for rid in wanted}


def check_promise(rig: Rig, consumer: EngineStandIn, claimed: dict[str, int],
                  promised: dict[str, tuple[int, int]] | None) -> None:
    """A connector with a promised hit claims within it: a short claim is lost work vLLM never notices."""
    from .claims import PROMISED_HITS

    for rid, (least, most) in (promised or {}).items():
        answer = consumer.scheduler.answered_claim(rid)
        computed = answer.num_computed_tokens if answer is not None else 0
        if not least <= computed + claimed[rid] <= most:
            name = rig.connector.profile.promised_hit
            assert name is not None  # promised_hits gives bounds only for a promise
            promise = PROMISED_HITS[name]
            raise ClaimMismatch(
                f"{rig.connector.name} claimed {claimed[rid]} external tokens for {rid} (beyond {computed} computed "
                f"locally), but its profile promises {promise.describe(least, most)} in all ({name}: "
                f"{promise.doc}; block size {rig.block_size})")


def scenario_prompts(scenario: RoundTripScenario, block_size: int) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """(prompts the producer stores, prompts the consumer asks for), keyed by request id."""
    lengths = scenario.lengths(block_size)
    stored = {f"req-{i}": request_prompt(i, n) for i, n in enumerate(lengths)}
    wanted = {rid: tokens + request_prompt(100 + i, scenario.extend) for i, (rid, tokens) in enumerate(stored.items())}
    return stored, wanted


def _token_rows(view: torch.Tensor) -> torch.Tensor:
    """Each token slot's bytes of a standard ``[B, H, N, C]`` view, as ``[B, N, bytes]``."""
    by_slot = view.movedim(2, 1).contiguous()
    return by_slot.reshape(by_slot.shape[0], by_slot.shape[1], -1).view(torch.uint8)


def _shift(blocks: int, slots: int) -> str:
    """How far bytes landed from where they were due, in words ("one block late": in the next block)."""
    count, unit = (blocks, "block") if slots == 0 else (slots, "slot") if blocks == 0 else (None, "")
    if count is None:
        return f"loaded {blocks:+d} block(s) and {slots:+d} slot(s) from where it was due"
    amount = f"one {unit}" if abs(count) == 1 else f"{abs(count)} {unit}s"
    return f"loaded {amount} {'late' if count > 0 else 'early'}"


def where_saved_bytes_are(producer: EngineStandIn, consumer: EngineStandIn, layer: str, rid: str, source_rid: str,
                          saved_at: tuple[int, int], loaded_at: tuple[int, int], block_size: int) -> str:
    """Where the bytes the producer saved at ``saved_at`` (block, slot) are in the consumer's cache of ``layer``,
    if anywhere; else what the consumer's ``loaded_at`` holds instead (zeros, another token's bytes, bytes the
    producer never saved). Only on a failure: it compares every slot of the layer."""
    rows_a, rows_b = _token_rows(producer.caches[layer]), _token_rows(consumer.caches[layer])
    saved = rows_a[saved_at]
    table = consumer.scheduler.block_ids[rid][0]
    due = table.index(loaded_at[0])
    matches = [(int(b), int(n)) for b, n in (rows_b == saved).all(dim=-1).nonzero()]
    if matches:
        block, slot = min(matches, key=lambda m: (m[1] != loaded_at[1], m))  # the same slot first
        where = f"the bytes the producer saved for it are in the consumer's block {block} slot {slot}"
        if block in table:
            return f"{where}: {_shift(table.index(block) - due, slot - loaded_at[1])}"
        return f"{where}, which is not one of {rid}'s blocks {table}"
    nowhere = "the bytes the producer saved for it are nowhere in the consumer's cache"
    loaded = rows_b[loaded_at]
    if not bool(loaded.any()):
        return f"{nowhere}; block {loaded_at[0]} slot {loaded_at[1]} holds zeros (nothing was loaded there)"
    for owner, tables in producer.scheduler.block_ids.items():
        for block, slot in ((int(b), int(n)) for b, n in (rows_a == loaded).all(dim=-1).nonzero()):
            if block in tables[0]:
                token = tables[0].index(block) * block_size + slot
                whose = "the same request's" if owner == source_rid else f"another request's ({owner})"
                return (f"{nowhere}; block {loaded_at[0]} slot {loaded_at[1]} holds {whose} token {token}, which "
                        f"the producer saved at its block {block} slot {slot}")
    return (f"{nowhere}; block {loaded_at[0]} slot {loaded_at[1]} holds bytes the producer never saved (stale or "
            f"garbled)")


def run_roundtrip(rig: Rig, scenario: RoundTripScenario) -> RoundTripResult:
    producer_role, consumer_role = rig.roles()
    stored, wanted = scenario_prompts(scenario, rig.block_size)

    producer = rig.engine(producer_role, fill_seed=1234)
    producer.run(stored)
    producer.close()

    consumer = rig.engine(consumer_role)
    consumer.run(wanted)
    consumer.close()
    return verify_roundtrip(rig, producer, consumer, stored, wanted)


def computed_locally(consumer: EngineStandIn, request_id: str) -> int:
    """Tokens of the request the consumer's own prefix cache held when the connector was asked (0: none)."""
    answer = consumer.scheduler.answered_claim(request_id)
    return answer.num_computed_tokens if answer is not None else 0


def verify_roundtrip(rig: Rig, producer: EngineStandIn, consumer: EngineStandIn, stored: dict[str, list[int]],
                     wanted: dict[str, list[int]], whole_blocks: bool = False,
                     producer_ids: dict[str, str] | None = None) -> RoundTripResult:
    """The claim is within what was stored, the loaded slots hold the saved bytes, nothing else changed.

    The loaded slots are those the claim covers: after the tokens the consumer's own prefix cache held.
    ``whole_blocks``: the connector moves whole blocks (NIXL reads pages), so the unused tail of a
    request's last block may change too; writes outside the request's own blocks still fail.
    ``producer_ids``: the producer's request id of each consumer request, where a router gave the consumer
    ids of its own (``stored`` is keyed by the producer's, ``wanted`` by the consumer's); the same by default.
    """
    source = producer_ids or {rid: rid for rid in wanted}
    stored = {rid: stored[source[rid]] for rid in wanted}
    claimed = {rid: consumer.scheduler.external_tokens(rid) for rid in wanted}
    local = {rid: computed_locally(consumer, rid) for rid in wanted}
    promised = promised_hits(rig, stored, wanted)
    # a claim beyond what was stored has no saved bytes to compare, nor known slots past the consumer's blocks
    bounded = {rid for rid, tokens in claimed.items() if local[rid] + tokens <= len(stored[rid])}
    with Verdicts() as verdicts:
        for rid, tokens in claimed.items():
            with verdicts.judge():
                check_claim(rig, rid, tokens, local[rid], stored[rid], wanted[rid])
        with verdicts.judge():  # a claim that failed above (no hit, or beyond what was stored) is not judged twice
            check_promise(rig, consumer, claimed, {rid: bounds for rid, bounds in (promised or {}).items()
                                                   if rid in bounded and claimed[rid] > 0})
        with verdicts.judge():
            check_loaded_bytes(rig, producer, consumer, claimed, local, source, bounded)
        if bounded == set(claimed):
            with verdicts.judge():
                check_no_stray_writes(rig, consumer, claimed, local, whole_blocks)
    return RoundTripResult(claimed, {rid: len(t) for rid, t in stored.items()}, promised)


def check_claim(rig: Rig, rid: str, tokens: int, local: int, stored: list[int], wanted: list[int]) -> None:
    """A request's claim is a hit within what the producer stored (vLLM guards the bound with a bare assert only)."""
    if local + tokens > len(stored):
        raise RoundTripFailure(
            f"{rig.connector.name} claimed {tokens} external tokens for {rid} beyond {local} computed "
            f"locally, but the producer stored a prompt of only {len(stored)} tokens (vLLM guards this "
            f"with a bare assert only)")
    if tokens <= 0:
        raise RoundTripFailure(
            f"{rig.connector.name} reported no cache hit for {rid} ({len(wanted)} tokens) after the "
            f"producer stored its {len(stored)}-token prefix: nothing was loaded for it")


def _loaded_span(consumer: EngineStandIn, rid: str, local: int, tokens: int, block_size: int,
                 device: torch.device) -> tuple[range, torch.Tensor, torch.Tensor]:
    """The tokens a request's claim covers, and the consumer's (blocks, offsets) that hold them."""
    span = range(local, local + tokens)
    blocks, offsets = token_slots(consumer.scheduler.block_ids[rid][0], span, block_size, device)
    return span, blocks, offsets


def check_loaded_bytes(rig: Rig, producer: EngineStandIn, consumer: EngineStandIn, claimed: dict[str, int],
                       local: dict[str, int], source: dict[str, str], bounded: set[str]) -> None:
    """Every slot the claims of ``bounded`` requests cover holds the bytes the producer saved, in every layer: one
    verdict, whose failure details the first wrong slot and names every other layer with one."""
    block_size = rig.block_size
    wrong: list[str] = []  # per layer, its first wrong slot: the first in full, the others by layer and token
    for name, view_b in consumer.caches.items():
        view_a = producer.caches[name]
        for rid in (rid for rid in claimed if rid in bounded):
            span, blocks_b, offsets_b = _loaded_span(consumer, rid, local[rid], claimed[rid], block_size,
                                                     view_b.device)
            blocks_a, offsets_a = token_slots(producer.scheduler.block_ids[source[rid]][0], span, block_size,
                                              view_a.device)
            same = (_as_bytes(view_a[blocks_a, :, offsets_a]) == _as_bytes(view_b[blocks_b, :, offsets_b])
                    ).flatten(1).all(dim=1)
            if bool(same.all()):
                continue
            first = int((~same).nonzero()[0])
            if wrong:
                wrong.append(f"{name} ({rid}, token {span[first]})")
                break
            slot_a, slot_b = ((int(blocks_a[first]), int(offsets_a[first])),
                              (int(blocks_b[first]), int(offsets_b[first])))
            found = where_saved_bytes_are(producer, consumer, name, rid, source[rid], slot_a, slot_b, block_size)
            wrong.append(f"{rig.connector.name}: {rid}, layer {name}: token {span[first]} of {span.stop} loaded wrong "
                         f"bytes: {found} (block {slot_b[0]} slot {slot_b[1]} of the consumer's cache differs from "
                         f"block {slot_a[0]} slot {slot_a[1]} the producer saved)")
            break
    if wrong:
        raise RoundTripFailure(wrong[0] + (f"; other layers with wrong bytes: {', '.join(wrong[1:])}"
                                           if wrong[1:] else ""))


def check_no_stray_writes(rig: Rig, consumer: EngineStandIn, claimed: dict[str, int], local: dict[str, int],
                          whole_blocks: bool) -> None:
    """Nothing outside the slots the claims cover changed in the consumer's cache (with ``whole_blocks``: outside
    the claimed tokens' blocks)."""
    for name, view_b in consumer.caches.items():
        touched = torch.zeros(view_b.shape[0], view_b.shape[2], dtype=torch.bool, device=view_b.device)
        for rid, tokens in claimed.items():
            _, blocks_b, offsets_b = _loaded_span(consumer, rid, local[rid], tokens, rig.block_size, view_b.device)
            if whole_blocks:
                touched[blocks_b] = True
            else:
                touched[blocks_b, offsets_b] = True
        written = (_as_bytes(view_b) != 0).any(dim=-1).any(dim=1)  # [B, N]: slots holding any byte
        stray = written & ~touched
        if bool(stray.any()):
            block, slot = (int(x) for x in stray.nonzero()[0])
            raise RoundTripFailure(
                f"{rig.connector.name}: layer {name}: block {block} slot {slot} changed in the consumer's cache "
                f"but lies outside the slots it loaded ({int(stray.sum())} stray slot(s) in all)")
