"""The scheduler half of a connector whose worker half cannot run here, driven through vLLM's real Scheduler.

OffloadingConnector's worker half refuses CPU (SimpleCPUOffloadConnector's crashes there), so every other check
skips (or fails) it there. This one runs its scheduler half in vLLM's ``Scheduler`` (``SchedulerDriver``) over a
small block pool, under preemption, aborts and finishes with stores in flight, block reuse and a reload, with a
feeder for the family's worker contract (checks/half_families.py: ``OffloadingWorkerFeeder``,
``SimpleOffloadWorkerFeeder``) playing the worker half on a chosen ``Timing``; the ``async`` timing
drives vLLM's ``AsyncScheduler`` in the engine core's batch-queue order, so step N+1 is scheduled (and its
lookups asked) before step N's output reports the transfers that finished. Per step it holds the
scheduler half to vLLM's contract with its worker half: each job asked for once; stores read and loads
write only their request's blocks, at ``GPULoadStoreSpec.block_indices``; no block a store has not read
is overwritten first (vLLM frees blocks at once, so such stores must be flushed: ``jobs_to_flush``); no
hit claimed for a block whose store the scheduler half has not been told finished (a load issued then may read
KV not yet written); the stats it hands vLLM's scheduler (``get_kv_connector_stats``, every step) keep the CPU
cache's usage gauges whole: usage is the share pinned by transfers in flight, split into the stores' (write) and
the loads' (read) shares, as vLLM's CPU spec documents them, so write + read == usage; at
the end nothing pending and every block back in the pool; and each family's own promises about its claims, its
stores and its KV events (``WorkerContract``; the events through vLLM's publisher: checks/half_events.py). The
result names the half that ran (``kvconform.half``). docs/checks.md says more. The rules live here, not in
workload/invariants.py: those judge bytes a worker moved, none moves here, and checks/ may not import workload/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from ..engine import kvcache
from ..engine.check_failure import CheckFailure
from ..engine.offloading_worker_feeder import Ask, JobId, Timing, Transfer
from ..engine.prompts import request_prompt
from ..engine.rig import ConnectorRefused, Rig, refusal_as
from ..engine.scheduler import SchedulerDriver, watch_request_finished
from ..vllm_install import api as vllm_api
from .half_events import HalfEvents, StoredBlock, stored_blocks
from .half_families import contract_of_class, worker_contract
from .half_timings import ASYNC

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

BLOCK_SIZE = 32  # tokens per block: CPU_ATTN runs multiples of 32, GPU backends take 32 too
IDLE_STEPS = 8  # steps an engine with nothing in flight may keep stepping for the scheduler half's pending work
# vLLM's CPU offloading manager's usage gauges (CPUOffloadingMetrics, vllm/v1/kv_offload/cpu/common.py): the share of
# the CPU cache pinned by transfers in flight, by in-flight stores, by in-flight loads
USAGE_GAUGE = "vllm:kv_offload_cpu_cache_usage_perc"
WRITE_USAGE_GAUGE = "vllm:kv_offload_cpu_cache_write_usage_perc"
READ_USAGE_GAUGE = "vllm:kv_offload_cpu_cache_read_usage_perc"
GAUGE_TOLERANCE = 1e-9  # the gauges are ratios of chunk counts: float rounding only


class SchedulerHalfFailure(CheckFailure):
    """The scheduler half broke vLLM's contract with its worker half; the message names step, job and blocks."""


@dataclass(frozen=True)
class Arrival:
    rid: str
    step: int
    prompt: int  # request_prompt's index: arrivals with one index share a prompt (the later one may load it)
    length: int
    max_tokens: int
    # aborted this many steps after its first scheduled step (a prefill chunk's store in flight), if at all
    abort_after: int | None = None


@dataclass(frozen=True)
class HalfWorkload:
    doc: str
    num_blocks: int
    max_seqs: int
    token_budget: int
    arrivals: tuple[Arrival, ...]


LIFECYCLE = HalfWorkload(
    doc="two requests decoding in a pool of 11 blocks, a third prefilled in chunks beside them until a decoder "
        "needs a block and vLLM preempts it (its last chunk's store in flight; it comes back and loads its "
        "prefix); then a long request holding most of the pool while one-token requests go through the rest one "
        "after another, each finishing with its store in flight as the next takes its blocks, one aborted after "
        "its first chunk; and the preempted prompt again at the end (a load)",
    num_blocks=12,
    max_seqs=4,
    token_budget=64,
    arrivals=(
        Arrival("d0", 0, 0, 90, 40), Arrival("d1", 0, 1, 90, 40),
        Arrival("n0", 5, 2, 160, 4),
        Arrival("h0", 44, 3, 250, 24),
        Arrival("s0", 45, 4, 64, 1), Arrival("s1", 45, 5, 64, 1), Arrival("x0", 45, 6, 64, 8, abort_after=1),
        Arrival("s2", 45, 7, 64, 1), Arrival("s3", 45, 8, 64, 1),
        Arrival("r0", 64, 2, 160, 2),
    ),
)


# what the async timing adds to the workload: the preempted request's prompt again, right after the preemption
# (n0's, at step 9), looked up beside the preempted request itself before the scheduler has heard that the store
# flushed at the preemption finished (step 9's output comes back after step 10 is scheduled)
ASYNC_ARRIVALS = (Arrival("p0", 10, 2, 160, 2),)
ASYNC_DOC = ("; under async scheduling, the preempted request's prompt again right after its preemption (p0), "
             "looked up while its stores are in flight")


# what a family's workload adds (by the family's name, checks/half_families.py): for SimpleCPUOffloadConnector,
# whose hits must leave the last token, n0's prompt (filling 5 blocks exactly, all of them stored) asked again while
# r0's copy still sits in vLLM's prefix cache: the local hit covers 4 blocks, the offload cache the fifth
FAMILY_ARRIVALS = {"SimpleCPUOffloadConnector": (Arrival("r1", 84, 2, 160, 2),)}
FAMILY_DOC = "; then n0's prompt once more, its leading blocks in vLLM's prefix cache and its last one offloaded (r1)"


def with_family_arrivals(workload: HalfWorkload, family: str) -> HalfWorkload:
    """The workload with ``FAMILY_ARRIVALS`` of ``family`` added."""
    extra = FAMILY_ARRIVALS.get(family, ())
    if not extra:
        return workload
    return replace(workload, arrivals=workload.arrivals + extra, doc=workload.doc + FAMILY_DOC)


def workload_for(timing: Timing, workload: HalfWorkload) -> HalfWorkload:
    """The workload a timing runs: the async timing adds ``ASYNC_ARRIVALS``."""
    if timing is not ASYNC:
        return workload
    return replace(workload, arrivals=workload.arrivals + ASYNC_ARRIVALS, doc=workload.doc + ASYNC_DOC)


@dataclass
class HalfReport:
    """What the workload exercised, so a test can refuse to pass on nothing."""

    steps: int = 0
    stores: int = 0
    loads: int = 0
    flushes: int = 0
    preempted_in_flight: int = 0  # preemptions of a request with a store not done
    finished_in_flight: int = 0  # requests finished (or aborted) with a store not done
    # blocks written with other content right after a flush protected their store: a preempted request's, a
    # finished (or aborted) request's
    reused_after_preemption: int = 0
    reused_after_finish: int = 0
    out_of_order: int = 0  # stores reported before one submitted earlier
    aborts: int = 0
    # lookups of a request while a store of one of its prompt's blocks was not yet reported finished to vLLM's
    # scheduler (a preempted request's own, or another request's with the same prefix)
    lookups_with_store_in_flight: int = 0
    # stats snapshots whose CPU cache usage gauges showed stores in flight (write usage above 0)
    usage_gauges_with_stores_in_flight: int = 0
    # stored blocks whose BlockStored reached vLLM's event publisher (families whose KV events the check follows)
    stored_events: int = 0
    # finished requests every computed block of which had been asked to be stored by the store their finish queued
    finished_fully_offloaded: int = 0

    def describe(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in vars(self).items())


@dataclass
class SchedulerHalfRig(Rig):
    """A Rig sized by the workload: its pool and scheduler limits."""

    half: HalfWorkload = LIFECYCLE

    @property
    def num_blocks(self) -> int:
        return self.half.num_blocks

    def scheduler_limits(self) -> tuple[int, int]:
        return self.half.max_seqs, self.half.token_budget


def worker_half_refusal(rig: Rig) -> str | None:
    """Why the worker half does not run on this platform, in its own words; None when it builds here.

    Built the way every other check builds it (``Rig.engine``: the worker half first, as vLLM's worker
    builds it), so the words are what those checks' skips quote, or, where it crashes (SimpleCPUOffloadConnector
    on CPU), the crash those checks fail on: this check judges the scheduler half, the others judge that crash.
    """
    try:
        engine = rig.engine()
    except ConnectorRefused as exc:
        return f"it refuses it: {exc.__cause__ or exc}"
    except Exception as exc:  # a crash of the worker half: the round-trip and contract checks fail on it
        rig.close_engines()
        return f"it crashes there ({type(exc).__name__}: {exc}; the round-trip and contract checks fail on that)"
    engine.close()
    return None


def half_label(platform: str, refusal: str | None) -> str:
    """The ``kvconform.half`` property: which half the check exercised, and why not the other."""
    if refusal is not None:
        return f"scheduler half; the worker half does not run on {platform}: {refusal}"
    return (f"scheduler half, its worker half played by the feeder for the timing; the worker half runs on "
            f"{platform} too (the round-trip and contract checks drive it)")


# -- the rules, one function each (None, or what is wrong in words) ----------------------------------------

def overwritten_store_source(store: str, reads: dict[int, tuple[int, ...]],
                             writes: dict[int, tuple[str, int, tuple[int, ...]]], why: str) -> str | None:
    """None when no block a store still reads is written with other content; else the first such block, in words.

    ``reads``: block id -> the prefix whose KV the store reads there (its request's tokens up to the block's
    end); ``writes``: block id -> (writing request, block index in its table, the prefix it writes there). A
    write of the same prefix (the store's own request computing the tokens it is about to store) is no
    conflict; any other write means the store would save another request's KV under this one's keys.
    """
    for block, prefix in reads.items():
        write = writes.get(block)
        if write is None or write[2] == prefix:
            continue
        writer, index, _ = write
        return (f"{store} had not read block {block} yet when request {writer} wrote it (its block {index}, other "
                f"tokens than the store's){why}")
    return None


def blocks_outside_table(what: str, blocks: list[int], rid: str, table: list[int] | None) -> str | None:
    """None when every block is in request ``rid``'s block table; else which are not, in words."""
    if table is None:
        return f"{what} names request {rid}, which holds no blocks in vLLM's scheduler"
    outside = [b for b in blocks if b not in table]
    if outside:
        return (f"{what} names GPU block(s) {outside}, which vLLM's KV cache manager has not allocated to request "
                f"{rid} (its blocks: {table})")
    return None


def usage_gauges_problem(values: dict[str, float]) -> str | None:
    """None when a stats snapshot's CPU cache gauges (``reduce()``'s names -> values) are shares in [0, 1] whose
    write and read parts add up to the usage; else what is wrong, in words. A snapshot without them: None."""
    gauges = {name: values.get(name) for name in (USAGE_GAUGE, WRITE_USAGE_GAUGE, READ_USAGE_GAUGE)}
    if all(value is None for value in gauges.values()):
        return None
    shown = ", ".join(f"{name} {value}" for name, value in gauges.items())
    out_of_range = [name for name, value in gauges.items() if value is None or not 0.0 <= value <= 1.0]
    if out_of_range:
        return (f"the connector's stats hand vLLM the CPU cache gauges {shown}: {', '.join(out_of_range)} missing or "
                f"outside [0, 1] (a share of the CPU cache)")
    usage, write, read = (float(value) for value in gauges.values() if value is not None)
    if abs(write + read - usage) > GAUGE_TOLERANCE:
        return (f"the connector's stats hand vLLM the CPU cache gauges {shown}: the shares pinned by stores in "
                f"flight (write) and by loads in flight (read) add up to {write + read}, not to the share pinned by "
                f"transfers in flight ({usage}); vLLM's Prometheus logger would publish a read usage that no load "
                f"pins")
    return None


def load_out_of_place(what: str, blocks: list[int], first_index: int, rid: str, table: list[int]) -> str | None:
    """None when a load's destination blocks are request ``rid``'s blocks ``first_index``, ``first_index + 1``, ...
    in order (a ``GPULoadStoreSpec``'s block ids and ``block_indices``); else the first misplaced one, in words."""
    for i, block in enumerate(blocks):
        k = first_index + i
        want = table[k] if k < len(table) else None
        if block != want:
            return (f"{what} writes the KV of request {rid}'s block {k} into GPU block {block}, but vLLM allocated "
                    f"{'block ' + str(want) if want is not None else 'no block'} there (its blocks: {table}): "
                    f"the loaded tokens would land at other positions")
    return None


class HalfRun:
    """One workload through vLLM's Scheduler with the feeder as the worker half, checked every step."""

    def __init__(self, name: str, driver: SchedulerDriver, timing: Timing, workload: HalfWorkload):
        self.name, self.driver = name, driver
        self.scheduler = driver.scheduler
        self.contract = worker_contract(self.scheduler.connector)
        self.workload = with_family_arrivals(workload, self.contract.family)
        self.feeder = self.contract.feeder(timing, self._owner, self._forward)
        self.report = HalfReport()
        self.step_index = -1
        self.tables: dict[str, tuple[list[int], list[int]]] = {}  # last known (block table, tokens) per request
        self.reads: dict[JobId, dict[int, tuple[int, ...]]] = {}  # store job -> block -> prefix it reads there
        self.load_writes: dict[JobId, dict[int, tuple[str, int, tuple[int, ...]]]] = {}  # load job -> its writes
        self.claims: dict[str, tuple[int, int]] = {}  # request -> (tokens computed, tokens claimed) of its last hit
        self.asked_to_store = 0  # GPU blocks the scheduler half asked the worker to store, in all
        self.preempted_at: dict[str, int] = {}
        self.first_scheduled: dict[str, int] = {}
        self.finished_at: dict[str, int] = {}
        self.hashes: dict[str, list[bytes]] = {}  # last known block hashes per request
        self.store_blocks: dict[JobId, list[StoredBlock]] = {}  # store job -> the blocks its events must name
        self.owed_events: set[JobId] = set()  # store jobs whose blocks' events are owed already
        self.events = HalfEvents(BLOCK_SIZE) if self.contract.kv_events else None
        if self.events is not None:
            self.events.watch(driver)
        # request -> (the first step scheduled after its finish, (block index, prefix) of each block it computed)
        self.finish_stores_due: dict[str, tuple[int, list[tuple[int, tuple[int, ...]]]]] = {}
        self._watch_request_finished()
        self._watch_lookups()
        self._watch_stats()

    # -- failure --------------------------------------------------------------------------------------

    def fail(self, problem: str) -> NoReturn:
        __tracebackhide__ = True
        raise SchedulerHalfFailure(
            f"{self.name} (scheduler half in vLLM's {type(self.scheduler).__name__}, worker played by the feeder, "
            f"timing {self.feeder.timing.name}: {self.feeder.timing.doc}), step {self.step_index}: {problem}\n"
            f"  workload: {self.workload.doc}")

    def _check(self, problem: str | None) -> None:
        __tracebackhide__ = True
        if problem:
            self.fail(problem)

    # -- the engine loop ------------------------------------------------------------------------------

    def run(self, max_steps: int = 400) -> HalfReport:
        RequestStatus = vllm_api.find("RequestStatus")

        last_event = max(a.step for a in self.workload.arrivals)
        idle = 0
        for step in range(max_steps):
            for a in self.workload.arrivals:
                if a.step == step:
                    self.driver.add(a.rid, request_prompt(a.prompt, a.length), a.max_tokens)
                first = self.first_scheduled.get(a.rid)
                if a.abort_after is not None and first is not None and step == first + a.abort_after \
                        and a.rid in self.scheduler.requests:
                    self.scheduler.finish_requests([a.rid], RequestStatus.FINISHED_ABORTED)
                    self.report.aborts += 1
            try:
                if self.driver.async_scheduling:
                    self.driver.step_with_batch_queue(self)
                else:
                    self.driver.step(self)
            except (SchedulerHalfFailure, vllm_api.VllmApiError):  # the latter: kvconform cannot play this vLLM
                raise
            except Exception as exc:  # the scheduler half (or vLLM's scheduler asserting on its answers) raised
                self.fail(f"{type(exc).__name__} raised while stepping: {exc}")
            if step < last_event:
                continue
            unfinished = self.scheduler.get_num_unfinished_requests()
            if not unfinished and self.feeder.idle():
                if not self.scheduler.has_requests() and not self.driver.batches_in_flight():
                    self.report.steps = step + 1
                    self._check_events()
                    self._check_finish_stores(final=True)
                    self._check_drained()
                    return self.report
                idle += 1
                if idle > IDLE_STEPS:
                    self.fail(f"the scheduler half still has pending work (has_pending_push_work() is "
                              f"{self.scheduler.connector.has_pending_push_work()}, which keeps vLLM's engine "
                              f"stepping) {idle} steps after the last request finished and every transfer its "
                              f"metadata asked for was reported finished ({self.report.stores} stores, "
                              f"{self.report.loads} loads): it waits for a job it never asked the worker for")
        held = {rid: f"{req.status.name}, {req.num_computed_tokens}/{req.num_tokens} tokens computed"
                for rid, req in self.scheduler.requests.items()}
        in_flight = [t.describe() for t in self.feeder.in_flight()]
        self.fail(f"not drained after {max_steps} steps: requests still held {held}; transfers in flight "
                  f"{in_flight}")

    def _check_drained(self) -> None:
        pool = self.scheduler.kv_cache_manager.block_pool
        free, usable = pool.get_num_free_blocks(), self.workload.num_blocks - 1  # block 0 is vLLM's null block
        if free != usable:
            self.fail(f"every request finished and every transfer was reported, but only {free} of vLLM's "
                      f"{usable} usable blocks are back in its pool")

    # -- one step of the worker half (SchedulerDriver.step calls this) --------------------------------

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        self.step_index = self.feeder.step_index + 1
        self._check_events()
        self._record_tables()
        for rid in scheduler_output.num_scheduled_tokens:
            self.first_scheduled.setdefault(rid, self.step_index)
        self._check_asks(self.contract.asks(scheduler_output.kv_connector_metadata, self._owner))
        self._check_finish_stores()
        for rid in scheduler_output.preempted_req_ids or ():
            self.preempted_at[rid] = self.step_index
            if any(t.req_id == rid and t.kind == "store" and not t.done for t in self.feeder.transfers.values()):
                self.report.preempted_in_flight += 1
        output = self.feeder.step(scheduler_output)
        self.report.flushes += sum(1 for t in self.feeder.transfers.values() if t.flushed == self.step_index)
        self._note_reports()
        return output

    def _owner(self, block: int, among: Sequence[str] | None) -> str | None:
        """The request holding GPU block ``block``: a live one (of ``among``, where given), else the one that
        finished last with it in its table."""
        for rid in among if among is not None else list(self.scheduler.requests):
            if block in self._live_table(rid):
                return rid
        finished = sorted(self.finished_at, key=lambda rid: -self.finished_at[rid])
        return next((rid for rid in finished if block in self.tables.get(rid, ([], []))[0]), None)

    def _record_tables(self) -> None:
        for rid, req in self.scheduler.requests.items():
            ids = self._live_table(rid)
            if ids:
                self.tables[rid] = (ids, list(req.all_token_ids))
            self.hashes[rid] = list(req.block_hashes)

    def _live_table(self, rid: str) -> list[int]:
        try:
            return list(self.scheduler.kv_cache_manager.get_block_ids(rid)[0])
        except (KeyError, IndexError):
            return []

    def _check_asks(self, asks: Sequence[Ask]) -> None:
        """The step's jobs: each asked for once; a store reads its request's blocks, a load writes its own."""
        for ask in asks:
            first = self.feeder.transfers.get(ask.job_id)
            if first is not None:
                self.fail(f"the metadata asks for {ask.kind} job {ask.job_id} again, already asked for as "
                          f"{first.describe()}: the worker would run it twice and report it finished twice")
            if ask.req_id is None:
                self.fail(f"the metadata asks the worker to {ask.kind} GPU block(s) {ask.blocks}, which no request "
                          f"in vLLM's scheduler holds (nor held when it finished)")
        for ask in asks:
            if ask.req_id is not None:
                (self._note_store if ask.kind == "store" else self._note_load)(ask, ask.req_id)

    def _note_store(self, ask: Ask, rid: str) -> None:
        """A store reads blocks of its request's table (its last known one: a finished request's too)."""
        ids, tokens = self.tables.get(rid, (None, []))
        self._check(blocks_outside_table(f"store job {ask.job_id}", ask.blocks, rid, ids))
        assert ids is not None  # blocks_outside_table reports a request without a table
        self.reads[ask.job_id] = {b: tuple(tokens[:(ids.index(b) + 1) * BLOCK_SIZE]) for b in ask.blocks}
        if self.events is not None:
            self.store_blocks[ask.job_id] = stored_blocks(rid, self.hashes.get(rid, []), tokens,
                                                          [ids.index(b) for b in ask.blocks], BLOCK_SIZE)
        self.asked_to_store += len(ask.blocks)
        self.report.stores += 1

    def _note_load(self, ask: Ask, rid: str) -> None:
        """A load writes blocks of its request's live table, from where its hit began."""
        ids = self._live_table(rid) or None
        self._check(blocks_outside_table(f"load job {ask.job_id}", ask.blocks, rid, ids))
        assert ids is not None  # blocks_outside_table reports a request without a table
        start = ask.first_index
        if start is None and rid in self.claims:  # where its hit began: the tokens computed locally
            start = self.claims[rid][0] // BLOCK_SIZE
        if start is not None:
            self._check(load_out_of_place(f"load job {ask.job_id}", ask.blocks, start, rid, ids))
        tokens = list(self.scheduler.requests[rid].all_token_ids)
        self.load_writes[ask.job_id] = {b: (rid, k, tuple(tokens[:(k + 1) * BLOCK_SIZE]))
                                        for b in ask.blocks for k in [ids.index(b)]}
        self.report.loads += 1

    def _forward(self, scheduler_output: SchedulerOutput) -> None:
        """After the step's flushes: what the forward and the step's loads write, against unread stores."""
        step = self.step_index
        writes: dict[int, tuple[str, int, tuple[int, ...]]] = {}
        for rid, count in scheduler_output.num_scheduled_tokens.items():
            req = self.scheduler.requests[rid]
            ids, tokens, end = self._live_table(rid), list(req.all_token_ids), req.num_computed_tokens
            for k in range((end - count) // BLOCK_SIZE, (end - 1) // BLOCK_SIZE + 1):
                writes[ids[k]] = (rid, k, tuple(tokens[:(k + 1) * BLOCK_SIZE]))
        for job_id, transfer in self.feeder.transfers.items():
            if transfer.kind == "load" and transfer.issued == step:
                writes.update(self.load_writes[job_id])
        for job_id, transfer in self.feeder.transfers.items():
            if transfer.kind != "store":
                continue
            reads = self.reads[job_id]
            if not transfer.done:
                self._check(overwritten_store_source(transfer.describe(), reads, writes, self._why(transfer)))
            elif transfer.flushed == step:
                reused = sum(1 for b, p in reads.items() if b in writes and writes[b][2] != p)
                if transfer.req_id in self.preempted_at and self.preempted_at[transfer.req_id] >= transfer.issued:
                    self.report.reused_after_preemption += reused
                else:
                    self.report.reused_after_finish += reused

    def _why(self, transfer: Transfer) -> str:
        rid, step = transfer.req_id, self.step_index
        tail = (f"; step {step}'s metadata did not flush it (jobs_to_flush: the worker waits for those in "
                f"handle_preemptions, before the forward), so the worker would store the other request's KV "
                f"under request {rid}'s keys")
        if rid in self.preempted_at and self.preempted_at[rid] >= transfer.issued:
            return (f": request {rid} was preempted at step {self.preempted_at[rid]} with this store in flight, "
                    f"and vLLM handed its blocks to another request{tail}")
        if rid in self.finished_at:
            return (f": request {rid} finished at step {self.finished_at[rid]} with this store in flight (or asked "
                    f"for after), and its blocks went back to vLLM's pool at once (request_finished did not "
                    f"delay the free){tail}")
        return tail

    def _note_reports(self) -> None:
        step = self.step_index
        unread = [t for t in self.feeder.transfers.values() if t.kind == "store" and t.reported is None]
        for t in self.feeder.transfers.values():
            if t.kind == "store" and t.reported == step and t.submitted is not None and any(
                    u.submitted is not None and u.submitted < t.submitted for u in unread):
                self.report.out_of_order += 1

    def _watch_lookups(self) -> None:
        """Hold each lookup's claim to the stores vLLM's scheduler has had reported finished: a claimed block whose
        store is still in flight may be loaded before it is written (vLLM's manager answers HIT_PENDING for it: ask
        again)."""
        connector = self.scheduler.connector
        answer = connector.get_num_new_matched_tokens

        def checked(request: Request, num_computed_tokens: int, *args: Any, **kwargs: Any) -> object:
            result = answer(request, num_computed_tokens, *args, **kwargs)
            self._check_lookup(request, num_computed_tokens, result)
            return result

        connector.get_num_new_matched_tokens = checked

    def _check_lookup(self, request: Request, computed: int, result: object) -> None:
        answer = result[0] if isinstance(result, tuple) and len(result) == 2 else None
        if isinstance(answer, int) and answer > 0:
            self.claims[request.request_id] = (computed, answer)
        if isinstance(answer, int):
            self._check(self._family_claim_problem(request, computed, answer))
        heard = len(self.driver.outputs)  # steps whose output (and the transfers it reports) vLLM's scheduler has had
        stores = [t for t in self.feeder.transfers.values() if t.kind == "store"]
        tokens = list(request.all_token_ids)
        prefixes = {tuple(tokens[:(k + 1) * BLOCK_SIZE]): k for k in range(request.num_prompt_tokens // BLOCK_SIZE)}
        unheard = {prefix: t for t in stores if t.reported is None or t.reported >= heard
                   for prefix in self.reads.get(t.job_id, {}).values() if prefix in prefixes}
        if not unheard:
            return
        self.report.lookups_with_store_in_flight += 1
        claimed = result[0] if isinstance(result, tuple) and len(result) == 2 else None
        if not isinstance(claimed, int) or claimed <= 0:
            return
        stored = {prefix for t in stores if t.reported is not None and t.reported < heard
                  for prefix in self.reads.get(t.job_id, {}).values()}
        for prefix, transfer in unheard.items():
            k = prefixes[prefix]
            if computed <= k * BLOCK_SIZE < computed + claimed and prefix not in stored:
                where = ("the worker is still writing it" if transfer.reported is None else
                         f"the worker finished it in step {transfer.reported}, whose output vLLM's scheduler has "
                         f"not had yet (async scheduling: step {self.feeder.step_index + 1} is scheduled before it "
                         f"arrives)")
                self.fail(f"the lookup of request {request.request_id} claimed {claimed} tokens beyond {computed} "
                          f"computed, covering its block {k}, whose only store, {transfer.describe()}, the scheduler "
                          f"half had not been told was finished ({where}): a block whose store is in flight is no "
                          f"hit yet (vLLM's offloading manager answers HIT_PENDING for it: ask again), and a load "
                          f"issued now may read KV not yet written")

    def _stored_prefixes(self) -> set[tuple[int, ...]]:
        """The prefixes whose stores vLLM's scheduler has had reported finished."""
        heard = len(self.driver.outputs)
        return {prefix for t in self.feeder.transfers.values()
                if t.kind == "store" and t.reported is not None and t.reported < heard
                for prefix in self.reads.get(t.job_id, {}).values()}

    def _capacity_blocks(self) -> int | None:
        """The blocks the family's offload cache holds (its capacity setting over a GPU block's bytes, less vLLM's
        null block); None where the family names no capacity setting or the profile does not set it."""
        key = self.contract.capacity_key
        transfer_config = self.driver.vllm_config.kv_transfer_config
        extra = (transfer_config.kv_connector_extra_config or {}) if transfer_config is not None else {}
        config = self.driver.kv_cache_config
        if key is None or key not in extra or not config.num_blocks:
            return None
        block_bytes = sum(t.size for t in config.kv_cache_tensors) // config.num_blocks
        return int(extra[key]) // block_bytes - 1 if block_bytes else None

    def _family_claim_problem(self, request: Request, computed: int, claimed: int) -> str | None:
        """The family's own promises about a claim (``WorkerContract``): the last token left to compute; every
        block stored, and never evicted, claimed."""
        rid, total = request.request_id, request.num_tokens
        claim = f"the lookup of request {rid} claimed {claimed} tokens beyond {computed} computed"
        why_last = self.contract.leaves_last_token
        if why_last and computed + claimed > total - 1:
            return (f"{claim}, {computed + claimed} of its {total} tokens: none left for vLLM to compute, though "
                    f"{why_last}; vLLM samples the next token from the last one's forward")
        capacity = self._capacity_blocks()
        if capacity is None or self.asked_to_store > capacity or computed % BLOCK_SIZE:
            return None
        stored, tokens = self._stored_prefixes(), list(request.all_token_ids)
        first = end = computed // BLOCK_SIZE
        while end < request.num_prompt_tokens // BLOCK_SIZE and tuple(tokens[:(end + 1) * BLOCK_SIZE]) in stored:
            end += 1
        most = (total - 1) // BLOCK_SIZE * BLOCK_SIZE if why_last else total
        least = min(end * BLOCK_SIZE, most) - computed
        if claimed >= least:
            return None
        return (f"{claim}, but its blocks {first} to {end - 1} were stored (their stores reported finished to vLLM's "
                f"scheduler) and never evicted (the scheduler half was asked to store {self.asked_to_store} blocks, "
                f"its {self.contract.capacity_key} holds {capacity}): a hit of {least} tokens was there, and the "
                f"family's lookup returns its consecutive cached blocks")

    def _watch_stats(self) -> None:
        """Hold each stats snapshot vLLM's scheduler takes (once per ``update_from_output``) to
        ``usage_gauges_problem``; the snapshot goes to vLLM unchanged."""
        connector = self.scheduler.connector
        answer = connector.get_kv_connector_stats

        def checked() -> object:
            stats = answer()
            reduce = getattr(stats, "reduce", None)
            values = reduce() if callable(reduce) and not stats.is_empty() else {}
            self._check(usage_gauges_problem(values))
            if values.get(WRITE_USAGE_GAUGE, 0) > 0:
                self.report.usage_gauges_with_stores_in_flight += 1
            return stats

        connector.get_kv_connector_stats = checked

    def _check_events(self) -> None:
        """The events owed for every store whose finish vLLM's scheduler has heard (``HalfEvents``)."""
        if self.events is None:
            return
        heard = len(self.driver.outputs)
        for job_id, transfer in self.feeder.transfers.items():
            if (transfer.kind == "store" and transfer.reported is not None and transfer.reported < heard
                    and job_id not in self.owed_events):
                self.owed_events.add(job_id)
                self.events.owe(transfer.reported, self.store_blocks.get(job_id, ()))
        self._check(self.events.problem())
        self.report.stored_events = self.events.matched

    def _check_finish_stores(self, final: bool = False) -> None:
        """Hold each finished request to the family's ``stores_computed_blocks``: once the step after its finish is
        scheduled (the store its finish queued asked for), every block it computed has been asked to be stored, by
        it or by an earlier request with the same prefix (a block already offloaded is not stored twice)."""
        why = self.contract.stores_computed_blocks
        capacity = self._capacity_blocks()
        if why is None or self._lazy() or capacity is None or self.asked_to_store > capacity:
            return
        asked = {prefix for reads in self.reads.values() for prefix in reads.values()}
        for rid, (due, blocks) in list(self.finish_stores_due.items()):
            if not final and self.step_index < due:
                continue
            del self.finish_stores_due[rid]
            missing = [k for k, prefix in blocks if prefix not in asked]
            if missing:
                self.fail(f"request {rid} finished at step {self.finished_at.get(rid, '?')} having computed its "
                          f"blocks 0 to {len(blocks) - 1}, yet by step {self.step_index} (the store its finish "
                          f"queued asked for) its block(s) {missing} were never asked to be stored, by it or by a "
                          f"request with the same prefix, though the CPU cache ({self.contract.capacity_key} holds "
                          f"{capacity} blocks, {self.asked_to_store} asked for) had room: {why}; a later request "
                          f"with this prefix misses them")
            self.report.finished_fully_offloaded += 1

    def _lazy(self) -> bool:
        """Whether the profile turns the family's eager stores off (``WorkerContract.lazy_key``)."""
        key, transfer_config = self.contract.lazy_key, self.driver.vllm_config.kv_transfer_config
        extra = (transfer_config.kv_connector_extra_config or {}) if transfer_config is not None else {}
        return bool(key and extra.get(key))

    def _watch_request_finished(self) -> None:
        """Record each finished request's blocks as vLLM hands them to the connector, and whether it kept them."""
        def note(request: Request, table: list[int], kept: bool) -> None:
            rid = request.request_id
            self.tables[rid] = (table, list(request.all_token_ids))
            self.hashes[rid] = list(request.block_hashes)
            tokens, computed = list(request.all_token_ids), request.num_computed_tokens
            self.finish_stores_due[rid] = (self.driver.steps, [(k, tuple(tokens[:(k + 1) * BLOCK_SIZE]))
                                                              for k in range(computed // BLOCK_SIZE)])
            if not kept:
                self.finished_at[rid] = self.step_index
            if any(t.req_id == rid and t.kind == "store" and not t.done for t in self.feeder.transfers.values()):
                self.report.finished_in_flight += 1

        watch_request_finished(self.scheduler.connector, note)


def build_driver(rig: Rig, async_scheduling: bool = False, kv_events: bool = False) -> SchedulerDriver:
    """vLLM's Scheduler (AsyncScheduler with ``async_scheduling``) over the rig's config and pool; it builds the
    connector's scheduler half itself. ``kv_events``: KV cache events enabled as a user enables them (through vLLM's
    null publisher: the check reads what it is handed, nothing leaves the process)."""
    with refusal_as(ConnectorRefused, rig.connector):  # vLLM's config validation or the scheduler half may refuse
        config = rig.vllm_config("kv_both")
        if kv_events:
            from vllm.config import KVEventsConfig

            config.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        kv_cache_config = kvcache.build_kv_cache_config(config, [(rig.layer_names(), rig.attention_spec())],
                                                        rig.num_blocks)
        return SchedulerDriver(config, kv_cache_config, async_scheduling=async_scheduling)


@dataclass
class HalfResult:
    report: HalfReport
    label: str  # which half ran (the ``kvconform.half`` property)
    unexercisable: dict[str, str]  # report counters the family's worker contract never produces -> why
    not_met: dict[str, str]  # situations the check does not meet for the family -> why (WorkerContract.not_met)


def run_scheduler_half(rig: SchedulerHalfRig, timing: Timing) -> HalfResult:
    """The workload through the scheduler half, the feeder playing the worker; raises ``SchedulerHalfFailure``.

    A scheduler half that refuses the platform too is ``ConnectorRefused`` (a skip quoting it): no half ran."""
    refusal = worker_half_refusal(rig)
    label = half_label(rig.platform.name, refusal)
    try:
        driver = build_driver(rig, async_scheduling=timing is ASYNC,
                              kv_events=contract_of_class(rig.connector.load_class()).kv_events)
    except ConnectorRefused as exc:
        raise ConnectorRefused(f"{exc} (its scheduler half; nor does the worker half run: {refusal})"
                               if refusal else f"{exc} (its scheduler half)") from exc
    try:
        run = HalfRun(rig.connector.name, driver, timing, workload_for(timing, rig.half))
        report = run.run()
    finally:
        driver.scheduler.shutdown()
    return HalfResult(report, label, run.contract.not_exercised(timing.name), run.contract.not_met)
