"""Hybrid KV caches (attention + Mamba / linear attention), built and registered as vLLM does.

Specs come from vLLM's own classes and calculators, groups from ``get_kv_cache_groups`` (which pads Mamba
pages to the attention page), tensors from ``allocate_kv_cache``; all groups overlay one buffer, so a
block id belongs to one group at a time. What a connector is handed for a state (Mamba) layer depends on
who registers it, so registration is an axis (``REGISTRATIONS``): ``pages`` (vLLM 0.32's runner: the
layer's block-indexed byte page), ``views`` (the layer's own per-state views, as
``MambaBase.bind_kv_cache`` unpacks them) and ``owned`` (tensors with no block dimension, as vLLM PR
#45080's contract describes). State entries are tuples for Mamba2 layers and lists for KDA-like ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..vllm_install import api as vllm_api
from . import kvcache
from .backends import metadata_instance, metadata_type_of_builder
from .block_sizes import adopt_engine_block_sizes
from .check_failure import CheckFailure
from .model import HEAD_SIZE
from .rig import ConnectorRefused, EngineStandIn, Rig, refusal_as
from .runner import ModelRunnerStandIn
from .scheduler import SchedulerDriver

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec, MambaSpec

    from .kvcache import LayerCache
    from .rig import ConnectorUnderTest

LAYERS_PER_KIND = 2
SLIDING_WINDOW = 32  # tokens: two 16-token blocks, so a long prompt has null blocks below the window


class HybridUnsupported(CheckFailure):
    """The connector's profile claims hybrid models, but vLLM will not run one with it."""


def _attention_kwargs(vllm_config: VllmConfig) -> dict[str, Any]:
    """What vLLM's ``Attention.get_kv_cache_spec`` passes for this cache dtype (fp8: uint8 + FP8 mode)."""
    get_kv_cache_torch_dtype = vllm_api.find("get_kv_cache_torch_dtype")
    get_kv_quant_mode = vllm_api.find("get_kv_quant_mode")

    cache = vllm_config.cache_config
    heads = vllm_config.model_config.get_num_kv_heads(vllm_config.parallel_config)  # a TP rank's share, at least 1
    return dict(block_size=cache.block_size, num_kv_heads=heads, head_size=HEAD_SIZE,
                dtype=get_kv_cache_torch_dtype(cache.cache_dtype, vllm_config.model_config.dtype),
                kv_quant_mode=get_kv_quant_mode(cache.cache_dtype))


def _full(vllm_config: VllmConfig) -> KVCacheSpec:
    return vllm_api.find("FullAttentionSpec")(**_attention_kwargs(vllm_config))


def _wide_full(vllm_config: VllmConfig) -> KVCacheSpec:
    """Full attention with heads twice as wide as the other layers', as Gemma-style models' global layers have:
    its page is twice theirs, so vLLM's planner doubles their block size (groups of different block sizes)."""
    return vllm_api.find("FullAttentionSpec")(**{**_attention_kwargs(vllm_config), "head_size": 2 * HEAD_SIZE})


def _sliding(vllm_config: VllmConfig) -> KVCacheSpec:
    return vllm_api.find("SlidingWindowSpec")(**_attention_kwargs(vllm_config), sliding_window=SLIDING_WINDOW)


def _circular(vllm_config: VllmConfig) -> KVCacheSpec:
    return vllm_api.find("CircularBufferSpec")(**_attention_kwargs(vllm_config))


def _mamba_spec(vllm_config: VllmConfig, shapes: Iterable[tuple[int, ...]], dtypes: Iterable[torch.dtype],
                mamba_type: object) -> MambaSpec:
    """As ``MambaBase.get_kv_cache_spec`` builds it (page padding is left to vLLM's grouping)."""
    MambaSpec = vllm_api.find("MambaSpec")

    cache = vllm_config.cache_config
    return MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=cache.mamba_block_size,
                     page_size_padded=cache.mamba_page_size_padded, mamba_type=mamba_type,
                     mamba_cache_mode=cache.mamba_cache_mode)


def _mamba2(vllm_config: VllmConfig) -> KVCacheSpec:
    """Mamba2 (conv state, ssm state): a tiny layer, intermediate 16, 2 heads of 8, state 8, kernel 4, a TP rank's
    share of it."""
    MambaStateShapeCalculator = vllm_api.find("MambaStateShapeCalculator")
    MambaStateDtypeCalculator = vllm_api.find("MambaStateDtypeCalculator")
    MambaAttentionBackendEnum = vllm_api.find("MambaAttentionBackendEnum")

    cache = vllm_config.cache_config
    shapes = MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=vllm_config.parallel_config.tensor_parallel_size, intermediate_size=16, n_groups=1, num_heads=2,
        head_dim=8, state_size=8, conv_kernel=4)
    dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(
        vllm_config.model_config.dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)
    return _mamba_spec(vllm_config, shapes, dtypes, MambaAttentionBackendEnum.MAMBA2)


def _kda(vllm_config: VllmConfig) -> KVCacheSpec:
    """Kimi Delta Attention's states as the installed vLLM's KDA layer keeps them, mixed dtypes.

    Conv and recurrent state; vLLM 0.32 appends the RecoverSSM record (four states), 0.33
    dropped that from the state calculators (two states): the check follows what vLLM offers.
    """
    MambaStateShapeCalculator = vllm_api.find("MambaStateShapeCalculator")
    MambaStateDtypeCalculator = vllm_api.find("MambaStateDtypeCalculator")
    MambaAttentionBackendEnum = vllm_api.find("MambaAttentionBackendEnum")

    model_dtype = vllm_config.model_config.dtype
    shapes = MambaStateShapeCalculator.kda_state_shape(tp_world_size=1, num_heads=1, head_dim=8)
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(model_dtype, vllm_config.cache_config.mamba_cache_dtype)
    record_shapes = vllm_api.optional("MambaStateShapeCalculator.append_kda_recoverssm_record")
    record_dtypes = vllm_api.optional("MambaStateDtypeCalculator.append_kda_recoverssm_record")
    if record_shapes is not None and record_dtypes is not None:
        shapes = record_shapes(shapes, num_heads=1, head_dim=8, tp_world_size=1, spec_query_len=2)
        dtypes = record_dtypes(dtypes, model_dtype)
    return _mamba_spec(vllm_config, shapes, dtypes, MambaAttentionBackendEnum.GDN_ATTN)


@dataclass(frozen=True)
class LayerKind:
    """One kind of layer in the hybrid model: its name suffix and how vLLM would describe its cache."""

    suffix: str
    spec: Callable[[VllmConfig], KVCacheSpec]
    state: bool  # a Mamba-like layer whose kv_cache is a list/tuple of state tensors
    mamba_backend: str | None = None  # MambaAttentionBackendEnum member for its attention metadata
    container: type = tuple  # list or tuple: connectors meet both (vLLM PR #45080 crashed on a list)


KINDS: dict[str, LayerKind] = {
    "full": LayerKind("self_attn.attn", _full, state=False),
    "wide-full": LayerKind("self_attn.attn", _wide_full, state=False),
    "sliding": LayerKind("self_attn.attn", _sliding, state=False),
    "circular": LayerKind("self_attn.indexer.k_cache", _circular, state=False),
    "mamba2": LayerKind("mixer", _mamba2, state=True, mamba_backend="MAMBA2"),
    "kda": LayerKind("linear_attn", _kda, state=True, mamba_backend="GDN_ATTN", container=list),
}
HYBRID_KINDS = ("full", "sliding", "circular", "mamba2", "kda")
ATTENTION_ONLY_KINDS = ("full",)


def layer_kinds(kinds: tuple[str, ...]) -> dict[str, str]:
    """Layer name -> kind, kinds interleaved as hybrid models interleave them."""
    count = LAYERS_PER_KIND * len(kinds)
    return {f"model.layers.{i}.{KINDS[kinds[i % len(kinds)]].suffix}": kinds[i % len(kinds)] for i in range(count)}


class _StateLayer:
    """Just enough of a Mamba layer for vLLM's own ``MambaBase.bind_kv_cache`` to unpack a page."""

    def __init__(self, spec: MambaSpec) -> None:
        self._spec = spec
        self.kv_cache: tuple[torch.Tensor, ...] = ()
        # the byte alignment of each state in a page, as the layer's spec records it (vLLM 0.34 packs states by it;
        # older releases pack them without gaps and record none)
        self.state_alignment = getattr(spec, "state_alignment", 1)

    def get_state_shape(self) -> tuple[tuple[int, ...], ...]:
        shapes: tuple[tuple[int, ...], ...] = self._spec.shapes
        return shapes

    def get_state_dtype(self) -> tuple[torch.dtype, ...]:
        dtypes: tuple[torch.dtype, ...] = self._spec.dtypes
        return dtypes

    def bind(self, page: torch.Tensor) -> tuple[torch.Tensor, ...]:
        vllm_api.find("MambaBase").bind_kv_cache(self, page)
        return self.kv_cache


def _owned_states(spec: MambaSpec, page: torch.Tensor, container: type) -> LayerCache:
    return container(torch.empty(shape, dtype=dtype, device=page.device)
                     for shape, dtype in zip(spec.shapes, spec.dtypes, strict=True))


@dataclass(frozen=True)
class Registration:
    """How a state layer is handed to ``register_kv_caches``, and which of its parts are block-indexed."""

    entry: Callable[[MambaSpec, torch.Tensor, type], LayerCache]  # (spec, page view, list or tuple) -> the entry
    block_indexed: bool  # True: only the request's blocks may change; False: each tensor is one whole state
    doc: str


REGISTRATIONS: dict[str, Registration] = {
    "owned": Registration(_owned_states, block_indexed=False,
                          doc="lists/tuples of state tensors that own their storage (vLLM PR #45080's contract)"),
    "pages": Registration(lambda spec, page, container: page, block_indexed=True,
                          doc="one block-indexed byte page per layer, as vLLM 0.32's runner registers it"),
    "views": Registration(lambda spec, page, container: container(_StateLayer(spec).bind(page)), block_indexed=True,
                          doc="the layer's own kv_cache: a list/tuple of block-indexed per-state views"),
}


class _Absent:
    """Stands for no entry at all: the layer is left out of the dict ``register_kv_caches`` receives."""


ABSENT = _Absent()

# Entries of a type no connector can expect, for the "skipped with a warning" check; ``missing`` leaves a layer of
# the KV cache config out of the registered dict altogether.
UNEXPECTED_ENTRIES: dict[str, Callable[[torch.Tensor], object]] = {
    "dict": lambda page: {"pages": page},
    "none": lambda page: None,
    "missing": lambda page: ABSENT,
}


@dataclass
class HybridCaches:
    """A hybrid KV cache: the runner's allocation and what the connector was handed."""

    kv_cache_config: KVCacheConfig
    kinds: dict[str, str]  # layer -> kind
    pages: dict[str, torch.Tensor]  # allocate_kv_cache's per-layer views (every byte of the shared buffer)
    registered: dict[str, LayerCache]  # what register_kv_caches received
    registration: str
    unexpected: dict[str, str] = field(default_factory=dict)  # layer -> UNEXPECTED_ENTRIES key
    cache_dtype: str = "auto"  # the cache config's kv cache dtype: "fp8_e5m2" says how a uint8 fp8 page encodes

    def group_of(self, layer: str) -> int:
        return next(i for i, g in enumerate(self.kv_cache_config.kv_cache_groups) if layer in g.layer_names)

    def spec_of(self, layer: str) -> KVCacheSpec:
        return self.kv_cache_config.kv_cache_groups[self.group_of(layer)].kv_cache_spec

    def own_spec(self, layer: str) -> KVCacheSpec:
        """The layer's own spec: its group's, or its entry in the group's UniformTypeKVCacheSpecs."""
        specs = getattr(self.spec_of(layer), "kv_cache_specs", None)
        return specs[layer] if specs else self.spec_of(layer)

    def is_state(self, layer: str) -> bool:
        return KINDS[self.kinds[layer]].state

    def attention_layers(self) -> list[str]:
        return [name for name in self.kinds if not self.is_state(name)]


def configure_hybrid(vllm_config: VllmConfig, connector: ConnectorUnderTest, kinds: tuple[str, ...]) -> None:
    """Apply what vLLM does for a model with Mamba layers, and check the hybrid allocator stays on."""
    if any(KINDS[k].state for k in kinds):
        vllm_api.find("MambaModelConfig").verify_and_update_config(vllm_config)
    if len(kinds) > 1 and vllm_config.scheduler_config.disable_hybrid_kv_cache_manager:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma

        why = ("it does not implement SupportsHMA" if not supports_hma(connector.load_class())
               else "vLLM turned it off for this configuration")
        raise HybridUnsupported(
            f"{connector.name}: its profile says hybrid: true, but vLLM runs it without the hybrid KV cache "
            f"manager ({why}), so hybrid models cannot use it")


def build(vllm_config: VllmConfig, kinds: tuple[str, ...], device: str, registration: str,
          unexpected: dict[str, str] | None = None, num_blocks: int = kvcache.NUM_BLOCKS) -> HybridCaches:
    """Specs -> vLLM's groups -> KVCacheConfig -> allocation -> the dict a connector registers."""
    get_kv_cache_groups = vllm_api.find("get_kv_cache_groups")

    by_layer = layer_kinds(kinds)
    specs = {name: KINDS[kind].spec(vllm_config) for name, kind in by_layer.items()}
    groups = get_kv_cache_groups(vllm_config, specs)
    config = kvcache.build_kv_cache_config(vllm_config, [(g.layer_names, g.kv_cache_spec) for g in groups],
                                           num_blocks)
    adopt_engine_block_sizes(vllm_config, config)
    pages = kvcache.allocate(config, vllm_config, device)
    shape = REGISTRATIONS[registration]
    registered: dict[str, LayerCache] = {}
    for name, page in pages.items():
        spec = next(g.kv_cache_spec for g in config.kv_cache_groups if name in g.layer_names)
        if unexpected and name in unexpected:
            entry = UNEXPECTED_ENTRIES[unexpected[name]](page)
            if entry is not ABSENT:
                registered[name] = entry
        elif KINDS[by_layer[name]].state:
            registered[name] = shape.entry(spec, page, KINDS[by_layer[name]].container)
        else:
            registered[name] = page
    return HybridCaches(config, by_layer, pages, registered, registration, dict(unexpected or {}),
                        vllm_config.cache_config.cache_dtype)


def layer_metadata(caches: HybridCaches, backend: str) -> dict[str, object]:
    """Per-layer attention metadata of each layer's own backend type, as the forward context holds it."""
    MambaAttentionBackendEnum = vllm_api.find("MambaAttentionBackendEnum")

    out = {}
    for name, kind in caches.kinds.items():
        mamba = KINDS[kind].mamba_backend
        if mamba is None:
            out[name] = metadata_instance(backend)
        else:
            cls = metadata_type_of_builder(MambaAttentionBackendEnum[mamba].get_class().get_builder_cls())
            out[name] = cls.__new__(cls)  # type: ignore[call-overload]  # mypy reads a type[Any]'s __new__ as type's
    return out


def hybrid_engine(rig: Rig, kinds: tuple[str, ...], registration: str, extra_config: dict[str, Any] | None = None,
                  unexpected: dict[str, str] | None = None,
                  before_register: Callable[[HybridCaches], None] | None = None,
                  num_blocks: int = kvcache.NUM_BLOCKS) -> tuple[EngineStandIn, HybridCaches]:
    """A fresh engine stand-in over a hybrid cache of ``num_blocks`` blocks; ``extra_config`` overrides the
    profile's."""
    config = rig.vllm_config(rig.roles()[0])
    config.kv_transfer_config.kv_connector_extra_config.update(extra_config or {})
    return engine_over(rig, config, kinds, registration, unexpected, before_register=before_register,
                       num_blocks=num_blocks)


def engine_over(rig: Rig, config: VllmConfig, kinds: tuple[str, ...], registration: str,
                unexpected: dict[str, str] | None = None, fill_seed: int | None = None,
                before_register: Callable[[HybridCaches], None] | None = None,
                num_blocks: int = kvcache.NUM_BLOCKS) -> tuple[EngineStandIn, HybridCaches]:
    """An engine stand-in for ``config`` (any role) over a hybrid cache of ``kinds``; pages random (``fill_seed``)
    or zeroed. ``before_register`` sees the caches before the connector is built and registers them (a check of
    what ``register_kv_caches`` itself writes snapshots them there)."""
    configure_hybrid(config, rig.connector, kinds)
    caches = build(config, kinds, rig.device, registration, unexpected, num_blocks)
    if fill_seed is not None:
        kvcache.fill_random(caches.pages, fill_seed)
    if before_register is not None:
        before_register(caches)
    metadata = layer_metadata(caches, rig.effective_backend)
    with refusal_as(ConnectorRefused, rig.connector):
        runner = ModelRunnerStandIn(config, caches.kv_cache_config, caches.registered, rig.connector.name,
                                    rig.device, metadata, attention_layers=caches.attention_layers())
        # the engine core's scheduler gets vLLM's scheduler view of the config: a group of one attention type over
        # several page sizes (UniformTypeKVCacheSpecs) is one of its layers' specs there
        scheduler_view = vllm_api.find("generate_scheduler_kv_cache_config")([caches.kv_cache_config])
        scheduler = SchedulerDriver(config, scheduler_view)
    return EngineStandIn(config, caches.kv_cache_config, caches.registered, scheduler, runner), caches
