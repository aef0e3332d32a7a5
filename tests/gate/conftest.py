"""Fixtures for the gate's tests: a vLLM checkout in git, and the gate command run in process.

The template repository is built once per test session (per xdist worker); each
test clones it, so tests can commit freely without seeing each other's changes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from tests.gate.vllm_checkout import EXTRA_FILES, KV_TRANSFER, VLLM_SOURCE, GateResult, VllmRepo, git


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vllm-template")
    shutil.copytree(VLLM_SOURCE / "distributed" / "kv_transfer", root / KV_TRANSFER,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in EXTRA_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(VLLM_SOURCE.parent / name, root / name)
    (root / "README.md").write_text("# vLLM (a test copy)\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


@pytest.fixture
def vllm_repo(template_repo, tmp_path) -> VllmRepo:
    path = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(template_repo), str(path))
    return VllmRepo(path, git(path, "rev-parse", "HEAD"))


@pytest.fixture
def gate(tmp_path, monkeypatch, capsys):
    """Run ``kvconform gate ARGS`` in process, from an empty working folder of its own.

    The working folder is where a shell would create ``pwned`` if a hostile file
    name were ever interpreted: tests look for it there.
    """
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)

    def call(*argv: str) -> GateResult:
        status = main(["gate", *argv])
        captured = capsys.readouterr()
        return GateResult(status, captured.out, captured.err)

    call.workdir = workdir
    return call
