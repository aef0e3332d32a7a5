"""``--kvconform-coverage`` on a real suite run under ``-n 2``: each worker measures, the controller combines, the
JSON results carry each connector's coverage, and ``kvconform report --uncovered`` lists its unrun lines."""

from __future__ import annotations

import json

from kvconform.conformance.cli import main
from kvconform.reports.model import MODULE_LEVEL, Results
from tests.suite_run import run_suite

EXAMPLE = "vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py"
MULTI = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"


def test_two_workers_coverage_is_combined_per_connector(tmp_path, capsys):
    out = tmp_path / "results.json"
    status, outcomes, output = run_suite(tmp_path, [
        "-n", "2", "--kvconform-coverage", f"--kvconform-json={out}", "--connector", "ExampleConnector",
        "--connector", "MultiConnector", "-k", "test_roundtrip and not mla"])
    assert status == 0, output[-3000:]
    assert any(o.outcome == "passed" for o in outcomes)
    results = Results.model_validate(json.loads(out.read_text()))
    by_name = {c.connector: c for c in results.coverage}
    assert set(by_name) == {"ExampleConnector", "MultiConnector"}  # one per worker (the scheduler splits them)
    example = by_name["ExampleConnector"]
    assert [m.path for m in example.own] == [EXAMPLE]
    assert 50 < example.percent < 100
    own = example.own[0]
    assert MODULE_LEVEL not in {g.function for g in own.missing}  # its import counted, whichever test imported it
    # MultiConnector's children are ExampleConnectors: that module is shared code to it, not its own
    multi = by_name["MultiConnector"]
    assert [m.path for m in multi.own] == [MULTI]
    assert EXAMPLE in {m.path for m in multi.modules if not m.own}
    assert f"kvconform coverage: ExampleConnector (cpu): {example.percent:.1f}% of its own code" in output

    assert main(["report", str(out), "--uncovered", "ExampleConnector"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("ExampleConnector (cpu): ")
    assert printed[2].startswith(f"  {EXAMPLE}  ")
    assert any(line.startswith("    ExampleConnector.") for line in printed)  # lines grouped by method
