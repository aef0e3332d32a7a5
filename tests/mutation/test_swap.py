"""Swapping a mutant into the live process: a function's code where it can, the module re-run where it cannot."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kvconform.conformance.mutation import swap

SOURCE = '''\
import functools

SCALE = 2


def wrap(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper


class Box:
    def __init__(self, n):
        self.n = n

    @wrap
    def doubled(self):
        return self.n * SCALE

    def nested(self):
        def inner():
            return self.n + 1
        return inner()

    def size(self):
        return len(super().__repr__()) > 0
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "swapped_box.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("swapped_box")
    sys.modules.pop("swapped_box", None)


def test_a_changed_method_takes_effect_through_its_decorator_and_bound_methods(module: ModuleType) -> None:
    box = module.Box(3)
    bound = box.doubled
    live = swap.LiveFunctions([module.__file__])
    how = swap.apply(module, module.__file__, SOURCE.replace("self.n * SCALE", "self.n + SCALE"), "Box.doubled", live)
    assert how == swap.SWAPPED
    assert (bound(), box.doubled(), module.Box(3).doubled()) == (5, 5, 5)


def test_a_change_in_a_nested_function_swaps_the_outer_one(module: ModuleType) -> None:
    live = swap.LiveFunctions([module.__file__])
    assert swap.apply(module, module.__file__, SOURCE.replace("self.n + 1", "self.n - 1"), "Box.nested",
                      live) == swap.SWAPPED
    assert module.Box(3).nested() == 2


def test_a_closure_over_class_swaps_too(module: ModuleType) -> None:
    live = swap.LiveFunctions([module.__file__])
    assert swap.apply(module, module.__file__, SOURCE.replace("> 0", "< 0"), "Box.size", live) == swap.SWAPPED
    assert module.Box(1).size() is False


def test_a_module_level_change_reruns_the_module(module: ModuleType) -> None:
    old_class = module.Box
    live = swap.LiveFunctions([module.__file__])
    assert swap.apply(module, module.__file__, SOURCE.replace("SCALE = 2", "SCALE = 3"), None, live) == swap.RERUN
    assert module.SCALE == 3 and module.Box(2).doubled() == 6 and module.Box is not old_class


def test_a_function_not_alive_falls_back_to_rerunning_the_module(module: ModuleType) -> None:
    live = swap.LiveFunctions([])  # found nothing: the function cannot be swapped
    assert swap.apply(module, module.__file__, SOURCE.replace("self.n + 1", "self.n + 5"), "Box.nested",
                      live) == swap.RERUN
    assert module.Box(1).nested() == 6


def test_viable_says_why_a_mutated_source_does_not_compile() -> None:
    assert swap.viable("x = 1\n", "m.py") is None
    assert (swap.viable("x = = 1\n", "m.py") or "").startswith("SyntaxError: ")
