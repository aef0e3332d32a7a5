"""examples/dict_connector.py's DictConnector with a load that hard-codes the device, in a module of its own so that
the lint of the other copies (dict_broken.py) does not read it."""

from __future__ import annotations

from examples.dict_connector import STORE, DictConnector


class CudaLoadDictConnector(DictConnector):
    """Loads through a hard-coded ``"cuda"`` (vLLM issue #42924's bug class): crashes wherever torch has no CUDA."""

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for name, layer in forward_context.no_compile_layers.items():
            kv_cache = getattr(layer, "kv_cache", None)
            if kv_cache is None:  # a module without KV (a MoE runner)
                continue
            for key, block_id in meta.loads:
                kv_cache[block_id].copy_(STORE[key][name].to("cuda"))

