"""A taken side-channel port is a clear error within a bound, never a hang.

vLLM's NIXL scheduler side waits, without a timeout, for its handshake listener to
bind; a listener that finds its port taken dies first. These drive vLLM's real
scheduler-side NixlConnector against a port another socket already listens on.
"""

from __future__ import annotations

import importlib.util
import socket
import threading
import time

import pytest

from kvconform.conformance.engine.side_channel import HOST, HandshakeFailure, PortTaken, reserved_port, serve_handshake

needs_nixl = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="NixlConnector needs package nixl, which is not installed here")


def _nixl_scheduler_side(tmp_path, monkeypatch, port: int):
    """vLLM's own scheduler-side NixlConnector, configured to serve its handshake on ``port``."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvconform import platforms
    from kvconform.conformance.connectors.selection import resolve_connectors
    from kvconform.conformance.engine import kvcache
    from kvconform.conformance.engine.kvcache import CacheShape
    from kvconform.conformance.engine.model import write_tiny_model
    from kvconform.conformance.engine.rig import Rig

    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_HOST", HOST)
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", str(port))
    storage = tmp_path / "storage"
    storage.mkdir()
    rig = Rig(resolve_connectors(["NixlConnector"])[0], platforms.get("cpu"), "CPU_ATTN", CacheShape(),
              write_tiny_model(tmp_path / "model"), storage, "cpu")
    config = rig.vllm_config("kv_producer")
    kv_cache_config = kvcache.build_kv_cache_config(config, [(rig.layer_names(), rig.attention_spec())],
                                                    rig.num_blocks)
    return KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv_cache_config)


def _publisher(connector):
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import NixlHandshakePayload

    payload = NixlHandshakePayload(compatibility_hash="kvconform", agent_metadata_bytes=b"")
    return lambda: connector.set_xfer_handshake_metadata_pp_aware({(0, 0): payload})


@needs_nixl
def test_taken_port_is_reported_not_waited_on(tmp_path, monkeypatch):
    with socket.socket() as squatter:
        squatter.bind((HOST, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        connector = _nixl_scheduler_side(tmp_path, monkeypatch, port)
        started = time.monotonic()
        try:
            with pytest.raises(PortTaken, match=f"{HOST}:{port}: .*Address already in use"):
                serve_handshake(_publisher(connector), port)
            assert time.monotonic() - started < 10
        finally:
            connector.shutdown()  # the dead listener is joined at once


@needs_nixl
def test_reserved_port_serves_the_handshake(tmp_path, monkeypatch):
    with reserved_port() as port:
        connector = _nixl_scheduler_side(tmp_path, monkeypatch, port)
        try:
            serve_handshake(_publisher(connector), port)
            with socket.socket() as late, pytest.raises(OSError, match="Address already in use"):
                late.bind((HOST, port))  # vLLM's listener holds it now
        finally:
            connector.shutdown()


def test_reserved_port_is_not_handed_to_another_bind():
    with reserved_port() as port, socket.socket() as other, pytest.raises(OSError, match="Address already in use"):
        other.bind((HOST, port))


def test_a_listener_that_never_reports_ready_is_a_bounded_failure():
    never = threading.Event()
    with pytest.raises(HandshakeFailure, match=r"waited 0.2 s for the producer's handshake listener to bind "
                                               r"127.0.0.1:1 and report ready"):
        serve_handshake(lambda: never.wait(5), 1, timeout_s=0.2)
