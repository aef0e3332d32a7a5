"""A deliberately broken copy of vLLM's NixlConnector for a producer idle longer than the consumer's ``engine_ttl``
(conformance/test_pair_idle_producer.py): its consumer never releases a producer it stopped reading from.

The class changes only the worker's release of idle producers, which runs on every handshake with a new producer but
finds one to release only after an idle spell past ``engine_ttl`` (vLLM's default: an hour), which no other check
waits out; tests/checks/test_nixl_idle_catches.py proves the situation fails it and the unmodified NixlConnector
passes. The mutation floor's mutant of vLLM 0.32's TTL test in nixl/base_worker.py (``now / last_active`` for ``now -
last_active``: a ratio of two clock readings, near 1, never above a TTL of a second or more) behaves as this copy does.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


class IdleProducerKeptConnector(NixlConnector):
    """The consumer keeps every producer it ever handshook: the release of producers unread for ``engine_ttl``
    seconds, at each handshake with a new one, does nothing, so their NIXL agents and descriptor lists stay."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker._evict_stale_engines = lambda: None
