"""``kvconform gate --run`` over a vLLM kvconform cannot drive: no verdict (exit 4), never a connector's failure.

The suite's session names what of the tested vLLM kvconform no longer fits (a renamed internal, a changed
shape) and does not run the checks that need it; its results.json carries those lines. The gate reads them and
gives no verdict, unless what did run failed. The small suite stands in for the conformance suite
(``small_suite.py``): its results.json carries the lines ``GATE_SUITE_CANNOT_DRIVE`` gives.
"""

from __future__ import annotations

from kvconform.pipelines.gate import judgement
from kvconform.pipelines.gate.results import read_cannot_drive
from tests.gate.small_suite import run_gate
from tests.gate.vllm_checkout import CONNECTORS

EXAMPLE = f"{CONNECTORS}/v1/example_connector.py"
RENAMED = ("vLLM 0.33.1.dev42+gabc1234 (vllm) has no init_none_hash in vllm.v1.core.kv_cache_utils; update "
           "conformance/vllm_install/api.py to where this vLLM keeps it (conformance/engine/requests.py:34)")


def test_a_vllm_kvconform_cannot_drive_gets_no_verdict(gate, vllm_repo, small_suite, monkeypatch):
    monkeypatch.setenv("GATE_SUITE_CANNOT_DRIVE", RENAMED)
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=lint,MultiConnector=lint")
    assert result.status == judgement.EXIT_BUILD_NEEDED == 4, result.out + result.err
    assert "kvconform gate: NO VERDICT on cpu: kvconform cannot drive this vLLM (tested checkout" in result.out
    assert result.out.count(RENAMED) == 1, result.out
    assert f"  {RENAMED}\n" in result.out
    for blame in ("FAIL", "PASS", "not exercised"):  # no connector is judged, nor told to run elsewhere
        assert blame not in result.out, result.out


def test_a_failure_of_what_did_run_still_fails_the_change(gate, vllm_repo, small_suite, monkeypatch):
    monkeypatch.setenv("GATE_SUITE_CANNOT_DRIVE", RENAMED)
    head = vllm_repo.touch(EXAMPLE)
    result = run_gate(gate, vllm_repo, head, monkeypatch, "ExampleConnector=fail,MultiConnector=lint")
    assert result.status == 1, result.out
    assert "kvconform gate: FAIL on cpu" in result.out
    assert "kvconform gate: kvconform cannot drive this vLLM (tested checkout" in result.out
    assert "NO VERDICT" not in result.out


def test_the_lines_are_read_once_each_and_a_missing_file_has_none(tmp_path):
    results = tmp_path / "results.json"
    assert read_cannot_drive(results) == []
    results.write_text('{"runs": [{"vllm_mismatches": ["a (x.py:1)", "b (y.py:2)"]}, '
                       '{"vllm_mismatches": ["a (x.py:1)", 3]}]}')
    assert read_cannot_drive(results) == ["a (x.py:1)", "b (y.py:2)"]
    results.write_text("not json")
    assert read_cannot_drive(results) == []
