"""The producer's handshake side channel: a port no one else is handed, and a start that cannot hang.

vLLM's NIXL listener thread binds a ZMQ ROUTER on ``VLLM_NIXL_SIDE_CHANNEL_PORT`` while
``set_xfer_handshake_metadata`` waits, with no timeout, for it to be bound; if the bind fails the thread
dies and the engine core waits forever. A port found by probing can be taken by any process in between,
so the port is *reserved*: a socket bound with ``SO_REUSEADDR`` and never listening holds it (the kernel
hands it to no other ``bind(0)``) while ZMQ may still bind it. A process that binds that very number on
purpose can still win: then the listener's error is caught, the waiter woken, and the start retried on a
fresh port. Every wait has a bound and a message that says what it waited for.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from .check_failure import CheckFailure

HOST = "127.0.0.1"
# vLLM's listener: the thread's name and the function it runs (whose ``ready_event`` the caller waits on)
LISTENER_THREAD = "nixl_handshake_listener"
LISTENER_FUNCTION = "_nixl_handshake_listener"
LISTENER_START_TIMEOUT_S = 10.0
PORT_IN_USE = "Address already in use"


class PortTaken(Exception):
    """Another process bound the side-channel port first; a fresh port may succeed."""


class HandshakeFailure(CheckFailure):
    """The handshake side channel did not come up; the message says what was waited for."""


@contextmanager
def reserved_port(host: str = HOST) -> Iterator[int]:
    """A free port, held (bound, not listening) until the context closes, so no ``bind(0)`` is given it."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind((host, 0))
        yield holder.getsockname()[1]
    finally:
        holder.close()


def _wake_waiter(traceback: TracebackType | None) -> None:
    """Set the ready event of the listener that died, so vLLM's caller stops waiting on it."""
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code.co_name == LISTENER_FUNCTION:
            event = frame.f_locals.get("ready_event")
            if isinstance(event, threading.Event):
                event.set()
            return
        traceback = traceback.tb_next


@contextmanager
def _listener_errors() -> Iterator[list[BaseException | None]]:
    """The exceptions vLLM's listener thread dies of while the context is open (others pass through)."""
    errors: list[BaseException | None] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.thread is not None and args.thread.name == LISTENER_THREAD:
            errors.append(args.exc_value)
            _wake_waiter(args.exc_traceback)
            return
        previous(args)

    threading.excepthook = hook
    try:
        yield errors
    finally:
        threading.excepthook = previous


def serve_handshake(publish: Callable[[], None], port: int, host: str = HOST,
                    timeout_s: float = LISTENER_START_TIMEOUT_S) -> None:
    """Run ``publish`` (which starts vLLM's listener and waits for it to bind) within ``timeout_s``.

    Raises ``PortTaken`` when the listener found the port in use, ``HandshakeFailure``
    when it died of anything else or never said it was ready.
    """
    finished = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            publish()
        except BaseException as exc:  # handed to the caller below
            raised.append(exc)
        finally:
            finished.set()

    with _listener_errors() as errors:
        threading.Thread(target=run, name="kvconform-publish-handshake", daemon=True).start()
        in_time = finished.wait(timeout_s)
    if errors:
        error = errors[0]
        if PORT_IN_USE in str(error):
            raise PortTaken(f"{host}:{port}: {error}")
        raise HandshakeFailure(f"the producer's handshake listener died while binding {host}:{port}: "
                               f"{type(error).__name__}: {error}")
    if not in_time:
        raise HandshakeFailure(f"waited {timeout_s:g} s for the producer's handshake listener to bind {host}:{port} "
                               f"and report ready (vLLM's set_xfer_handshake_metadata waits for it without a "
                               f"timeout); it never did")
    if raised:
        raise raised[0]
