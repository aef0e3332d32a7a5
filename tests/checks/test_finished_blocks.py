"""The rule for the block ids handed to ``request_finished`` (conformance/checks/finished_blocks.py), and the
``--kvconform-scheduler-cls`` spelling (conformance/engine/scheduler_class.py): pure functions, no vLLM."""

from __future__ import annotations

import pytest

from kvconform.conformance.checks.finished_blocks import finished_blocks_problem
from kvconform.conformance.engine import scheduler_class


def test_the_computed_blocks_exactly_pass():
    # 64 computed of 65 tokens: the sampled token's block (9) is held but not handed
    assert finished_blocks_problem("r", [3, 4], [3, 4, 9], 64, 65, 32) is None
    assert finished_blocks_problem("r", [3, 4, 9], [3, 4, 9], 65, 66, 32) is None  # a partial last block counts
    assert finished_blocks_problem("r", [], [5], 0, 40, 32) is None  # nothing computed: nothing handed


@pytest.mark.parametrize(("handed", "words"), [
    ([3, 4, 9], "1 past its computed tokens: [9]"),
    ([3], "1 of its computed blocks missing: [4]"),
    ([3, 4, 7], "1 not its own: [7]"),
    ([4, 3], "in another order than its block table [3, 4]"),
])
def test_other_block_lists_fail_naming_the_blocks(handed, words):
    problem = finished_blocks_problem("req-1", handed, [3, 4, 9], 64, 65, 32)
    assert problem is not None and problem.startswith("request_finished block ids for req-1: ")
    assert words in problem
    assert "64 computed token(s) of 65 (block size 32) fill 2 of the 3 it held" in problem


def test_scheduler_class_spelling():
    assert scheduler_class.qualname_of("pkg.mod:MyScheduler") == "pkg.mod.MyScheduler"
    for bad in ("pkg.mod.MyScheduler", "pkg:mod:Cls", ":Cls", "pkg:", "pkg mod:Cls"):
        with pytest.raises(scheduler_class.SchedulerClassError, match="expected module:Class"):
            scheduler_class.qualname_of(bad)


def test_a_chosen_class_goes_into_the_scheduler_config_fields():
    try:
        scheduler_class.choose("pkg.mod.MyScheduler")
        assert scheduler_class.config_fields() == {"scheduler_cls": "pkg.mod.MyScheduler"}
    finally:
        scheduler_class.choose(None)
    assert scheduler_class.config_fields() == {}
