"""A child for wrappers that reports to vLLM: ExampleConnector with transfer stats, worker metadata, a metric, KV
events and failed loads.

A wrapper such as MultiConnector carries its children's reports to vLLM: each worker step's transfer stats
(the model runner's ``get_kv_connector_stats``), which the scheduler merges with the scheduler side's and the
stats loggers rebuild by connector name (``build_kv_connector_stats``) and export (``build_prom_metrics``); the
worker's metadata for its scheduler side (``build_connector_worker_meta``, handed back through
``update_connector_output``); a finished request's ``kv_transfer_params``; and how many workers report each
finished transfer. No in-tree connector that runs on CPU reports stats without a live transfer, nor any worker
metadata, so this is ExampleConnector reporting what it did:

* per worker step, the layers it saved (stats, and a Prometheus counter) and the tokens it stored (worker
  metadata, which its scheduler side keeps);
* per scheduler step, the lookups it answered (stats); the first lookup of each request it answers "not yet"
  (``None``: a lookup still in flight, as connectors with asynchronous lookups answer; vLLM asks again);
* for each finished request, the folder it stores in, under a key of its own (so that children's params merge);
* where its extra config says ``finished_count``, that count (vLLM's aggregator waits for that many reports);
* per request it stores, a ``BlockStored`` KV event per stored block (vLLM's block hash of it, its parent's, its
  tokens; medium ``STORAGE``), produced when the step's metadata is built (its worker saves within that step) and
  handed over by ``take_events``, as vLLM's Scheduler takes them after the step;
* with the ``kv_producer`` role (its own ``kv_role`` in the wrapper's list) it stores but never claims a hit, as a
  P/D producer beside a cache tier: the wrapper loads from the next child;
* where its extra config says ``fail_loads``, its worker reports the last block of each load as failed
  (``get_block_ids_with_load_errors``, in the pass that loaded it, as base.py asks of a synchronous load): a read
  that came back unusable, which vLLM's scheduler must recompute or fail by its ``kv_load_failure_policy``.

Importing the module registers it with vLLM's connector factory by its name, as a third-party connector
package registers its own, so vLLM's loggers can rebuild its stats from their serialized form. Its profile is
MultiConnector's ``reporting`` variant (``connectors.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorWorkerMetadata
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector, align_to_block_size
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats

from ..vllm_install import api as vllm_api

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_events import KVCacheEvent
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

NAME = "ReportingExampleConnector"
COUNTS = ("saved_layers", "lookups")  # what the stats count: worker side, scheduler side
METRIC = "kvconform:reporting_saved_layers"
MEDIUM = "STORAGE"  # vLLM's name (kv_events.MEDIUM_STORAGE) for where ExampleConnector keeps blocks: files


@dataclass
class ReportingStats(KVConnectorStats):
    """Counts of layers saved and lookups answered; aggregated by summing."""

    def __post_init__(self) -> None:
        for count in COUNTS:
            self.data.setdefault(count, 0)

    def reset(self) -> None:
        self.data = dict.fromkeys(COUNTS, 0)

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for count in COUNTS:
            self.data[count] = self.data.get(count, 0) + other.data.get(count, 0)
        return self

    def reduce(self) -> dict[str, int | float]:
        return {count: self.data.get(count, 0) for count in COUNTS}

    def is_empty(self) -> bool:
        return not any(self.data.get(count, 0) for count in COUNTS)


@dataclass
class SavedTokens(KVConnectorWorkerMetadata):
    """The tokens a worker stored in one step; workers' reports are merged by summing."""

    tokens: int

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        assert isinstance(other, SavedTokens), f"{NAME}'s worker metadata merged with {type(other).__name__}"
        return SavedTokens(self.tokens + other.tokens)


class ReportingPromMetrics(KVConnectorPromMetrics):
    """One counter, per engine: the layers saved."""

    def __init__(self, vllm_config: VllmConfig, metric_types: dict[type, type], labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        counter = self._counter_cls(name=METRIC, documentation="Layers saved by kvconform's reporting child",
                                    labelnames=labelnames)
        self.saved = {engine: counter.labels(*values) for engine, values in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        self.saved[engine_idx].inc(transfer_stats_data.get("saved_layers", 0))


class ReportingExampleConnector(ExampleConnector):
    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._step = ReportingStats()
        self._finished_count = self._kv_transfer_config.get_from_extra_config("finished_count", None)
        self._asked: set[str] = set()  # requests whose first lookup it answered "not yet"
        self.saved_reported: list[int] = []  # scheduler side: the tokens its worker said it stored, per report
        self._admitted: dict[str, Request] = {}  # scheduler side: requests allocated, for their block hashes
        self._events: list[KVCacheEvent] = []  # scheduler side: events not yet taken
        self._fail_loads = bool(self._kv_transfer_config.get_from_extra_config("fail_loads", False))
        self._load_errors: set[int] = set()  # worker side: blocks of this pass's loads reported failed

    # --- worker side ---
    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        stores = [r for r in self._get_connector_metadata().requests if r.is_store]  # type: ignore[attr-defined]
        self._step.data["saved_layers"] += len(stores)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        super().start_load_kv(forward_context, **kwargs)
        if self._fail_loads:
            loads = [r for r in self._get_connector_metadata().requests if not r.is_store]  # type: ignore[attr-defined]
            self._load_errors |= {int(r.slot_mapping[-1]) // self._block_size for r in loads if len(r.slot_mapping)}

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._load_errors = self._load_errors, set()
        return failed

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self._step.is_empty():
            return None
        stats, self._step = self._step, ReportingStats()
        return stats

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        if not self.has_connector_metadata():
            return None
        metadata = self._get_connector_metadata()
        stored = sum(len(r.token_ids) for r in metadata.requests if r.is_store)  # type: ignore[attr-defined]
        return SavedTokens(stored) if stored else None

    # --- scheduler side ---
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        self._step.data["lookups"] += 1
        if request.request_id not in self._asked:
            self._asked.add(request.request_id)
            return None, False
        if not self._kv_transfer_config.is_kv_consumer:
            return 0, False  # a producer only: it stores, never loads
        claim: tuple[int | None, bool] = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return claim

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        self._admitted[request.request_id] = request
        super().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> Any:
        stored = [self._admitted[new.req_id] for new in scheduler_output.scheduled_new_reqs
                  if new.req_id not in self._requests_need_load and new.req_id in self._admitted
                  and not self._found_match_for_prompt(list(new.prompt_token_ids or []),
                                                       [f.identifier for f in new.mm_features])]
        for request in stored:  # the requests ExampleConnector's metadata below stores, decided as it decides
            self._events.extend(self._stored_events(request))
        return super().build_connector_meta(scheduler_output)

    def _stored_events(self, request: Request) -> list[KVCacheEvent]:
        """A ``BlockStored`` per whole block ExampleConnector stores of the request's prompt."""
        block_stored, external_hash = vllm_api.find("BlockStored"), vllm_api.find("maybe_convert_block_hash")
        tokens = list(request.prompt_token_ids or [])
        blocks = min(align_to_block_size(len(tokens), self._block_size) // self._block_size, len(request.block_hashes))
        hashes = [external_hash(h) for h in request.block_hashes[:blocks]]
        return [block_stored(block_hashes=[hashes[i]], parent_block_hash=hashes[i - 1] if i else None,
                             token_ids=tokens[i * self._block_size:(i + 1) * self._block_size],
                             block_size=self._block_size, lora_id=None, medium=MEDIUM, lora_name=None)
                for i in range(blocks)]

    def take_events(self) -> Iterable[KVCacheEvent]:
        events, self._events = self._events, []
        return events

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        super().update_connector_output(connector_output)
        report = connector_output.kv_connector_worker_meta
        if report is not None:
            assert isinstance(report, SavedTokens), (
                f"{NAME}'s scheduler side was handed worker metadata of type {type(report).__name__}, not its own")
            self.saved_reported.append(report.tokens)

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._admitted.pop(request.request_id, None)
        delay_free, _ = super().request_finished(request, block_ids)
        return delay_free, {f"{NAME}.storage:{self._storage_path}": self._storage_path}

    def get_finished_count(self) -> int | None:
        return None if self._finished_count is None else int(self._finished_count)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return ReportingStats(data=dict(data) if data is not None else {})

    @classmethod
    def build_prom_metrics(cls, vllm_config: VllmConfig, metric_types: dict[type, type], labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]) -> KVConnectorPromMetrics | None:
        return ReportingPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)


try:
    KVConnectorFactory.register_connector(NAME, __name__, NAME)
except ValueError:  # registered already (vLLM registers a name once per process)
    pass
