"""A pytest plugin for the smoke run: one case per check and connector (``-p kvconform.conformance.smoke.first_cases``).

The first collected case of each test function for each connector is kept: the
suite's own first value of every axis (dtype, layout, scenario, block size, ...),
so the run stays bounded whatever the axes hold, and no test id is parsed here.
"""

from __future__ import annotations

import pytest

from kvconform.reports.identity import connector_of


def _key(item: pytest.Item) -> tuple[str, str]:
    connector = connector_of(item)
    return item.originalname if hasattr(item, "originalname") else item.name, getattr(connector, "name", "")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: set[tuple[str, str]] = set()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        key = _key(item)
        (dropped if key in seen else kept).append(item)
        seen.add(key)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
