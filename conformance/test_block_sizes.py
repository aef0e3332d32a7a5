"""Synthetic KV fills on hybrid caches whose groups have different block sizes: per-group block arithmetic.

(Named apart from ``test_fill.py`` so ``-k test_fill``, the fill self-test's selection, keeps its own count.)

A sliding-window layer beside full-attention layers with heads twice as wide (as
Gemma-style models' global layers have) and a Mamba2 layer: the wide layers' page is
twice the others', so vLLM's own planner (``unify_kv_cache_spec_page_size``) doubles
the block size of the sliding window, and the engine core runs its Scheduler at the
groups' LCM and hashes at their GCD (``conformance/engine/block_sizes.py``). On the
CPU backend that gives groups of 64 (sliding window), 32 (full) and 32 (Mamba2)
tokens per block, each with its own block table from vLLM's hybrid coordinator.

A connector that fills per group must turn token counts into blocks with each
group's own block size: with one size for every group it fills too few blocks of
one group (left unwritten) or too many (another request's or the null block, or
past the blocks vLLM allocated). What must hold is the fill check's
(``conformance/checks/fill.py``): every block of the request's external tokens in
each group holds the fill, and nothing outside those blocks changes.

State layers are registered as tensors that own their storage (``owned``) and as
vLLM 0.32's byte pages (``pages``); the third registration (``views``) fails on
DecodeBenchConnector's known whole-tensor fill in ``test_fill`` already, whichever
block sizes the groups have, so it would add no per-group arithmetic here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.fill import FillFailure, run_fill
from kvconform.conformance.connectors.requirements import refusals_skip, require
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("fill")

BLOCK_SIZE_KINDS = ("sliding", "wide-full", "mamba2")  # layer kinds: conformance/engine/hybrid_cache.py
REGISTRATIONS = ("owned", "pages")
SCENARIOS = {"two-requests": False, "prefix-hit-block-sizes": True}  # scenario -> it has a local prefix hit


@pytest.mark.parametrize("registration", REGISTRATIONS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_block_sizes_fill(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam, scenario: str,
                          registration: str, make_rig: MakeRig) -> None:
    """Constant fill, exactly the request's blocks in each group, groups of different block sizes."""
    require(connector, platform, "fill")
    if not connector.profile.hybrid:
        pytest.skip(f"{connector.name}: its profile does not claim hybrid models (hybrid: false), and vLLM gives "
                    f"groups of different block sizes only to hybrid models")
    with refusals_skip():
        result = run_fill(make_rig(CacheShape()), BLOCK_SIZE_KINDS, registration, scenario=scenario)
    if len(set(result.block_sizes)) < 2:
        raise FillFailure(f"{connector.name}: vLLM planned the cache groups with block sizes {result.block_sizes}: "
                          f"all equal, so per-group block arithmetic was not exercised (harness: the layer kinds "
                          f"{BLOCK_SIZE_KINDS} no longer give pages of different sizes)")
    assert result.regions > 0
    if SCENARIOS[scenario]:
        local, _ = result.claims["b"]
        assert local > 0
