"""The bench's run: each chosen connector measured beside its baseline, or said why not.

A connector whose profile rules out a round-trip here, a P/D pair, or a skip entry of the suite's
expectations is skipped before anything is built; a missing package its profile declares is a skip, any
other missing module an error; a crash is a known failure where an expectation names it (``expected.py``),
else an error, reported in full: never a time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvconform.errors import one_line

from ..connectors.requirements import declared_package, missing_module_failure

if TYPE_CHECKING:
    from kvconform.platforms.spec import PlatformSpec

    from ..connectors.selection import ConnectorParam
    from .expected import KnownResults
    from .timing import SizeSamples


@dataclass(frozen=True)
class Setup:
    """What every connector is measured with: the platform and backend, the KV cache, the sizes and repeats."""

    spec: PlatformSpec
    backend: str
    dtype: str
    block_size: int
    kv_shape: str  # a name in timing.GEOMETRIES
    sizes: list[int]
    repeat: int
    storage_dir: Path | None  # where the connectors' temporary storage folders go (None: the system's)


@dataclass
class Row:
    """One connector, size and operation: the median time and throughput, its baseline's, and their ratio."""

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
class Measurements:
    """What a bench run measured, and each connector it did not measure with the reason."""

    rows: list[Row]
    skipped: list[dict[str, str]]  # {"connector", "reason"}
    errors: list[dict[str, str]]  # {"connector", "error"}
    known_failures: list[dict[str, Any]] = field(default_factory=list)  # {"connector", "error"} and the finding


def below(rows: list[Row], min_ratio: float | None) -> list[Row]:
    return [] if min_ratio is None else [r for r in rows if r.ratio < min_ratio]


def exit_status(measured: Measurements, min_ratio: float | None) -> int:
    """1 when a connector could not be measured or is slower than ``min_ratio`` allows; else 0."""
    return 1 if measured.errors or below(measured.rows, min_ratio) else 0


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


def bench_all(setup: Setup, chosen: list[ConnectorParam], known: KnownResults) -> Measurements:
    """Each of ``chosen`` measured (or skipped, or failed) in turn, in one scratch folder and one process group."""
    from vllm.config import VllmConfig

    from ..engine.distributed import single_rank_parallel_state
    from ..engine.kvcache import CacheShape
    from ..engine.rig import ConnectorRefused
    from .timing import GEOMETRIES, BenchRig, measure, write_model

    spec = setup.spec
    measured = Measurements([], [], [])
    geometry = GEOMETRIES[setup.kv_shape]
    max_model_len = max(setup.sizes) + 2 * setup.block_size
    shape = CacheShape(dtype=setup.dtype, block_size=setup.block_size)
    with (tempfile.TemporaryDirectory(prefix="kvconform-bench-", dir=setup.storage_dir) as scratch,
          single_rank_parallel_state(VllmConfig())):  # as the suite's worker_process fixture, once per process
        model_dir = write_model(Path(scratch) / "model", geometry, max_model_len)
        for connector in chosen:
            reason = _not_benched(connector, spec, known)
            if reason:
                measured.skipped.append({"connector": connector.name, "reason": reason})
                continue
            _progress(f"kvconform bench: measuring {connector.name} ...")
            with tempfile.TemporaryDirectory(prefix=f"{connector.name}-", dir=scratch) as storage:
                rig = BenchRig(connector, spec, setup.backend, shape, model_dir, Path(storage), spec.device(0),
                               geometry=geometry, max_model_len=max_model_len)
                try:
                    connector.load_class()
                    baseline, samples = measure(rig, setup.sizes, setup.repeat)
                except ModuleNotFoundError as exc:
                    # a skip only for a package the profile declares, as the suite's needs.connector_class
                    package = declared_package(connector, exc.name)
                    if package is None:
                        measured.errors.append({"connector": connector.name,
                                                "error": missing_module_failure(connector, exc)})
                    else:
                        measured.skipped.append({"connector": connector.name, "reason": f"importing it failed for "
                                                 f"its missing package {package}: {exc}"})
                except ConnectorRefused as exc:
                    measured.skipped.append({"connector": connector.name, "reason": str(exc)})
                except Exception as exc:  # noqa: BLE001 - a connector's crash is its result, reported in full
                    finding, mismatch = known.failure(connector.name, exc)
                    error = one_line(f"{type(exc).__name__}: {exc}")
                    if finding is not None:
                        measured.known_failures.append({"connector": connector.name, "error": error, **finding})
                    else:
                        measured.errors.append({"connector": connector.name,
                                                "error": error + (f" ({mismatch})" if mismatch else "")})
                else:
                    measured.rows.extend(rows_for(connector.name, baseline, samples))
    return measured
