"""Where a line sits: the function reports name, the function a swap replaces, the statement head coverage reads."""

from __future__ import annotations

from kvconform.conformance.mutation.places import SourceIndex
from kvconform.reports.model import MODULE_LEVEL

SOURCE = '''\
import functools

LIMIT = 3


class Outer:
    size = LIMIT + 1

    @functools.cache
    def method(self, x,
               y=2):
        def inner(z):
            return (z +
                    1)
        if (x >
                y):
            return inner(x)
        return [v * 2 for v in range(x)]
'''


def test_a_line_in_a_nested_function_is_named_by_it_and_swapped_by_the_outermost() -> None:
    place = SourceIndex(SOURCE).place(14)
    assert (place.function, place.swap, place.lines) == ("Outer.method.inner", "Outer.method", range(13, 15))


def test_a_compound_statements_head_stops_before_its_body() -> None:
    place = SourceIndex(SOURCE).place(16)
    assert (place.function, place.swap, place.lines) == ("Outer.method", "Outer.method", range(15, 17))
    assert SourceIndex(SOURCE).place(18).lines == range(18, 19)


def test_def_lines_and_class_level_run_at_import_so_nothing_swaps_them() -> None:
    index = SourceIndex(SOURCE)
    decorator, default, attribute, top = index.place(9), index.place(11), index.place(7), index.place(3)
    assert (decorator.function, decorator.swap) == ("Outer.method", None)
    assert (default.function, default.swap) == ("Outer.method", None)
    assert (attribute.function, attribute.swap) == (MODULE_LEVEL, None)
    assert (top.function, top.swap, top.lines) == (MODULE_LEVEL, None, range(3, 4))
