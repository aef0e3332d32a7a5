"""AMD ROCm: torch's ``cuda`` device type on a HIP build of torch.

ROCM_ATTN is absent on purpose: it declares ``supports_kv_connector() ->
False`` (its (2, num_blocks, ...) layout is not blocks-first).
"""

from __future__ import annotations

from .cuda import cuda_device_name
from .spec import PlatformSpec, Probe


def _probe() -> Probe:
    import torch

    hip = getattr(torch.version, "hip", None)
    if not hip:
        return Probe(False, f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)")
    count = torch.cuda.device_count()
    if count == 0:
        return Probe(False, f"torch.cuda.device_count() is 0 on ROCm {hip}")
    return Probe(True, f"torch.version.hip is {hip} and {count} device(s) are visible", count)


SPEC = PlatformSpec(
    name="rocm",
    torch_device_type="cuda",
    # HIP honours both; vLLM's ROCm CI sets both so either runtime sees the same devices.
    visibility_vars=("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    backends=("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN"),
    probe=_probe,
    device_name=cuda_device_name,  # a HIP torch answers through torch.cuda
    emoji=":rocm:",
    mla_backends=("ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "TRITON_MLA"),
)
