"""vLLM's real ``Scheduler``, stepped the way the engine core steps it.

The engine core would call ``schedule()``, run the model, then
``update_from_output()``; this does the same with a ``ModelRunnerStandIn`` in place
of the model runner. The scheduler's connector is vLLM's own (the scheduler
builds it); every answer it gives is judged against base.py's promises as it is given (``enforce_promises``,
naming the step: ``at_step``), and its ``get_num_new_matched_tokens`` and ``request_finished`` answers are
recorded so the checks can compare the claim with what was stored, and so an ``assert``
of vLLM's scheduler that trips on them fails naming the connector's mistake
(``vllm_assertions``). The worker's reports of finished transfers are judged, as each reaches ``update_from_output``,
against those answers (``transfer_reports``: only kept sends and claimed asynchronous loads, each reported once),
and so is what vLLM's scheduler did with a finished send (freed the request). What each update takes from the
connector and publishes is judged too (``published``): the KV events its ``take_events()`` hands vLLM remove only
blocks announced stored (the ledger shared by the engines over one storage: ``published_blocks``, a rig's), and
reach the event publisher in that step; with ``log_stats`` (on by default, as in a served vLLM: the model-runner
stand-in reports the worker's stats every step, as vLLM's runner does), the connector stats vLLM returns are the
worker's and the scheduler side's together, and vLLM's stats logger can rebuild and summarize them
(``stats_logged``). With ``async_scheduling`` it is
vLLM's ``AsyncScheduler`` (the class the scheduler config names for that flag), stepped in the engine core's
batch-queue order (``step_with_batch_queue``). A config that names a scheduler class
(``SchedulerConfig.scheduler_cls``: ``scheduler_class``) gets that class, as the engine core gives it.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..vllm_install import api as vllm_api
from .block_sizes import engine_block_sizes
from .promises import ContractViolation, at_step, enforce_promises, side_label
from .published import (
    PublishedBlocks,
    StepPublication,
    events_not_published,
    returned_connector_stats,
    stats_not_aggregated,
)
from .requests import Image, block_hasher, new_request
from .stats_logged import StatsLog
from .transfer_reports import TransferReports, sends_not_freed
from .vllm_assertions import ConnectorAnswers, TrippedVllmAssertion, vllm_assertions_translated

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request

    from .runner import WorkerStep

# How long a connector may take, past the step budget, to report transfers it finishes in the background.
DRAIN_DEADLINE_S = 10.0
DRAIN_PACE_S = 0.02  # between steps past the step budget: lets a server's threads run


def watch_request_finished(connector: KVConnectorBase_V1, note: Callable[[Request, list[int], bool], None]) -> None:
    """Call ``note(request, its first group's block ids, whether the connector kept them)`` after each answer of
    the connector's ``request_finished`` (and ``request_finished_all_groups``, which vLLM's scheduler calls for
    SupportsHMA connectors); the answer goes back to vLLM unchanged, a malformed one unnoted."""
    for method in ("request_finished", "request_finished_all_groups"):
        answer = getattr(connector, method, None)
        if answer is None:
            continue

        def watched(request: Request, block_ids: Any, _answer: Any = answer) -> object:
            result = _answer(request, block_ids)
            if isinstance(result, tuple) and len(result) == 2:  # a malformed answer goes to vLLM as it is
                table = block_ids[0] if block_ids and isinstance(block_ids[0], (list, tuple)) else block_ids
                note(request, list(table), bool(result[0]))
            return result

        setattr(connector, method, watched)


def watch_partial_tails(connector: KVConnectorBase_V1, note: Callable[[Request, bool], None]) -> None:
    """Call ``note(request, whether the connector accepted it)`` after each answer of the connector's
    ``register_finished_partial_tail`` (vLLM's scheduler keeps a finished request's blocks for either answer)."""
    answer = getattr(connector, "register_finished_partial_tail", None)
    if answer is None:
        return

    def watched(request: Request, *args: Any, **kwargs: Any) -> object:
        accepted = answer(request, *args, **kwargs)
        note(request, accepted is True)
        return accepted

    connector.register_finished_partial_tail = watched


def served_log_stats() -> bool:
    """Whether a served vLLM's scheduler collects stats: the engine core builds it with ``log_stats = not
    disable_log_stats``, and ``vllm serve`` takes ``EngineArgs``' default (on: False in vLLM 0.32). vLLM's offline
    ``LLM`` turns them off unless asked, but a KV connector serves behind ``vllm serve``."""
    return not vllm_api.find("EngineArgs").disable_log_stats


def _reported(kv_output: KVConnectorOutput | None, channel: str) -> set[str]:
    return set(getattr(kv_output, channel, None) or ())


def next_token(tokens: list[int]) -> int:
    """The token the model stand-in samples after ``tokens``: fixed by the last one, so a check can name it ahead."""
    return (tokens[-1] + 1) % 997 + 1


@dataclass
class Claim:
    request_id: str
    num_computed_tokens: int
    num_external_tokens: int | None
    load_async: bool | None  # None: the answer was not a pair (the contract check reports it)


@dataclass
class SchedulerDriver:
    vllm_config: VllmConfig
    kv_cache_config: KVCacheConfig
    claims: dict[str, list[Claim]] = field(default_factory=dict)
    block_ids: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
    outputs: list[SchedulerOutput] = field(default_factory=list)
    # vLLM's AsyncScheduler, driven by step_with_batch_queue; the config's scheduler_config.async_scheduling says so
    async_scheduling: bool = False
    # vLLM's Scheduler collects stats (the connector's, its prefix-cache hits and their sources) and returns them;
    # by default as a served engine does (``served_log_stats``), so every step's are judged
    log_stats: bool = field(default_factory=served_log_stats)
    # batches scheduled so far: the next is step ``steps`` (counted from 0, as the workload counts its steps)
    steps: int = field(default=0, init=False)
    # (output, the model runner's output, its step), newest first
    _batches: deque[tuple[SchedulerOutput, ModelRunnerOutput, int]] = field(default_factory=deque)
    # the transfers the connector's answers started, judged against the worker's reports (engine/transfer_reports.py)
    transfers: TransferReports = field(default_factory=TransferReports, init=False)
    # the blocks the connector's KV events announced, shared by the engines over one storage (engine/published.py)
    published_blocks: PublishedBlocks = field(default_factory=PublishedBlocks)
    # what the update in progress took from the connector and handed on; None between updates
    _publication: StepPublication | None = field(default=None, init=False)
    _stream: int = field(default=0, init=False)  # this engine's number among those sharing ``published_blocks``
    # the checks' receivers of the connector's events in each batch vLLM publishes (``on_connector_events``)
    _event_receivers: list[Callable[[list[Any]], None]] = field(default_factory=list, init=False)
    # vLLM's stats logger of this engine's connector stats (engine/stats_logged.py); None with stats off
    _stats_log: StatsLog | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        scheduler_config = self.vllm_config.scheduler_config
        if self.async_scheduling:
            scheduler_config.async_scheduling = True
        if self.async_scheduling or scheduler_config.scheduler_cls is not None:
            Scheduler = scheduler_config.get_scheduler_cls()  # as the engine core picks it: a user's class first
        else:  # stepped synchronously: vLLM's Scheduler, whatever the platform's default timing
            Scheduler = vllm_api.find("Scheduler")
        StructuredOutputManager = vllm_api.find("StructuredOutputManager")

        # the engine core's sizes: the groups' LCM and GCD when their block sizes differ (engine/block_sizes.py)
        scheduler_block_size, hash_block_size = engine_block_sizes(self.vllm_config, self.kv_cache_config)
        self._block_hasher = block_hasher(self.vllm_config, hash_block_size)
        self.scheduler = Scheduler(
            vllm_config=self.vllm_config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            log_stats=self.log_stats,
        )
        self.connector = self.scheduler.connector
        self.answers = ConnectorAnswers(type(self.connector).__name__, self.claims)
        if self.connector is not None:
            # innermost, so every answer is judged before a recorder below (or a check's own) reads it
            enforce_promises(self.connector, side_label(type(self.connector).__name__, self.vllm_config, "scheduler"),
                             step=self._between_steps)
            self._record_claims(self.connector)
            watch_request_finished(self.connector, self._record_finished)
            watch_partial_tails(self.connector, lambda request, kept: self.transfers.finished(request.request_id, kept))
            self._watch_publication(self.connector)
            if self.log_stats:
                self._stats_log = StatsLog.of(self.vllm_config)

    @property
    def publication(self) -> StepPublication | None:
        """What the update in progress took from the connector and handed on (its events, the KV cache manager's
        own, the batches published); None between updates."""
        return self._publication

    def on_connector_events(self, receive: Callable[[list[Any]], None]) -> None:
        """Call ``receive`` with the connector's events in each batch vLLM's scheduler hands its event publisher (a
        batch holds its KV cache manager's own events first, set aside), as the batch is published."""
        if self.connector is None:
            raise ValueError("a scheduler without a KV connector publishes no connector events")
        self._event_receivers.append(receive)

    def _watch_publication(self, connector: KVConnectorBase_V1) -> None:
        """Note, during each ``update_from_output``, what vLLM's scheduler takes from the connector (its events and,
        with stats on, its scheduler side's stats) and what it hands its event publisher (``StepPublication``)."""
        self._stream = self.published_blocks.stream()
        scheduler = self.scheduler
        take_own, publish, take = scheduler.kv_cache_manager.take_events, scheduler.kv_event_publisher.publish, \
            connector.take_events

        def own_taken() -> Any:
            events = take_own()
            if self._publication is not None:
                self._publication.own.extend(events or ())
            return events

        def published(batch: Any) -> None:
            own = 0
            if self._publication is not None:
                self._publication.published.extend(batch.events)
                own = len(self._publication.own)
            for receive in self._event_receivers:
                receive(list(batch.events[own:]))
            publish(batch)

        def taken() -> Any:
            events = take()
            if self._publication is None:  # a check's own call, outside vLLM's update: not vLLM's to publish
                return events
            listed = list(events)  # vLLM reads it once, as a list or a generator alike
            self._publication.taken.extend(listed)
            return listed

        scheduler.kv_cache_manager.take_events = own_taken
        scheduler.kv_event_publisher.publish = published
        connector.take_events = taken  # type: ignore[method-assign]
        if self.log_stats:
            stats = connector.get_kv_connector_stats

            def counted() -> Any:
                value = stats()
                if self._publication is not None:  # copied as given: vLLM may aggregate the worker's into it
                    self._publication.scheduler_stats = copy.deepcopy(value)
                return value

            connector.get_kv_connector_stats = counted  # type: ignore[method-assign]

    def _between_steps(self) -> str:
        """Where a call made outside the driver's steps (an abort's finish hook, a check's question) stands."""
        return "before the first step" if self.steps == 0 else f"after step {self.steps - 1}"

    def _record_finished(self, request: Request, block_ids: list[int], kept: bool) -> None:
        self.answers.kept_blocks.setdefault(request.request_id, kept)
        self.transfers.finished(request.request_id, kept)

    def _record_claims(self, connector: KVConnectorBase_V1) -> None:
        answer = connector.get_num_new_matched_tokens

        def recorded(request: Request, num_computed_tokens: int) -> object:
            result = answer(request, num_computed_tokens)
            # recorded as returned: a malformed answer is the contract check's to report, not a crash here
            tokens, load_async = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
            self.claims.setdefault(request.request_id, []).append(
                Claim(request.request_id, num_computed_tokens, tokens, load_async))
            self.transfers.claimed(request.request_id, tokens, load_async)
            return result

        connector.get_num_new_matched_tokens = recorded

    def add(self, request_id: str, prompt: list[int], max_tokens: int = 1,
            kv_transfer_params: dict[str, Any] | None = None, stop_token_ids: list[int] | None = None,
            images: tuple[Image, ...] = (), prompt_logprobs: int | None = None) -> None:
        self.scheduler.add_request(new_request(request_id, prompt, self._block_hasher, max_tokens, kv_transfer_params,
                                               stop_token_ids, images, prompt_logprobs))

    def step(self, worker: WorkerStep) -> SchedulerOutput:
        """One engine step: schedule, run the worker side, feed the result back."""
        output, runner_output, number = self._schedule_and_run(worker)
        self._update(output, runner_output, number)
        return output

    def step_with_batch_queue(self, worker: WorkerStep) -> SchedulerOutput | None:
        """One call of the engine core's ``step_with_batch_queue`` (async scheduling); the batch it scheduled, if any.

        While the batch queue (``max_concurrent_batches`` long) has room and requests wait, a batch is scheduled
        and run and its output held back; otherwise the oldest batch's output goes back to the scheduler. So
        step N+1 is scheduled before step N's output, and the transfers its connector output reports, arrive."""
        scheduled = None
        if self.scheduler.has_requests():
            output, runner_output, number = self._schedule_and_run(worker)
            scheduled = output
            self._batches.appendleft((output, runner_output, number))
            if len(self._batches) < self.vllm_config.max_concurrent_batches and (
                    output.total_num_scheduled_tokens > 0 or self.scheduler.has_requests()):
                return scheduled
        elif not self._batches:
            return None
        self._update(*self._batches.pop())
        return scheduled

    def batches_in_flight(self) -> int:
        """Batches scheduled and run whose output the scheduler has not had yet (async scheduling)."""
        return len(self._batches)

    def _schedule_and_run(self, worker: WorkerStep) -> tuple[SchedulerOutput, ModelRunnerOutput, int]:
        """Schedule a batch and run the worker side on it; the model runner's output, not yet fed back, and the
        batch's step number."""
        runner_output_class = vllm_api.find("ModelRunnerOutput")

        number = self.steps
        self.steps += 1
        with at_step(f"step {number} (schedule)"), vllm_assertions_translated(self.answers):
            output = self.scheduler.schedule()
        for req_id in output.num_scheduled_tokens:
            self.block_ids[req_id] = self.scheduler.kv_cache_manager.get_block_ids(req_id)
        with at_step(f"step {number} (the worker's step)"):
            kv_output = worker.step(output)
        req_ids = list(output.num_scheduled_tokens)
        sampled = [[self._next_token(r)] if self._prompt_done(r) else [] for r in req_ids]
        index = ({"req_id_to_index": {r: i for i, r in enumerate(req_ids)}}
                 if vllm_api.has_field("ModelRunnerOutput.req_id_to_index") else {})
        runner_output: ModelRunnerOutput = runner_output_class(
            req_ids=req_ids, sampled_token_ids=sampled, kv_connector_output=kv_output, **index)
        return output, runner_output, number

    def _update(self, output: SchedulerOutput, runner_output: ModelRunnerOutput, number: int) -> None:
        kv_output = runner_output.kv_connector_output
        sending, recving = _reported(kv_output, "finished_sending"), _reported(kv_output, "finished_recving")
        # the worker's stats copied as reported: vLLM's scheduler aggregates the scheduler side's into them
        worker_stats = getattr(kv_output, "kv_connector_stats", None) if self.log_stats else None
        publication = self._publication = StepPublication(worker_stats=copy.deepcopy(worker_stats))
        with at_step(f"step {number} (update_from_output)"):
            try:
                with self._reports_judged(sending, recving, number), vllm_assertions_translated(self.answers):
                    returned = self.scheduler.update_from_output(output, runner_output)
            finally:
                self._publication = None
            self._check_sends_freed(sending, number)
            self._check_publication(publication, returned, number)
        self.outputs.append(output)

    @contextmanager
    def _reports_judged(self, sending: set[str], recving: set[str], number: int) -> Iterator[None]:
        """Run vLLM's update on the worker's report of finished transfers (``sending``, ``recving``), judged first
        (``TransferReports``).

        A wrong report fails as a ContractViolation naming the worker, the step, the channel and the requests, after
        the update ran as the engine core would run it: where vLLM's scheduler trips an assertion of its own on the
        same report, its translated words follow on the same line (they name its line)."""
        if self.connector is None:
            yield
            return
        problem = self.transfers.take(sending, recving, f"step {number}")
        if problem is None:
            yield
            return
        label = side_label(type(self.connector).__name__, self.vllm_config, "worker")
        channels = ", ".join(f"{name} {sorted(ids)}" for name, ids in (("finished_sending", sending),
                                                                       ("finished_recving", recving)) if ids)
        violation = ContractViolation(f"{label}, step {number} (update_from_output): the worker's report of "
                                      f"finished transfers ({channels}): {problem}")
        try:
            yield
        except TrippedVllmAssertion as error:
            raise ContractViolation(f"{violation}; vLLM's scheduler asserted on the same report: {error}") from error
        except Exception as error:  # vLLM's scheduler broke on the wrong report: the report is the cause
            raise violation from error
        raise violation

    def _check_sends_freed(self, sending: set[str], number: int) -> None:
        """vLLM's own half: once ``update_from_output`` has taken a finished send, the request and its blocks are
        freed; a scheduler that keeps them fails, named (not the connector)."""
        held = {rid: what for rid in sorted(sending) if (what := self._still_held(rid))}
        problem = sends_not_freed(held)
        if problem:
            raise ContractViolation(f"vLLM's scheduler ({type(self.scheduler).__name__}, with "
                                    f"{type(self.connector).__name__}), step {number} (update_from_output): {problem}")

    def _check_publication(self, publication: StepPublication, returned: Any, number: int) -> None:
        """The connector's events of the update, against those of the steps before (``PublishedBlocks``); then
        vLLM's own half, named (not the connector): what it took, published in the step, and its stats, both
        sides' together; last, the connector's again: its stats as vLLM's stats logger rebuilds and summarizes
        them (``StatsLog``)."""
        if self.connector is None:
            return
        connector = type(self.connector).__name__
        where = f"step {number} (update_from_output)"
        if problem := self.published_blocks.take(publication.taken, self._stream,
                                                 f"step {number} of engine {self._stream}"):
            raise ContractViolation(f"{side_label(connector, self.vllm_config, 'scheduler')}, {where}, engine "
                                    f"{self._stream} over this storage: the KV events its take_events() handed "
                                    f"vLLM: {problem}")
        vllm_scheduler = f"vLLM's scheduler ({type(self.scheduler).__name__}, with {connector}), {where}"
        if problem := events_not_published(publication.taken, len(publication.own), publication.published):
            raise ContractViolation(f"{vllm_scheduler}: KV events: {problem}")
        carried, stats = returned_connector_stats(returned)
        if self.log_stats and carried and (
                problem := stats_not_aggregated(stats, publication.worker_stats, publication.scheduler_stats)):
            raise ContractViolation(f"{vllm_scheduler}: connector stats: {problem}")
        if self._stats_log is not None and carried and (problem := self._stats_log.take(stats)):
            raise ContractViolation(f"{connector}, {where}: its transfer stats: {problem}")

    def _still_held(self, request_id: str) -> str | None:
        """What vLLM's scheduler still holds of a request, in words (its entry, its blocks); None when nothing."""
        request = self.scheduler.requests.get(request_id)
        try:
            blocks = [b for group in self.scheduler.kv_cache_manager.get_block_ids(request_id) for b in group]
        except (KeyError, IndexError):
            blocks = []
        held = ([f"the request ({request.status.name})"] if request is not None else []) + (
            [f"blocks {blocks}"] if blocks else [])
        return " and ".join(held) or None

    def _prompt_done(self, req_id: str) -> bool:
        request = self.scheduler.requests.get(req_id)
        return request is not None and request.num_computed_tokens >= request.num_prompt_tokens

    def _next_token(self, req_id: str) -> int:
        return next_token(self.scheduler.requests[req_id].all_token_ids)

    def run(self, worker: WorkerStep, max_steps: int = 32, drain_s: float = DRAIN_DEADLINE_S) -> int:
        """Step until every request finished and the connector has nothing in flight.

        Bounded by steps and by wall-clock time together: a connector whose saves finish
        on its own server (LMCache) reports them when the server is done, however many
        steps run meanwhile. Past ``max_steps`` the steps go on, paced, until ``drain_s``
        seconds have passed since the first one; only then is it a failure.
        """
        deadline = time.monotonic() + drain_s
        steps = 0
        while True:
            steps += 1
            self.step(worker)
            if not self.scheduler.has_requests() and not self._pending():
                return steps
            if steps >= max_steps:
                if time.monotonic() >= deadline:
                    break
                time.sleep(DRAIN_PACE_S)
        raise AssertionError(f"the scheduler did not drain in {steps} steps and {drain_s:g} s: "
                             f"{len(self.scheduler.requests)} request(s) still held")

    def _pending(self) -> bool:
        finished = getattr(self.scheduler, "finished_recving_kv_req_ids", None)
        return bool(self.scheduler.requests) or bool(finished)

    def answered_claim(self, request_id: str) -> Claim | None:
        """The connector's first decided answer for a request, as vLLM's scheduler acts on it.

        ``None`` tokens mean "ask again" (OffloadingConnector answers so while its lookup
        runs): vLLM's scheduler leaves the request waiting and asks on a later step, so a
        ``None`` is not a miss; the first answer that is not ``None`` is the claim.
        """
        return next((c for c in self.claims.get(request_id) or [] if c.num_external_tokens is not None), None)

    def external_tokens(self, request_id: str) -> int:
        """The external tokens the connector claimed for a request's lookup (0: no answer but "ask again")."""
        claim = self.answered_claim(request_id)
        return (claim.num_external_tokens or 0) if claim is not None else 0  # an answered claim's count is set
