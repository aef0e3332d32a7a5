"""``kvconform bench``'s printed report: a heading, one table line per measurement, then the findings.

Read from the run's document (``document.py``) and its rows, so the table and the JSON file never
disagree; known failures, skips and errors follow the table, one line each, naming the connector.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from .measurements import Row

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
