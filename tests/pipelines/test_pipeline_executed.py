"""``kvconform pipeline --platform cpu``, executed as a Buildkite agent would run it in a stock vLLM CI image.

The other pipeline tests run commands against recording fakes; this one runs a
generated test step and the report step for real, in what stands in for vLLM CI:
a fresh folder as the vLLM checkout (with a ``vllm/`` package of its own that must
not shadow the installed vLLM), and a Python that has vLLM, torch and pytest but
not kvconform (a venv that sees this environment's site-packages through a folder
of links, without kvconform's files). The step's ``env`` is exported and ``$$``
unescaped as upload does; a ``buildkite-agent`` script serves ``artifact
download`` from a folder holding the wheel built from this checkout (as the
bootstrap step builds and uploads it), copies ``artifact upload``s there and
records ``annotate``. What comes out is the build's annotation (``summary.md``).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from pipeline_testkit import uploaded

from kvconform.pipelines.install import WHEEL_DIR, version, wheel_path
from tests.load import stretched
from tests.wheel_build import build_wheel, image_site, vllm_image

ROOT = Path(__file__).resolve().parents[2]
# One connector, a few tests: enough to run the suite end to end (PYTEST_ADDOPTS is pytest's own); the workload
# checks among them, whose generated workloads must not depend on where kvconform is installed.
SELECTED = {"test_roundtrip": "float32", "test_workload": ""}  # test function prefix -> a word its ids must hold
SELECTION = "-k '(test_roundtrip and float32) or test_workload'"
# What the stand-in image's own environment sets (a Dockerfile's ENV), where this one sets it: an image of the plain
# vLLM wheel on CPU sets VLLM_TARGET_DEVICE=cpu, without which vLLM finds no platform (make test-vllm033 sets it).
IMAGE_ENV = ("VLLM_TARGET_DEVICE", "VLLM_CACHE_ROOT")

AGENT = r"""#!/usr/bin/env bash
# buildkite-agent, as far as the steps use it: artifacts live in $FAKE_ARTIFACTS.
{ printf '%s ' "$@"; echo; } >> "$FAKE_ARTIFACTS.calls"
case "$1 $2" in
  "artifact download")
    found=0
    for path in "$FAKE_ARTIFACTS"/$3; do
      [ -f "$path" ] || continue
      rel=${path#"$FAKE_ARTIFACTS"/}; mkdir -p "$4/$(dirname "$rel")"; cp "$path" "$4/$rel"; found=1
    done
    [ "$found" = 1 ] || { echo "fatal: no artifacts found for downloading" >&2; exit 1; } ;;
  "artifact upload")
    for path in $3; do mkdir -p "$FAKE_ARTIFACTS/$(dirname "$path")"; cp "$path" "$FAKE_ARTIFACTS/$path"; done ;;
  "annotate "*) cat > "$FAKE_ARTIFACTS.annotation" ;;
  "step get") echo passed ;;
  *) echo "fake buildkite-agent: unexpected: $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, built as the bootstrap step builds it (``pip wheel --no-deps``), from a copy."""
    built = build_wheel(tmp_path_factory)
    assert f"{WHEEL_DIR}/{built.name}" == wheel_path()  # the name the steps download
    return built


class Agent:
    """One build: its artifacts, and jobs run in fresh checkouts with a fresh image each."""

    def __init__(self, root: Path):
        self.root = root
        self.artifacts = root / "artifacts"
        self.artifacts.mkdir()
        self.fake_bin = root / "agent-bin"
        self.fake_bin.mkdir()
        agent = self.fake_bin / "buildkite-agent"
        agent.write_text(AGENT)
        agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
        self.jobs = 0

    def upload_wheel(self, wheel: Path) -> None:
        (self.artifacts / WHEEL_DIR).mkdir()
        shutil.copy(wheel, self.artifacts / WHEEL_DIR / wheel.name)

    def calls(self) -> list[str]:
        path = Path(f"{self.artifacts}.calls")
        return path.read_text().splitlines() if path.exists() else []

    def annotation(self) -> str:
        return Path(f"{self.artifacts}.annotation").read_text()

    def run(self, step: dict, without: tuple[str, ...] = (),
            **extra_env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
        """The step's commands in a fresh vLLM checkout and image, as ``bash -e -c``; then its artifact upload."""
        self.jobs += 1
        job = self.root / f"job{self.jobs}"
        checkout = job / "checkout"
        (checkout / "vllm").mkdir(parents=True)
        shadow = "raise ImportError('the checkout shadowed the installed vLLM')\n"
        (checkout / "vllm" / "__init__.py").write_text(shadow)
        bin_dir = vllm_image(job, without)
        env = {"PATH": f"{bin_dir}:{self.fake_bin}:/usr/bin:/bin", "HOME": str(job),
               # PIP_NO_INDEX: whatever the install needs is here already; never the network
               "FAKE_ARTIFACTS": str(self.artifacts), "PIP_NO_INDEX": "1",
               "BUILDKITE_PARALLEL_JOB": "0", **{name: os.environ[name] for name in IMAGE_ENV if name in os.environ},
               **step.get("env", {}), **extra_env}
        script = "\n".join(uploaded(command) for command in step["commands"])
        result = subprocess.run(["bash", "-e", "-c", script], cwd=checkout, env=env, capture_output=True, text=True,
                                timeout=stretched(300))
        for pattern in step.get("artifact_paths", []):
            for path in checkout.glob(pattern):
                target = self.artifacts / path.relative_to(checkout)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
        return result, checkout, bin_dir


def generated_pipeline(*args: str) -> dict:
    """``kvconform pipeline`` as the bootstrap step runs it: its own process, YAML on stdout."""
    out = subprocess.run([sys.executable, "-m", "kvconform", "pipeline", *args], capture_output=True, text=True,
                         timeout=stretched(60), check=True)
    return yaml.safe_load(out.stdout)


def steps_of(pipeline: dict) -> tuple[dict, dict]:
    [group, _wait, report] = pipeline["steps"]
    [test] = group["steps"]
    return test, report


def test_a_cpu_step_and_the_report_run_in_an_image_without_kvconform(tmp_path, wheel):
    test, report = steps_of(generated_pipeline("--platform", "cpu", "--connector", "ExampleConnector"))
    agent = Agent(tmp_path)
    agent.upload_wheel(wheel)

    probe = vllm_image(tmp_path / "probe")
    no_kvconform = subprocess.run([str(probe / "python3"), "-P", "-c", "import kvconform"], capture_output=True,
                                  timeout=stretched(60))
    assert no_kvconform.returncode != 0, "the stand-in image must lack kvconform"
    subprocess.run([str(probe / "python3"), "-P", "-c", "import vllm, pytest, pip"], check=True, timeout=stretched(120))

    result, checkout, bin_dir = agent.run(test, PYTEST_ADDOPTS=SELECTION)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "unrecognized arguments" not in result.stderr
    assert not (checkout / "vllm" / "__pycache__").exists(), "a Python of the run imported the checkout's vllm/"
    # kvconform came from the build's wheel, installed into the image's own site-packages
    installed = subprocess.run([str(bin_dir / "python3"), "-P", "-c", "import kvconform; print(kvconform.__file__)"],
                               capture_output=True, text=True, timeout=stretched(60), check=True)
    assert Path(installed.stdout.strip()).is_relative_to(image_site(bin_dir))
    [record] = image_site(bin_dir).glob("kvconform-*.dist-info/direct_url.json")
    assert (checkout / wheel_path()).as_uri() in record.read_text()
    [junit_path] = test["artifact_paths"]
    junit = ET.parse(checkout / junit_path).getroot()
    cases = junit.findall(".//testcase")
    names = [case.get("name", "") for case in cases]
    for prefix in SELECTED:  # every selected kind ran, and nothing else
        assert any(name.startswith(prefix) for name in names), names
    assert all(any(name.startswith(prefix) and word in name for prefix, word in SELECTED.items())
               for name in names), names
    assert not junit.findall(".//failure") and not junit.findall(".//error")
    assert (agent.artifacts / junit_path).is_file()

    result, checkout, bin_dir = agent.run(report)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (checkout / "reports/out/summary.md").read_text()
    assert agent.annotation() == summary
    assert "annotate --style success --context kvconform-cpu " in agent.calls()
    assert summary.startswith("## kvconform conformance: passing (every outcome as expected)\n"), summary
    rows = [line for line in summary.splitlines() if line.startswith("| ExampleConnector |")]
    passed = len(cases) - len(junit.findall(".//skipped"))
    assert rows and sum(int(n) for row in rows for n in re.findall(r"(\d+) passed", row)) == passed, summary


def test_an_image_without_kvconform_and_a_build_without_its_wheel_fails_in_one_line(tmp_path):
    test, _ = steps_of(generated_pipeline("--platform", "cpu", "--connector", "ExampleConnector"))
    result, _, _ = Agent(tmp_path).run(test)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("kvconform: this image has no kvconform and this build no "
                                f"{wheel_path()}: upload the pipeline with the bootstrap.yml"), result.stderr
    assert "unrecognized arguments" not in result.stderr and "Traceback" not in result.stderr
    assert not (Path(tmp_path) / "job1/checkout/reports/out/junit").exists()  # pytest never ran


def test_the_bootstrap_builds_installs_and_uploads_the_wheel_of_kvconform_not_of_the_checkout():
    """bootstrap.yml's commands, read: the wheel comes from KVCONFORM_SPEC, never `.` (the vLLM checkout)."""
    bootstrap = yaml.safe_load((ROOT / "pipelines/bootstrap.yml").read_text())
    [step] = bootstrap["steps"]
    commands = [uploaded(command) for command in step["commands"]]
    joined = "\n".join(commands)
    assert "pip wheel" in joined and "--no-deps" in joined and f"--wheel-dir {WHEEL_DIR} " in joined
    assert '"${KVCONFORM_SPEC:?' in joined
    assert f'buildkite-agent artifact upload "{WHEEL_DIR}/kvconform-*.whl"' in commands
    assert not [c for c in commands if c.rstrip().endswith(" .") or " . " in c], "installs the checkout"


def test_an_image_without_kvconform_or_pip_fails_in_one_line(tmp_path, wheel):
    test, _ = steps_of(generated_pipeline("--platform", "cpu", "--connector", "ExampleConnector"))
    agent = Agent(tmp_path)
    agent.upload_wheel(wheel)
    result, _, _ = agent.run(test, without=("pip",))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"kvconform: this image has no kvconform and no pip to install {wheel_path()} with: "
        f"add pip or kvconform {version()} to the image"), result.stderr
