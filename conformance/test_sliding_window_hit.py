"""A cache hit over a KV cache with a full-attention and a sliding-window group (checks/sliding_window_hit.py).

Part of the ``workload`` check: for a connector vLLM runs with its hybrid KV cache manager (``SupportsHMA``), the
stored prompt asked again, extended, and cut to its leading blocks, over vLLM's grouping of full-attention and
sliding-window layers, and a prompt stored with its leading part over groups of uneven block sizes beside Mamba; the
claim must be a hit that leaves the last prompt token to compute, and each attention group's loaded slots must hold the
saved bytes. A profile that names situations in ``scenarios`` runs those alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.sliding_window_hit import HIT_SITUATIONS, run_sliding_window_hit
from kvconform.conformance.connectors.requirements import refusals_skip, run_only_its_scenarios
from kvconform.conformance.engine.kvcache import CacheShape
from kvconform.conformance.workload.profile_scenarios import profile_scenarios

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("workload")


@pytest.mark.parametrize("situation", list(HIT_SITUATIONS))
def test_sliding_window_hit(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, situation: str,
                            make_rig: MakeRig) -> None:
    """A stored prompt asked again (extended, cut) over groups with a sliding window: the claim and the bytes."""
    run_only_its_scenarios(subject, situation, profile_scenarios(), f"the sliding-window hit's {situation} situation")
    if subject.profile.is_pair():
        pytest.skip(f"{subject.name}: a producer/consumer pair; this check runs one kv_both engine after another")
    rig = make_rig(CacheShape())
    if reason := rig.block_size_refusal():
        pytest.skip(reason)
    with refusals_skip():
        config = rig.vllm_config(rig.roles()[0])
        if config.scheduler_config.disable_hybrid_kv_cache_manager:
            pytest.skip(f"{subject.name}: vLLM runs it without the hybrid KV cache manager (it, or a connector it "
                        f"wraps, does not implement SupportsHMA), so no KV cache it is given has a sliding-window "
                        f"group beside full attention")
        result = run_sliding_window_hit(rig, HIT_SITUATIONS[situation])
    assert result.claimed > 0 and all(result.compared.values()), result
