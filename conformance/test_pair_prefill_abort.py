"""Prefills aborted on the prefill engine between two chunks of their prompt
(conformance/checks/pair_prefill_abort.py).

An aborted prefill must hand nothing over and keep no block; the prefills beside it are read by the consumer as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_prefill_abort import ChunkedPrefillRig, run_pair_prefill_abort
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="its prefills hand nothing over")
def test_pair_prefill_abort(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                            make_rig: MakeRig) -> None:
    with refusals_skip():
        run_pair_prefill_abort(make_rig(CacheShape(), ChunkedPrefillRig))
