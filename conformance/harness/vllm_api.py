"""Where the installed vLLM keeps the names the harness takes from it that have moved between releases.

The harness drives vLLM's internals (the KV cache planner, the Mamba state calculators),
and vLLM moves those between releases: 0.33 moved ``get_kv_cache_groups`` and
``get_kv_cache_config_from_groups`` from ``vllm.v1.core.kv_cache_utils`` to
``vllm.v1.core.kv_cache_planning`` (same signatures) and dropped the KDA RecoverSSM record
from the Mamba state calculators. Such names are looked up here, in one table, so that a
vLLM move is one edit to ``PLACES``; a name that no known place holds fails with one line
naming the name and the installed vLLM, never a bare ImportError deep inside a test.

Names that never moved are imported where they are used, as vLLM's own code does.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


class VllmApiError(Exception):
    """The installed vLLM keeps a name the harness needs in none of the places kvconform knows.

    Not an ImportError on purpose: callers that skip a connector whose optional package is
    missing catch ImportError, and a harness that no longer fits vLLM must fail, not skip.
    """


@dataclass(frozen=True)
class Place:
    """Where a name lives: the modules that have kept it (newest vLLM first) and its attribute path."""

    modules: tuple[str, ...]
    attribute: str  # "name", or "Class.method" for a class attribute
    dropped: str = ""  # non-empty: a tested vLLM no longer has it, by design (why); ``optional`` then gives None


_PLANNING = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")  # 0.33 moved them to the first
_MAMBA_UTILS = ("vllm.model_executor.layers.mamba.mamba_utils",)

PLACES: dict[str, Place] = {
    "get_kv_cache_groups": Place(_PLANNING, "get_kv_cache_groups"),
    "get_kv_cache_config_from_groups": Place(_PLANNING, "get_kv_cache_config_from_groups"),
    "MambaStateShapeCalculator.append_kda_recoverssm_record": Place(
        _MAMBA_UTILS, "MambaStateShapeCalculator.append_kda_recoverssm_record",
        dropped="vLLM 0.33's KDA layers keep only their conv and recurrent states in the KV cache"),
    "MambaStateDtypeCalculator.append_kda_recoverssm_record": Place(
        _MAMBA_UTILS, "MambaStateDtypeCalculator.append_kda_recoverssm_record",
        dropped="vLLM 0.33's KDA layers keep only their conv and recurrent states in the KV cache"),
}


def vllm_version() -> str:
    """The installed vLLM's version, for messages (from package metadata; 'not installed' when absent)."""
    from kvconform.conformance.reliability.vllm_version import installed_vllm

    found = installed_vllm()
    return f"{found[0]} ({found[1]})" if found else "not installed"


def _module(name: str):
    """The module, or None when this vLLM has no module by that name (any other import error propagates)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise


def _lookup(name: str):
    place = PLACES.get(name)
    if place is None:
        raise VllmApiError(f"{name} is not in kvconform's table of vLLM names (conformance/harness/vllm_api.py); "
                           f"add where vLLM {vllm_version()} keeps it")
    first, *rest = place.attribute.split(".")
    for module_name in place.modules:
        module = _module(module_name)
        found = getattr(module, first, None) if module is not None else None
        for attribute in rest:
            found = getattr(found, attribute, None)
        if found is not None:
            return place, found
    return place, None


def find(name: str):
    """The object vLLM keeps under ``name``, from the first place in ``PLACES`` that has it."""
    place, found = _lookup(name)
    if found is None:
        raise VllmApiError(f"vLLM {vllm_version()} has no {place.attribute} in {' or '.join(place.modules)}"
                           + (f" ({place.dropped})" if place.dropped else "")
                           + "; update conformance/harness/vllm_api.py to where this vLLM keeps it")
    return found


def optional(name: str):
    """Like ``find``, but None where a tested vLLM dropped the name by design (``Place.dropped``).

    A name not declared as dropped still fails loudly when missing.
    """
    place, found = _lookup(name)
    if found is None and not place.dropped:
        return find(name)
    return found
