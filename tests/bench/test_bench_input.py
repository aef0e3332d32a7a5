"""``kvconform bench``'s command line: options parse, bad input is one line and exit status 2."""

from __future__ import annotations

import re

import pytest

from kvconform.conformance.bench import inputs, measurements
from kvconform.conformance.cli import build_parser
from kvconform.errors import UserError


def parse(*args: str):
    return build_parser("bench").parse_args(["bench", *args])


def test_every_option_parses():
    args = parse("--connector", "ExampleConnector", "--connector", "pkg.mod:Mine", "--platform", "cpu",
                 "--attn-backend", "CPU_ATTN", "--sizes", "32,64", "--repeat", "2", "--kv-shape", "tiny",
                 "--dtype", "bfloat16", "--block-size", "32", "--json", "out.json", "--min-ratio", "0.5",
                 "--threads", "1", "--storage-dir", "/tmp")
    assert args.connector == ["ExampleConnector", "pkg.mod:Mine"]
    assert (args.platform, args.attn_backend, args.sizes, args.repeat) == ("cpu", "CPU_ATTN", "32,64", 2)
    assert (args.kv_shape, args.dtype, args.block_size) == ("tiny", "bfloat16", 32)
    assert (args.json, args.min_ratio, args.threads, str(args.storage_dir)) == ("out.json", 0.5, 1, "/tmp")


def test_defaults_measure_every_connector_at_three_sizes_without_a_gate():
    args = parse()
    assert args.connector == [] and args.json is None and args.min_ratio is None
    assert args.block_size is None  # the backend's preferred size
    assert inputs.parse_sizes(args.sizes) == [256, 1024, 4096]


def test_the_block_size_follows_the_backend_as_the_suite_does():
    """vLLM's CPU_ATTN prefers 32 and its kernels refuse 16 (multiples of 32 only)."""
    assert inputs.block_size_for("CPU_ATTN", None) == 32
    assert inputs.block_size_for("CPU_ATTN", 64) == 64
    with pytest.raises(UserError, match=re.escape("--block-size: CPU_ATTN does not run block size 16 (vLLM: its "
                                                  "kernel block sizes are")):
        inputs.block_size_for("CPU_ATTN", 16)


def test_json_without_a_file_means_stdout():
    assert parse("--json").json == "-"
    assert parse("--json", "--min-ratio", "2").json == "-"


def test_sizes_are_deduplicated_in_order():
    assert inputs.parse_sizes(" 64, 32,64 ") == [64, 32]


@pytest.mark.parametrize("sizes, says", [
    ("abc", "not a whole number"), ("", "not a whole number"), ("32,,64", "not a whole number"),
    ("0", "positive number"), ("-16", "positive number"), (str(1 << 20), "up to"),
])
def test_bad_sizes(sizes, says):
    with pytest.raises(UserError, match=re.escape(says)):
        inputs.parse_sizes(sizes)


def test_sizes_must_be_whole_blocks():
    inputs.check_sizes([32, 64], 32)
    with pytest.raises(UserError, match=re.escape("--sizes: 48 must be a multiple of the block size (32)")):
        inputs.check_sizes([32, 48], 32)


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.status == 2, (result.out, result.err)
    assert result.err.startswith("kvconform bench: error: ") and result.err.count("\n") == 1, result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


@pytest.mark.parametrize("args, says", [
    (("--sizes", "256,abc"), "--sizes: 'abc'"),
    (("--platform", "cpu", "--sizes", "100"), "--sizes: 100 must be a multiple of the block size (32)"),
    (("--platform", "cpu", "--sizes", "32", "--block-size", "64"), "block size (64)"),
    (("--platform", "cpu", "--block-size", "16"), "--block-size: CPU_ATTN does not run block size 16"),
    (("--repeat", "0"), "--repeat: 0 must be at least 1"),
    (("--threads", "0"), "--threads: 0 must be at least 1"),
    (("--min-ratio", "-1"), "--min-ratio: -1.0 must be a positive number"),
    (("--min-ratio", "nan"), "--min-ratio: nan"),
    (("--min-ratio", "0"), "--min-ratio: 0.0"),
    (("--json", "/no/such/folder/out.json"), "--json: the folder of /no/such/folder/out.json does not exist"),
    (("--storage-dir", "/no/such/folder"), "--storage-dir: /no/such/folder is not a directory"),
    (("--platform", "cpu", "--attn-backend", "FLASH_ATTN"), "FLASH_ATTN cannot serve KV connectors on cpu"),
])
def test_bad_input_is_one_line_and_exit_2(bench, args, says):
    assert_one_line_error(bench(*args), says)


def test_an_unknown_connector_is_one_line_and_exit_2(bench):
    assert_one_line_error(bench("--platform", "cpu", "--connector", "NoSuchConnector"),
                          "unknown connector 'NoSuchConnector'", "ExampleConnector")


def test_a_connector_module_that_does_not_import_is_one_line_and_exit_2(bench):
    assert_one_line_error(bench("--platform", "cpu", "--connector", "no_such_pkg.mod:Conn"),
                          "module 'no_such_pkg.mod' does not import")


def test_a_malformed_profiles_file_is_one_line_and_exit_2(bench, tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("connectors:\n  ExampleConnector:\n    chekcs: [roundtrip]\n")
    assert_one_line_error(bench("--platform", "cpu", "--profiles", str(profiles), "--connector", "ExampleConnector"),
                          f"{profiles}:3", "chekcs")


@pytest.mark.parametrize("args", [("--repeat", "many"), ("--block-size", "24"), ("--kv-shape", "huge"),
                                  ("--platform", "tpu")])
def test_argparse_rejects_malformed_values_with_exit_2(bench, args):
    result = bench(*args)
    assert result.status == 2 and "Traceback" not in result.err
    assert result.err.strip().splitlines()[-1].startswith("kvconform bench: error: argument")


def _row(ratio: float) -> measurements.Row:
    return measurements.Row("C", "storage", "save", 16, 1000, 1.0, [1.0], 1e-6, 1.0, [1.0], 1e-6 / ratio, ratio)


KNOWN = {"connector": "Y", "error": "AttributeError: x", "class": "bug", "reason": "crashes", "link": "l",
         "where": "cpu.yaml:3"}


@pytest.mark.parametrize("ratios, min_ratio, errors, known, status", [
    ([0.5, 2.0], None, [], [], 0),
    ([0.5, 2.0], 0.5, [], [], 0),
    ([0.5, 2.0], 0.6, [], [], 1),
    ([2.0], None, [{"connector": "X", "error": "boom"}], [], 1),
    ([2.0], None, [], [KNOWN], 0),  # a failure an expectation names is its finding, not an error
    ([], 10.0, [], [], 0),
])
def test_exit_status(ratios, min_ratio, errors, known, status):
    measured = measurements.Measurements([_row(r) for r in ratios], [], errors, known)
    assert measurements.exit_status(measured, min_ratio) == status
