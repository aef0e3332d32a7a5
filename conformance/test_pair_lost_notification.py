"""A notification-only read whose notification cannot be sent (conformance/checks/pair_lost_notification.py): the
consumer's requests, which read nothing, must run as vLLM expects, neither received nor failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_lost_notification import run_pair_lost_notification
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="it notifies no producer")
def test_pair_lost_notification(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                                make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        lost = run_pair_lost_notification(make_rig(CacheShape()))
    record_property("kvconform.claim", f"{lost} notification(s) lost")
