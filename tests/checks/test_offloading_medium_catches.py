"""The round-trip fails vLLM's OffloadingConnector over a CPU-memory medium that loads each block one block off,
and passes it over kvconform's own medium (conformance/connectors/cpu_memory_medium.py).

One suite run drives OffloadingConnector (its cpu-medium variant: the whole connector on CPU) and
tests/checks/offloading_medium_broken.py's copy through two round-trips (an MHA and an MLA cache, float16).
The copy's claims and transfers are the unmodified medium's; only the byte comparison sees the bytes move.
"""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_medium_broken.yaml"
BROKEN = "OffByOneMediumOffloadingConnector"
WORDS = [BROKEN, "loaded wrong bytes", "loaded one block late"]

RUN = SelfTestRun.of_broken("test_roundtrip and float16 and not bfloat16", "OffloadingConnector",
                            "tests.checks.offloading_medium_broken", [BROKEN], profiles=[PROFILES])


medium_run = results_of(RUN)


def test_offloading_connector_over_the_cpu_medium_passes(medium_run):
    _, outcomes, output = medium_run
    mine = of_connector(outcomes, "OffloadingConnector@cpu-medium")
    assert len(mine) == 2, ([o.nodeid for o in outcomes], output[-3000:])
    assert all(o.outcome == "passed" for o in mine), [(o.nodeid, o.outcome, o.message[:800]) for o in mine]


def test_off_by_one_medium_fails_every_roundtrip(medium_run):
    returncode, outcomes, output = medium_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == 2, [o.nodeid for o in outcomes]
    for outcome in mine:
        assert outcome.outcome == "failed", (outcome.nodeid, outcome.outcome, outcome.message[:500])
        for word in WORDS:
            assert word in outcome.message, (word, outcome.message[:1500])
