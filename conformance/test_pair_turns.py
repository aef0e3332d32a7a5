"""A conversation's second turn on a P/D pair with bidirectional KV transfer (``TURN_SITUATIONS`` in
conformance/checks/pair_turns.py).

The decoder keeps turn one's blocks; the prefill engine gets turn two with the decoder's params and reads back what
its own prefix cache lacks (or, below its recompute threshold, computes it and only notifies the decoder). The claim
must be what the decoder computed, the read slots the decoder's bytes, and the decoder released by notification.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_turns import TURN_SITUATIONS, TurnsRig, run_pair_turns, turns_config
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="no decoder holds a conversation for a prefill engine")
@pytest.mark.parametrize("situation", list(TURN_SITUATIONS))
def test_pair_turns(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, situation: str,
                    make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    rig = make_rig(CacheShape(), TurnsRig)
    rig.extra_config.update(turns_config(TURN_SITUATIONS[situation]))
    with refusals_skip():
        claims = run_pair_turns(rig, TURN_SITUATIONS[situation])
    record_property("kvconform.claim", f"second-turn claims {claims}")
