"""Deliberately broken copies of vLLM's NixlConnector (the pull/READ pair) and NixlPushConnector, one bug class each.

The pair checks must fail every one of them and pass the unmodified NixlConnector;
tests/checks/test_pair_faults_catches.py proves it (test_shutdown_catches.py for the
shutdown ones, test_pair_routing_catches.py for the routed ones, test_nixl_situations_catches.py
for the push round-trip, the consumers that read nothing and the failed handshakes). Each class
changes only what carries its bug, on top of vLLM's own worker.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector, NixlPushConnector


class SwallowedReadErrorConnector(NixlConnector):
    """Reports a request received after its READ failed: vLLM's worker lists the request in
    ``failed_recving`` and its blocks as load errors; this copy drops both, so the request
    looks received and vLLM computes on KV that never arrived."""

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        results.failed_recving = set()  # the failed requests stay in finished_recving
        return results

    def get_block_ids_with_load_errors(self) -> set[int]:
        super().get_block_ids_with_load_errors()  # drained and dropped
        return set()


class DoneOnPostingConnector(NixlConnector):
    """Reports a read received in the step it is started, before the transfer completes
    (the real completion, when it comes, is not reported again)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reported_early: set[str] = set()
        self._started: set[str] = set()

    def start_load_kv(self, forward_context, **kwargs) -> None:
        super().start_load_kv(forward_context, **kwargs)
        self._started |= {rid for rid, meta in self._get_connector_metadata().reqs_to_recv.items()
                          if any(meta.local_block_ids)}

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        done = set(results.finished_recving or ()) - self._reported_early  # real completions, unless said already
        early, self._started = self._started - self._reported_early, set()
        self._reported_early |= early
        results.finished_recving = done | early
        return results


class SendsReportedReceivedConnector(NixlConnector):
    """Files the sends it finished (the consumer's reads of its prefills) under ``finished_recving`` with the loads
    it received, as a worker that pools every completed transfer into one set does. vLLM's scheduler frees a finished
    request's blocks on either report, so the producer releases its pages on time and drains, and the pair's own
    checks pass; the request never claimed a load (engine/transfer_reports.py's ``unclaimed_receives``)."""

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        results.finished_recving = set(results.finished_recving or ()) | set(results.finished_sending or ())
        results.finished_sending = set()
        return results


class _NoReadNotification:
    """A transport that posts READs without the completion notification the producer waits for."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def make_prepped_xfer(self, operation, *args, **kwargs):
        if operation == "READ":
            kwargs["notif_msg"] = b""
        return self._real.make_prepped_xfer(operation, *args, **kwargs)


class ExpiryFinishConnector(NixlConnector):
    """The consumer never tells the producer it has read the pages, so the producer releases them
    only when their lease expires ("Releasing expired KV blocks ... retrieved by 0 remote
    worker(s)"). Its profile's lease (3 s) is shorter than the harness's drain bound, so the pair
    still completes, only slower: the check must see the expiry itself."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.connector_worker is not None:
            self.connector_worker.nixl_wrapper = _NoReadNotification(self.connector_worker.nixl_wrapper)


class ListenerLeftRunningConnector(NixlConnector):
    """The scheduler side's ``shutdown()`` forgets its handshake listener: the thread serves on, forever."""

    def shutdown(self):
        if self.connector_worker is not None:
            self.connector_worker.shutdown()


class ShutdownRaisesConnector(NixlConnector):
    """The scheduler side's ``shutdown()`` stops its listener, then raises."""

    def shutdown(self):
        super().shutdown()
        if self.connector_scheduler is not None:
            raise RuntimeError("ShutdownRaisesConnector: the scheduler side failed to shut down")


class ShutdownHangsConnector(NixlConnector):
    """The scheduler side's ``shutdown()`` never returns (it waits on an event nothing sets)."""

    def shutdown(self):
        super().shutdown()
        if self.connector_scheduler is not None:
            threading.Event().wait()


class ShutdownCrashesConnector(NixlConnector):
    """The scheduler side's ``shutdown()`` stops its listener, then kills the process (a native crash)."""

    def shutdown(self):
        super().shutdown()
        if self.connector_scheduler is not None:
            time.sleep(0.2)  # past the test's own teardown: the crash lands while its result is held
            os.kill(os.getpid(), signal.SIGSEGV)


# ---- pairs behind a router (conformance/test_pair_routing.py) ------------------------------------------------


class OwnIdNotifyConnector(NixlConnector):
    """Tells the producer it is done under the consumer's own request id, not the producer's (``remote_request_id``):
    harmless while a router keeps the ids equal; behind one that renames them, the producer never recognises the
    notification and holds its pages until the lease runs out."""

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if params and params.get("remote_request_id"):
            params["remote_request_id"] = request.request_id
        super().update_state_after_alloc(request, blocks, num_external_tokens)


class FrontTrimConnector(NixlConnector):
    """On a partial hit in the consumer's prefix cache, pairs the consumer's blocks with the producer's *first*
    blocks instead of its last (vLLM's worker end-trims them, ``_apply_prefix_caching``): the tokens the consumer
    already holds are read again, into the blocks meant for the rest of the prompt."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            end_trimmed = worker._apply_prefix_caching

            def front_trimmed(decode_block_ids, prefill_block_ids, *rest, **named):
                decode, _ = end_trimmed(decode_block_ids, prefill_block_ids, *rest, **named)
                return decode, [list(p[:len(d)]) for d, p in zip(decode, prefill_block_ids, strict=True)]

            worker._apply_prefix_caching = front_trimmed


class LengthOnlyFinishConnector(NixlConnector):
    """Hands the KV of a prefill over only when it ended by length (FINISHED_LENGTH_CAPPED), as NIXL did before it
    took FINISHED_STOPPED too: a prefill whose one token is a stop token is treated as aborted, and the consumer
    never gets its params."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:  # vLLM's scheduler reaches it through request_finished_all_groups too
            any_status = scheduler.request_finished

            def length_only(request, block_ids):
                from vllm.v1.request import RequestStatus

                if request.status == RequestStatus.FINISHED_STOPPED and (request.kv_transfer_params or {}).get(
                        "do_remote_decode"):
                    scheduler._reqs_not_processed.add(request.request_id)
                    return False, None
                return any_status(request, block_ids)

            scheduler.request_finished = length_only


# ---- situations the suite did not reach before (test_nixl_situations_catches.py) -----------------------------------
# Each edit sits in code no check ran before its situation existed (kvconform report --uncovered NixlConnector listed
# it): the push WRITE, the notification-only branches, the handshake's failure callback.

SHIFTED = "_kvconform_shifted"  # marks a registration already shifted (a deferred WRITE passes it through again)


class WrongBlockPushConnector(NixlPushConnector):
    """The push producer WRITEs each request's KV one block off in the consumer's block list (its i-th block into
    the consumer's (i+1)-th, the last into the first): an off-by-one in pairing the registration's block ids with
    its own, which only a push round-trip's bytes show."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            start_push = worker._do_start_push_kv

            def shifted(request_id, local_block_ids, registration_data):
                if not registration_data.get(SHIFTED):
                    groups = registration_data["local_block_ids"]
                    groups = [groups] if groups and not isinstance(groups[0], (list, tuple)) else groups
                    registration_data = {**registration_data, SHIFTED: True,
                                          "local_block_ids": [list(g[1:]) + list(g[:1]) for g in groups]}
                return start_push(request_id, local_block_ids, registration_data)

            worker._do_start_push_kv = shifted


class SilentAbortConnector(NixlConnector):
    """A consumer request aborted before it was scheduled is dropped without a word to the producer (vLLM's
    scheduler registers an empty read for it, whose notification frees the producer's blocks): the producer holds
    the prefill's blocks until its lease expires. Its profile's lease (3 s) is below the pair's drain bound."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            finished = scheduler.request_finished

            def silent(request, block_ids):
                params = request.kv_transfer_params
                if params and params.get("do_remote_prefill"):  # never scheduled: nothing read, nobody told
                    scheduler._stop_heartbeat(request.request_id)  # its lease is no longer extended
                    params["do_remote_prefill"] = False
                    return False, None
                return finished(request, block_ids)

            scheduler.request_finished = silent


class ZeroLoadNoNotifyConnector(NixlConnector):
    """A consumer request that loads no external token (vLLM set the claim aside: a request that reads no prefix
    cache) is marked handled without registering the notification-only read, as NIXL did before it notified on a
    full local hit: the producer holds the prefill's blocks until its lease expires (3 s in its profile)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scheduler = self.connector_scheduler
        if scheduler is not None:
            after_alloc = scheduler.update_state_after_alloc

            def no_notify(request, blocks, num_external_tokens):
                params = request.kv_transfer_params
                if num_external_tokens == 0 and params and params.get("do_remote_prefill"):
                    params["do_remote_prefill"] = False  # "nothing to load, nothing to do"
                    return
                after_alloc(request, blocks, num_external_tokens)

            scheduler.update_state_after_alloc = no_notify


class _LoggedOnly(queue.Queue):
    """The worker's queue of requests whose handshake failed, which forgets them: the failure is logged (vLLM's
    callback logs it before it queues the request) and nothing else happens."""

    def put(self, item, block=True, timeout=None) -> None:
        pass


class SwallowedHandshakeFailureConnector(NixlConnector):
    """When the consumer's handshake with the producer fails, the failure is logged and dropped: the request is
    never reported failed (failed_recving, load-error blocks) and waits for remote KV forever."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worker = self.connector_worker
        if worker is not None:
            worker._failed_recv_reqs = _LoggedOnly()
