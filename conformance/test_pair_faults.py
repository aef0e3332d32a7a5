"""Live pairs under faults: a read that fails after the handshake, and a transport that completes late.

``test_pair_load_failure`` is the load_failure check for producer/consumer pairs
(profiles with roles ``[kv_producer, kv_consumer]``; named so that ``-k test_load_failure``
still selects the store connectors' sabotages alone): the consumer's transfer
fails (``conformance/checks/pair_read_faults.py``), and the connector must raise, or
report the request in ``failed_recving`` or its blocks through
``get_block_ids_with_load_errors()``, under both ``kv_load_failure_policy``
values, with every slot vLLM keeps as loaded holding the producer's bytes.
``test_pair_slow_transport`` is the pair round-trip over a transport whose reads
complete some polls after posting: the bytes must be in place at the step the
consumer first reports the request received.
``test_pair_unreleasable_read`` is a READ that cannot be posted and whose prepared
handle cannot be released at the first attempt: judged as ``test_pair_load_failure``
judges a failed read, the consumer must besides report the request exactly once and
release the handle it kept before it drains. ``test_pair_vanished_producer`` is a
producer whose NIXL metadata is gone after a failed read: a later request from it
must be failed within a bound, not left waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.load_failure import POLICIES
from kvconform.conformance.checks.pair_read_faults import PAIR_FAULTS, run_pair_load_failure, run_pair_slow_roundtrip
from kvconform.conformance.checks.pair_transport import NoTransportHook
from kvconform.conformance.checks.pair_unreleasable_read import run_pair_unreleasable_read
from kvconform.conformance.checks.pair_vanished_producer import run_pair_vanished_producer
from kvconform.conformance.checks.roundtrip import ROUNDTRIP_SCENARIOS
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec


pytestmark = pytest.mark.producer_consumer(required=True, because="its load failures are staged on its storage by "
                                           "test_load_failure")


@pytest.mark.check("load_failure")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fault", list(PAIR_FAULTS))
def test_pair_load_failure(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, fault: str,
                           policy: str, make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            answer = run_pair_load_failure(make_rig(CacheShape()), PAIR_FAULTS[fault], policy)
        except NoTransportHook as exc:
            pytest.skip(str(exc))
    # run_pair_load_failure raised LoadFailureViolation if the failure went unreported or a kept slot was wrong
    record_property("kvconform.load_failure_answer", answer.describe())


@pytest.mark.check("roundtrip")
def test_pair_slow_transport(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                             make_rig: MakeRig) -> None:
    with refusals_skip():
        try:
            run_pair_slow_roundtrip(make_rig(CacheShape()), ROUNDTRIP_SCENARIOS["multi"])
        except NoTransportHook as exc:
            pytest.skip(str(exc))


@pytest.mark.check("load_failure")
@pytest.mark.parametrize("policy", POLICIES)
def test_pair_unreleasable_read(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, policy: str,
                                make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            answer = run_pair_unreleasable_read(make_rig(CacheShape()), policy)
        except NoTransportHook as exc:
            pytest.skip(str(exc))
    # run_pair_unreleasable_read raised if the failure went unreported or was reported twice, a kept slot was wrong,
    # or the handle it had to keep was never released
    record_property("kvconform.load_failure_answer", answer.describe())


@pytest.mark.check("load_failure")
def test_pair_vanished_producer(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                                make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            # whether the consumer reports at all is the question: one kv_load_failure_policy keeps the wait single
            answer = run_pair_vanished_producer(make_rig(CacheShape()), "fail")
        except NoTransportHook as exc:
            pytest.skip(str(exc))
    # run_pair_vanished_producer raised if a request waited past the bound, went unreported or kept a wrong slot
    record_property("kvconform.load_failure_answer", answer.describe())
