"""A child for wrappers that does real work: vLLM's ExampleConnector, its saves finishing steps late.

A wrapper such as MultiConnector is only as well tested as its children are busy: under ExampleConnector,
which saves within the step, it never holds a request whose children save asynchronously and finish at
different steps, where it must report the request finished after its last child (``extra_async_saves``)
and forward each child's preemptions. This is ExampleConnector with two changes: it stores from the
blocks vLLM's scheduler hands it in ``update_state_after_alloc``, so a wrapper must give every child the
request's real blocks; and each save is read from the cache ``save_delay_steps`` worker steps late, as an
asynchronous saver copies off the GPU. So ``request_finished`` keeps the blocks while saves are in flight
(reported later in ``finished_sending``), ``handle_preemptions`` writes a preempted request's saves at
once (vLLM frees its blocks without asking), and a block a wrapper freed early is read after vLLM reused
it, which the byte checks catch. Its profile is MultiConnector's ``late-saves`` variant (``connectors.yaml``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import safetensors.torch
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    ExampleConnectorMetadata,
    ReqMeta,
)


@dataclass
class _PendingSave:
    request_id: str
    due_step: int
    layer_name: str
    kv_layer: torch.Tensor
    token_ids: torch.Tensor
    slot_mapping: torch.Tensor
    mm_hashes: list[str]


@dataclass
class LateSaveMetadata(ExampleConnectorMetadata):
    store_ids: list[str | None] = field(default_factory=list)  # per entry of ``requests``: the storing request
    preempted: set[str] = field(default_factory=set)


if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorRole
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


class LateSaveExampleConnector(ExampleConnector):
    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config
        self._delay = int(extra.get("save_delay_steps", 1))
        self._storing: set[str] = set()  # scheduler side: requests with saves handed to the worker
        self._allocated: dict[str, list[int]] = {}  # scheduler side: the blocks update_state_after_alloc handed it
        self._step = 0  # worker side: steps seen
        self._pending: list[_PendingSave] = []
        self._written: set[str] = set()  # requests with saves written and not yet reported
        self._finished: set[str] = set()  # finished by vLLM, reported once their saves are written

    # ---- scheduler side -------------------------------------------------------------------------------------

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        block_ids = blocks.get_block_ids()
        self._allocated[request.request_id] = list(block_ids[0]) if block_ids else []

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> LateSaveMetadata:
        need_load = set(self._requests_need_load)
        meta = super().build_connector_meta(scheduler_output)
        # which request each entry is: the new requests in order (a load, or a store of a prompt not yet on
        # disk), then the resumed ones (loads); ExampleConnector's entries do not carry it. A store takes its
        # slots from the blocks update_state_after_alloc handed over, and is dropped where none were.
        requests: list[ReqMeta] = []
        ids: list[str | None] = []
        taken = 0  # entries of meta.requests accounted for
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in need_load:
                requests.append(meta.requests[taken])
                ids.append(None)
                taken += 1
            elif taken < len(meta.requests) and meta.requests[taken].is_store:
                entry = meta.requests[taken]
                taken += 1
                blocks = self._allocated.get(new.req_id)
                if blocks:
                    requests.append(ReqMeta.make_meta(list(new.prompt_token_ids or []), blocks, self._block_size,
                                                      True, entry.mm_hashes))
                    ids.append(new.req_id)
                    self._storing.add(new.req_id)
        requests += meta.requests[taken:]  # resumed requests' loads
        ids += [None] * (len(requests) - len(ids))
        return LateSaveMetadata(requests=requests, store_ids=ids,
                                preempted=set(getattr(scheduler_output, "preempted_req_ids", None) or ()))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._allocated.pop(request.request_id, None)
        if request.request_id in self._storing:
            self._storing.discard(request.request_id)
            return True, None  # its saves may still be in flight: vLLM keeps the blocks until finished_sending
        return False, None

    # ---- worker side ----------------------------------------------------------------------------------------

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: object, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for request, request_id in zip(meta.requests, meta.store_ids, strict=True):
            if request.is_store and request_id is not None:
                # this is step ``self._step + 1``; its get_finished writes saves due then
                self._pending.append(_PendingSave(request_id, self._step + 1 + self._delay, layer_name, kv_layer,
                                                  request.token_ids, request.slot_mapping, request.mm_hashes))

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        preempted: set[str] = getattr(kv_connector_metadata, "preempted", set())
        self._write(lambda save: save.request_id in preempted)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        self._step += 1
        self._write(lambda save: save.due_step <= self._step)
        self._finished |= finished_req_ids & ({s.request_id for s in self._pending} | self._written)
        done = {rid for rid in self._finished if all(s.request_id != rid for s in self._pending)}
        self._finished -= done
        self._written -= done
        return done or None, None

    def shutdown(self) -> None:
        self._write(lambda save: True)  # a queue drains before its engine goes
        super().shutdown()

    def _write(self, due: Callable[[_PendingSave], bool]) -> None:
        """Read each due save from the cache now, and write it as ExampleConnector does."""
        now = [s for s in self._pending if due(s)]
        self._pending = [s for s in self._pending if not due(s)]
        for save in now:
            blocks, offsets = save.slot_mapping // self._block_size, save.slot_mapping % self._block_size
            kv = save.kv_layer[blocks.to(save.kv_layer.device), :, offsets.to(save.kv_layer.device)]
            path = self._generate_filename_debug(save.layer_name, save.token_ids, save.mm_hashes)
            safetensors.torch.save_file({"kv_cache": kv.detach().cpu()}, path)
            self._written.add(save.request_id)
