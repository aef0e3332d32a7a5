"""An engine whose worker side is several tensor-parallel ranks, one process each, as vLLM's executor runs them.

A P/D pair whose producer runs a larger tensor-parallel size than its consumer moves each producer rank's share
of the KV heads into its slice of the consumer's blocks, reading from every rank. That needs real ranks: each
connector asks vLLM's parallel state for its rank and world size when it is built, so one process holds one rank.
The engine core's half stays in the test process (vLLM's real ``Scheduler`` and the connector's scheduler side);
each rank is a process of its own (forked from a server process that imported vLLM once) that builds vLLM's
distributed state for its rank (gloo over a file rendezvous, the ``VLLM_DIST_IDENT`` vLLM's CPU worker sets before
it), its share of the caches (``num_kv_heads / tp`` heads, at least one: past the head count ranks hold replicas of
a head; an MLA latent is replicated) and the worker-side connector (``ModelRunnerStandIn``), then runs each
``SchedulerOutput`` the core broadcasts. The ranks' ``KVConnectorOutput``s are combined by vLLM's
``KVOutputAggregator``, as the executor combines them: a request is finished only when every rank says so. Every wait
has a bound.
"""

from __future__ import annotations

import copy
import glob
import multiprocessing
import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..vllm_install import api as vllm_api
from . import closing, hybrid_cache, kvcache
from .affinity import restore_harness_affinity
from .backends import metadata_instance
from .check_failure import CheckFailure
from .scheduler import SchedulerDriver

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput

    from .rig import Rig

RANK_START_TIMEOUT_S = 180.0  # the first rank waits for the forkserver's vLLM import, then builds its connector
RANK_REPLY_TIMEOUT_S = 60.0
RANK_EXIT_TIMEOUT_S = 30.0
# What the rank server imports once, so that no rank repeats it: the harness's worker side, this module and what
# unpickling a Rig needs, and vLLM's config (the harness imports vLLM lazily; without it each rank took 7 s more).
RANK_PRELOAD = ["kvconform.conformance.engine.runner", "kvconform.conformance.engine.ranks",
                "kvconform.conformance.connectors.selection", "vllm.config"]
# What vLLM's CPU worker names its shared-memory communicator after (cpu_worker.py, before it initialises the world).
DIST_IDENT_VAR = "VLLM_DIST_IDENT"
# Where Linux keeps POSIX shared memory: the communicator's segments, "<VLLM_DIST_IDENT>-<group>-cpushm_<rank>".
SHARED_MEMORY = Path("/dev/shm")
# Counters in a connector's get_kv_connector_stats() that count requests released because a lease ran out, not because
# the other side said it was done (NIXL: "Releasing expired KV blocks ..."); the pair checks read them too.
EXPIRY_COUNTERS = ("num_kv_expired_reqs",)


class RankFailure(CheckFailure):
    """A rank process did not answer in time, or failed with what cannot be raised here; or, as the cause of what a
    rank raised, that rank's traceback."""


def rank_attention_spec(rig: Rig, vllm_config: VllmConfig) -> AttentionSpec:
    """One rank's share of a layer's cache: its KV heads as vLLM's model config counts them for the config's TP size
    (the heads divided by it, but at least one: past the head count each rank holds a replica of one head), or the
    whole MLA latent, which every rank holds."""
    spec = rig.attention_spec()
    if rig.shape.mla:
        return spec
    return replace(spec, num_kv_heads=vllm_config.model_config.get_num_kv_heads(vllm_config.parallel_config))


def rank_kv_cache_config(rig: Rig, vllm_config: VllmConfig) -> KVCacheConfig:
    spec = rank_attention_spec(rig, vllm_config)
    return kvcache.build_kv_cache_config(vllm_config, [(rig.layer_names(), spec)], rig.num_blocks)


def first_kv_head(vllm_config: VllmConfig, rank: int) -> int:
    """The first of the model's KV heads that ``rank`` holds: vLLM's QKV weight loader gives rank ``r`` of TP ``t``
    over ``k`` heads the shard starting at head ``r * k // t`` (past ``t == k``, ``t / k`` ranks hold each head)."""
    heads = vllm_config.model_config.get_total_num_kv_heads()
    return int(rank * heads // vllm_config.parallel_config.tensor_parallel_size)


@dataclass
class RankCaches:
    """One rank's caches: the KV cache config its connector gets, what it registers, every layer's view of the
    allocation (``kvcache.allocate``'s), each layer's attention metadata, and its attention layers (None: all)."""

    kv_cache_config: KVCacheConfig
    registered: dict[str, Any]
    pages: dict[str, Any]
    metadata: dict[str, object]
    attention_layers: list[str] | None = None

    def attention_views(self) -> dict[str, Any]:
        """The attention layers' ``[B, H, N, C]`` views, which the parent reads back."""
        names = self.attention_layers if self.attention_layers is not None else list(self.pages)
        return {name: self.pages[name] for name in names}


def rank_caches(rig: Rig, vllm_config: VllmConfig, kinds: tuple[str, ...]) -> RankCaches:
    """A rank's caches, unfilled, sized for ``vllm_config``'s TP size: attention layers alone (``kinds`` empty), or
    ``hybrid_cache.py``'s hybrid cache of ``kinds`` (vLLM's hybrid configuration applied to ``vllm_config``)."""
    if not kinds:
        kv_cache_config = rank_kv_cache_config(rig, vllm_config)
        caches = kvcache.allocate(kv_cache_config, vllm_config, rig.device)
        metadata = {name: metadata_instance(rig.effective_backend) for name in rig.layer_names()}
        return RankCaches(kv_cache_config, caches, caches, metadata)
    hybrid_cache.configure_hybrid(vllm_config, rig.connector, kinds)
    built = hybrid_cache.build(vllm_config, kinds, rig.device, "pages")
    return RankCaches(built.kv_cache_config, built.registered, built.pages,
                      hybrid_cache.layer_metadata(built, rig.effective_backend), built.attention_layers())


def rank_fill_seed(rig: Rig, vllm_config: VllmConfig, rank: int, fill_seed: int) -> int:
    """The seed of a rank's random caches: one per first KV head, so ranks holding replicas of one head hold the same
    bytes, as a model's replicated heads would; an MLA latent is alike on every rank."""
    return fill_seed if rig.shape.mla else fill_seed + first_kv_head(vllm_config, rank)


def expired_requests(stats: KVConnectorStats | None) -> int:
    """Requests a worker released on lease expiry in one step, as its stats in that step's ``KVConnectorOutput`` (the
    runner's ``get_kv_connector_stats``, which resets them) count them."""
    data = getattr(stats, "data", None) or {}
    return sum(len(data.get(counter) or ()) for counter in EXPIRY_COUNTERS)


def remove_shared_memory(ident: str) -> None:
    """The shared-memory segments of the world named ``ident`` (vLLM's CPU communicator makes one per rank and
    group): its C++ manager unlinks them only when its process ends normally, and a multiprocessing rank ends with
    ``os._exit``. ``ident`` is unique to one engine's world, so nothing else's segments match."""
    for path in SHARED_MEMORY.glob(f"{glob.escape(ident)}-*"):
        path.unlink(missing_ok=True)


def _serve_rank(conn: Connection, rig: Rig, role: str, rank: int, world: int, rendezvous: str,
                environ: dict[str, str], fill_seed: int, kinds: tuple[str, ...]) -> None:
    """A rank process: vLLM's world of ``world`` at ``rank``, this rank's caches and worker-side connector, then
    the parent's requests until it says close."""
    from vllm.config import set_current_vllm_config

    from .runner import ModelRunnerStandIn

    try:
        os.environ.update(environ)
        os.environ[DIST_IDENT_VAR] = os.path.basename(rendezvous)
        vllm_api.find("get_conv_state_layout").cache_clear()  # read from ``environ``, as a fresh process would
        config = rig.vllm_config(role)
        with set_current_vllm_config(config):
            vllm_api.find("init_distributed_environment")(world_size=world, rank=rank, local_rank=0, backend="gloo",
                                                          distributed_init_method=f"file://{rendezvous}")
            vllm_api.find("ensure_model_parallel_initialized")(world, 1)
        try:
            caches = rank_caches(rig, config, kinds)
            kvcache.fill_random(caches.pages, rank_fill_seed(rig, config, rank, fill_seed))
            with set_current_vllm_config(config), restore_harness_affinity():
                runner = ModelRunnerStandIn(config, caches.kv_cache_config, caches.registered, rig.connector.name,
                                            rig.device, caches.metadata, attention_layers=caches.attention_layers)
            conn.send(("ready", runner.connector.get_handshake_metadata()))
            while True:
                request, argument = conn.recv()
                if request == "step":
                    with set_current_vllm_config(config):
                        output = runner.step(argument)
                    conn.send(("output", (output, expired_requests(output.kv_connector_stats))))
                elif request == "caches":
                    conn.send(("caches", {name: view.cpu().clone()
                                          for name, view in caches.attention_views().items()}))
                else:  # "close"
                    runner.shutdown()
                    conn.send(("closed", None))
                    return
        finally:
            vllm_api.find("destroy_model_parallel")()
            vllm_api.find("destroy_distributed_environment")()
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it in the test
        conn.send(("error", (traceback.format_exc(), _portable(exc))))


def _portable(exc: BaseException) -> bytes | None:
    """``exc`` pickled for the parent, or None where it cannot cross: an exception whose arguments do not pickle,
    or whose class cannot be rebuilt from them, and a ``SystemExit`` or ``KeyboardInterrupt``, which raised in the
    test's process would stop the run rather than fail the test."""
    if not isinstance(exc, Exception):
        return None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - the parent falls back to the traceback's text
        return None
    return data


def _raise_rank_error(where: str, value: tuple[str, bytes | None]) -> None:
    """Raise in the test's process what a rank raised: the connector's own exception, so a cell and its expectations
    see the same type and message as from an engine in one process, with the rank's traceback as its cause (as
    ``concurrent.futures`` carries a worker's). An exception that cannot cross is a ``RankFailure`` with the text."""
    text, data = value
    failure = RankFailure(f"{where}:\n{text}")
    if data is None:
        raise failure
    raise pickle.loads(data) from failure


@dataclass
class RankedWorkers:
    """The worker side of one engine as ``len(conns)`` rank processes: a ``WorkerStep`` for ``SchedulerDriver``."""

    name: str  # what the messages call this engine, e.g. "NixlConnector's producer"
    conns: list[Connection]
    aggregator: Any = None  # vLLM's KVOutputAggregator: it counts, across steps, the ranks that finished a transfer
    expired: int = 0  # requests the ranks released on lease expiry, all steps
    handshakes: dict[tuple[int, int], Any] = field(default_factory=dict)  # (pp rank, tp rank) -> metadata

    def _ask(self, rank: int, what: str) -> Any:
        conn = self.conns[rank]
        if not conn.poll(RANK_REPLY_TIMEOUT_S):
            raise RankFailure(f"{self.name}: rank {rank} did not answer {what} within {RANK_REPLY_TIMEOUT_S:.0f} s")
        tag, value = conn.recv()
        if tag == "error":
            _raise_rank_error(f"{self.name}: rank {rank} failed ({what})", value)
        return value

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        """Every rank runs the step; their outputs combined as vLLM's executor combines them."""
        for conn in self.conns:
            conn.send(("step", scheduler_output))
        replies = [self._ask(rank, "a step") for rank in range(len(self.conns))]
        self.expired += sum(expired for _, expired in replies)
        empty = vllm_api.find("EMPTY_MODEL_RUNNER_OUTPUT")
        outputs = []
        for output, _ in replies:
            runner_output = copy.copy(empty)
            runner_output.kv_connector_output = output
            outputs.append(runner_output)
        combined = self.aggregator.aggregate(outputs)
        kv_output: KVConnectorOutput = combined.kv_connector_output
        return kv_output

    def caches(self) -> list[dict[str, Any]]:
        """Each rank's attention layers' views, copied into this process."""
        for conn in self.conns:
            conn.send(("caches", None))
        return [self._ask(rank, "for its caches") for rank in range(len(self.conns))]


@dataclass
class RankedEngine:
    """A producer or consumer whose scheduler runs here and whose worker side runs as tensor-parallel ranks."""

    vllm_config: VllmConfig
    kv_cache_config: KVCacheConfig
    scheduler: SchedulerDriver
    workers: RankedWorkers


def rank_context() -> multiprocessing.context.ForkServerContext:
    """How rank processes start: forked from a server process that imported vLLM and the harness once (not from the
    test's process, whose threads a fork would copy), so each rank skips the import a spawn would repeat."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, multiprocessing.context.ForkServerContext)
    context.set_forkserver_preload(RANK_PRELOAD)
    return context


@contextmanager
def ranked_engine(rig: Rig, role: str, environ: dict[str, str], fill_seed: int,
                  kinds: tuple[str, ...] = ()) -> Iterator[RankedEngine]:
    """An engine of ``Rig.tensor_parallel_size`` ranks for ``role`` over ``rank_caches``' caches of ``kinds``, with
    ``environ`` set in every rank (the side channel the engine serves its handshake on); its ranks closed and their
    world torn down when the context exits."""
    world = rig.tensor_parallel_size
    name = f"{rig.connector.name}'s {role} (TP {world})"
    context = rank_context()
    folder = tempfile.mkdtemp(prefix="kvconform-ranks-")
    rendezvous = os.path.join(folder, f"world-{os.path.basename(folder)}")
    portable = replace(rig, engines=[])
    pickle.dumps(portable)  # fail here, in the test's process, if a rig field cannot reach the ranks
    conns, processes = [], []
    try:
        for rank in range(world):
            parent, child = context.Pipe()
            process = context.Process(target=_serve_rank, name=f"kvconform-rank-{rank}", daemon=True,
                                      args=(child, portable, role, rank, world, rendezvous, environ, fill_seed,
                                            kinds))
            process.start()
            conns.append(parent)
            processes.append(process)
        workers = RankedWorkers(name, conns)
        for rank, conn in enumerate(conns):
            if not conn.poll(RANK_START_TIMEOUT_S):
                raise RankFailure(f"{name}: rank {rank} did not build its connector within "
                                  f"{RANK_START_TIMEOUT_S:.0f} s")
            tag, value = conn.recv()
            if tag == "error":
                _raise_rank_error(f"{name}: rank {rank} could not start", value)
            workers.handshakes[(0, rank)] = value
        from vllm.config import set_current_vllm_config

        config = rig.vllm_config(role)
        kv_cache_config = rank_caches(rig, config, kinds).kv_cache_config
        if kinds:  # the engine core's view: a group of one attention type over several page sizes is one spec there
            kv_cache_config = vllm_api.find("generate_scheduler_kv_cache_config")([kv_cache_config])
        with set_current_vllm_config(config):
            scheduler = SchedulerDriver(config, kv_cache_config)
        from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator

        # as vLLM's executor builds it: the connector says how many ranks report each transfer
        workers.aggregator = KVOutputAggregator.from_connector(scheduler.connector, world)
        engine = RankedEngine(config, kv_cache_config, scheduler, workers)
        try:
            yield engine
        finally:
            _close(engine)
    finally:
        for conn in conns:
            conn.close()
        for process in processes:
            process.join(RANK_EXIT_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join(RANK_EXIT_TIMEOUT_S)
        remove_shared_memory(os.path.basename(rendezvous))
        shutil.rmtree(folder, ignore_errors=True)


def _close(engine: RankedEngine) -> None:
    """The ranks' connectors shut down, then the scheduler's (vLLM's engine order)."""
    workers = engine.workers
    errors = []
    for rank, conn in enumerate(workers.conns):
        try:
            conn.send(("close", None))
            workers._ask(rank, "close")
        except Exception as exc:  # noqa: BLE001 - every rank is asked to close; all their failures reported
            errors.append(str(exc.__cause__ if isinstance(exc.__cause__, RankFailure) else exc))
    closing.close(engine.scheduler.scheduler.shutdown, f"{workers.name} scheduler shutdown()")
    if errors:
        raise RankFailure("; ".join(errors))
