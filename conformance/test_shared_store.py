"""Stores shared between configurations (``conformance/checks/shared_store.py``): two engines of different
configurations over one store; the second never claims the first's KV, and each still hits its own.

It runs on every connector the round-trip runs on, except producer/consumer pairs: a pair's consumer
reads the one producer it is routed to, not a store other engines write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.shared_store import OTHER_CONFIGURATIONS, run_shared_store
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("shared_store")


@pytest.mark.producer_consumer(required=False, because="its consumer reads the producer it is routed to, not a store "
                               "that engines of other configurations write")
@pytest.mark.parametrize("other", list(OTHER_CONFIGURATIONS))
def test_shared_store(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, other: str,
                      make_rig: MakeRig) -> None:
    rig = make_rig(CacheShape())
    with refusals_skip():
        run_shared_store(rig, OTHER_CONFIGURATIONS[other].make(rig))
