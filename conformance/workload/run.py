"""A workload through vLLM's real Scheduler, with every invariant checked after every step.

Engines share the connector's storage: the producer serves its requests, a
peer (``workload_peer``: for a wrapper, its last child alone) serves the spec's
peer requests, then a fresh consumer serves its own (with ``occupants`` already
holding blocks, so its block ids are never the producer's). Each engine is stepped exactly as
the engine core steps it (``SchedulerDriver``); the worker side is the
``ModelRunnerStandIn`` in the model runner's call order, whose forward writes every
scheduled token's KV (a hash of its prefix, see ``workload_kv``). Arrivals,
aborts and the pool size come from the ``WorkloadSpec``; chunked prefill, decode
after a hit, waiting and preemption under a small pool are vLLM's own doing. What vLLM's
scheduler hands the connector at each finish is checked too (checks/finished_blocks.py); what the worker reports
finished (only kept sends and claimed asynchronous loads) is judged by the driver (engine/transfer_reports.py).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..checks.finished_blocks import finished_blocks_problem
from ..checks.offload_events import EventsRecord
from ..checks.wrapper_claims import watch_wrapper_claims
from ..engine.prompts import prompts_of
from ..engine.rig import Rig
from ..engine.scheduler import watch_request_finished
from ..engine.vllm_assertions import TrippedVllmAssertion
from ..vllm_install import api as vllm_api
from . import invariants as checks
from .invariants import WorkloadFailure
from .kv import PrefixKV
from .peer import peer_rig
from .spec import OCCUPANT_LENGTH, OCCUPANT_TOKENS, RequestSpec, WorkloadSpec

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

    from ..engine.rig import ConnectorUnderTest, EngineStandIn
    from ..engine.scheduler import Claim

PHASE_FILL_SEEDS = {"producer": 11, "peer": 13, "consumer": 12}  # caches start with other bytes, as a busy server's do
OCCUPANT_FAMILIES = {"producer": 10_000, "peer": 30_000, "consumer": 20_000}  # prompts of their own: no hits


@dataclass
class WorkloadRig(Rig):
    """A Rig sized by the workload: its pool size, token budget and sequence limit."""

    workload: WorkloadSpec = field(kw_only=True)

    @property
    def num_blocks(self) -> int:
        return self.workload.num_blocks

    def scheduler_limits(self) -> tuple[int, int]:
        return self.workload.max_seqs, self.workload.token_budget

    def vllm_config(self, role: str) -> VllmConfig:
        """The rig's config; with the workload's ``kv_events``, KV cache events enabled as a user enables them
        (published through vLLM's null publisher: the check reads what it is handed, nothing leaves the process)."""
        config = super().vllm_config(role)
        if self.workload.kv_events:
            from vllm.config import KVEventsConfig

            config.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        return config


@dataclass
class WorkloadReport:
    """What a workload exercised, so a check can refuse to pass on nothing."""

    steps: dict[str, int] = field(default_factory=dict)
    claimed_tokens: int = 0  # external tokens claimed on the consumer
    verified_loaded_tokens: int = 0  # of those, tokens whose loaded bytes were checked
    chunked_steps: int = 0  # steps where a prompt was computed only in part
    preemptions: int = 0
    aborts: int = 0
    promised_tokens: int = 0  # hit the profile's promise required of the consumer's claims, in all
    peer_hits: int = 0  # consumer requests that claimed a prompt only the peer engine had computed
    resumed_loads_beside_others: int = 0  # a request resumed from preemption loading external KV, others scheduled too
    resumed_chunked_loads: int = 0  # a request resumed from preemption loading external KV, scheduled in part
    boundary_finishes: int = 0  # requests finished (not aborted) with all their tokens filling whole blocks
    finished_block_lists: int = 0  # request_finished block lists checked against the requests' computed blocks
    kv_events_followed: int = 0  # offloading manager stores and evictions followed to vLLM's event publisher


@dataclass
class Ledger:
    """Token sequences some engine over this storage computed: the most a claim can rest on."""

    computed: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    # prompts an earlier engine computed in full and finished without an abort: what its connector had every
    # chance to store, so what a promised hit is owed for
    stored: dict[tuple[int, ...], str] = field(default_factory=dict)  # prompt -> the engine that computed it

    def record(self, phase: str, rid: str, tokens: list[int]) -> None:
        key = (phase, rid)
        if len(tokens) > len(self.computed.get(key, ())):
            self.computed[key] = tuple(tokens)

    def known(self) -> list[tuple[int, ...]]:
        return list(self.computed.values())


class EnginePhase:
    """One engine (producer or consumer) stepped through its part of the workload."""

    def __init__(self, name: str, rig: WorkloadRig, side: EngineStandIn, spec: WorkloadSpec, ledger: Ledger,
                 report: WorkloadReport, tested: ConnectorUnderTest | None = None, events: EventsRecord | None = None):
        self.name, self.rig, self.side, self.spec = name, rig, side, spec
        self.tested = tested or rig.connector  # the connector under test (the peer may run one of its children)
        self.ledger, self.report = ledger, report
        self.block_size = rig.block_size
        self.whole_blocks = rig.connector.profile.is_pair()
        self.kv = PrefixKV(side.caches, self.block_size)
        self.driver = side.scheduler
        self.scheduler = self.driver.scheduler
        self.requests: dict[str, RequestSpec] = self._occupants() | spec.requests(name)
        self.step_index = 0
        self.claims_checked: dict[str, int] = {}
        self.held: dict[str, dict[int, tuple[int, ...]]] = {}  # finished requests whose blocks the connector kept
        self.loaders: set[str] = set()  # requests that claimed external tokens
        self.verified: set[str] = set()  # loaders whose loaded bytes were checked
        self.preempted: set[str] = set()
        self.aborted: set[str] = set()
        self._plan: list[tuple[str, list[int], list[int], range]] = []
        self.loading_now: set[str] = set()  # requests that claimed external tokens for the step being run
        side.runner.forward = self._forward
        self._watch_request_finished()
        self.child_claims = watch_wrapper_claims(self.driver.connector)  # a wrapper: which child serves each hit
        self.events = events  # the KV events followed, when the workload enables them
        if events is not None:
            events.watch(name, self.driver)

    def _occupants(self) -> dict[str, RequestSpec]:
        count = self.spec.occupant_count(self.name)
        last = max((r.arrive for r in getattr(self.spec, self.name)), default=0)
        family = OCCUPANT_FAMILIES[self.name]
        return {f"{self.name[0]}occ{i}": RequestSpec(family=family + i, length=OCCUPANT_LENGTH,
                                                     max_tokens=last + OCCUPANT_TOKENS)
                for i in range(count)}

    def _watch_request_finished(self) -> None:
        """Check the block ids vLLM's scheduler hands each finished request's ``request_finished`` (its computed
        blocks exactly: checks/finished_blocks.py); record which finished requests the connector keeps blocks for."""
        def note(request: Request, table: list[int], kept: bool) -> None:
            rid = request.request_id
            self._check(finished_blocks_problem(rid, table, self._blocks(rid), request.num_computed_tokens,
                                                request.num_tokens, self.block_size))
            self.report.finished_block_lists += 1
            if request.num_tokens % self.block_size == 0 and request.status.name != "FINISHED_ABORTED":
                self.report.boundary_finishes += 1
            if kept:
                tokens = list(request.all_token_ids[:request.num_computed_tokens])
                self.held[request.request_id] = checks.held_blocks(table, tokens, self.block_size)

        watch_request_finished(self.scheduler.connector, note)

    # -- failure --------------------------------------------------------------------------------------

    def fail(self, problem: str) -> None:
        __tracebackhide__ = True
        engine = f"{self.name} engine" + ("" if self.rig.connector is self.tested else
                                          f" ({self.rig.connector.name} alone: the wrapper's last child)")
        raise WorkloadFailure(
            f"{self.tested.name}: {engine}, step {self.step_index}: {problem}\n"
            f"  workload: {self.spec.to_text()}\n"
            f"  replay: pytest --pyargs kvconform.conformance --platform={self.rig.platform.name} "
            f"--connector {self.tested.name} -k test_workload_replay "
            f"--kvconform-replay '{self.spec.to_text()}'")

    def _check(self, problem: str | None) -> None:
        if problem:
            self.fail(problem)

    # -- the engine loop ------------------------------------------------------------------------------

    def run(self) -> None:
        arrivals: dict[int, list[str]] = {}
        for rid, r in self.requests.items():
            arrivals.setdefault(r.arrive, []).append(rid)
        last_arrival = max(arrivals, default=0)
        bound = self.spec.step_bound(self.block_size) + last_arrival
        for self.step_index in range(bound):
            for rid in arrivals.get(self.step_index, ()):
                self.driver.add(rid, self.requests[rid].prompt(), self.requests[rid].max_tokens)
            self._abort_due()
            self.loading_now = set()
            if self.events is not None:
                self.events.step = self.step_index
            try:
                self.driver.step(self)
            except (WorkloadFailure, vllm_api.VllmApiError):  # the latter: kvconform cannot drive this vLLM
                raise
            except TrippedVllmAssertion as exc:  # vLLM's scheduler asserted on the connector's answers: said in words
                self.fail(f"{exc}{self._loads_note()}")
            except Exception as exc:  # a connector raised (or vLLM's scheduler, on an assertion not translated)
                self.fail(f"{type(exc).__name__} raised while stepping: {exc}{self._loads_note()}")
            self._after_update()
            if self.step_index >= last_arrival and not self.scheduler.has_requests() and not self.driver._pending():
                self.report.steps[self.name] = self.step_index + 1
                self._record_stored()
                return
        held = {rid: f"{req.status.name}, {req.num_computed_tokens}/{req.num_tokens} tokens computed"
                for rid, req in self.scheduler.requests.items()}
        self.fail(f"requests still held after {bound} steps (the bound for this workload): {held}")

    def _abort_due(self) -> None:
        RequestStatus = vllm_api.find("RequestStatus")

        due = [rid for rid, r in self.requests.items()
               if r.abort == self.step_index and rid in self.scheduler.requests]
        if due:
            aborted = self.scheduler.finish_requests(due, RequestStatus.FINISHED_ABORTED)
            self.aborted |= {r.request_id for r in aborted}
            self.report.aborts += len(aborted)

    def _record_stored(self) -> None:
        """Prompts this engine computed in full, of requests that were not aborted, for the engines after it."""
        for rid, r in self.requests.items():
            prompt = tuple(r.prompt())
            if rid not in self.aborted and self.ledger.computed.get((self.name, rid), ())[:len(prompt)] == prompt:
                self.ledger.stored.setdefault(prompt, self.name)

    def _loads_note(self) -> str:
        """The requests loading external KV when a step raised, so a crash names who was being served."""
        claimed_now = {rid for rid, claims in self.driver.claims.items()
                       if any(c.num_external_tokens for c in claims[self.claims_checked.get(rid, 0):])}
        loading = []
        for rid in sorted((self.loaders - self.verified) | claimed_now | self.loading_now):
            claims = self.driver.claims.get(rid) or []  # the latest answer: a resumed request is asked again
            claim = next((c for c in reversed(claims) if c.num_external_tokens is not None), None)
            if rid in self.scheduler.requests and claim is not None and claim.num_external_tokens:
                resumed = ", resumed after preemption" if self.scheduler.requests[rid].num_preemptions else ""
                loading.append(f"{rid} ({claim.num_external_tokens} external tokens claimed{resumed})")
        return f" (requests loading external KV: {', '.join(loading)})" if loading else ""

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        """The worker side of one step (``SchedulerDriver.step`` calls this), checked before and after."""
        self._check(self.child_claims.problem() if self.child_claims is not None else None)
        allocated = {rid: (self._blocks(rid), list(self.scheduler.requests[rid].all_token_ids))
                     for rid in scheduler_output.num_scheduled_tokens}
        self._check(checks.no_reuse_before_release(self.held, allocated, self.block_size))
        self._plan = self._forward_plan(scheduler_output)
        self.loading_now = self._note_claims()
        # a request loads only as it is admitted, so one loading after a preemption is resuming (0.32 lists it in
        # scheduled_cached_reqs.resumed_req_ids, 0.34 sends it again as a new request)
        resumed = {rid for rid in self.loading_now if self.scheduler.requests[rid].num_preemptions}
        if resumed and len(scheduler_output.num_scheduled_tokens) > 1:
            self.report.resumed_loads_beside_others += 1
        if any(self.scheduler.requests[rid].num_computed_tokens < self.scheduler.requests[rid].num_tokens
               for rid in resumed):  # vLLM advanced the count when scheduling: short of all tokens, a chunk
            self.report.resumed_chunked_loads += 1
        before = self.kv.snapshot()
        kv_output = self.side.runner.step(scheduler_output)
        self._check(checks.stray_writes(before, self.kv.snapshot(), self._writable(scheduler_output)))
        self._check_computed(scheduler_output, kv_output)
        for rid, _blocks, tokens, positions in self._plan:  # verified above: now a prefix the engine computed
            self.ledger.record(self.name, rid, tokens[:positions.stop])
        for rid in kv_output.finished_sending or ():
            self.held.pop(rid, None)
        return kv_output

    def _after_update(self) -> None:
        if self.events is not None:
            self._check(self.events.problem())
            self.report.kv_events_followed = self.events.followed()
        for rid, req in self.scheduler.requests.items():
            if req.num_computed_tokens:
                self.ledger.record(self.name, rid, list(req.all_token_ids[:req.num_computed_tokens]))
        self.preempted |= {rid for rid, req in self.scheduler.requests.items() if getattr(req, "num_preemptions", 0)}
        self.report.preemptions = max(self.report.preemptions, len(self.preempted))

    # -- the forward ----------------------------------------------------------------------------------

    def _blocks(self, rid: str) -> list[int]:
        try:
            return list(self.scheduler.kv_cache_manager.get_block_ids(rid)[0])
        except (KeyError, IndexError):
            return []

    def _forward_plan(self, scheduler_output: SchedulerOutput) -> list[tuple[str, list[int], list[int], range]]:
        plan = []
        for rid, count in scheduler_output.num_scheduled_tokens.items():
            req = self.scheduler.requests[rid]
            end = req.num_computed_tokens  # vLLM advances it when scheduling
            plan.append((rid, self._blocks(rid), list(req.all_token_ids), range(end - count, end)))
            if end < req.num_prompt_tokens:
                self.report.chunked_steps += 1
        return plan

    def _forward(self, layer: str, scheduler_output: SchedulerOutput) -> None:
        for _rid, blocks, tokens, positions in self._plan:
            self.kv.write(layer, blocks, tokens, positions)

    # -- per-step checks ------------------------------------------------------------------------------

    def _note_claims(self) -> set[str]:
        """Claims made while scheduling this step: within what was computed; async ones now in flight. Returns the
        requests that claimed external tokens in this step."""
        known = self.ledger.known()
        loading: set[str] = set()
        promise = self.tested.profile.promised_hit if self.name == "consumer" else None
        for rid, claims in self.driver.claims.items():
            for claim in claims[self.claims_checked.get(rid, 0):]:
                if rid not in self.requests:
                    continue
                prompt = self.requests[rid].prompt()
                self._check(checks.claim_within_known(rid, prompt, claim.num_computed_tokens,
                                                      claim.num_external_tokens, known))
                self._check(checks.claim_meets_promise(rid, prompt, claim.num_computed_tokens,
                                                       claim.num_external_tokens, self.ledger.stored,
                                                       promise, self.block_size))
                self._note_hit(rid, prompt, claim, promise)
                if claim.num_external_tokens:
                    self.loaders.add(rid)
                    loading.add(rid)
                    if self.name == "consumer":
                        self.report.claimed_tokens += claim.num_external_tokens
            self.claims_checked[rid] = len(claims)
        return loading

    def _note_hit(self, rid: str, prompt: list[int], claim: Claim, promise: str | None) -> None:
        """Count, for the report, the promises held and the hits on prompts only the peer had computed."""
        if self.name != "consumer" or claim.num_external_tokens is None:
            return
        if promise is not None:
            self.report.promised_tokens += checks.promised_tokens(prompt, self.ledger.stored, promise,
                                                                  self.block_size)[0]
        if claim.num_external_tokens <= 0:
            return
        total = claim.num_computed_tokens + claim.num_external_tokens
        sources = {engine for s, engine in self.ledger.stored.items()
                   if len(s) >= total and tuple(prompt[:total]) == s[:total]}
        if sources == {"peer"}:
            self.report.peer_hits += 1

    def _writable(self, scheduler_output: SchedulerOutput) -> dict[str, torch.Tensor]:
        """Per layer [B, N]: slots the forward wrote, and the slots of requests loading external KV."""
        import torch

        template = next(iter(self.kv.caches.values()))
        mask = torch.zeros(template.shape[0], template.shape[2], dtype=torch.bool)
        for _rid, blocks, _tokens, positions in self._plan:
            checks.allow(mask, blocks, positions, self.block_size, False)
        for rid in self.loaders:
            claims = self.driver.claims.get(rid) or []
            upto = max((c.num_computed_tokens + (c.num_external_tokens or 0) for c in claims), default=0)
            checks.allow(mask, self._blocks(rid), range(0, upto), self.block_size, self.whole_blocks)
        return {layer: mask for layer in self.kv.caches}

    def _check_computed(self, scheduler_output: SchedulerOutput, kv_output: KVConnectorOutput) -> None:
        trusted = {rid: (req.num_computed_tokens, "tokens the scheduler counts as computed")
                   for rid, req in self.scheduler.requests.items() if rid in scheduler_output.num_scheduled_tokens}
        for rid in kv_output.finished_recving or ():
            claims = self.driver.claims.get(rid) or []
            upto = max((c.num_computed_tokens + (c.num_external_tokens or 0) for c in claims), default=0)
            trusted[rid] = (upto, "tokens the connector reported as received")
        for rid, (upto, why) in trusted.items():
            req = self.scheduler.requests.get(rid)
            if req is None or req.is_finished():  # an aborted load owes no bytes: vLLM frees its blocks unread
                continue
            self._check(checks.computed_slots(self.kv, rid, list(req.all_token_ids), self._blocks(rid), upto, why))
            if rid in self.loaders and rid not in self.verified and self.name == "consumer":
                self.verified.add(rid)
                self.report.verified_loaded_tokens += upto


def run_workload(rig: WorkloadRig, spec: WorkloadSpec) -> WorkloadReport:
    """Producer, peer (when the spec has peer requests), consumer over one storage; raises ``WorkloadFailure``
    at the first broken invariant."""
    spec.validate()
    with prompts_of(spec.prompts) if spec.prompts else nullcontext():
        return _run_phases(rig, spec)


def _run_phases(rig: WorkloadRig, spec: WorkloadSpec) -> WorkloadReport:
    report, ledger = WorkloadReport(), Ledger()
    events = EventsRecord() if spec.kv_events else None
    producer_role, consumer_role = rig.roles()
    phases = [("producer", rig, producer_role)]
    if spec.peer:
        peer = peer_rig(rig)
        phases.append(("peer", peer, peer.roles()[0]))
    phases.append(("consumer", rig, consumer_role))
    for name, phase_rig, role in phases:
        side = phase_rig.engine(role, fill_seed=PHASE_FILL_SEEDS[name])
        try:
            EnginePhase(name, phase_rig, side, spec, ledger, report, tested=rig.connector, events=events).run()
        finally:
            side.close()
    if events is not None and events.managers and not events.stores():
        raise WorkloadFailure(f"{rig.connector.name}: KV events: the workload's engines completed no store through "
                              f"the connector's offloading manager, so no event was followed: nothing was checked\n"
                              f"  workload: {spec.to_text()}")
    return report
