"""NIXL profiled with its buffer in device memory on GPU platforms.

The ``device-buffer`` variant of NixlConnector's profile is a connector parameter of
its own on cuda, rocm and xpu (id ``NixlConnector@device-buffer``) and absent on CPU,
where the cache is host memory already.
"""

from __future__ import annotations

import pytest

from kvconform.conformance.connectors.selection import resolve_connectors, with_variants


@pytest.mark.parametrize("platform", ["cuda", "rocm", "xpu"])
def test_gpu_platforms_run_nixl_on_device_memory_too(platform):
    params = with_variants(resolve_connectors(["NixlConnector"]), platform)
    assert [p.id for p in params] == ["NixlConnector", "NixlConnector@device-buffer"]
    host, device = params
    assert host.profile.kv_buffer_device == "cpu"
    assert device.profile.kv_buffer_device == "{device}" and device.name == "NixlConnector"
    assert device.transfer_config_fields() == host.transfer_config_fields()  # the same connector class


def test_cpu_has_no_device_buffer_variant():
    assert [p.id for p in with_variants(resolve_connectors(["NixlConnector"]), "cpu")] == ["NixlConnector"]
