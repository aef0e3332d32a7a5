"""Hypothesis strategies for workloads: every feature mixed, biased toward cache hits.

Consumer requests are mostly drawn from the producer's and the peer's (the same
prompt, an extension, a shorter one, a sibling that diverges after a shared
stem), because a workload with no hit checks little; the peer engine (none, or
up to two requests) writes one store only, so a wrapper's children differ. Pool sizes stay large enough for the
longest request, so "stuck" means a connector or scheduler bug, not an
impossible workload. Shrinking moves toward fewer, shorter requests, no aborts
and default limits (the strategies list their simplest choice first).
"""

from __future__ import annotations

from hypothesis import strategies as st

from .spec import OCCUPANT_LENGTH, OCCUPANT_TOKENS, RequestSpec, WorkloadSpec

MAX_PROMPT = 200
CHUNKED_MIN_PROMPT = 70  # above the largest chunked token budget
FAMILIES = 3


@st.composite
def _producer_request(draw, min_length: int = 2) -> RequestSpec:
    length = draw(st.integers(min_length, MAX_PROMPT))
    return RequestSpec(family=draw(st.integers(0, FAMILIES - 1)), shared=draw(st.integers(0, length)),
                       length=length, tail=draw(st.integers(0, 2)), arrive=draw(st.integers(0, 3)),
                       max_tokens=draw(st.integers(1, 6)), abort=draw(_abort()))


def _abort():
    return st.one_of(st.none(), st.none(), st.none(), st.integers(0, 6))


@st.composite
def _consumer_request(draw, producer: tuple[RequestSpec, ...]) -> RequestSpec:
    base = draw(st.sampled_from(producer))
    kind = draw(st.sampled_from(["same", "extend", "shorter", "sibling", "fresh"]))
    length = {"same": base.length, "extend": base.length + draw(st.integers(1, 40)),
              "shorter": draw(st.integers(max(2, base.shared), base.length)),
              "sibling": base.length, "fresh": draw(st.integers(2, MAX_PROMPT))}[kind]
    length = min(length, MAX_PROMPT + 40)
    family = FAMILIES + draw(st.integers(0, 2)) if kind == "fresh" else base.family
    tail = base.tail + 10 if kind == "sibling" else base.tail
    arrive = draw(st.integers(0, 3))
    abort = draw(_abort())
    return RequestSpec(family=family, shared=min(base.shared, length) if kind != "fresh" else 0, length=length,
                       tail=tail, arrive=arrive, max_tokens=draw(st.integers(1, 6)),
                       abort=None if abort is None else arrive + abort)


def _fix_abort(r: RequestSpec) -> RequestSpec:
    return r if r.abort is None else RequestSpec(**{**r.__dict__, "abort": r.arrive + r.abort})


@st.composite
def workload_specs(draw, chunked: bool, block_size: int = 32) -> WorkloadSpec:
    """``chunked``: the token budget is below the first prompt's length, so prefill spans steps;
    otherwise every prompt fits one step (the two are separate tests, so a connector's chunked-prefill
    bug does not hide everything else)."""
    first = draw(_producer_request(min_length=CHUNKED_MIN_PROMPT if chunked else 2))
    producer = tuple(_fix_abort(r) for r in (first, *draw(st.lists(_producer_request(), max_size=2))))
    peer = tuple(_fix_abort(r) for r in draw(st.lists(_producer_request(), max_size=2)))
    consumer = tuple(draw(st.lists(_consumer_request(producer + peer), min_size=1, max_size=3)))
    occupants = draw(st.integers(0, 3))
    producer_occupants = draw(st.integers(0, 2))
    max_seqs = draw(st.sampled_from([16, 4]))
    token_budget = draw(st.sampled_from([64, 48, 32])) if chunked else 2048
    token_budget = max(token_budget, max_seqs)
    requests = producer + peer + consumer
    longest = max(-(-(r.length + r.max_tokens) // block_size) for r in requests)
    last = max(r.arrive for r in requests)
    occupant_blocks = max(occupants, producer_occupants) * -(-(OCCUPANT_LENGTH + last + OCCUPANT_TOKENS) // block_size)
    floor = longest + occupant_blocks + 2  # the null block, and room for one more
    num_blocks = draw(st.sampled_from([48, floor + 4, floor]))
    return WorkloadSpec(producer=producer, consumer=consumer, peer=peer, token_budget=token_budget,
                        num_blocks=max(num_blocks, floor), occupants=occupants,
                        producer_occupants=producer_occupants, max_seqs=max_seqs, block_size=block_size)
