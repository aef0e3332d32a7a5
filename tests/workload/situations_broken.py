"""Connectors whose bugs show only in the workload situations issue 49 added (test_situations_catches.py).

Each broken copy is a vLLM 0.32 connector with one edit:

* ``ResumedIndexConnector``: ExampleConnector with ``build_connector_meta`` copied, its loop over resumed requests
  reading the per-request lists of ``scheduled_cached_reqs`` (``num_computed_tokens``, ``new_block_ids``) at the
  request's position among the *resumed* requests, as code written when vLLM carried ``resumed_from_preemption``
  beside ``req_ids`` reads them after the switch to the ``resumed_req_ids`` set. The lists are indexed like
  ``req_ids``, which lists the running requests first: a resumed request alone in its step is at index 0 either way;
  beside a running request it takes that request's entries (its new blocks: none, and the copied assert fails, or
  the wrong ones). Scenario ``resumed-beside-running`` fails it.
* ``OverwritesPendingSavesMultiConnector``: MultiConnector whose worker assigns each step's counts of extra pending
  saves over its own. Scenario ``staggered-finishes`` fails it over children that are both 2+ steps late.
* ``WholeBlocksStoreConnector``: ``PrefixTokensConnector`` (a correct connector of this module, whose hits end
  mid-block) moving whole blocks only while claiming every token. Scenario ``partial-block-load`` fails it.
* ``SampledTokenSaveConnector``: ``OutputSaveConnector`` (a correct connector of this module, which also stores a
  finished request's prompt and output, copied a step after the finish from the blocks it keeps) handing its worker
  every token of a finished request, the last sampled one included, whose KV the model never computed. Only a final
  length on a block boundary makes that token start a whole block of its own count: the worker copies a block the
  scheduler half did not keep, after vLLM freed it. Scenarios ``block-boundary`` and ``next-turn`` fail it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import safetensors.torch
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    ExampleConnectorMetadata,
    ReqMeta,
    align_to_block_size,
)
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector


class ResumedIndexConnector(ExampleConnector):
    """ExampleConnector, its resumed loads indexed among the resumed requests instead of all cached ones."""

    def build_connector_meta(self, scheduler_output):
        meta = ExampleConnectorMetadata()
        total_need_load = 0
        for new_req in scheduler_output.scheduled_new_reqs:
            token_ids = new_req.prompt_token_ids or []
            mm_hashes = [f.identifier for f in new_req.mm_features]
            if new_req.req_id in self._requests_need_load:
                meta.add_request(token_ids=token_ids, block_ids=new_req.block_ids[0], block_size=self._block_size,
                                 is_store=False, mm_hashes=mm_hashes)
                total_need_load += 1
            elif not self._found_match_for_prompt(token_ids, mm_hashes):
                meta.add_request(token_ids=token_ids, block_ids=new_req.block_ids[0], block_size=self._block_size,
                                 is_store=True, mm_hashes=mm_hashes)

        cached_reqs = scheduler_output.scheduled_cached_reqs
        resumed = [r for r in cached_reqs.req_ids if r in cached_reqs.resumed_req_ids]
        for i, req_id in enumerate(resumed):  # the edit: vLLM enumerates cached_reqs.req_ids and skips the others
            if req_id not in self._requests_need_load:
                continue
            num_computed_tokens = cached_reqs.num_computed_tokens[i]
            num_new_tokens = scheduler_output.num_scheduled_tokens[req_id]
            new_block_ids = cached_reqs.new_block_ids[i]
            request = self._requests_need_load[req_id]
            token_ids = request.all_token_ids[:num_computed_tokens + num_new_tokens]
            assert new_block_ids is not None
            meta.add_request(token_ids=token_ids, block_ids=new_block_ids[0], block_size=self._block_size,
                             is_store=False, mm_hashes=[f.identifier for f in request.mm_features])
            total_need_load += 1

        assert total_need_load == len(self._requests_need_load)
        self._requests_need_load.clear()
        return meta


class OverwritesPendingSavesMultiConnector(MultiConnector):
    """vLLM 0.32's MultiConnector whose worker side *assigns* the counts of extra pending saves each step's metadata
    carries (``bind_connector_metadata``) where vLLM's updates its own: the counts of requests whose children have
    not reported yet are lost when another request's count arrives, and such a request is reported finished when
    its first child is done, while a slower child still has its saves to read from the blocks vLLM then frees.
    Only children that are all at least two steps late leave a count outstanding across a step."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True  # as tests/checks/multi_broken.py's
        super().__init__(vllm_config, role, kv_cache_config)

    def bind_connector_metadata(self, connector_metadata) -> None:
        if connector_metadata.extra_async_saves:
            self._extra_async_saves = dict(connector_metadata.extra_async_saves)  # the edit: vLLM updates
        for child, child_metadata in zip(self._connectors, connector_metadata.metadata, strict=True):
            child.bind_connector_metadata(child_metadata)
        KVConnectorBase_V1.bind_connector_metadata(self, connector_metadata)


class PrefixTokensConnector(ExampleConnector):
    """(correct) ExampleConnector keyed by whole prompts, token by token: it stores every token of a prompt it
    computed under that prompt's key, and claims for a request the longest stored prompt its own prompt extends,
    short of its last token, loading exactly those tokens. A prompt that extends a stored 48-token one gets a
    48-token hit, 1.5 blocks: a load that ends mid-block, short of the prompt's end, which vLLM 0.32's scheduler
    takes as claimed (it rounds a claim to blocks only under its bounded-replay mode)."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        prompt = list(request.prompt_token_ids or [])
        stored = self._stored_prefix(prompt)
        return max(0, stored - num_computed_tokens), False

    def _stored_prefix(self, prompt: list[int]) -> int:
        """The length of the longest stored prompt ``prompt`` extends (0: none)."""
        for length in range(len(prompt) - 1, 0, -1):
            if os.path.exists(self._generate_foldername_debug(torch.tensor(prompt[:length]), [])):
                return length
        return 0

    def _moved_tokens(self, count: int) -> int:
        """Of ``count`` tokens of a prompt, those a store writes and a load moves: every one."""
        return count

    def build_connector_meta(self, scheduler_output):
        meta = ExampleConnectorMetadata()
        loads = {new.req_id: (list(new.prompt_token_ids or []), new.block_ids[0])
                 for new in scheduler_output.scheduled_new_reqs}
        cached = scheduler_output.scheduled_cached_reqs
        loads |= {rid: (list(self._requests_need_load[rid].prompt_token_ids or []), blocks[0])
                  for rid, blocks in zip(cached.req_ids, cached.new_block_ids, strict=True)
                  if rid in cached.resumed_req_ids and rid in self._requests_need_load and blocks}
        for rid, (prompt, blocks) in loads.items():
            if rid in self._requests_need_load:
                stored = self._stored_prefix(prompt)
                meta.requests.append(_entry(prompt[:stored], self._moved_tokens(stored), blocks, self._block_size,
                                            is_store=False))
            elif not os.path.exists(self._generate_foldername_debug(torch.tensor(prompt), [])):
                meta.requests.append(_entry(prompt, self._moved_tokens(len(prompt)), blocks, self._block_size,
                                            is_store=True))
        self._requests_need_load.clear()
        return meta


class WholeBlocksStoreConnector(PrefixTokensConnector):
    """Moves whole blocks only (``count // block_size`` of them, as a block store does) while its lookup still
    claims every token of the stored prompt: a hit that ends mid-block claims the tokens of a partial block that was
    never stored nor loaded, and vLLM counts them as computed. A hit that ends on a block boundary is unaffected."""

    def _moved_tokens(self, count: int) -> int:
        return count // self._block_size * self._block_size  # the edit: every token is moved


@dataclass
class _FinishedRequest:
    """What the worker needs to store a finished request's prompt and output: the tokens handed over, in order, the
    request's blocks (vLLM's block table as ``request_finished`` got it) and its prompt's length."""

    request_id: str
    tokens: list[int]
    block_ids: list[int]
    prompt_tokens: int


@dataclass
class _OutputSaveMetadata(ExampleConnectorMetadata):
    finished: list[_FinishedRequest] = field(default_factory=list)  # requests finished since the last step


class OutputSaveConnector(ExampleConnector):
    """(correct) ExampleConnector that also stores, once a request finishes, its prompt and output together: every
    whole block of the tokens it computed, keyed by those tokens as ExampleConnector keys a prompt, so a later turn
    that sends the conversation back finds them. The scheduler half hands each finished request to the worker in
    the next step's metadata and keeps its blocks (``request_finished`` returns True) when they hold a whole block
    past what the prompt's own store holds; the worker copies those blocks in that step's ``get_finished``, a step
    after the finish, and reports the request in ``finished_sending``. Both halves count whole blocks the same
    way (``_output_store_tokens``), so the worker copies exactly the requests whose blocks vLLM kept."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._finished_requests: list[_FinishedRequest] = []  # scheduler side
        self._caches: dict[str, torch.Tensor] = {}  # worker side

    # ---- scheduler side ---------------------------------------------------------------------------------------

    def _tokens_with_kv(self, request) -> list[int]:
        """The tokens of a finished request whose KV its blocks hold: the model computes every token but the last
        one it sampled."""
        return list(request.all_token_ids[:request.num_computed_tokens])

    def request_finished(self, request, block_ids):
        prompt_tokens = len(request.prompt_token_ids or [])
        self._finished_requests.append(_FinishedRequest(request.request_id, self._tokens_with_kv(request),
                                                        list(block_ids), prompt_tokens))
        keeps = self._output_store_tokens(request.num_computed_tokens, len(block_ids), prompt_tokens) > 0
        return keeps, None

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        finished, self._finished_requests = self._finished_requests, []
        return _OutputSaveMetadata(requests=meta.requests, finished=finished)

    # ---- both halves ------------------------------------------------------------------------------------------

    def _output_store_tokens(self, tokens: int, blocks: int, prompt_tokens: int) -> int:
        """How many of a finished request's first ``tokens`` tokens (in ``blocks`` blocks) its output store copies:
        their whole blocks, when they reach past the whole blocks its prompt's store holds; else 0."""
        whole = min(tokens // self._block_size, blocks) * self._block_size
        return whole if whole > align_to_block_size(prompt_tokens, self._block_size) else 0

    # ---- worker side ------------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._caches = kv_caches

    def get_finished(self, finished_req_ids):
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        stored = set()
        for done in getattr(meta, "finished", ()):
            count = self._output_store_tokens(len(done.tokens), len(done.block_ids), done.prompt_tokens)
            if count:
                self._store(_entry(done.tokens[:count], count, done.block_ids, self._block_size, is_store=True))
                stored.add(done.request_id)
        return stored or None, None

    def _store(self, entry: ReqMeta) -> None:
        """ExampleConnector's save of one entry, from the registered caches."""
        for name, layer in self._caches.items():
            slots = entry.slot_mapping.to(layer.device)
            kv = layer[slots // self._block_size, :, slots % self._block_size]
            path = self._generate_filename_debug(name, entry.token_ids, entry.mm_hashes)
            safetensors.torch.save_file({"kv_cache": kv.detach().cpu()}, path)


class SampledTokenSaveConnector(OutputSaveConnector):
    """Hands the worker every token of a finished request, the last one it sampled included, whose KV the model
    never computed (as OffloadingConnector counted a finished request's tokens before it clamped them to
    ``num_tokens - 1``). The scheduler half decides from ``num_computed_tokens`` whether to keep the blocks; the
    worker counts whole blocks over the tokens handed to it. The two counts differ only when the final length is
    on a block boundary: the worker then copies one whole block more, the last, whose last slot was never written,
    and where that block is the first one past the prompt's store, for a request whose blocks vLLM did not keep,
    freed the step before (and maybe handed to the next arrival), and reports a send nobody waits for."""

    def _tokens_with_kv(self, request) -> list[int]:
        return list(request.all_token_ids)  # the edit: all_token_ids[:num_computed_tokens]


def _entry(key: list[int], moved_tokens: int, block_ids: list[int], block_size: int, is_store: bool) -> ReqMeta:
    """ExampleConnector's metadata entry, keyed by the tokens ``key``, moving the first ``moved_tokens`` of them."""
    slots = (torch.tensor(block_ids)[:, None] * block_size + torch.arange(block_size)).flatten()
    return ReqMeta(token_ids=torch.tensor(key), slot_mapping=slots[:moved_tokens], is_store=is_store, mm_hashes=[])
