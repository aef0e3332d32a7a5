"""The P/D pair round-trip on hybrid caches whose groups have different block sizes.

A sliding window beside full-attention layers with heads twice as wide, and Mamba2: vLLM's
planner gives the sliding window blocks twice as large (64 and 32 tokens on CPU),
and a pair connector that implements ``SupportsHMA`` must move each group's blocks
with that group's block size. NixlConnector (and its pull/push variants) does, over
host memory on CPU. The Mamba state makes the producer's prefill stop where the
consumer's load stops, and a request asking for prompt logprobs be computed whole on
both sides. What must hold: ``conformance/checks/hybrid_pair.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="kvconform drives the round-trip on groups of different block "
                               "sizes for producer/consumer pairs only (not yet for store-then-load ones)")
def test_block_sizes_pair(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, make_rig: MakeRig,
                          record_property: Callable[[str, object], None]) -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma

    if not supports_hma(subject.load_class()):
        pytest.skip(f"{subject.name}: does not implement SupportsHMA, so vLLM turns the hybrid KV cache manager "
                    f"off and its cache groups never differ in block size")
    from kvconform.conformance.checks.hybrid_pair import HybridPairRig, run_hybrid_pair_roundtrip

    with refusals_skip():
        result = run_hybrid_pair_roundtrip(make_rig(CacheShape(), HybridPairRig))
    assert len(set(result.block_sizes)) >= 2, (
        f"{subject.name}: vLLM planned the cache groups with block sizes {result.block_sizes}: all equal, so "
        f"per-group block arithmetic was not exercised")
    record_property("kvconform.claim", f"claims {result.claims}; token slots compared per group {result.compared}")
