"""A normal run's generated workloads: a pure function of their seed, the first anchored to a hit.

The seeded workloads must not depend on where kvconform is installed or what the
run imported (Hypothesis's draws do: it mixes in integer constants of every
module it counts as local), so one test builds them in a fresh interpreter, in
another folder, with a module full of integer constants imported and another hash
seed, and compares. The anchored workload's guaranteed-hit shape is checked over
many seeds, without vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvconform.conformance.workload.spec import WorkloadSpec
from kvconform.conformance.workload.strategies import (
    ANCHOR_LABEL,
    SeededDraws,
    anchored_workload,
    generate_workload,
    seeded_workload,
    seeded_workloads,
)

SEEDS = ["test_workload_generated[cpu-CPU_ATTN-ExampleConnector-whole]",
         "test_workload_generated[cpu-CPU_ATTN-MultiConnector@late-saves-chunked]", "x"]
COUNT = 6

# a module of the kind Hypothesis collects constants from: a folder outside site-packages, integer literals
LOCAL_MODULE = "LIMITS = (1, 2, 3, 4, 6, 16, 31, 32, 33, 40, 48, 64, 69, 70, 71, 128, 129, 199, 200, 240, 2048)\n"
CHILD = f"""
import json, sys
import kvconform_local_constants  # noqa: F401 (imported for its constants)
from kvconform.conformance.workload.strategies import seeded_workloads
texts = {{seed: {{mode: [s.to_text() for s in seeded_workloads(seed, {COUNT}, mode == "chunked")]
                 for mode in ("whole", "chunked")}} for seed in {SEEDS!r}}}
print(json.dumps({{"texts": texts, "hypothesis_imported": "hypothesis" in sys.modules}}))
"""


def _texts() -> dict[str, dict[str, list[str]]]:
    return {seed: {mode: [s.to_text() for s in seeded_workloads(seed, COUNT, mode == "chunked")]
                   for mode in ("whole", "chunked")} for seed in SEEDS}


def test_seeded_workloads_are_the_same_in_another_process_folder_and_import_set(tmp_path):
    (tmp_path / "kvconform_local_constants.py").write_text(LOCAL_MODULE)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    child = json.loads(proc.stdout)
    assert child["texts"] == _texts()
    assert not child["hypothesis_imported"], "the seeded workloads need no Hypothesis engine"


def test_seeds_and_indexes_give_workloads_of_their_own():
    texts = _texts()
    every = [t for modes in texts.values() for ts in modes.values() for t in ts]
    assert len(set(every)) == len(every)  # no two (seed, mode, index) share a workload
    again = seeded_workload(SEEDS[0], 3, chunked=False)
    assert again == WorkloadSpec.from_text(texts[SEEDS[0]]["whole"][3]) == WorkloadSpec.from_text(again.to_text())


def test_only_the_first_seeded_workload_is_anchored():
    specs = list(seeded_workloads(SEEDS[0], COUNT, chunked=False))
    assert [s.label for s in specs] == [ANCHOR_LABEL] + [""] * (COUNT - 1)
    assert specs[0] == anchored_workload(SeededDraws(f"{SEEDS[0]}#0"), chunked=False)
    assert specs[1] == generate_workload(SeededDraws(f"{SEEDS[0]}#1"), chunked=False)


def _whole_blocks_before_last_token(length: int, block_size: int) -> int:
    return (length - 1) // block_size


@pytest.mark.parametrize("block_size", [32, 16])
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
def test_anchored_workload_has_a_guaranteed_hit_for_every_seed(chunked, block_size):
    for n in range(300):
        spec = anchored_workload(SeededDraws(f"anchor {n}"), chunked, block_size)
        spec.validate()
        stored, asked = spec.producer[0], spec.consumer[0]
        where = f"seed {n}: {spec.to_text()}"
        # stored in full: first on the producer, never aborted, more than a block, not one past whole blocks
        assert stored.abort is None and stored.arrive == 0, where
        assert stored.arrive <= min(r.arrive for r in spec.producer), where
        assert stored.length >= block_size + 2 and stored.length % block_size != 1, where
        assert (stored.length > spec.token_budget) is chunked, where
        # asked for first on the fresh consumer, never aborted: its own prefix cache holds nothing yet
        assert asked.abort is None and asked.arrive == 0, where
        # the same prompt, or an extension ending in the block of its last token: the same whole blocks
        assert asked.prompt()[:stored.length] == stored.prompt() and asked.length >= stored.length, where
        blocks = _whole_blocks_before_last_token(stored.length, block_size)
        assert blocks >= 1 and _whole_blocks_before_last_token(asked.length, block_size) == blocks, where
        # the pool holds the consumer's request beside its occupants
        assert spec.num_blocks >= -(-(asked.length + asked.max_tokens) // block_size) + 2, where


def test_anchored_workloads_still_vary():
    specs = [anchored_workload(SeededDraws(f"anchor {n}"), chunked=False) for n in range(60)]
    assert len({s.producer[0].length for s in specs}) > 20
    assert {len(s.consumer) for s in specs} == {1, 2, 3}
    assert any(s.consumer[0].length > s.producer[0].length for s in specs)
    assert any(s.peer for s in specs) and any(s.occupants for s in specs)
