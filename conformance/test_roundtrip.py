"""Save/load round-trip: what a producer saves, a fresh consumer loads byte for byte.

Axes are split so the suite stays fast: dtypes on the preferred layout; every
layout vLLM defines on CPU (the GPU backends' layouts included, so index bugs
show before a GPU lane runs); scenarios x block sizes; MLA x dtypes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.roundtrip import ROUNDTRIP_SCENARIOS, run_roundtrip
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import KV_DTYPES, CacheShape, all_layouts
from kvconform.conformance.session.devices import MULTI_DEVICE_GROUP

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig, Rig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")

DTYPES = list(KV_DTYPES)
BLOCK_SIZES = [16, 32, 64]  # each backend runs those vLLM says its kernels take (CPU_ATTN: multiples of 32)


def _roundtrip(make_rig: Callable[[CacheShape], Rig], connector: ConnectorParam,
               shape: CacheShape, scenario: str = "unaligned",
               record_property: Callable[[str, object], None] | None = None) -> None:
    rig = make_rig(shape)
    if reason := rig.block_size_refusal():
        pytest.skip(reason)
    if connector.profile.is_pair():  # a producer/consumer pair: both sides live at once
        from kvconform.conformance.checks.pair import pair_inapplicable, run_pair_roundtrip

        if reason := pair_inapplicable(ROUNDTRIP_SCENARIOS[scenario]):
            pytest.skip(f"{connector.name}: {reason}")
        with refusals_skip():
            result = run_pair_roundtrip(rig, ROUNDTRIP_SCENARIOS[scenario])
    else:
        with refusals_skip():
            result = run_roundtrip(rig, ROUNDTRIP_SCENARIOS[scenario])
    if record_property is not None:  # claimed against stored (and promised), for the results
        record_property("kvconform.claim", result.describe())


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, dtype: str, make_rig: MakeRig,
                   record_property: Callable[[str, object], None]) -> None:
    _roundtrip(make_rig, subject, CacheShape(dtype=dtype), record_property=record_property)


@pytest.mark.mla  # attn_backend: the platform's MLA backends (an MLA layer never runs on another)
@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip_mla(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, dtype: str,
                       make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    _roundtrip(make_rig, subject, CacheShape(dtype=dtype, mla=True), record_property=record_property)


@pytest.mark.parametrize("layout", all_layouts())
def test_roundtrip_layout(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, layout: str,
                          make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    """On CPU every layout runs (the GPU backends' too: index bugs show before a GPU lane does);
    on an accelerator, the layouts the backend under test accepts."""
    if platform.name != "cpu":
        from kvconform.conformance.engine.backends import backend_class

        accepted = backend_class(attn_backend).supported_kv_cache_layouts()
        if accepted and layout not in [a.name for a in accepted]:
            pytest.skip(f"{attn_backend} does not accept the {layout} layout "
                        f"(its supported_kv_cache_layouts: {', '.join(a.name for a in accepted)})")
    _roundtrip(make_rig, subject, CacheShape(layout=layout), record_property=record_property)


@pytest.mark.parametrize("block_size", BLOCK_SIZES, ids=[f"bs{b}" for b in BLOCK_SIZES])
@pytest.mark.parametrize("scenario", list(ROUNDTRIP_SCENARIOS))
def test_roundtrip_scenario(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, scenario: str,
                            block_size: int, make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    _roundtrip(make_rig, subject, CacheShape(block_size=block_size), scenario, record_property)


POLICY_OFF_CURRENT = ("kvconform policy, stricter than vLLM (whose worker makes its cache device current): "
                      "the caches sit on a device that is not the current one")


@pytest.mark.xdist_group(MULTI_DEVICE_GROUP)
@pytest.mark.policy(POLICY_OFF_CURRENT)
def test_roundtrip_other_device(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, make_rig: MakeRig,
                                off_current_device: str, record_property: Callable[[str, object], None]) -> None:
    """Caches off the current device: catches ``"cuda"``, ``current_platform.device_type``, the current device.

    vLLM never does this, so a failure here is a finding of kvconform's policy, not a crash
    vLLM's worker would see; its message says so.
    """
    from dataclasses import replace

    from kvconform.conformance.engine.device_guard import DeviceMismatch, current_device

    record_property("kvconform.policy", POLICY_OFF_CURRENT)
    current = current_device(platform.torch_device_type)
    assert off_current_device != str(current), f"{off_current_device} is the current device; the case needs another"
    try:
        _roundtrip(lambda shape: replace(make_rig(shape), device=off_current_device), subject, CacheShape())
    except DeviceMismatch as exc:
        raise DeviceMismatch(f"{POLICY_OFF_CURRENT} (caches on {off_current_device}, current device {current}): "
                             f"{exc}") from exc

