"""``kvconform bench``'s printed report, from a document and rows made here (no vLLM).

The real run (test_bench_run.py) shows the same report end to end; these cases pin its parts: the heading,
one aligned table line per measurement, a line per known failure, skip and error naming the connector, and
a run that measured nothing saying so.
"""

from __future__ import annotations

import io

from kvconform.conformance.bench import text_report
from kvconform.conformance.bench.measurements import Row

DOC = {"platform": "cpu", "device_name": "x86_64", "attn_backend": "CPU_ATTN", "versions": {"vllm": "0.32.0"},
       "kv_dtype": "float16", "block_size": 32, "repeat": 3, "torch_threads": 1,
       "kv_shape": {"name": "tiny", "layers": 2, "kv_heads": 2, "head_size": 32, "bytes_per_token": 2048},
       "load_average": {"before": [1.5, 1.0, 1.0], "after": [2.25, 1.0, 1.0]},
       "known_failures": [{"connector": "Known", "error": "E: x", "class": "bug", "reason": "crashes", "link": "L",
                           "where": "cpu.yaml:3"}],
       "skipped": [{"connector": "Pair", "reason": "Pair: a P/D pair"}],
       "errors": [{"connector": "Broken", "error": "AttributeError: boom"}]}


def _row(connector: str, op: str, ratio: float) -> Row:
    return Row(connector, "storage", op, 32, 1 << 20, 0.002, [0.002], 0.5, 0.001, [0.001], 0.5 / ratio, ratio)


def _printed(rows: list[Row]) -> list[str]:
    out = io.StringIO()
    text_report.report(DOC, rows, out)
    return out.getvalue().splitlines()


def test_the_report_is_the_heading_the_aligned_table_and_a_line_per_finding():
    lines = _printed([_row("ExampleConnector", "save", 0.5), _row("X", "load", 12.0)])
    assert lines[0] == ("kvconform bench on cpu (x86_64, CPU_ATTN), vLLM 0.32.0: KV float16, block 32, shape tiny "
                        "(2 layers x 2 KV heads x 32, 2 KiB/token), median of 3, 1 torch thread(s); "
                        "load average 1.50 before, 2.25 after")
    header, first, second = lines[1:4]
    assert header.split() == ["connector", "baseline", "tokens", "MiB", "op", "ms/request", "GB/s", "baseline",
                              "GB/s", "ratio"]
    assert first.split() == ["ExampleConnector", "storage", "32", "1.0", "save", "2.00", "0.500", "1.000", "0.50"]
    assert second.split()[0] == "X" and second.split()[-1] == "12.00"
    # the columns line up: the last column is right-aligned, so every line ends where its heading ends
    assert len(header) == len(first) == len(second)
    assert first.index("storage") == second.index("storage") == header.index("baseline")
    assert lines[4:] == ["known   Known: [bug] crashes (L; cpu.yaml:3)", "skipped Pair: a P/D pair",
                         "error   Broken: AttributeError: boom"]


def test_a_run_that_measured_nothing_says_so():
    assert _printed([])[1] == "no connector was measured"

