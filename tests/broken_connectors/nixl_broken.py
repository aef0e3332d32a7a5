"""Deliberately broken copies of vLLM's NixlConnector (the pull/READ pair), one bug class each.

The pair checks must fail every one of them and pass the unmodified NixlConnector;
tests/selftest/test_pair_faults_catches.py proves it (test_shutdown_catches.py for the
shutdown ones). Each class changes only what carries its bug, on top of vLLM's own worker.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector


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
    worker(s)"). With a lease shorter than the harness's drain bound (its profile: 3 s) the pair
    used to pass, only slower."""

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
