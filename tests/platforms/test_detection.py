"""Detection of all four platforms with torch's probes faked, and the choice of backends."""

from __future__ import annotations

import pytest

from kvconform import platforms
from tests.load import stretched


def test_cpu_only_machine(fake_torch):
    fake_torch()
    spec, probe = platforms.resolve("auto")
    assert spec.name == "cpu" and probe.detected
    for name in ("cuda", "rocm", "xpu"):
        assert not platforms.probe(name).detected


def test_cuda_detected_without_creating_a_context(fake_torch):
    cuda = fake_torch(cuda=2, cuda_version="12.4")
    spec, probe = platforms.resolve("auto")
    assert (spec.name, probe.device_count) == ("cuda", 2)
    assert not cuda.context_created, "probing must not initialise the device"
    assert spec.device(1) == "cuda:1"


def test_rocm_is_a_hip_torch_with_devices(fake_torch):
    fake_torch(cuda=1, hip="6.2")
    spec, _ = platforms.resolve("auto")
    assert spec.name == "rocm" and spec.torch_device_type == "cuda"
    assert "HIP_VISIBLE_DEVICES" in spec.visibility_vars and "CUDA_VISIBLE_DEVICES" in spec.visibility_vars
    assert not platforms.probe("cuda").detected
    assert "ROCm build" in platforms.probe("cuda").reason


def test_xpu_native_first(fake_torch):
    fake_torch(xpu=4)
    spec, probe = platforms.resolve("auto")
    assert (spec.name, probe.device_count) == ("xpu", 4)
    assert spec.visibility_vars == ("ZE_AFFINITY_MASK",)


def test_xpu_through_ipex_fallback(fake_torch):
    fake_torch(xpu=None, ipex="2")
    probe = platforms.probe("xpu")
    assert probe.detected and "intel_extension_for_pytorch" in probe.reason


def test_xpu_reason_names_both_probes(fake_torch):
    fake_torch(xpu=0)
    probe = platforms.probe("xpu")
    assert probe.reason == "torch.xpu.is_available() is False and intel_extension_for_pytorch is not installed"


def test_broken_ipex_is_a_reason_not_a_crash(fake_torch):
    fake_torch(xpu=0, ipex="broken")
    probe = platforms.probe("xpu")
    assert not probe.detected and "importing intel_extension_for_pytorch failed" in probe.reason


def test_auto_prefers_an_accelerator_over_cpu(fake_torch):
    fake_torch(cuda=1, cuda_version="12.4", xpu=1)
    assert platforms.resolve("auto")[0].name == "xpu"


def test_explicit_platform_absent_raises_with_the_probe(fake_torch):
    fake_torch()
    with pytest.raises(platforms.PlatformError, match="no xpu device is usable: torch.xpu.is_available"):
        platforms.resolve("xpu")


def test_probe_that_raises_is_reported(monkeypatch):
    def boom():
        raise RuntimeError("driver exploded")

    spec = platforms.PLATFORMS["cuda"]
    monkeypatch.setitem(platforms.PLATFORMS, "cuda", type(spec)(**{**spec.__dict__, "probe": boom}))
    probe = platforms.probe("cuda")
    assert not probe.detected and "driver exploded" in probe.reason


@pytest.mark.parametrize("name,backends", [
    ("cuda", ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")),
    ("rocm", ("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN")),
    ("xpu", ("FLASH_ATTN", "TRITON_ATTN")),
    ("cpu", ("CPU_ATTN",)),
])
def test_backend_table_in_preference_order(name, backends):
    assert platforms.get(name).backends == backends


def test_rocm_attn_is_left_out():
    assert "ROCM_ATTN" not in platforms.get("rocm").backends


def test_requested_backends_are_checked():
    spec = platforms.get("xpu")
    assert platforms.check_backends(spec, ["TRITON_ATTN"]) == ("TRITON_ATTN",)
    assert platforms.check_backends(spec, []) == spec.backends
    with pytest.raises(platforms.PlatformError, match="choose from: FLASH_ATTN, TRITON_ATTN"):
        platforms.check_backends(spec, ["CPU_ATTN"])


def test_unknown_platform():
    with pytest.raises(platforms.PlatformError, match="choose one of: auto, cuda, rocm, xpu, cpu"):
        platforms.get("bogus")


def test_platforms_import_without_vllm():
    import subprocess
    import sys

    code = ("import sys; sys.modules['vllm'] = None\n"
            "import platforms, platforms.cli\n"
            "print(platforms.resolve('auto')[0].name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=stretched(60))
    assert out.returncode == 0 and out.stdout.strip() == "cpu", out.stderr
