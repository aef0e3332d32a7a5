"""The backend in a test's id is the backend a connector learns from vLLM.

NixlConnector sizes its transfers from ``get_current_attn_backends``; if the rig's
layers are not attention layers to vLLM, or are put in the forward context only
after the connector is built, vLLM answers with its automatic choice instead. For an
MLA shape on the tiny Llama that choice is CPU_ATTN, so the MLA case fails without the fix.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from kvconform import platforms  # noqa: E402
from kvconform.conformance.connectors.profiles import ConnectorProfile  # noqa: E402
from kvconform.conformance.connectors.selection import ConnectorParam  # noqa: E402
from kvconform.conformance.engine.kvcache import CacheShape  # noqa: E402
from kvconform.conformance.engine.model import write_tiny_model  # noqa: E402
from kvconform.conformance.engine.rig import Rig  # noqa: E402
from tests.engine import backend_probe  # noqa: E402


@pytest.mark.parametrize("backend,mla", [("CPU_ATTN", False), ("CPU_MLA", True)])
def test_connector_sees_the_backend_under_test(tmp_path, backend, mla):
    probe = ConnectorParam("BackendProbeConnector", "BackendProbeConnector", "tests.engine.backend_probe",
                           ConnectorProfile(extra_config={"shared_storage_path": "{storage}"}))
    storage = tmp_path / "storage"
    storage.mkdir()
    rig = Rig(probe, platforms.get("cpu"), backend, CacheShape(dtype="float32", mla=mla),
              write_tiny_model(tmp_path / "model"), storage, "cpu")
    backend_probe.SEEN.clear()
    side = rig.engine()
    try:
        assert backend_probe.SEEN == [[backend]], (
            f"the rig tests {backend} but the connector was told {backend_probe.SEEN}")
        assert side.vllm_config.attention_config.backend.name == backend
    finally:
        side.close()


def test_caches_are_allocated_in_kernel_blocks(tmp_path):
    """vLLM's GPU runner allocates with ``kernel_block_sizes``: a 32-token block on CPU_MLA (kernels of 16)
    is two kernel blocks in the views a connector registers."""
    from vllm.v1.worker.utils import prepare_kernel_block_sizes  # noqa: F401  (the runner's own helper is used)

    from kvconform.conformance.engine import kvcache

    example = ConnectorParam("ExampleConnector", "ExampleConnector", None,
                             ConnectorProfile(extra_config={"shared_storage_path": "{storage}"}))
    rig = Rig(example, platforms.get("cpu"), "CPU_MLA", CacheShape(dtype="float32", mla=True, block_size=32),
              write_tiny_model(tmp_path / "model"), tmp_path, "cpu")
    config = rig.vllm_config("kv_both")
    kv_cache_config = kvcache.build_kv_cache_config(config, [(rig.layer_names(), rig.attention_spec())], 8)
    assert kvcache.kernel_block_sizes(kv_cache_config, config) == [16]
    view = next(iter(kvcache.allocate(kv_cache_config, config, "cpu").values()))
    assert (view.shape[0], view.shape[2]) == (2 * kv_cache_config.num_blocks, 16), view.shape
