"""Synthetic KV fills on hybrid caches: exactly the request's blocks, state tensors whole, the right values.

The cache mixes full-attention, sliding-window and circular-buffer layers with Mamba2 and KDA-like state
layers (several groups, so a SupportsHMA connector runs its hybrid paths), built and driven as vLLM does;
state layers are registered three ways (``owned``, ``pages``, ``views``:
``conformance/engine/hybrid_cache.py``), and ``conformance/checks/fill.py`` says what must hold. Random
fills use ``fill_std`` 0.5 and are judged within 6 standard errors of the requested mean and std (a false
failure below 1e-8 per check), pooled over every value filled, plus the largest rounding the cache dtype
can add: see ``check_statistics``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kvconform.conformance.checks.fill import FillFailure, FillResult, run_fill
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.hybrid_cache import (
    ATTENTION_ONLY_KINDS,
    HYBRID_KINDS,
    REGISTRATIONS,
    UNEXPECTED_ENTRIES,
    layer_kinds,
)
from kvconform.conformance.engine.kvcache import KV_DTYPES, MORE_KV_DTYPES, CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("fill")

DTYPES = [*KV_DTYPES, *MORE_KV_DTYPES]  # fp8_e5m2 too: the connector encodes fp8 fills by the cache dtype's name


def _kinds(connector: ConnectorParam, registration: str) -> tuple[str, ...]:
    """The layer kinds a connector is checked on: hybrid ones when its profile claims hybrid models."""
    if connector.profile.hybrid:
        return HYBRID_KINDS
    if registration != "pages":
        pytest.skip(f"{connector.name}: its profile does not claim hybrid models (hybrid: false), so it has no "
                    f"state layers to register as {registration!r}")
    return ATTENTION_ONLY_KINDS


def _fill(make_rig: MakeRig, connector: ConnectorParam, dtype: str, registration: str,
          **kwargs: Any) -> FillResult:
    kinds = _kinds(connector, registration)
    with refusals_skip():
        return run_fill(make_rig(CacheShape(dtype=dtype)), kinds, registration, **kwargs)


@pytest.mark.parametrize("registration", list(REGISTRATIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_fill(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, dtype: str, registration: str,
              make_rig: MakeRig) -> None:
    """Constant fill (fill_std 0), two requests in one step: exactly their blocks, exactly fill_mean."""
    result = _fill(make_rig, subject, dtype, registration)
    assert result.regions > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_random(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, dtype: str,
                     make_rig: MakeRig) -> None:
    """Random fill: the requested mean and std, within the tolerance stated in the module docstring."""
    registration = "owned" if subject.profile.hybrid else "pages"  # owned state tensors are random too
    result = _fill(make_rig, subject, dtype, registration, mode="random")
    assert result.statistics


@pytest.mark.parametrize("registration", list(REGISTRATIONS))
def test_fill_prefix_hit(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, registration: str,
                         make_rig: MakeRig) -> None:
    """A second request reusing a cached prefix: only its missing blocks are filled."""
    result = _fill(make_rig, subject, "float16", registration, scenario="prefix-hit")
    local, _ = result.claims["b"]
    assert local > 0


def test_fill_high_block_ids(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                             make_rig: MakeRig) -> None:
    """Block ids past the size of every dimension of a cache tensor but the first, as a real engine's pool hands
    them out: every one of the request's blocks is filled (a bound taken from another dimension leaves them out)."""
    result = _fill(make_rig, subject, "float16", "pages", scenario="high-block-ids")
    if not result.past_dimensions:
        raise FillFailure(f"{subject.name}: no block to fill had an id past the size of its tensor's other "
                          f"dimensions, so a fill bounded by one of them was not exercised (harness: the "
                          f"'high-block-ids' scenario no longer reaches such ids)")
    assert result.regions > 0


@pytest.mark.parametrize("mode", ["constant", "startup"])
@pytest.mark.parametrize("entry", list(UNEXPECTED_ENTRIES))
def test_fill_unexpected_entry(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, entry: str,
                               mode: str, make_rig: MakeRig) -> None:
    """A cache entry of a type the connector cannot know, or none, is skipped with a warning, not a crash: in the
    step that fills a request, or at startup (startup_fill: true fills the state groups in register_kv_caches)."""
    if not subject.profile.hybrid:
        pytest.skip(f"{subject.name}: its profile does not claim hybrid models (hybrid: false)")
    state_layer = next(name for name, kind in layer_kinds(HYBRID_KINDS).items() if kind == "mamba2")
    with refusals_skip():
        result = run_fill(make_rig(CacheShape()), HYBRID_KINDS, "owned", mode=mode, unexpected={state_layer: entry})
    assert any(state_layer in message for message in result.warnings)


HEAD_SIZES_KINDS = ("full", "wide-full")  # full attention, heads of two sizes: conformance/engine/hybrid_cache.py


@pytest.mark.parametrize("dtype", ["float16", "fp8"])
def test_fill_head_sizes(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, dtype: str,
                         make_rig: MakeRig) -> None:
    """Full attention layers of two head sizes: vLLM plans one group whose spec holds each layer's own
    (UniformTypeKVCacheSpecs; its scheduler sees one of them); each layer is filled in its own encoding."""
    with refusals_skip():
        result = run_fill(make_rig(CacheShape(dtype=dtype)), HEAD_SIZES_KINDS, "pages")
    if len(result.block_sizes) != 1:
        raise FillFailure(f"{subject.name}: vLLM planned {len(result.block_sizes)} cache groups for full attention "
                          f"of two head sizes, not one of both (harness: the layer kinds {HEAD_SIZES_KINDS})")
    assert result.regions > 0


# The hybrid kinds with the state layers first, as Qwen3-Next (linear attention), Nemotron-H and Jamba (Mamba) begin:
# vLLM numbers the groups in the order their layers come, so a group filled at startup precedes groups filled per
# request (a connector that stops at the first startup group then leaves every later group unfilled).
STATE_FIRST_KINDS = ("mamba2", "kda", "full", "sliding", "circular")

# case -> (layer kinds, registration of state layers, fill mode). Attention only: one group the engine never zeroes,
# filled whole at startup, nothing per request. Hybrid: vLLM zeroes new attention blocks (Mamba layers), so only the
# state groups are filled at startup, and attention and circular-buffer groups per request as without the option.
STARTUP_CASES = {
    "attention": (ATTENTION_ONLY_KINDS, "pages", "startup"),
    "attention-random": (ATTENTION_ONLY_KINDS, "pages", "startup-random"),
    **{f"hybrid-{registration}-registration": (HYBRID_KINDS, registration, "startup")
       for registration in REGISTRATIONS},
    "hybrid-state-layers-first": (STATE_FIRST_KINDS, "pages", "startup"),
}


@pytest.mark.parametrize("case", list(STARTUP_CASES))
def test_fill_startup(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, case: str,
                      make_rig: MakeRig) -> None:
    """startup_fill: true: register_kv_caches fills the groups the engine never zeroes whole (and nothing else);
    each request's step fills only the other groups' blocks."""
    kinds, registration, mode = STARTUP_CASES[case]
    if kinds != ATTENTION_ONLY_KINDS and not subject.profile.hybrid:
        pytest.skip(f"{subject.name}: its profile does not claim hybrid models (hybrid: false)")
    with refusals_skip():
        result = run_fill(make_rig(CacheShape()), kinds, registration, mode=mode)
    assert result.regions > 0
