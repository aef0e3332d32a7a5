"""Wrappers as vLLM runs them, over children that do real work; each broken MultiConnector copy fails.

* vLLM's attention layers save through the connector only while it ``has_connector_metadata()``; the
  runner stand-in gates them the same way, so UnflaggedMultiConnector (binds its children, not itself)
  saves nothing and its round-trip finds nothing.
* MultiConnector's ``late-saves`` variant runs it over three children whose saves finish steps apart
  and that store from the blocks ``update_state_after_alloc`` hands them (conformance/connectors/late_save.py);
  FirstChildFinishMultiConnector reports a request finished when the first child does, so the second child's
  finish reports it again, and vLLM frees blocks a child has yet to read; EmptyBlocksMultiConnector hands
  the children it does not load from empty blocks, so they store nothing and promised hits are lost.
  LastHitMultiConnector, over the plain profile's two children that both hold the stored prompts, hands a hit to the
  last child that claims it, though vLLM's MultiConnector loads from the first (conformance/checks/wrapper_claims.py).
* The lifecycle check (conformance/checks/wrapper_lifecycle.py) asks the wrapper's engine-lifecycle hooks through
  vLLM's callers: StopsAtFailedShutdownMultiConnector stops shutting its children down at the first child whose
  shutdown raises; FirstChildResetMultiConnector forwards a cache reset to its first child only;
  LastStatsWinMultiConnector keeps one child's transfer stats per class, so vLLM's stats logger loses the other's;
  FirstChildEventsMultiConnector takes its first child's KV events only, so the other's never reach vLLM's event
  publisher; DroppedLoadErrorsMultiConnector reports its first child's failed loads only, so the block the other
  child failed to load never reaches vLLM's scheduler, which would have recomputed it.

The unmodified MultiConnector, and its late-saves variant, pass the same tests. Copies in
tests/checks/multi_broken.py, given their profiles by the YAML beside it.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun
from tests.suite_run import REPO, of_connector

PROFILES = [REPO / "tests" / "checks" / "multi_broken.yaml"]
ROUNDTRIP = ("test_roundtrip and float16 and not bfloat16 and not mla and not layout and not scenario"
             " and not other_device")
WORKLOAD = "test_workload_scenario and (occupied-pools or abort-mid-save)"
LIFECYCLE = "test_wrapper_engine_hooks or test_wrapper_shutdown or test_wrapper_reports"
# broken copy -> (the lifecycle test it fails, the words its failure carries); it passes the others
BROKEN_LIFECYCLE = {
    "StopsAtFailedShutdownMultiConnector": (
        "test_wrapper_shutdown",
        ("shutdown() never reached child 1 (ExampleConnector) after child 0 (ExampleConnector)'s shutdown raised",)),
    "FirstChildResetMultiConnector": (
        "test_wrapper_engine_hooks", ("Scheduler.reset_connector_cache never reached child 1 (ExampleConnector)",)),
    "LastStatsWinMultiConnector": (
        "test_wrapper_reports", ("vLLM's stats logger summarized its transfer stats as",)),
    "FirstChildEventsMultiConnector": (
        "test_wrapper_reports", ("child 1 (ReportingExampleConnector) produced 3 event(s): BlockStored(",
                                 "that the wrapper never took from it")),
    "DroppedLoadErrorsMultiConnector": (
        "test_wrapper_reports", ("child 1 (ReportingExampleConnector) reported blocks [",
                                 "as failed to load in step", "got invalid_block_ids none from the wrapper")),
}
# broken copy -> words each of its workload failures carries
BROKEN_WORKLOAD = {
    "FirstChildFinishMultiConnector": "as finished sending, but no such transfer was in flight",
    "EmptyBlocksMultiConnector": "the connector claimed 0 external tokens after 0 computed ones",
    "LastHitMultiConnector": ("which it handed on as child 0 (ExampleConnector): 0, child 1 (ExampleConnector): 64; "
                              "but child 0 (ExampleConnector), the first child that claimed them, is the one"),
}
BROKEN = "tests.checks.multi_broken"
ROUNDTRIP_RUN = SelfTestRun.of_broken(ROUNDTRIP, "MultiConnector", BROKEN, ["UnflaggedMultiConnector"],
                                      profiles=PROFILES)
WORKLOAD_RUN = SelfTestRun.of_broken(WORKLOAD, "MultiConnector", BROKEN, BROKEN_WORKLOAD, profiles=PROFILES)
LIFECYCLE_RUN = SelfTestRun.of_broken(LIFECYCLE, "MultiConnector", BROKEN, BROKEN_LIFECYCLE, profiles=PROFILES)


def test_a_wrapper_that_leaves_its_flag_unset_saves_nothing(shared_suite):
    returncode, outcomes, output = shared_suite.results(ROUNDTRIP_RUN)
    assert returncode == 1, output[-3000:]
    original, broken = of_connector(outcomes, "MultiConnector"), of_connector(outcomes, "UnflaggedMultiConnector")
    assert len(original) == 1 and original[0].outcome == "passed", [(o.nodeid, o.message[:800]) for o in original]
    assert len(broken) == 1 and broken[0].outcome == "failed", [(o.nodeid, o.message[:800]) for o in broken]
    assert "UnflaggedMultiConnector reported no cache hit for req-0" in broken[0].message, broken[0].message[:1500]


def test_wrappers_that_mishandle_their_busy_children_fail(shared_suite):
    returncode, outcomes, output = shared_suite.results(WORKLOAD_RUN)
    assert returncode == 1, output[-3000:]
    # the plain one and its late-saves variant (the lifecycle variants run no workload)
    original = [o for o in outcomes if "-MultiConnector-" in o.nodeid or "-MultiConnector@late-saves-" in o.nodeid]
    assert len(original) == 4 and sum("@late-saves" in o.nodeid for o in original) == 2, output[-3000:]
    assert all(o.outcome == "passed" for o in original), [(o.nodeid, o.message[:800]) for o in original]
    for name, words in BROKEN_WORKLOAD.items():
        broken = of_connector(outcomes, name)
        assert len(broken) == 2, output[-3000:]
        for outcome in broken:
            assert outcome.outcome == "failed", (outcome.nodeid, outcome.message[:800])
            assert words in outcome.message, outcome.message[:1500]


def test_wrappers_that_forward_a_lifecycle_hook_to_some_children_fail(shared_suite):
    returncode, outcomes, output = shared_suite.results(LIFECYCLE_RUN)
    assert returncode == 1, output[-3000:]
    # every lifecycle test of the unmodified wrapper passes, but test_wrapper_reports where no child reports anything
    original = [o for o in outcomes if "-MultiConnector" in o.nodeid and "@late-saves" not in o.nodeid]
    assert len(original) == 9, output[-3000:]
    skipped = [o.nodeid for o in original if o.outcome == "skipped"]
    assert len(skipped) == 2 and all("test_wrapper_reports[" in n and "@reporting" not in n for n in skipped), skipped
    assert all(o.outcome in ("passed", "skipped") for o in original), [(o.nodeid, o.message[:800]) for o in original]
    for name, (failing, words) in BROKEN_LIFECYCLE.items():
        broken = of_connector(outcomes, name)
        assert len(broken) == 3, output[-3000:]
        for outcome in broken:
            if f"{failing}[" in outcome.nodeid:
                assert outcome.outcome == "failed", (outcome.nodeid, outcome.message[:800])
                assert all(fragment in outcome.message for fragment in words), outcome.message[:1500]
            else:
                assert outcome.outcome in ("passed", "skipped"), (outcome.nodeid, outcome.message[:800])
