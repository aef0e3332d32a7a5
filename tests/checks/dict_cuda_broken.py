"""examples/dict_connector.py's DictConnector with a load that hard-codes the device, in a module of its own so that
the lint of the other copies (dict_broken.py) does not read it."""

from __future__ import annotations

from tests.checks.dict_broken import BlockByBlockLoadDictConnector


class CudaLoadDictConnector(BlockByBlockLoadDictConnector):
    """Loads through a hard-coded ``"cuda"`` (vLLM issue #42924's bug class): crashes wherever torch has no CUDA."""

    def _moved(self, tensor, kv_cache):
        return tensor.to("cuda")
