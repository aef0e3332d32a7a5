"""Synthetic KV fills on hybrid caches whose groups have different block sizes: per-group block arithmetic.

(Named apart from ``test_fill.py`` so ``-k test_fill``, the fill self-test's selection, keeps its count.)
A sliding window beside full attention with heads twice as wide, and a Mamba2 layer: vLLM's planner
doubles the sliding window's block size and the engine core schedules at the groups' LCM and hashes at
their GCD (``conformance/engine/block_sizes.py``); on CPU that gives 64, 32 and 32 tokens per block. A
connector that fills per group must use each group's own block size, or it fills too few blocks of one
group or too many; the fill check (``conformance/checks/fill.py``) judges. State layers are registered
``owned`` and ``pages``; ``views`` fails on DecodeBenchConnector's known whole-tensor fill in
``test_fill`` already, whatever the block sizes, so it adds no per-group arithmetic here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.fill import FillFailure, run_fill
from kvconform.conformance.connectors.requirements import refusals_skip
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
def test_block_sizes_fill(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, scenario: str,
                          registration: str, make_rig: MakeRig) -> None:
    """Constant fill, exactly the request's blocks in each group, groups of different block sizes."""
    if not subject.profile.hybrid:
        pytest.skip(f"{subject.name}: its profile does not claim hybrid models (hybrid: false), and vLLM gives "
                    f"groups of different block sizes only to hybrid models")
    with refusals_skip():
        result = run_fill(make_rig(CacheShape()), BLOCK_SIZE_KINDS, registration, scenario=scenario)
    if len(set(result.block_sizes)) < 2:
        raise FillFailure(f"{subject.name}: vLLM planned the cache groups with block sizes {result.block_sizes}: "
                          f"all equal, so per-group block arithmetic was not exercised (harness: the layer kinds "
                          f"{BLOCK_SIZE_KINDS} no longer give pages of different sizes)")
    assert result.regions > 0
    if SCENARIOS[scenario]:
        local, _ = result.claims["b"]
        assert local > 0
