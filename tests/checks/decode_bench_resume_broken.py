"""Deliberately broken copies of vLLM's DecodeBenchConnector whose scheduler half loses track of what it filled.

The resumed-fill check (``conformance/test_resume_fill.py``) must fail both
(tests/checks/test_decode_bench_resume_catches.py): the first only there (the other fill checks never preempt),
the second also where a prefix hit's blocks are filled again (``test_fill_prefix_hit``). Each replaces only the
scheduler-half method that carries its bug; their profiles are DecodeBenchConnector's
(decode_bench_resume_broken.yaml beside this file).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.decode_bench_connector import (
    DecodeBenchConnectorMetadata,
    DecodeBenchConnectorScheduler,
)

from tests.checks.scheduler_halves import DecodeBenchWithScheduler


class _ForgetsPreempted(DecodeBenchConnectorScheduler):
    def build_connector_meta(self, scheduler_output):
        # "a preempted request's blocks were freed, so its fill is gone: fill it again when it resumes"
        for req_id in scheduler_output.preempted_req_ids or ():
            self._filled_requests.discard(req_id)
        return super().build_connector_meta(scheduler_output)


class RefillOnResumeConnector(DecodeBenchWithScheduler):
    """Forgets, when vLLM preempts a request, that it filled it: the resumed request is claimed and filled again
    as a new one, every token but the last, so the fill lands over the slots of the tokens it generated."""

    scheduler_class = _ForgetsPreempted


class _PendingFillsKept(DecodeBenchConnectorScheduler):
    def build_connector_meta(self, scheduler_output):
        return DecodeBenchConnectorMetadata(reqs_to_fill=self._pending_fills.copy())  # never cleared


class RefillEveryStepConnector(DecodeBenchWithScheduler):
    """Never clears its pending fills after building the step's metadata: every later step fills each request's
    blocks again, over the KV its decode steps computed."""

    scheduler_class = _PendingFillsKept
