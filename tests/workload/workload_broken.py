"""Connectors with bugs that only a lifecycle shows: the round-trip passes them, the workload check must not.

Each is vLLM's ExampleConnector with one bug class (the lines that carry it, and
nothing else, differ). ``AsyncLoadConnector`` is a correct asynchronous loader,
so the workload driver's async path (``load_kv_async``, ``WAITING_FOR_REMOTE_KVS``,
``finished_recving``) is exercised by a connector that must pass.
"""

from __future__ import annotations

import safetensors.torch
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector

from kvconform.conformance.connectors.late_save import LateSaveExampleConnector


class _Loader(ExampleConnector):
    """ExampleConnector's load, into the registered caches, at slots a hook picks."""

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._registered = kv_caches

    def _slots(self, path: str, request) -> torch.Tensor:
        return request.slot_mapping

    def _move(self, requests) -> None:
        for request in requests:
            for name, layer in self._registered.items():
                path = self._generate_filename_debug(name, request.token_ids, request.mm_hashes)
                kv = safetensors.torch.load_file(path)["kv_cache"].to(layer.device)
                slots = self._slots(path, request).to(layer.device)
                layer[slots // self._block_size, :, slots % self._block_size] = kv

    def start_load_kv(self, forward_context, **kwargs) -> None:
        self._move([r for r in self._get_connector_metadata().requests if not r.is_store])


class PartialKeyConnector(ExampleConnector):
    """Keys stored KV on the prompt's first block only (a hash over part of the prompt): prompts that
    share their first block and then diverge find, claim and load each other's KV."""

    def _generate_foldername_debug(self, token_ids, mm_hashes, create_folder=False) -> str:
        return super()._generate_foldername_debug(token_ids[: self._block_size], mm_hashes, create_folder)


class SaverSlotsConnector(_Loader):
    """Loads at the slots the producer saved from (kept beside the KV), not at the consumer's own
    blocks: right only while both engines happen to hand out the same block ids."""

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        for request in self._get_connector_metadata().requests:
            if request.is_store:
                path = self._generate_filename_debug(layer_name, request.token_ids, request.mm_hashes)
                safetensors.torch.save_file({"slots": request.slot_mapping.contiguous()}, path + ".slots")

    def _slots(self, path, request):
        return safetensors.torch.load_file(path + ".slots")["slots"][: len(request.slot_mapping)]


class AsyncLoadConnector(_Loader):
    """ExampleConnector with asynchronous loads: claimed with ``load_kv_async=True``, posted when the
    scheduler allocates the blocks, moved at the next step and reported as received after the move."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._allocated: dict[str, tuple[object, list[int]]] = {}
        self._posted: list = []
        self._received: set[str] = set()

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, _ = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return tokens, bool(tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens) -> None:
        if num_external_tokens > 0:
            self._allocated[request.request_id] = (request, list(blocks.get_block_ids()[0]))

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)  # the stores; loads are ours
        for rid, (request, block_ids) in self._allocated.items():
            meta.add_request(token_ids=list(request.prompt_token_ids), block_ids=block_ids,
                             block_size=self._block_size, is_store=False, mm_hashes=[])
            meta.requests[-1].request_id = rid
        self._allocated = {}
        return meta

    def start_load_kv(self, forward_context, **kwargs) -> None:
        posted, self._posted = self._posted, [r for r in self._get_connector_metadata().requests if not r.is_store]
        self._complete(posted)

    def _complete(self, posted) -> None:
        self._move(posted)
        self._received |= {r.request_id for r in posted}

    def get_finished(self, finished_req_ids):
        received, self._received = self._received, set()
        return None, received or None


class ReportsBeforeBytesConnector(AsyncLoadConnector):
    """Reports a load as received when it posts the transfer, one step before the bytes arrive."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        posted, self._posted = self._posted, [r for r in self._get_connector_metadata().requests if not r.is_store]
        self._move(posted)
        self._received |= {r.request_id for r in self._posted}


class DelayedFreeConnector(ExampleConnector):
    """ExampleConnector with delayed frees, done right: ``request_finished`` keeps every finished request's
    blocks, and the worker reports the send done one step later (when the scheduler has told it the
    request finished), so vLLM frees them only then."""

    def request_finished(self, request, block_ids):
        return True, None

    def get_finished(self, finished_req_ids):
        return set(finished_req_ids) or None, None


class EarlySendDoneConnector(DelayedFreeConnector):
    """Reports the send of every request as done in the step it is first scheduled, while it still runs:
    vLLM would free (and hand out again) blocks a running request is using."""

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        meta.new_req_ids = [r.req_id for r in scheduler_output.scheduled_new_reqs]
        return meta

    def get_finished(self, finished_req_ids):
        started = set(getattr(self._get_connector_metadata(), "new_req_ids", ()))
        return (set(finished_req_ids) | started) or None, None


class _Wrapper(MultiConnector):
    """vLLM's MultiConnector, loaded by module path. vLLM's factory reads HMA support of MultiConnector from its
    children only under the name "MultiConnector"; a subclass loaded by path counts as HMA-capable, so vLLM keeps
    the hybrid manager on and MultiConnector's own check refuses these non-HMA children. The tiny model has one
    KV cache group, where the hybrid manager changes nothing: turn it off as vLLM does for MultiConnector."""

    def __init__(self, vllm_config, role, kv_cache_config):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True
        super().__init__(vllm_config, role, kv_cache_config)


class PrimaryLoadsMultiConnector(_Wrapper):
    """MultiConnector that claims the first child's hit that is positive (as vLLM's does) but always loads
    from its first child, its "primary" store: right only while every child holds the same prompts."""

    def update_state_after_alloc(self, request, blocks, num_external_tokens) -> None:
        for i, child in enumerate(self._connectors):
            child.update_state_after_alloc(request, blocks, num_external_tokens if i == 0 else 0)


class FirstChildOnlyMultiConnector(_Wrapper):
    """MultiConnector that asks its first child only: a prompt only a later child holds gets no hit, work
    lost without an error (vLLM's scheduler checks a claim only from above)."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, load_async = self._connectors[0].get_num_new_matched_tokens(request, num_computed_tokens)
        if tokens:
            self._requests_to_connector[request.request_id] = 0
        return (tokens if tokens is None or tokens > 0 else 0), load_async


class ForgetsAbortedLoadConnector(AsyncLoadConnector):
    """Cancels the asynchronous load of a request aborted while it waits for remote KV and never reports it:
    vLLM keeps an aborted request's blocks until the connector reports its load finished, so they leak and
    the request is never freed."""

    def get_finished(self, finished_req_ids):
        sent, received = super().get_finished(finished_req_ids)
        received = (received or set()) - set(finished_req_ids)
        return sent, received or None


class AsyncSaveConnector(LateSaveExampleConnector):
    """ExampleConnector whose saves copy the KV one step late, as a transfer queue does (kvconform's own
    LateSaveExampleConnector, conformance/connectors/late_save.py, at its default delay of one step). Correct
    because nothing overwrites what it has queued: ``request_finished`` keeps a finished request's blocks until
    the send is reported (after the copy ran), and when the scheduler preempted requests (whose blocks vLLM
    frees at once) ``handle_preemptions`` runs their queued copies before the forward may write those blocks."""


class PreemptionBlindSaveConnector(AsyncSaveConnector):
    """Ignores preemptions: a preempted request's queued copy runs after the next forward, which may already
    have written its freed blocks for another request, so the store keeps another request's KV."""

    def handle_preemptions(self, kv_connector_metadata) -> None:
        return


class EarlyFreeSaveConnector(AsyncSaveConnector):
    """Lets vLLM free a finished (or aborted) request's blocks while its copy is still queued: the copy then
    reads whatever the next forward wrote there."""

    def request_finished(self, request, block_ids):
        return False, None

    def get_finished(self, finished_req_ids):
        super().get_finished(finished_req_ids)  # the due copies run; nothing is reported, as nothing was kept
        return None, None
