"""Prompts with images: equal token ids with another image must miss, the same image again must hit.

A round-trip (``pytest.mark.check("roundtrip")``) in a module of its own, so the selections of the round-trips
by dtype, layout and scenario (``-k "test_roundtrip and ..."``) keep selecting what they did. The situation and
why: conformance/checks/images.py.
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


@pytest.mark.producer_consumer(required=False, because="a P/D pair's consumer loads the producer request its "
                               "kv_transfer_params name, not one it looks up by key, so no key can mix two images up")
def test_images(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, make_rig: MakeRig,
                record_property: Callable[[str, object], None]) -> None:
    """Equal token ids, different images: the consumer must not get the other image's KV; the same image hits."""
    from kvconform.conformance.checks.images import run_image_roundtrip

    rig = make_rig(CacheShape())
    if reason := rig.block_size_refusal():
        pytest.skip(reason)
    with refusals_skip():
        result = run_image_roundtrip(rig)
    record_property("kvconform.claim", result.describe())
