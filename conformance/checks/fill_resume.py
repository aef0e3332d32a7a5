"""The fill across a preemption: a request resumed from preemption is filled only where its new claim says.

When vLLM preempts a running request it frees its blocks and sets its computed tokens back to 0; when the request
is admitted again, vLLM's scheduler asks the connector once more (``get_num_new_matched_tokens``) and hands it the
request's new blocks (``update_state_after_alloc``). A connector that synthesises KV (DecodeBenchConnector) may then
claim and fill the prompt again, or claim nothing and let the engine compute it; what it must never do is fill
slots of the tokens the request generated (their KV is the model's: vLLM recomputes it, or keeps it in its local
prefix cache), fill another request's blocks, or fill a request that was not preempted a second time.

The situation: two requests share a pool that holds exactly their prompts (``POOL_BLOCKS``); after three decode
steps the first crosses into a new block, and vLLM's Scheduler preempts the second (its last running request),
which resumes when the first finishes, with its prompt's whole blocks from the local prefix cache and the rest of
its prompt and its generated tokens to fill or compute. A stand-in forward (``ModelKV``) writes the
model's KV into every slot vLLM schedules, so after each step every computed slot of a scheduled request must
hold either the fill (``fill_mean``, exact in the cache dtype), and only at prompt positions its admission claimed,
or the model's bytes; and the bytes that changed in the step must lie in slots the forward wrote or in blocks of a
claim made in that step. Full attention only (one cache group): the hybrid groups' fills are
``fill.py``'s to check, one admission per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..engine.prompts import seeded_prompt
from ..engine.rig import Rig
from ..engine.slots import token_slots
from .fill import FillFailure

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput

    from ..engine.rig import EngineStandIn

POOL_BLOCKS = 6  # block 0 is vLLM's null block: 5 usable, exactly the two prompts' (2 + 3 blocks)
MAX_STEPS = 40
CACHE_SEED = 21  # the caches start with random bytes, as a busy server's do: a fill cannot hide


class ModelKV:
    """The model's stand-in over standard ``[B, H, N, C]`` views: a slot's bytes are a hash of (layer, position,
    token), so a slot holding the fill, another position's KV or stale bytes never passes for the model's."""

    def __init__(self, caches: dict[str, torch.Tensor], block_size: int):
        self.caches = caches
        self.block_size = block_size
        self.layer_index = {name: i for i, name in enumerate(caches)}

    def expected(self, layer: str, tokens: list[int], positions: range) -> torch.Tensor:
        """[T, nbytes]: the bytes the forward writes for ``tokens``' positions."""
        view = self.caches[layer]
        nbytes = view.shape[1] * view.shape[3] * view.element_size()
        pos = torch.arange(positions.start, positions.stop, dtype=torch.int64)[:, None]
        token = torch.tensor(tokens[positions.start:positions.stop], dtype=torch.int64)[:, None]
        x = (pos * 0x9E3779B1 + token * 0x85EBCA77 + (self.layer_index[layer] + 1) * 0xC2B2AE3D
             + (torch.arange(nbytes, dtype=torch.int64) + 1) * 0x27D4EB2F)
        x = (x ^ (x >> 15)) * 0x2C1B3C6D
        x = x ^ (x >> 13)
        return (x & 0xFF).to(torch.uint8)

    def write(self, layer: str, block_ids: list[int], tokens: list[int], positions: range) -> None:
        """The forward: the tokens at ``positions`` get their KV in their slots."""
        view = self.caches[layer]
        blocks, offsets = token_slots(block_ids, positions, self.block_size, view.device)
        data = self.expected(layer, tokens, positions).reshape(len(positions), view.shape[1], -1)
        view[blocks, :, offsets] = data.view(view.dtype).to(view.device)

    def read(self, layer: str, block_ids: list[int], positions: range) -> torch.Tensor:
        """[T, nbytes]: what the slots of a request's positions hold."""
        view = self.caches[layer]
        blocks, offsets = token_slots(block_ids, positions, self.block_size, view.device)
        return view[blocks, :, offsets].contiguous().view(torch.uint8).reshape(len(positions), -1).cpu()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Per layer, [B, N, nbytes] bytes of every slot: to see what a step changed."""
        return {name: view.permute(0, 2, 1, 3).contiguous().view(torch.uint8).reshape(view.shape[0], view.shape[2], -1)
                .cpu() for name, view in self.caches.items()}


@dataclass(frozen=True)
class ResumeRequest:
    request_id: str
    blocks: int  # prompt length in blocks ...
    extra: int  # ... plus these tokens (negative: fewer)
    max_tokens: int

    def prompt(self, block_size: int) -> list[int]:
        return seeded_prompt(f"resume-{self.request_id}", self.blocks * block_size + self.extra)


# In arrival order (vLLM preempts the last running request). "a" needs a third block for its 4th computed token
# (step 4) and finishes at step 6; "r" holds 3 blocks (its prompt ends 6 tokens into its third), has generated 3
# tokens when it is preempted, and resumes at step 7 with its first two blocks from the local prefix cache.
REQUESTS = (ResumeRequest("a", 2, -2, max_tokens=6), ResumeRequest("r", 2, 6, max_tokens=8))
PREEMPTED = "r"


@dataclass
class ResumeRig(Rig):
    """A Rig whose pool holds exactly the situation's two prompts, so decoding forces a preemption."""

    @property
    def num_blocks(self) -> int:
        return POOL_BLOCKS


@dataclass
class Admission:
    """A request's admission: the step, its local prefix hit, the tokens it claimed, whether it was resumed."""

    step: int
    local: int
    external: int
    resumed: bool


@dataclass
class ResumeResult:
    preempted_at: int | None = None
    generated_before_preemption: int = 0
    resumed: Admission | None = None
    admissions: dict[str, list[Admission]] = field(default_factory=dict)
    checked_slots: int = 0  # computed slots whose bytes were compared, over all steps and layers


def _ranges(positions: list[int]) -> str:
    """[3, 4, 5, 9] -> "3..5, 9"."""
    runs: list[list[int]] = []
    for p in sorted(positions):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


def _admitted(output: SchedulerOutput) -> set[str]:
    """Requests this step admits: new ones, and (vLLM 0.32) resumed ones listed among the cached requests."""
    new = {data.req_id for data in output.scheduled_new_reqs}
    return new | set(getattr(output.scheduled_cached_reqs, "resumed_req_ids", None) or ())


class _ResumeWorker:
    """Stands between vLLM's Scheduler and the model runner: forward, claims and bytes checked each step."""

    def __init__(self, name: str, side: EngineStandIn, mean: float, block_size: int, result: ResumeResult):
        self.name, self.side, self.mean, self.block_size, self.result = name, side, mean, block_size, result
        self.scheduler = side.scheduler.scheduler
        self.kv = ModelKV({layer: cache for layer, cache in side.caches.items() if isinstance(cache, torch.Tensor)},
                           block_size)
        self.prompt_lengths: dict[str, int] = {}
        self.filled: dict[str, set[int]] = {}  # request -> positions that must hold the fill
        self.step_index = 0
        self._plan: list[tuple[str, list[int], list[int], range]] = []
        side.runner.forward = self._forward

    # -- the forward

    def _blocks(self, rid: str) -> list[int]:
        return list(self.scheduler.kv_cache_manager.get_block_ids(rid)[0])

    def _forward(self, layer: str, scheduler_output: SchedulerOutput) -> None:
        if layer in self.kv.caches:
            for _rid, blocks, tokens, positions in self._plan:
                self.kv.write(layer, blocks, tokens, positions)

    # -- one step

    def step(self, output: SchedulerOutput) -> KVConnectorOutput:
        self.step_index += 1
        self._note_preemptions(output)
        self._plan = []
        for rid, count in output.num_scheduled_tokens.items():
            request = self.scheduler.requests[rid]
            end = request.num_computed_tokens  # vLLM advanced it when it scheduled the step
            self._plan.append((rid, self._blocks(rid), list(request.all_token_ids), range(end - count, end)))
        claimed = self._note_admissions(output)
        before = self.kv.snapshot()
        kv_output = self.side.runner.step(output)
        self._check_changes(before, self.kv.snapshot(), claimed, output)
        for rid, blocks, tokens, positions in self._plan:
            self._check_slots(rid, blocks, tokens, positions.stop)
        return kv_output

    def _note_preemptions(self, output: SchedulerOutput) -> None:
        for rid in getattr(output, "preempted_req_ids", None) or ():
            if rid == PREEMPTED and self.result.preempted_at is None:
                self.result.preempted_at = self.step_index
                self.result.generated_before_preemption = self.scheduler.requests[rid].num_output_tokens

    def _note_admissions(self, output: SchedulerOutput) -> dict[str, range]:
        """Each admitted request's claim (its last answer, the one vLLM acted on): the positions that must hold
        the fill from now on. Returns the positions each claim covers."""
        claimed: dict[str, range] = {}
        for rid, _blocks, _tokens, positions in self._plan:
            if rid not in _admitted(output):
                continue
            request = self.scheduler.requests[rid]
            self.prompt_lengths[rid] = request.num_prompt_tokens
            claims = self.side.scheduler.claims.get(rid) or []
            external = (claims[-1].num_external_tokens or 0) if claims else 0
            local = positions.start - external
            admission = Admission(self.step_index, local, external, resumed=request.num_preemptions > 0)
            self.result.admissions.setdefault(rid, []).append(admission)
            if admission.resumed and rid == PREEMPTED and self.result.resumed is None:
                self.result.resumed = admission
            claimed[rid] = range(local, local + external)
            # slots past the local hit are new blocks: what they must hold is decided again
            kept = {p for p in self.filled.get(rid, set()) if p < local}
            self.filled[rid] = kept | {p for p in claimed[rid] if p < request.num_prompt_tokens}
        return claimed

    # -- the checks

    def _event(self, rid: str) -> str:
        admission = self.result.admissions[rid][-1]
        what = (f"request {rid} resumed from preemption (preempted at step {self.result.preempted_at} after "
                f"generating {self.result.generated_before_preemption} token(s))" if admission.resumed
                else f"request {rid}, admitted at step {admission.step}")
        return (f"{what}; its admission claimed {admission.external} token(s) from position {admission.local} "
                f"(local prefix hit {admission.local}) over a {self.prompt_lengths[rid]}-token prompt")

    def _fill_bytes(self, layer: str) -> torch.Tensor:
        view = self.kv.caches[layer]
        return torch.full(view.shape[1:2] + view.shape[3:], self.mean, dtype=view.dtype).view(torch.uint8).flatten()

    def _check_slots(self, rid: str, blocks: list[int], tokens: list[int], computed: int) -> None:
        """Every computed slot holds the fill where the claim put it (prompt positions only), else the model's KV."""
        filled = self.filled.get(rid, set())
        for layer in self.kv.caches:
            held = self.kv.read(layer, blocks, range(computed))
            model = self.kv.expected(layer, tokens, range(computed))
            fill = self._fill_bytes(layer)
            is_fill = (held == fill).all(dim=1)
            is_model = (held == model).all(dim=1)
            want_fill = torch.zeros(computed, dtype=torch.bool)
            want_fill[torch.tensor(sorted(p for p in filled if p < computed), dtype=torch.long)] = True
            wrong = torch.where(want_fill, ~is_fill, ~is_model).nonzero().flatten().tolist()
            self.result.checked_slots += computed
            if wrong:
                raise FillFailure(self._slot_message(rid, layer, blocks, wrong, is_fill, want_fill))

    def _slot_message(self, rid: str, layer: str, blocks: list[int], wrong: list[int], is_fill: torch.Tensor,
                      want_fill: torch.Tensor) -> str:
        prompt = self.prompt_lengths[rid]
        filled_over = [p for p in wrong if not want_fill[p] and is_fill[p]]
        if filled_over:
            kind = (f"tokens it generated, past its {prompt}-token prompt" if max(filled_over) >= prompt
                    else "tokens the model computed")
            problem = (f"hold the fill {self.mean} at position(s) {_ranges(filled_over)} ({kind}), where the model's "
                       f"KV must be: the fill landed over slots the request computed (channel: the fill, in the "
                       f"blocks handed for its claim)")
            shown = filled_over
        else:
            unfilled = [p for p in wrong if want_fill[p]]
            shown = unfilled or wrong
            problem = (f"hold neither the fill nor the model's KV at position(s) {_ranges(shown)}"
                       + (" (prompt positions its claim covers: channel: the fill never wrote them)" if unfilled
                          else " (channel: another write over slots the model computed)"))
        block_ids, offsets = token_slots(blocks, range(len(want_fill)), self.block_size)
        slots = sorted({(int(block_ids[p]), int(offsets[p])) for p in shown})
        where = ", ".join(f"block {b} offset {o}" for b, o in slots[:4]) + (" ..." if len(slots) > 4 else "")
        return (f"{self.name}: step {self.step_index} ({self._event(rid)}): layer {layer}: request {rid}'s slots "
                f"{problem}; slots: {where}")

    def _check_changes(self, before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                       claimed: dict[str, range], output: SchedulerOutput) -> None:
        """The step changed only slots the forward wrote and blocks of the claims made in it."""
        for layer, old in before.items():
            changed = (after[layer] != old).any(dim=2)
            allowed = torch.zeros_like(changed)
            for rid, blocks, _tokens, positions in self._plan:
                ids, offsets = token_slots(blocks, positions, self.block_size)
                allowed[ids, offsets] = True
                if rid in claimed and len(claimed[rid]):
                    first, last = claimed[rid].start // self.block_size, (claimed[rid].stop - 1) // self.block_size
                    allowed[blocks[first:last + 1]] = True
            stray = (changed & ~allowed).nonzero().tolist()
            if stray:
                raise FillFailure(self._stray_message(layer, stray, claimed, output))

    def _stray_message(self, layer: str, stray: list[list[int]], claimed: dict[str, range],
                       output: SchedulerOutput) -> str:
        block = min(b for b, _ in stray)
        offsets = sorted(o for b, o in stray if b == block)
        owner = next((rid for rid in self.scheduler.requests if block in self._blocks(rid)), None)
        if owner is None:
            whose = "the null block, which no request owns" if block == 0 else "a block no request holds"
        elif owner in claimed:
            whose = f"request {owner}'s, outside the blocks of the tokens it claimed in this step"
        else:
            admissions = self.result.admissions.get(owner, [])
            history = (f"not preempted, filled once already at step {admissions[-1].step}: it must never be "
                       f"filled again" if admissions and not admissions[-1].resumed
                       else "which claimed nothing in this step")
            whose = f"request {owner}'s, {history}"
        handed = getattr(output.kv_connector_metadata, "reqs_to_fill", None)
        channel = (f"; the blocks handed to the worker this step: "
                   f"{ {rid: entry[0] for rid, entry in handed.items()} }" if isinstance(handed, dict) else "")
        return (f"{self.name}: step {self.step_index}: layer {layer}: the fill changed block {block} ({whose}) at "
                f"offset(s) {_ranges(offsets)}; {len(stray)} slot(s) in all outside the slots the step computed and "
                f"the blocks of its claims {({rid: [r.start, r.stop] for rid, r in claimed.items()})}{channel}")


def run_fill_resumed(rig: ResumeRig) -> ResumeResult:
    """Drive the situation; raise FillFailure on a fill over computed slots, another request's blocks or a
    refill, and on a run that did not preempt and resume the request (harness)."""
    name = rig.connector.name
    profile_config = rig.connector.profile.extra_config
    if "fill_mean" not in profile_config or float(profile_config.get("fill_std", 0.0)):
        raise FillFailure(f"{name}: the resumed-fill check reads a constant fill (fill_mean, fill_std 0) from the "
                          f"profile's extra_config; its profile gives {dict(profile_config)}")
    result = ResumeResult()
    side = rig.engine(fill_seed=CACHE_SEED)
    try:
        worker = _ResumeWorker(name, side, float(profile_config["fill_mean"]), rig.block_size, result)
        for request in REQUESTS:
            side.scheduler.add(request.request_id, request.prompt(rig.block_size), max_tokens=request.max_tokens)
        side.scheduler.run(worker, max_steps=MAX_STEPS)
    finally:
        side.close()
    if result.preempted_at is None or result.resumed is None or not result.generated_before_preemption:
        raise FillFailure(f"{name}: harness: vLLM's Scheduler did not preempt request {PREEMPTED} after it decoded "
                          f"and resume it (preempted at step {result.preempted_at}, resumed: {result.resumed}); "
                          f"the pool of {POOL_BLOCKS} blocks of {rig.block_size} tokens no longer forces it")
    return result
