"""The round-trip fails a connector whose KV events or transfer stats vLLM cannot use, through the driver's oracle.

What a connector hands vLLM's scheduler besides its claims and transfers was judged only where a workload enabled KV
events (checks/offload_events.py) or the wrapper check's runner reported worker stats, never by the round-trip.
Two copies of ExampleConnector whose bytes are ExampleConnector's, so the round-trip passed both:

* UnannouncedRemovalConnector (published_broken.py) announces the eviction of each finished request's first block, a
  block no ``BlockStored`` of it named. The scheduler driver judges the events vLLM takes at every step
  (conformance/engine/published.py).
* ListedWorkerEventsConnector (published_broken.py) hands vLLM's runner its worker's KV events as a plain list, not
  the KVConnectorKVEvents base.py promises. The runner stand-in carries the worker's events in KVConnectorOutput as
  vLLM's runner does, judging them against that promise.
* UnreducibleStatsConnector (stats_broken.py) reports the layers its worker saved in stats without ``reduce``. The
  runner stand-in reports the worker's stats every step as vLLM's runner does, the driver collects stats as a served
  vLLM does, and every step's returned stats go to vLLM's KVConnectorLogging (conformance/engine/stats_logged.py),
  which raises NotImplementedError summarizing them.
* UnexportedStatsConnector (stats_broken.py) reports the same stats with ``reduce``, and registers Prometheus metrics
  that read them under an older key. Every step's returned stats also go to vLLM's KVConnectorProm, whose observe
  raises KeyError.

Each fails every round-trip, naming the connector, the step and the channel; the unmodified ExampleConnector passes
the same checks. The run's selection is test_roundtrip_catches.py's, so they share one suite run.
"""

from __future__ import annotations

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

# broken copy -> the words each of its round-trip failures must hold
WORDS = {
    "UnannouncedRemovalConnector": (
        "UnannouncedRemovalConnector (kv_both, scheduler side), step ", "(update_from_output), engine 1 over this "
        "storage: the KV events its take_events() handed vLLM: a BlockRemoved of block ",
        "(group None, medium STORAGE), which no engine over this storage holds as its events tell it (no BlockStored "
        "ever named it): a KV-aware router is told to drop a block it was never told of"),
    "ListedWorkerEventsConnector": (
        "ListedWorkerEventsConnector (kv_both, worker side), step ", "get_kv_connector_kv_cache_events() returned "
        "[BlockStored(", "(list); expected a KVConnectorKVEvents or None"),
    "UnreducibleStatsConnector": (
        "UnreducibleStatsConnector, step ", " (update_from_output): its transfer stats: vLLM's stats logger "
        "(KVConnectorLogging.log) raised NotImplementedError summarizing the connector stats vLLM's scheduler "
        "returned, {'saved_request_layers': ", "rebuilt as SavedLayerStats, whose is_empty() and reduce() it calls "
        "at the end of every log interval"),
    "UnexportedStatsConnector": (
        "UnexportedStatsConnector, step ", " (update_from_output): its transfer stats: vLLM's Prometheus logger "
        "(KVConnectorProm.observe) raised KeyError: 'saved_layers' exporting the connector stats vLLM's scheduler "
        "returned, {'saved_request_layers': ", "through the connector class's metrics (SavedLayerPromMetrics, from "
        "build_prom_metrics)"),
}
SELECTION = "test_roundtrip and not layout and not mla and not scenario and not other_device"

EVENTS_RUN = SelfTestRun.of_broken(SELECTION, "ExampleConnector", "tests.checks.published_broken",
                                  ["UnannouncedRemovalConnector", "ListedWorkerEventsConnector"])
STATS_RUN = SelfTestRun.of_broken(SELECTION, "ExampleConnector", "tests.checks.stats_broken",
                                 ["UnreducibleStatsConnector", "UnexportedStatsConnector"])

events_run = results_of(EVENTS_RUN)
stats_run = results_of(STATS_RUN)
RUNS = {"UnannouncedRemovalConnector": "events_run", "ListedWorkerEventsConnector": "events_run",
        "UnreducibleStatsConnector": "stats_run", "UnexportedStatsConnector": "stats_run"}


@pytest.mark.parametrize("broken", sorted(WORDS))
def test_the_roundtrip_fails_what_vllm_cannot_publish(broken, request):
    returncode, outcomes, output = request.getfixturevalue(RUNS[broken])
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, broken)
    assert len(mine) == 4 and all(o.outcome == "failed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
    for outcome in mine:
        for words in WORDS[broken]:
            assert words in outcome.message, (words, outcome.nodeid, outcome.message[:1500])


@pytest.mark.parametrize("run", sorted(RUNS.values()))
def test_the_unmodified_example_connector_passes_them(run, request):
    _, outcomes, output = request.getfixturevalue(run)
    mine = of_connector(outcomes, "ExampleConnector")
    assert len(mine) == 4 and all(o.outcome == "passed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
