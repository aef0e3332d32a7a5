"""The results of a ``kvconform bench`` run as one document: what ``--json`` writes and the table's heading reads.

Its fields are the file benchmarks/README.md describes (``kvconform_bench`` is the format's version):
the platform, backend and KV cache the run measured with, the versions and load average around it, each
measurement, and each connector not measured and why.
"""

from __future__ import annotations

import json
import platform as host
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvconform.errors import UserError

from .measurements import below

if TYPE_CHECKING:
    from .measurements import Measurements, Setup

FORMAT_VERSION = 1


def document(setup: Setup, measured: Measurements, min_ratio: float | None, load_before: tuple[float, float, float],
             load_after: tuple[float, float, float]) -> dict[str, Any]:
    import torch
    import vllm

    from ..engine.kvcache import KV_DTYPES
    from .timing import GEOMETRIES

    spec = setup.spec
    geometry = GEOMETRIES[setup.kv_shape]
    return {
        "kvconform_bench": FORMAT_VERSION,
        "platform": spec.name, "device": spec.device(0), "device_name": spec.device_name(0),
        "attn_backend": setup.backend, "kv_dtype": setup.dtype, "block_size": setup.block_size,
        "kv_shape": {"name": geometry.name, "layers": geometry.layers, "kv_heads": geometry.kv_heads,
                     "head_size": geometry.head_size,
                     "bytes_per_token": geometry.bytes_per_token(KV_DTYPES[setup.dtype][0])},
        "sizes": setup.sizes, "repeat": setup.repeat, "torch_threads": torch.get_num_threads(),
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__, "python": host.python_version()},
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "min_ratio": min_ratio,
        "results": [asdict(row) for row in measured.rows],
        "skipped": measured.skipped,
        "known_failures": measured.known_failures,
        "errors": measured.errors,
        "below_min_ratio": [{"connector": r.connector, "op": r.op, "size_tokens": r.size_tokens, "ratio": r.ratio}
                            for r in below(measured.rows, min_ratio)],
    }


def write_json(doc: dict[str, Any], destination: str) -> None:
    """The document to ``destination`` (``-``: stdout); a file that cannot be written is a UserError."""
    text = json.dumps(doc, indent=2) + "\n"
    if destination == "-":
        sys.stdout.write(text)
        return
    try:
        Path(destination).write_text(text)
    except OSError as exc:
        raise UserError(f"--json: cannot write {destination}: {exc.strerror}") from None
