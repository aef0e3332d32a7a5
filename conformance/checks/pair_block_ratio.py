"""The P/D pair round-trip when the consumer's blocks hold more tokens than the producer's.

A prefill engine and a decode engine need not run the same block size: NIXL's consumer reads the producer's smaller
blocks into parts of its own (``block_size_ratio`` remote blocks per local block, the producer's block size dividing
the consumer's) and rearranges them after the read, zeroing what no remote block covered. The pair is
``pair_core.py``'s; only the consumer's engine is built with ``BLOCK_SIZE_RATIO`` times the producer's block size. It
passes when every claimed token's slot, found through each side's own block table and block size, holds the
producer's bytes the moment the consumer reports the request received (vLLM computes on them the next step), nothing
failed or expired, and both sides drain.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..engine.rig import EngineStandIn, Rig
from ..engine.slots import token_slot_bytes
from .pair_core import (
    CompletionWitness,
    ConsumerDoesNotRead,
    LivePair,
    PairFailure,
    check_completion,
    drained,
    open_pair,
)
from .pair_transport import READ_FAULT_MODES, transfer_mode
from .roundtrip import ROUNDTRIP_SCENARIOS, scenario_prompts

BLOCK_SIZE_RATIO = 2  # consumer block size / producer block size (NIXL reads only nP <= nD)


@dataclass
class BlockRatioRig(Rig):
    """A Rig whose consumer engine runs ``BLOCK_SIZE_RATIO`` times the producer's block size."""

    def consumer_block_size(self) -> int:
        return self.block_size * BLOCK_SIZE_RATIO

    def _consumer_rig(self) -> Rig:
        return Rig(self.connector, self.platform, self.backend,
                   replace(self.shape, block_size=self.consumer_block_size()), self.model_dir, self.storage,
                   self.device, self.max_model_len, self.services)

    def either_block_size_refusal(self) -> str | None:
        """Why the backend under test cannot run the producer's or the consumer's block size, or None."""
        return self.block_size_refusal() or self._consumer_rig().block_size_refusal()

    def engine(self, role: str = "kv_both", fill_seed: int | None = None) -> EngineStandIn:
        if role != "kv_consumer":
            return super().engine(role, fill_seed)
        engine = self._consumer_rig().engine(role, fill_seed)
        self.engines.append(engine)
        return engine


@dataclass
class RatioWitness:
    """Compares a request's claimed slots, each side through its own block size, when the consumer reports it."""

    pair: LivePair
    rig: BlockRatioRig
    compared: dict[str, int] = field(default_factory=dict)  # request -> token slots compared
    wrong: list[str] = field(default_factory=list)

    def __call__(self, request_id: str, step: int) -> None:
        producer, consumer = self.pair.producer, self.pair.consumer
        tokens = consumer.scheduler.external_tokens(request_id)
        table = consumer.scheduler.scheduler.kv_cache_manager.get_block_ids(request_id)[0]
        source = producer.scheduler.block_ids[request_id][0]
        sizes = (self.rig.block_size, self.rig.consumer_block_size())
        for name, view in consumer.caches.items():
            saved = token_slot_bytes(producer.caches[name], source, tokens, sizes[0])
            now = token_slot_bytes(view, table, tokens, sizes[1])
            same = (saved.to(now.device) == now).all(dim=1)
            self.compared[request_id] = tokens
            if not bool(same.all()):
                first = int((~same).nonzero()[0])
                self.wrong.append(
                    f"{self.rig.connector.name}: the consumer (block size {sizes[1]}) reported {request_id} received "
                    f"(finished_recving) at its step {step}, but token {first} of the {tokens} it claimed (layer "
                    f"{name}; block {table[first // sizes[1]]} slot {first % sizes[1]}) does not hold the bytes the "
                    f"producer (block size {sizes[0]}) has in block {source[first // sizes[0]]} slot "
                    f"{first % sizes[0]} ({int((~same).sum())} token slot(s) wrong): its {BLOCK_SIZE_RATIO} remote "
                    f"blocks per local block were placed or rearranged wrongly")
                return


def run_pair_block_ratio(rig: BlockRatioRig) -> dict[str, int]:
    """The round-trip's "multi" prompts, producer at the rig's block size, consumer at a multiple of it; returns the
    token slots compared per request."""
    stored, wanted = scenario_prompts(ROUNDTRIP_SCENARIOS["multi"], rig.block_size)
    name = rig.connector.name
    with open_pair(rig, stored) as pair:
        mode = transfer_mode(pair.consumer)
        if mode not in READ_FAULT_MODES:
            raise ConsumerDoesNotRead(
                f"{name} transfers in {mode} mode (the producer posts WRITEs): NIXL maps block sizes where the side "
                f"posting the transfers has the larger blocks (block_size_ratio = local // remote), and this situation "
                f"gives the reading consumer the larger ones")
        witness = RatioWitness(pair, rig)
        pair.logs["consumer"].on_received = witness
        pair.add_consumer_requests(wanted)
        pair.step_until(lambda: drained(pair.consumer) and drained(pair.producer),
                        f"{name}: the consumer (block size {rig.consumer_block_size()}) did not finish receiving from "
                        f"a producer of block size {rig.block_size}, or the producer did not release its pages "
                        f"(finished_sending),")
        check_completion(pair, CompletionWitness(pair))
        if witness.wrong:
            raise PairFailure(witness.wrong[0])
        missing = sorted(set(wanted) - set(witness.compared))
        if missing:
            raise PairFailure(f"{name}: the consumer never reported {', '.join(missing)} received (finished_recving)")
        empty = sorted(rid for rid, tokens in witness.compared.items() if tokens <= 0)
        if empty:
            raise PairFailure(f"{name}: claimed no external token for {', '.join(empty)}: nothing was read")
        return dict(witness.compared)
