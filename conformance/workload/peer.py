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


def children(profile) -> list[dict]:
    """The child connector configs a wrapper's profile lists (MultiConnector's ``connectors``); [] otherwise."""
    kids = profile.extra_config.get("connectors")
    return kids if isinstance(kids, list) else []


def peer_connector(connector):
    """The connector the peer engine runs: a wrapper's last child, as the wrapper would build it; else itself."""
    from kvconform.conformance.connectors.profiles import ConnectorProfile
    from kvconform.conformance.connectors.selection import ConnectorParam

    kids = children(connector.profile)
    if not kids:
        return connector
    child = kids[-1]
    name = child["kv_connector"]
    profile = ConnectorProfile(extra_config=child.get("kv_connector_extra_config") or {},
                               roles=[child.get("kv_role", "kv_both")], checks=["workload"])
    return ConnectorParam(name, name, child.get("kv_connector_module_path"), profile)


def peer_rig(rig):
    """The workload's rig with the peer's connector: same platform, shape, storage folder and sizes."""
    return replace(rig, connector=peer_connector(rig.connector))
