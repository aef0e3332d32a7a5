"""The bench applies the suite's expectations to the round-trip test it stands for."""

from __future__ import annotations

from kvconform.conformance.bench.expected import KnownResults
from kvconform.conformance.session.expectation_loading import load_expectations

ENTRIES = """platform: cpu
expectations:
  - test: "*test_roundtrip[cpu-CPU_ATTN-Crashing-*"
    expect: xfail
    reason: "crashes on CPU"
    link: https://github.com/vllm-project/vllm/issues/1
    class: bug
    raises: AttributeError
    match: "priority_range"
  - {test: "*test_roundtrip*Absent*", expect: skip, reason: "its package is not in this image"}
"""


def known(tmp_path, dtype="float16") -> KnownResults:
    path = tmp_path / "cpu.yaml"
    path.write_text(ENTRIES)
    return KnownResults(load_expectations([path]), "cpu", "CPU_ATTN", dtype)


def test_the_expected_failure_is_its_finding(tmp_path):
    finding, why = known(tmp_path).failure("Crashing", AttributeError("no attribute 'priority_range'"))
    assert why is None
    assert (finding["class"], finding["reason"]) == ("bug", "crashes on CPU")
    assert finding["where"] == f"{tmp_path}/cpu.yaml:3"


def test_another_failure_stays_an_error_naming_the_entry(tmp_path):
    finding, why = known(tmp_path).failure("Crashing", KeyError("model.layers.0"))
    assert finding is None
    assert why.startswith(f"not the failure {tmp_path}/cpu.yaml:3 expects: it raised KeyError")


def test_a_connector_without_an_entry_has_no_finding_and_a_skip_entry_skips(tmp_path):
    results = known(tmp_path)
    assert results.failure("Healthy", RuntimeError("boom")) == (None, None)
    assert results.skip_reason("Absent") == f"its package is not in this image ({tmp_path}/cpu.yaml:10)"
    assert results.skip_reason("Crashing") is None


def test_the_entry_for_the_installed_vllm_decides():
    """cpu.yaml pins SimpleCPUOffloadConnector's crash per vLLM range (AttributeError on 0.31 and 0.32,
    AcceleratorError from 0.33 on): the bench takes the entry for the installed vLLM, as the suite does."""
    from kvconform.conformance.vllm_install.window import installed_vllm

    expectation = KnownResults.load("cpu", "CPU_ATTN", "float16").entry_for("SimpleCPUOffloadConnector")
    assert expectation.entry.vllm is not None and expectation.entry.holds_on(installed_vllm()[0]), expectation.where
