"""Deliberately broken copies of vLLM's NixlConnector (the pull/READ pair) for the situations of its pull path the
suite reaches beyond the round-trip: a conversation's second turn with bidirectional KV transfer
(conformance/test_pair_turns.py), prefills aborted between chunks (conformance/test_pair_prefill_abort.py), a
consumer whose blocks hold more tokens than the producer's (conformance/test_pair_block_ratio.py) and requests that
wait in a busy consumer's queue longer than the producer's lease (conformance/test_pair_heartbeats.py) and a
notification-only read whose notification cannot be sent (conformance/test_pair_lost_notification.py).

Each class changes only what carries its bug, on vLLM's own scheduler side, in code only its situation runs;
tests/checks/test_nixl_pull_catches.py proves the situation fails it and the unmodified NixlConnector passes.
"""

from __future__ import annotations

import numpy as np
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


class ConversationLengthTurnConnector(NixlConnector):
    """The decoder exports the conversation's length (``request.num_tokens``) as the tokens its kept blocks cover,
    not the tokens it computed: the last sampled token has no KV yet, so the prefill engine's second turn claims one
    token more than the decoder holds and reads a slot nobody wrote."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            finished = scheduler.request_finished

            def conversation_length(request, block_ids):
                delay, params = finished(request, block_ids)
                if params and params.get("do_remote_decode") and params.get("remote_num_tokens"):
                    params["remote_num_tokens"] = request.num_tokens
                return delay, params

            scheduler.request_finished = conversation_length


class SilentRecomputeConnector(NixlConnector):
    """When the prefill engine computes a second turn itself (the decoder holds fewer tokens it lacks than its
    kv_recompute_threshold), it marks the decoder's params handled without the notification-only read: the decoder
    keeps the first turn's blocks until its decoder_kv_blocks_ttl (480 s) runs out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            after_alloc = scheduler.update_state_after_alloc

            def recompute_silently(request, blocks, num_external_tokens):
                params = request.kv_transfer_params
                if num_external_tokens == 0 and params and params.get("do_remote_decode") and params.get(
                        "remote_block_ids"):
                    params["_remote_blocks_processed"] = True  # "nothing to pull, nothing to do"
                after_alloc(request, blocks, num_external_tokens)

            scheduler.update_state_after_alloc = recompute_silently


class ExpiryBlindTurnConnector(NixlConnector):
    """The prefill engine reads a second turn from the decoder without looking at the deadline the decoder exported
    for its blocks (``remote_blocks_expiry_time``), as if turn-two reads could not expire: blocks whose lease ends
    within the safety margin are read, and the read reported received, while the decoder frees them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker._is_turn2_read_expired = lambda meta: False


class AbortedAsLengthConnector(NixlConnector):
    """Treats a prefill that ends aborted as one that ended by length: its blocks are kept for a consumer (a lease
    is set) and params returned, though no consumer will read an aborted prefill; the blocks stay held until the
    lease (120 s in the profile) runs out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            finished = scheduler.request_finished

            def any_finish(request, block_ids):
                from vllm.v1.request import RequestStatus

                params = request.kv_transfer_params or {}
                if request.status != RequestStatus.FINISHED_ABORTED or not params.get("do_remote_decode"):
                    return finished(request, block_ids)
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED  # "finished is finished"
                try:
                    return finished(request, block_ids)
                finally:
                    request.status = RequestStatus.FINISHED_ABORTED

            scheduler.request_finished = any_finish


class UnscaledSubBlocksConnector(NixlConnector):
    """Maps a local block to the remote-sized sub-blocks it is read into as if local block ids counted in remote
    blocks (``block_id + i`` instead of ``block_id * ratio + i``): with a consumer block size twice the producer's,
    reads land in the wrong halves of the wrong blocks."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            def unscaled(block_ids, block_size_ratio):
                if block_ids.size == 0:
                    return np.array([], dtype=np.int64)
                return (block_ids[:, None] + np.arange(block_size_ratio)[None, :]).flatten().astype(np.int64)

            worker.get_mapped_blocks = unscaled


class SilentWaitConnector(NixlConnector):
    """The consumer sends the producer no heartbeat for requests waiting in its queue: once they wait longer than the
    producer's lease, the producer releases their blocks ("Releasing expired KV blocks") before they are read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker._send_heartbeats = lambda metadata: None


class FailsLostNotificationConnector(NixlConnector):
    """Reports a request whose notification to the producer could not be sent as a failed receive (failed_recving),
    as if the lost notification were a lost transfer: for a request that read nothing, vLLM already computes it and
    waits for no transfer of its."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lost_notifications: set[str] = set()
        worker = self.connector_worker
        if worker is not None:
            log_failure = worker._log_failure

            def noting(failure_type, req_id, *rest, **named):
                if failure_type == "notification_failed" and req_id is not None:
                    self._lost_notifications.add(req_id)
                return log_failure(failure_type, req_id, *rest, **named)

            worker._log_failure = noting

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        if self._lost_notifications:
            results.failed_recving = set(results.failed_recving or ()) | self._lost_notifications
            results.finished_recving = set(results.finished_recving or ()) | self._lost_notifications
            self._lost_notifications = set()
        return results


class UnreleasedReadHandleDroppedConnector(NixlConnector):
    """A failed READ whose handle the transport refuses to release is treated as released: the consumer forgets the
    handle (it never retries the release), where vLLM keeps it, and its blocks' failure, until a release succeeds. NIXL
    keeps the forgotten handle's descriptors, and a backend still moving its bytes may write into freed blocks."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            handle_failed = worker._handle_failed_transfer

            def forgetting(request_id, handle, *args, **kwargs):
                handle_failed(request_id, handle, *args, **kwargs)
                return True  # "released": the caller drops the handle whatever the release said

            worker._handle_failed_transfer = forgetting


class InvalidPeerReadsDroppedConnector(NixlConnector):
    """A request whose producer the consumer has marked invalid (its NIXL metadata gone) is set aside to re-handshake
    once the peer is released, but nothing brings it back: it is neither read nor failed, and waits forever."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            read = worker._read_blocks_for_req

            def skipping_invalid_peers(request_id, meta):
                if meta.remote is not None and meta.remote.engine_id in worker._invalid_remote_engines:
                    return  # left for a re-handshake that never comes
                read(request_id, meta)

            worker._read_blocks_for_req = skipping_invalid_peers
