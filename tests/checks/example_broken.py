"""Deliberately broken copies of vLLM's ExampleConnector, one bug class each.

The suite must fail every one of them; tests/checks proves it. Each class
changes only the lines that carry its bug and says which real regression it
reproduces.
"""

from __future__ import annotations

import safetensors.torch
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class _LoadLoop(ExampleConnector):
    """ExampleConnector's load path with the layer's cache, the device move and the inject as hooks."""

    def _kv_cache_of(self, layer) -> torch.Tensor | None:
        return getattr(layer, "kv_cache", None)  # None: a module without KV (a MoE runner, a LoRA linear)

    def _to_device(self, tensor: torch.Tensor, layer: torch.Tensor) -> torch.Tensor:
        return tensor.to(layer.device)

    def _inject(self, layer: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor) -> None:
        layer[slots // self._block_size, :, slots % self._block_size] = kv

    def start_load_kv(self, forward_context, **kwargs) -> None:
        if not isinstance(forward_context.attn_metadata, dict):
            return
        for request in self._get_connector_metadata().requests:
            if request.is_store:
                continue
            for name, layer in forward_context.no_compile_layers.items():
                kv_layer = self._kv_cache_of(layer)
                if kv_layer is None:
                    continue
                path = self._generate_filename_debug(name, request.token_ids, request.mm_hashes)
                kv = self._to_device(safetensors.torch.load_file(path)["kv_cache"], kv_layer)
                self._inject(kv_layer, kv, request.slot_mapping.to(kv_layer.device))


class HardcodedCudaLoadConnector(_LoadLoop):
    """vLLM issue #42924: the load path called ``.cuda()``; CPU-only builds crashed."""

    def _to_device(self, tensor, layer):
        return tensor.cuda()


class HardcodedCudaStringConnector(_LoadLoop):
    """vLLM PR #51806: ``.to("cuda", non_blocking=True)``; broke on XPU."""

    def _to_device(self, tensor, layer):
        return tensor.to("cuda", non_blocking=True)


class OffByOneInjectConnector(_LoadLoop):
    """The inject writes every token one slot further than its own."""

    def _inject(self, layer, kv, slots):
        super()._inject(layer, kv, slots + 1)


class WrongBlockSaveConnector(ExampleConnector):
    """The save reads the block after the request's own."""

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        super().save_kv_layer(layer_name, kv_layer.roll(shifts=-1, dims=0), attn_metadata, **kwargs)


class EveryLayerKVCacheConnector(_LoadLoop):
    """Reads ``kv_cache`` from every module of the forward context, as ExampleConnector's load did before vLLM
    skipped the modules without one (a MoE model's runners): AttributeError on any MoE model."""

    def _kv_cache_of(self, layer):
        return layer.kv_cache
