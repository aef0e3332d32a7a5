"""xdist with devices: one device per worker, chosen before torch initialises.

The controller gives each worker a slot, the lowest no live worker holds, so a worker that replaces a
crashed one takes its device (xdist names the replacement ``gw2``, and ``gw2 % 2`` would be the
survivor's). From its slot a worker sets the platform's visibility variables (CUDA_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES on ROCm, ZE_AFFINITY_MASK on XPU) at configure time; probing creates no device
context, so they still take effect. Tests that need several devices carry ``xdist_group("multi-device")``
and skip, naming the visible count, where fewer are visible. The CPUs are not pinned: threads run where
the OS puts them, as in a vLLM process; but each worker sizes torch's intra-op pool to its share of the
usable cores, as vLLM's multiprocessing executor sizes its workers' (``startup_omp_num_threads``): N
workers' full-size pools on the same cores spin against each other in every parallel region, which cost
``-n 2`` on 2 cores about half again a serial run's CPU (``benchmarks/README.md``). A user's
``OMP_NUM_THREADS`` is left to decide, and the engine tier's vLLM processes start fresh with torch's
default. On the CPU platform ``-n auto`` starts one worker per usable core (the cores this process may run
on, not the machine's): with the pools shared, a second worker on 2 cores takes less CPU than a serial run,
since the suite's pair tests spend their waits polling on the connectors' threads, which overlap.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

MULTI_DEVICE_GROUP = "multi-device"


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


def share_cpu_threads(worker_count: int, cores: int | None = None) -> int | None:
    """Called in each xdist worker's configure: torch's intra-op threads cut to this worker's share of the usable
    cores; the count set, or None where there is nothing to share or ``OMP_NUM_THREADS`` says how many."""
    if worker_count < 2 or "OMP_NUM_THREADS" in os.environ:
        return None
    import torch

    share = max(1, (cores if cores is not None else _usable_cores()) // worker_count)
    if share >= torch.get_num_threads():
        return None
    torch.set_num_threads(share)
    return share


def auto_workers(spec: PlatformSpec, device_count: int, cores: int | None = None) -> int | None:
    """``-n auto``: one worker per device on a GPU platform, one per usable core on the CPU; None (xdist
    counts) on a GPU platform that shows no device."""
    if spec.torch_device_type == "cpu":
        return max(1, cores if cores is not None else _usable_cores())
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
