"""A wrapper connector's engine-lifecycle hooks, each asked by the vLLM code that asks it, reaching every child.

A wrapper such as MultiConnector stands between vLLM and its children for the calls vLLM makes outside a
step, as well as inside one: the KV cache layout (``kv_connector.utils.get_kv_connector_cache_layout``, asked
before the caches are allocated), the memory pool to allocate them in (the worker's
``initialize_from_config``), the host copy op (the model runner's ``initialize_kv_cache``), the handshake
metadata the engine core gathers from the workers and hands the scheduler side, how many workers report each
finished transfer (``KVOutputAggregator.from_connector``), the Prometheus metrics (``KVConnectorProm``), a
cache reset (``Scheduler.reset_connector_cache``) and shutdown (``Scheduler.shutdown`` and the worker's).
A wrapper that forwards one of them to some children only leaves the others unconfigured, unreset or
running. Each hook is asked here through vLLM's own caller where one exists, and the answer is held to
what that caller relies on, against what the children answer themselves:

* the layout is the one the children require, and none where they require none;
* at most one child's memory pool, and the wrapper's is that one;
* every child gets the host copy op, the handshake metadata and the reset;
* the handshake metadata is a child's own (none only where no child has any);
* the aggregator waits for the number of reports the children agree on, or for every worker;
* every metric the children would register is registered;
* a reset is reported done only where no child refused it;
* a shutdown reaches every child even when one raises, and the caller sees that child's error.

Then what the children report, carried back to vLLM (``run_reports``: a prompt stored, then hit, through vLLM's
Scheduler with its stats on, as a served engine's are, and failed loads recomputed, the runner reporting the worker's
stats each step as vLLM's runner does):

* each child's scheduler side is handed exactly the worker metadata its own worker built;
* a finished request's ``kv_transfer_params`` carry every child's own;
* vLLM's stats logger (``KVConnectorLogging``) summarizes, per child class, what those children reported
  themselves, and its Prometheus logger exports what they would export (that vLLM's scheduler returns the worker's
  and the scheduler side's stats together, each step, is the scheduler driver's rule: engine/published.py; here,
  that the wrapper's stats carry every child's);
* every KV event a child produced reaches vLLM's event publisher once, in the step it was taken
  (``wrapper_events``);
* every block a child's worker reports failed to load reaches vLLM's scheduler that step, which recomputes the
  request from it (``wrapper_load_failures``).

Each child is watched on its own instance (``ChildCalls``, ``ChildReports``), so the wrapper's code runs unchanged.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from unittest import mock

from ..engine.affinity import restore_harness_affinity
from ..engine.check_failure import CheckFailure
from ..engine.distributed import single_rank_parallel_state
from ..engine.rig import EngineStandIn, Rig
from ..engine.scheduler_outputs import ReturnedOutputs
from ..engine.side_channel import HOST, reserved_port, serve_handshake
from ..engine.stats_logged import isolated_prom
from ..vllm_install import api as vllm_api
from .wrapper_events import EventsRecord, events_problem
from .wrapper_load_failures import LoadFailureRecord, load_failures_problem

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.outputs import KVConnectorOutput

# The env vars vLLM's NIXL scheduler side reads for the side channel it listens on (a child may be NIXL).
SIDE_CHANNEL_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT")
WORLD_SIZE = 2  # workers the aggregator is built for: more than one, so "every worker" and "one" differ
INJECTED = "kvconform: injected shutdown failure"
Sample = tuple[str, tuple[tuple[str, str], ...]]  # a Prometheus sample's name and its labels


class LifecycleFailure(CheckFailure):
    """A wrapper answered an engine-lifecycle call in a way its vLLM caller cannot rely on."""


class InjectedShutdownError(RuntimeError):
    """What the check makes one child's shutdown raise, after that child really shut down."""


@dataclass
class ChildCalls:
    """Which children of a wrapper were called, per method, with what (each child's bound methods, wrapped)."""

    children: list[KVConnectorBase_V1]
    calls: dict[str, list[tuple[int, tuple[Any, ...]]]] = field(default_factory=dict)

    def watch(self, method: str) -> None:
        self.calls.setdefault(method, [])
        for index, child in enumerate(self.children):
            original = getattr(child, method)

            def recorded(*args: Any, _index: int = index, _original: Callable[..., Any] = original) -> Any:
                self.calls[method].append((_index, args))
                return _original(*args)

            setattr(child, method, recorded)

    def missed(self, method: str) -> list[str]:
        """The children ``method`` never reached, by class name and place."""
        reached = {index for index, _ in self.calls[method]}
        return [name_of(child, i) for i, child in enumerate(self.children) if i not in reached]

    def args_of(self, method: str) -> list[tuple[Any, ...]]:
        return [args for _, args in self.calls[method]]


def name_of(child: KVConnectorBase_V1, index: int) -> str:
    return f"child {index} ({type(child).__name__})"


def children_of(wrapper: KVConnectorBase_V1) -> list[KVConnectorBase_V1] | None:
    """The wrapper's children as vLLM names them (``MultiConnector.sub_connectors``); None without that property."""
    children = getattr(wrapper, "sub_connectors", None)
    return list(children) if children is not None else None


def child_config(child: KVConnectorBase_V1, fallback: Any) -> Any:
    """The VllmConfig a child was built with (its own kv_transfer_config), as the wrapper built it."""
    return getattr(child, "_vllm_config", None) or fallback


@dataclass
class LifecycleEngine:
    """A kv_both engine and the port reserved for its handshake side channel."""

    engine: EngineStandIn
    port: int


@contextmanager
def lifecycle_engine(rig: Rig) -> Iterator[LifecycleEngine]:
    """A kv_both engine whose handshake side channel has a reserved port (a NIXL child listens on it), in a
    one-rank world; closed at the end unless the check closed it."""
    config = rig.vllm_config("kv_both")
    with single_rank_parallel_state(config), restore_harness_affinity(), reserved_port() as port:
        with mock.patch.dict("os.environ", dict(zip(SIDE_CHANNEL_ENV, (HOST, str(port)), strict=True))):
            engine = rig.engine("kv_both")
        try:
            yield LifecycleEngine(engine, port)
        finally:
            engine.close()


def _fail(label: str, what: str) -> None:
    raise LifecycleFailure(f"{label}: {what}")


def check_layout(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """``get_kv_connector_cache_layout``: the layout every child that requires one requires; a refusal where they
    disagree."""
    from vllm.distributed.kv_transfer.kv_connector.utils import get_kv_connector_cache_layout

    required = {name_of(c, i): type(c).get_required_kvcache_layout(child_config(c, engine.vllm_config))
                for i, c in enumerate(children)}
    layouts = {layout for layout in required.values() if layout is not None}
    if len(layouts) > 1:
        try:
            answer = get_kv_connector_cache_layout(engine.vllm_config)
        except ValueError:
            return
        _fail(label, f"its children require different KV cache layouts ({required}), but vLLM's "
                     f"get_kv_connector_cache_layout was told {answer!r}: caches in that layout are wrong for the "
                     f"others; the wrapper must refuse")
    answer = get_kv_connector_cache_layout(engine.vllm_config)
    expected = next(iter(layouts), None)
    if answer != expected:
        wanted = "none" if expected is None else repr(expected)
        _fail(label, f"vLLM's get_kv_connector_cache_layout got {answer!r} from it, but its children require "
                     f"{required}: the caches would be allocated in a layout no child asked for (they agree on "
                     f"{wanted})")


def check_mem_pool(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """The worker's ``initialize_from_config`` allocates the caches in the pool the connector gives, if any."""
    pools = {name_of(c, i): pool for i, c in enumerate(children)
             if (pool := c.get_mem_pool_context()) is not None}
    try:
        answer: AbstractContextManager[Any] | None = engine.runner.connector.get_mem_pool_context()
    except ValueError:
        if len(pools) > 1:
            return  # more pools than one cache can live in: refused, as it must be
        raise
    if len(pools) > 1:
        _fail(label, f"children {sorted(pools)} each give a KV cache memory pool, but the wrapper answered "
                     f"{answer!r} instead of refusing: the caches can live in one pool only")
    if pools and answer is not next(iter(pools.values())):
        _fail(label, f"{next(iter(pools))} gives a KV cache memory pool, but the wrapper answered {answer!r}: "
                     f"the caches would be allocated outside the pool that child registers")
    if not pools and answer is not None:
        _fail(label, f"no child gives a KV cache memory pool, but the wrapper answered {answer!r}")


def check_host_copy_op(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """After registering the caches, vLLM's model runner hands the connector its block copy op."""
    from vllm.distributed.kv_transfer.kv_connector.utils import copy_kv_blocks

    watched = ChildCalls(children)
    watched.watch("set_host_xfer_buffer_ops")
    engine.runner.connector.set_host_xfer_buffer_ops(copy_kv_blocks)
    if missed := watched.missed("set_host_xfer_buffer_ops"):
        _fail(label, f"set_host_xfer_buffer_ops never reached {', '.join(missed)}: a child staging through host "
                     f"memory has no op to copy blocks with")


def publish_handshake(label: str, engine: EngineStandIn, scheduler_children: list[KVConnectorBase_V1],
                      worker_children: list[KVConnectorBase_V1]) -> None:
    """The engine core's publication: the worker's handshake metadata, keyed by (pp rank, tp rank), handed to the
    scheduler side (an empty dict where the worker has none, as vLLM's EngineCore passes it)."""
    own = {name_of(c, i): md for i, c in enumerate(worker_children) if (md := c.get_handshake_metadata()) is not None}
    metadata = engine.runner.connector.get_handshake_metadata()
    if metadata is None and own:
        _fail(label, f"its worker answered no handshake metadata, but {', '.join(own)} have some: the engine core "
                     f"publishes nothing, and no remote engine can reach those children")
    if metadata is not None and not any(metadata is md for md in own.values()):
        _fail(label, f"its worker answered handshake metadata {metadata!r} that no child gave "
                     f"({', '.join(own) or 'no child has any'})")
    watched = ChildCalls(scheduler_children)
    watched.watch("set_xfer_handshake_metadata_pp_aware")
    content = {(0, 0): metadata} if metadata is not None else {}
    engine.scheduler.connector.set_xfer_handshake_metadata_pp_aware(content)
    if missed := watched.missed("set_xfer_handshake_metadata_pp_aware"):
        _fail(label, f"set_xfer_handshake_metadata_pp_aware never reached {', '.join(missed)} on the scheduler "
                     f"side: a child that serves its handshake never starts serving it")
    if any(args[0] != content for args in watched.args_of("set_xfer_handshake_metadata_pp_aware")):
        _fail(label, f"a child was handed other handshake metadata than the engine core's {content!r}")


def check_handshake(label: str, served: LifecycleEngine, scheduler_children: list[KVConnectorBase_V1],
                    worker_children: list[KVConnectorBase_V1]) -> None:
    """Publishes the handshake as the engine core does, with its side channel served on the reserved port."""
    serve_handshake(functools.partial(publish_handshake, label, served.engine, scheduler_children, worker_children),
                    served.port)


def check_finished_count(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """``KVOutputAggregator.from_connector``: a transfer is finished once the agreed number of workers reported it."""
    from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator

    counts = {name_of(c, i): c.get_finished_count() for i, c in enumerate(children)}
    agreed = {count for count in counts.values() if count is not None}
    try:
        aggregator = KVOutputAggregator.from_connector(engine.runner.connector, WORLD_SIZE)
    except ValueError:
        if None not in counts.values() and len(agreed) > 1:
            return  # children that disagree on how many workers report: refused, as it must be
        raise
    if None not in counts.values() and len(agreed) > 1:
        _fail(label, f"its children expect different numbers of finished reports per transfer ({counts}), but the "
                     f"wrapper gave vLLM's aggregator one number instead of refusing")
    expected = next(iter(agreed)) if None not in counts.values() and agreed else WORLD_SIZE
    finished = _aggregated_sends(aggregator)
    if finished != (expected == 1):
        _fail(label, f"with {WORLD_SIZE} workers and children expecting {counts} reports per transfer (None: one per "
                     f"worker), vLLM's aggregator {'reported' if finished else 'did not report'} a send finished "
                     f"after one worker's report: the wrapper's get_finished_count "
                     f"({engine.runner.connector.get_finished_count()!r}) is not what its children agree on")


def _aggregated_sends(aggregator: Any) -> bool:
    """Whether one send, reported by one worker of ``WORLD_SIZE``, comes out of the aggregator finished."""
    import dataclasses

    empty, connector_output = vllm_api.find("EMPTY_MODEL_RUNNER_OUTPUT"), vllm_api.find("KVConnectorOutput")

    def output(sending: set[str]) -> Any:
        return dataclasses.replace(empty, kv_connector_output=connector_output(finished_sending=sending))

    merged = aggregator.aggregate([output({"lifecycle-send"}), *(output(set()) for _ in range(WORLD_SIZE - 1))])
    sending = merged.kv_connector_output.finished_sending if merged.kv_connector_output else None
    return "lifecycle-send" in (sending or ())


def check_prom_metrics(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """``KVConnectorProm`` (vLLM's Prometheus logger's) registers what the wrapper's ``build_prom_metrics`` gives:
    every metric the children would register on their own. Each registers into a registry of its own, through the
    metric classes ``KVConnectorProm`` hands the connector (as vLLM's Ray logger swaps them)."""
    wrapper_metrics = registered_metrics(engine.vllm_config)
    expected: set[str] = set()
    for config in {type(c): child_config(c, engine.vllm_config) for c in children}.values():
        expected |= registered_metrics(config)
    if missing := sorted(expected - wrapper_metrics):
        _fail(label, f"vLLM's KVConnectorProm registered {sorted(wrapper_metrics) or 'no metric'} for it, but its "
                     f"children register {missing} too: those children's transfers are never exported")


def registered_metrics(config: VllmConfig) -> set[str]:
    """The metric names vLLM's ``KVConnectorProm`` registers for ``config``'s connector."""
    _, registry = isolated_prom(config)
    return {metric.name for metric in registry.collect()}


def exported_samples(config: VllmConfig, observed: list[dict[str, Any]]) -> dict[Sample, float]:
    """What vLLM's Prometheus logger exports for ``config``'s connector after observing each of ``observed``
    (``SchedulerStats.kv_connector_stats``): sample (name, labels) -> value, creation times left out."""
    prom, registry = isolated_prom(config)
    for data in observed:
        prom.observe(data, 0)
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for metric in registry.collect() for sample in metric.samples if not sample.name.endswith("_created")}


def check_reset(label: str, engine: EngineStandIn, children: list[KVConnectorBase_V1]) -> None:
    """``Scheduler.reset_connector_cache`` (a prefix-cache reset that asks the connector too)."""
    answers: dict[str, object] = {}
    for index, child in enumerate(children):
        reset = child.reset_cache

        def answered(_reset: Callable[[], object] = reset, _name: str = name_of(child, index)) -> object:
            answers[_name] = _reset()
            return answers[_name]

        child.reset_cache = answered  # type: ignore[method-assign]  # records each child's own answer
    done = engine.scheduler.scheduler.reset_connector_cache()
    if missed := [name_of(c, i) for i, c in enumerate(children) if name_of(c, i) not in answers]:
        _fail(label, f"vLLM's Scheduler.reset_connector_cache never reached {', '.join(missed)}: their caches "
                     f"still hold what the reset was meant to drop")
    refused = sorted(name for name, answer in answers.items() if answer is False)
    if done and refused:
        _fail(label, f"vLLM's Scheduler.reset_connector_cache reported the reset done, but {', '.join(refused)} "
                     f"refused it (answered False): the caller believes a cache empty that is not")


def check_shutdown(label: str, engine: EngineStandIn, side: str) -> None:
    """The side's shutdown, as vLLM's engine calls it, with its first child made to raise after shutting down: every
    child must still be shut down, and the caller must see the error."""
    connector = engine.scheduler.connector if side == "scheduler" else engine.runner.connector
    children = children_of(connector) or []
    watched = ChildCalls(children)
    watched.watch("shutdown")
    failing = children[0]
    real = failing.shutdown

    def raising() -> None:
        real()
        raise InjectedShutdownError(INJECTED)

    failing.shutdown = raising  # type: ignore[method-assign]  # the fault: this child's shutdown raises
    shut_down: Callable[[], None] = (engine.scheduler.scheduler.shutdown if side == "scheduler"
                                     else engine.runner.shutdown)
    raised: BaseException | None = None
    try:
        shut_down()
    except InjectedShutdownError as error:
        raised = error
    if missed := watched.missed("shutdown"):
        _fail(label, f"its {side} side's shutdown() never reached {', '.join(missed)} after {name_of(failing, 0)}'s "
                     f"shutdown raised: those children's threads, sockets and buffers are left running")
    if raised is None:
        _fail(label, f"{name_of(failing, 0)}'s shutdown raised on the {side} side, but the wrapper's shutdown() "
                     f"returned normally: vLLM's engine never learns that a child failed to shut down")


class NoChildren(Exception):
    """The connector does not show vLLM its children (no ``sub_connectors``): nothing to hold its forwarding to."""


def _children(connector: KVConnectorBase_V1, label: str, side: str) -> list[KVConnectorBase_V1]:
    children = children_of(connector)
    if not children:
        raise NoChildren(f"{label}: its {side} side has no sub_connectors (vLLM's name for a wrapper's children), so "
                         f"what it forwards to them cannot be seen")
    return children


def run_engine_hooks(rig: Rig) -> None:
    """Every hook but shutdown, in the order a vLLM engine starts and runs: layout, pool, copy op, handshake,
    aggregator, metrics, then a reset."""
    label = rig.connector.name
    with lifecycle_engine(rig) as served:
        engine = served.engine
        workers = _children(engine.runner.connector, label, "worker")
        schedulers = _children(engine.scheduler.connector, label, "scheduler")
        check_layout(label, engine, workers)
        check_mem_pool(label, engine, workers)
        check_host_copy_op(label, engine, workers)
        check_handshake(label, served, schedulers, workers)
        check_finished_count(label, engine, workers)
        check_prom_metrics(label, engine, schedulers)
        check_reset(label, engine, schedulers)


def run_shutdown(rig: Rig) -> None:
    """The worker side shut down, then the scheduler side (vLLM's order), each with its first child raising."""
    label = rig.connector.name
    with lifecycle_engine(rig) as served:
        engine = served.engine
        for side in ("worker", "scheduler"):
            connector = engine.runner.connector if side == "worker" else engine.scheduler.connector
            _children(connector, label, side)
        engine.closed = True  # shut down here, each child once; the engine's own close() does nothing more
        check_shutdown(label, engine, "worker")
        check_shutdown(label, engine, "scheduler")


# --- what the children report, carried to vLLM: worker metadata, transfer stats, metrics, KV events, failed loads ---

class ReportsRig(Rig):
    """A rig whose engines recompute the blocks a connector failed to load (``kv_load_failure_policy``), so the
    request goes on and its other reports are judged too."""

    load_failure_policy: ClassVar[str] = "recompute"

    def vllm_config(self, role: str) -> VllmConfig:
        config = super().vllm_config(role)
        assert config.kv_transfer_config is not None, "a rig's config always names the connector under test"
        config.kv_transfer_config.kv_load_failure_policy = self.load_failure_policy  # type: ignore[assignment]
        return config


@dataclass
class ChildReports:
    """What each child reported on its own (its worker metadata and stats, copied as given) and what each child's
    scheduler side was handed back; and what vLLM's Scheduler returned (``returned``: each finished request's
    ``kv_transfer_params``, the stats for the stats loggers, per step)."""

    returned: ReturnedOutputs
    built: dict[int, list[Any]] = field(default_factory=dict)  # worker child -> its worker metadata, non-None
    handed: dict[int, list[Any]] = field(default_factory=dict)  # scheduler child -> the worker metadata it got
    stats: dict[str, list[Any]] = field(default_factory=dict)  # child class -> its stats, both sides, copied
    own_params: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # request -> children's own params

    def watch(self, workers: list[KVConnectorBase_V1], schedulers: list[KVConnectorBase_V1]) -> None:
        for index, child in enumerate(workers):
            self._record_results(child, "build_connector_worker_meta", self.built.setdefault(index, []))
            self._record_stats(child)
        for index, child in enumerate(schedulers):
            self._record_handed(child, self.handed.setdefault(index, []))
            self._record_stats(child)
            self._record_params(child)

    @staticmethod
    def _record_results(child: KVConnectorBase_V1, method: str, into: list[Any]) -> None:
        original = getattr(child, method)

        def recorded() -> Any:
            result = original()
            if result is not None:
                into.append(result)
            return result

        setattr(child, method, recorded)

    def _record_stats(self, child: KVConnectorBase_V1) -> None:
        original = child.get_kv_connector_stats
        into = self.stats.setdefault(type(child).__name__, [])

        def recorded() -> Any:
            result = original()
            if result is not None and not result.is_empty():
                into.append(copy.deepcopy(result))  # as given: a wrapper may merge others into the object
            return result

        child.get_kv_connector_stats = recorded  # type: ignore[method-assign]

    def _record_params(self, child: KVConnectorBase_V1) -> None:
        """Each finish hook the child answers (``request_finished``, or ``..._all_groups`` for hybrid caches)."""
        for method in ("request_finished", "request_finished_all_groups"):
            hook: Callable[..., Any] | None = getattr(child, method, None)
            if hook is not None:
                setattr(child, method, self._params_recorder(hook))

    def _params_recorder(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(request: Any, block_ids: Any) -> Any:
            answer = hook(request, block_ids)
            if answer[1] is not None:
                self.own_params.setdefault(request.request_id, []).append(dict(answer[1]))
            return answer

        return recorded

    @staticmethod
    def _record_handed(child: KVConnectorBase_V1, into: list[Any]) -> None:
        original = child.update_connector_output

        def recorded(connector_output: KVConnectorOutput) -> None:
            if connector_output.kv_connector_worker_meta is not None:
                into.append(connector_output.kv_connector_worker_meta)
            original(connector_output)

        child.update_connector_output = recorded  # type: ignore[method-assign]

    def reported(self) -> bool:
        return any(self.built.values()) or any(self.stats.values()) or bool(self.own_params)


class NothingReported(Exception):
    """No child of the wrapper reports anything (worker metadata, stats, params, events, failed loads): there is
    nothing for it to carry."""


def run_reports(rig: Rig, prompt: list[int]) -> None:
    """The same prompt run twice through vLLM's Scheduler (stored, then a hit), the runner reporting the worker's
    stats each step as vLLM's does; then what the children reported held against what vLLM's callers got through the
    wrapper."""
    label = rig.connector.name
    with lifecycle_engine(rig) as served:
        engine = served.engine
        workers = _children(engine.runner.connector, label, "worker")
        schedulers = _children(engine.scheduler.connector, label, "scheduler")
        reports = ChildReports(ReturnedOutputs(engine.scheduler))
        reports.watch(workers, schedulers)
        events, load_failures = EventsRecord(engine.scheduler, schedulers), LoadFailureRecord(engine.scheduler, workers)
        engine.scheduler.add("reports-stored", prompt)
        engine.scheduler.run(engine.runner)
        # vLLM's own prefix cache dropped (as a reset does), so the prompt's second run is a hit of the connector's
        engine.scheduler.scheduler.reset_prefix_cache()
        engine.scheduler.add("reports-hit", prompt)
        engine.scheduler.run(engine.runner)
        if not (reports.reported() or events.produced() or load_failures.reported()):
            raise NothingReported(f"{label}: no child reports worker metadata, transfer stats, kv_transfer_params, KV "
                                  f"events or failed loads, so there is nothing for the wrapper to carry to vLLM")
        check_worker_metadata(label, reports, workers)
        check_transfer_params(label, reports)
        check_stats(label, engine, reports, schedulers)
        names = [name_of(child, index) for index, child in enumerate(schedulers)]
        if problem := events_problem(events.steps, names):
            _fail(label, problem)
        policy = engine.vllm_config.kv_transfer_config.kv_load_failure_policy
        if problem := load_failures_problem(load_failures.failed, names, policy, reports.returned.finish_reasons):
            _fail(label, problem)


def check_worker_metadata(label: str, reports: ChildReports, workers: list[KVConnectorBase_V1]) -> None:
    """Each child's scheduler side is handed back exactly the metadata its own worker built, step by step."""
    for index, child in enumerate(workers):
        built, handed = reports.built.get(index, []), reports.handed.get(index, [])
        if len(built) != len(handed) or any(b is not h for b, h in zip(built, handed, strict=False)):
            _fail(label, f"{name_of(child, index)}'s worker built metadata {built!r} over the run, but its "
                         f"scheduler side's update_connector_output was handed {handed!r}: each child must get its "
                         f"own worker's report, every step")


def check_transfer_params(label: str, reports: ChildReports) -> None:
    """The ``kv_transfer_params`` vLLM returns with a finished request (a P/D proxy reads them) carry every child's
    own, as that child gave them."""
    for request_id in reports.returned.finish_reasons:
        returned = reports.returned.params.get(request_id)
        for own in reports.own_params.get(request_id, []):
            if lost := {key: value for key, value in own.items() if (returned or {}).get(key) != value}:
                _fail(label, f"a child finished {request_id} with kv_transfer_params {own}, but vLLM returned "
                             f"{returned} for it: {lost} lost")


def check_stats(label: str, engine: EngineStandIn, reports: ChildReports,
                schedulers: list[KVConnectorBase_V1]) -> None:
    """vLLM's stats logger (``KVConnectorLogging``), fed what the Scheduler returned each step, summarizes per child
    class what those children reported themselves; vLLM's Prometheus logger exports what they would export."""
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging

    expected: dict[str, Any] = {}
    for name, own in reports.stats.items():
        if own:
            merged = copy.deepcopy(own[0])
            for stats in own[1:]:
                merged = merged.aggregate(copy.deepcopy(stats))
            expected[name] = merged.reduce()
    logger = KVConnectorLogging(engine.vllm_config.kv_transfer_config)
    for data in reports.returned.connector_stats:
        logger.observe(data)
    accumulated = logger.transfer_stats_accumulator
    summary = accumulated.reduce() if accumulated is not None and not accumulated.is_empty() else {}
    lines: list[str] = []
    logger.log(log_fn=lambda *args: lines.append(args[0] % args[1:]))
    if summary != expected:
        _fail(label, f"vLLM's stats logger summarized its transfer stats as {summary}, but its children reported "
                     f"{expected} themselves (per child class, each side's stats merged): a child's stats were "
                     f"lost, overwritten or not merged")
    exported = exported_samples(engine.vllm_config, reports.returned.connector_stats)
    own_export: dict[Sample, float] = {}
    for child in {type(c).__name__: c for c in schedulers}.values():
        own = [stats.to_dict() for stats in reports.stats.get(type(child).__name__, [])]
        own_export.update(exported_samples(child_config(child, engine.vllm_config), own))
    if wrong := {sample: value for sample, value in own_export.items() if exported.get(sample) != value}:
        _fail(label, f"vLLM's Prometheus logger exported {exported or 'nothing'} through it, but its children "
                     f"export {wrong} on their own: their transfers are not counted as they would be")
