"""The messages between a warm Python and what asks it for a process: one JSON line each, with the standard streams a
worker's shim hands over as descriptors beside its request."""

from __future__ import annotations

import array
import json
import socket
from collections.abc import Sequence

MAX_FDS = 3


def send(connection: socket.socket, message: dict[str, object], fds: Sequence[int] = ()) -> None:
    data = (json.dumps(message) + "\n").encode()
    connection.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])


def receive(connection: socket.socket) -> tuple[dict[str, object] | None, list[int]]:
    """One message and the descriptors sent with it; None where the other side closed first."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[: len(payload) - len(payload) % 4]).tolist()
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds
