"""P/D consumers that read nothing of the producer's pages (``NOTIFY_SITUATIONS`` in conformance/checks/pair_notify.py).

A consumer request that needs no remote block, and one aborted before it is scheduled: the producer must be
released by the consumer's notification, never by lease expiry, and neither side may keep a block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_notify import NOTIFY_SITUATIONS, run_pair_notify
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="no producer holds pages for its consumer")
@pytest.mark.parametrize("situation", list(NOTIFY_SITUATIONS))
def test_pair_notify_only(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, situation: str,
                          make_rig: MakeRig) -> None:
    with refusals_skip():
        run_pair_notify(make_rig(CacheShape()), NOTIFY_SITUATIONS[situation])
