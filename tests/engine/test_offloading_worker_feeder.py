"""engine/offloading_worker_feeder.py's feeder alone: it runs OffloadingConnector's jobs as the worker half does.

Fed vLLM's own OffloadingConnectorMetadata (TransferJob, GPULoadStoreSpec, CPULoadStoreSpec) in vLLM's empty
SchedulerOutput: a store starts a step after it is asked for and is reported once, by job id, after its delay;
a flushed store is done before the forward; a load is reported by job id and by request id in
finished_recving; delays can finish stores out of order; a metadata of another shape is refused in words.
"""

from __future__ import annotations

import pytest

from kvconform.conformance.engine.offloading_worker_feeder import (
    TIMINGS,
    FeederMismatch,
    OffloadingWorkerFeeder,
    Timing,
)


def _job(req_id: str, gpu_blocks: list[int], kind: str):
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import TransferJob
    from vllm.v1.kv_offload.base import GPULoadStoreSpec
    from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

    gpu = GPULoadStoreSpec(gpu_blocks, group_sizes=[len(gpu_blocks)], block_indices=[0])
    cpu = CPULoadStoreSpec(list(range(len(gpu_blocks))))
    return TransferJob(req_id, gpu, cpu) if kind == "store" else TransferJob(req_id, cpu, gpu)


def _output(stores: dict | None = None, loads: dict | None = None, flush: set[int] | None = None):
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingConnectorMetadata
    from vllm.v1.core.sched.output import SchedulerOutput

    output = SchedulerOutput.make_empty()
    output.kv_connector_metadata = OffloadingConnectorMetadata(load_jobs=loads or {}, store_jobs=stores or {},
                                                               jobs_to_flush=flush)
    return output


def _completed(kv_output) -> set[int]:
    meta = kv_output.kv_connector_worker_meta
    return set(meta.completed_jobs) if meta is not None else set()


@pytest.mark.parametrize(("timing", "reported_at"), [("immediate", 1), ("next-step", 2)])
def test_store_starts_next_step_and_is_reported_once_after_its_delay(timing, reported_at):
    feeder = OffloadingWorkerFeeder(TIMINGS[timing])
    outputs = [feeder.step(_output(stores={0: _job("r", [3, 4], "store")}))]
    outputs += [feeder.step(_output()) for _ in range(4)]
    assert feeder.transfers[0].submitted == 1  # prepare_store_kv defers it to the next step's start
    assert [step for step, out in enumerate(outputs) if 0 in _completed(out)] == [reported_at]
    assert all(not out.finished_sending and not out.finished_recving for out in outputs)
    assert feeder.idle()


def test_flushed_store_is_done_before_the_forward():
    seen = []
    feeder = OffloadingWorkerFeeder(Timing("slow", (5,), (5,), "slow"),
                                    forward=lambda _out: seen.append(feeder.transfers[0].done))
    out = feeder.step(_output(stores={0: _job("r", [3], "store")}, flush={0}))
    assert seen == [True] and feeder.transfers[0].flushed == 0
    assert _completed(out) == {0}


def test_store_in_flight_is_not_done_during_the_forward():
    seen = []
    feeder = OffloadingWorkerFeeder(TIMINGS["immediate"], forward=lambda _out: seen.append(feeder.transfers[0].done))
    feeder.step(_output(stores={0: _job("r", [3], "store")}))
    feeder.step(_output())
    assert seen == [False, False]  # submitted at step 1, reported only after that step's forward
    assert feeder.transfers[0].reported == 1


def test_load_is_reported_by_job_and_request():
    feeder = OffloadingWorkerFeeder(Timing("one", (0,), (1,), "loads one step"))
    first = feeder.step(_output(loads={7: _job("r", [5, 6], "load")}))
    second = feeder.step(_output())
    assert not _completed(first) and not first.finished_recving
    assert _completed(second) == {7} and second.finished_recving == {"r"}


def test_delays_finish_stores_out_of_order():
    feeder = OffloadingWorkerFeeder(Timing("ooo", (2, 0), (0,), "out of order"))
    reports = []
    feeder.step(_output(stores={0: _job("a", [1], "store"), 1: _job("b", [2], "store")}))
    for _ in range(4):
        reports.append(sorted(_completed(feeder.step(_output()))))
    assert reports == [[1], [], [0], []]


def test_other_metadata_is_refused_in_words():
    from vllm.v1.core.sched.output import SchedulerOutput

    output = SchedulerOutput.make_empty()
    output.kv_connector_metadata = object()
    with pytest.raises(FeederMismatch, match="plays OffloadingConnector's worker half.*sent a object"):
        OffloadingWorkerFeeder(TIMINGS["immediate"]).step(output)
