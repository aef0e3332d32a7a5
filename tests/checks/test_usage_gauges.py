"""The scheduler-half check's rule for the CPU cache usage gauges a connector's stats carry
(``usage_gauges_problem`` in conformance/checks/scheduler_half.py): write + read == usage, each a share in [0, 1]."""

from __future__ import annotations

from kvconform.conformance.checks.scheduler_half import (
    READ_USAGE_GAUGE,
    USAGE_GAUGE,
    WRITE_USAGE_GAUGE,
    usage_gauges_problem,
)


def gauges(usage, write, read):
    return {USAGE_GAUGE: usage, WRITE_USAGE_GAUGE: write, READ_USAGE_GAUGE: read, "vllm:kv_offload_store_bytes": 7}


def test_gauges_that_add_up_pass():
    assert usage_gauges_problem(gauges(0.25, 0.125, 0.125)) is None
    assert usage_gauges_problem(gauges(0.0, 0.0, 0.0)) is None
    assert usage_gauges_problem(gauges(0.3, 0.1, 0.3 - 0.1)) is None  # float rounding is no violation


def test_stats_without_the_gauges_are_not_judged():
    assert usage_gauges_problem({}) is None
    assert usage_gauges_problem({"vllm:kv_offload_store_bytes": 7}) is None


def test_a_read_usage_no_load_pins_is_named():
    problem = usage_gauges_problem(gauges(0.25, 0.125, 0.25 * 0.125))
    assert problem is not None
    assert "add up to 0.15625, not to the share pinned by transfers in flight (0.25)" in problem
    assert READ_USAGE_GAUGE in problem


def test_a_gauge_missing_or_out_of_range_is_named():
    assert f"{READ_USAGE_GAUGE} missing or outside [0, 1]" in usage_gauges_problem(
        {USAGE_GAUGE: 0.5, WRITE_USAGE_GAUGE: 0.5})
    assert f"{USAGE_GAUGE} missing or outside [0, 1]" in usage_gauges_problem(gauges(1.5, 0.5, 1.0))
