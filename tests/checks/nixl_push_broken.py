"""Deliberately broken copies of vLLM's NixlPushConnector for the push situations beyond the round-trip, one bug each.

tests/checks/test_nixl_push_catches.py proves that conformance/test_pair_push.py fails each of them and that the
push round-trip passes each: every edit sits in code only its situation runs (``kvconform report --uncovered
NixlPushConnector`` listed it as never run by the suite before the situation existed). Each class changes only what
carries its bug, on top of vLLM's own worker.
"""

from __future__ import annotations

import time

import msgspec
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPushConnector
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata import PUSH_REG_NOTIF_PREFIX


class EarlyRegistrationLostPushConnector(NixlPushConnector):
    """The producer matches a consumer's registration only when it arrives after the request finished: one that came
    first is kept but never looked up when the request's blocks come in (its finished-blocks path skips the waiting
    registrations), so nothing is written and both sides hold the request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker._pop_matching_registration = lambda request_id: None


class ExactIdPushConnector(NixlPushConnector):
    """The producer pairs a registration with a finished request by exact request id, as if both engines used the
    router's id: each engine's API server suffixes it with its own 8 hex digits, so no registration ever matches."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            registrations, finished = worker._pending_d_registrations, worker._push_finished_blocks

            def exact_registration(request_id):
                return registrations.pop(request_id, None)

            def exact_finished(request_id):
                blocks = finished.pop(request_id, None)
                return None if blocks is None else (request_id, blocks)

            worker._pop_matching_registration = exact_registration
            worker._pop_matching_finished_blocks = exact_finished


class FailedWriteNotifiedPushConnector(NixlPushConnector):
    """A WRITE the producer could not post is still announced to the consumer: the producer sends the completion
    notification the WRITE would have carried, so the consumer reports the request received over blocks nothing
    wrote."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            post = worker._xfer_blocks

            def announced(read_spec, dst_engine_id, request_id, remote_request_id, *rest, **named):
                handle = post(read_spec, dst_engine_id, request_id, remote_request_id, *rest, **named)
                if handle is None and request_id in worker._send_failures:
                    for agent in dict(worker._remote_agents.get(dst_engine_id) or {}).values():
                        worker.nixl_wrapper.send_notif(agent, notif_msg=f"{remote_request_id}:{worker.world_size}"
                                                       .encode())
                return handle

            worker._xfer_blocks = announced


class InFlightHandlesDroppedPushConnector(NixlPushConnector):
    """The producer's worker shutdown forgets the WRITEs still in flight: it drops their handles without releasing
    them (NIXL keeps each handle, and a transfer that is still running may write into the consumer's blocks)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            shutdown = worker.shutdown

            def dropping_shutdown():
                with worker._sending_transfers_lock:
                    worker._sending_transfers.clear()
                shutdown()

            worker.shutdown = dropping_shutdown


class BatchLostOnBadRegistrationPushConnector(NixlPushConnector):
    """The producer's registration handler lets a malformed registration's error escape: the writer thread's
    catch-all logs it and goes on, but the rest of that poll's notifications, the consumer's real registration among
    them, are lost, so nothing is written for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            handle = worker._handle_push_reg_notif

            def strict(notif):
                registration = msgspec.msgpack.decode(notif[len(PUSH_REG_NOTIF_PREFIX):])  # raises if undecodable
                registration["request_id"]  # raises KeyError where it has none
                handle(notif)

            worker._handle_push_reg_notif = strict


class SlowSubmissionAbandonedPushConnector(NixlPushConnector):
    """The producer takes a WRITE whose submission took longer than vLLM's 200 ms slow-submission mark for a stuck
    backend: it gives the WRITE up as failed (records a send failure, releases its handle) where vLLM only warns. The
    backend had accepted the WRITE, so nothing completes the request: the consumer never hears of it, and the producer
    holds its pages until the lease runs out."""

    SLOW_MS = 200.0  # vLLM's push worker warns of a slow NIXL submission above this (_do_start_push_kv)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            post = worker._xfer_blocks

            def abandoning(*args, **named):
                start = time.perf_counter()
                handle = post(*args, **named)
                if handle is not None and (time.perf_counter() - start) * 1000.0 > self.SLOW_MS:
                    request_id = named["request_id"]
                    with worker._sending_transfers_lock:
                        worker._send_failures.add(request_id)
                    worker._handle_failed_transfer(request_id, handle)
                    return None
                return handle

            worker._xfer_blocks = abandoning
