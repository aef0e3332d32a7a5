"""Copies of examples/dict_connector.py's DictConnector (one store for the whole process) with a key that ignores
part of the engine's configuration, as shared stores' keys commonly do.

Within one configuration they are correct: their round-trips and workloads pass, in any order
(tests/plugin/test_independent_tests.py), because each test's prompts are its own. Where two
configurations share the store, they hand one engine KV that the other saved.
"""

from __future__ import annotations

from examples.dict_connector import STORE, DictConnector


class ConfigBlindDictConnector(DictConnector):
    """Keys blocks by their tokens alone: any engine that shares the process's store finds them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._config_key = ""


class BlockByBlockLoadDictConnector(DictConnector):
    """DictConnector's load one block at a time, with where a block goes and how it moves as hooks (for the copies
    with a load bug); unchanged, it loads as DictConnector does."""

    def _destination(self, block_id: int) -> int:
        return block_id

    def _moved(self, tensor, kv_cache):
        return tensor.to(kv_cache.device)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for name, layer in forward_context.no_compile_layers.items():
            kv_cache = getattr(layer, "kv_cache", None)
            if kv_cache is None:  # a module without KV (a MoE runner)
                continue
            for key, block_id in meta.loads:
                kv_cache[self._destination(block_id)].copy_(self._moved(STORE[key][name], kv_cache))


class NextBlockDictConnector(BlockByBlockLoadDictConnector):
    """Loads each block into the block after the one vLLM allocated (a slot bug): the bytes land elsewhere."""

    def _destination(self, block_id: int) -> int:
        return block_id + 1
