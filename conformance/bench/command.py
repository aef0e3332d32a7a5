"""``kvconform bench``: connector save/load throughput beside the platform's own baseline.

For each connector that round-trips here and each request size, it times the connector's worker-side
save and load (``timing.py``), then a baseline moving the same blocks: plain files in the same storage
folder for storage connectors, a device/host copy for the rest. It runs as the suite does (a
tensor-parallel group of one, vLLM's preferred block size, the suite's expectations: a known round-trip
failure is listed with its finding, not as an error, through ``expected.py``). It prints a table and,
with ``--json``, the file benchmarks/README.md describes. Exit status: 0; 1 when a connector could not be
measured (other than as a known failure says) or a ratio is below ``--min-ratio``; 2 on bad input.

This module is the command line: its options, and the order a run takes (check the input, measure,
print, judge); ``inputs.py`` checks the values, ``measurements.py`` measures, ``document.py`` and
``text_report.py`` render.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kvconform import platforms

from . import inputs
from .document import document, write_json
from .measurements import Setup, below, bench_all, exit_status
from .text_report import report
from .vllm_logging import quiet_vllm


def configure(parser: argparse.ArgumentParser) -> None:
    quiet_vllm()
    from ..engine.kvcache import KV_DTYPES
    from .timing import GEOMETRIES

    sizes = ",".join(map(str, inputs.DEFAULT_SIZES))
    parser.add_argument("--connector", action="append", default=[], metavar="NAME|module:Class",
                        help="connector to measure (repeatable; default: every registered connector)")
    parser.add_argument("--profiles", action="append", default=[], type=Path, metavar="FILE",
                        help="extra connector profiles (schema of conformance/connectors.yaml), searched first")
    parser.add_argument("--platform", choices=platforms.CHOICES, default="auto",
                        help="platform to measure on (default: auto)")
    parser.add_argument("--attn-backend", metavar="NAME", help="attention backend (default: the platform's first)")
    parser.add_argument("--sizes", default=sizes, metavar="N,N,...",
                        help=f"KV tokens per request, multiples of the block size (default: {sizes})")
    parser.add_argument("--repeat", type=int, default=inputs.DEFAULT_REPEAT, metavar="K",
                        help=f"timed requests per size; the median is reported (default: {inputs.DEFAULT_REPEAT})")
    parser.add_argument("--kv-shape", choices=list(GEOMETRIES), default="small",
                        help="the model's KV geometry: " + "; ".join(
                            f"{g.name}: {g.layers} layers x {g.kv_heads} KV heads x {g.head_size}"
                            for g in GEOMETRIES.values()) + " (default: small)")
    parser.add_argument("--dtype", choices=list(KV_DTYPES), default="float16", help="KV cache dtype (default: float16)")
    parser.add_argument("--block-size", type=int, choices=inputs.BLOCK_SIZES, default=None,
                        help="tokens per block (default: the size vLLM prefers for the backend, as the suite uses)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch's intra-op threads for the run (default: torch's own choice); on a shared "
                             "host 1 gives steadier numbers, since a thread pool waiting on busy cores dominates")
    parser.add_argument("--storage-dir", type=Path, metavar="DIR",
                        help="make the connectors' temporary storage folders here, to measure that file system "
                             "(default: the system's temporary folder)")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="write the results as JSON to FILE (alone: print JSON instead of the table)")
    parser.add_argument("--min-ratio", type=float, metavar="X",
                        help="exit 1 when any connector's GB/s is below X times the baseline's")


def run(args: argparse.Namespace) -> int:
    from .expected import KnownResults

    quiet_vllm()
    sizes = inputs.parse_sizes(args.sizes)
    inputs.check_numbers(args)
    inputs.check_output(args.json)
    spec, backend = inputs.target(args)
    block_size = inputs.block_size_for(backend, args.block_size)
    inputs.check_sizes(sizes, block_size)
    chosen = inputs.connectors(args)
    known = KnownResults.load(spec.name, backend, args.dtype)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    setup = Setup(spec, backend, args.dtype, block_size, args.kv_shape, sizes, args.repeat, args.storage_dir)
    load_before = os.getloadavg()
    measured = bench_all(setup, chosen, known)
    doc = document(setup, measured, args.min_ratio, load_before, os.getloadavg())
    if args.json != "-":
        report(doc, measured.rows)
    if args.json:
        write_json(doc, args.json)
    for row in below(measured.rows, args.min_ratio):
        print(f"kvconform bench: {row.connector} {row.op} at {row.size_tokens} tokens: {row.gbps:.3f} GB/s is "
              f"{row.ratio:.2f}x the {row.baseline} baseline, below --min-ratio {args.min_ratio}", file=sys.stderr)
    for entry in measured.errors:
        print(f"kvconform bench: could not measure {entry['connector']}: {entry['error']}", file=sys.stderr)
    return exit_status(measured, args.min_ratio)
