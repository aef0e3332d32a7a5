"""How long the PR gate takes, end to end, on a one-file change to a vLLM-like checkout.

``suite_timing.py``'s ``gate`` run times only the tests the gate selects; this times what a reviewer
waits for: ``kvconform gate --run`` itself (reading the change, building the overlay, the import probe,
the selected tests in a fresh pytest process, the verdict). The checkout is the gate tests' own
(``tests/gate/vllm_checkout.py``), built once; its head appends a comment to one connector file, so the
gate must pass. Each round is a fresh ``kvconform gate`` process, after ``suite_timing.py``'s host
reference loop.

    .venv/bin/python benchmarks/gate_timing.py [--file vllm/.../decode_bench_connector.py] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.gate.vllm_checkout, and suite_timing beside this file
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite_timing import host_reference_seconds  # noqa: E402

from tests.gate.vllm_checkout import CONNECTORS, VLLM_SOURCE, GitFailed, build_template, git  # noqa: E402

DEFAULT_FILE = f"{CONNECTORS}/v1/decode_bench_connector.py"
VERDICT_PREFIX = "kvconform gate: "


def make_checkout(root: Path, changed: str) -> Path:
    """A vLLM-like repository whose head commit appends a comment to ``changed``."""
    repo = build_template(root / "vllm")
    target = repo / changed
    target.write_text(target.read_text() + "\n# gate_timing: a change that alters no behaviour\n")
    git(repo, "commit", "-q", "-am", f"touch {changed}")
    return repo


def time_gate(kvconform: Path, repo: Path) -> dict:
    """One ``kvconform gate --run`` on the checkout's last commit: wall time, exit status and the verdict line."""
    command = [str(kvconform), "gate", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--run",
               "--platform", "cpu"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(VERDICT_PREFIX)]
    said = verdicts or (done.stdout + done.stderr).strip().splitlines() or ["(nothing printed)"]
    return {"wall_s": round(wall, 2), "exit_status": done.returncode, "verdict": said[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=DEFAULT_FILE, metavar="PATH",
                        help=f"the vLLM file the change touches (default: {DEFAULT_FILE})")
    parser.add_argument("--rounds", type=int, default=3, metavar="N", help="gate runs to time (default: 3)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, not {args.rounds}")
    if not (VLLM_SOURCE.parent / args.file).is_file():
        parser.error(f"--file: {args.file} is not a file of the installed vLLM ({VLLM_SOURCE})")
    kvconform = Path(sys.executable).parent / "kvconform"
    if not kvconform.exists():
        parser.error(f"no kvconform command beside {sys.executable}: run this with the project's venv")

    with tempfile.TemporaryDirectory(prefix="kvconform-gate-timing-") as scratch:
        try:
            repo = make_checkout(Path(scratch), args.file)
        except GitFailed as exc:
            print(f"gate_timing: building the checkout failed: {exc}", file=sys.stderr)
            return 1
        rounds = []
        for number in range(1, args.rounds + 1):
            reference = host_reference_seconds(sys.executable)
            result = {**time_gate(kvconform, repo), "host_reference_s": reference}
            rounds.append(result)
            print(f"round {number}: {result['wall_s']:.1f} s, exit {result['exit_status']}, host reference "
                  f"{reference} s: {result['verdict']}")
    walls = [r["wall_s"] for r in rounds]
    print(f"kvconform gate --run on a change to {args.file}: median {statistics.median(walls):.1f} s "
          f"({min(walls):.1f}-{max(walls):.1f} s over {len(walls)} runs)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"file": args.file, "rounds": rounds}, indent=2) + "\n")
    return 0 if all(r["exit_status"] == 0 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
