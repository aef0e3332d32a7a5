"""Live pairs whose handshake fails before any transfer is posted (``HANDSHAKE_FAULTS`` in pair_handshake_faults.py).

The consumer's ``kv_transfer_params`` name a producer it cannot handshake with: a side-channel port no
producer serves, or an engine id the producer at that host does not have. As for a read that fails
(``test_pair_load_failure``), the connector must raise, or report the request in ``failed_recving`` or
its blocks through ``get_block_ids_with_load_errors()``, under both ``kv_load_failure_policy`` values,
and here within a bound just above vLLM's own handshake timeout: never hang, never report it received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.load_failure import POLICIES
from kvconform.conformance.checks.pair_handshake_faults import HANDSHAKE_FAULTS, run_pair_handshake_failure
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec


@pytest.mark.producer_consumer(required=True, because="it has no handshake with a producer")
@pytest.mark.check("load_failure")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fault", list(HANDSHAKE_FAULTS))
def test_pair_handshake_failure(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, fault: str,
                                policy: str, make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        answer = run_pair_handshake_failure(make_rig(CacheShape()), HANDSHAKE_FAULTS[fault], policy)
    # run_pair_handshake_failure raised if the consumer hung, reported the request received or kept a wrong slot
    record_property("kvconform.load_failure_answer", answer.describe())
