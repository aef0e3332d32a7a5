"""The workload check fails vLLM's OffloadingConnector, run whole on CPU over kvconform's CPU-memory medium, for
two scheduler-half bugs of issue 60's CPU-offload family, and passes it unmodified.

One suite run drives OffloadingConnector (its cpu-medium variant) and tests/checks/offloading_situations_broken.py's
copies through three workload scenarios: block-boundary and abort-mid-save (blocks handed on in the very next step,
while the medium runs a finished request's stores two polls late) and next-turn (a consumer prompt that continues
a producer's output past a block boundary whose last slot, the sampled token, was never computed). The copies are
edits of vLLM 0.32's scheduler half, so this runs on the default release only (tests/conftest.py ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_situations_broken.yaml"
SCENARIOS = ("block-boundary", "abort-mid-save", "next-turn")
# copy -> (the scenarios that fail it, words its failures must carry)
CAUGHT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "UnfencedFinishOffloadingConnector": (("block-boundary", "abort-mid-save"), (
        "consumer engine, step", "request c0", "the connector reported as received does not hold its prefix's KV")),
    "SampledSlotOffloadingConnector": (("next-turn",), (
        "consumer engine, step 0: request c0", "claimed 128 external tokens",
        "no engine over this storage ever computed more than 127 tokens")),
}

RUN = SelfTestRun.of_broken("test_workload_scenario and (block-boundary or abort-mid-save or next-turn)",
                            "OffloadingConnector", "tests.checks.offloading_situations_broken", list(CAUGHT),
                            profiles=[PROFILES])


situations_run = results_of(RUN)


def test_offloading_connector_over_the_cpu_medium_passes(situations_run):
    _, outcomes, output = situations_run
    mine = of_connector(outcomes, "OffloadingConnector@cpu-medium")
    assert len(mine) == len(SCENARIOS), ([o.nodeid for o in outcomes], output[-3000:])
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


@pytest.mark.parametrize("broken", list(CAUGHT))
def test_each_copy_fails_its_scenarios_for_its_reason(situations_run, broken):
    returncode, outcomes, output = situations_run
    assert returncode == 1, output[-3000:]
    failing, words = CAUGHT[broken]
    mine = of_connector(outcomes, broken)
    assert len(mine) == len(SCENARIOS), [o.nodeid for o in outcomes]
    for outcome in mine:
        expected = "failed" if any(f"-{scenario}]" in outcome.nodeid for scenario in failing) else "passed"
        assert outcome.outcome == expected, (outcome.nodeid, outcome.outcome, outcome.message[:800])
        if expected == "failed":
            for word in words:
                assert word in outcome.message, (word, outcome.message[:1500])
