"""``kvconform bench``: connector save/load throughput beside the platform's own baseline.

For each connector that round-trips here and each request size, it times the connector's worker-side
save and load (``conformance.bench.timing``), then a baseline moving the same blocks: plain files in the
same storage folder for storage connectors, a device/host copy for the rest. It runs as the suite does
(a tensor-parallel group of one, vLLM's preferred block size, the suite's expectations: a known
round-trip failure is listed with its finding, not as an error, through ``conformance.bench.expected``).
It prints a table and, with ``--json``, the file benchmarks/README.md describes. Exit status: 0; 1 when
a connector could not be measured (other than as a known failure says) or a ratio is below
``--min-ratio``; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform as host
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kvconform import platforms
from kvconform.errors import UserError, one_line

from ..connectors.requirements import declared_package, missing_module_failure

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

    from ..connectors.selection import ConnectorParam
    from .expected import KnownResults
    from .timing import SizeSamples

DEFAULT_SIZES = (256, 1024, 4096)
DEFAULT_REPEAT = 5
BLOCK_SIZES = (16, 32, 64, 128)
VLLM_DEFAULT_BLOCK_SIZE = 16  # CacheConfig's default, which a backend turns into its preferred size
MAX_SIZE = 1 << 17
FORMAT_VERSION = 1
# vLLM logs at INFO to stdout by default; the bench's output is its table and findings, so vLLM says only
# errors, on stderr (a user's own setting wins). Set before anything imports vLLM, which reads them once.
# TORCH_LOGS=-all puts torch's own loggers at ERROR as torch sets them up at import: vLLM 0.33.0 calls torch
# APIs that torch 2.14.1 deprecates, and torch logs a WARNING line for each (register_opaque_type, ...).
VLLM_ENVIRONMENT = {"VLLM_LOGGING_LEVEL": "ERROR", "VLLM_LOGGING_STREAM": "ext://sys.stderr", "TORCH_LOGS": "-all"}


def quiet_vllm() -> None:
    """vLLM's logging settings for the bench, before vLLM is first imported (the option defaults import it).

    A vLLM that configures its logging at import reads the environment; vLLM 0.32
    configures it only from its engine's arguments, so its loggers have no handler
    here and Python's last-resort handler would print every warning: the ``vllm``
    logger gets the level and a stderr handler of its own.
    """
    for name, value in VLLM_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    logger = logging.getLogger("vllm")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())


def configure(parser: argparse.ArgumentParser) -> None:
    quiet_vllm()
    from ..engine.kvcache import KV_DTYPES
    from .timing import GEOMETRIES

    parser.add_argument("--connector", action="append", default=[], metavar="NAME|module:Class",
                        help="connector to measure (repeatable; default: every registered connector)")
    parser.add_argument("--profiles", action="append", default=[], type=Path, metavar="FILE",
                        help="extra connector profiles (schema of conformance/connectors.yaml), searched first")
    parser.add_argument("--platform", choices=platforms.CHOICES, default="auto",
                        help="platform to measure on (default: auto)")
    parser.add_argument("--attn-backend", metavar="NAME", help="attention backend (default: the platform's first)")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), metavar="N,N,...",
                        help="KV tokens per request, multiples of the block size "
                             f"(default: {','.join(map(str, DEFAULT_SIZES))})")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, metavar="K",
                        help=f"timed requests per size; the median is reported (default: {DEFAULT_REPEAT})")
    parser.add_argument("--kv-shape", choices=list(GEOMETRIES), default="small",
                        help="the model's KV geometry: " + "; ".join(
                            f"{g.name}: {g.layers} layers x {g.kv_heads} KV heads x {g.head_size}"
                            for g in GEOMETRIES.values()) + " (default: small)")
    parser.add_argument("--dtype", choices=list(KV_DTYPES), default="float16", help="KV cache dtype (default: float16)")
    parser.add_argument("--block-size", type=int, choices=BLOCK_SIZES, default=None,
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


# ----------------------------------------------------------------------------- input


def parse_sizes(text: str) -> list[int]:
    """The sizes as numbers, in order, each once; whether they fit the block size is ``check_sizes``'s."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise UserError(f"--sizes: {part!r} is not a whole number of tokens") from None
        if not 0 < size <= MAX_SIZE:
            raise UserError(f"--sizes: {size} must be a positive number of tokens up to {MAX_SIZE}")
        if size not in sizes:
            sizes.append(size)
    return sizes


def check_sizes(sizes: list[int], block_size: int) -> None:
    for size in sizes:
        if size % block_size:
            raise UserError(f"--sizes: {size} must be a multiple of the block size ({block_size})")


def block_size_for(backend: str, asked: int | None) -> int:
    """``asked``, or the size vLLM's config picks for ``backend``; a size its kernels refuse is a UserError."""
    from ..engine.backends import backend_class

    cls = backend_class(backend)
    if asked is None:
        preferred: int = cls.get_preferred_block_size(VLLM_DEFAULT_BLOCK_SIZE)
        return preferred
    if not cls.supports_block_size(asked):
        sizes = ", ".join(str(s) for s in cls.get_supported_kernel_block_sizes())
        raise UserError(f"--block-size: {backend} does not run block size {asked} "
                        f"(vLLM: its kernel block sizes are {sizes})")
    return asked


def check_numbers(args: argparse.Namespace) -> None:
    if args.repeat < 1:
        raise UserError(f"--repeat: {args.repeat} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: {args.threads} must be at least 1")
    if args.min_ratio is not None and not (math.isfinite(args.min_ratio) and args.min_ratio > 0):
        raise UserError(f"--min-ratio: {args.min_ratio} must be a positive number")
    if args.storage_dir is not None and not args.storage_dir.is_dir():
        raise UserError(f"--storage-dir: {args.storage_dir} is not a directory")


def target(args: argparse.Namespace) -> tuple[PlatformSpec, str]:
    """(platform spec, attention backend), or a UserError saying why not."""
    try:
        spec, _probe = platforms.resolve(args.platform)
        backend = platforms.check_backends(spec, [args.attn_backend] if args.attn_backend else None)[0]
    except platforms.PlatformError as exc:
        raise UserError(str(exc)) from None
    return spec, backend


def connectors(args: argparse.Namespace) -> list[ConnectorParam]:
    """The connectors asked for (default: every registered one); a bad name or profile file is a UserError."""
    from ..connectors.profiles import ProfileError, load_profiles
    from ..connectors.selection import ConnectorSpecError, resolve_connectors

    try:
        for path in args.profiles:  # a malformed file fails before vLLM is imported for the registry
            load_profiles(path)
        return resolve_connectors(args.connector, tuple(args.profiles))
    except (ConnectorSpecError, ProfileError) as exc:
        raise UserError(str(exc)) from None


def check_output(destination: str | None) -> None:
    if destination is not None and destination != "-" and not Path(destination).resolve().parent.is_dir():
        raise UserError(f"--json: the folder of {destination} does not exist")


# ----------------------------------------------------------------------------- results


@dataclass
class Row:
    connector: str
    baseline: str
    op: str
    size_tokens: int
    bytes: int
    seconds: float
    samples_s: list[float]
    gbps: float
    baseline_seconds: float
    baseline_samples_s: list[float]
    baseline_gbps: float
    ratio: float


def rows_for(connector: str, baseline: str, samples: list[SizeSamples]) -> list[Row]:
    rows = []
    for sample in samples:
        pairs = (("save", sample.save, sample.baseline_save), ("load", sample.load, sample.baseline_load))
        for op, mine, base in pairs:
            seconds, base_seconds = statistics.median(mine), statistics.median(base)
            gbps, base_gbps = sample.bytes / seconds / 1e9, sample.bytes / base_seconds / 1e9
            rows.append(Row(connector, baseline, op, sample.size, sample.bytes, seconds, mine, gbps,
                            base_seconds, base, base_gbps, gbps / base_gbps))
    return rows


@dataclass
class Outcome:
    rows: list[Row]
    skipped: list[dict[str, str]]  # {"connector", "reason"}
    errors: list[dict[str, str]]  # {"connector", "error"}
    known_failures: list[dict[str, Any]] = field(default_factory=list)  # {"connector", "error"} and the finding


def _progress(message: str) -> None:
    """A line for a person watching a terminal; piped output (CI, a file) keeps only the table and findings."""
    if sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)


def _not_benched(connector: ConnectorParam, spec: PlatformSpec, known: KnownResults) -> str | None:
    """Why a connector is not measured here, before anything is built: its profile, or a skip entry."""
    from ..connectors.requirements import unmet_need

    reason = unmet_need(connector, spec, "roundtrip")
    if reason:
        return reason
    if connector.profile.is_pair():
        return (f"{connector.name} moves KV between a live producer and consumer (a P/D pair); the bench times "
                f"store-then-load connectors, and the conformance suite checks this pair's round-trip")
    return known.skip_reason(connector.name)


def bench_all(args: argparse.Namespace, spec: PlatformSpec, backend: str, block_size: int, sizes: list[int],
              chosen: list[ConnectorParam], known: KnownResults) -> Outcome:
    from vllm.config import VllmConfig

    from ..engine.distributed import single_rank_parallel_state
    from ..engine.kvcache import CacheShape
    from ..engine.rig import ConnectorRefused
    from .timing import GEOMETRIES, BenchRig, measure, write_model

    outcome = Outcome([], [], [])
    geometry = GEOMETRIES[args.kv_shape]
    max_model_len = max(sizes) + 2 * block_size
    shape = CacheShape(dtype=args.dtype, block_size=block_size)
    with (tempfile.TemporaryDirectory(prefix="kvconform-bench-", dir=args.storage_dir) as scratch,
          single_rank_parallel_state(VllmConfig())):  # as the suite's worker_process fixture, once per process
        model_dir = write_model(Path(scratch) / "model", geometry, max_model_len)
        for connector in chosen:
            reason = _not_benched(connector, spec, known)
            if reason:
                outcome.skipped.append({"connector": connector.name, "reason": reason})
                continue
            _progress(f"kvconform bench: measuring {connector.name} ...")
            with tempfile.TemporaryDirectory(prefix=f"{connector.name}-", dir=scratch) as storage:
                rig = BenchRig(connector, spec, backend, shape, model_dir, Path(storage), spec.device(0),
                               geometry=geometry, max_model_len=max_model_len)
                try:
                    connector.load_class()
                    baseline, samples = measure(rig, sizes, args.repeat)
                except ModuleNotFoundError as exc:
                    # a skip only for a package the profile declares, as the suite's needs.connector_class
                    package = declared_package(connector, exc.name)
                    if package is None:
                        outcome.errors.append({"connector": connector.name,
                                               "error": missing_module_failure(connector, exc)})
                    else:
                        outcome.skipped.append({"connector": connector.name, "reason": f"importing it failed for its "
                                                f"missing package {package}: {exc}"})
                except ConnectorRefused as exc:
                    outcome.skipped.append({"connector": connector.name, "reason": str(exc)})
                except Exception as exc:  # noqa: BLE001 - a connector's crash is its result, reported in full
                    finding, mismatch = known.failure(connector.name, exc)
                    error = one_line(f"{type(exc).__name__}: {exc}")
                    if finding is not None:
                        outcome.known_failures.append({"connector": connector.name, "error": error, **finding})
                    else:
                        outcome.errors.append({"connector": connector.name,
                                               "error": error + (f" ({mismatch})" if mismatch else "")})
                else:
                    outcome.rows.extend(rows_for(connector.name, baseline, samples))
    return outcome


def below(rows: list[Row], min_ratio: float | None) -> list[Row]:
    return [] if min_ratio is None else [r for r in rows if r.ratio < min_ratio]


def exit_status(outcome: Outcome, min_ratio: float | None) -> int:
    """1 when a connector could not be measured or is slower than ``min_ratio`` allows; else 0."""
    return 1 if outcome.errors or below(outcome.rows, min_ratio) else 0


def document(args: argparse.Namespace, spec: PlatformSpec, backend: str, block_size: int, sizes: list[int],
             outcome: Outcome, load_before: tuple[float, float, float],
             load_after: tuple[float, float, float]) -> dict[str, Any]:
    import torch
    import vllm

    from ..engine.kvcache import KV_DTYPES
    from .timing import GEOMETRIES

    geometry = GEOMETRIES[args.kv_shape]
    return {
        "kvconform_bench": FORMAT_VERSION,
        "platform": spec.name, "device": spec.device(0), "device_name": spec.device_name(0),
        "attn_backend": backend, "kv_dtype": args.dtype, "block_size": block_size,
        "kv_shape": {"name": geometry.name, "layers": geometry.layers, "kv_heads": geometry.kv_heads,
                     "head_size": geometry.head_size,
                     "bytes_per_token": geometry.bytes_per_token(KV_DTYPES[args.dtype][0])},
        "sizes": sizes, "repeat": args.repeat, "torch_threads": torch.get_num_threads(),
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__, "python": host.python_version()},
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "min_ratio": args.min_ratio,
        "results": [asdict(row) for row in outcome.rows],
        "skipped": outcome.skipped,
        "known_failures": outcome.known_failures,
        "errors": outcome.errors,
        "below_min_ratio": [{"connector": r.connector, "op": r.op, "size_tokens": r.size_tokens, "ratio": r.ratio}
                            for r in below(outcome.rows, args.min_ratio)],
    }


# ----------------------------------------------------------------------------- output


COLUMNS = (("connector", "<"), ("baseline", "<"), ("tokens", ">"), ("MiB", ">"), ("op", "<"),
           ("ms/request", ">"), ("GB/s", ">"), ("baseline GB/s", ">"), ("ratio", ">"))


def _cells(row: Row) -> tuple[str, ...]:
    return (row.connector, row.baseline, str(row.size_tokens), f"{row.bytes / (1 << 20):.1f}", row.op,
            f"{row.seconds * 1e3:.2f}", f"{row.gbps:.3f}", f"{row.baseline_gbps:.3f}", f"{row.ratio:.2f}")


def table(rows: list[Row]) -> str:
    lines = [tuple(name for name, _ in COLUMNS), *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(_table_line(line, widths) for line in lines)


def _table_line(cells: tuple[str, ...], widths: list[int]) -> str:
    aligned = zip(cells, COLUMNS, widths, strict=True)  # every line has one cell per column
    return "  ".join(f"{cell:{align}{width}}" for cell, (_, align), width in aligned).rstrip()


def heading(doc: dict[str, Any]) -> str:
    shape = doc["kv_shape"]
    load = doc["load_average"]
    return (f"kvconform bench on {doc['platform']} ({doc['device_name']}, {doc['attn_backend']}), vLLM "
            f"{doc['versions']['vllm']}: KV {doc['kv_dtype']}, block {doc['block_size']}, shape {shape['name']} "
            f"({shape['layers']} layers x {shape['kv_heads']} KV heads x {shape['head_size']}, "
            f"{shape['bytes_per_token'] // 1024} KiB/token), median of {doc['repeat']}, "
            f"{doc['torch_threads']} torch thread(s); "
            f"load average {load['before'][0]:.2f} before, {load['after'][0]:.2f} after")


def report(doc: dict[str, Any], rows: list[Row], out: TextIO = sys.stdout) -> None:
    print(heading(doc), file=out)
    if rows:
        print(table(rows), file=out)
    else:
        print("no connector was measured", file=out)
    for entry in doc["known_failures"]:
        print(f"known   {entry['connector']}: [{entry['class'] or 'unclassified'}] {entry['reason']} "
              f"({entry['link']}; {entry['where']})", file=out)
    for entry in doc["skipped"]:
        reason = entry["reason"].removeprefix(f"{entry['connector']}: ")  # the line names the connector already
        print(f"skipped {entry['connector']}: {reason}", file=out)
    for entry in doc["errors"]:
        print(f"error   {entry['connector']}: {entry['error']}", file=out)


def write_json(doc: dict[str, Any], destination: str) -> None:
    text = json.dumps(doc, indent=2) + "\n"
    if destination == "-":
        sys.stdout.write(text)
        return
    try:
        Path(destination).write_text(text)
    except OSError as exc:
        raise UserError(f"--json: cannot write {destination}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from .expected import KnownResults

    quiet_vllm()
    sizes = parse_sizes(args.sizes)
    check_numbers(args)
    check_output(args.json)
    spec, backend = target(args)
    block_size = block_size_for(backend, args.block_size)
    check_sizes(sizes, block_size)
    chosen = connectors(args)
    known = KnownResults.load(spec.name, backend, args.dtype)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    outcome = bench_all(args, spec, backend, block_size, sizes, chosen, known)
    doc = document(args, spec, backend, block_size, sizes, outcome, load_before, os.getloadavg())
    if args.json != "-":
        report(doc, outcome.rows)
    if args.json:
        write_json(doc, args.json)
    failing = below(outcome.rows, args.min_ratio)
    for row in failing:
        print(f"kvconform bench: {row.connector} {row.op} at {row.size_tokens} tokens: {row.gbps:.3f} GB/s is "
              f"{row.ratio:.2f}x the {row.baseline} baseline, below --min-ratio {args.min_ratio}", file=sys.stderr)
    for entry in outcome.errors:
        print(f"kvconform bench: could not measure {entry['connector']}: {entry['error']}", file=sys.stderr)
    return exit_status(outcome, args.min_ratio)
