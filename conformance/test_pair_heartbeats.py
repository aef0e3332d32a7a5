"""P/D requests that wait in a busy consumer's queue longer than the producer's lease
(conformance/checks/pair_heartbeats.py): the consumer's heartbeats must keep the producer's blocks until they are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_heartbeats import BusyConsumerRig, run_pair_heartbeats
from kvconform.conformance.connectors.requirements import refusals_skip, require
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


def test_pair_heartbeats(platform: PlatformSpec, attn_backend: str, connector: ConnectorParam,
                         make_rig: MakeRig) -> None:
    require(connector, platform, "roundtrip")
    if not connector.profile.is_pair():
        pytest.skip(f"{connector.name} is not a producer/consumer pair (its profile's roles): no producer leases "
                    f"blocks to a consumer")
    with refusals_skip():
        run_pair_heartbeats(make_rig(CacheShape(), BusyConsumerRig))
