"""``python -P -m kvconform.conformance.smoke --out DIR [--platform P] [--torch-only] [-- PYTEST_ARGS...]``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from kvconform import platforms
from kvconform.platforms.spec import PlatformSpec

from ..session.suite_command import NO_CACHE, SuiteCommand
from . import torch_only

CONNECTORS = ("ExampleConnector", "DecodeBenchConnector", "NixlConnector", "MultiConnector")
TIME_LIMIT_S = 540  # under 10 minutes with the torch-only part


def suite_command(spec: PlatformSpec, device_count: int, out: Path, extra: list[str]) -> SuiteCommand:
    """The bounded run: four connectors, the platform's first backend, first case per check, results in ``out``."""
    workers = max(1, device_count) if spec.torch_device_type != "cpu" else 1
    return SuiteCommand(spec.name, CONNECTORS, python=(sys.executable, "-P"), attn_backends=spec.backends[:1],
                        plugins=("kvconform.conformance.smoke.first_cases", NO_CACHE), options=("-q",),
                        workers=workers, max_worker_restarts=4, report_skips=True, junitxml=out / "junit.xml",
                        results_json=out / "results.json", extra=extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvconform.conformance.smoke", description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="folder for torch-only.json, junit.xml, results.json")
    parser.add_argument("--platform", default="auto", choices=platforms.CHOICES)
    parser.add_argument("--torch-only", action="store_true", help="skip the vLLM part")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments for the vLLM part")
    args = parser.parse_args(argv)
    try:
        spec, probe = platforms.resolve(args.platform)
    except platforms.PlatformError as exc:
        print(f"smoke: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report, ok = torch_only.run(spec.name)
    (args.out / "torch-only.json").write_text(json.dumps(report, indent=2))
    for row in report["checks"]:
        print(f"smoke [{row['outcome']}] {row['name']}: {row['detail']}")
    if args.torch_only:
        return 0 if ok else 1
    command = suite_command(spec, probe.device_count, args.out, args.pytest_args)
    print("smoke: " + command.text(), flush=True)
    try:
        status = subprocess.run(command.argv(), timeout=TIME_LIMIT_S).returncode
    except subprocess.TimeoutExpired:
        print(f"smoke: the conformance part ran past {TIME_LIMIT_S} s and was stopped", file=sys.stderr)
        status = 1
    return status if ok else (status or 1)


if __name__ == "__main__":
    sys.exit(main())
