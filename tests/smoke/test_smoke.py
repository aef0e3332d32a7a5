"""``make smoke-accelerator`` tested on CPU: what it can show here, it shows.

The torch-only part runs for real (detection, the guard on real tensors; pinning is
"not applicable" on CPU and says so); the selection plugin is run on a small test
project; the bounded vLLM part is run once, narrowed to one check, to prove that
JUnit and JSON land in the one folder beside torch-only.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from kvconform import platforms
from kvconform.conformance.smoke import __main__ as smoke
from kvconform.conformance.smoke import torch_only
from tests.load import stretched


def test_torch_only_part_on_cpu():
    report, ok = torch_only.run("cpu")
    assert ok, report
    outcomes = {row["name"]: row["outcome"] for row in report["checks"]}
    assert outcomes["platform detection"] == "passed"
    assert outcomes["xdist worker pinning"] == "not applicable"
    assert outcomes["guard: cache-device write"] == "passed"


def test_pinning_is_checked_in_real_worker_processes():
    """With a visibility variable, each pinned worker process is asked what it sees (here: no such device)."""
    spec = platforms.get("cuda")
    if platforms.probe("cuda").detected:
        pytest.skip("CUDA devices are visible here: the case needs a torch that sees none")
    row = torch_only.pinning(spec, 2)
    # a CPU torch sees no CUDA device even when pinned: the check must fail, not pass vacuously
    assert row.outcome == "failed" and "sees 0 devices" in row.detail, row


def test_suite_command_is_bounded():
    command = smoke.suite_command(platforms.get("cuda"), 2, smoke.Path("/out"), ["-k", "contract"]).argv()
    assert command[command.index("-p") + 1] == "kvconform.conformance.smoke.first_cases"
    assert [a.removeprefix("--connector=") for a in command if a.startswith("--connector=")] == list(smoke.CONNECTORS)
    assert "--attn-backend=FLASH_ATTN" in command and "--junitxml=/out/junit.xml" in command
    assert "--kvconform-json=/out/results.json" in command and command[-2:] == ["-k", "contract"]
    assert command[command.index("-n") + 1] == "2"  # one xdist worker per device


def test_select_keeps_the_first_case_per_check_and_connector(tmp_path):
    (tmp_path / "test_axes.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.parametrize("dtype", ["float16", "bfloat16", "fp8"])
        def test_roundtrip(dtype):
            pass

        @pytest.mark.parametrize("layout", ["A", "B"])
        def test_layout(layout):
            pass
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "-p", "kvconform.conformance.smoke.first_cases", "--collect-only", "-q", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=stretched(300))
    assert out.returncode == 0, out.stdout + out.stderr
    ids = sorted(line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line)
    assert ids == ["test_layout[A]", "test_roundtrip[float16]"]


def test_bad_platform_is_one_line(capsys):
    assert smoke.main(["--out", "/nonexistent-never-created", "--platform", "xpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("smoke: --platform=xpu was requested")


@pytest.mark.timeout(stretched(900))
def test_smoke_run_writes_one_folder(tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "smoke"
    expectations = tmp_path / "expect-nothing.yaml"  # the check's outcome is not the point here
    expectations.write_text("platform: cpu\nexpectations: []\n")
    proc = subprocess.run([sys.executable, "-m", "kvconform.conformance.smoke", "--out", str(out), "--platform", "cpu",
                           "--", "-k", "test_contract_scheduler", "--kvconform-expectations", str(expectations)],
                          capture_output=True, text=True, timeout=stretched(900), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "results.json", "torch-only.json"]
    results = json.loads((out / "results.json").read_text())
    assert results  # the suite's own JSON, written into the same folder
