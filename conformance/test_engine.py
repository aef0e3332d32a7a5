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

import pytest

from conformance.needs import require

pytestmark = [pytest.mark.check("engine"), pytest.mark.engine]

ENGINE_TIMEOUT_S = 300


def _run_engine(tiny_model, transfer: dict, name: str) -> list[dict]:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.harness.engine_run", str(tiny_model), json.dumps(transfer)],
        capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("KVCONFORM-RESULT ")]
    assert proc.returncode == 0 and lines, f"the engine with {name} exited with status {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1].split(" ", 1)[1])


def test_engine_external_hit(platform, connector, tiny_model, storage):
    require(connector, platform, "engine")
    if platform.name != "cpu":
        pytest.skip(f"the engine tier runs the CPU build of vLLM; this run is on {platform.name}")
    transfer = {"kv_role": "kv_both", "kv_connector_extra_config": connector.profile.render_extra_config(storage),
                **connector.transfer_config_fields()}
    first = _run_engine(tiny_model, transfer, connector.name)
    second = _run_engine(tiny_model, transfer, connector.name)
    assert all(r["cached"] == 0 for r in first), f"the first, fresh engine already had cached tokens: {first}"
    for before, after in zip(first, second):
        assert after["cached"] > 0, f"no external cache hit in the second engine: {after} (first run: {before})"
        assert after["tokens"] == before["tokens"], (
            f"greedy output changed after loading KV through {connector.name}: {before['tokens']} -> {after['tokens']}")
