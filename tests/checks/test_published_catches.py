"""The round-trip fails a connector whose KV events remove a block they never announced, through the driver's oracle.

What a connector's ``take_events()`` hands vLLM's scheduler used to be judged only where a workload enabled KV events
(checks/offload_events.py), never by the round-trip. UnannouncedRemovalConnector (published_broken.py) is
ExampleConnector announcing the eviction of each finished request's first block, a block no ``BlockStored`` of it
named; its bytes are ExampleConnector's, so the round-trip passed it. Now the scheduler driver judges the events vLLM
takes at every step (conformance/engine/published.py) and fails it in every round-trip, naming the connector, the
step, the channel and the block; the unmodified ExampleConnector passes the same checks. The run's selection is
test_roundtrip_catches.py's, so the two share one suite run.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

BROKEN = "UnannouncedRemovalConnector"
WORDS = ("UnannouncedRemovalConnector (kv_both, scheduler side), step ", "(update_from_output), engine 1 over this "
         "storage: the KV events its take_events() handed vLLM: a BlockRemoved of block ",
         "(group None, medium STORAGE), which no engine over this storage holds as its events tell it (no BlockStored "
         "ever named it): a KV-aware router is told to drop a block it was never told of")

RUN = SelfTestRun.of_broken("test_roundtrip and not layout and not mla and not scenario and not other_device",
                           "ExampleConnector", "tests.checks.published_broken", [BROKEN])


published_run = results_of(RUN)


def test_the_roundtrip_fails_a_removal_never_announced(published_run):
    returncode, outcomes, output = published_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == 4 and all(o.outcome == "failed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
    for outcome in mine:
        for words in WORDS:
            assert words in outcome.message, (words, outcome.nodeid, outcome.message[:1500])


def test_the_unmodified_example_connector_passes_them(published_run):
    _, outcomes, output = published_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert len(mine) == 4 and all(o.outcome == "passed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
