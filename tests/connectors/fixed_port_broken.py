"""A connector whose leader half binds a fixed TCP port from its own defaults, with no profile.

A real third-party connector's scheduler side bound fixed ZeroMQ ports, and under ``pytest -n 2`` both
workers' construction probes started it on the same ports: ``Address already in use``, the harness's
collision read as the connector's failure. This copy of ExampleConnector binds 127.0.0.1 on the port
``$KVCONFORM_FIXED_PORT`` names (``DEFAULT_PORT`` without it) when its scheduler half is built, and keeps
the socket open until ``shutdown()``; with no profile it keeps the host to itself (host: exclusive), so the
suite must never build it on two workers at once (tests/connectors/test_host_lock_selftest.py proves it). Each
bind is written to the file ``$KVCONFORM_FIXED_PORT_LOG`` names, one line per attempt (``<pid> bound`` or
``<pid> in use``, and ``<pid> closed`` at its shutdown, each with the time), so the self-test sees which
processes built it, when, and whether any collided; ``$KVCONFORM_FIXED_PORT_STARTUP_S`` makes its leader take
that long to start, port bound, as a real one does, so that two workers' constructions overlap in time.
"""

from __future__ import annotations

import errno
import os
import socket
import time

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

PORT_VAR = "KVCONFORM_FIXED_PORT"
LOG_VAR = "KVCONFORM_FIXED_PORT_LOG"
STARTUP_VAR = "KVCONFORM_FIXED_PORT_STARTUP_S"  # how long its leader takes to start, port bound (default 0)
DEFAULT_PORT = 47711


def _log(event: str) -> None:
    path = os.environ.get(LOG_VAR)
    if path:
        with open(path, "a") as log:
            log.write(f"{os.getpid()} {event} {time.monotonic():.3f}\n")


class FixedPortConnector(ExampleConnector):
    """ExampleConnector whose scheduler half listens on a fixed loopback port while it lives."""

    def __init__(self, vllm_config, role, kv_cache_config):
        self._listener: socket.socket | None = None
        if role == KVConnectorRole.SCHEDULER:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                listener.bind(("127.0.0.1", int(os.environ.get(PORT_VAR, DEFAULT_PORT))))  # EADDRINUSE if taken
            except OSError as exc:
                listener.close()
                _log("in use" if exc.errno == errno.EADDRINUSE else f"bind failed: {exc}")
                raise
            _log("bound")
            listener.listen()
            self._listener = listener
            time.sleep(float(os.environ.get(STARTUP_VAR, "0")))
        super().__init__(vllm_config, role, kv_cache_config)

    def shutdown(self):
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            _log("closed")
        super().shutdown()
