"""CleanHelperConnector, the control: like CudaHelperConnector, but its helper guards its CUDA call."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

from . import guarded


class CleanHelperConnector(ExampleConnector):
    """Waits for its saves only where CUDA is there to wait on (``guarded.wait_for_saves``)."""

    def wait_for_save(self) -> None:
        super().wait_for_save()
        guarded.wait_for_saves()
