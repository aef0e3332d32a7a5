"""``kvconform gate --emit-pipeline``: Buildkite steps for exactly the selected connectors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.gate.vllm_checkout import CONNECTORS

V1 = f"{CONNECTORS}/v1"


def emitted(gate, repo, head, *extra: str):
    result = gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--emit-pipeline", *extra)
    assert result.status == 0, result.err
    return result, yaml.safe_load(result.out)


def pytest_lines(pipeline: dict) -> list[str]:
    """Every pytest command line of the pipeline's test steps."""
    lines = []
    for group in pipeline["steps"]:
        for step in group.get("steps", []):
            lines += [line for line in step["commands"] if "pytest" in line]
    return lines


def groups(pipeline: dict) -> list[str]:
    return [step["key"] for step in pipeline["steps"] if "group" in step]


def test_a_connector_change_runs_on_every_platform_it_claims(gate, vllm_repo, tmp_path):
    head = vllm_repo.touch(f"{V1}/example_connector.py")
    out = tmp_path / "pipeline.yml"
    _, _ = emitted(gate, vllm_repo, head, "-o", str(out))
    pipeline = yaml.safe_load(out.read_text())
    assert groups(pipeline) == ["kvconform-cuda", "kvconform-rocm", "kvconform-xpu", "kvconform-cpu"]
    named = {name for line in pytest_lines(pipeline) for name in re.findall(r"--connector=(\S+)", line)}
    assert named == {"ExampleConnector", "MultiConnector"}
    assert all("python3 -P -m pytest --pyargs kvconform.conformance " in line for line in pytest_lines(pipeline))
    schema = subprocess.run([str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema",
                             "vendor.buildkite", str(out)], capture_output=True, text=True, check=False)
    assert schema.returncode == 0, schema.stdout + schema.stderr


def test_tests_run_in_parallel_then_one_wait_then_the_reports(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/example_connector.py", f"{V1}/moriio/moriio_common.py")
    _, pipeline = emitted(gate, vllm_repo, head)
    kinds = ["group" if "group" in s else "wait" if "wait" in s else "report" for s in pipeline["steps"]]
    assert kinds == ["group"] * 4 + ["wait", "report"]  # one report for every platform
    [report] = [s for s in pipeline["steps"] if s.get("key", "").startswith("kvconform-report")]
    assert report["key"] == "kvconform-report-cuda-rocm-xpu-cpu"
    assert all(f"junit/{platform}/*.xml" in "".join(report["commands"]) for platform in ("cuda", "rocm", "xpu", "cpu"))
    keys = [s["key"] for s in pipeline["steps"] if "key" in s]
    assert len(keys) == len(set(keys))


def test_a_connector_claiming_one_platform_gets_steps_there_only(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/moriio/moriio_common.py")
    _, pipeline = emitted(gate, vllm_repo, head)
    assert groups(pipeline) == ["kvconform-rocm"]
    assert all("--connector=MoRIIOConnector" in line and "--platform=rocm" in line
               for line in pytest_lines(pipeline))


def test_platform_restricts_the_pipeline(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/decode_bench_connector.py")
    _, pipeline = emitted(gate, vllm_repo, head, "--platform=cpu")
    assert groups(pipeline) == ["kvconform-cpu"]
    assert pytest_lines(pipeline) and all("--connector=DecodeBenchConnector" in line
                                           for line in pytest_lines(pipeline))


def test_nothing_selected_is_an_empty_pipeline_and_a_note(gate, vllm_repo):
    head = vllm_repo.touch("README.md")
    result, pipeline = emitted(gate, vllm_repo, head)
    assert pipeline == {"steps": []}
    assert "the pipeline has no steps" in result.err
