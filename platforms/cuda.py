"""NVIDIA CUDA.

Detected by ``torch.cuda.device_count()``, which asks NVML (or the driver)
without creating a CUDA context, so a later CUDA_VISIBLE_DEVICES still takes
effect in xdist workers. A ROCm build of torch also answers through
``torch.cuda``; ``torch.version.hip`` tells them apart.
"""

from __future__ import annotations

from .spec import PlatformSpec, Probe


def _probe() -> Probe:
    import torch

    if getattr(torch.version, "hip", None):
        return Probe(False, f"torch is a ROCm build (torch.version.hip={torch.version.hip}), not CUDA")
    if not getattr(torch.version, "cuda", None):
        return Probe(False, f"torch {torch.__version__} is not built with CUDA (torch.version.cuda is None)")
    count = torch.cuda.device_count()
    if count == 0:
        return Probe(False, f"torch.cuda.device_count() is 0 (torch {torch.__version__}, CUDA {torch.version.cuda})")
    return Probe(True, f"torch.cuda.device_count() is {count} (CUDA {torch.version.cuda})", count)


def cuda_device_name(index: int = 0) -> str:
    import torch

    return str(torch.cuda.get_device_name(index))


SPEC = PlatformSpec(
    name="cuda",
    torch_device_type="cuda",
    visibility_vars=("CUDA_VISIBLE_DEVICES",),
    backends=("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"),
    probe=_probe,
    device_name=cuda_device_name,
    emoji=":nvidia:",
    mla_backends=("FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"),
)
