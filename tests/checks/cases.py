"""Self-tests that run several connectors through chosen tests in one suite run, each with what it must show:
the real connector passes them, each broken copy fails the one made for it (with words that name its mistake)
and passes the others selected for it. Used by the NIXL situations' self-tests."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from tests.suite_run import of_connector

NEEDS_NIXL = pytest.mark.skipif(importlib.util.find_spec("nixl") is None,
                                reason="the NIXL connectors need package nixl, which is not installed here")


@dataclass(frozen=True)
class Case:
    select: str  # a -k expression for the test, beside the connector's name
    nodeid_part: str  # what its node id contains
    outcome: str = "passed"
    words: list[str] = field(default_factory=list)  # what its failure must say


ROUNDTRIP = Case("(test_roundtrip and float16 and not bfloat16 and not mla)", "test_roundtrip[")


def selection(cases: dict[str, list[Case]]) -> str:
    """The ``-k`` expression that runs each connector's cases and nothing else."""
    return " or ".join(f"({name} and ({' or '.join(case.select for case in mine)}))" for name, mine in cases.items())


def assert_meets_its_cases(outcomes: list, output: str, name: str, cases: list[Case]) -> None:
    """Connector ``name`` ran exactly ``cases``, each with its outcome and words."""
    mine = of_connector(outcomes, name)
    assert mine, output[-3000:]
    for outcome in mine:
        case = next((c for c in cases if c.nodeid_part in outcome.nodeid), None)
        assert case is not None, f"{outcome.nodeid} was not meant to run"
        assert outcome.outcome == case.outcome, (outcome.nodeid, outcome.outcome, outcome.message[:1500])
        for word in case.words:
            assert word in outcome.message, (word, outcome.message[:1500])
    ran = {case.nodeid_part for case in cases for o in mine if case.nodeid_part in o.nodeid}
    assert ran == {case.nodeid_part for case in cases}, [o.nodeid for o in mine]
