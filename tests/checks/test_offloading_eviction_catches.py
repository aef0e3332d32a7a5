"""The workload's kv-events scenario holds an offloading tier to its room: it fails vLLM 0.32's CPU manager counting a
store's evictions as ``len // free`` (the mutation floor's survivor at ``cpu/manager.py:311``) and passes the
unmodified connector on the same four-chunk tier (OffloadingConnector@small-tier).

The copy (tests/checks/offloading_eviction_broken.py) runs with the small-tier variant's settings, its medium's
manager edited; the suite run is the one the kv-events self-test (test_offloading_events_catches.py) shares.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import of_connector

PROFILES = Path(__file__).resolve().parent / "offloading_eviction_broken.yaml"
BROKEN = "FloorDivEvictionOffloadingConnector"
# the producer's second prompt (3 blocks) into a tier of 4 chunks holding the first (3 blocks): 2 to evict, not 3
CAUGHT = ("producer engine, step", "CPU tier: a store for request p1", "prepare_store evicted 3 block(s) to store 3 "
          "into a tier of 4 chunks holding 3 blocks, which lacked room for 2: 1 evicted with room to keep them")

RUN = SelfTestRun.of_broken("test_workload_scenario and kv-events", "OffloadingConnector",
                            "tests.checks.offloading_eviction_broken", [BROKEN], profiles=[PROFILES])


eviction_run = results_of(RUN)


@pytest.mark.parametrize("connector", ["OffloadingConnector@small-tier", "OffloadingConnector@cpu-medium"])
def test_the_unmodified_connector_passes_on_a_tier_its_stores_overflow(eviction_run, connector):
    _, outcomes, output = eviction_run
    mine = of_connector(outcomes, connector)
    assert [o.outcome for o in mine] == ["passed"], ([o.nodeid for o in outcomes], output[-3000:])


def test_a_store_evicting_more_than_it_lacks_room_for_fails(eviction_run):
    returncode, outcomes, output = eviction_run
    assert returncode == 1, output[-3000:]
    mine = of_connector(outcomes, BROKEN)
    assert [o.outcome for o in mine] == ["failed"], ([o.nodeid for o in outcomes], output[-3000:])
    for words in CAUGHT:
        assert words in mine[0].message, (words, mine[0].message[:1500])
