"""A pinned finding hides no other bug: test_pair_notify_only fails a NixlPushConnector copy whose consumer never
finishes its requests, although the finding both share (20: no notification to the producer) is pinned for both.

One suite run drives the unmodified NixlPushConnector and tests/checks/pins_broken.py's copy through
test_pair_notify_only's aborted-unscheduled situation. The real one is the expected failure of conformance/
expectations/any.yaml's entry (its only failure: the producer holds its pages); the copy fails the same release and,
judged apart (conformance/checks/verdicts.py), its consumer's own verdict, so it leaves as several failures, which
no pin accepts. Before the split, one assertion judged both sides and the copy passed as the known finding.
"""

from __future__ import annotations

from pathlib import Path

from tests.checks.cases import NEEDS_NIXL
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

pytestmark = NEEDS_NIXL

PROFILES = Path(__file__).resolve().parent / "pins_broken.yaml"
BROKEN = "HeldEmptyReadNixlPushConnector"
PINNED = "never notifies the producer"  # the entry's reason, which pytest records for an expected failure
RELEASE = "the producer did not release its pages (finished_sending)"
WORDS = [BROKEN, "2 independent failures", "the consumer did not finish them", RELEASE, "consumer holds"]

RUN = SelfTestRun.of_broken("test_pair_notify_only and aborted-unscheduled", "NixlPushConnector",
                            "tests.checks.pins_broken", [BROKEN], profiles=[PROFILES])


pins_run = results_of(RUN)


def test_the_real_connector_fails_as_the_pinned_finding_only(pins_run):
    _, outcomes, output = pins_run
    mine = of_connector(outcomes, "NixlPushConnector")
    assert len(mine) == 1, ([o.nodeid for o in outcomes], output[-3000:])
    assert mine[0].outcome == "skipped" and PINNED in mine[0].message, (mine[0].outcome, mine[0].message[:1500])


def test_a_consumer_bug_behind_the_pin_fails_red(pins_run):
    returncode, outcomes, output = pins_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == 1, [o.nodeid for o in outcomes]
    assert mine[0].outcome == "failed", (mine[0].outcome, mine[0].message[:1500])
    for word in WORDS:
        assert word in mine[0].message, (word, mine[0].message[:3000])
