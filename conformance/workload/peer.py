"""The peer engine: another server writing into a store the consumer reads.

A store shared by several servers holds what all of them computed, not only
what one producer did. The peer engine serves the spec's ``peer`` requests
between the producer and the consumer. For a wrapper (a profile whose extra
config lists child ``connectors``, as MultiConnector's does) the peer runs the
last child alone, so that child holds prompts the others lack: the consumer's
children then hold different hits, and a wrapper that claims one child's count
but loads from another, or asks only its first child, is caught. For any other
connector the peer is one more engine of that connector over the same store.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.rig import AnyRig


def peer_rig(rig: AnyRig) -> AnyRig:
    """The workload's rig with the peer's connector (``last_child()`` of the connector under test: a wrapper's last
    child, else itself): same platform, shape, storage folder and sizes."""
    return replace(rig, connector=rig.connector.last_child())
