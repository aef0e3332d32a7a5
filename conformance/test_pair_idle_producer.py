"""A producer the consumer stops reading from for longer than its ``engine_ttl``
(conformance/checks/pair_idle_producer.py): the consumer must release what it holds of that producer when it
handshakes a new one, and handshake the idle producer again when a request from it comes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_core import ConsumerDoesNotRead
from kvconform.conformance.checks.pair_idle_producer import IdleTtlRig, run_pair_idle_producer
from kvconform.conformance.checks.pair_transport import NoTransportHook
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="it handshakes with no producer")
def test_pair_idle_producer(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, make_rig: MakeRig,
                            record_property: Callable[[str, object], None]) -> None:
    try:
        with refusals_skip():
            result = run_pair_idle_producer(make_rig(CacheShape(), IdleTtlRig))
    except (ConsumerDoesNotRead, NoTransportHook) as exc:
        pytest.skip(str(exc))
    record_property("kvconform.claim", f"producer A's NIXL agent(s) {result.agents_of_a} released after "
                                       f"{result.released_after_s:.1f} s idle, and handshaken again")
