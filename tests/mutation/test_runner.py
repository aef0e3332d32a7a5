"""The engine end to end on a toy module and its own tests (no vLLM): baseline, reach, swap, fates.

The same machinery ``kvconform mutate`` drives on a connector: a baseline in a forked child with per-test coverage,
then each mutant forked with its change swapped in and only the tests that reached it run. The toy suite has a
test that checks, one that fails on the unchanged code (it can kill nothing) and a function no test calls.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kvconform.conformance.mutation.plan import plan_run
from kvconform.conformance.mutation.runner import run_mutants
from kvconform.conformance.mutation.swap import LiveFunctions
from kvconform.conformance.mutation.warm import OwnModule

pytest.importorskip("cosmic_ray", reason="cosmic-ray (the 'mutate' extra) is not installed")

NAME = "toy_calc_for_mutation"
MODULE = '''\
def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def countdown(n):
    while n > 0:
        n = n - 1
    return n


def half(x):
    return x // 2


def unused():
    return True
'''
TESTS = f'''\
import {NAME} as calc


def test_clamp():
    assert (calc.clamp(5, 0, 3), calc.clamp(-1, 0, 3), calc.clamp(2, 0, 3)) == (3, 0, 2)


def test_countdown():
    assert calc.countdown(3) == 0


def test_half_fails_on_the_unchanged_code():
    assert calc.half(4) == 3
'''
BOUND_S = 5.0  # the toy's tests take milliseconds: a mutant that loops for ever is cut short here


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, list[str]]]:
    (tmp_path / f"{NAME}.py").write_text(MODULE)
    (tmp_path / "test_toy.py").write_text(TESTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = [str(tmp_path / "test_toy.py"), "-p", "no:kvconform", "-p", "no:cacheprovider", "-q",
            "--rootdir", str(tmp_path)]
    yield importlib.import_module(NAME), args
    sys.modules.pop(NAME, None)


def _id(line: int, operator: str) -> str:
    return f"toy/calc.py:{line}:core/{operator}:0"


def test_fates_of_a_toy_modules_mutants(toy: tuple[ModuleType, list[str]], tmp_path: Path) -> None:
    module, args = toy
    file = str(module.__file__)
    work = tmp_path / "work"
    work.mkdir()
    plan = plan_run([OwnModule(file, "toy/calc.py", NAME)], args, work, None, None, 0)
    assert plan.baseline.counts() == {"passed": 2, "failed": 1}
    settled = {m.id: m for m in plan.settled}
    assert settled[_id(20, "ReplaceTrueWithFalse")].fate == "not_reached"  # no test calls unused()
    assert settled[_id(16, "ReplaceBinaryOperator_FloorDiv_Mul")].fate == "not_reached"  # its test fails anyway

    chosen = {_id(2, "ReplaceComparisonOperator_Lt_Gt"), _id(2, "ReplaceComparisonOperator_Lt_LtE"),
              _id(11, "ReplaceBinaryOperator_Sub_Add")}
    to_run = [dataclasses.replace(p, bound=BOUND_S) for p in plan.to_run if p.candidate.id in chosen]
    assert len(to_run) == 3 and all(p.tests for p in to_run)
    told = []
    ran = {m.id: m for m in run_mutants(to_run, {file: module}, LiveFunctions([file]), args, work, 2,
                                        lambda done, m: told.append(done))}
    killed = ran[_id(2, "ReplaceComparisonOperator_Lt_Gt")]
    assert (killed.fate, killed.function, killed.tests) == ("killed", "clamp", 1)
    assert killed.killed_by.startswith("test_toy.py::test_clamp: assert ")
    assert ran[_id(2, "ReplaceComparisonOperator_Lt_LtE")].fate == "survived"  # clamp(0, 0, 3) is never asked
    looping = ran[_id(11, "ReplaceBinaryOperator_Sub_Add")]
    assert looping.fate == "timed_out" and "test_toy.py::test_countdown" in looping.killed_by
    assert sorted(told) == [1, 2, 3]
    assert module.clamp(-1, 0, 3) == 0  # the parent's code never changed
