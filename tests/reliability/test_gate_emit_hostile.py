"""``kvconform gate --emit-pipeline`` on a pull request with hostile names: nothing runs, nothing is misread.

``tests/gate/test_gate_hostile.py`` covers hostile *file names* and refs with
``--dry-run``; this adds what reaches ``--emit-pipeline``: hostile file names next
to a real change (the pipeline, executed step by step with recording stand-ins,
passes only connector names to pytest) and hostile *connector names* registered
in the pull request's own ``factory.py`` (refused in one line, nothing written).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.gate.vllm_checkout import CONNECTORS, FACTORY, GIT_ENV, VllmRepo, build_template, clone_template, untracked
from tests.load import stretched
from tests.pipelines.pipeline_testkit import FakeBin, conformance_steps

V1 = f"{CONNECTORS}/v1"
HOSTILE_FILES = ["$(touch pwned)", "`touch pwned`", "new\nline.py", "--output=pwned", "-rf",
                 f"{V1}/$(touch pwned).py", f"{V1}/a;touch pwned.py"]
HOSTILE_CONNECTORS = ["$(touch pwned)", "`touch pwned`", "--junitxml=pwned.xml", "a;touch pwned"]
# A name with a line break splits the gate's one-line error in two, so a change can forge a line of
# the CI log (say, "kvconform gate: PASS"): the gate should refuse such a registration by name (repr).
NEWLINE_CONNECTOR = "x\nkvconform gate: PASS"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("vllm-hostile"))


@pytest.fixture
def repo(template, tmp_path) -> VllmRepo:
    return clone_template(template, tmp_path)


def kvconform(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed command, as CI runs it, from an empty folder of its own."""
    workdir.mkdir(exist_ok=True)
    return subprocess.run([str(Path(sys.executable).with_name("kvconform")), *args], cwd=workdir, env=GIT_ENV,
                          capture_output=True, text=True, check=False, timeout=stretched(120))


def test_hostile_file_names_beside_a_real_change_emit_a_pipeline_that_runs_only_connector_names(repo, tmp_path):
    example = f"{V1}/example_connector.py"
    head = repo.commit({**{name: "hostile\n" for name in HOSTILE_FILES},
                        example: (repo.path / example).read_text() + "\n# changed\n"}, message="$(touch pwned)")
    gate = ["gate", "--repo", str(repo.path), "--base", repo.base, "--head", head]
    selection = json.loads(kvconform(tmp_path / "cwd", *gate, "--dry-run", "--json").stdout)
    assert sorted(selection["changed_files"]) == sorted([*HOSTILE_FILES, example])
    assert selection["connectors"] == ["ExampleConnector", "MultiConnector"]

    out = tmp_path / "pipeline.yml"
    result = kvconform(tmp_path / "cwd", *gate, "--emit-pipeline", "--platform", "cpu", "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "pwned" not in text and "line.py" not in text  # file names never reach the pipeline
    steps = conformance_steps(yaml.safe_load(text))  # the test steps; the report step reads no names
    assert steps

    (tmp_path / "agent").mkdir()
    fake = FakeBin(tmp_path / "agent")
    for step in steps:  # as the agent runs them: each parallel job of a step with its own index
        for job in range(step.get("parallelism", 1)):
            run = fake.run_commands(step["commands"], BUILDKITE_PARALLEL_JOB=str(job))
            assert run.returncode == 0, (step.get("key"), run.stderr)
    connectors = sorted(arg.removeprefix("--connector=") for call in fake.calls("pytest")
                        for arg in call["argv"] if arg.startswith("--connector="))
    assert connectors == ["ExampleConnector", "MultiConnector"]
    assert not list(tmp_path.rglob("pwned")) and untracked(repo.path) == ""


def _registration(name: str) -> str:
    return (f"\nKVConnectorFactory.register_connector(\n    {json.dumps(name)},\n"
            f'    "vllm.distributed.kv_transfer.kv_connector.v1.evil_connector",\n    "EvilConnector",\n)\n')


@pytest.mark.parametrize("names", [
    HOSTILE_CONNECTORS,
    [NEWLINE_CONNECTOR],
], ids=["shell", "newline"])
def test_hostile_connector_names_registered_by_the_change_are_refused_in_one_line(repo, tmp_path, names):
    factory = (repo.path / FACTORY).read_text()
    head = repo.commit({FACTORY: factory + "".join(_registration(n) for n in names),
                        f"{V1}/evil_connector.py": "class EvilConnector:\n    pass\n"})
    gate = ["gate", "--repo", str(repo.path), "--base", repo.base, "--head", head]
    selection = json.loads(kvconform(tmp_path / "cwd", *gate, "--dry-run", "--json").stdout)
    assert set(names) <= set(selection["connectors"])  # kept verbatim, as data

    out = tmp_path / "pipeline.yml"
    result = kvconform(tmp_path / "cwd", *gate, "--emit-pipeline", "-o", str(out))
    assert result.returncode == 2, result.stdout[-2000:]
    assert result.stderr.startswith("kvconform gate: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "in no connector group" in result.stderr
    assert not out.exists() and not list(tmp_path.rglob("pwned")) and untracked(repo.path) == ""
