"""vLLM's ExampleConnector counting what its worker saves in transfer stats vLLM's stats logger cannot summarize.

``UnreducibleStatsConnector`` is vLLM 0.32's ExampleConnector, unchanged but for its worker's transfer stats: each
step its ``get_kv_connector_stats`` reports how many request layers it saved, in ``SavedLayerStats``, a
``KVConnectorStats`` that vLLM's scheduler can carry (``aggregate``, ``is_empty``, ``to_dict``) and vLLM's stats
logger can rebuild (``build_kv_connector_stats``), but that leaves ``reduce`` to the base class, which raises
``NotImplementedError``: the regression of a connector author who wrote every method vLLM's scheduler calls but not
the one its stats logger calls at the end of each log interval. A served vLLM's ``KVConnectorLogging.log`` raises at
every interval, and the transfer metrics are never logged. Its loads and stores are ExampleConnector's, so the
round-trip's bytes compare equal; before the model-runner stand-in reported the worker's stats each step, as vLLM's
runner does, the stats never reached vLLM's scheduler outside the wrapper check. Now the scheduler driver hands
every step's returned stats to vLLM's own stats logger (conformance/engine/stats_logged.py) and fails it in every
round-trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

SAVED = "saved_request_layers"


@dataclass
class SavedLayerStats(KVConnectorStats):
    """Request layers a worker saved, summed across steps and workers; no ``reduce`` (the edit)."""

    def __post_init__(self) -> None:
        self.data.setdefault(SAVED, 0)

    def reset(self) -> None:
        self.data = {SAVED: 0}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        self.data[SAVED] += other.data.get(SAVED, 0)
        return self

    def is_empty(self) -> bool:
        return self.data[SAVED] == 0


class UnreducibleStatsConnector(ExampleConnector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._saved = SavedLayerStats()

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        self._saved.data[SAVED] += sum(1 for r in self._get_connector_metadata().requests if r.is_store)

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self._saved.is_empty():
            return None
        stats, self._saved = self._saved, SavedLayerStats()
        return stats

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return SavedLayerStats(data=dict(data or {}))
