"""Hand-written workloads, one per lifecycle feature, so each feature runs on every connector.

Generated workloads (``workload_strategies``) mix the features at random; these
pin one feature each, so a failure's test id already says which lifecycle broke.
Every one is built to give the consumer cache hits: a run with no verified load
fails rather than passing on nothing.
"""

from __future__ import annotations

from typing import TypedDict

from .spec import RequestSpec as R
from .spec import WorkloadSpec

_A = R(family=0, shared=40, length=70, tail=1)
_B = R(family=0, shared=40, length=90, tail=2)
_C = R(family=1, shared=0, length=75, tail=3)

# what each scenario must have exercised (a WorkloadReport field > 0), so it cannot pass on nothing
EXERCISES: dict[str, str] = {"chunked-prefill": "chunked_steps", "memory-pressure": "preemptions",
                             "abort": "aborts", "peer-store": "peer_hits", "preempt-mid-save": "preemptions",
                             "abort-mid-save": "aborts", "resumed-beside-running": "resumed_loads_beside_others",
                             "resumed-past-boundary": "resumed_loads_beside_others",
                             "resumed-chunked": "resumed_chunked_loads",
                             "block-boundary": "boundary_finishes"}

# 7 usable blocks, all taken by the first step's prefills (2 + 2 + 3); in the next step the two 64-token
# requests each need a block for their first decoded token, so the third request's blocks are freed (by a
# preemption or an abort) and handed to them while its KV, saved in the step before, may still be in flight
class _Pool(TypedDict):
    num_blocks: int
    max_seqs: int
    token_budget: int


_TIGHT: _Pool = {"num_blocks": 8, "max_seqs": 4, "token_budget": 256}
_FIRST, _SECOND = R(family=10, length=64, max_tokens=3), R(family=11, length=64, max_tokens=3)

WORKLOAD_SCENARIOS: dict[str, WorkloadSpec] = {s.label: s for s in (
    WorkloadSpec(
        label="shared-prefix",
        # three prompts share 40 tokens and diverge; the consumer asks for two of them and a fourth
        # sibling nobody stored: a connector keyed on part of a prompt loads a sibling's KV
        producer=(_A, _B, R(family=0, shared=40, length=64, tail=4, arrive=1)),
        consumer=(R(family=0, shared=40, length=70, tail=5), _B, _A)),
    WorkloadSpec(
        label="occupied-pools",
        # other requests hold blocks on both engines, differently, so block ids differ per side
        producer=(_A, _C), consumer=(_C, _A), occupants=3, producer_occupants=1),
    WorkloadSpec(
        label="chunked-prefill",
        # prompts longer than the step's token budget: prefill, saves and loads span steps
        producer=(R(family=2, length=40), R(family=6, length=150)),
        consumer=(R(family=2, length=40), R(family=6, length=150, arrive=1)),
        token_budget=16, max_seqs=4),
    WorkloadSpec(
        label="decode-after-hit",
        # the loaded request decodes; a later arrival loads beside it
        producer=(_A, _C), consumer=(R(family=0, shared=40, length=70, tail=1, max_tokens=6),
                                     R(family=1, length=75, tail=3, arrive=3, max_tokens=3))),
    WorkloadSpec(
        label="memory-pressure",
        # 8 blocks for three decoding requests that each cross into a third block: they wait, get
        # preempted and resumed, and freed blocks are recycled
        producer=(R(family=0, shared=40, length=62, tail=1, max_tokens=8),
                  R(family=0, shared=40, length=62, tail=2, max_tokens=8), R(family=1, length=62, max_tokens=8)),
        consumer=(R(family=0, shared=40, length=62, tail=1, max_tokens=8), R(family=1, length=62, max_tokens=8),
                  R(family=0, shared=40, length=62, tail=2, max_tokens=8)),
        num_blocks=8, max_seqs=4, token_budget=128),
    WorkloadSpec(
        label="peer-store",
        # a peer engine writes one store only (a wrapper's last child): the consumer asks, in one step, for a
        # prompt every store holds, two only the peer's store holds (one a sibling of the first) and a fresh
        # one, so a wrapper's children hold different hits and it must claim and load from the right one
        producer=(_A, _C), peer=(R(family=7, length=90), _B),
        consumer=(_A, R(family=7, length=90), _B, R(family=8, length=50))),
    WorkloadSpec(
        label="preempt-mid-save",
        # the 90-token request is preempted in step 1, right after the step that saved it; the consumer loads it
        producer=(_FIRST, _SECOND, R(family=12, length=90, max_tokens=2)),
        consumer=(R(family=12, length=90), R(family=10, length=64)), **_TIGHT),
    WorkloadSpec(
        label="abort-mid-save",
        # the same, aborted by its client before step 1 instead: its prompt was saved, and is loaded later
        producer=(_FIRST, _SECOND, R(family=12, length=90, max_tokens=4, abort=1)),
        consumer=(R(family=12, length=90), R(family=10, length=64)), **_TIGHT),
    WorkloadSpec(
        label="resumed-beside-running",
        # 6 usable blocks: two 62-token requests decode into their third block at step 3 while the stored prompt
        # (arrived at step 1, 32 tokens loaded) holds the other two, so vLLM preempts it and hands its blocks to
        # them (its prefix leaves the local cache); the first finishes, and it resumes, loading again, while the
        # second still decodes beside it
        producer=(R(family=13, length=62),),
        consumer=(R(family=14, length=62, max_tokens=5), R(family=15, length=62, max_tokens=12),
                  R(family=13, length=62, arrive=1, max_tokens=4)),
        num_blocks=7, max_seqs=4, token_budget=256),
    WorkloadSpec(
        label="resumed-past-boundary",
        # the same pool, the stored prompt arriving with the others: it has generated 3 tokens, its 65 tokens past
        # its second block, when it is preempted, and resumes loading its prompt's first block beside the decoder
        producer=(R(family=13, length=62),),
        consumer=(R(family=14, length=62, max_tokens=5), R(family=15, length=62, max_tokens=12),
                  R(family=13, length=62, max_tokens=6)),
        num_blocks=7, max_seqs=4, token_budget=256),
    WorkloadSpec(
        label="resumed-chunked",
        # the same pool under a token budget of one block: the prompts are prefilled in chunks, timed so that all three
        # cross into their third block in one step (the stored prompt having generated 3 tokens, 65 in all), and its
        # blocks go to the other two; it resumes beside the decoder loading its prompt's first block in a step that
        # schedules 31 of its 33 uncomputed tokens: its claimed tokens' KV must load, however little of the rest runs
        producer=(R(family=13, length=62),),
        consumer=(R(family=14, length=59, max_tokens=8), R(family=15, length=61, max_tokens=14),
                  R(family=13, length=62, max_tokens=6)),
        num_blocks=7, max_seqs=4, token_budget=32),
    WorkloadSpec(
        label="staggered-finishes",
        # two requests finish one step apart, each in the step it was prefilled, so their saves are still in flight:
        # a wrapper whose children save at different speeds holds the first one's slower child while the second
        # finishes and its faster child reports; each must be reported finished after its own last child
        producer=(R(family=16, length=70), R(family=17, length=90, arrive=1), R(family=18, length=40, arrive=2,
                                                                              max_tokens=3)),
        consumer=(R(family=16, length=70), R(family=17, length=90), R(family=18, length=40))),
    WorkloadSpec(
        label="block-boundary",
        # prompts of whole blocks (128, 160 tokens), requests whose last computed block fills in the step they
        # finish, and final lengths on a boundary (126 + 2, 159 + 1); a pool of 14 blocks, so the next arrivals take
        # the blocks the finished ones free (or a connector keeps) in the very next schedule
        producer=(R(family=19, length=128), R(family=20, length=160, max_tokens=3), R(family=21, length=126,
                                                                                      max_tokens=2, arrive=1),
                  R(family=22, length=159, arrive=2)),
        consumer=(R(family=19, length=128), R(family=20, length=160, arrive=1), R(family=21, length=126),
                  R(family=22, length=159, arrive=2, max_tokens=2)),
        num_blocks=14, max_seqs=4, token_budget=512),
    WorkloadSpec(
        label="next-turn",
        # a conversation's next turn: the producer's 126-token prompt generates 2 tokens, ending on a block boundary
        # whose last slot (the sampled token) was never computed; the consumer sends prompt, reply and 30 new tokens,
        # so a store that took that block for computed KV is claimed, loaded and counted as computed
        producer=(R(family=25, length=126, max_tokens=2), R(family=26, length=70)),
        consumer=(R(family=25, length=126, reply=2, then=30), R(family=26, length=70))),
    WorkloadSpec(
        label="partial-block-load",
        # the consumer extends a stored 48-token prompt to 4 blocks: a connector that keys whole prompts token by
        # token has a hit of 1.5 blocks, a load ending mid-block short of the prompt's end (vLLM 0.32 takes a claim
        # as given), and must load exactly those 48 tokens; a whole-block connector has none there, and hits on the
        # 70-token prompt asked again
        producer=(R(family=23, shared=48, length=48), R(family=24, length=70)),
        consumer=(R(family=23, shared=48, length=128, tail=1), R(family=24, length=70))),
    WorkloadSpec(
        label="kv-events",
        # with vLLM's KV cache events enabled: the producer stores three prompts over steps, the consumer loads the
        # last one and stores the others again; every store and eviction of an offloading connector's manager must
        # reach vLLM's event publisher in its step (a tier of a few chunks evicts the oldest prompts)
        producer=(R(family=27, length=100), R(family=28, length=100, arrive=2), R(family=29, length=70, arrive=4)),
        consumer=(R(family=29, length=70), R(family=28, length=100, arrive=1), R(family=27, length=100, arrive=2)),
        kv_events=True),
    WorkloadSpec(
        label="abort",
        # the producer aborts one request before it runs and one mid-decode; the consumer aborts one
        # while it loads; the stored prompts still serve the requests that stay
        producer=(_A, R(family=4, length=80, abort=0), R(family=5, length=66, max_tokens=6, abort=2), _C),
        consumer=(_A, R(family=5, length=66, arrive=1), R(family=1, length=75, tail=3, abort=1))),
)}
