"""CudaHelperConnector: vLLM's ExampleConnector that waits for its saves through its package's worker helper.

The module itself calls no device API: what it runs is in ``worker.py`` (imported relatively, at module level).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

from .worker import wait_for_saves

try:  # a compiled core some builds of such a package ship; absent here, so the lint has no file to read
    from . import native_core
except ImportError:
    native_core = None


class CudaHelperConnector(ExampleConnector):
    """Waits for the layer saves on a CUDA event (``worker.wait_for_saves``): raises wherever torch has no CUDA."""

    def wait_for_save(self) -> None:
        super().wait_for_save()
        wait_for_saves()
