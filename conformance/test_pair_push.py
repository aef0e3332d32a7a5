"""Push pairs whose halves meet in the orders a deployment produces, or that stop mid-WRITE (``PUSH_SITUATIONS`` in
conformance/checks/pair_push.py), or in which one side drops a request the other counts on (``PUSH_ABORTS`` in
conformance/checks/pair_push_aborts.py), and a push producer whose WRITE fails.

A consumer registered before the producer's prefill finished, request ids each engine suffixed on its own, WRITE
submissions slower than vLLM's 200 ms mark: each passes as the pair round-trip does (the consumer's bytes are the
producer's when it reports them received, each side is released on the other's word, never by lease expiry, no block
stays held); a producer shut down with a WRITE in flight releases every transfer handle it prepared. A WRITE the
producer cannot post (or then release), a registration the consumer cannot send, a handshake back the producer cannot
make (``PUSH_FAULTS``), is a load that failed, judged as a failed read is (``test_pair_load_failure``): the consumer
raises or reports it within a bound, never reports it received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_push import PUSH_SITUATIONS, NotInMode
from kvconform.conformance.checks.pair_push_aborts import PUSH_ABORTS
from kvconform.conformance.checks.pair_transport import NoTransportHook
from kvconform.conformance.checks.pair_write_faults import PUSH_FAULTS, run_pair_write_failure
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")
# vLLM's kv_load_failure_policy acts on what the consumer reports; a push fault's question is whether it reports at all
# (test_pair_load_failure runs both policies over a report), so one policy keeps each fault's bounded wait single.
POLICY = "fail"
# the meeting situations, and those in which one side drops a request the other counts on
SITUATIONS = {**PUSH_SITUATIONS, **PUSH_ABORTS}


@pytest.mark.producer_consumer(required=True, because="its requests have no second engine to meet")
@pytest.mark.parametrize("situation", list(SITUATIONS))
def test_pair_orders(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, situation: str,
                     make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            chosen = SITUATIONS[situation]
            result = chosen.run(make_rig(CacheShape(), chosen.rig_class), chosen)
        except NotInMode as exc:
            pytest.skip(str(exc))
    if result is not None:
        record_property("kvconform.claim", result.describe())


@pytest.mark.producer_consumer(required=True, because="no producer writes into its blocks")
@pytest.mark.check("load_failure")
@pytest.mark.parametrize("fault", list(PUSH_FAULTS))
def test_pair_write_failure(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, fault: str,
                            make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            answer = run_pair_write_failure(make_rig(CacheShape()), PUSH_FAULTS[fault], POLICY)
        except NoTransportHook as exc:
            pytest.skip(str(exc))
    # run_pair_write_failure raised if the consumer hung, reported the request received or kept a wrong slot
    record_property("kvconform.load_failure_answer", answer.describe())
