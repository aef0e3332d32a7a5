"""Engine tier: vLLM's ``LLM`` end to end with a connector, in two fresh engines.

The first engine computes and stores; the second, a new process with the same
storage, must report an external cache hit (cached tokens > 0, its local prefix
cache being empty) and produce the same greedy tokens. Each engine runs in its
own subprocess so a crash or hang is contained and reported, not fatal. Which
connectors run it is the ``engine`` check in their profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from kvconform.conformance.engine.engine_run import CANNOT_RUN, GO, HELD_ENV

if TYPE_CHECKING:
    from pathlib import Path

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.platforms.spec import PlatformSpec

pytestmark = [pytest.mark.check("engine"), pytest.mark.engine]

ENGINE_TIMEOUT_S = 300


# Model dtypes in order of preference: float32 where the backend takes it (exact on CPU), else half precision.
ENGINE_DTYPES = ("float32", "bfloat16", "float16")


def engine_options(attn_backend: str) -> dict[str, Any]:
    """The engine's dtype, block size and backend: the backend under test, with what it takes.

    FlashAttention refuses float32, so the dtype is the first of ``ENGINE_DTYPES`` the backend
    supports; the block size is the one vLLM prefers for it (CPU_ATTN: 32).
    """
    import torch

    from kvconform.conformance.engine.backends import backend_class

    backend = backend_class(attn_backend)
    dtype = next(name for name in ENGINE_DTYPES if getattr(torch, name) in backend.supported_dtypes)
    return {"dtype": dtype, "block_size": backend.get_preferred_block_size(16), "attention_backend": attn_backend}


def _start_engine(tiny_model: Path, transfer: dict[str, Any], engine: dict[str, Any],
                  held: bool = False) -> subprocess.Popen[str]:
    """An engine's process; a held one imports vLLM and waits for GO before building its engine."""
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", HELD_ENV: "1" if held else "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "kvconform.conformance.engine.engine_run", str(tiny_model), json.dumps(transfer),
         json.dumps(engine)],
        stdin=subprocess.PIPE if held else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env)


def _engine_result(proc: subprocess.Popen[str], name: str, told: str | None = None) -> list[dict[str, Any]]:
    """What the engine generated (``told``: what a held one reads first), within ENGINE_TIMEOUT_S from now."""
    try:
        stdout, stderr = proc.communicate(told, timeout=ENGINE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    cannot = [line for line in stdout.splitlines() if line.startswith(CANNOT_RUN)]
    if proc.returncode == 0 and cannot:
        pytest.skip(cannot[-1].removeprefix(CANNOT_RUN))
    lines = [line for line in stdout.splitlines() if line.startswith("KVCONFORM-RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"the engine with {name} exited with status {proc.returncode}:\n{stderr[-4000:]}")
    outputs: list[dict[str, Any]] = json.loads(lines[-1].split(" ", 1)[1])
    return outputs


# Two engines, one after the other, each bounded by ENGINE_TIMEOUT_S once it may run: the test's own limit covers
# both (the suite's per-test default is one engine's bound, and two CPU engines beside another xdist worker can
# take all of it on 2 cores, failing a working connector at random). The second engine's
# process starts with the first and imports vLLM meanwhile; it builds its engine only once the first has ended.
@pytest.mark.timeout(2 * ENGINE_TIMEOUT_S + 60)
def test_engine_external_hit(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, tiny_model: Path,
                             storage: Path) -> None:
    engine = engine_options(attn_backend)
    transfer = {"kv_role": "kv_both", "kv_connector_extra_config": subject.profile.render_extra_config(storage),
                **subject.transfer_config_fields()}
    waiting = _start_engine(tiny_model, transfer, engine, held=True)
    try:
        first = _engine_result(_start_engine(tiny_model, transfer, engine), subject.name)
    except BaseException:  # a failure or skip of the first: the second is not wanted
        waiting.kill()
        waiting.communicate()
        raise
    second = _engine_result(waiting, subject.name, told=GO + "\n")
    assert all(r["cached"] == 0 for r in first), f"the first, fresh engine already had cached tokens: {first}"
    for before, after in zip(first, second, strict=True):  # the same prompts, in order
        assert after["cached"] > 0, f"no external cache hit in the second engine: {after} (first run: {before})"
        assert after["tokens"] == before["tokens"], (
            f"greedy output changed after loading KV through {subject.name}: {before['tokens']} -> {after['tokens']}")
