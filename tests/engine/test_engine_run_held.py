"""The engine tier's second engine: its process imports vLLM at once, but builds an engine only when told ``go``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvconform.conformance.engine.engine_run import CANNOT_RUN, GO, HELD_ENV


def _held_engine(tmp_path, told: str) -> subprocess.CompletedProcess:
    """engine_run on a model folder that does not exist: building its engine would fail loudly."""
    env = {**os.environ, HELD_ENV: "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    return subprocess.run([sys.executable, "-m", "kvconform.conformance.engine.engine_run",
                           str(tmp_path / "no-model"), json.dumps({"kv_role": "kv_both"})],
                          input=told, capture_output=True, text=True, timeout=600, env=env)


def test_a_held_engine_that_is_not_told_go_builds_nothing(tmp_path):
    done = _held_engine(tmp_path, told="")  # the first engine failed: its stdin is closed unread
    assert done.returncode == 0, done.stderr[-2000:]
    assert "KVCONFORM-RESULT" not in done.stdout and "no-model" not in done.stderr


def test_a_held_engine_told_go_builds_its_engine(tmp_path):
    done = _held_engine(tmp_path, told=GO + "\n")
    if done.stdout.startswith(CANNOT_RUN):  # a vLLM build without CPU kernels (vLLM 0.33 here) builds no engine
        pytest.skip(done.stdout.removeprefix(CANNOT_RUN).strip())
    assert done.returncode != 0 and "no-model" in done.stderr  # it tried: the model folder is not there
