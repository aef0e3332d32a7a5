"""Wrappers as vLLM runs them: the round-trip fails a MultiConnector copy whose bind leaves its own flag unset.

vLLM's attention layers save through the connector only while it ``has_connector_metadata()``; the runner
stand-in gates them the same way, so the copy in tests/broken_connectors/multi_broken.py saves nothing and
the consumer finds nothing, while the unmodified MultiConnector passes the same tests.
"""

from __future__ import annotations

from tests.selftest.suite_run import REPO, of_connector, run_broken

SELECTION = ("test_roundtrip and float16 and not bfloat16 and not mla and not layout and not scenario"
             " and not other_device")


def test_a_wrapper_that_leaves_its_flag_unset_saves_nothing(tmp_path):
    returncode, outcomes, output = run_broken(
        tmp_path, SELECTION, "MultiConnector", "multi_broken", ["UnflaggedMultiConnector"],
        extra=("--profiles", str(REPO / "tests" / "broken_connectors" / "multi_broken.yaml")))
    assert returncode == 1, output[-3000:]
    original, broken = of_connector(outcomes, "MultiConnector"), of_connector(outcomes, "UnflaggedMultiConnector")
    assert len(original) == 1 and original[0].outcome == "passed", [(o.nodeid, o.message[:800]) for o in original]
    assert len(broken) == 1 and broken[0].outcome == "failed", [(o.nodeid, o.message[:800]) for o in broken]
    assert "UnflaggedMultiConnector reported no cache hit for req-0" in broken[0].message, broken[0].message[:1500]
