"""``kvconform platforms [--json]``: what this machine offers, and why."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import PLATFORMS, probe
from .vllm_backends import confirm


def describe(name: str, with_vllm: bool = True) -> dict[str, Any]:  # a JSON document
    spec = PLATFORMS[name]
    found = probe(name)
    device_name = None
    if found.detected:
        try:
            device_name = spec.device_name(0)
        except Exception as exc:
            device_name = f"unknown ({type(exc).__name__}: {exc})"
    backends = [
        confirm(b).as_dict() if with_vllm else {"name": b, "confirmed": None, "detail": "from kvconform's table"}
        for b in spec.backends
    ]
    return {
        "name": name,
        "detected": found.detected,
        "reason": found.reason,
        "device_type": spec.torch_device_type,
        "device_name": device_name,
        "device_count": found.device_count,
        "visibility_vars": list(spec.visibility_vars),
        "backends": backends,
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--no-vllm", action="store_true", help="do not ask the installed vLLM to confirm backends")


def _mark(confirmed: bool | None) -> str:
    return {True: "ok", False: "NO", None: "?"}[confirmed]


def run(args: argparse.Namespace) -> int:
    rows = [describe(name, with_vllm=not args.no_vllm) for name in PLATFORMS]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = "detected" if row["detected"] else "not detected"
        print(f"{row['name']}: {state} ({row['reason']})")
        if row["detected"]:
            print(f"  device: {row['device_name']} x{row['device_count']} (torch type {row['device_type']})")
        for b in row["backends"]:
            print(f"  [{_mark(b['confirmed'])}] {b['name']}: {b['detail']}")
    return 0
