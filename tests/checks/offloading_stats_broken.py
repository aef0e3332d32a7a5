"""vLLM's OffloadingConnector whose CPU offloading manager reports a wrong read-usage gauge.

``ReadUsageOffloadingConnector`` is vLLM 0.32's OffloadingConnector (its scheduler half built by vLLM, through
tests/checks/scheduler_halves.py) whose CPU offloading manager's ``get_stats`` computes the CPU cache's read usage as
``usage * write_usage`` instead of ``usage - write_usage``: the mutant ``vllm/v1/kv_offload/cpu/manager.py:472:
core/ReplaceBinaryOperator_Sub_Mul`` of the mutation floor, written by hand. The scheduler-half check holds the
stats vLLM's scheduler takes every step to write + read == usage (conformance/checks/scheduler_half.py); the
profile, offloading_stats_broken.yaml, gives it OffloadingConnector's settings.
"""

from __future__ import annotations

from vllm.v1.kv_offload.cpu.common import CPUOffloadingMetrics
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

from tests.checks.scheduler_halves import OffloadingWithScheduler


class _ReadUsageManager(CPUOffloadingManager):
    def get_stats(self):
        """vLLM 0.32's, with the read usage a product of the usage and the write usage (the edit)."""
        stats = super().get_stats()
        values = stats.reduce()
        usage = values[CPUOffloadingMetrics.CPU_CACHE_USAGE_PERC]
        write_usage = values[CPUOffloadingMetrics.CPU_CACHE_WRITE_USAGE_PERC]
        stats.set_gauge(CPUOffloadingMetrics.CPU_CACHE_READ_USAGE_PERC, max(usage * write_usage, 0.0))
        return stats


class ReadUsageOffloadingConnector(OffloadingWithScheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.connector_scheduler is not None:
            assert type(self.connector_scheduler.manager) is CPUOffloadingManager
            self.connector_scheduler.manager.__class__ = _ReadUsageManager
