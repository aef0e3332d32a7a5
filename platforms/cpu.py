"""CPU: always present; vLLM's CPU build serves connectors through CPU_ATTN."""

from __future__ import annotations

import os
import platform as _host

from .spec import PlatformSpec, Probe


def _probe() -> Probe:
    return Probe(True, "the CPU is always available", device_count=1)


def _device_name(index: int = 0) -> str:
    return _host.processor() or _host.machine() or f"cpu ({os.cpu_count()} cores)"


SPEC = PlatformSpec(
    name="cpu",
    torch_device_type="cpu",
    visibility_vars=(),
    backends=("CPU_ATTN",),
    probe=_probe,
    device_name=_device_name,
    emoji=":computer:",
    mla_backends=("CPU_MLA",),
)
