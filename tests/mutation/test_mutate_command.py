"""``kvconform mutate`` for real on ExampleConnector: a small sample, the JSON's shape, a mutant the suite kills, and
the floor row written from it, which lists exactly the mutants that ran.

One subprocess, as a user runs it; ``-k roundtrip`` keeps the suite (and so the baseline) to the round-trip
checks, which reach most of the connector's worker side.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvconform.reports.mutants import DETECTED, FATES, read_run
from kvconform.reports.mutation_floor import load_floor

pytest.importorskip("cosmic_ray", reason="cosmic-ray (the 'mutate' extra) is not installed")

MODULE = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
TIMEOUT_S = 300


def test_a_sampled_run_of_example_connector(tmp_path: Path) -> None:
    out, floor = tmp_path / "m.json", tmp_path / "floor.yaml"
    proc = subprocess.run([sys.executable, "-m", "kvconform", "mutate", "--connector", "ExampleConnector",
                           "--sample", "3", "--json", str(out), "--update-floor", str(floor), "--", "-k", "roundtrip"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = read_run(out)
    assert (run.connector, run.platform, run.modules, run.sample, run.seed) == ("ExampleConnector", "cpu",
                                                                                 [MODULE], 3, 0)
    assert run.baseline.get("passed", 0) > 0
    ran = [m for m in run.mutants if m.fate not in ("not_reached", "not_viable")]
    assert len(ran) + sum(m.fate == "not_viable" for m in run.mutants) == 3
    assert all(m.fate in FATES and m.module == MODULE and m.diff.startswith(f"--- a/{MODULE}\n") for m in run.mutants)
    assert all(m.tests > 0 for m in ran) and all(m.tests == 0 for m in run.mutants if m.fate == "not_reached")
    killed = [m for m in ran if m.fate == "killed"]
    assert killed and all("::" in m.killed_by for m in killed)
    assert [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("mutant ")] == ["1/3", "2/3", "3/3"]
    row = load_floor(floor).connectors["ExampleConnector"]
    assert (row.sample, row.seed) == (3, 0) and row.listed() == {m.id for m in ran}
    assert set(row.detected) == {m.id for m in ran if m.fate in DETECTED}


def test_an_unknown_connector_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvconform", "mutate", "--connector", "ExampleConector"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("kvconform mutate: error: unknown connector 'ExampleConector': "
                                   "did you mean ExampleConnector?")
