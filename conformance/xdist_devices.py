"""xdist with devices: one device per worker, chosen before torch initialises.

The controller knows the platform and its device count, and gives each worker a
slot: the lowest one no live worker holds, so a worker that replaces a crashed one
takes its device and cores (xdist names the replacement ``gw2`` after ``gw0`` and
``gw1``, and ``gw2 % 2`` is the survivor's, not the dead one's). From its slot a
worker sets the platform's visibility variables (CUDA_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES with it on ROCm, ZE_AFFINITY_MASK on XPU) at configure time,
before any test touches the device.
Probing never creates a device context, so the variable still takes effect.
Tests that need several devices carry ``xdist_group("multi-device")`` and are
skipped, naming the visible count, where fewer are visible.

The CPUs are shared too, and each worker takes its own share of them, as a vLLM
worker process has its cores:

* torch sizes its intra-op thread pool to every core, so two workers on two cores
  ran four busy threads, and each worker's tests took twice their serial time (the
  suite with ``-n 2``: 38.7 s, against 30.6 s with one thread each). Each worker
  sizes the pool to its share (``OMP_NUM_THREADS``), unless the user set it.
* Its threads run on its own cores (CPU affinity, a slice of the cores this run
  may use). A NIXL agent's progress thread polls whenever its core is free (see
  ``harness/affinity.py``); unpinned, one worker's pairs polled on the core the
  other worker's harness thread needed. Pinned, a worker's pollers only use the
  time its own harness thread leaves while it waits for their transfers.
* The controller runs on any core, and handles every report (five messages or so per
  test, about 1.4 s of CPU in a ``-n 2`` run): once its workers are started its
  threads run as a connector's do (``controller_yields_cpus``). In a traced ``-n 2``
  run its threads were 1.0 s of the 3.6 s the two harness threads waited for their
  cores; ten interleaved pairs, 2.2-3.2 s of waiting against 3.1-3.8 s. A worker
  that replaces a crashed one is started by the lowered controller and inherits its
  nice 19: it runs on its own cores, beside its connector's threads at the same
  priority rather than a lower one.
"""

from __future__ import annotations

import os
import sys

import pytest

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


def pin_worker_device(spec, device_count: int, index: int) -> dict[str, str]:
    """Called in each xdist worker's configure with its slot: pin it to its device, unless the user pinned already."""
    if any(var in os.environ for var in spec.visibility_vars):
        return {}
    env = visibility_env(spec.visibility_vars, device_count, index)
    os.environ.update(env)
    return env


def core_share(usable: set[int], worker_count: int, index: int) -> set[int]:
    """Worker ``index``'s cores: an equal slice of ``usable`` (the rest left to the last worker), or one core
    of them, round robin, where there are more workers than cores."""
    cores = sorted(usable)
    if worker_count <= len(cores):
        size = len(cores) // worker_count
        end = len(cores) if index == worker_count - 1 else (index + 1) * size
        return set(cores[index * size:end])
    return {cores[index % len(cores)]}


def share_cpus(worker_count: int, index: int) -> dict[str, str]:
    """Called in each xdist worker's configure with its slot: its threads on its share of the cores this process
    may use, and torch's pool sized to it. Returns the variables set."""
    if worker_count < 1:
        return {}
    if hasattr(os, "sched_getaffinity"):
        from kvconform.conformance.harness.affinity import keep_within, thread_ids

        share = core_share(os.sched_getaffinity(0), worker_count, index % worker_count)
        # every thread the worker has now (xdist's own among them); the threads they start inherit it. Not
        # Linux's /proc: the calling thread alone
        keep_within(thread_ids() or {0}, share)
        size = len(share)
    else:
        size = max(1, (os.cpu_count() or 1) // worker_count)
    if "OMP_NUM_THREADS" in os.environ:
        return {}
    os.environ["OMP_NUM_THREADS"] = str(size)
    torch = sys.modules.get("torch")
    if torch is not None:  # imported already: its pool is sized, so resize it
        torch.set_num_threads(size)
    return {"OMP_NUM_THREADS": str(size)}


def controller_yields_cpus() -> None:
    """Called in the xdist controller as its test loop starts: its threads at the priority of a connector's
    (``harness/affinity.py``); the threads it starts later inherit it. Not Linux's /proc: the calling thread."""
    from kvconform.conformance.harness.affinity import lower_priority, thread_ids

    lower_priority(thread_ids() or {0})


def auto_workers(spec, device_count: int) -> int | None:
    """``-n auto`` on a GPU platform: one worker per device; None lets xdist count CPUs."""
    return device_count if spec.torch_device_type != "cpu" and device_count > 0 else None


def require_devices(platform, needed: int) -> None:
    from kvconform.platforms import probe

    visible = probe(platform.name).device_count
    if visible < needed:
        pinned = ", ".join(f"{v}={os.environ[v]}" for v in platform.visibility_vars if v in os.environ)
        pinned_note = f" ({pinned})" if pinned else ""
        pytest.skip(f"needs {needed} {platform.name} devices; {visible} visible here{pinned_note}")
