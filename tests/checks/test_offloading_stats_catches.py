"""The scheduler-half check holds the CPU cache usage gauges OffloadingConnector hands vLLM: a manager whose read
usage is not the usage less the write usage fails, vLLM's own passes.

One suite run drives the unmodified OffloadingConnector and tests/checks/offloading_stats_broken.py's copy (the
mutation floor's survivor ``cpu/manager.py:472 ReplaceBinaryOperator_Sub_Mul``, written by hand) through
``test_scheduler_half`` on the late-out-of-order timing, whose stores stay in flight across steps (a write usage
above 0). The copy edits vLLM 0.32's manager, so this runs on the default release only (tests/conftest.py
ONE_RELEASE_TESTS).
"""

from __future__ import annotations

from pathlib import Path

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_stats_broken.yaml"
BROKEN = "ReadUsageOffloadingConnector"

RUN = SelfTestRun.of_broken("test_scheduler_half and late-out-of-order", "OffloadingConnector",
                            "tests.checks.offloading_stats_broken", [BROKEN], profiles=[PROFILES])


stats_run = results_of(RUN)


def test_offloading_connector_keeps_its_usage_gauges_whole(stats_run):
    _, outcomes, output = stats_run
    mine = [o for o in of_connector(outcomes, "OffloadingConnector") if "late-out-of-order" in o.nodeid]
    assert len(mine) == 1, ([o.nodeid for o in outcomes], output[-3000:])
    assert mine[0].outcome == "passed", (mine[0].nodeid, mine[0].message[:800])


def test_a_read_usage_no_load_pins_fails(stats_run):
    returncode, outcomes, output = stats_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert [o.outcome for o in mine] == ["failed"], ([(o.nodeid, o.outcome) for o in mine], output[-3000:])
    for word in ("SchedulerHalfFailure", "vllm:kv_offload_cpu_cache_read_usage_perc",
                 "the shares pinned by stores in flight (write) and by loads in flight (read) add up to",
                 "not to the share pinned by transfers in flight"):
        assert word in mine[0].message, (word, mine[0].message[:1500])
