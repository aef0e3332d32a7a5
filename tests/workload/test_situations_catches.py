"""The workload situations issue 49 added each catch a broken copy the suite passed before, for the right reason.

One suite run (``tests/suite_run.py``) over the copies in ``tests/workload/situations_broken.py`` and the unmodified
connectors, each through the scenarios that concern it:

* ``ResumedIndexConnector`` (a resumed load indexed among the resumed requests only) fails ``resumed-beside-running``;
  every scenario from before and its generated workloads pass it, except where it fails for ExampleConnector's own
  recorded findings (``INHERITED``), with their words;
* ``OverwritesPendingSavesMultiConnector`` (the worker's counts of extra pending saves overwritten by each step's)
  fails ``staggered-finishes`` over children both at least two steps late (the late-saves variant's since issue
  49); over the children the variant had before (the faster one step late: ``@one-step-child``) every scenario and
  its generated workloads pass it, but for the inherited findings;
* ``WholeBlocksStoreConnector`` (moves whole blocks only while claiming a partial one) fails ``partial-block-load``,
  where ``PrefixTokensConnector``, the same connector moving every token, passes. The other scenarios give neither a
  hit (they hit only on a prompt that extends a stored one, as no other scenario asks); run by hand, they fail both
  alike, saying no load was verified;
* ``SampledTokenSaveConnector`` (hands its worker a finished request's last sampled token, which has no KV, so a final
  length on a block boundary makes the worker copy a block more than the scheduler half kept) fails
  ``block-boundary``, where ``OutputSaveConnector``, the same connector handing the computed tokens only, passes;
  every other scenario and the round-trip pass it, but for the inherited findings. (The generated workloads' draws
  of final lengths on a boundary, the same situation, may fail it too: they are not run here.)

ExampleConnector and MultiConnector's late-saves variant pass the new scenarios they run here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import vllm
from packaging.version import Version

from kvconform.conformance.workload.scenarios import WORKLOAD_SCENARIOS
from tests.shared_run.plan import SelfTestRun, results_of

PROFILES = Path(__file__).with_name("situations_broken.yaml")
MODULE = "tests.workload.situations_broken"

# broken copy (test id name) -> (the scenario that catches it, words its failure must carry)
BROKEN = {
    "ResumedIndexConnector": ("resumed-beside-running", [
        "ResumedIndexConnector: consumer engine, step", "AssertionError raised while stepping",
        "requests loading external KV: c2 (32 external tokens claimed, resumed after preemption)"]),
    "OverwritesPendingSavesMultiConnector": ("staggered-finishes", [
        "OverwritesPendingSavesMultiConnector: producer engine, step",
        "the connector reported p0 as finished sending, but no such transfer was in flight"]),
    "WholeBlocksStoreConnector": ("partial-block-load", [
        "WholeBlocksStoreConnector: consumer engine, step 0", "request c0",
        "token 32 of the 128 tokens the scheduler counts as computed does not hold its prefix's KV"]),
    "SampledTokenSaveConnector": ("block-boundary", [
        "SampledTokenSaveConnector: producer engine, step",
        "the connector reported p2 as finished sending, but no such transfer was in flight"]),
}
# ExampleConnector's recorded findings (conformance/expectations/any.yaml), which copies of it inherit: scenario ->
# the words of that finding's failure
INHERITED = {
    "chunked-prefill": r"shape mismatch|tokens the scheduler counts as computed does not hold its prefix's KV",
    "memory-pressure": r"returned \(-32, False\) .*the token count is negative",  # the contract oracle's words
    "resumed-past-boundary": r"FileNotFoundError raised while stepping",
}
# scenarios that resume a load beside a decoder, where the copy of the resumed loads may fail too: issue 49's two, and
# resumed-chunked (issue 60, tests/checks/test_example_resume_catches.py)
NEW_FOR_RESUMED = {"resumed-beside-running", "resumed-past-boundary", "resumed-chunked"}
BEFORE_ISSUE_49 = "OverwritesPendingSavesMultiConnector@one-step-child"
# correct connector (test id name) -> the scenarios it must pass here
CORRECT = {
    "ExampleConnector": ["resumed-beside-running", "block-boundary", "partial-block-load"],
    "MultiConnector@late-saves": ["staggered-finishes", "block-boundary", "resumed-beside-running"],
    "PrefixTokensConnector": ["partial-block-load"],
    "OutputSaveConnector": ["block-boundary"],
}
# the round-trip tests a copy of ExampleConnector passes (its scenarios carry ExampleConnector's recorded findings)
ROUNDTRIP = "(test_roundtrip and float16 and not layout and not mla and not scenario and not other_device)"
SAMPLED_TOKEN = "SampledTokenSaveConnector"


# ResumedIndexConnector is vLLM 0.32's ExampleConnector.build_connector_meta with one edit; from 0.34 a resumed
# request comes back as a new request (no resumed_req_ids), so on those releases the copy is old code on new output
_RESUMED_COPY = pytest.mark.skipif(Version(Version(vllm.__version__).base_version) >= Version("0.34"),
                                   reason=f"ResumedIndexConnector copies vLLM 0.32's ExampleConnector, whose resumed "
                                          f"requests vLLM {vllm.__version__} no longer sends as cached ones")


def _copies(names) -> list:
    return [pytest.param(name, marks=_RESUMED_COPY) if name == "ResumedIndexConnector" else name for name in names]


def _selection() -> str:
    # -k takes no "@": a variant's tests by the variant's name alone (no other connector here has one of that name)
    pairs = [f"{'' if '@' in name else '-'}{name.split('@')[-1]}-{scenario}]"
             for name, scenarios in CORRECT.items() for scenario in scenarios]
    pairs += ["-WholeBlocksStoreConnector-partial-block-load]"]
    whole_runs = f"ResumedIndexConnector or OverwritesPendingSavesMultiConnector or {SAMPLED_TOKEN}"
    return (f"(test_workload_scenario and ({whole_runs} or {' or '.join(pairs)})) or "
            f"(test_workload_generated and whole and (ResumedIndexConnector or one-step-child)) or "
            f"({ROUNDTRIP} and {SAMPLED_TOKEN})")


RUN = SelfTestRun.of_broken(_selection(), "ExampleConnector", MODULE,
                           [*BROKEN, "PrefixTokensConnector", "OutputSaveConnector"], profiles=[PROFILES],
                           also=["MultiConnector"])


situations_run = results_of(RUN)


def _scenario_outcomes(outcomes, name: str) -> dict[str, object]:
    """Scenario -> outcome, of the scenario tests that ran connector ``name`` (its variant, where it names one)."""
    found = {}
    for outcome in outcomes:  # by the id's end: of_connector would take a variant's tests for its connector's
        for scenario in WORKLOAD_SCENARIOS:
            if outcome.nodeid.endswith(f"-{name}-{scenario}]"):
                found[scenario] = outcome
    return found


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_connectors_pass_the_new_situations(situations_run, name):
    _, outcomes, output = situations_run
    ran = _scenario_outcomes(outcomes, name)
    assert set(ran) == set(CORRECT[name]), (sorted(ran), output[-3000:])
    bad = [(s, o.outcome, o.message[:800]) for s, o in ran.items() if o.outcome != "passed"]
    assert not bad, bad


@pytest.mark.parametrize("name", _copies(BROKEN))
def test_new_situation_fails_the_copy_for_its_reason(situations_run, name):
    _, outcomes, output = situations_run
    scenario, words = BROKEN[name]
    outcome = _scenario_outcomes(outcomes, name).get(scenario)
    assert outcome is not None and outcome.outcome == "failed", (outcome, output[-3000:])
    for word in words:
        assert word in outcome.message, (word, outcome.message[:2000])


@pytest.mark.parametrize("name", _copies(["ResumedIndexConnector", BEFORE_ISSUE_49]))
def test_the_suite_before_passed_the_copy(situations_run, name):
    """Every scenario but the new ones (for the resumed copy) passes, or fails for an inherited finding's cause
    only; the generated workloads (prefill in one step) pass."""
    _, outcomes, output = situations_run
    ran = _scenario_outcomes(outcomes, name)
    assert set(ran) == set(WORKLOAD_SCENARIOS), (sorted(ran), output[-3000:])
    new = NEW_FOR_RESUMED if name == "ResumedIndexConnector" else set()
    for scenario, outcome in ran.items():
        if scenario in new:
            continue
        if scenario in INHERITED and outcome.outcome != "passed":  # MultiConnector passes memory-pressure
            assert outcome.outcome == "failed" and re.search(INHERITED[scenario], outcome.message), \
                (scenario, outcome.outcome, outcome.message[:1500])
        else:
            assert outcome.outcome == "passed", (scenario, outcome.outcome, outcome.message[:1500])
    generated = [o for o in outcomes if "test_workload_generated[" in o.nodeid and o.nodeid.endswith(f"-{name}-whole]")]
    assert len(generated) == 1 and generated[0].outcome == "passed", [(o.nodeid, o.outcome) for o in generated]


def test_only_the_boundary_scenarios_fail_the_sampled_token_copy(situations_run):
    """Every scenario but block-boundary and next-turn passes the copy, or fails it for an inherited finding's cause
    only; so does the round-trip: the final lengths of their requests are never on a block boundary. next-turn's
    producer ends on one too, and fails the copy for block-boundary's reason."""
    _, outcomes, output = situations_run
    ran = _scenario_outcomes(outcomes, SAMPLED_TOKEN)
    assert set(ran) == set(WORKLOAD_SCENARIOS), (sorted(ran), output[-3000:])
    next_turn = ran["next-turn"]
    assert next_turn.outcome == "failed" and "as finished sending, but no such transfer was in flight" in \
        next_turn.message, (next_turn.outcome, next_turn.message[:1500])
    for scenario, outcome in ran.items():
        if scenario in (BROKEN[SAMPLED_TOKEN][0], "next-turn"):
            continue
        if scenario in INHERITED and outcome.outcome != "passed":  # vLLM 0.34 fixed resumed-past-boundary's
            assert outcome.outcome == "failed" and re.search(INHERITED[scenario], outcome.message), \
                (scenario, outcome.outcome, outcome.message[:1500])
        else:
            assert outcome.outcome == "passed", (scenario, outcome.outcome, outcome.message[:1500])
    roundtrips = [o for o in outcomes if "test_roundtrip[" in o.nodeid and f"-{SAMPLED_TOKEN}-" in o.nodeid]
    assert roundtrips and all(o.outcome == "passed" for o in roundtrips), [(o.nodeid, o.outcome) for o in roundtrips]
