"""The workload's kv-events scenario follows OffloadingConnector's KV events to vLLM's event publisher: it fails a
scheduler half that drops its manager's events, or only the evictions', and passes the unmodified connector.

One suite run drives OffloadingConnector (its cpu-medium variant: a 64 MiB tier that never evicts here) and
tests/checks/offloading_events_broken.py's connectors (the unmodified one and a copy on a tier of four chunks, which
the scenario's stores overflow) through the kv-events workload with vLLM's KV cache events enabled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_events_broken.yaml"
PASSING = ("OffloadingConnector@cpu-medium", "SmallTierOffloadingConnector")
# copy -> words its failure must carry: the engine and step, the request, the channel and the missing event
CAUGHT: dict[str, tuple[str, ...]] = {
    "DroppedEventsOffloadingConnector": (
        "producer engine, step", "KV events: the offloading manager stored block", "for request p0",
        "vLLM's event publisher was never handed its BlockStored", "(the connector's events that step: none)"),
    "DroppedRemovalsOffloadingConnector": (
        "producer engine, step", "KV events: the offloading manager evicted, to make room for a store of, block",
        "for request p", "vLLM's event publisher was never handed its BlockRemoved"),
}

RUN = SelfTestRun.of_broken("test_workload_scenario and kv-events", "OffloadingConnector",
                            "tests.checks.offloading_events_broken", [*CAUGHT, "SmallTierOffloadingConnector"],
                            profiles=[PROFILES])


events_run = results_of(RUN)


@pytest.mark.parametrize("connector", PASSING)
def test_unmodified_offloading_connector_passes(events_run, connector):
    _, outcomes, output = events_run
    mine = of_connector(outcomes, connector)
    assert len(mine) == 1, ([o.nodeid for o in outcomes], output[-3000:])
    assert mine[0].outcome == "passed", (mine[0].nodeid, mine[0].outcome, mine[0].message[:800])


@pytest.mark.parametrize("broken", list(CAUGHT))
def test_each_copy_fails_naming_the_lost_event(events_run, broken):
    returncode, outcomes, output = events_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, broken)
    assert [o.outcome for o in mine] == ["failed"], ([o.nodeid for o in outcomes], output[-3000:])
    for word in CAUGHT[broken]:
        assert word in mine[0].message, (word, mine[0].message[:1500])
