"""P/D pairs as deployed behind a router (``ROUTINGS`` in conformance/checks/pair.py).

The pair round-trip of ``test_roundtrip`` hands the consumer the producer's request ids, an empty prefix
cache and prefills that end by length. A router does otherwise: the consumer's ids are its own (the
producer's rides in ``kv_transfer_params``), the consumer may hold part or all of the prompt already,
and a prefill may end on a stop token. In each the producer must be released by the consumer's
notification, never by lease expiry, and the loaded bytes must be the producer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair import ROUTINGS, SAME_ROUTE, run_pair_roundtrip
from kvconform.conformance.checks.roundtrip import ROUNDTRIP_SCENARIOS
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")

ROUTED = [name for name, routing in ROUTINGS.items() if routing is not SAME_ROUTE]  # same-ids: test_roundtrip's


@pytest.mark.producer_consumer(required=True, because="no router stands between its engines")
@pytest.mark.parametrize("routing", ROUTED)
def test_pair_routed(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, routing: str,
                     make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        result = run_pair_roundtrip(make_rig(CacheShape()), ROUNDTRIP_SCENARIOS["multi"], routing=ROUTINGS[routing])
    record_property("kvconform.claim", result.describe())
