"""Mutant enumeration: one walk finds what cosmic-ray's own visitor makes, occurrence for occurrence."""

from __future__ import annotations

import pytest

from kvconform.conformance.mutation.generate import candidates
from kvconform.conformance.mutation.operators import LEFT_OUT, operators

pytest.importorskip("cosmic_ray", reason="cosmic-ray (the 'mutate' extra) is not installed")

SOURCE = '''\
"""A module with a bit of everything an operator mutates."""

LIMIT = 4  # a number at module level


class Store:
    @property
    def size(self):
        return self.count * 2 + 1

    def put(self, items, strict=False):
        total = 0
        for item in items:
            if item is None or item < 0:
                continue
            if strict and not item:
                break
            total += item
        try:
            ratio = total / len(items)
        except (ZeroDivisionError, TypeError):
            ratio = -1.0
        while total > LIMIT:
            total = total - 1
        return ratio if total >= 0 else True
'''


def test_each_candidate_is_what_cosmic_rays_visitor_makes_for_its_occurrence() -> None:
    from cosmic_ray.mutating import MutationVisitor

    made = candidates(SOURCE, "pkg/store.py")
    by_name = dict(operators())
    assert len(made) > 40
    for candidate in made:
        expected = MutationVisitor.mutate_code(SOURCE, by_name[candidate.operator], candidate.occurrence)
        assert candidate.edit.apply(SOURCE) == expected, candidate.id


def test_every_occurrence_is_found_once_and_none_beyond() -> None:
    """The walk counts as cosmic-ray does: its visitor makes nothing past the last occurrence found."""
    from cosmic_ray.mutating import MutationVisitor

    made = candidates(SOURCE, "pkg/store.py")
    by_name = dict(operators())
    for name, operator in by_name.items():
        found = [c.occurrence for c in made if c.operator == name]
        assert found == sorted(set(found))
        assert MutationVisitor.mutate_code(SOURCE, operator, max(found, default=-1) + 1) is None, name


def test_ids_lines_and_diffs() -> None:
    made = candidates(SOURCE, "pkg/store.py")
    assert len({c.id for c in made}) == len(made)
    assert made == candidates(SOURCE, "pkg/store.py")  # stable across runs of the same source
    number = next(c for c in made if c.operator == "core/NumberReplacer")
    assert (number.line, number.id) == (3, "pkg/store.py:3:core/NumberReplacer:0")
    diff = number.diff(SOURCE)
    assert diff.startswith("--- a/pkg/store.py\n+++ b/pkg/store.py\n@@ -1,6 +1,6 @@\n")
    assert "-LIMIT = 4  # a number at module level\n+LIMIT = 5  # a number at module level\n" in diff
    decorator = next(c for c in made if c.operator == "core/RemoveDecorator")
    assert decorator.line == 7 and "-    @property\n" in decorator.diff(SOURCE)


def test_operators_left_out_are_named_with_a_reason() -> None:
    applied = {name.partition("/")[2] for name, _ in operators()}
    assert not applied & set(LEFT_OUT)
    assert {"VariableReplacer", "VariableInserter"} <= set(LEFT_OUT) and all(LEFT_OUT.values())
    assert {"NumberReplacer", "AddNot", "ExceptionReplacer", "ZeroIterationForLoop"} <= applied


ANNOTATED = '''\
def get(key: int | None, default: "str | None" = None) -> tuple[int | None, bool]:
    size: int | None = key
    return (key | 1, size)
'''


def test_type_annotations_are_not_mutated_and_occurrences_keep_cosmic_rays_numbers() -> None:
    from cosmic_ray.mutating import MutationVisitor

    made = candidates(ANNOTATED, "pkg/get.py")
    by_name = dict(operators())
    bit_or = [c for c in made if c.operator == "core/ReplaceBinaryOperator_BitOr_Add"]
    # the def's two come first, unmade (cosmic-ray itself skips an annotated assignment's)
    assert [(c.line, c.occurrence) for c in bit_or] == [(3, 2)]
    assert made and all(c.line == 3 for c in made)
    for candidate in made:
        expected = MutationVisitor.mutate_code(ANNOTATED, by_name[candidate.operator], candidate.occurrence)
        assert candidate.edit.apply(ANNOTATED) == expected, candidate.id


def test_a_position_the_operator_cannot_change_is_no_mutant_and_no_crash() -> None:
    # cosmic-ray 8.7's ExceptionReplacer offers each name of an except tuple, and raises on a dotted one
    # (NixlConnector's `except (msgspec.DecodeError, msgspec.ValidationError)`): the plain name is still mutated
    source = "try:\n    x()\nexcept (a.B, C) as e:\n    pass\n"
    made = [c for c in candidates(source, "m.py") if c.operator == "core/ExceptionReplacer"]
    assert [c.edit.apply(source).splitlines()[2] for c in made] == ["except (a.B, CosmicRayTestingException) as e:"]
