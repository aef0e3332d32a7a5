"""File names and refs come from the pull request: nothing in them may run, and names are kept verbatim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gate.vllm_checkout import CONNECTORS, GIT_ENV, untracked

V1 = f"{CONNECTORS}/v1"
HOSTILE_NAMES = [
    "$(touch pwned)",
    "`touch pwned`",
    "docs/a;touch pwned",
    "new\nline.py",
    "--foo",
    "-rf",
    "docs/--output=pwned",
    "docs/quote'\"s.md",
    "docs/ünïcødé.md",
    f"{V1}/$(touch pwned).py",
    f"{V1}/-rf",
    f"{V1}/tab\there.py",
]


def nothing_was_created(workdir: Path, repo: Path) -> bool:
    """The gate's working folder is still empty and the checkout has no file git does not know."""
    return os.listdir(workdir) == [] and untracked(repo) == ""


@pytest.fixture
def hostile_change(vllm_repo):
    head = vllm_repo.commit({name: "hostile\n" for name in HOSTILE_NAMES}, message="$(touch pwned)")
    return vllm_repo, head


def test_hostile_names_are_reported_verbatim_and_nothing_runs(gate, hostile_change, tmp_path):
    repo, head = hostile_change
    result = gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--dry-run", "--json")
    assert result.status == 0, result.err
    selection = result.json()
    assert sorted(selection["changed_files"]) == sorted(HOSTILE_NAMES)
    assert selection["connectors"] == [] and selection["reasons"] == {}
    assert nothing_was_created(gate.workdir, repo.path)
    assert not (tmp_path / "pwned").exists()


def test_hostile_names_take_one_quoted_line_each_in_the_summary(gate, hostile_change):
    repo, head = hostile_change
    result = gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--dry-run")
    assert result.status == 0
    assert "  'new\\nline.py': no connector loads it" in result.out
    assert "  $(touch pwned): no connector loads it" in result.out
    assert len(result.out.splitlines()) == 1 + len(HOSTILE_NAMES) + 1  # header, one per file, verdict


def test_hostile_names_next_to_a_real_change_still_select_it(gate, vllm_repo):
    head = vllm_repo.commit({"$(touch pwned)": "x\n", f"{V1}/example_connector.py":
                             (vllm_repo.path / V1 / "example_connector.py").read_text() + "\n# x\n"})
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run", "--json")
    assert result.json()["connectors"] == ["ExampleConnector", "MultiConnector"]
    assert nothing_was_created(gate.workdir, vllm_repo.path)


@pytest.mark.parametrize("ref", ["$(touch pwned)", "`touch pwned`", "HEAD;touch pwned", "HEAD && touch pwned",
                                 "--output=pwned", "HEAD\ntouch pwned", "HEAD|touch pwned"])
def test_hostile_refs_are_refused_and_run_nothing(gate, vllm_repo, ref):
    result = gate("--repo", str(vllm_repo.path), f"--base={ref}", "--dry-run")
    assert result.status == 2 and result.err.count("\n") == 1, result.err
    assert nothing_was_created(gate.workdir, vllm_repo.path)


def test_the_installed_command_with_hostile_names(hostile_change, tmp_path):
    """The real ``kvconform`` entry point, as CI runs it, from a folder of its own."""
    repo, head = hostile_change
    workdir = tmp_path / "cli"
    workdir.mkdir()
    kvconform = Path(sys.executable).with_name("kvconform")
    proc = subprocess.run([str(kvconform), "gate", "--repo", str(repo.path), "--base", repo.base,
                           "--head", head, "--dry-run", "--json"], cwd=workdir, env=GIT_ENV,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert '"new\\nline.py"' in proc.stdout and '"$(touch pwned)"' in proc.stdout
    assert nothing_was_created(workdir, repo.path)
