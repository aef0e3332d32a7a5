"""A workload as data: what a server sees, small enough to print and replay exactly.

Two or three phases over one connector storage, as disaggregated or cached serving has them: a
*producer* engine serves requests (its connector stores them), an optional *peer* serves others into one
store only (``workload_peer``: a wrapper's last child), then a fresh *consumer* serves its own (its
connector finds, claims and loads). Each request names a prompt family (a shared prefix, then diverging),
its arrival, its output length and any abort; ``occupants`` arrive first on the consumer and keep
decoding, so its blocks are never the producer's. A spec prints as one line of JSON (``to_text``) and
reads back (``from_text``): what ``--kvconform-replay`` takes and a failure message shows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..engine.prompts import prompt_rng
from ..engine.scheduler import next_token

VOCAB = 997  # token ids 1..997 (the tiny model's vocabulary is 1000)


class SpecError(ValueError):
    """A workload spec that cannot be read; the message says which field and why."""


@dataclass(frozen=True)
class RequestSpec:
    family: int = 0  # prompts of one family share their first ``shared`` tokens
    shared: int = 0  # tokens taken from the family's common stem
    length: int = 64  # prompt length in tokens (>= shared)
    tail: int = 0  # seed of the tokens after the stem: equal tails make equal prompts
    arrive: int = 0  # engine step at which the request is added
    max_tokens: int = 1  # tokens to generate (1: prefill only; more: decode steps follow)
    abort: int | None = None  # engine step at which the client aborts it (None: runs to the end)
    # a conversation's next turn: after the prompt, the ``reply`` tokens an engine sampled after it (the output of a
    # request of this prompt with max_tokens >= reply), then ``then`` new tokens of this family
    reply: int = 0
    then: int = 0

    def prompt(self) -> list[int]:
        stem = _tokens(("stem", self.family), self.shared)
        tokens = stem + _tokens(("tail", self.family, self.shared, self.tail), self.length - self.shared)
        for _ in range(self.reply):
            tokens.append(next_token(tokens))
        return tokens + _tokens(("turn", self.family, self.tail), self.then)


@dataclass(frozen=True)
class WorkloadSpec:
    producer: tuple[RequestSpec, ...] = ()
    consumer: tuple[RequestSpec, ...] = ()
    peer: tuple[RequestSpec, ...] = ()  # served after the producer by an engine writing one store only
    token_budget: int = 2048  # max_num_batched_tokens: below a prompt's length, prefill is chunked
    num_blocks: int = 48  # blocks per engine: small pools make requests wait and blocks recycle
    occupants: int = 0  # consumer requests that arrive first and hold blocks throughout
    producer_occupants: int = 0  # the same on the producer (so block ids differ on both sides)
    max_seqs: int = 16  # max_num_seqs
    block_size: int = 32  # tokens per block (CPU_ATTN runs multiples of 32; GPU backends take 32 too)
    # vLLM's kv_events_config enables KV cache events (a user's setting): the connector's events are followed to
    # vLLM's event publisher (checks/offload_events.py)
    kv_events: bool = False
    label: str = field(default="", compare=False)  # a name for people; not part of the workload
    # whose prompts: the token ids are drawn for this owner (engine/prompts.py), one per run, so no other
    # workload's or test's KV is a hit; printed with the spec, so a replay draws the same tokens
    prompts: str = ""

    def to_text(self) -> str:
        data = asdict(self)
        for side in SIDES:
            data[side] = [_compact(r) for r in getattr(self, side)]
        shown = {k: v for k, v in data.items() if v != _DEFAULTS.get(k) and not (k == "peer" and not v)}
        return json.dumps(shown, separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> WorkloadSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"a workload spec is one line of JSON: {exc}") from None
        if not isinstance(data, dict):
            raise SpecError("a workload spec is a JSON object")
        known = {f.name for f in fields(WorkloadSpec)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown workload field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        for side in SIDES:
            data[side] = tuple(_request(r, side, i) for i, r in enumerate(data.get(side, ())))
        spec = WorkloadSpec(**data)
        spec.validate()
        return spec

    def validate(self) -> None:
        for name in ("token_budget", "num_blocks", "max_seqs", "block_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SpecError(f"{name} must be a positive integer, not {getattr(self, name)!r}")
        if not isinstance(self.kv_events, bool):
            raise SpecError(f"kv_events must be true or false, not {self.kv_events!r}")
        if self.token_budget < self.max_seqs:
            raise SpecError(f"token_budget ({self.token_budget}) must be at least max_seqs ({self.max_seqs}), "
                            "as vLLM's SchedulerConfig requires")
        for side in SIDES:
            for i, r in enumerate(getattr(self, side)):
                if not 0 <= r.shared <= r.length or r.length < 2:
                    raise SpecError(f"{side}[{i}]: need 0 <= shared <= length and length >= 2 ({r})")
                if r.reply < 0 or r.then < 0:
                    raise SpecError(f"{side}[{i}]: need reply >= 0 and then >= 0 ({r})")
                if r.max_tokens < 1 or r.arrive < 0 or (r.abort is not None and r.abort < r.arrive):
                    raise SpecError(f"{side}[{i}]: need max_tokens >= 1, arrive >= 0, abort >= arrive ({r})")

    def requests(self, side: str) -> dict[str, RequestSpec]:
        """Request id -> spec; ids say the side and index so a failure names them plainly."""
        return {f"{ID_PREFIX[side]}{i}": r for i, r in enumerate(getattr(self, side))}

    def occupant_count(self, side: str) -> int:
        return self.occupants if side == "consumer" else self.producer_occupants

    def step_bound(self, block_size: int) -> int:
        """Steps after which a request still held is stuck: generous, but finite."""
        requests = list(self.producer) + list(self.peer) + list(self.consumer)
        work = sum(-(-(r.length + r.reply + r.then) // max(1, self.token_budget)) + r.max_tokens for r in requests)
        last = max((r.arrive for r in requests), default=0)
        return last + work + 16


SIDES = ("producer", "peer", "consumer")  # the engines, in the order they run
ID_PREFIX = {"producer": "p", "peer": "x", "consumer": "c"}  # request ids: p0, x0, c0, ...
OCCUPANT_LENGTH = 40
OCCUPANT_TOKENS = 4  # decode steps an occupant keeps its blocks after the other requests arrive


def _tokens(key: tuple[object, ...], count: int) -> list[int]:
    rng = prompt_rng(repr(key))  # the current owner's: no other test's or workload's prompts
    return [rng.randrange(1, VOCAB + 1) for _ in range(count)]


_REQUEST_DEFAULTS = asdict(RequestSpec())
_DEFAULTS = {k: v for k, v in asdict(WorkloadSpec()).items() if k not in SIDES}


def _compact(request: RequestSpec) -> dict[str, Any]:
    return {k: v for k, v in asdict(request).items() if v != _REQUEST_DEFAULTS[k]}


def _request(data: object, side: str, index: int) -> RequestSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{side}[{index}] must be a JSON object")
    unknown = sorted(set(data) - set(_REQUEST_DEFAULTS))
    if unknown:
        raise SpecError(f"{side}[{index}]: unknown field(s) {', '.join(unknown)}; "
                        f"known: {', '.join(_REQUEST_DEFAULTS)}")
    return RequestSpec(**data)
