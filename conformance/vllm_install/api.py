"""Where the installed vLLM keeps each internal name the harness drives: one table, ``PLACES``.

The harness plays vLLM's engine core and model runner, so it drives internals vLLM moves, adds and drops
between releases (0.33 moved ``get_kv_cache_groups`` to ``vllm.v1.core.kv_cache_planning``; 0.34 dropped
``ModelRunnerOutput.req_id_to_index``). Every such name is looked up here (``find``, ``optional``,
``has_field``): a release that moves one is one edit to ``PLACES``, and a name no known place holds is one
line (``VllmApiError``) that the reports class as "kvconform cannot drive this vLLM", never as the connector's
failure, a skip or a bare ImportError. The session looks every entry up before any test (``look_up``, from
``engine/shapes.py``), so such a name is named once and the checks that need it are not run. What the harness
relies on beyond where a name lives is ``engine/shapes.py``'s table. Tests import from vLLM directly only the
connectors' public surface, ``CONNECTOR_API`` (tests/vllm_install/test_vllm_imports.py checks). Lookups are
lazy: importing this module imports no vLLM.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# The connectors' public surface: a module here, or below one (except the root package ``vllm``,
# which counts for itself only: ``from vllm import LLM``), may be imported directly.
CONNECTOR_API: tuple[str, ...] = (
    "vllm",  # the engine's public entry points: LLM, SamplingParams
    "vllm.distributed.kv_transfer",  # the connector base class, factory and roles
    "vllm.config",  # the configs connectors are built from
    "vllm.forward_context",  # what start_load_kv receives
    "vllm.inputs",  # the engine's prompt types
    "vllm.sampling_params",
    "vllm.platforms",  # current_platform, as connectors ask it
    # OffloadingConnector's media: the specs, workers and managers its spec registry (OffloadingSpecFactory) loads,
    # which third-party backends implement, as kvconform's CPU-memory medium does
    "vllm.v1.kv_offload",
    # SimpleCPUOffloadConnector's own package: the metadata between its two halves, which the scheduler-half check's
    # feeder reads as its worker half does (conformance/engine/simple_offload_worker_feeder.py)
    "vllm.v1.simple_kv_offload",
)


def in_connector_api(module: str) -> bool:
    """Whether ``module`` is part of ``CONNECTOR_API`` (so importing it needs no table entry)."""
    return any(module == api or (api != "vllm" and module.startswith(api + ".")) for api in CONNECTOR_API)


class VllmApiError(Exception):
    """The installed vLLM keeps a name the harness needs in none of the places kvconform knows.

    The message is one line: the name, the places tried, the installed vLLM. Not an ImportError
    on purpose: callers that skip a connector whose optional package is missing catch ImportError,
    and a harness that no longer fits vLLM must fail, not skip.
    """


@dataclass(frozen=True)
class Place:
    """Where a name lives: the modules that have kept it (newest vLLM first) and its attribute path."""

    modules: tuple[str, ...]
    attribute: str  # "name", or "Class.attr" for a class attribute (or a field, with field=True)
    # Non-empty: a vLLM kvconform runs on lacks the name by design, and what its absence means there;
    # ``optional`` then gives None and ``has_field`` False. Empty: missing is a failure (VllmApiError).
    absent: str = ""
    field: bool = False  # "Class.field": a field the class declares (probed with has_field), not a value


_PLANNING = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")  # 0.33 moved them to the first
_KV_CACHE_UTILS = ("vllm.v1.core.kv_cache_utils",)
_KV_CACHE_INTERFACE = ("vllm.v1.kv_cache_interface",)
_KV_CACHE_LAYOUT = ("vllm.v1.kv_cache_layout",)
_BACKEND_REGISTRY = ("vllm.v1.attention.backends.registry",)
_BACKEND_UTILS = ("vllm.v1.attention.backends.utils",)
_WORKER_UTILS = ("vllm.v1.worker.utils",)
_SCHEDULER = ("vllm.v1.core.sched.scheduler",)
_SCHEDULER_OUTPUT = ("vllm.v1.core.sched.output",)
_KV_CACHE_MANAGER = ("vllm.v1.core.kv_cache_manager",)
_STRUCTURED_OUTPUT = ("vllm.v1.structured_output",)
_OUTPUTS = ("vllm.v1.outputs",)
_REQUEST = ("vllm.v1.request",)
_PARALLEL_STATE = ("vllm.distributed.parallel_state",)
_MAMBA_UTILS = ("vllm.model_executor.layers.mamba.mamba_utils",)
_KDA_RECORD_DROPPED = "vLLM 0.33's KDA layers keep only their conv and recurrent states in the KV cache"
_INDEXED_BY_REQ_IDS = "dropped in vLLM 0.34: the scheduler finds a request's output by its place in req_ids"
_LAYOUT_IN_CONFIG = "a vLLM whose KVCacheConfig does not carry the engine core's KV cache layout to its workers"
_NEW_IN_032 = "new in vLLM 0.32: 0.31's engine core records no hash block size or cache-hit alignment in the config"


def _same_name(modules: tuple[str, ...], *names: str, absent: str = "") -> dict[str, Place]:
    """Entries whose key is their attribute path, all kept in ``modules``."""
    return {name: Place(modules, name, absent) for name in names}


PLACES: dict[str, Place] = {
    # the KV cache planner: groups, the KVCacheConfig, the engine core's block sizes
    **_same_name(_PLANNING, "get_kv_cache_groups", "get_kv_cache_config_from_groups"),
    **_same_name(_KV_CACHE_UTILS, "resolve_kv_cache_block_sizes", "get_request_block_hasher", "init_none_hash",
                 "generate_scheduler_kv_cache_config"),
    **_same_name(_KV_CACHE_UTILS, "resolve_cache_hit_alignment_tokens", absent=_NEW_IN_032),
    # the KV events connectors hand vLLM's event publisher, keyed by vLLM's block hashes as routers see them
    **_same_name(("vllm.distributed.kv_events",), "BlockStored"),
    **_same_name(_KV_CACHE_UTILS, "maybe_convert_block_hash"),
    # KV cache specs and the config connectors are handed
    **_same_name(_KV_CACHE_INTERFACE, "KVCacheConfig", "KVCacheGroupSpec", "AttentionSpec", "FullAttentionSpec",
                 "MLAAttentionSpec", "SlidingWindowSpec", "CircularBufferSpec", "MambaSpec", "KVQuantMode",
                 "get_kv_quant_mode", "iter_layer_specs"),
    "KVCacheConfig.hash_block_size": Place(_KV_CACHE_INTERFACE, "KVCacheConfig.hash_block_size", _NEW_IN_032,
                                           field=True),
    "KVCacheConfig.cache_hit_alignment_tokens": Place(_KV_CACHE_INTERFACE, "KVCacheConfig.cache_hit_alignment_tokens",
                                                      _NEW_IN_032, field=True),
    "KVCacheConfig.kv_cache_layout": Place(_KV_CACHE_INTERFACE, "KVCacheConfig.kv_cache_layout", _LAYOUT_IN_CONFIG,
                                           field=True),
    # layouts, backends and the runner's allocation
    **_same_name(_KV_CACHE_LAYOUT, "KVCacheLayout"),
    **_same_name(_BACKEND_REGISTRY, "AttentionBackendEnum", "MambaAttentionBackendEnum"),
    **_same_name(_BACKEND_UTILS, "record_kv_cache_layout"),
    **_same_name(_WORKER_UTILS, "allocate_kv_cache", "prepare_kernel_block_sizes"),
    **_same_name(("vllm.model_executor.layers.attention_layer_base",), "AttentionLayerBase"),
    **_same_name(("vllm.utils.torch_utils",), "get_kv_cache_torch_dtype"),
    # the scheduler side: scheduler, requests, its inputs and outputs
    **_same_name(_SCHEDULER, "Scheduler"),
    **_same_name(_SCHEDULER_OUTPUT, "SchedulerOutput"),
    **_same_name(_KV_CACHE_MANAGER, "KVCacheBlocks"),
    **_same_name(_STRUCTURED_OUTPUT, "StructuredOutputManager"),
    **_same_name(_OUTPUTS, "ModelRunnerOutput", "KVConnectorOutput", "EMPTY_MODEL_RUNNER_OUTPUT"),
    "ModelRunnerOutput.req_id_to_index": Place(_OUTPUTS, "ModelRunnerOutput.req_id_to_index", _INDEXED_BY_REQ_IDS,
                                               field=True),
    **_same_name(_REQUEST, "Request", "RequestStatus"),
    **_same_name(("vllm.multimodal.inputs",), "MultiModalFeatureSpec", "PlaceholderRange"),
    **_same_name(("vllm.utils.hashing",), "get_hash_fn_by_name"),
    # a one-process tensor-parallel world, as a worker has
    **_same_name(_PARALLEL_STATE, "init_distributed_environment", "ensure_model_parallel_initialized",
                 "model_parallel_is_initialized", "destroy_model_parallel", "destroy_distributed_environment"),
    # hybrid (Mamba / linear attention) layers
    **_same_name(_MAMBA_UTILS, "MambaStateShapeCalculator", "MambaStateDtypeCalculator", "get_conv_state_layout"),
    **_same_name(_MAMBA_UTILS, "MambaStateShapeCalculator.append_kda_recoverssm_record",
                 "MambaStateDtypeCalculator.append_kda_recoverssm_record", absent=_KDA_RECORD_DROPPED),
    **_same_name(("vllm.model_executor.layers.mamba.abstract",), "MambaBase"),
    **_same_name(("vllm.model_executor.models.config",), "MambaModelConfig"),
    # the engine's arguments, whose defaults a served engine starts with (disable_log_stats: its scheduler's stats)
    **_same_name(("vllm.engine.arg_utils",), "EngineArgs"),
    # the general plugins vLLM's engine core and workers load before building a connector (plugin-registered ones)
    **_same_name(("vllm.plugins",), "load_general_plugins"),
    # vLLM's warning_once memo, cleared so each check sees its own warnings
    **_same_name(("vllm.logger",), "_print_warning_once", absent="a vLLM without the memo has none to clear"),
}


def vllm_version() -> str:
    """The installed vLLM's version, for messages (from package metadata; 'not installed' when absent)."""
    from .window import installed_vllm

    found = installed_vllm()
    return f"{found[0]} ({found[1]})" if found else "not installed"


def _module(name: str) -> ModuleType | None:
    """The module, or None when this vLLM has no module by that name (any other import error propagates)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise


def _place(name: str) -> Place:
    place = PLACES.get(name)
    if place is None:
        raise VllmApiError(f"{name} is not in kvconform's table of vLLM names (conformance/vllm_install/api.py); "
                           f"add where vLLM {vllm_version()} keeps it")
    return place


def _resolve(path: str, modules: tuple[str, ...]) -> Any:
    """The object at attribute ``path`` in the first of ``modules`` that has it; None when none has."""
    first, *rest = path.split(".")
    for module_name in modules:
        module = _module(module_name)
        found = getattr(module, first, None) if module is not None else None
        for attribute in rest:
            found = getattr(found, attribute, None)
        if found is not None:
            return found
    return None


def _declares(cls: Any, field_name: str) -> bool:
    """Whether ``cls`` declares ``field_name`` as a field (a dataclass's, or a pydantic model's)."""
    if dataclasses.is_dataclass(cls):
        return any(f.name == field_name for f in dataclasses.fields(cls))
    return field_name in getattr(cls, "model_fields", {})


def _missing(place: Place, what: str = "") -> VllmApiError:
    return VllmApiError(f"vLLM {vllm_version()} has no {what}{place.attribute} in {' or '.join(place.modules)}"
                        + (f" ({place.absent})" if place.absent else "")
                        + "; update conformance/vllm_install/api.py to where this vLLM keeps it")


def _value(name: str) -> tuple[Place, Any]:
    place = _place(name)
    if place.field:
        raise VllmApiError(f"{name} is a field in kvconform's table of vLLM names: probe it with has_field")
    return place, _resolve(place.attribute, place.modules)


def find(name: str) -> Any:
    """The object vLLM keeps under ``name``, from the first place in ``PLACES`` that has it."""
    place, found = _value(name)
    if found is None:
        raise _missing(place)
    return found


def optional(name: str) -> Any:
    """Like ``find``, but None where a vLLM kvconform runs on lacks the name by design (``Place.absent``).

    A name not declared absent still fails loudly when missing.
    """
    place, found = _value(name)
    if found is None and not place.absent:
        raise _missing(place)
    return found


def look_up(name: str) -> None:
    """Look ``name`` up as its entry says: ``has_field`` for a field, ``optional`` for a name a vLLM may lack by
    design, ``find`` for any other; a VllmApiError where the installed vLLM keeps it in none of its places.

    The session's check (``engine/shapes.py``) asks this of every entry before any test runs.
    """
    place = _place(name)
    lookup = has_field if place.field else optional if place.absent else find
    lookup(name)


def has_field(name: str) -> bool:
    """Whether the installed vLLM's class declares the field ``name`` (``"Class.field"``, a field entry).

    False where a vLLM kvconform runs on lacks the field by design (``Place.absent``); a missing
    class, or a missing field not declared absent, is a VllmApiError.
    """
    place = _place(name)
    if not place.field:
        raise VllmApiError(f"{name} is not a field in kvconform's table of vLLM names: look it up with find")
    class_path, _, field_name = place.attribute.rpartition(".")
    cls = _resolve(class_path, place.modules)
    if cls is None:
        raise _missing(Place(place.modules, class_path))
    if _declares(cls, field_name):
        return True
    if place.absent:
        return False
    raise _missing(place, "field ")
