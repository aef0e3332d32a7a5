"""Stand-ins for a pair connector's transport: where kvconform finds it, and the faults it acts out.

vLLM's NIXL worker posts each transfer on its NIXL agent and polls it. The fault checks put a stand-in in the agent's
place after the handshake, found through ``TRANSPORT_PATHS`` (a new pair connector adds its row there and gets the
same checks from its profile); the stand-in forwards everything and misbehaves as its ``PairFault`` says: posting
raises, the transfer ends in the error state with half its blocks written, or it completes some polls late. Which
side posts the transfers (``POSTING_ROLE``) depends on the pair's transfer mode: a pull consumer READs the
producer's pages, a push producer WRITEs the consumer's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from ..engine.rig import EngineStandIn
    from .pair_core import LivePair

_Wrapper = TypeVar("_Wrapper")  # what wrap_transport puts in a transport's place

# Where a pair connector's worker keeps the transport it posts reads on (attribute path from the connector).
TRANSPORT_PATHS = (
    ("connector_worker", "nixl_wrapper"),  # NixlConnector, NixlPullConnector, NixlPushConnector (vLLM 0.32)
)


# Which side of a pair posts the transfers, by its NIXL worker's transfer mode (``_TRANSFER_MODE``): a pull consumer
# READs the producer's pages, a push producer WRITEs the consumer's. The read faults act on a consumer's READs.
POSTING_ROLE = {"pull": "consumer", "push": "producer"}
READ_FAULT_MODES = ("pull",)


class NoTransportHook(Exception):
    """kvconform knows no way to reach this pair connector's transport: no fault can be injected."""


class InjectedTransportError(RuntimeError):
    """What a transport raises when a read cannot be posted (the producer's agent is gone)."""


@dataclass(frozen=True)
class PairFault:
    name: str
    doc: str  # what happened, in the words of a failure message
    post_error: bool = False  # posting the read raises
    ends_in_error: bool = False  # the read runs, then ends in "ERR" having landed only the first half of the blocks
    delay_polls: int = 0  # the read is really posted only after this many polls of its state


class FaultyTransport:
    """Stands in for the connector's transport: forwards everything, misbehaves as its fault says."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):  # real: the connector's NIXL agent
        self._real = real
        self._fault = fault
        self._side = side
        self.posted = 0
        self.failed = 0
        self._deferred: dict[int, list[Any]] = {}  # id(handle) -> [handle, polls left, args, kwargs]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def transfer(self, handle: object, *args: Any, **kwargs: Any) -> str:
        self.posted += 1
        if self._fault.post_error:
            self.failed += 1
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        if self._fault.delay_polls:
            self._deferred[id(handle)] = [handle, self._fault.delay_polls, args, kwargs]
            return "PROC"
        state: str = self._real.transfer(handle, *args, **kwargs)
        return state

    def check_xfer_state(self, handle: object) -> str:
        deferred = self._deferred.get(id(handle))
        if deferred is not None:
            deferred[1] -= 1
            if deferred[1] > 0:
                return "PROC"
            del self._deferred[id(handle)]
            posted: str = self._real.transfer(handle, *deferred[2], **deferred[3])
            return posted
        state: str = self._real.check_xfer_state(handle)
        if self._fault.ends_in_error and state != "PROC":
            self.failed += 1
            lose_second_half(self._side)
            return "ERR"
        return state


def lose_second_half(side: EngineStandIn) -> None:
    """Zero the second half of the blocks of every request still waiting for remote KV: what a read that
    stopped midway leaves (the consumer's cache starts zeroed, so those blocks never changed)."""
    RequestStatus = vllm_api.find("RequestStatus")

    scheduler = side.scheduler.scheduler
    for request_id, request in scheduler.requests.items():
        if request.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
            continue
        blocks = scheduler.kv_cache_manager.get_block_ids(request_id)[0]
        lost = torch.tensor(blocks[len(blocks) // 2:], dtype=torch.long)
        for view in side.caches.values():
            view[lost.to(view.device)] = 0


def transfer_mode(side: EngineStandIn) -> str:
    """The side's NIXL transfer mode (``POSTING_ROLE``'s keys); "pull" for a pair connector that names none."""
    worker = getattr(side.runner.connector, TRANSPORT_PATHS[0][0], None)
    return str(getattr(worker, "_TRANSFER_MODE", "pull"))


def require_read_faults(pair: LivePair) -> None:
    """``NoTransportHook`` where the pair's consumer posts no READ for the faults to act on."""
    mode = transfer_mode(pair.consumer)
    if mode not in READ_FAULT_MODES:
        raise NoTransportHook(f"{pair.rig.connector.name} transfers in {mode} mode: its {POSTING_ROLE.get(mode)} "
                              f"posts the transfers, and kvconform's transfer faults act on a consumer's READs "
                              f"(conformance/checks/pair_transport.py's READ_FAULT_MODES); the handshake faults apply")


def wrap_transport(side: EngineStandIn, wrap: Callable[[Any], _Wrapper], unless: str,
                   error: type[Exception] = NoTransportHook) -> _Wrapper:
    """Put ``wrap(transport)`` where the side's worker connector keeps its transport (``TRANSPORT_PATHS``); where it
    keeps none there, raise ``error`` saying so and what then cannot be done (``unless``)."""
    connector = side.runner.connector
    for path in TRANSPORT_PATHS:
        owner = connector
        for attribute in path[:-1]:
            owner = getattr(owner, attribute, None)
        if owner is not None and hasattr(owner, path[-1]):
            wrapper = wrap(getattr(owner, path[-1]))
            setattr(owner, path[-1], wrapper)
            return wrapper
    raise error(f"{type(connector).__name__}: kvconform finds its transport under none of "
                f"{['.'.join(p) for p in TRANSPORT_PATHS]} (conformance/checks/pair_transport.py), so {unless}")


def install_transport(side: EngineStandIn, fault: PairFault, waiting: EngineStandIn | None = None,
                      transport: type[FaultyTransport] = FaultyTransport) -> FaultyTransport:
    """Put a ``FaultyTransport`` (or the ``transport`` subclass given) where the side's worker connector keeps its
    transport (``waiting``: the side whose requests wait for the transfers, when another side posts them)."""
    return wrap_transport(side, lambda real: transport(real, fault, waiting or side),
                          "no transfer fault can be injected")


class UnreleasableTransport(FaultyTransport):
    """A ``FaultyTransport`` whose handles cannot be released at the first attempt either (``release_xfer_handle``
    raises once per handle: the backend may still be moving the failed transfer's bytes); a later attempt succeeds."""

    def __init__(self, real: Any, fault: PairFault, side: EngineStandIn):
        super().__init__(real, fault, side)
        self._refused: set[int] = set()  # id() of the handles whose first release raised

    def release_xfer_handle(self, handle: Any, *args: Any, **kwargs: Any) -> Any:
        if id(handle) not in self._refused:
            self._refused.add(id(handle))
            raise InjectedTransportError(f"kvconform: {self._fault.doc}")
        return self._real.release_xfer_handle(handle, *args, **kwargs)
