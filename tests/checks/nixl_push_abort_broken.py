"""Deliberately broken copies of vLLM's NixlPushConnector for the push situations in which one side drops a request,
one bug each.

tests/checks/test_nixl_push_aborts_catches.py proves that conformance/test_pair_push.py's situation made for each
copy fails it, and that the other abort situation and the push round-trip pass it: each edit acts only where its
situation goes (a consumer request aborted before it was scheduled that came before the producer's prefill; a
producer's prefill aborted with a registration waiting for it). Each class changes only what carries its bug, on top
of vLLM's own scheduler and worker.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPushConnector
from vllm.v1.request import RequestStatus


class UnseededAbortNixlPushConnector(NixlPushConnector):
    """The consumer queues the empty receive of a request aborted before it was scheduled (vLLM's branch of
    request_finished for it) without seeding its params' remote_block_ids, as if every request carried the producer's
    finished params: one the router sent before the producer's prefill carries only the producer's address, so
    building the next step's metadata raises KeyError."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            finished = scheduler.request_finished

            def unseeded(request, block_ids):
                params = request.kv_transfer_params or {}
                unscheduled = bool(params.get("do_remote_prefill")) and "remote_block_ids" not in params
                answer = finished(request, block_ids)
                if unscheduled:
                    del params["remote_block_ids"]  # vLLM seeds it "so add_new_req_to_recv won't KeyError"
                return answer

            scheduler.request_finished = unseeded


class AbortedChunksWrittenNixlPushConnector(NixlPushConnector):
    """The producer flushes an aborted prefill's computed chunks to the consumer registered for it, as if the prefill
    had finished: its scheduler side hands the worker the blocks the request held when it was aborted (vLLM frees them
    at once all the same), and its worker WRITEs them into the first of the consumer's registered blocks. The consumer
    then reports the request received over KV of which only the first chunk was computed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler, worker = self.connector_scheduler, self.connector_worker
        if scheduler is not None:
            finished = scheduler.request_finished

            def flushing(request, block_ids):
                answer = finished(request, block_ids)
                params = request.kv_transfer_params or {}
                if (request.status == RequestStatus.FINISHED_ABORTED and params.get("do_remote_decode")
                        and any(block_ids)):
                    blocks = scheduler.get_exchange_clipped_blocks(block_ids)
                    scheduler._newly_finished_push_blocks[request.request_id] = blocks
                return answer

            scheduler.request_finished = flushing
        if worker is not None:
            start = worker._do_start_push_kv

            def partial(request_id, local_block_ids, registration):
                local = worker._as_grouped_block_ids(local_block_ids)
                remote = worker._as_grouped_block_ids(registration["local_block_ids"])
                leading = [list(group)[:len(mine)] for group, mine in zip(remote, local, strict=True)]
                start(request_id, local_block_ids, {**registration, "local_block_ids": leading})

            worker._do_start_push_kv = partial
