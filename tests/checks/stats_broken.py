"""vLLM's ExampleConnector counting what its worker saves in transfer stats vLLM's stats loggers cannot use.

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

``UnexportedStatsConnector`` reports the same stats, with ``reduce``, and registers a Prometheus counter of them
(``build_prom_metrics``) whose ``observe`` reads the key under an older name, ``saved_layers`` (the edit): the
regression of a stats key renamed in the stats class and not in its metrics. vLLM's logging summarizes the stats;
a served vLLM's Prometheus logger raises KeyError at every step's. The driver hands every step's returned stats to
vLLM's own ``KVConnectorProm`` too, and fails it in every round-trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats
from vllm.v1.metrics.utils import create_metric_per_engine

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
    STATS: type[SavedLayerStats] = SavedLayerStats

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._saved = self.STATS()

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        self._saved.data[SAVED] += sum(1 for r in self._get_connector_metadata().requests if r.is_store)

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self._saved.is_empty():
            return None
        stats, self._saved = self._saved, self.STATS()
        return stats

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return cls.STATS(data=dict(data or {}))


@dataclass
class ReducedSavedLayerStats(SavedLayerStats):
    """``SavedLayerStats`` with the summary vLLM's stats logger asks for."""

    def reduce(self) -> dict[str, int | float]:
        return {"Saved request layers": self.data[SAVED]}


class SavedLayerPromMetrics(KVConnectorPromMetrics):
    """A Prometheus counter of the request layers a worker saved, read under the key's older name (the edit)."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        counter = self._counter_cls(name="vllm:kvconform_saved_request_layers",
                                    documentation="Request layers the connector's workers saved.",
                                    labelnames=labelnames)
        self.saved = create_metric_per_engine(counter, self.per_engine_labelvalues)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        self.saved[engine_idx].inc(transfer_stats_data["saved_layers"])


class UnexportedStatsConnector(UnreducibleStatsConnector):
    STATS = ReducedSavedLayerStats

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return SavedLayerPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)
