"""The P/D pair round-trip with a consumer whose blocks hold twice the producer's tokens
(conformance/checks/pair_block_ratio.py).

NIXL reads the producer's smaller blocks into parts of the consumer's and rearranges them: every claimed token must
hold the producer's bytes when the consumer reports the request received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_block_ratio import BlockRatioRig, run_pair_block_ratio
from kvconform.conformance.checks.pair_core import ConsumerDoesNotRead
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="one engine stores and loads with one block size")
def test_pair_block_ratio(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, make_rig: MakeRig,
                          record_property: Callable[[str, object], None]) -> None:
    rig = make_rig(CacheShape(), BlockRatioRig)
    refusal = rig.either_block_size_refusal()
    if refusal:
        pytest.skip(refusal)
    try:
        with refusals_skip():
            compared = run_pair_block_ratio(rig)
    except ConsumerDoesNotRead as exc:
        pytest.skip(str(exc))
    record_property("kvconform.claim", f"token slots compared per request {compared}")
