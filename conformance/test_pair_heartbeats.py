"""P/D requests that wait in a busy consumer's queue longer than the producer's lease
(conformance/checks/pair_heartbeats.py): the consumer's heartbeats must keep the producer's blocks until they are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_heartbeats import BusyConsumerRig, run_pair_heartbeats
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="no producer leases blocks to a consumer")
def test_pair_heartbeats(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                         make_rig: MakeRig) -> None:
    with refusals_skip():
        run_pair_heartbeats(make_rig(CacheShape(), BusyConsumerRig))
