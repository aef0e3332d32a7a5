"""``kvconform gate --run`` from kvconform installed as a wheel into the site-packages that holds vLLM.

How CI installs it, and where an editable install hides a difference: pytest puts
a test module's package root first on ``sys.path`` unless told otherwise, and for
a wheel that root is the folder of the installed vLLM, which then came before the
gate's overlay of the change (``pipelines/gate/suite_run.py`` says how the gate keeps it
first). The image is the pipeline tests' stand-in for vLLM CI's (this
environment's packages without kvconform, ``tests/wheel_build.py``) with this
checkout's wheel installed beside its vLLM; the gate runs from a folder of its
own, with ``python -P``, so nothing of the checkout is on the path.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from kvconform.pipelines.gate.tested_vllm import read_imports
from tests.gate.vllm_checkout import COMMENTED, ROUNDTRIP_ONLY, change_example
from tests.load import stretched
from tests.wheel_build import build_wheel, install_beside_vllm, vllm_image

pytestmark = pytest.mark.timeout(stretched(1200))

WHERE = "import importlib.util as u; print(u.find_spec('kvconform').origin); print(u.find_spec('vllm').origin)"


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory) -> tuple[Path, Path]:
    """The image's Python, with the wheel installed beside its vLLM, and that site-packages folder."""
    wheel = build_wheel(tmp_path_factory)
    bin_dir = vllm_image(tmp_path_factory.mktemp("wheel-image"))
    return bin_dir / "python3", install_beside_vllm(bin_dir, wheel)


def test_a_comment_passes_from_a_wheel_beside_the_installed_vllm(wheel_python, vllm_repo, tmp_path):
    python, site = wheel_python
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(python), "-P", "-c", WHERE], cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=stretched(60), check=True).stdout.split()
    assert [Path(origin).parents[1] for origin in where] == [site, site], where  # one folder holds both
    assert Path(importlib.util.find_spec("kvconform").origin).parents[1] != site

    head = change_example(vllm_repo, COMMENTED, "a comment")
    results = tmp_path / "results"
    gate = subprocess.run([str(python), "-P", "-m", "kvconform", "gate", "--repo", str(vllm_repo.path),
                           "--base", vllm_repo.base, "--head", head, "--run", "--platform=cpu",
                           "-k", f"{ROUNDTRIP_ONLY} and float32", "--results", str(results)],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=stretched(900))
    out = gate.stdout + gate.stderr
    assert gate.returncode == 0, out[-3000:]
    assert (f"kvconform gate: PASS: ExampleConnector, MultiConnector on cpu (tested checkout {head[:12]} "
            "over the compiled parts of the installed vllm") in gate.stdout, out[-3000:]
    records = read_imports(results / "results.json")
    assert "gw0" in {record.get("process") for record in records}, records
    # each of them imported the change: the overlay the gate made, which is gone once it ended
    overlays = {Path(str(record.get("file"))).parents[1] for record in records}
    assert len(overlays) == 1 and next(iter(overlays)).name.startswith("kvconform-overlay-"), records
    assert all(record.get("commit") == head for record in records), records
