"""The accelerator checks that need torch alone: detection, worker pinning, the device guard.

Each check is a row (name, outcome, detail) with outcome passed, failed or
"not applicable" (said why), so a CPU-only machine runs the script too and says
what it could not show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kvconform import platforms
from kvconform.platforms.spec import PlatformSpec, Probe


@dataclass
class Row:
    name: str
    outcome: str  # passed | failed | not applicable
    detail: str


# What a pinned worker process prints: how many devices of the type it sees, and the first one's name.
_SEEN_BY_WORKER = ("import json, torch; m = getattr(torch, {type!r}); "
                   "print(json.dumps([m.device_count(), m.get_device_name(0) if m.device_count() else None]))")


def detection(spec: PlatformSpec, probe: Probe) -> Row:
    try:
        name = spec.device_name(0)
    except Exception as exc:
        return Row("platform detection", "failed", f"{spec.name} detected ({probe.reason}) but naming device 0 "
                   f"raised {type(exc).__name__}: {exc}")
    return Row("platform detection", "passed", f"{spec.name}: {probe.reason}; device 0 is {name}")


def pinning(spec: PlatformSpec, count: int) -> Row:
    """Each of two xdist workers, given the platform's visibility variables, sees exactly its own device."""
    from ..session.devices import visibility_env

    if not spec.visibility_vars:
        return Row("xdist worker pinning", "not applicable", f"{spec.name} has no device-visibility variable")
    seen = []
    for index in range(min(count, 2)):
        env = {**{k: v for k, v in os.environ.items() if k not in spec.visibility_vars},
               **visibility_env(spec.visibility_vars, count, index)}
        out = subprocess.run([sys.executable, "-c", _SEEN_BY_WORKER.format(type=spec.torch_device_type)],
                             env=env, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            return Row("xdist worker pinning", "failed", f"worker {index}: {out.stderr.strip().splitlines()[-1:]}")
        visible, name = json.loads(out.stdout.strip().splitlines()[-1])
        if visible != 1:
            return Row("xdist worker pinning", "failed", f"worker {index} pinned with {env_text(spec, env)} "
                       f"sees {visible} devices, not 1")
        seen.append(f"gw{index}: {env_text(spec, env)} -> 1 device ({name})")
    return Row("xdist worker pinning", "passed", "; ".join(seen))


def env_text(spec: PlatformSpec, env: dict[str, str]) -> str:
    return ", ".join(f"{var}={env[var]}" for var in spec.visibility_vars if var in env)


def device_guard(spec: PlatformSpec, count: int) -> list[Row]:
    """The guard on real device tensors, in a worker made faithful (cache device current)."""
    import torch

    from ..engine.device_guard import DeviceGuard, DeviceMismatch, make_current, worker_device_index

    device = spec.device(worker_device_index(count))
    make_current(device)
    cache = torch.zeros(4, 8, device=device)
    guard = DeviceGuard("smoke", {"layer.0": cache}, torch.device(device))
    rows = []

    def allowed(name: str, action: Callable[[], object]) -> None:
        try:
            with guard:
                action()
            rows.append(Row(name, "passed", f"allowed on {device}"))
        except Exception as exc:
            rows.append(Row(name, "failed", f"{type(exc).__name__}: {exc}"))

    def caught(name: str, action: Callable[[], object]) -> None:
        try:
            with guard:
                action()
        except DeviceMismatch as exc:
            rows.append(Row(name, "passed", f"caught: {exc}"))
            return
        except Exception as exc:
            rows.append(Row(name, "failed", f"{type(exc).__name__} instead of DeviceMismatch: {exc}"))
            return
        rows.append(Row(name, "failed", "not caught"))

    allowed("guard: cache-device write", lambda: cache[0].copy_(torch.ones(8, device=device)))
    allowed("guard: unindexed device type is the current (cache) device",
            lambda: torch.ones(1, device=spec.torch_device_type))
    if spec.torch_device_type == "cpu":
        rows.append(Row("guard: host tensor written into the cache", "not applicable", "the cache is in host memory"))
    else:
        caught("guard: host tensor written into the cache", lambda: cache.copy_(torch.ones(4, 8)))
    if count >= 2:
        other = spec.device((worker_device_index(count) + 1) % count)
        caught(f"guard: move to {other}", lambda: torch.ones(1).to(other))
    else:
        rows.append(Row("guard: move to another device", "not applicable", f"{count} {spec.name} device(s) visible"))
    return rows


def run(platform: str = "auto") -> tuple[dict[str, Any], bool]:
    """All torch-only checks; (a JSON-ready report, whether every applicable check passed)."""
    spec, probe = platforms.resolve(platform)
    rows = [detection(spec, probe), pinning(spec, probe.device_count), *device_guard(spec, probe.device_count)]
    report = {"platform": spec.name, "device_count": probe.device_count, "checks": [asdict(r) for r in rows]}
    return report, all(r.outcome != "failed" for r in rows)
