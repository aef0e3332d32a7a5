"""``kvconform --version`` names what a run here would test; the top-level help is written for a user."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

from kvconform.conformance.cli import main


def test_version_prints_kvconform_vllm_torch_and_platform(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"kvconform {importlib.metadata.version('kvconform')}"
    assert re.fullmatch(r"vLLM \d+\.\d+\S* \(vllm(-cpu)?\)|vLLM \d+\.\d+\S*|vLLM not installed", lines[1]), lines
    assert lines[2] == f"torch {importlib.metadata.version('torch')}"
    assert re.fullmatch(r"platform (cpu|cuda|rocm|xpu) \(.+\)", lines[3]), lines
    assert lines[4].startswith("Python ")


def test_help_is_for_users(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Test vLLM KV connectors for conformance, and report the results." in text
    assert "python -m pytest --pyargs kvconform.conformance" in text and "--version" in text
    assert "owned by its module" not in text
