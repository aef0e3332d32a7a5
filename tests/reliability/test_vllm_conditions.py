"""A default run changes nothing in the connector's world: its threads' priority and CPUs, its environment.

vLLM runs a connector's threads at the priority and on the CPUs its worker process has,
and sets no UCX or OpenMP variable for it; a conformance verdict must describe the
connector so. A connector that starts a native thread while its worker side is built
(as NIXL's agent does) records what it sees, serially and under xdist (where giving each worker a slice of
the cores would be tempting); every record must show the process's own conditions.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.suite_run import run_suite

CONNECTOR = "tests.reliability.observed_connector:ObservedConnector"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="reads CPU affinity, which this OS does not expose")
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_connectors_native_thread_runs_with_vllms_defaults(tmp_path, monkeypatch, workers):
    record = tmp_path / "observed.jsonl"
    monkeypatch.setenv("KVCONFORM_OBSERVED", str(record))
    for name in ("UCX_USE_MT_MUTEX", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    returncode, outcomes, output = run_suite(tmp_path, ["--connector", CONNECTOR, "-k", "test_roundtrip and float32",
                                                        *workers])
    assert returncode == 0 and outcomes and all(o.outcome == "passed" for o in outcomes), output[-3000:]
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    assert seen, "the connector's worker side never saved: nothing was observed"
    for one in seen:
        assert one["native_nice"] == one["at_import"]["nice"], one
        assert one["native_cpus"] == one["at_import"]["cpus"] == sorted(os.sched_getaffinity(0)), one
        assert one["env"] == {"UCX_USE_MT_MUTEX": None, "OMP_NUM_THREADS": None}, one
