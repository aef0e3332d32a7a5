"""The worker side of a connector, called in the model runner's order.

Per step, as vLLM's ``KVConnectorModelRunnerMixin`` and the attention layers'
``maybe_transfer_kv_layer`` do it: ``handle_preemptions``; bind metadata; ``start_load_kv`` before the
layers when the step has synchronous loads, after them otherwise; per attention
layer ``wait_for_layer_load`` then ``save_kv_layer``, only while the connector
``has_connector_metadata()``; ``wait_for_save``;
``get_finished`` (through ``get_transfer_results`` where vLLM has it);
``get_block_ids_with_load_errors``; ``get_kv_connector_stats``, carried in the step's ``KVConnectorOutput`` as
answered (the worker's transfer stats, which vLLM's scheduler merges with its side's and returns to the stats
loggers); ``get_kv_connector_kv_cache_events``, carried there too (the worker's KV events, which vLLM's scheduler
hands the scheduler side in ``update_connector_output``); the worker metadata; clear metadata. Every answer the
connector gives is judged against base.py's promises as it is given (``enforce_promises``), naming the driver's
step. All of it inside vLLM's own ``set_forward_context`` and under a ``DeviceGuard``. The order
from binding to clearing is ``engine.step_order``'s, shared with the contract checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..vllm_install import api as vllm_api
from .affinity import restore_harness_affinity
from .device_guard import DeviceGuard
from .promises import enforce_promises, side_label
from .step_order import Call, connector_step

if TYPE_CHECKING:  # types only: vLLM is imported when a runner is built, never when the harness is imported
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec
    from vllm.v1.outputs import KVConnectorOutput

    from .kvcache import LayerCache


class WorkerStep(Protocol):
    """What ``SchedulerDriver`` steps as the model runner: a ``ModelRunnerStandIn``, or a check standing between."""

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput: ...


class StepGuard(Protocol):
    """What the runner's steps run under: a ``DeviceGuard`` (the bench's runner swaps in one that checks nothing)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> bool | None: ...

    def enter_layer(self, name: str) -> None: ...


class AttentionLayerStandIn:
    """What ``forward_context.no_compile_layers`` holds for a connector: a layer with ``kv_cache``.

    Reading ``kv_cache`` tells the device guard which layer the connector is on, so a
    device mismatch names the layer even inside ``start_load_kv``'s own layer loop.
    """

    def __init__(self, layer_name: str, kv_cache: object, guard: DeviceGuard):
        self.layer_name = layer_name
        self._kv_cache = kv_cache
        self._guard = guard

    @property
    def kv_cache(self) -> object:
        self._guard.enter_layer(self.layer_name)
        return self._kv_cache


class BackendLayerStandIn(AttentionLayerStandIn):
    """An attention layer to vLLM: ``get_current_attn_backends`` finds it and reads its backend.

    vLLM's worker builds the connector after the model, so a connector that asks which
    backend runs (NixlConnector does) is answered by the layers. These answer with the
    backend under test and the layer's own spec. Registered as a virtual subclass of
    vLLM's ``AttentionLayerBase`` when a worker is built, so importing this module needs no vLLM.
    """

    def __init__(self, layer_name: str, kv_cache: object, guard: DeviceGuard, backend: type, spec: object):
        super().__init__(layer_name, kv_cache, guard)
        self._backend = backend
        self._spec = spec

    def get_attn_backend(self) -> type:
        return self._backend

    def get_kv_cache_spec(self, vllm_config: VllmConfig) -> object:
        return self._spec


def layer_spec(kv_cache_config: KVCacheConfig, layer_name: str) -> KVCacheSpec | None:
    """The KV cache spec of one layer, as its group declares it."""
    for group in kv_cache_config.kv_cache_groups:
        if layer_name in group.layer_names:
            specs = getattr(group.kv_cache_spec, "kv_cache_specs", None)  # UniformTypeKVCacheSpecs
            return specs[layer_name] if specs else group.kv_cache_spec
    return None


def layer_stand_ins(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, caches: dict[str, object],
                    guard: DeviceGuard) -> dict[str, AttentionLayerStandIn]:
    """What the forward context holds per layer: attention layers answer with the config's backend.

    Layers that are not attention (Mamba state) stay plain holders of ``kv_cache``.
    """
    AttentionSpec = vllm_api.find("AttentionSpec")

    vllm_api.find("AttentionLayerBase").register(BackendLayerStandIn)
    chosen = vllm_config.attention_config.backend
    out: dict[str, AttentionLayerStandIn] = {}
    for name, cache in caches.items():
        spec = layer_spec(kv_cache_config, name)
        if chosen is not None and isinstance(spec, AttentionSpec):
            out[name] = BackendLayerStandIn(name, cache, guard, chosen.get_class(), spec)
        else:
            out[name] = AttentionLayerStandIn(name, cache, guard)
    return out


class ModuleWithoutKVCache:
    """A module vLLM registers in the forward context that holds no KV cache.

    A model's forward context holds more than attention: vLLM registers each MoE layer's runner
    (``fused_moe/runner/moe_runner.py``: ``register_layer_for_moe_forward_op``) and each LoRA linear's
    async copy (``lora/layers/base_linear.py``) in ``static_forward_context`` too, and none has a
    ``kv_cache``. A connector that reads ``kv_cache`` from every entry of
    ``forward_context.no_compile_layers`` crashes on such a model (ExampleConnector and LMCache skip them).
    """

    def __init__(self, layer_name: str):
        self.layer_name = layer_name


def with_modules_without_kv_cache(layers: Mapping[str, object]) -> dict[str, object]:
    """``layers`` in a decoder model's order, each decoder layer's MoE runner (``<layer>.mlp.experts``) after it."""
    out: dict[str, object] = {}
    for name, layer in layers.items():
        out[name] = layer
        decoder_layer = ".".join(name.split(".")[:3])  # model.layers.<i>
        out.setdefault(f"{decoder_layer}.mlp.experts", ModuleWithoutKVCache(f"{decoder_layer}.mlp.experts"))
    return out


def finished_transfers(connector: KVConnectorBase_V1,
                       finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None, set[str]]:
    """Completed sends, receives and failed receives, asked the way the installed vLLM's runner asks.

    vLLM 0.32's runner calls ``get_transfer_results`` (whose default wraps
    ``get_finished``; MultiConnector and Mooncake override it); a vLLM without it
    calls ``get_finished`` directly.
    """
    if hasattr(connector, "get_transfer_results"):
        results = connector.get_transfer_results(finished_req_ids)
        return results.finished_sending, results.finished_recving, set(results.failed_recving or ())
    sending, recving = connector.get_finished(finished_req_ids)
    return sending, recving, set()


def worker_metadata(connector: KVConnectorBase_V1) -> dict[str, Any]:
    """The worker's report to the scheduler side, built where vLLM's runner builds it (before clearing).

    ``KVConnectorOutput.kv_connector_worker_meta`` carries it to the scheduler's
    ``update_connector_output``: MooncakeStoreConnector's finished stores reach its
    scheduler side only this way. Empty for a vLLM without the hook.
    """
    build = getattr(connector, "build_connector_worker_meta", None)
    return {"kv_connector_worker_meta": build()} if build is not None else {}


def worker_events(connector: KVConnectorBase_V1) -> dict[str, Any]:
    """The worker's KV events of the step (``KVConnectorOutput.kv_cache_events``), which vLLM's scheduler hands the
    scheduler side's ``update_connector_output``: LMCacheConnector's stored blocks reach its ``take_events`` only this
    way. Empty for a connector without the hook."""
    take = getattr(connector, "get_kv_connector_kv_cache_events", None)
    return {"kv_cache_events": take()} if take is not None else {}


def _plain_call(connector: KVConnectorBase_V1) -> Call:
    """``connector.method(*args)``, unchecked: how the model runner calls its connector."""
    return lambda method, *args: getattr(connector, method)(*args)


@dataclass
class ModelRunnerStandIn:
    """Plays vLLM's model runner for a worker-role connector: builds it, registers the caches and calls it
    per step in the runner's order (``step``), so checks drive a real connector without a model."""

    vllm_config: VllmConfig
    kv_cache_config: KVCacheConfig
    caches: dict[str, LayerCache]  # layer name -> what register_kv_caches gets: a tensor, or a hybrid layer's state
    connector_name: str
    device: str
    metadata_for_layer: dict[str, object]
    attention_layers: list[str] | None = None  # layers the forward runs save_kv_layer for
    register: bool = True
    # The model's forward, per attention layer, between wait_for_layer_load and save_kv_layer:
    # ``forward(layer_name, scheduler_output)`` writes the step's new KV (workloads use it).
    forward: Callable[[str, SchedulerOutput], None] | None = None
    # the runner's own count, where a violation outside every driver's step (a rank's process) says it stands
    steps_run: int = field(default=0, init=False)
    stepping: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        guard = DeviceGuard(self.connector_name, self.caches, torch.device(self.device))
        self.guard: StepGuard = guard
        # the layers first, as vLLM loads the model before it builds the connector
        self.vllm_config.compilation_config.static_forward_context.update(with_modules_without_kv_cache(
            layer_stand_ins(self.vllm_config, self.kv_cache_config, self.caches, guard)))
        with restore_harness_affinity():  # NIXL's worker side pins the building thread
            self.connector = KVConnectorFactory.create_connector(self.vllm_config, KVConnectorRole.WORKER,
                                                                 self.kv_cache_config)
            enforce_promises(self.connector, side_label(self.connector_name, self.vllm_config, "worker"),
                             step=self._where)
            if self.register:
                with self.guard:
                    self.connector.register_kv_caches(self.caches)
        if self.attention_layers is None:
            self.attention_layers = list(self.caches)

    def _where(self) -> str:
        if self.stepping:
            return f"the runner's step {self.steps_run - 1}"
        return f"after the runner's step {self.steps_run - 1}" if self.steps_run else "before the runner's first step"

    def step(self, scheduler_output: SchedulerOutput) -> KVConnectorOutput:
        from vllm.forward_context import get_forward_context, set_forward_context

        self.steps_run += 1
        self.stepping = True  # left set if the step raises: the check fails there, and a later call is past it

        KVConnectorOutput = vllm_api.find("KVConnectorOutput")
        connector = self.connector
        runs_forward = scheduler_output.total_num_scheduled_tokens > 0
        layer_metadata = dict(self.metadata_for_layer)
        attn_metadata = layer_metadata if runs_forward else None
        def layers() -> None:  # the model's forward: per attention layer, wait for its load, write, save
            for name in self.attention_layers or ():
                self.guard.enter_layer(name)
                # vLLM's attention layers (kv_transfer_utils.maybe_transfer_kv_layer) call the connector only
                # while it has this step's metadata bound: a bind that leaves the flag unset saves nothing
                transfers = layer_metadata[name] is not None and connector.has_connector_metadata()
                if transfers:
                    connector.wait_for_layer_load(name)
                if self.forward is not None:
                    self.forward(name, scheduler_output)
                if transfers:
                    connector.save_kv_layer(name, self.caches[name], layer_metadata[name])

        def report() -> tuple[Any, ...]:
            sending, recving, failed = finished_transfers(connector, scheduler_output.finished_req_ids)
            load_errors = connector.get_block_ids_with_load_errors()
            # as vLLM's runner sets it, every step: None, an empty stats object or one with data, as answered
            stats = connector.get_kv_connector_stats()
            return sending, recving, failed, load_errors, stats, worker_events(connector), worker_metadata(connector)

        metadata = scheduler_output.kv_connector_metadata
        with set_forward_context(attn_metadata, self.vllm_config), self.guard:
            # first, as vLLM's execute_model does: an async saver finishes reading preempted requests' blocks
            # here, before this step's forward may write them for another request
            connector.handle_preemptions(metadata)
            sending, recving, failed, load_errors, stats, events, worker_meta = connector_step(
                _plain_call(connector), metadata, get_forward_context,
                sync_loads=bool(getattr(scheduler_output, "has_sync_kv_loads", True)),
                report=report, forward=layers if runs_forward else None)
        self.stepping = False
        return KVConnectorOutput(finished_sending=sending, finished_recving=recving, failed_recving=failed,
                                 invalid_block_ids=set(load_errors or ()), kv_connector_stats=stats, **events,
                                 **worker_meta)

    def shutdown(self) -> None:
        self.connector.shutdown()
