"""Generated workloads: every feature mixed, biased toward cache hits, from one generator over two sources of choices.

Every choice goes through ``Draws`` (``integer(lo, hi)``, ``choice(options)``, simplest value first), over
``SeededDraws`` (``random.Random`` seeded by the test's id and example index: a normal run's workloads are
a pure function of that string, which Hypothesis's draws are not, as they mix in constants of whatever
local modules were imported) or ``HypothesisDraws`` (``--kvconform-explore N``: random search, shrinking
toward fewer, shorter, simpler requests). Consumer requests mostly derive from the producer's and the
peer's (same prompt, extension, shorter, a sibling), because a workload with no hit checks little; pools
fit the longest request, so "stuck" is a bug, not an impossible workload. A test's first workload is
anchored (``anchored_workload``): it holds a producer request and a consumer request for the same prompt,
more than a block long, so a test that checks nothing means the connector never loaded.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .spec import OCCUPANT_LENGTH, OCCUPANT_TOKENS, RequestSpec, WorkloadSpec

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

MAX_PROMPT = 200
CHUNKED_MIN_PROMPT = 70  # above the largest chunked token budget
FAMILIES = 3
ANCHOR_LABEL = "anchored"

T = TypeVar("T")


class Draws(Protocol):
    """The generator's every choice: a source replays them (a seed) or searches and shrinks them (Hypothesis)."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``lo..hi`` (both included); ``lo`` is the simplest."""

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``; the first is the simplest."""


class SeededDraws:
    """Choices from ``random.Random(seed)``: the same seed string gives the same choices in any process."""

    def __init__(self, seed: str):
        self._rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]


class HypothesisDraws:
    """Choices from Hypothesis's ``draw`` (inside ``st.composite``), so it searches them and shrinks a failure."""

    def __init__(self, draw: Callable[[SearchStrategy[Any]], Any]) -> None:  # hypothesis is not followed: Any
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        value: int = self._draw(st.integers(lo, hi))
        return value

    def choice(self, options: Sequence[T]) -> T:
        from hypothesis import strategies as st

        chosen: T = self._draw(st.sampled_from(options))
        return chosen


# how a consumer request's prompt relates to the producer or peer request it is drawn from -> its length
CONSUMER_LENGTHS: dict[str, Callable[[Draws, RequestSpec], int]] = {
    "same": lambda draw, base: base.length,
    "extend": lambda draw, base: base.length + draw.integer(1, 40),
    "shorter": lambda draw, base: draw.integer(max(2, base.shared), base.length),
    "sibling": lambda draw, base: base.length,  # the same stem, then another tail
    "fresh": lambda draw, base: draw.integer(2, MAX_PROMPT),  # a family no producer or peer request has
}


def _repeat(draw: Draws, make: Callable[[], T], least: int, most: int) -> tuple[T, ...]:
    """``least..most`` items, each one past ``least`` on a coin flip (as Hypothesis's lists grow)."""
    items: list[T] = []
    while len(items) < most and (len(items) < least or draw.integer(0, 1)):
        items.append(make())
    return tuple(items)


def _abort(draw: Draws, arrive: int) -> int | None:
    """One request in four is aborted, 0 to 6 steps after it arrives."""
    return None if draw.integer(0, 3) < 3 else arrive + draw.integer(0, 6)


def _on_boundary(length: int, max_tokens: int, min_length: int, block_size: int, where: str) -> int:
    """The prompt length moved down (never below ``min_length``) so that ``where`` ends on a block boundary."""
    if where == "any":
        return length
    output = max_tokens if where == "final" else 0
    moved = (length + output) // block_size * block_size - output
    return moved if moved >= min_length else length


# where a drawn request ends on a block boundary: nowhere in particular, its prompt (a whole number of blocks) or
# its final length (prompt and generated tokens), so a connector's off-by-one at a block's end meets its case
BOUNDARIES = ("any", "prompt", "final")


def _producer_request(draw: Draws, block_size: int, min_length: int = 2) -> RequestSpec:
    length = draw.integer(min_length, MAX_PROMPT)
    family = draw.integer(0, FAMILIES - 1)
    tail = draw.integer(0, 2)
    arrive = draw.integer(0, 3)
    max_tokens = draw.integer(1, 6)
    length = _on_boundary(length, max_tokens, min_length, block_size, draw.choice(BOUNDARIES))
    shared = draw.integer(0, length)
    return RequestSpec(family=family, shared=shared, length=length, tail=tail, arrive=arrive,
                       max_tokens=max_tokens, abort=_abort(draw, arrive))


def _consumer_request(draw: Draws, bases: tuple[RequestSpec, ...]) -> RequestSpec:
    base = draw.choice(bases)
    kind = draw.choice(list(CONSUMER_LENGTHS))
    length = min(CONSUMER_LENGTHS[kind](draw, base), MAX_PROMPT + 40)
    fresh = kind == "fresh"
    family = FAMILIES + draw.integer(0, 2) if fresh else base.family
    arrive = draw.integer(0, 3)
    abort = _abort(draw, arrive)
    return RequestSpec(family=family, shared=0 if fresh else min(base.shared, length), length=length,
                       tail=base.tail + 10 if kind == "sibling" else base.tail, arrive=arrive,
                       max_tokens=draw.integer(1, 6), abort=abort)


def _first_min_length(chunked: bool) -> int:
    """``chunked``: the first prompt is longer than any chunked token budget, so its prefill spans steps."""
    return CHUNKED_MIN_PROMPT if chunked else 2


def _with_limits(draw: Draws, producer: tuple[RequestSpec, ...], peer: tuple[RequestSpec, ...],
                 consumer: tuple[RequestSpec, ...], chunked: bool, block_size: int, label: str = "") -> WorkloadSpec:
    """The workload around its requests: occupants, scheduler limits, and a pool the longest request fits."""
    occupants = draw.integer(0, 3)
    producer_occupants = draw.integer(0, 2)
    max_seqs = draw.choice([16, 4])
    token_budget = max(draw.choice([64, 48, 32]) if chunked else 2048, max_seqs)
    requests = producer + peer + consumer
    longest = max(-(-(r.length + r.max_tokens) // block_size) for r in requests)
    last = max(r.arrive for r in requests)
    occupant_blocks = max(occupants, producer_occupants) * -(-(OCCUPANT_LENGTH + last + OCCUPANT_TOKENS) // block_size)
    floor = longest + occupant_blocks + 2  # the null block, and room for one more
    num_blocks = draw.choice([48, floor + 4, floor])
    return WorkloadSpec(producer=producer, consumer=consumer, peer=peer, token_budget=token_budget,
                        num_blocks=max(num_blocks, floor), occupants=occupants,
                        producer_occupants=producer_occupants, max_seqs=max_seqs, block_size=block_size,
                        label=label)


def generate_workload(draw: Draws, chunked: bool, block_size: int = 32) -> WorkloadSpec:
    """``chunked``: the token budget is below the first prompt's length, so prefill spans steps; otherwise every
    prompt fits one step (the two are separate tests, so a connector's chunked-prefill bug hides nothing else)."""
    first = _producer_request(draw, block_size, min_length=_first_min_length(chunked))
    producer = (first, *_repeat(draw, lambda: _producer_request(draw, block_size), 0, 2))
    peer = _repeat(draw, lambda: _producer_request(draw, block_size), 0, 2)
    consumer = _repeat(draw, lambda: _consumer_request(draw, producer + peer), 1, 3)
    return _with_limits(draw, producer, peer, consumer, chunked, block_size)


def anchored_workload(draw: Draws, chunked: bool, block_size: int = 32) -> WorkloadSpec:
    """A generated workload whose consumer is served a hit by any connector that loads: its first producer
    request (p0) arrives first and runs to the end; its first consumer request (c0) arrives first on the fresh
    consumer, so nothing of the consumer's own is cached yet, with p0's prompt or an extension of it ending in the
    block of p0's last token, so the whole blocks before either prompt's last token are the same ones (one at
    least). p0 is never one token past a whole number of blocks: ExampleConnector's lookup misses its own store
    there (a finding the round-trip's one-past-block scenario records), and the anchor must not hang on it."""
    length = draw.integer(max(block_size + 2, _first_min_length(chunked)), MAX_PROMPT)
    if length % block_size == 1:
        length += 1
    family, shared, tail = draw.integer(0, FAMILIES - 1), draw.integer(0, length), draw.integer(0, 2)
    anchor = RequestSpec(family=family, shared=shared, length=length, tail=tail, max_tokens=draw.integer(1, 6))
    producer = (anchor, *_repeat(draw, lambda: _producer_request(draw, block_size), 0, 2))
    peer = _repeat(draw, lambda: _producer_request(draw, block_size), 0, 2)
    last_block_end = ((length - 1) // block_size + 1) * block_size
    hit = RequestSpec(family=family, shared=shared, length=length + draw.integer(0, last_block_end - length),
                      tail=tail, max_tokens=draw.integer(1, 6))
    consumer = (hit, *_repeat(draw, lambda: _consumer_request(draw, producer + peer), 0, 2))
    return _with_limits(draw, producer, peer, consumer, chunked, block_size, label=ANCHOR_LABEL)


# a normal run's workloads by index: the first anchored, the others generated
SEEDED_BUILDERS: tuple[Callable[[Draws, bool, int], WorkloadSpec], ...] = (anchored_workload,)


def seeded_workload(seed: str, index: int, chunked: bool, block_size: int = 32) -> WorkloadSpec:
    """Workload ``index`` of the test ``seed`` names: a pure function of the two (and the mode)."""
    build = SEEDED_BUILDERS[index] if index < len(SEEDED_BUILDERS) else generate_workload
    return build(SeededDraws(f"{seed}#{index}"), chunked, block_size)


def seeded_workloads(seed: str, count: int, chunked: bool, block_size: int = 32) -> Iterator[WorkloadSpec]:
    """A normal run's budget: ``count`` workloads, the anchored one first."""
    for index in range(count):
        yield seeded_workload(seed, index, chunked, block_size)


def workload_specs(chunked: bool, block_size: int = 32) -> SearchStrategy[WorkloadSpec]:
    """The generator as a Hypothesis strategy, for ``--kvconform-explore``."""
    from hypothesis import strategies as st

    @st.composite  # type: ignore[untyped-decorator]  # hypothesis is not followed
    def specs(draw: Callable[[SearchStrategy[Any]], Any]) -> WorkloadSpec:
        return generate_workload(HypothesisDraws(draw), chunked, block_size)

    return specs()
