"""xdist with devices: one device per worker, chosen before torch initialises.

The controller gives each worker a slot, the lowest no live worker holds, so a worker that replaces a
crashed one takes its device (xdist names the replacement ``gw2``, and ``gw2 % 2`` would be the
survivor's). From its slot a worker sets the platform's visibility variables (CUDA_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES on ROCm, ZE_AFFINITY_MASK on XPU) at configure time; probing creates no device
context, so they still take effect. Tests that need several devices carry ``xdist_group("multi-device")``
and skip, naming the visible count, where fewer are visible. The CPUs are not divided: threads run where
the OS puts them, as in a vLLM process. On the CPU platform ``-n auto`` starts one worker per
``CORES_PER_CPU_WORKER`` usable cores, at least one (crash isolation): a worker keeps about that many
busy, and one more costs its own vLLM import and collection (``benchmarks/README.md``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

MULTI_DEVICE_GROUP = "multi-device"
CORES_PER_CPU_WORKER = 2


def take_slot(slots: dict[str, int], worker_id: str) -> int:
    """Controller side: the lowest slot no live worker in ``slots`` (worker id -> slot) holds, now ``worker_id``'s."""
    slot = min(set(range(len(slots) + 1)) - set(slots.values()))
    slots[worker_id] = slot
    return slot


def visibility_env(visibility_vars: tuple[str, ...], device_count: int, index: int) -> dict[str, str]:
    """The variables that pin worker ``index`` to one of ``device_count`` devices."""
    if not visibility_vars or device_count < 1:
        return {}
    chosen = str(index % device_count)
    return {var: chosen for var in visibility_vars}


def pin_worker_device(spec: PlatformSpec, device_count: int, index: int) -> dict[str, str]:
    """Called in each xdist worker's configure with its slot: pin it to its device, unless the user pinned already."""
    if any(var in os.environ for var in spec.visibility_vars):
        return {}
    env = visibility_env(spec.visibility_vars, device_count, index)
    os.environ.update(env)
    return env


def auto_workers(spec: PlatformSpec, device_count: int, cores: int | None = None) -> int | None:
    """``-n auto``: one worker per device on a GPU platform, one per ``CORES_PER_CPU_WORKER`` usable cores on
    the CPU; None (xdist counts) on a GPU platform that shows no device."""
    if spec.torch_device_type == "cpu":
        usable = cores if cores is not None else _usable_cores()
        return max(1, usable // CORES_PER_CPU_WORKER)
    return device_count if device_count > 0 else None


def _usable_cores() -> int:
    """The cores this process may run on (its affinity, where the OS has one), not the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def require_devices(platform: PlatformSpec, needed: int) -> None:
    from kvconform.platforms import probe

    visible = probe(platform.name).device_count
    if visible < needed:
        pinned = ", ".join(f"{v}={os.environ[v]}" for v in platform.visibility_vars if v in os.environ)
        pinned_note = f" ({pinned})" if pinned else ""
        pytest.skip(f"needs {needed} {platform.name} devices; {visible} visible here{pinned_note}")
