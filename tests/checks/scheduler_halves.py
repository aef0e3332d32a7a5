"""Bases of the broken copies whose bug sits in a connector's scheduler half: the connector vLLM ships, with its
scheduler half a subclass that carries the bug (``scheduler_class``) and its worker half unmodified."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.decode_bench_connector import (
    DecodeBenchConnector,
    DecodeBenchConnectorScheduler,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector


class DecodeBenchWithScheduler(DecodeBenchConnector):
    """DecodeBenchConnector whose scheduler half is ``scheduler_class``, built as vLLM builds its own."""

    scheduler_class = DecodeBenchConnectorScheduler

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        if role == KVConnectorRole.SCHEDULER:
            self.connector_scheduler = self.scheduler_class(vllm_config, kv_cache_config)


class OffloadingWithScheduler(OffloadingConnector):
    """OffloadingConnector whose scheduler half is ``scheduler_class`` (vLLM's, its class swapped once built)."""

    scheduler_class: type[OffloadingConnectorScheduler] = OffloadingConnectorScheduler

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.connector_scheduler is not None:
            self.connector_scheduler.__class__ = self.scheduler_class
