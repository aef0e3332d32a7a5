"""The round-trip fails a connector whose transfer stats vLLM's stats logger cannot summarize, through that logger.

A worker's transfer stats reached vLLM's scheduler only in the wrapper check, whose runner alone reported them, and
with stats off elsewhere nothing handed them to vLLM's stats logger. UnreducibleStatsConnector (stats_broken.py) is
ExampleConnector whose worker reports the layers it saved in stats without ``reduce``; its bytes are
ExampleConnector's, so the round-trip passed it. Now the model-runner stand-in reports the worker's stats every step
as vLLM's runner does, the scheduler driver collects stats as a served vLLM does, and every step's returned stats go
to vLLM's KVConnectorLogging (conformance/engine/stats_logged.py), which raises NotImplementedError summarizing
them: every round-trip fails, naming the connector, the step, its stats class and what vLLM's scheduler returned;
the unmodified ExampleConnector passes the same checks. The run's selection is test_roundtrip_catches.py's, so the
two share one suite run.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

BROKEN = "UnreducibleStatsConnector"
WORDS = ("UnreducibleStatsConnector, step ", " (update_from_output): its transfer stats: vLLM's stats logger "
         "(KVConnectorLogging.log) raised NotImplementedError summarizing the connector stats vLLM's scheduler "
         "returned, {'saved_request_layers': ", "rebuilt as SavedLayerStats, whose is_empty() and reduce() it calls "
         "at the end of every log interval")

RUN = SelfTestRun.of_broken("test_roundtrip and not layout and not mla and not scenario and not other_device",
                           "ExampleConnector", "tests.checks.stats_broken", [BROKEN])


stats_logged_run = results_of(RUN)


def test_the_roundtrip_fails_stats_vllms_logger_cannot_summarize(stats_logged_run):
    returncode, outcomes, output = stats_logged_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert len(mine) == 4 and all(o.outcome == "failed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
    for outcome in mine:
        for words in WORDS:
            assert words in outcome.message, (words, outcome.nodeid, outcome.message[:1500])


def test_the_unmodified_example_connector_passes_them(stats_logged_run):
    _, outcomes, output = stats_logged_run
    mine = of_connector(outcomes, "ExampleConnector")
    assert len(mine) == 4 and all(o.outcome == "passed" for o in mine), ([(o.nodeid, o.outcome) for o in mine],
                                                                          output[-3000:])
