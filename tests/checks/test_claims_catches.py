"""The round-trip reads claims as vLLM does: a short claim fails, a late one ("ask again") passes."""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parents[1] / "checks" / "claims_broken.yaml"


RUN = SelfTestRun.of_broken("test_roundtrip_scenario and unaligned and bs32", "ExampleConnector",
                           "tests.checks.claims_broken", ["UnderClaimingConnector", "AskAgainConnector"],
                           profiles=[PROFILES])


claims_run = results_of(RUN)


def test_a_claim_of_fewer_blocks_than_promised_fails(claims_run):
    _, outcomes, output = claims_run
    mine = of_connector(outcomes, "UnderClaimingConnector")
    assert [o.outcome for o in mine] == ["failed"], output[-3000:]
    assert "claimed 96 external tokens for req-0" in mine[0].message
    assert "promises a hit of 128 tokens in all (whole-blocks" in mine[0].message


def test_none_is_ask_again_not_a_miss(claims_run):
    _, outcomes, output = claims_run
    for name in ("AskAgainConnector", "ExampleConnector"):
        mine = of_connector(outcomes, name)
        assert [o.outcome for o in mine] == ["passed"], (name, output[-3000:])
