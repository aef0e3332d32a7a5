"""Fixtures for the gate's tests: a vLLM checkout in git, and the gate command run in process.

The template repository is built once per test session (per xdist worker); each
test clones it, so tests can commit freely without seeing each other's changes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from kvconform.conformance.cli import main
from tests.gate.small_suite import small_suite  # noqa: F401  (a fixture of the gate's tests)
from tests.gate.vllm_checkout import GateResult, VllmRepo, build_template, clone_template


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory) -> Path:
    return build_template(tmp_path_factory.mktemp("vllm-template"))


@pytest.fixture
def vllm_repo(template_repo, tmp_path) -> VllmRepo:
    return clone_template(template_repo, tmp_path)


@pytest.fixture
def gate(tmp_path, monkeypatch, capfd):
    """Run ``kvconform gate ARGS`` in process, from an empty working folder of its own.

    The working folder is where a shell would create ``pwned`` if a hostile file
    name were ever interpreted: tests look for it there. The system's temporary folder
    is one of the test's own. Output is read at the file
    descriptors, so what the gate's pytest run wrote there would be seen too.
    """
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    # the gate keeps its run's log in the system's temporary folder for the user to read; a test's goes with its
    # tmp_path instead of piling up there
    temporary = tmp_path / "system-tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))

    def call(*argv: str) -> GateResult:
        status = main(["gate", *argv])
        captured = capfd.readouterr()
        return GateResult(status, captured.out, captured.err)

    call.workdir = workdir
    return call
