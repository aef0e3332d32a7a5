"""A producer of more tensor-parallel ranks than its consumer (conformance/test_pair_ranks.py) fails the broken copies
made for it and passes the real connector.

A shared run covers the ranked pair over its models (grouped-query heads split across the producer's ranks, an MLA
latent replicated on each, that MLA pair with the notifications to the replicas lost, and a hybrid model of one KV
head replicated on both ranks) for the unmodified NixlConnector (all pass) and tests/checks/nixl_ranks_broken.py's
copies, each failing the model made for it with words that name its mistake and passing the others and the plain pair
round-trip: with one rank per side their edits change nothing.
"""

from __future__ import annotations

from fnmatch import fnmatch

import pytest

from kvconform.conformance.engine.ranks import SHARED_MEMORY
from tests.checks.cases import NEEDS_NIXL, ROUNDTRIP, Case, assert_meets_its_cases, selection
from tests.shared_run.plan import SelfTestRun
from tests.suite_run import REPO

pytestmark = NEEDS_NIXL

PROFILES = REPO / "tests" / "checks" / "nixl_ranks_broken.yaml"
RANKS_SHARED_MEMORY = "world-kvconform-ranks-*"  # vLLM's CPU communicator's segments, named after the ranks' world
GQA = Case("(test_pair_ranks and gqa)", "-gqa]")
MLA = Case("(test_pair_ranks and mla and not lost)", "-mla]")
MLA_LOST = Case("(test_pair_ranks and mla-lost-notification)", "-mla-lost-notification]")
REPLICATED = Case("(test_pair_ranks and replicated-kv-heads)", "-replicated-kv-heads]")

CASES: dict[str, list[Case]] = {
    "NixlConnector": [GQA, MLA, MLA_LOST, REPLICATED],
    "SwappedRankSlicesConnector": [
        Case(GQA.select, GQA.nodeid_part, "failed",
             ["SwappedRankSlicesConnector", "from a producer of TP 2", "does not hold the producer's bytes in the "
              "heads of producer rank(s) [0, 1] of 2"]),
        MLA, ROUNDTRIP],
    "UnnotifiedReplicasConnector": [
        Case(MLA.select, MLA.nodeid_part, "failed",
             ["UnnotifiedReplicasConnector", "or a producer rank did not release its pages (finished_sending from "
              "every rank)", "'producer': ['req-0', 'req-1']"]),
        GQA, MLA_LOST, ROUNDTRIP],
    "EscalatedReplicaNotificationConnector": [
        Case(MLA_LOST.select, MLA_LOST.nodeid_part, "failed",
             ["EscalatedReplicaNotificationConnector: could not notify a replica"]),
        GQA, MLA, ROUNDTRIP],
    "ReadsEveryReplicaConnector": [
        Case(REPLICATED.select, REPLICATED.nodeid_part, "failed",
             ["ReadsEveryReplicaConnector", "from a producer of TP 2", "does not hold the producer's bytes in the "
              "heads of producer rank(s) [0] of 2, whose heads rank(s) [1] replicate"]),
        GQA, MLA, ROUNDTRIP],
}


RUN = SelfTestRun.of_broken(selection(CASES), "NixlConnector", "tests.checks.nixl_ranks_broken",
                           [name for name in CASES if name != "NixlConnector"], profiles=[PROFILES])


@pytest.fixture(scope="module")
def ranks_run(shared_suite):
    """The run's status, outcomes and output, and the ranks' shared-memory segments its shared run left behind."""
    status, outcomes, output = shared_suite.results(RUN)
    left = shared_suite.group_results(RUN).shared_memory_left
    return status, outcomes, output, {name for name in left if fnmatch(name, RANKS_SHARED_MEMORY)}


@pytest.mark.parametrize("name", list(CASES))
def test_each_connector_meets_its_cases(ranks_run, name):
    _, outcomes, output, _ = ranks_run
    assert_meets_its_cases(outcomes, output, name, CASES[name])


@pytest.mark.skipif(not SHARED_MEMORY.is_dir(), reason=f"no {SHARED_MEMORY} on this system")
def test_the_ranks_leave_no_shared_memory_behind(ranks_run):
    """vLLM's CPU communicator gives each rank a shared-memory segment (8 MB) that only a normal process end
    unlinks; rank processes end with os._exit, so the harness removes them: a run must leave none."""
    _, outcomes, _, left = ranks_run
    assert any("test_pair_ranks" in outcome.nodeid for outcome in outcomes)
    assert not left, f"the ranked pairs left {len(left)} shared-memory segment(s): {sorted(left)[:4]}"
