"""A pinned finding hides no other bug: each check fails a broken copy whose bug sits behind the pinned assertion of
the finding it inherits from the real connector (conformance/expectations/any.yaml pins it for both).

Three suite runs share one process (tests/shared_run/), each driving an unmodified connector and its copies from
tests/checks/pins_broken.py through one situation. The real connector fails as the pinned finding only (an expected
failure); each copy fails that finding too and, judged apart (conformance/checks/verdicts.py), the verdict its own
bug breaks, so it leaves as several failures, which no pin accepts. Before the split each copy stopped at the pinned
assertion and passed as the known finding:
- test_pair_notify_only, aborted-unscheduled (finding 20, NixlPushConnector): a consumer that never finishes its
  requests;
- test_pair_write_failure, write-post-error (finding 23, NixlPushConnector): a producer that never posts its WRITE,
  so no transfer failure was staged;
- test_roundtrip_scenario, one-past-block (ExampleConnector's lost hit): a stray write into the null block.
"""

from __future__ import annotations

from pathlib import Path

from tests.checks.cases import NEEDS_NIXL
from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "pins_broken.yaml"
MODULE = "tests.checks.pins_broken"
NOTIFY_BROKEN = "HeldEmptyReadNixlPushConnector"
WRITE_BROKEN = "WriteDroppedNixlPushConnector"
ROUNDTRIP_BROKEN = "ScribblingExampleConnector"
SEVERAL = "2 independent failures"

RUN = SelfTestRun.of_broken("test_pair_notify_only and aborted-unscheduled", "NixlPushConnector", MODULE,
                            [NOTIFY_BROKEN], profiles=[PROFILES])
RUN_WRITE = SelfTestRun.of_broken("test_pair_write_failure and write-post-error", "NixlPushConnector", MODULE,
                                  [WRITE_BROKEN], profiles=[PROFILES])
RUN_ROUNDTRIP = SelfTestRun.of_broken("test_roundtrip_scenario and one-past-block and bs32", "ExampleConnector",
                                      MODULE, [ROUNDTRIP_BROKEN], profiles=[PROFILES])

pins_run = results_of(RUN)
write_run = results_of(RUN_WRITE)
roundtrip_run = results_of(RUN_ROUNDTRIP)


def only_outcome(results, name):
    """The one outcome of connector ``name`` in a run's ``results`` (status, outcomes, output)."""
    _, outcomes, output = results
    mine = of_connector(outcomes, name)
    assert len(mine) == 1, ([o.nodeid for o in outcomes], output[-3000:])
    return mine[0]


def assert_pinned(outcome, reason):
    """An expected failure (recorded as skipped), with the pin's ``reason``."""
    assert outcome.outcome == "skipped" and reason in outcome.message, (outcome.outcome, outcome.message[:1500])


def assert_red(results, name, words):
    """Connector ``name`` failed, in a run that failed, with every one of ``words``."""
    assert results[0] == 1, results[2][-3000:]
    outcome = only_outcome(results, name)
    assert outcome.outcome == "failed", (outcome.outcome, outcome.message[:1500])
    for word in words:
        assert word in outcome.message, (word, outcome.message[:3000])


@NEEDS_NIXL
def test_the_real_connector_fails_as_the_pinned_finding_only(pins_run):
    assert_pinned(only_outcome(pins_run, "NixlPushConnector"), "never notifies the producer")


@NEEDS_NIXL
def test_a_consumer_bug_behind_the_pin_fails_red(pins_run):
    assert_red(pins_run, NOTIFY_BROKEN, [NOTIFY_BROKEN, SEVERAL, "the consumer did not finish them",
                                         "the producer did not release its pages (finished_sending)",
                                         "consumer holds"])


@NEEDS_NIXL
def test_the_real_write_failure_is_the_pinned_finding_only(write_run):
    assert_pinned(only_outcome(write_run, "NixlPushConnector"), "recorded on that side only")


@NEEDS_NIXL
def test_a_producer_that_never_writes_fails_red_behind_the_write_failure_pin(write_run):
    assert_red(write_run, WRITE_BROKEN, [WRITE_BROKEN, SEVERAL, "the consumer neither failed nor finished its request",
                                         "posted nothing the fault could act on (0 posted)"])


def test_the_real_lost_hit_is_the_pinned_finding_only(roundtrip_run):
    assert_pinned(only_outcome(roundtrip_run, "ExampleConnector"), "is never found again")


def test_a_stray_write_behind_the_lost_hit_pin_fails_red(roundtrip_run):
    assert_red(roundtrip_run, ROUNDTRIP_BROKEN, [ROUNDTRIP_BROKEN, SEVERAL, "reported no cache hit for req-0",
                                                 "block 0 slot 0 changed in the consumer's cache"])
