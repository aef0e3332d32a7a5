"""The contract check's calls: each method of the KV connector API asked alone, its answer judged at once.

The promises themselves (what ``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` documents each
channel returns: ``PROMISES``, ``check_answer``) are the engine's (``engine/promises.py``), which every
driver of vLLM's scheduler enforces at every call; they are re-exported here for the contract check.
Here a broken promise names the connector, the call, the documented type and what came back. The inputs
are vLLM's own objects (``Request``, ``SchedulerOutput``, ``KVCacheBlocks``, caches from its allocator),
built from the same ``Rig`` the round-trip uses, but the connector is constructed directly as
``cls(vllm_config, role, kv_cache_config)``, the way the factory does it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

import torch

from ..engine import kvcache
from ..engine.affinity import restore_harness_affinity
from ..engine.device_guard import DeviceGuard
from ..engine.model import attention_layer_names
from ..engine.promises import PROMISES as PROMISES
from ..engine.promises import ContractViolation as ContractViolation
from ..engine.promises import check_answer as check_answer
from ..engine.requests import block_hasher, new_request
from ..engine.rig import ConnectorRefused, Rig, refusal_as
from ..engine.runner import AttentionLayerStandIn, with_modules_without_kv_cache
from ..engine.step_order import connector_step
from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from typing_extensions import Self
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

# What get_finished answers (the promise checks the shape before a caller reads it)
FinishedIds = tuple[set[str] | None, set[str] | None]

def ask(label: str, connector: KVConnectorBase_V1, method: str, *args: object, shown_args: str = "...") -> object:
    """Call ``connector.method(*args)`` and check the answer against its promise."""
    return check_answer(label, method, f"{method}({shown_args})", getattr(connector, method)(*args))


def count_calls(connector: KVConnectorBase_V1) -> Counter[str]:
    """How often vLLM's own code asks ``connector`` each promised channel, so a check can prove the calls it relies
    on happened. The answers themselves are judged where the connector was built: the scheduler driver and the
    model runner stand-in enforce the promises at every call (``engine/promises.py``'s ``enforce_promises``)."""
    calls: Counter[str] = Counter()
    for method in PROMISES:
        original = getattr(connector, method, None)
        if callable(original):
            setattr(connector, method, _counted(method, original, calls))
    return calls


def check_reported_ids(connector: KVConnectorBase_V1, label: str, held: Callable[[], Iterable[str]]) -> None:
    """Fail when ``get_finished`` reports a request vLLM's scheduler does not hold (``held()``).

    The scheduler frees the blocks of every id reported and guards that with a bare
    ``assert`` only, which ``python -O`` removes; this says which id and which direction.
    """
    original = connector.get_finished

    def checked(finished_req_ids: set[str], *args: Any, **kwargs: Any) -> Any:
        answer = original(finished_req_ids, *args, **kwargs)
        # the answer's shape is judged where it is asked for (_finished); here only the ids in it
        for direction, ids in zip(("sending", "loading"), answer, strict=False):
            strays = sorted(set(ids or ()) - set(held()))
            if strays:
                raise ContractViolation(
                    f"{label}: get_finished({set(finished_req_ids)}) reported {strays[0]!r} as finished "
                    f"{direction}, but vLLM's scheduler no longer holds that request (it asserts every reported "
                    f"id is one it holds)")
        return answer

    connector.get_finished = checked


def _counted(method: str, original: Callable[..., object], calls: Counter[str]) -> Callable[..., object]:
    def counted(*args: Any, **kwargs: Any) -> object:
        calls[method] += 1
        return original(*args, **kwargs)

    return counted


# --- vLLM inputs, built the way vLLM builds them ---

def make_request(vllm_config: VllmConfig, request_id: str, prompt: list[int]) -> Request:
    """A real ``vllm.v1.request.Request``, hashed into blocks as the engine's processor does it."""
    return new_request(request_id, prompt, block_hasher(vllm_config))


def no_blocks(kv_cache_config: KVCacheConfig) -> KVCacheBlocks:
    """What the KV cache manager hands over when it allocated nothing: one empty list per group."""
    KVCacheBlocks = vllm_api.find("KVCacheBlocks")

    return KVCacheBlocks(tuple(() for _ in kv_cache_config.kv_cache_groups))


def scheduler_output(finished_req_ids: Iterable[str] = ()) -> SchedulerOutput:
    """A step that schedules nothing (vLLM still builds connector metadata for it)."""
    output = vllm_api.find("SchedulerOutput").make_empty()
    output.finished_req_ids = set(finished_req_ids)
    return output


def supports_hma(connector: KVConnectorBase_V1) -> bool:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma as vllm_supports_hma

    hma: bool = vllm_supports_hma(connector)
    return hma


# --- the two halves, constructed directly ---

# What vLLM's runner also asks a worker every step (0.32 reads finished ids through get_transfer_results),
# checked where the installed vLLM defines the method; the arguments a step with nothing finished passes.
LATER_WORKER_REPORTS: dict[str, tuple[object, ...]] = {"get_transfer_results": (set(),),
                                                        "build_connector_worker_meta": ()}


@dataclass
class ContractConnector:
    """One role of a connector (scheduler or worker), built directly with ``cls(vllm_config, role,
    kv_cache_config)`` and asked one method at a time, each answer checked against the base class's contract.

    No vLLM scheduler or runner drives it (that is ``EngineStandIn``, rig.py): the contract checks call
    each method alone, so a violation names the one call that broke it."""

    label: str  # "<connector> (<kv_role>, <side> side)": how violations name it
    connector: KVConnectorBase_V1
    vllm_config: VllmConfig
    kv_cache_config: KVCacheConfig

    def ask(self, method: str, *args: object, shown_args: str = "...") -> object:
        return ask(self.label, self.connector, method, *args, shown_args=shown_args)

    def new_request(self, request_id: str, prompt: list[int]) -> Request:
        """A request the connector is told about as vLLM's ``Scheduler.add_request`` does (``on_new_request``)."""
        request = make_request(self.vllm_config, request_id, prompt)
        if callable(getattr(self.connector, "on_new_request", None)):  # where this vLLM has the hook
            self.connector.on_new_request(request)
        return request

    def finish(self, request: Request, block_ids_per_group: tuple[list[int], ...],
               shown: str) -> tuple[bool, dict[str, Any] | None]:
        """The finish hook vLLM's scheduler calls: ``request_finished_all_groups`` for HMA connectors. A request
        not finished yet is finished as aborted first: vLLM's ``finish_requests`` sets the status before
        ``_free_request`` (which asserts it) asks the connector, and connectors read it (OffloadingConnector's
        next ``build_connector_meta`` stores a finished request's blocks by it)."""
        if not request.is_finished():
            request.status = vllm_api.find("RequestStatus").FINISHED_ABORTED
        if supports_hma(self.connector):
            answer = self.ask("request_finished_all_groups", request, block_ids_per_group,
                              shown_args=f"{shown}, {tuple(block_ids_per_group)}")
        else:
            answer = self.ask("request_finished", request, block_ids_per_group[0],
                              shown_args=f"{shown}, {block_ids_per_group[0]}")
        return cast("tuple[bool, dict[str, Any] | None]", answer)  # the FINISH promise checked its shape

    def no_block_ids(self) -> tuple[list[int], ...]:
        return tuple([] for _ in self.kv_cache_config.kv_cache_groups)

    def close(self) -> None:
        self.connector.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        """Shut the connector down; a shutdown error never hides the failure that came first."""
        try:
            self.close()
        except Exception as shutdown_error:
            if error is None:
                raise
            error.add_note(f"shutdown() then failed too: {type(shutdown_error).__name__}: {shutdown_error}")
        return False


@dataclass
class ContractWorker(ContractConnector):
    """The worker role under the contract checks: its caches, their registration and a step with nothing to run."""

    caches: dict[str, torch.Tensor]
    guard: DeviceGuard

    def register(self) -> None:
        """Caches from vLLM's allocator, registered as the runner does at start-up."""
        with self.guard:
            self.connector.register_kv_caches(self.caches)

    def idle_step(self, metadata: KVConnectorMetadata, finished_req_ids: Iterable[str] = ()) -> FinishedIds:
        """A step with nothing to run, as vLLM's ``kv_connector_no_forward``: the connector still reports.

        Returns what ``get_finished`` answered; every answer is checked as it is given.
        """
        from vllm.forward_context import get_forward_context, set_forward_context

        finished = set(finished_req_ids)

        def report() -> FinishedIds:
            answer = cast("FinishedIds", self.ask("get_finished", finished, shown_args=repr(finished)))
            self.ask("get_block_ids_with_load_errors", shown_args="")
            for method, args in LATER_WORKER_REPORTS.items():
                if callable(getattr(self.connector, method, None)):
                    self.ask(method, *args, shown_args=", ".join(map(repr, args)))
            return answer

        def call(method: str, *args: object) -> object:  # the lifecycle calls: no answer to check
            return getattr(self.connector, method)(*args)

        with set_forward_context(None, self.vllm_config), self.guard:
            # no forward runs, so start_load_kv's two places in the order are one: sync_loads does not matter
            return connector_step(call, metadata, get_forward_context, sync_loads=True, report=report)


@dataclass
class ContractRig:
    """A connector class and the Rig that supplies its configs and caches."""

    rig: Rig
    cls: type

    @property
    def name(self) -> str:
        return self.rig.connector.name

    def kv_roles(self) -> list[str]:
        """Every kv_role the profile drives the connector with (both halves of a producer/consumer pair)."""
        return list(dict.fromkeys(self.rig.connector.profile.roles or ["kv_both"]))

    def configs(self, kv_role: str) -> tuple[VllmConfig, KVCacheConfig]:
        """A fresh ``VllmConfig`` and ``KVCacheConfig``, without constructing any connector."""
        config = self.rig.vllm_config(kv_role)
        groups = [(attention_layer_names(), self.rig.shape.attention_spec())]
        return config, kvcache.build_kv_cache_config(config, groups)

    def _construct(self, kv_role: str, side: str) -> tuple[str, KVConnectorBase_V1, VllmConfig, KVCacheConfig]:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        label = f"{self.name} ({kv_role}, {side} side)"
        # vLLM's config checks may refuse it too; NIXL's worker side pins this thread (affinity.py)
        with refusal_as(ConnectorRefused, self.rig.connector), restore_harness_affinity():
            config, kv_cache_config = self.configs(kv_role)
            connector = self.cls(config, KVConnectorRole[side.upper()], kv_cache_config)
        return label, connector, config, kv_cache_config

    def scheduler(self, kv_role: str) -> ContractConnector:
        return ContractConnector(*self._construct(kv_role, "scheduler"))

    def worker(self, kv_role: str, register: bool = True) -> ContractWorker:
        """The worker side; with ``register`` its caches are allocated, put in the forward context and registered."""
        label, connector, config, kv_cache_config = self._construct(kv_role, "worker")
        caches = kvcache.allocate(kv_cache_config, config, self.rig.device) if register else {}
        guard = DeviceGuard(self.name, caches, torch.device(self.rig.device))
        config.compilation_config.static_forward_context.update(with_modules_without_kv_cache(
            {layer_name: AttentionLayerStandIn(layer_name, cache, guard) for layer_name, cache in caches.items()}))
        worker = ContractWorker(label, connector, config, kv_cache_config, caches, guard)
        if register:
            try:
                with refusal_as(ConnectorRefused, self.rig.connector):
                    worker.register()
            except BaseException as error:
                worker.__exit__(type(error), error, error.__traceback__)  # shut it down, keep the first error
                raise
        return worker
