"""Intel XPU.

Native ``torch.xpu`` first (torch >= 2.5); ``intel_extension_for_pytorch`` is
only a fallback for older stacks and is imported only while probing XPU,
because on a mismatched torch it exits the interpreter at import.
"""

from __future__ import annotations

import importlib.util

from .spec import PlatformSpec, Probe


def _native_xpu_count() -> tuple[int, str]:
    import torch

    xpu = getattr(torch, "xpu", None)
    if xpu is None:
        return 0, f"torch {torch.__version__} has no torch.xpu module"
    if not xpu.is_available():
        return 0, "torch.xpu.is_available() is False"
    return xpu.device_count(), f"torch.xpu reports {xpu.device_count()} device(s)"


def _probe() -> Probe:
    count, native = _native_xpu_count()
    if count:
        return Probe(True, native, count)
    if importlib.util.find_spec("intel_extension_for_pytorch") is None:
        return Probe(False, f"{native} and intel_extension_for_pytorch is not installed")
    try:
        import intel_extension_for_pytorch  # noqa: F401  (registers torch.xpu on older stacks)
    except (Exception, SystemExit) as exc:  # an IPEX built for another torch exits at import
        return Probe(False, f"{native} and importing intel_extension_for_pytorch failed: {exc}")
    count, after = _native_xpu_count()
    if count:
        return Probe(True, f"{after} (through intel_extension_for_pytorch)", count)
    return Probe(False, f"{after}, even with intel_extension_for_pytorch imported")


def _device_name(index: int = 0) -> str:
    import torch

    return str(torch.xpu.get_device_name(index))


SPEC = PlatformSpec(
    name="xpu",
    torch_device_type="xpu",
    visibility_vars=("ZE_AFFINITY_MASK",),
    backends=("FLASH_ATTN", "TRITON_ATTN"),
    probe=_probe,
    device_name=_device_name,
    emoji=":intel:",
    mla_backends=("FLASH_ATTN_MLA", "TRITON_MLA"),
)
